"""The true peak's gradient rule (rtamt/loudness/truepeak_grad.py): the subgradient at the
value that set the maximum, through the interpolator.  gradcheck in float64 w.r.t. the
block and the incoming state (history, peaks) for both interpolators, with maxima set by
a refined crest, a midpoint, an Annex 2 phase, a sample, or kept from before; two blocks
give the gradient of one call."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rtamt.nn as rn
from rtamt.loudness.truepeak import TruePeak, TruePeakParams

from _gradcheck import check_layer, noise


def _layer(method):
    return rn.StageLayer(TruePeak(TruePeakParams(48000.0, method=method)), n_in=2)


def _tone(T, f, phase, amp=0.5, seed=0):
    t = np.arange(T)
    x = amp * np.sin(2 * np.pi * f / 48000.0 * t + phase)
    return torch.from_numpy(np.stack([x, 0.7 * x[::-1].copy()])[None]
                            + 0.01 * noise((1, 2, T), seed).numpy())


@pytest.mark.parametrize("method", ["sinc", "bs1770"])
@pytest.mark.parametrize("f", [997.0, 11_025.0, 17_000.0])
def test_truepeak_gradcheck(method, f):
    """High tones peak between samples (a refined crest or an interpolated point sets the
    maximum), low ones at a sample's neighbourhood; the warm block's peaks are lower, so
    the block sets new maxima."""
    check_layer(_layer(method), _tone(90, f, 0.3), warm=0.5 * _tone(60, f, 1.1, seed=1))


@pytest.mark.parametrize("method", ["sinc", "bs1770"])
def test_incoming_peak_kept(method):
    """A quiet block keeps the incoming peaks: their gradient goes to the incoming state,
    none to the block (except through the history the block's outgoing state holds)."""
    layer = _layer(method)
    _, st = layer(_tone(200, 3000.0, 0.0))
    peaks = {k: st[k].clone().requires_grad_(True) for k in ("truepeak.true_peak",
                                                             "truepeak.sample_peak")}
    x = (0.01 * _tone(120, 500.0, 0.2)).requires_grad_(True)
    y, _ = layer(x, dict(st, **peaks))
    gx, gt, gs = torch.autograd.grad(y.sum(), (x, *peaks.values()))
    assert not gx.any() and torch.equal(gt, torch.ones_like(gt)) and torch.equal(
        gs, torch.ones_like(gs))


@pytest.mark.parametrize("method", ["sinc", "bs1770"])
def test_two_blocks_give_the_gradient_of_one_call(method):
    layer = _layer(method)
    x = _tone(400, 13_000.0, 0.7) * torch.linspace(0.2, 1.0, 400)

    def grad(cuts):
        xs = x.clone().requires_grad_(True)
        st = None
        for a, b in zip(cuts[:-1], cuts[1:]):
            y, st = layer(xs[..., a:b], st)
        (y * torch.tensor([[[1.0], [0.5]]], dtype=y.dtype)).sum().backward()  # the peaks after all
        return xs.grad

    one = grad([0, 400])
    assert bool((one != 0).any())
    for cuts in ([0, 7, 300, 400], [0, 150, 151, 400]):
        assert torch.allclose(grad(cuts), one, rtol=1e-10, atol=1e-12)
