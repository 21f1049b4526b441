"""The gating blocks' gradient rule (rtamt/loudness/gating_grad.py): gradcheck in float64
of the momentary / short-term window powers and the outgoing state w.r.t. the block and
the incoming state (open fine-block sums, ring of fine-block energies, maxima), for blocks
that complete no fine block, several fine blocks and steps, and windows that set a new
maximum; chained over blocks with carried state, the gradient of one call."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

import rtamt.nn as rn
from rtamt.loudness.gating import GatingBlocks, GatingParams

from _gradcheck import noise

FS = 4000.0       # 10 ms = 40 samples: the 400 ms window is 1600, the 3 s one 12000


def _layer():
    return rn.StageLayer(GatingBlocks(GatingParams(FS, (1.0, 1.41))), n_in=2)


def _warm(layer, n=12_017, seed=0):
    x = noise((2, 2, n), seed, scale=0.1)
    _, st = layer(x)
    return st


@pytest.mark.parametrize("T", [7, 33, 95, 1700])
def test_gating_gradcheck(T):
    """T = 7: no fine block completes (only the open sums); 33: one completes (the open
    block's 23 + 17 warm samples); 95, 1700: fine blocks and 100 ms steps (rows)."""
    layer = _layer()
    st = _warm(layer)
    keys = [k for k in st if k != rn.DESIGN_KEY and st[k].is_floating_point()]
    assert keys == ["gating.acc", "gating.ring_e", "gating.peak"]
    fixed = {k: v for k, v in st.items() if k not in keys}

    def f(x, *vals):
        y, new = layer(x, dict(zip(keys, vals), **fixed))
        return (torch.nan_to_num(y),) + tuple(new[k] for k in keys)

    x = noise((2, 2, T), 7, scale=0.3).requires_grad_(True)    # louder: new maxima
    vals = [st[k].detach().clone().requires_grad_(True) for k in keys]
    assert gradcheck(f, (x, *vals), eps=1e-6, atol=1e-8, rtol=1e-6, fast_mode=T > 100)


def test_maximum_gradient_goes_to_the_window_that_set_it():
    """The outgoing maximum's gradient reaches the samples of the window that set it, and
    the incoming maximum's only when no window of the block exceeds it."""
    layer = _layer()
    st = _warm(layer)
    peak = st["gating.peak"].detach().clone().requires_grad_(True)
    x = noise((2, 2, 400), 3, scale=0.01).requires_grad_(True)    # quieter: no new maximum
    _, new = layer(x, dict(st, **{"gating.peak": peak}))
    gx, gp = torch.autograd.grad(new["gating.peak"].sum(), (x, peak))
    assert torch.equal(gp, torch.ones_like(gp)) and not gx.any()
    x = noise((2, 2, 400), 3, scale=3.0).requires_grad_(True)     # louder: new maxima
    _, new = layer(x, dict(st, **{"gating.peak": peak}))
    gx, gp = torch.autograd.grad(new["gating.peak"].sum(), (x, peak))
    assert not gp.any() and bool((gx != 0).any())


def test_two_blocks_give_the_gradient_of_one_call():
    layer = _layer()
    x = noise((2, 2, 14_023), 9, scale=0.1)
    w = noise((2, 3, 14_023 // 400 + 2), 10)    # by step number

    def grad(cuts):
        xs = x.clone().requires_grad_(True)
        st, loss = None, 0.0
        for a, b in zip(cuts[:-1], cuts[1:]):
            y, st = layer(xs[..., a:b], st)          # (2, 3, K) rows (k, e_M, e_S)
            k = y[:, :1, :].detach().long().clamp(min=0).expand(-1, 3, -1)
            wk = torch.gather(w, 2, k)                # the weight of step k, whichever block
            loss = loss + torch.where(torch.isfinite(y), y * wk, 0.0)[:, 1:].sum()
        loss = loss + st["gating.peak"].sum() + st["gating.ring_e"].sum()
        loss.backward()
        return xs.grad

    one = grad([0, x.shape[-1]])
    for cuts in ([0, 12_001, 12_005, x.shape[-1]], [0, 333, 12_345, x.shape[-1]]):
        two = grad(cuts)
        assert torch.allclose(two, one, rtol=1e-10, atol=1e-10 * float(one.abs().max()))
        assert bool((one != 0).any())
    np.testing.assert_array_equal(one.shape, x.shape)
