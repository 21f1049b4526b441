"""rtamt.nn learnable parameters: gammatone centre frequencies and bandwidth factor, efilt
modulation centre frequencies and Q, compression knee and exponent.  gradcheck in
float64 w.r.t. the parameters (through the coefficient design) and the input; the design
itself at theta = 0, bit for bit; stable designs far from it."""
import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

import rtamt.nn as rn

FS = 8000


def _x(shape, seed=0, scale=1.0):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape) * scale)


def _check_params(layer, name, theta0, x, warm=None, eps=1e-6, atol=1e-6):
    """gradcheck of ``layer``'s output and outgoing state w.r.t. ``theta[name]`` (set to
    ``theta0``) and the block input, from the state after ``warm``."""
    st = None
    if warm is not None:
        with torch.no_grad():
            _, st = layer(warm)
    keys = [k for k in (st or layer.initial_state(x.shape[0], dtype=x.dtype))
            if k != rn.DESIGN_KEY]

    def f(theta, xb):
        y, new = torch.func.functional_call(layer, {f"theta.{name}": theta}, (xb, st))
        return (y,) + tuple(new[k] for k in keys)

    theta = torch.as_tensor(theta0, dtype=torch.float64).clone().requires_grad_(True)
    assert gradcheck(f, (theta, x.clone().requires_grad_(True)), eps=eps, atol=atol,
                     rtol=1e-4)


def test_gammatone_fc_and_bandwidth_gradcheck():
    """Log centre frequencies and log bandwidth factor, away from the design."""
    layer = rn.Gammatone(FS, fc=(700.0, 1500.0), learnable=True)
    assert layer.theta["gammatone"].shape == (3,)
    _check_params(layer, "gammatone", [0.05, -0.1, 0.2], _x((2, 40), scale=0.3),
                  warm=_x((2, 30), 1, scale=0.3), eps=1e-5)


@pytest.mark.parametrize("preset", ["amt0910", "jepsen2008"])
def test_modfb_mfc_and_q_gradcheck(preset):
    """Log modulation centre frequencies (fixed-bandwidth filters below 10 Hz, real-part
    and envelope filters) and log Q; jepsen2008 with its 150 Hz pre-filter."""
    layer = rn.ModFilterbank(FS, fc=(200.0, 1200.0), preset=preset, learnable=True)
    c = layer.parts[0].coeffs
    mfc0 = c.filter_mfc[c.fc.size:]
    assert (mfc0 < 10).any() and (mfc0 > 10).any() and 0 < c.bp_nreal < mfc0.size
    th = 0.1 * np.random.default_rng(5).standard_normal(mfc0.size + 1)
    _check_params(layer, "modfb", th, _x((1, 2, 25)), warm=_x((1, 2, 30), 1))


@pytest.mark.parametrize("layer_fn", [rn.BrokenStick, rn.PowerCompression])
@pytest.mark.parametrize("exponent", [0.3, (0.3, 0.5)])
def test_compression_knee_and_exponent_gradcheck(layer_fn, exponent):
    """Log knee and log exponent(s) (one shared or one per channel), with samples above
    and below the knee (none at 0, where the power law has no derivative)."""
    layer = layer_fn(channels=2, knee_db=60.0, exponent=exponent, learnable=True)
    name = layer.parts[0].name
    x = _x((2, 2, 30), 2, scale=0.01)
    x = x + 0.002 * torch.sign(x)
    assert (x.abs() > 0.011).any() and (x.abs() < 0.009).any()
    th = [0.1] + [-0.2] * np.atleast_1d(exponent).size
    _check_params(layer, name, th, x)


def _layers_equal(make, x):
    """A learnable layer at theta = 0 gives the design's output bit for bit (float64 and
    float32) and its parameters receive a gradient."""
    fixed, learn = make(False), make(True)
    assert len(list(learn.parameters())) > 0
    for dt in (torch.float64, torch.float32):
        with torch.no_grad():
            y0, _ = fixed(x.to(dt))
            y1, _ = learn(x.to(dt))
        assert torch.equal(y0, y1)
        y2, _ = learn(x.to(dt))                   # through the autograd Function
        assert torch.equal(y0, y2.detach())
    y, _ = learn(x)
    y.square().sum().backward()
    for name, p in learn.theta.items():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert torch.count_nonzero(p.grad) > 0, name


@pytest.mark.parametrize("which", ["dau1997", "gammatone", "modfb", "brokenstick",
                                   "power"])
def test_theta_zero_is_the_design(which):
    makers = {
        "dau1997": (lambda lr: rn.Dau1997(FS, fc=(1000.0, 2000.0), learnable=lr), (1, 300)),
        "gammatone": (lambda lr: rn.Gammatone(FS, fc=(500.0, 900.0), learnable=lr), (2, 200)),
        "modfb": (lambda lr: rn.ModFilterbank(FS, fc=(300.0, 3000.0), learnable=lr),
                  (2, 2, 200)),
        "brokenstick": (lambda lr: rn.BrokenStick(channels=2, knee_db=60.0, learnable=lr),
                        (2, 2, 50)),
        "power": (lambda lr: rn.PowerCompression(channels=2, knee_db=60.0, learnable=lr),
                  (2, 2, 50)),
    }
    make, shape = makers[which]
    _layers_equal(make, _x(shape, 3, scale=0.05 if which == "dau1997" else 0.02))


def test_learned_values_and_stability_far_from_the_design():
    """theta maps to the physical values through exp; designs far from the start (10x
    the gammatone bandwidth factor and centre frequencies moved; modulation filters moved
    and Q / 20) stay stable: after the input stops, the outputs decay to 0."""
    from rtamt.filterbank.gammatone import bandwidth_factor

    layer = rn.Dau1997(FS, fc=(1000.0,), learnable=["gammatone", "modfb"])
    assert set(layer.theta) == {"gammatone", "modfb"}
    nb = layer.theta["modfb"].numel()
    th_gt = torch.tensor([0.3, np.log(10.0)], dtype=torch.float64)
    th_mf = torch.tensor([0.2] * (nb - 1) + [-np.log(20.0)], dtype=torch.float64)
    with torch.no_grad():
        layer.theta["gammatone"].copy_(th_gt)
        layer.theta["modfb"].copy_(th_mf)
    gt, mf = layer.learned("gammatone"), layer.learned("modfb")
    np.testing.assert_allclose(gt["fc"], 1000.0 * np.exp(0.3), rtol=1e-14)
    np.testing.assert_allclose(gt["bandwidth_factor"], 10 * bandwidth_factor(4), rtol=1e-14)
    np.testing.assert_allclose(mf["Q"], 2.0 / 20.0, rtol=1e-14)
    c = layer["modfb"].coeffs
    np.testing.assert_allclose(mf["mfc"], c.filter_mfc[c.fc.size:] * np.exp(0.2), rtol=1e-14)

    gamma = rn.Gammatone(FS, fc=(1000.0,), learnable=True)
    bank = rn.ModFilterbank(FS, fc=(1000.0,), learnable=True)
    x = torch.cat([_x((1, 400), 4), torch.zeros(1, 8000, dtype=torch.float64)], 1)
    with torch.no_grad():
        gamma.theta["gammatone"].copy_(th_gt)
        bank.theta["modfb"].copy_(th_mf)
        for lay, xin in ((gamma, x), (bank, x[:, None])):
            y, _ = lay(xin)
            assert torch.isfinite(y).all()
            assert y[..., -100:].abs().max() < 1e-6 * y.abs().max()
