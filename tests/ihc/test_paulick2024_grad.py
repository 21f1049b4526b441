"""Gradients of Paulick et al.'s (2024) physiological IHC (MET conductance and membrane
ODE) through rtamt.nn: gradcheck in float64 of the input (BM velocity) and the incoming
membrane potential for both integrators and outputs, across the MET function's steep part
and its saturation; the MET conductance's derivative against central differences; two
blocks with carried state give the gradient of one call."""
import numpy as np
import pytest
import torch

import rtamt.nn as rn
from rtamt.ihc.paulick2024 import IHCPaulick2024, IHCPaulick2024Params, met_conductance
from rtamt.ihc.paulick2024_grad import met_dg

from _gradcheck import check_layer, noise

FS = 48000.0


def _layer(channels=2, **kw):
    return rn.StageLayer(IHCPaulick2024(IHCPaulick2024Params(fs=FS, **kw)), n_in=channels)


@pytest.mark.parametrize("integrator", ["euler", "exponential"])
@pytest.mark.parametrize("output", ["relative", "absolute"])
@pytest.mark.parametrize("scale", [3e-3, 3e-2])
def test_ihc_paulick2024_gradcheck(integrator, output, scale):
    """Velocities of a few mm/s (displacements around the MET function's operating point,
    tens of nm) and of tens of mm/s (into saturation), from a warmed-up potential."""
    layer = _layer(integrator=integrator, output=output)
    check_layer(layer, noise((2, 2, 30), scale=scale), warm=noise((2, 2, 40), 1, scale=scale))


def test_met_conductance_derivative():
    """``met_dg`` equals central differences of ``met_conductance`` (Altoè et al. 2018,
    Eq. A2) over -200 .. 300 nm, and is 0 (not NaN) far below, where G underflows."""
    p = IHCPaulick2024Params(fs=FS)
    d = np.linspace(-200e-9, 300e-9, 101)
    h = 1e-13
    fd = (met_conductance(d + h, p) - met_conductance(d - h, p)) / (2 * h)
    an = np.array([met_dg(v, p.gmet, p.x0, 1 / p.s0, 1 / p.s1) for v in d])
    assert np.allclose(an, fd, rtol=1e-6, atol=1e-9 * np.max(np.abs(fd)))
    assert met_dg(-1e-3, p.gmet, p.x0, 1 / p.s0, 1 / p.s1) == 0.0


@pytest.mark.parametrize("integrator", ["euler", "exponential"])
def test_gradient_over_blocks_equals_one_call(integrator):
    """Blocks of 300 and 700 samples with carried state give the gradient of one call
    w.r.t. the input and the incoming potential (<= 1e-10 relative)."""
    layer = _layer(integrator=integrator)
    with torch.no_grad():
        _, s0 = layer(noise((2, 2, 50), 5, scale=1e-2))
    T = 1000
    x = noise((2, 2, T), 4, scale=1e-2)
    w = noise((2, 2, T), 6)

    def run(blocks):
        xs = x.clone().requires_grad_(True)
        v = s0["ihc.v"].clone().requires_grad_(True)
        s, a, loss = dict(s0, **{"ihc.v": v}), 0, 0.0
        for b in blocks:
            y, s = layer(xs[..., a:b], s)
            loss = loss + (y * w[..., a:b]).sum()
            a = b
        loss.backward()
        return xs.grad, v.grad

    for g1, g2 in zip(run([T]), run([300, T])):
        assert torch.linalg.norm(g1) > 0
        assert torch.linalg.norm(g1 - g2) <= 1e-10 * torch.linalg.norm(g1)
