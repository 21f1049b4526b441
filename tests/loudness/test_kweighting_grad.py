"""The K-weighting's gradient rule (rtamt/loudness/kweighting_grad.py, the biquad
cascade's adjoint): gradcheck in float64 w.r.t. the input and the incoming section
memories, at the published rate and at a rate whose pre-filter is fitted."""
from __future__ import annotations

import pytest
import torch

import rtamt.nn as rn
from rtamt.loudness.kweighting import KWeighting, KWeightingParams

from _gradcheck import check_layer, noise


@pytest.mark.parametrize("fs", [48000.0, 8000.0])
def test_kweighting_gradcheck(fs):
    layer = rn.StageLayer(KWeighting(KWeightingParams(fs)), n_in=2)
    check_layer(layer, noise((2, 2, 50), 1), warm=noise((2, 2, 30), 2))


def test_kweighting_float32_input_gradient_is_the_float64_one():
    """The filter runs in float64 for float32 input: the gradient of a float32 block is
    the float64 one (of the same values), rounded to float32."""
    layer = rn.StageLayer(KWeighting(KWeightingParams(48000.0)), n_in=1)
    x64 = noise((1, 1, 80), 4).float().double().requires_grad_(True)
    x32 = x64.detach().float().requires_grad_(True)
    w = noise((1, 1, 80), 5)
    for x in (x64, x32):
        y, _ = layer(x)
        (y * w).sum().backward()
    assert x32.grad.dtype == torch.float32
    assert torch.equal(x32.grad, x64.grad.float())
