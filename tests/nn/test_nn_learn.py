"""rtamt.nn learnable parameters: gammatone centre frequencies and bandwidth factor, efilt
and King2019 modulation centre frequencies and Q, compression knee and exponent.  gradcheck in
float64 w.r.t. the parameters (through the coefficient design) and the input; the design
itself at theta = 0, bit for bit; stable designs far from it."""
import numpy as np
import pytest
import torch

import rtamt.nn as rn

from _gradcheck import check_params

FS = 8000


def _x(shape, seed=0, scale=1.0):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape) * scale)


def test_gammatone_fc_and_bandwidth_gradcheck():
    """Log centre frequencies and log bandwidth factor, away from the design."""
    layer = rn.Gammatone(FS, fc=(700.0, 1500.0), learnable=True)
    assert layer.theta["gammatone"].shape == (3,)
    check_params(layer, "gammatone", [0.05, -0.1, 0.2], _x((2, 40), scale=0.3),
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
    check_params(layer, "modfb", th, _x((1, 2, 25)), warm=_x((1, 2, 30), 1))


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
    check_params(layer, name, th, x)


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
                                   "power", "king2019", "kingmodfb"])
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
        "king2019": (lambda lr: rn.King2019(FS, fc=(1000.0, 2000.0), lp150=True,
                                            learnable=lr), (1, 300)),
        "kingmodfb": (lambda lr: rn.KingModFilterbank(FS, fc=(300.0, 3000.0), qfactor=0.7,
                                                      nmod=4, learnable=lr), (2, 2, 200)),
    }
    make, shape = makers[which]
    _layers_equal(make, _x(shape, 3, scale=0.05 if which == "dau1997" else 0.02))


def test_learned_values_and_stability_far_from_the_design():
    """theta maps to the physical values through exp (learned(), and tau() for the
    adaptation loops, the design's when they are not learnable); designs far from the
    start (10x the gammatone bandwidth factor and centre frequencies moved; modulation
    filters moved and Q / 20) stay stable: after the input stops, the outputs decay to 0."""
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
    tau0 = layer["adaptloop"].coeffs.tau                  # not learnable here: the design
    assert np.array_equal(layer.tau().detach().numpy(), tau0)
    loops = rn.Dau1997(FS, fc=(1000.0,), learnable=["adaptloop"])
    th_al = torch.tensor([0.1, -0.2, 0.0, 0.3, -0.1], dtype=torch.float64)
    with torch.no_grad():
        loops.theta["adaptloop"].copy_(th_al)
    np.testing.assert_allclose(loops.tau().detach().numpy(), tau0 * np.exp(th_al.numpy()),
                               rtol=1e-14)
    np.testing.assert_allclose(loops.learned("adaptloop")["tau"], tau0 * np.exp(th_al.numpy()),
                               rtol=1e-14)

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


# ------------------------------------------------------------ King2019's modulation bank
KFC = (500.0, 1000.0, 3000.0)


def _king(**kw):
    return rn.KingModFilterbank(FS, fc=KFC, learnable=True, **kw)


@pytest.mark.parametrize("lp150", [False, True])
def test_king_modfb_mfc_and_q_gradcheck(lp150):
    """King2019's band-passes (5 filters on 3 channels): every centre frequency and Q,
    away from the design, with and without the fixed 150 Hz pre-filter; the gradients
    of the output and of the outgoing state."""
    layer = _king(lp150=lp150)
    assert layer.theta["modfb"].shape == (6,)
    th = 0.3 * np.random.default_rng(6).standard_normal(6)
    check_params(layer, "modfb", th, _x((1, 3, 25)), warm=_x((1, 3, 30), 1))


@pytest.mark.parametrize("which", [0, 3, 5])
def test_king_modfb_gradcheck_catches_a_wrong_gradient(which, monkeypatch):
    """The gradcheck above fails when one parameter's gradient (a centre frequency or Q)
    is off by 1 %."""
    from torch.autograd.gradcheck import GradcheckError

    from rtamt.modulation.king2019_grad import KingModFilterbankGrad

    right = KingModFilterbankGrad.backward

    def wrong(self, *args):
        gx, gth = right(self, *args)
        if gth is not None:
            gth = gth.copy()
            gth[which] *= 1.01
        return gx, gth

    monkeypatch.setattr(KingModFilterbankGrad, "backward", wrong)
    th = 0.3 * np.random.default_rng(6).standard_normal(6)
    with pytest.raises(GradcheckError):
        check_params(_king(), "modfb", th, _x((1, 3, 25)), warm=_x((1, 3, 30), 1))


