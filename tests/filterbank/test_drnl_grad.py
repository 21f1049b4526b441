"""Gradients of the DRNL filterbank through rtamt.nn: gradcheck in float64 of the input and
the incoming memories of both paths, below, around and above the broken stick's knee, for
the presets Paulick2024 runs (``paulick2024``, ``lopezpoveda2001``), an exponent other than
1/4, one path alone and the 'HIx' subject; the stick's slope against central differences on
both sides of the knee; two blocks with carried state give the gradient of one call."""
import math

import numpy as np
import pytest
import torch

import rtamt.nn as rn
from rtamt.filterbank.drnl import DRNL, DRNLParams, get_preset
from rtamt.filterbank.drnl_grad import stick_slope

from _gradcheck import check_layer, noise

FS = 16000.0
FC = (500.0, 1000.0, 3000.0)


def _layer(**kw):
    return rn.StageLayer(DRNL(DRNLParams(fs=FS, fc=FC, **kw)))


@pytest.mark.parametrize("level", [1e-9, 1e-6, 1e-3])
@pytest.mark.parametrize("kw", [dict(), dict(preset="lopezpoveda2001"),
                                dict(preset=get_preset("jepsen2008", c=(math.log10(0.3), 0.0))),
                                dict(paths="nlin"), dict(paths="lin"), dict(subject="HIx")],
                         ids=["paulick2024", "lopezpoveda2001", "c0.3", "nlin", "lin", "HIx"])
def test_drnl_gradcheck(kw, level):
    """Stapes velocities of 1e-9 m/s (the stick's linear part: its input below the knee,
    about 5e-7 m/s at 1 kHz), 1e-6 (both sides) and 1e-3 (compressive), from a warmed-up
    state (finite differences scaled to the level)."""
    layer = _layer(**kw)
    check_layer(layer, noise((2, 24), scale=level), warm=noise((2, 40), 1, scale=level),
                eps=1e-6 * level, atol=1e-6)


def test_the_levels_reach_both_sides_of_the_knee():
    """At 1e-9 m/s the nonlinear path is linear (``a`` times the GT cascades: doubling the
    input doubles the output), at 1e-3 it is compressive (it does not)."""
    st = DRNL(DRNLParams(fs=FS, fc=FC, paths="nlin"))
    x = noise((1, 200), 3).numpy()
    for level, linear in ((1e-9, True), (1e-3, False)):
        y1 = st.process_tm(st.coeffs, st.init_state(st.coeffs, 1, 1, np.float64), x * level)
        y2 = st.process_tm(st.coeffs, st.init_state(st.coeffs, 1, 1, np.float64),
                           2 * x * level)
        assert np.allclose(y2, 2 * y1, rtol=1e-9, atol=0) is linear


@pytest.mark.parametrize("quarter", [True, False])
def test_stick_slope(quarter):
    """The slope equals central differences of ``sign(u) min(a|u|, b|u|^c)`` away from the
    knee, on both sides and both signs; at ``u = 0`` it is ``a``; just below the knee ``a``,
    just above ``a c`` (the subgradient of the branch the forward kernel takes)."""
    co = DRNL(DRNLParams(fs=FS, fc=(1000.0,),
                         preset=get_preset("jepsen2008", c=(math.log10(0.25 if quarter else 0.3),
                                                            0.0)))).coeffs
    a, b, c = float(co.a[0]), float(co.b[0]), float(co.c[0])
    kt = float(co.knee[0]) * (1 - 1e-5)
    knee = float(co.knee[0])
    assert co.quarter is quarter

    def f(u):
        return math.copysign(min(a * abs(u), b * abs(u) ** c), u)

    for u in (0.3 * knee, 3 * knee, -0.3 * knee, -3 * knee, 100 * knee):
        h = 1e-6 * abs(u)
        fd = (f(u + h) - f(u - h)) / (2 * h)
        assert stick_slope(u, a, b, c, kt, quarter) == pytest.approx(fd, rel=1e-6)
    assert stick_slope(0.0, a, b, c, kt, quarter) == a
    assert stick_slope(knee * (1 - 1e-9), a, b, c, kt, quarter) == a
    assert stick_slope(knee * (1 + 1e-9), a, b, c, kt, quarter) == pytest.approx(a * c, rel=1e-6)


def test_gradient_over_blocks_equals_one_call():
    """Blocks of 333 and 667 samples with carried memories give the gradient of one call
    w.r.t. the input and every incoming memory of both paths (<= 1e-10 relative), with an
    input that crosses the knee."""
    layer = _layer()
    with torch.no_grad():
        _, s0 = layer(noise((2, 50), 5, scale=1e-6))
    T = 1000
    x = noise((2, T), 4, scale=1e-6)
    w = noise((2, len(FC), T), 6)
    keys = ["drnl.lin_s1", "drnl.lin_s2", "drnl.nlin_s1", "drnl.nlin_s2"]

    def run(blocks):
        xs = x.clone().requires_grad_(True)
        st = dict(s0, **{k: s0[k].clone().requires_grad_(True) for k in keys})
        s, a, loss = st, 0, 0.0
        for b in blocks:
            y, s = layer(xs[..., a:b], s)
            loss = loss + (y * w[..., a:b]).sum()
            a = b
        loss.backward()
        return [xs.grad] + [st[k].grad for k in keys]

    for g1, g2 in zip(run([T]), run([333, T])):
        assert torch.linalg.norm(g1) > 0
        assert torch.linalg.norm(g1 - g2) <= 1e-10 * torch.linalg.norm(g1)


def test_paulick2024_input_gradient():
    """Paulick2024 end to end now takes an input gradient (every stage has a rule): the
    gradient of the output's sum w.r.t. the input is non-zero and finite."""
    layer = rn.Paulick2024(16000, n_channels=2, fhigh=4000.0)
    x = noise((1, 400), scale=0.1).requires_grad_(True)
    y, _ = layer(x)
    y.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.count_nonzero(x.grad) > 0

