"""The gated statistics' gradient rule (rtamt/loudness/gatedstats_grad.py): the integrated
loudness of the histogram differentiated with the gates' decisions held, checked against
central finite differences of the forward (``hist_gates``) and by gradcheck through
rtamt.nn's statistics function, with a gating block at the relative gate on either side
of it, and in the bins beside the gate's."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

from rtamt.loudness.gatedstats_grad import hist_gates_grad
from rtamt.loudness.gating import BIN_BOUNDS, N_BINS, _bin_of, hist_add_many, hist_gates
from rtamt.nn import R128Meter
from rtamt.nn._meter import _Statistics

REL = 0.1          # -10 LU as a power ratio


def _blocks(where: str, prior=()) -> np.ndarray:
    """Gating-block powers: 12 spread over 30 dB and one placed relative to the relative
    gate ``er`` that the set gives (solved with the block included): ``'above'`` /
    ``'below'`` by 1e-5 (both in the gate's bin), ``'next'`` / ``'prev'``: the bins beside
    it, plus one below the absolute gate (no gradient).  ``prior``: the powers of blocks
    already in the histogram (they move the gate too)."""
    rng = np.random.default_rng(3)
    e = 10.0 ** rng.uniform(-4.0, -1.0, 12)
    s, n = e.sum() + sum(prior), e.size + len(prior)
    if where in ("above", "below"):
        d = 1e-5 if where == "above" else -1e-5
        # e_x = REL (1 + d) (s + e_x) / (n + 1)  (the relative gate with e_x counted)
        a = REL * (1.0 + d) / (n + 1)
        e_x = a * s / (1.0 - a)
    else:                        # the centre of the bin beside the gate's (a fixed point)
        e_x = REL * s / n
        for _ in range(50):
            jt = _bin_of(REL * (s + e_x) / (n + 1)) + (1 if where == "next" else -1)
            e_x = math.sqrt(BIN_BOUNDS[jt] * BIN_BOUNDS[jt + 1])
    er = REL * (s + e_x) / (n + 1)
    j, jx = _bin_of(er), _bin_of(e_x)
    assert jx - j == {"above": 0, "below": 0, "next": 1, "prev": -1}[where], (j, jx)
    assert (e_x > er) == (where in ("above", "next"))
    return np.concatenate([e, [e_x, 0.5 * BIN_BOUNDS[0]]])


def _hist(e):
    counts, sums = np.zeros(N_BINS, np.int64), np.zeros(N_BINS)
    hist_add_many(counts, sums, e, True)
    return counts, sums


@pytest.mark.parametrize("where", ["above", "below", "next", "prev"])
def test_gradient_of_the_sums_is_the_derivative_of_hist_gates(where):
    """d e_I / d sums[i] equals central differences of hist_gates (counts and bins held)
    for every occupied bin and for empty ones (through the relative gate's position)."""
    counts, sums = _hist(_blocks(where))
    g = np.zeros(N_BINS)
    e_i = hist_gates_grad(counts, sums, g)
    assert e_i == hist_gates(counts, sums)[0]
    occupied = np.flatnonzero(counts)
    for i in list(occupied) + [int(occupied[0]) - 5, int(occupied[-1]) + 5]:
        h = 1e-7 * max(sums[i], 1e-4)
        up, dn = sums.copy(), sums.copy()
        up[i] += h
        dn[i] -= h
        fd = (hist_gates(counts, up)[0] - hist_gates(counts, dn)[0]) / (2 * h)
        assert abs(g[i] - fd) <= 1e-6 * abs(fd) + 1e-9, (i, g[i], fd)
    # a block in the gate's bin counts with the bin's share above the gate (between the
    # kept blocks' 1 / cn and 0) and moves the gate within the bin, which reaches every
    # bin (also those below the gate); with the gate's bin empty, nothing moves it
    j = _bin_of(REL * sums.sum() / counts.sum())
    below, kept = g[j - 1], g[j + 1]
    if where in ("above", "below"):
        assert counts[j] == 1 and below != 0.0 and below < g[j] < kept
    else:
        assert counts[j] == 0 and below == 0.0 == g[j] and kept > 0.0


@pytest.mark.parametrize("where", ["above", "below", "next", "prev"])
def test_gradcheck_at_the_relative_gate(where):
    """gradcheck (float64) of the integrated loudness w.r.t. the block's gating-block powers
    and the incoming power sums, with a block at the relative gate (either side) or in the
    bins beside it."""
    meter = R128Meter(4000.0, 1)
    part = meter.stats
    before = np.array([3e-3, 2e-2])                       # an earlier block's blocks
    e = _blocks(where, before)
    K = e.size
    rows = np.full((1, K, 3), np.nan)
    rows[0, :, 0] = np.arange(4, 4 + K)
    rows[0, :, 1] = e
    prev = _hist(before)
    gate_n = torch.from_numpy(prev[0][None])
    zeros = torch.zeros((1, N_BINS), dtype=torch.int64), torch.zeros((1, N_BINS))
    n_fine = torch.tensor([400]), torch.tensor([K])

    def f(r, ge):
        out = _Statistics.apply(part, r, ge, gate_n, *zeros, *n_fine)
        return out[0], out[1]

    r = torch.from_numpy(rows).requires_grad_(True)
    ge = torch.from_numpy(prev[1][None]).requires_grad_(True)
    assert gradcheck(lambda r, ge: f(r, ge)[0], (r, ge), eps=1e-10,
                     atol=1e-4, rtol=1e-5)
    # the block below the absolute gate (last) has no gradient; those above the relative
    # gate have the most, those below it only the gate's movement (none for next / prev)
    (g,) = torch.autograd.grad(f(r, ge)[0].sum(), r)
    g = g[0, :, 1].numpy()
    er = REL * (e[:-1].sum() + before.sum()) / (K - 1 + before.size)
    above = e[:-1] > er
    assert g[-1] == 0.0 and above[:-1].any() and (~above[:-1]).any()
    assert (g[:-1][above] > 0).all()
    low = g[:-1][~above]
    assert (low == 0).all() if where in ("next", "prev") else (np.abs(low) > 0).all()
    assert math.isfinite(float(f(r, ge)[0].detach()))