@pytest.mark.parametrize("kw", [{}, dict(qfactor=0.7, mfhigh=300.0, lp150=True),
                                dict(qfactor=2 ** 0.5, nmod=7, mflow=1.0)])
def test_king_theta_zero_designs_the_coefficients_bit_for_bit(kw):
    """At theta = 0 the learnable bank designs exactly the coefficients of
    rtamt.modulation.king2019.design (centre frequencies, edges, sections), float64 and
    float32 outputs equal bit for bit (the parametrisation's denominator there,
    (1 - a0) + a0, must round to exactly 1)."""
    from rtamt.nn._autograd import param_np

    fixed, learn = rn.KingModFilterbank(FS, fc=KFC, **kw), _king(**kw)
    part = learn.parts[0]
    c0 = part.coeffs
    c = part.grad.coeffs_for(param_np(learn.theta["modfb"]))
    for k in ("mfc", "edges", "sos", "filter_mfc", "mfc_padded"):
        assert np.array_equal(getattr(c, k), getattr(c0, k)), k
    assert learn.learned("modfb")["Q"] == fixed.parts[0].stage.params.qfactor
    x = _x((2, 3, 100), 2)
    for dt in (torch.float64, torch.float32):
        with torch.no_grad():
            assert torch.equal(fixed(x.to(dt))[0], learn(x.to(dt))[0])


def test_king_closed_form_design_equals_scipy():
    """The torch design (king2019.bandpass_sos: bilinear transform with pre-warped edges,
    in closed form) gives scipy.signal.butter's band-pass sections, from 0.01 Hz to just
    below Nyquist."""
    from scipy import signal

    from rtamt.modulation.king2019 import bandpass_sos

    rng = np.random.default_rng(1)
    e = np.sort(FS / 2 * 10 ** rng.uniform(-5.5, -1e-4, (200, 2)), axis=1)
    e = e[e[:, 1] > 1.001 * e[:, 0]]
    ref = np.stack([signal.butter(1, r, "bandpass", fs=FS, output="sos")[0] for r in e])
    got = bandpass_sos(torch.from_numpy(e), FS, torch).numpy()
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got[:, 0], ref[:, 0], rtol=1e-10)


@pytest.mark.parametrize("th_m,th_q", [(8.0, -3.0), (8.0, 3.0), (-6.0, 3.0), (-6.0, -3.0),
                                       (5.0, -np.log(20.0))])
def test_king_far_from_the_design_stays_valid(th_m, th_q):
    """Centre frequencies moved far up or down, Q x / 20: Q = Q0 exp(th_Q) > 0, centre
    frequencies and both -3 dB edges stay in (0, fs/2) (1 / mfc = exp(-th) / u0 +
    k(Q) / (fs/2)), every pole inside the unit circle; outputs and gradients finite.
    With the large bandwidth of the last case, the output decays to 0 once the input
    stops."""
    layer = _king()
    c0 = layer.parts[0].coeffs
    M = c0.mfc.size
    th = torch.tensor([th_m + 0.1 * i for i in range(M)] + [th_q], dtype=torch.float64)
    with torch.no_grad():
        layer.theta["modfb"].copy_(th)
    val = layer.learned("modfb")
    Q, mfc = val["Q"], val["mfc"]
    assert Q == pytest.approx(np.exp(th_q))
    k = (np.sqrt(4 + 1 / Q ** 2) + 1 / Q) / 2                 # f_hi = k mfc
    k0 = (np.sqrt(5) + 1) / 2
    inv_u0 = 1 / c0.mfc - k0 / (FS / 2)
    np.testing.assert_allclose(1 / mfc, np.exp(-th[:M].numpy()) * inv_u0 + k / (FS / 2),
                               rtol=1e-12)
    c = layer.parts[0].grad.coeffs_for(th.numpy())
    assert (c.edges > 0).all() and (c.edges < FS / 2).all()
    assert (c.edges[:, 0] < c.edges[:, 1]).all()
    poles = np.concatenate([np.roots(s[0, 3:]) for s in c.sos])
    assert (np.abs(poles) < 1).all()
    x = torch.cat([_x((1, 3, 400), 4), torch.zeros(1, 3, 4000, dtype=torch.float64)], 2)
    y, _ = layer(x)
    assert torch.isfinite(y).all()
    y.square().mean().backward()
    assert torch.isfinite(layer.theta["modfb"].grad).all()
    if th_m == 5.0:
        assert y[..., -100:].abs().max() < 1e-6 * y.abs().max()
