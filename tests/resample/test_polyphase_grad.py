"""Gradients of the causal polyphase resampler through rtamt.nn: gradcheck in float64 of the
input and the incoming history for Paulick2024's decimations ``1/D`` and rational ratios,
from a phase that is not 0; two blocks with carried state (one producing no output) give
the gradient of one call; the adjoint is the transpose of the forward map."""
import numpy as np
import pytest
import torch

import rtamt.nn as rn
from rtamt.resample import Resampler, ResamplerParams
from rtamt.resample.polyphase_grad import polyphase_adjoint

from _gradcheck import check_layer, noise

FS = 8000.0
#: (up, down): Paulick2024's factors D = 2 .. 5 (default_resample_factor picks from these
#: for the usual sample rates), an up-sampling and a ratio with both factors > 1
RATIOS = [(1, 2), (1, 3), (1, 4), (1, 5), (2, 1), (3, 2)]


def _layer(up, down, channels=2):
    return rn.StageLayer(Resampler(ResamplerParams(fs_in=FS, up=up, down=down)), n_in=channels)


@pytest.mark.parametrize("up,down", RATIOS, ids=[f"{u}-{d}" for u, d in RATIOS])
def test_resampler_gradcheck(up, down):
    """Input and incoming history; the warm-up leaves the phase inside the decimation
    (``offset != 0`` whenever ``down > 1``)."""
    layer = _layer(up, down)
    warm = noise((2, 2, 4 * down + 1), 1)
    _, st = layer(warm)
    assert (int(st["resample.offset"][0]) != 0) == (down > 1 and up % down != 0)
    check_layer(layer, noise((2, 2, 23)), warm=warm)


@pytest.mark.parametrize("up,down", RATIOS, ids=[f"{u}-{d}" for u, d in RATIOS])
def test_gradient_over_blocks_equals_one_call(up, down):
    """Blocks of 37, 1 (no output when down-sampling) and 162 samples with carried state
    give the gradient of one 200-sample call w.r.t. the input and the incoming history
    (<= 1e-10 relative); the outputs are the same bits."""
    layer = _layer(up, down)
    with torch.no_grad():
        _, s0 = layer(noise((2, 2, 2 * down + 1), 5))
    T = 200
    x = noise((2, 2, T), 4)
    w = noise((2, 2, layer.parts[0].stage.output_length(T) + 8), 6)

    def run(blocks):
        xs = x.clone().requires_grad_(True)
        h = s0["resample.hist"].clone().requires_grad_(True)
        s, a, loss, ys = dict(s0, **{"resample.hist": h}), 0, 0.0, []
        k = 0
        for b in blocks:
            y, s = layer(xs[..., a:b], s)
            loss = loss + (y * w[..., k:k + y.shape[-1]]).sum()
            ys.append(y.detach())
            k += y.shape[-1]
            a = b
        loss.backward()
        return torch.cat(ys, -1), xs.grad, h.grad

    y1, *one = run([T])
    y2, *two = run([37, 38, T])
    assert torch.equal(y1, y2)
    for g1, g2 in zip(one, two):
        assert torch.linalg.norm(g1) > 0
        assert torch.linalg.norm(g1 - g2) <= 1e-10 * torch.linalg.norm(g1)


@pytest.mark.parametrize("up,down", [(1, 4), (3, 2)])
def test_adjoint_is_the_transpose(up, down):
    """``<gy, J e> == <J^T gy, e>`` for the block map ``e = [hist, x] -> (y, hist')`` at
    every incoming phase, with J applied by the forward kernel (float64)."""
    st = Resampler(ResamplerParams(fs_in=FS, up=up, down=down))
    co = st.coeffs
    rng = np.random.default_rng(3)
    B, T, C, H = 2, 19, 3, co.taps_per_phase - 1
    for r in range(down):
        hist, x = rng.standard_normal((B, H, C)), rng.standard_normal((B, T, C))
        state = {"hist": hist.copy(), "offset": np.array([r], np.int64)}
        y = type(st).process_tm(co, state, x)
        gy, mu_out = rng.standard_normal(y.shape), rng.standard_normal((B, H, C))
        mu, gx = mu_out.copy(), np.zeros((B, T, C))
        polyphase_adjoint(co.taps, co.up, co.down, np.array([r], np.int64), gy, mu, gx)
        lhs = np.sum(gy * y) + np.sum(mu_out * state["hist"])
        rhs = np.sum(gx * x) + np.sum(mu * hist)
        assert abs(lhs - rhs) <= 1e-12 * (abs(lhs) + 1)
