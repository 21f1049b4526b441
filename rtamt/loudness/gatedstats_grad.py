"""The gradient rule of :class:`rtamt.loudness.gatedstats.GatedStatistics`: the integrated
loudness of the histogram (ITU-R BS.1770-4 Annex 1 eqs. (3)-(7), as
:func:`rtamt.loudness.gating.hist_gates` computes it) with respect to the gating blocks'
powers and the histogram's power sums, with the gates' decisions held.

The histogram keeps, per 0.01 LU bin ``i``, the count ``n_i`` and the sum ``s_i`` of the
powers of the gating blocks that passed the absolute gate.  With ``n = sum n_i``,
``er = 0.1 sum_i s_i / n`` (the relative gate, -10 LU, as a power), ``j`` the bin holding
``er`` and ``f = ln(hi_j / er) / ln(hi_j / lo_j)`` the share of that bin above the gate
(:mod:`rtamt.loudness.gating`), the gated power is

    ``e_I = (sum_{i>j} s_i + f s_j) / (sum_{i>j} n_i + f n_j) = ce / cn``.

Held (piecewise constant, no gradient): which blocks pass the absolute gate (-70 LUFS,
strict), every block's bin and count, and the gate's bin ``j``.  Differentiated: the
sums, directly (``1 / cn`` for ``i > j``, ``f / cn`` for ``i = j``: a block in the gate's
bin counts with the share of the bin above the gate, both sides of the gate alike) and
through the gate's position in its bin, ``d e_I / d f = (s_j - e_I n_j) / cn``,
``d f / d er = -1 / (er ln(hi_j / lo_j))``, ``d er / d s_i = 0.1 / n`` (in the top bin
``f`` is 0 or 1, held).  A gating block's power adds to the sum of its bin, so its
gradient is that of its bin's sum.  This is the exact derivative of the histogram's
integrated loudness wherever no block changes bin (the blocks' own powers, not bin
centres, are summed: no rounding to the bin's resolution enters the gradient).  The loudness
range (EBU Tech 3342 percentiles) has no gradient.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..engine.grad import StageGrad
from ..engine.jit import JIT as _JIT
from . import gating as _G
from .gating import BIN_BOUNDS, N_BINS, RELATIVE_GATE_LU

__all__ = ["hist_gates_grad", "GatedStatisticsGrad"]


@njit(**_JIT)
def hist_gates_grad(counts, sums, g):
    """``g`` ``(N_BINS,)`` <- the gradient of :func:`rtamt.loudness.gating.hist_gates`'s
    gated power ``e_I`` with respect to the power sums ``sums`` (module docstring; the
    counts and the gate's bin held); returns ``e_I`` (0.0, and ``g`` zero, when no block
    passes the gates)."""
    g[:] = 0.0
    n, er, j, frac, cn, ce = _G.hist_gate_parts(counts, sums)
    if n == 0 or cn <= 0.0:
        return 0.0
    slope = 0.0                      # d frac / d er (frac is held in the top bin)
    if j >= 0 and counts[j] > 0 and j < N_BINS - 1:
        slope = -1.0 / (er * math.log(BIN_BOUNDS[j + 1] / BIN_BOUNDS[j]))
    e_i = ce / cn
    for i in range(j + 1, N_BINS):
        g[i] = 1.0 / cn
    if j >= 0:
        g[j] = frac / cn
        if slope != 0.0:
            rel = 10.0 ** (RELATIVE_GATE_LU / 10.0)
            via = (sums[j] - e_i * counts[j]) / cn * slope * rel / n
            for i in range(N_BINS):
                g[i] += via
    return e_i


@njit(**_JIT)
def gated_adjoint(counts, sums, e_m, g_lufs, defined, g_sums, g_em):
    """Per stream ``b``: ``g_sums[b]`` (in: the gradient of the outgoing power sums; out:
    of the incoming ones: the sums pass through) gets ``g_lufs[b]`` times the gradient of
    the integrated loudness ``-0.691 + 10 log10(e_I)`` (LUFS; BS.1770-4 eq. (2)) of the
    outgoing histogram ``counts[b]``, ``sums[b]`` (none where ``defined[b]`` is false or
    ``e_I = 0``); ``g_em[b, r]`` <- the gradient of gating block ``e_m[b, r]``: its bin's,
    where it passed the absolute gate (strictly), else 0."""
    B = counts.shape[0]
    g = np.zeros(N_BINS)
    for b in range(B):
        if defined[b] and g_lufs[b] != 0.0:
            e_i = hist_gates_grad(counts[b], sums[b], g)
            if e_i > 0.0:
                s = g_lufs[b] * 10.0 / (math.log(10.0) * e_i)
                for i in range(N_BINS):
                    g_sums[b, i] += s * g[i]
        for r in range(e_m.shape[1]):
            e = e_m[b, r]
            g_em[b, r] = g_sums[b, _G._bin_of(e)] if e > BIN_BOUNDS[0] else 0.0


class GatedStatisticsGrad(StageGrad):
    """The integrated loudness's gradient (module docstring), for a layer that carries the
    histogram per stream (:class:`rtamt.nn.R128Meter`).

    ``backward(coeffs, th, x, state, gy, mu)``: ``x`` ``(B, K, 3)`` the block's gating rows
    ``(k, e_M, e_S)`` (NaN: no gating block); ``state``: the *outgoing* histogram
    ``gate_n``, ``gate_e`` ``(B, N_BINS)`` and ``defined`` ``(B,)`` (a gating block seen:
    the integrated loudness is a number); ``gy`` ``(B,)`` the gradient of the integrated
    loudness (LUFS) after the block; ``mu['gate_e']`` the gradient of the outgoing sums,
    replaced by that of the incoming ones.  Returns ``(gx, None)``, ``gx`` the gradient
    of ``x`` (column 1)."""

    def backward(self, coeffs, th, x, state, gy, mu):
        gx = np.zeros(x.shape)
        e_m = np.nan_to_num(np.ascontiguousarray(x[:, :, 1]), nan=0.0)
        g_em = np.zeros(e_m.shape)
        gated_adjoint(state["gate_n"], state["gate_e"], e_m, np.asarray(gy, np.float64),
                      np.asarray(state["defined"], np.bool_), mu["gate_e"], g_em)
        gx[:, :, 1] = g_em
        return gx, None
