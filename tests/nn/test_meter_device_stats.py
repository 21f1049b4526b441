"""The R128 meter's gated statistics in torch (rtamt.nn._meter_device, what the
Triton-bound meter runs on the device) against the host's numba functions on the CPU:
histogram accumulation (counts exact, sums bit for bit in the host's order), the
integrated loudness's gates (BS.1770-4 eqs. (3)-(7)), the loudness range (EBU Tech 3342)
and the integrated loudness's gradient (gatedstats_grad.gated_adjoint), on histograms
that reach each branch: empty, every block below the relative gate's histogram range,
the gate in an occupied bin, the top bin, a loudness range with no value above its gate."""
import math

import numpy as np
import pytest
import torch

from rtamt.loudness import gating as G
from rtamt.loudness.gatedstats_grad import gated_adjoint
from rtamt.nn import _meter_device as D

B0 = G.BIN_BOUNDS[0]


def _hists():
    """``(counts, sums)`` ``(7, N_BINS)``: streams that reach the branches above."""
    rng = np.random.default_rng(7)
    cases = [np.zeros(0),                                          # empty
             np.full(3, B0 * 1.0001),                               # gate below histogram
             10.0 ** (rng.normal(-2.5, 1.0, 400)),                  # gate in an occupied bin
             np.concatenate([np.full(5, 1e4), np.full(2, 1e5)]),   # the top bin
             np.concatenate([np.full(9, 1e-3), np.full(1, 1e-3 * 1.00005)]),
             10.0 ** (rng.normal(-3.0, 0.3, 50)),
             # 9 blocks of P, one of ~P/11: the relative gate 0.01 (9P + q) falls in q's bin
             np.concatenate([np.full(9, 1e-3), [1e-3 / 11.0 * (1.0 + 1e-5)]])]
    counts = np.zeros((len(cases), G.N_BINS), np.int64)
    sums = np.zeros((len(cases), G.N_BINS))
    for b, e in enumerate(cases):
        G.hist_add_many(counts[b], sums[b], e, True)
    return counts, sums


def test_accumulation_equals_the_host_bit_for_bit():
    rng = np.random.default_rng(3)
    e = 10.0 ** rng.uniform(-8.5, 4.0, (3, 40))
    e[0, 5], e[1, 7], e[2, 0] = np.nan, B0, B0          # a NaN row, the gate itself
    e[:, 10:20] = e[:, 10:11]                           # repeated values: one bin, in order
    for strict in (True, False):
        counts, sums = np.zeros((3, G.N_BINS), np.int64), np.zeros((3, G.N_BINS))
        for b in range(3):
            G.hist_add_many(counts[b], sums[b], e[b], strict)
        et = torch.from_numpy(e)
        ok = (et > B0) if strict else (et >= B0)
        tc, ts = torch.zeros(3, G.N_BINS, dtype=torch.int64), torch.zeros(3, G.N_BINS,
                                                                           dtype=torch.float64)
        D._hist_add(tc, ts, et, ok, torch.from_numpy(G.BIN_BOUNDS))
        assert np.array_equal(tc.numpy(), counts)
        assert np.array_equal(ts.numpy(), sums)


def test_gates_and_loudness_range_equal_the_host():
    counts, sums = _hists()
    bounds, centre, idx = D._tables(torch.device("cpu"))
    ct, st = torch.from_numpy(counts), torch.from_numpy(sums)
    parts = D._gate_parts(ct, st, bounds, idx)
    e_i = D._gated_power(parts).numpy()
    lra = D._lra(ct, st, centre, idx).numpy()
    for b in range(counts.shape[0]):
        ref_i, ref_er = G.hist_gates(counts[b], sums[b])
        assert e_i[b] == pytest.approx(ref_i, rel=1e-12, abs=0.0)
        assert int(parts[2][b]) == G.hist_gate_parts(counts[b], sums[b])[2]
        assert lra[b] == pytest.approx(G.hist_lra(counts[b], sums[b]), rel=1e-12, abs=1e-12)
    assert e_i[0] == 0.0 and int(parts[2][1]) == -1 and int(parts[2][3]) == G.N_BINS - 1
    assert float(parts[6][6]) == 1.0 and 0.0 < float(parts[3][6]) < 1.0   # gate in a bin
    assert lra[2] > 1.0                                 # a spread: a range, not 0


def test_gradient_equals_the_host_adjoint():
    counts, sums = _hists()
    B = counts.shape[0]
    rng = np.random.default_rng(5)
    g_lufs = rng.standard_normal(B)
    g_lufs[4] = 0.0
    defined = np.array([True, True, True, True, True, False, True])
    mu0 = rng.standard_normal((B, G.N_BINS))
    e_m = 10.0 ** rng.uniform(-8.5, 5.0, (B, 6))
    e_m[:, 0] = np.nan
    ref_mu, ref_g = mu0.copy(), np.zeros((B, 6))
    gated_adjoint(counts, sums, np.nan_to_num(e_m, nan=0.0), g_lufs, defined, ref_mu, ref_g)

    rows = torch.zeros(B, 6, 3, dtype=torch.float64)
    rows[:, :, 1] = torch.from_numpy(e_m)

    class Ctx:
        saved_tensors = (rows, torch.from_numpy(sums), torch.from_numpy(counts),
                         torch.from_numpy(defined))

    gx, mu = D.DeviceStatistics.backward.__wrapped__(
        Ctx, torch.from_numpy(g_lufs), torch.from_numpy(mu0))[:2]
    scale = np.abs(ref_mu).max()
    assert np.abs(mu.numpy() - ref_mu).max() <= 1e-12 * scale
    assert np.abs(gx[:, :, 1].numpy() - ref_g).max() <= 1e-12 * np.abs(ref_g).max()
    assert np.array_equal(mu.numpy()[[0, 4, 5]], mu0[[0, 4, 5]])      # no gradient there
    assert not np.array_equal(mu.numpy()[2], mu0[2]) and math.isfinite(mu.numpy().sum())
    d = mu.numpy()[6] - mu0[6]                # the gate's position: every bin moves
    assert (d != 0).all() and np.abs(d - ref_mu[6] + mu0[6]).max() <= 1e-12 * np.abs(d).max()
    assert (gx[:, :, [0, 2]] == 0).all() and (gx[:, 0, 1] == 0).all()
