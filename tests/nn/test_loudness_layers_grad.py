"""Gradients through the loudness models' layers (issue 42 item 2): rtamt.nn.Glasberg2002
and rtamt.nn.Moore2016 (both configurations, both sets of time constants) w.r.t. the
input, the carried state and the learnable parameters; forward outputs unchanged; any
block partition gives the gradient of one call."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

import rtamt.loudness.excitation as excitation_mod
import rtamt.nn as rn
from rtamt.engine.rowwise import product
from rtamt.loudness.excitation_grad import lower_skirt_f64

from _gradcheck import noise

FS = 32000
#: the layers: (layer key, keywords, rows of a stream)
CASES = {
    "glasberg2002": ("glasberg2002", {}, ()),
    "moore2016": ("moore2016", {}, (2,)),
    "moore2016-2016": ("moore2016", {"constants": "2016"}, (2,)),
    "moore2016-tvl2018": ("moore2016", {"config": "tvl2018"}, (2,)),
}


def _layer(case, **kw):
    key, kws, _ = CASES[case]
    return rn.LAYERS[key](FS, output="all", **kws, **kw)


def _x(case, T, seed, scale=0.05, batch=1):
    return noise((batch,) + CASES[case][2] + (T,), seed, scale)


def _frames(y):
    return {k: v for k, v in y.items() if k != "frame_time"}


@pytest.fixture
def float64_skirts(monkeypatch):
    """The excitation's lower skirts in float64 (:func:`lower_skirt_f64`, the function whose
    adjoint the rule is): the kernel's float32 rounding (relative 2e-6) swamps the finite
    differences of gradcheck."""
    def excitation64(c, P, kern=None):
        kern = excitation_mod.Excitation.kern if kern is None else kern
        P = kern.contiguous(P)
        lvl = product(kern, P, c.sym_t, c.sym_rng)
        E = product(kern, P, c.up_t, c.up_rng)
        lower_skirt_f64(P, lvl, c.c_slope, c.a, c.b, c.i0, c.seg, c.cnt, E)
        return E

    monkeypatch.setattr(excitation_mod, "excitation", excitation64)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_with_gradients_is_bit_exact(case, dtype):
    """With the input and every learnable parameter requiring a gradient (theta = 0),
    every output and state entry equals the forward-only layer's bit for bit (a batch of
    two streams, float64 and float32)."""
    layer = _layer(case, learnable=True)
    x = _x(case, 2300, 0, batch=2).to(dtype)
    with torch.no_grad():
        y0, s0 = _layer(case)(x)
    y1, s1 = layer(x.clone().requires_grad_(True))
    assert y1["stl"].grad_fn is not None
    for k in y0:
        assert torch.equal(y0[k], y1[k].detach()), k
    for k in s0:
        assert torch.equal(s0[k], s1[k].detach()), k


@pytest.mark.parametrize("case", sorted(CASES))
def test_layer_gradcheck(case, float64_skirts):
    """gradcheck (float64, fast mode) of every output w.r.t. the input, each learnable
    parameter (theta away from 0) and every float state entry after the spectrum (the
    spectrum's history and rings, of which the rings are a function of the history, are
    checked by the block partition test below), from a warm state."""
    layer = _layer(case, learnable=True)
    _, st = layer(_x(case, 4200, 1))
    keys = [k for k in st if k != rn.DESIGN_KEY and st[k].is_floating_point()
            and not k.startswith("spectrum.")]
    fixed = {k: v for k, v in st.items() if k not in keys}
    names = list(layer.theta)

    def f(xb, *vals):
        th, vals = vals[:len(names)], vals[len(names):]
        y, new = torch.func.functional_call(
            layer, {f"theta.{n}": t for n, t in zip(names, th)},
            (xb, dict(zip(keys, vals), **fixed)))
        return tuple(_frames(y).values()) + tuple(new[k] for k in keys)

    x = _x(case, 70, 2).requires_grad_(True)
    th = [torch.full((layer.theta[n].numel(),), 0.05, dtype=torch.float64,
                     requires_grad=True) for n in names]
    vals = [st[k].detach().clone().requires_grad_(True) for k in keys]
    assert gradcheck(f, (x, *th, *vals), eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_blocks_with_carried_state_give_the_gradient_of_one_call(case):
    """Blocks of 10 (no loudness frame completed: a frame is due every 32 samples), 900
    and 1090 samples, the state carried (two streams), give the gradient of one call
    w.r.t. the input,
    every learnable parameter and the incoming state (incl. the spectrum's history)
    within 1e-10 relative."""
    layer = _layer(case, learnable=True)
    with torch.no_grad():
        for t in layer.theta.values():
            t.add_(0.03)
    _, st0 = layer(_x(case, 2500, 3, batch=2))
    x = _x(case, 2000, 4, batch=2)
    w = None

    def grads(parts):
        nonlocal w
        layer.zero_grad()
        xr = x.clone().requires_grad_(True)
        st = {k: (v.detach().clone().requires_grad_(True) if v.is_floating_point() else v)
              for k, v in st0.items()}
        s, ys, t0 = st, [], 0
        for n in parts:
            y, s = layer(xr[..., t0:t0 + n], s)
            ys.append(_frames(y))
            t0 += n
        if parts == (10, 900, 1090):
            assert ys[0]["stl"].shape[-1] == 0
        out = {k: torch.cat([y[k] for y in ys], dim=-1) for k in ys[0]}
        if w is None:
            w = {k: noise(v.shape, 5) for k, v in out.items()}
        sum((out[k] * w[k]).sum() for k in out).backward()
        g = {"x": xr.grad}
        g.update({f"theta.{n}": p.grad.clone() for n, p in layer.theta.items()})
        g.update({k: v.grad for k, v in st.items() if v.is_floating_point()
                  and v.grad is not None})
        return g

    one = grads((2000,))
    parts = grads((10, 900, 1090))
    assert set(one) == set(parts) and "spectrum.hist" in one
    for k in one:
        scale = float(one[k].abs().max())
        assert scale > 0 or k.startswith("spectrum.ring"), k
        assert float((one[k] - parts[k]).abs().max()) <= 1e-10 * scale, k


@pytest.mark.parametrize("case", sorted(CASES))
def test_learnable_reaches_every_parameter(case):
    """``learnable=True``: the integrators' time constants, the specific loudness's C and
    the inhibition exponent are parameters, and a backward pass (a burst, then silence:
    attack and release frames, after the ear FIR's delay too) reaches every entry of each."""
    layer = _layer(case, learnable=True)
    want = {"specific_loudness"} | ({"stl_integrator", "ltl_integrator"}
                                    if case == "glasberg2002" else
                                    {"specific_loudness_agc", "binaural_inhibition"})
    assert set(layer.theta) == want
    x = _x(case, 10000, 6, scale=0.1)
    x[..., 3000:] *= 1e-3
    y, _ = layer(x)
    (y["stl"].sum() + y["ltl"].sum()).backward()
    for n, p in layer.theta.items():
        assert p.grad is not None and bool((p.grad != 0).all()), (n, p.grad)
    assert set(layer.learned("specific_loudness")) == {"C"}


def test_learnt_values_are_used_without_gradients_too():
    """A learnable layer runs its learnt values under torch.no_grad() as with gradients
    (and not the design's)."""
    layer = _layer("glasberg2002", learnable=True)
    x = _x("glasberg2002", 1500, 7)
    with torch.no_grad():
        y0, _ = layer(x)
        layer.theta["specific_loudness"].fill_(0.2)
        y1, _ = layer(x)
    y2, _ = layer(x)
    assert torch.equal(y1["stl"], y2["stl"].detach())
    assert float((y1["stl"][..., -10:] / y0["stl"][..., -10:]).mean()) == pytest.approx(
        np.exp(0.2), rel=1e-6)                       # N' is proportional to C
