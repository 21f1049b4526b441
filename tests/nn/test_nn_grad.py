"""rtamt.nn gradients: gradcheck of every differentiable stage (input, incoming state,
learnable time constants; limiter active and inactive), and gradients across blocks with
carried state equal to one call."""
import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

import rtamt.nn as rn
from rtamt.engine.contract import RtamtInputError

FS = 8000
FC = (500.0, 1000.0, 3000.0)


def _x(shape, seed=0, scale=1.0, positive=False):
    a = np.random.default_rng(seed).standard_normal(shape) * scale
    return torch.from_numpy(np.abs(a) if positive else a)


def _check(layer, x, warm=None, eps=1e-6, atol=1e-6):
    """gradcheck of ``layer`` w.r.t. the block input and every state entry (started from
    the state after ``warm``, so that it is not trivially zero)."""
    _, st = layer(x if warm is None else warm)
    keys = [k for k in st if k != rn.DESIGN_KEY]
    tag = st[rn.DESIGN_KEY]

    def f(xb, *vals):
        y, new = layer(xb, dict(zip(keys, vals), **{rn.DESIGN_KEY: tag}))
        return (y,) + tuple(new[k] for k in keys)

    inputs = [x.clone().requires_grad_(True)] + [st[k].clone().requires_grad_(True)
                                                 for k in keys]
    assert gradcheck(f, inputs, eps=eps, atol=atol, rtol=1e-4)


def test_gammatone_gradcheck():
    """The gammatone's section memories grow to ~1e3 (the gain is applied at the output):
    a linear map, so a larger finite-difference step loses no accuracy and keeps the
    rounding of those large values out of the numerical Jacobian."""
    _check(rn.Gammatone(FS, fc=FC[:2]), _x((2, 30), scale=0.3), warm=_x((2, 20), 1),
           eps=1e-3)


@pytest.mark.parametrize("preset", ["dau1996", "breebaart2001"])
def test_ihc_gradcheck(preset):
    _check(rn.IHCEnvelope(FS, 2, preset=preset), _x((2, 2, 30)), warm=_x((2, 2, 20), 1))


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
    warm = _x((2, 2, n_warm), 1, scale=warm_level, positive=True)
    x = _x((2, 2, 30), 2, scale=level, positive=True)
    assert _limited(warm, x) is active
    _check(rn.AdaptLoop(FS, 2), x, warm=warm)


