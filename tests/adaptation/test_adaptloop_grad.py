"""Gradients of the adaptation loops through rtamt.nn: gradcheck in float64 with the
overshoot limiter active and inactive (proven against limit=0), of the learnable time
constants, and the lane-parallel adjoint against torch autograd through the loops written
sample by sample."""
import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

import rtamt.nn as rn

from _gradcheck import check_layer, noise

FS = 8000


def _limited(warm, x):
    """Whether the overshoot limiter acts on block ``x`` after ``warm``: the output differs
    from that of the same loops without the limiter, from the same state."""
    on, off = rn.AdaptLoop(FS, 2), rn.AdaptLoop(FS, 2, limit=0.0)
    _, st = on(warm)
    y_on, _ = on(x, st)
    tag = off.initial_state(x.shape[0], dtype=x.dtype)[rn.DESIGN_KEY]
    y_off, _ = off(x, dict(st, **{rn.DESIGN_KEY: tag}))
    return not torch.equal(y_on, y_off)


@pytest.mark.parametrize("warm_level,n_warm,level,active", [(1.0, 8000, 0.01, False),
                                                           (0.01, 20, 3.0, True)])
def test_adaptloop_gradcheck_limiter(warm_level, n_warm, level, active):
    """A quiet block after 1 s of a loud one (limiter inactive: every loop adapted above
    its input) and an onset far above the adapted state (limiter active)."""
    warm = noise((2, 2, n_warm), 1, scale=warm_level, positive=True)
    x = noise((2, 2, 30), 2, scale=level, positive=True)
    assert _limited(warm, x) is active
    check_layer(rn.AdaptLoop(FS, 2), x, warm=warm)


def test_adaptloop_learnable_tau_gradcheck():
    """Gradient w.r.t. theta (tau = tau0 exp(theta)) through the coefficient design, with
    the limiter active, checked against finite differences of the forward kernel."""
    layer = rn.AdaptLoop(FS, 2, learnable=True)
    x = noise((2, 2, 40), 3, scale=2.0, positive=True)
    with torch.no_grad():
        layer.theta["adaptloop"].copy_(torch.tensor([0.1, -0.2, 0.0, 0.3, -0.1]))

    def f(theta):
        y, st = torch.func.functional_call(layer, {"theta.adaptloop": theta}, (x,))
        return y, st["adaptloop.s"]

    theta = layer.theta["adaptloop"].detach().clone().requires_grad_(True)
    assert gradcheck(f, (theta,), eps=1e-6, atol=1e-6, rtol=1e-4)


def _adaptloop_torch(c, s, x):
    """The adaptation loops written in torch, sample by sample (the reference for
    autograd): ``s`` (B, K, C) dividers, ``x`` (B, T, C); the arithmetic of
    rtamt.adaptation.adaptloop.adaptloop with torch's exponential."""
    K_, C = (c.lanes.shape[0] - 3) // 4, x.shape[2]
    ln = torch.from_numpy(c.lanes[:, :C])
    ml, corr, mult = ln[0], ln[1], ln[2]
    fa, ef, of = ln[3:3 + K_], ln[3 + K_:3 + 2 * K_], ln[3 + 2 * K_:3 + 3 * K_]
    s, ys = list(s.unbind(1)), []
    for t in range(x.shape[1]):
        v = torch.maximum(x[:, t], ml)
        for k in range(K_):
            q = v / s[k]
            if c.limit_on:
                q = torch.where(q > 1.0, fa[k] / (1.0 + torch.exp(ef[k] * (q - 1.0))) - of[k], q)
            v = q
            s[k] = c.a[k] * s[k] + c.b[k] * v
        ys.append((v - corr) * mult)
    return torch.stack(ys, 1), torch.stack(s, 1)


def test_adaptloop_adjoint_lanes_match_autograd():
    """The lane-parallel adaptation-loop adjoint (33 channels: one full vector block of
    lanes and a padded one; 2 streams; limiter acting at the onset) against torch
    autograd through the same loops written sample by sample: the gradients of the input,
    the incoming dividers and the loop coefficients a_k (b_k = 1 - a_k) within 1e-12
    relative."""
    from rtamt.adaptation import adaptloop, adaptloop_grad
    from rtamt.adaptation.adaptloop import AdaptLoop, AdaptLoopParams

    B, T, C = 2, 60, 33
    c = AdaptLoop(AdaptLoopParams(fs=FS))._coeffs_for(C)
    K_ = c.a.size
    s0 = torch.from_numpy(np.repeat(c.lanes[None, 3 + 3 * K_:, :C], B, 0)) * (
        1.0 + 0.5 * noise((B, K_, C), 2).abs())
    x = noise((B, T, C), 3, scale=2.0, positive=True)
    gy, mu = noise((B, T, C), 4), noise((B, K_, C), 5)
    a = torch.from_numpy(c.a).requires_grad_(True)
    xs, ss = x.clone().requires_grad_(True), s0.clone().requires_grad_(True)
    c_t = type("C", (), dict(a=a, b=1.0 - a, lanes=c.lanes, limit_on=c.limit_on))
    y, s_out = _adaptloop_torch(c_t, ss, xs)
    ((y * gy).sum() + (s_out * mu).sum()).backward()
    gx, m, ga = np.zeros((B, T, C)), mu.numpy().copy(), np.zeros(K_)
    adaptloop_grad.adaptloop_adjoint(c.a, c.b, c.lanes, True, s0.numpy(), x.numpy(), gy.numpy(),
                                     m, gx, ga)
    y_k = np.empty((B, T, C))                          # the reference is the kernel's forward
    adaptloop.adaptloop(c.a, c.b, c.lanes, True, s0.numpy().copy(), x.numpy(), y_k)
    np.testing.assert_allclose(y.detach().numpy(), y_k, rtol=1e-12, atol=0)
    c_t.limit_on = False                               # and the limiter acts in this block
    assert not torch.allclose(_adaptloop_torch(c_t, s0, x)[0], y.detach())
    for got, want in ((gx, xs.grad), (m, ss.grad), (ga, a.grad)):
        assert np.linalg.norm(got - want.numpy()) <= 1e-12 * np.linalg.norm(want.numpy())