def test_adaptloop_learnable_tau_gradcheck():
    """Gradient w.r.t. theta (tau = tau0 exp(theta)) through the coefficient design, with
    the limiter active, checked against finite differences of the forward kernel."""
    layer = rn.AdaptLoop(FS, 2, learnable=True)
    x = _x((2, 2, 40), 3, scale=2.0, positive=True)
    with torch.no_grad():
        layer.theta["adaptloop"].copy_(torch.tensor([0.1, -0.2, 0.0, 0.3, -0.1]))

    def f(theta):
        y, st = torch.func.functional_call(layer, {"theta.adaptloop": theta}, (x,))
        return y, st["adaptloop.s"]

    theta = layer.theta["adaptloop"].detach().clone().requires_grad_(True)
    assert gradcheck(f, (theta,), eps=1e-6, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("preset", ["amt0910", "jepsen2008"])
def test_modfb_gradcheck(preset):
    """The efilt bank: low-pass, real-part and envelope filters (amt0910 reaches
    envelope filters at fc = 3 kHz), with the 150 Hz pre-filter in jepsen2008."""
    layer = rn.ModFilterbank(FS, fc=FC, preset=preset)
    c = layer.parts[0].coeffs
    assert 0 < c.bp_nreal < c.bp_channel.size          # both kinds of filter present
    _check(layer, _x((1, 3, 25)), warm=_x((1, 3, 20), 1))


@pytest.mark.parametrize("preset", ["amt0910", "jepsen2008"])
def test_modfb_butterworth_gradcheck(preset):
    """The frequency-shifted Butterworth bank: real-part and envelope biquads, with and
    without the pre-filter; input and every state entry.  The envelopes ``|o|`` pass
    close to 0 in this short white-noise block, where they bend sharply: a smaller
    finite-difference step keeps the numerical Jacobian's truncation error below the
    tolerance."""
    layer = rn.ModFilterbank(FS, fc=FC, preset=preset, filter_type="butterworth")
    c = layer.parts[0].coeffs
    assert 0 < c.bp_nreal < c.bp_channel.size
    _check(layer, _x((1, 3, 25)), warm=_x((1, 3, 20), 1), eps=1e-7)


def test_dau1997_gradcheck():
    """The whole Dau1997 chain (input and every stage's state)."""
    layer = rn.Dau1997(FS, fc=(1000.0, 2000.0))
    _check(layer, _x((1, 20), scale=0.3), warm=_x((1, 40), 1, scale=0.3))


def _loss(y, w):
    return (y * w).sum()


def test_osses2021_gradcheck():
    """Osses2021 end to end (ear FIRs, gammatone, 5 IHC low-passes, limiter 5, jepsen2008
    bank with its pre-filter), w.r.t. the input (gradcheck's fast mode: random
    projections of the Jacobian, one backward pass instead of one per output)."""
    layer = rn.Osses2021(FS, fc=(1000.0, 2000.0))
    _, st = layer(_x((1, 300), 1, scale=0.3))
    assert gradcheck(lambda xb: layer(xb, st)[0], (_x((1, 12), scale=0.3).requires_grad_(),),
                     eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True)


@pytest.mark.parametrize("model,learned", [
    (rn.Dau1997, {"gammatone", "adaptloop", "modfb"}),
    (rn.Osses2021, {"gammatone", "adaptloop", "modfb"}),
    (rn.King2019, {"gammatone", "compression", "modfb"})])
def test_gradient_over_blocks_equals_one_call(model, learned):
    """Two blocks with carried (not detached) state give the gradient of one call on the
    concatenated input, w.r.t. the input, the first block's state and every learnable
    parameter (gammatone centre frequencies and bandwidth, adaptation time constants,
    modulation centre frequencies and Q (efilt and King2019 banks), compression knee and
    exponent; <= 1e-10 relative), across a 20 dB onset; the second block starts past a
    recomputation checkpoint (rtamt.engine.grad.SEGMENT).  King2019 runs through its compression,
    adaptation high-pass and modulation bank (with the 150 Hz pre-filter)."""
    kw = {"lp150": True} if model is rn.King2019 else {}
    layer = model(FS, fc=(1000.0, 2000.0), learnable=True, **kw)
    assert set(layer.theta) == learned
    T, cut = 1300, 600
    x = _x((2, T), 4, scale=0.5)
    with torch.no_grad():
        _, s0 = layer(_x((2, 100), 5, scale=0.05))
    w = _x((2, layer.parts[-1].n_out, T), 6)

    def grads(blocks):
        xs = x.clone().requires_grad_(True)
        st = {k: (v.clone().requires_grad_(True) if v.is_floating_point() else v)
              for k, v in s0.items()}
        layer.zero_grad(set_to_none=True)
        loss, s, a = 0.0, st, 0
        for b in blocks:
            y, s = layer(xs[:, a:b], s)
            loss = loss + _loss(y, w[..., a:b])
            a = b
        loss.backward()
        return [xs.grad] + [p.grad.clone() for _, p in sorted(layer.theta.items())] + [
            st[k].grad for k in sorted(st) if st[k].requires_grad]

    one, two = grads([T]), grads([cut, T])
    for g1, g2 in zip(one, two):
        assert torch.linalg.norm(g1 - g2) <= 1e-10 * torch.linalg.norm(g1)
    assert all(torch.linalg.norm(g) > 0 for g in one[:len(learned) + 2])


def test_detach_state_truncates():
    """detach_state stops the gradient at the block boundary: the first block's input
    gets no gradient from the second block's loss."""
    layer = rn.Dau1997(FS, fc=(1000.0,))
    x = _x((1, 200), 7, scale=0.3).requires_grad_(True)
    _, s = layer(x[:, :100])
    y, _ = layer(x[:, 100:], rn.detach_state(s))
    y.sum().backward()
    assert torch.count_nonzero(x.grad[:, :100]) == 0
    assert torch.count_nonzero(x.grad[:, 100:]) > 0
    x.grad = None
    _, s = layer(x[:, :100])
    y, _ = layer(x[:, 100:], s)
    y.sum().backward()
    assert torch.count_nonzero(x.grad[:, :100]) > 0


def test_forward_only_stages_refuse_gradients():
    x = _x((1, 100), scale=0.1).requires_grad_(True)
    kw = dict(n_channels=2, fhigh=4000.0)
    with pytest.raises(RtamtInputError, match="forward-only"):
        rn.Paulick2024(16000, **kw)(x)
    with torch.no_grad():                              # forward-only works without grad
        y, _ = rn.Paulick2024(16000, **kw)(x)
    assert y.grad_fn is None


@pytest.mark.parametrize("lp150", [False, True])
def test_king_modfb_gradcheck(lp150):
    """King2019's modulation bank (5 band-passes on 3 channels), with and without its
    150 Hz pre-filter: input and every state entry."""
    layer = rn.KingModFilterbank(FS, fc=FC, lp150=lp150)
    assert layer.parts[0].coeffs.mfc.size == 5
    _check(layer, _x((1, 3, 25)), warm=_x((1, 3, 20), 1))


def test_king_bank_adjoint_is_reversed_filtering():
    """The derivation of king_bank_adjoint: with no gradient on the outgoing state,
    the input gradient is the output gradient filtered backwards in time by the same
    band-passes (scipy.signal.sosfilt on the time-reversed gradient), summed over the
    modulation filters of each channel; a gradient on the outgoing state of one filter
    gives the incoming state that same filter's state gradient back through T samples of
    its homogeneous recursion."""
    from scipy import signal

    from rtamt.modulation import king2019_grad as A

    c = rn.KingModFilterbank(FS, fc=FC).parts[0].coeffs
    M, C, T = c.mfc.size, len(FC), 200
    gy = _x((2, T, M * C), 3).numpy()
    gx, mu = np.zeros((2, T, C)), np.zeros((M, 2, 1, 2, C))
    unused = (np.zeros((2, T, C)), np.zeros_like(mu), np.zeros((M, 5)))
    A.king_bank_adjoint(c.sos, gy, mu, gx, False, *unused)
    ref = sum(signal.sosfilt(c.sos[m], gy[:, ::-1, m * C:(m + 1) * C], axis=1)[:, ::-1]
              for m in range(M))
    np.testing.assert_allclose(gx, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    # zero input: (z0, z1)[T-1] = P^T (z0, z1)[-1] (P to the power T), so the gradient of
    # the incoming state is (P^T)' mu ((.)' the transpose)
    m, b, ch = 2, 1, 1
    mu = np.zeros((M, 2, 1, 2, C))
    mu[m, b, 0, :, ch] = (0.7, -0.3)
    A.king_bank_adjoint(c.sos, np.zeros_like(gy), mu, np.zeros((2, T, C)), False, *unused)
    a1, a2 = c.sos[m, 0, 4], c.sos[m, 0, 5]
    P = np.array([[-a1, 1.0], [-a2, 0.0]])              # (z0, z1)[t] = P (z0, z1)[t-1]
    want = np.linalg.matrix_power(P, T).T @ np.array([0.7, -0.3])
    np.testing.assert_allclose(mu[m, b, 0, :, ch], want, rtol=1e-10, atol=1e-14)
    mu[m, b, 0, :, ch] = 0.0
    assert not mu.any()


def test_king_bank_coefficient_gradients_over_segments():
    """king_bank_adjoint with want: the gradients of b0, b1, b2, a1, a2 of every
    band-pass over 1100 samples (three recomputation segments, from a non-zero incoming
    state, with an outgoing-state gradient) equal central differences (five-point
    stencil) of the same loss computed with scipy.signal.sosfilt; the input and state
    gradients are bit-identical to those of the pass without coefficient gradients."""
    from scipy import signal

    from rtamt.modulation import king2019_grad as A

    c = rn.KingModFilterbank(FS, fc=FC).parts[0].coeffs
    M, C, B, T = c.mfc.size, len(FC), 2, 1100
    assert T > 2 * A.SEGMENT
    u, gy = _x((B, T, C), 1).numpy(), _x((B, T, M * C), 2).numpy()
    st, mu0 = 0.3 * _x((M, B, 1, 2, C), 3).numpy(), _x((M, B, 1, 2, C), 4).numpy()

    def loss(sos):
        total = 0.0
        for m in range(M):
            y, zf = signal.sosfilt(sos[m], u, axis=1, zi=st[m].transpose(1, 0, 2, 3))
            total += np.sum(gy[:, :, m * C:(m + 1) * C] * y)
            total += np.sum(mu0[m] * zf.transpose(1, 0, 2, 3))
        return total

    out = {}
    for want in (False, True):
        gx, mu, gc = np.zeros((B, T, C)), mu0.copy(), np.zeros((M, 5))
        A.king_bank_adjoint(c.sos, gy, mu, gx, want, u, st, gc)
        out[want] = gx, mu, gc
    assert np.array_equal(out[False][0], out[True][0])
    assert np.array_equal(out[False][1], out[True][1])
    assert not out[False][2].any()
    fd, h = np.zeros((M, 5)), 1e-7
    for m in range(M):
        for i, col in enumerate((0, 1, 2, 4, 5)):
            val = []
            for step in (2, 1, -1, -2):
                sos = c.sos.copy()
                sos[m, 0, col] += step * h
                val.append(loss(sos))
            fd[m, i] = (-val[0] + 8 * val[1] - 8 * val[2] + val[3]) / (12 * h)  # O(h^4)
    np.testing.assert_allclose(out[True][2], fd, rtol=5e-6, atol=0)


def test_king2019_gradcheck():
    """King2019 end to end (gammatone, broken-stick compression, IHC, adaptation high-pass,
    modulation bank with its pre-filter) w.r.t. the input, from a warmed-up state
    (gradcheck's fast mode)."""
    layer = rn.King2019(FS, fc=(1000.0, 2000.0), lp150=True)
    _, st = layer(_x((1, 300), 1, scale=0.3))
    assert gradcheck(lambda xb: layer(xb, st)[0], (_x((1, 12), scale=0.3).requires_grad_(),),
                     eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True)


def test_highpass_and_compression_gradcheck():
    """King2019's adaptation high-pass and both compressions (above and below the knee;
    no input at 0, where the power law has no derivative)."""
    _check(rn.AdaptHighpass(FS, 2), _x((2, 2, 30)), warm=_x((2, 2, 20), 1))
    x = _x((2, 2, 30), 2, scale=0.01)
    x = x + 0.002 * torch.sign(x)
    layer = rn.BrokenStick(channels=2, knee_db=60.0)          # knee at 0.01
    assert (x.abs() > 0.01).any() and (x.abs() < 0.01).any()
    _check(layer, x)
    _check(rn.PowerCompression(channels=2, knee_db=60.0), x)


@pytest.mark.parametrize("kind", ["headphone", "middleear"])
def test_ear_fir_gradcheck(kind):
    """The ear FIRs: input and the incoming history."""
    from rtamt.ear import HeadphoneFilter, HeadphoneParams, MiddleEarFilter, MiddleEarParams

    stage = (HeadphoneFilter(HeadphoneParams(fs=FS)) if kind == "headphone" else
             MiddleEarFilter(MiddleEarParams(fs=FS, preset="jepsen2008")))
    layer = rn.StageLayer(stage)
    assert layer.parts[0].grad is not None
    _check(layer, _x((1, 20)), warm=_x((1, 400), 1))


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
    from rtamt.adaptation import adaptloop as K
    from rtamt.adaptation import adaptloop_grad as A
    from rtamt.adaptation.adaptloop import AdaptLoop as Stage
    from rtamt.adaptation.adaptloop import AdaptLoopParams

    B, T, C = 2, 60, 33
    c = Stage(AdaptLoopParams(fs=FS))._coeffs_for(C)
    K_ = c.a.size
    s0 = torch.from_numpy(np.repeat(c.lanes[None, 3 + 3 * K_:, :C], B, 0)) * (
        1.0 + 0.5 * _x((B, K_, C), 2).abs())
    x = _x((B, T, C), 3, scale=2.0, positive=True)
    gy, mu = _x((B, T, C), 4), _x((B, K_, C), 5)
    a = torch.from_numpy(c.a).requires_grad_(True)
    xs, ss = x.clone().requires_grad_(True), s0.clone().requires_grad_(True)
    c_t = type("C", (), dict(a=a, b=1.0 - a, lanes=c.lanes, limit_on=c.limit_on))
    y, s_out = _adaptloop_torch(c_t, ss, xs)
    ((y * gy).sum() + (s_out * mu).sum()).backward()
    gx, m, ga = np.zeros((B, T, C)), mu.numpy().copy(), np.zeros(K_)
    A.adaptloop_adjoint(c.a, c.b, c.lanes, True, s0.numpy(), x.numpy(), gy.numpy(), m, gx, ga)
    y_k = np.empty((B, T, C))                          # the reference is the kernel's forward
    K.adaptloop(c.a, c.b, c.lanes, True, s0.numpy().copy(), x.numpy(), y_k)
    np.testing.assert_allclose(y.detach().numpy(), y_k, rtol=1e-12, atol=0)
    c_t.limit_on = False                               # and the limiter acts in this block
    assert not torch.allclose(_adaptloop_torch(c_t, s0, x)[0], y.detach())
    for got, want in ((gx, xs.grad), (m, ss.grad), (ga, a.grad)):
        assert np.linalg.norm(got - want.numpy()) <= 1e-12 * np.linalg.norm(want.numpy())
