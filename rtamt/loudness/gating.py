"""Block powers of the BS.1770 / EBU R128 meter: the 100 ms step clock and the momentary
(400 ms) and short-term (3 s) window powers, as a stage; and the gated statistics
(integrated loudness, loudness range) from fixed-size histograms or from the exact list.

Sources
-------
* **Loudness of a block** (ITU-R BS.1770-4, Annex 1, eqs. (1)-(2)): with ``y_i`` the
  K-weighted channel ``i`` and ``z_i`` its mean square over the block,
  ``L_K = -0.691 + 10 log10(sum_i G_i z_i)`` [LUFS].
* **Gating blocks** (BS.1770-4 Annex 1, eqs. (3)-(7)): ``T_g = 400 ms`` blocks overlapping
  by 75 % (one every 100 ms); absolute gate ``Gamma_a = -70 LUFS``; relative gate the
  loudness of the mean power of the blocks above ``Gamma_a`` minus 10 LU; the gates are
  strict (``l_j > Gamma``).
* **Momentary / short-term loudness** (EBU Tech 3341, section 2.2): ungated loudness of
  a sliding rectangular window of 400 ms ("M") and 3 s ("S"), here at every 100 ms step.
* **Loudness range** (EBU Tech 3342, section 3.1 and its MATLAB reference, section 5):
  short-term loudness values at least every 100 ms (10 Hz); absolute gate ``>= -70
  LUFS``; relative gate ``>=`` the loudness of their mean power minus 20 LU; LRA is the
  95th minus the 10th percentile, the percentile ``p`` being the sorted value of rank
  ``round((n - 1) p)`` (0-based; MATLAB's ``round``, halves away from zero).

The step clock
--------------
The stream is cut into 10 ms fine blocks; fine block ``j`` (1-based) ends at sample
``floor(j fs / 100)`` (the lengths repeat with a period of at most :data:`MAX_PERIOD`
blocks, tabulated in the design), so 100 ms step ``k`` ends at ``e_k = floor(k fs / 10)``.
When step ``k`` completes the stage emits the weighted mean square of samples
``[e_{k-4}, e_k)`` (momentary, for ``k >= 4``) and ``[e_{k-30}, e_k)`` (short-term, for
``k >= 30``).  The largest momentary and short-term values are tracked at every fine
block (10 ms resolution), which EBU Tech 3341 test cases 10, 11, 13 and 14 need (bursts
offset by 20 ms or 150 ms from the 100 ms grid).

Histograms
----------
A histogram holds, per loudness bin of width :data:`BIN_LU` (0.01 LU) from -70 LUFS to
+30 LUFS (:data:`N_BINS` bins; louder values count in the top bin), the number of values
and the sum of their powers: a fixed size for any programme length.  From it

* the integrated loudness is exact except for the blocks in the one bin that holds the
  relative gate, of which the fraction above the gate (in loudness, assumed uniform in
  the bin) is counted: the error is bounded by those blocks' share, at most a 0.01 LU
  wide slice of the distribution;
* the LRA percentiles are the mean power of the bin holding the rank (exact when the
  bin's values are equal, e.g. steady tones; else within the 0.01 LU bin); the relative
  gate counts the bin holding it when the bin's centre passes it.

The exact mode keeps every value instead (a list that grows by 10 values per second).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from numba import njit

from ..engine.backend import Kernels, kernel_method
from ..engine.jit import JIT
from ..engine.stage import Stage

__all__ = ["GatingParams", "GatingCoeffs", "GatingBlocks", "sub_block_lengths",
           "LOUDNESS_OFFSET_DB", "ABSOLUTE_GATE_LUFS", "RELATIVE_GATE_LU", "LRA_GATE_LU",
           "N_MOMENTARY", "N_SHORT_TERM", "BIN_LU", "N_BINS", "BIN_BOUNDS",
           "hist_add", "hist_add_many", "hist_integrated", "hist_gates", "hist_gate_parts",
           "hist_running",
           "hist_lra", "hist_lra_stats", "exact_integrated", "exact_gates", "exact_lra",
           "exact_lra_stats"]

LOUDNESS_OFFSET_DB = -0.691         #: BS.1770-4 eq. (2) constant (dB)
ABSOLUTE_GATE_LUFS = -70.0          #: BS.1770-4 eq. (5) and Tech 3342, Gamma_a (LUFS)
RELATIVE_GATE_LU = -10.0            #: BS.1770-4 eq. (6), Gamma_r offset (LU)
LRA_GATE_LU = -20.0                 #: EBU Tech 3342 section 3.1, relative gate (LU)
LRA_LOW, LRA_HIGH = 0.10, 0.95      #: EBU Tech 3342 section 3.1, percentiles
N_MOMENTARY = 4                     #: 400 ms = 4 sub-blocks (Tech 3341; BS.1770 T_g)
N_SHORT_TERM = 30                   #: 3 s = 30 sub-blocks (Tech 3341)
FINE = 10                           #: 10 ms fine blocks per 100 ms step
RING = N_SHORT_TERM * FINE          #: fine blocks in the short-term window (300)
MAX_PERIOD = 4096                   #: longest tabulated period of the sub-block lengths
BIN_LU = 0.01                       #: histogram bin width (LU)
HIST_TOP_LUFS = 30.0                #: upper edge of the histogram (LUFS)
N_BINS = int(round((HIST_TOP_LUFS - ABSOLUTE_GATE_LUFS) / BIN_LU))   #: 10000 bins
#: bin edges as powers: bin ``i`` holds ``BIN_BOUNDS[i] <= e < BIN_BOUNDS[i + 1]``
BIN_BOUNDS = 10.0 ** ((ABSOLUTE_GATE_LUFS + BIN_LU * np.arange(N_BINS + 1)
                       - LOUDNESS_OFFSET_DB) / 10.0)


def sub_block_lengths(fs: float, per_second: int = 10) -> np.ndarray:
    """Lengths (samples) of one period of the sub-blocks of ``1 / per_second`` s,
    ``floor((k + 1) fs / per_second) - floor(k fs / per_second)``, as int64; raises
    ``ValueError`` when the period is longer than :data:`MAX_PERIOD` sub-blocks."""
    from fractions import Fraction

    f = Fraction(fs)
    period = (f / per_second).denominator
    if period > MAX_PERIOD:
        raise ValueError(f"bs1770: the {1000 // per_second} ms clock of fs={fs!r} Hz repeats "
                         f"only after {period} steps (> {MAX_PERIOD}); use a rate that is a "
                         f"multiple of {per_second}/{MAX_PERIOD} Hz (e.g. an integer rate)")
    edges = np.array([math.floor(f * i / per_second) for i in range(period + 1)],
                     dtype=np.int64)
    return np.diff(edges)


@dataclasses.dataclass(frozen=True)
class GatingParams:
    """fs: sample rate (Hz); weights: BS.1770 channel weights ``G_i`` (one per input
    channel, >= 0; ``None``: 1.0 each)."""

    fs: float = 48000.0
    weights: tuple[float, ...] | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class GatingCoeffs:
    """weights ``(C,)`` float64; fine_lens ``(P,)`` int64 lengths of one period of the
    10 ms fine blocks; min_len: the shortest 100 ms step (samples)."""

    weights: np.ndarray
    fine_lens: np.ndarray
    min_len: int


def design(params: GatingParams, n_in=None, weights=None) -> GatingCoeffs:
    n = (1 if params.weights is None else len(params.weights)) if n_in is None else int(n_in)
    w = (1.0,) * n if params.weights is None else params.weights
    if len(w) != n:
        raise ValueError(f"bs1770: {len(w)} channel weights for {n} channels")
    return GatingCoeffs(weights=np.asarray(w, np.float64),
                        fine_lens=sub_block_lengths(params.fs, 10 * FINE),
                        min_len=int(math.floor(params.fs / 10)))


@njit(**JIT)
def _window(ring_e, ring_n, b, k, n):
    """Mean power of the last ``n`` fine blocks before fine block ``k`` (oldest first)."""
    se = 0.0
    sn = 0
    for j in range(k - n, k):
        se += ring_e[b, j % RING]
        sn += ring_n[b, j % RING]
    return se / sn


@njit(**JIT)
def block_powers(weights, fine_lens, acc, fill, n_fine, ring_e, ring_n, peak, y, out, count):
    """Advance the clock over K-weighted ``y`` ``(B, T, C)`` float64.

    Per stream ``b``: ``acc[b, c]`` sums ``y^2`` of channel ``c`` over the current 10 ms
    fine block (``fill[b]`` samples so far, ``n_fine[b]`` fine blocks completed); a
    completed fine block's weighted sum ``sum_c G_c acc_c`` goes to the ring
    ``ring_e[b, n_fine % 300]`` (its length to ``ring_n``).  After every fine block the
    momentary (last 40) and short-term (last 300) window powers update their maxima
    ``peak[b, 0 / 1]`` (-1 before the first full window); every 10th fine block is a
    100 ms step, which writes a row ``(k, e_M, e_S)`` to ``out[b, count[b]]`` (window
    power, NaN while the window is not full)."""
    B, T, C = y.shape
    P = fine_lens.shape[0]
    for b in range(B):
        cnt = 0
        t = 0
        while t < T:
            # the rest of the current fine block (or of y), channel by channel: each
            # channel's squares summed in time order, as one sample at a time would
            k = n_fine[b]
            n = min(fine_lens[k % P] - fill[b], T - t)
            for c in range(C):
                a = acc[b, c]
                for i in range(t, t + n):
                    v = y[b, i, c]
                    a += v * v
                acc[b, c] = a
            fill[b] += n
            t += n
            if fill[b] == fine_lens[k % P]:
                e = 0.0
                for c in range(C):
                    e += weights[c] * acc[b, c]
                    acc[b, c] = 0.0
                ring_e[b, k % RING] = e
                ring_n[b, k % RING] = fill[b]
                fill[b] = 0
                k += 1
                n_fine[b] = k
                em = np.nan
                es = np.nan
                if k >= N_MOMENTARY * FINE:
                    em = _window(ring_e, ring_n, b, k, N_MOMENTARY * FINE)
                    if em > peak[b, 0]:
                        peak[b, 0] = em
                if k >= RING:
                    es = _window(ring_e, ring_n, b, k, RING)
                    if es > peak[b, 1]:
                        peak[b, 1] = es
                if k % FINE == 0:
                    out[b, cnt, 0] = k // FINE
                    out[b, cnt, 1] = em
                    out[b, cnt, 2] = es
                    cnt += 1
        count[b] = cnt
        for r in range(cnt, out.shape[1]):
            out[b, r, 0] = -1.0
            out[b, r, 1] = np.nan
            out[b, r, 2] = np.nan


def _triton():
    from .gating_triton import block_powers as t
    return (t,)


class GatingBlocks(Stage):
    """The 100 ms step clock with the momentary and short-term window powers (see the
    module docstring).  Time-major K-weighted ``(B, T, C)`` float64 in; out
    ``(B, K, 3)`` float64 rows ``(k, e_M, e_S)`` for the ``K = T // min_len + 1`` possible
    steps of the block (rows after a stream's last step: ``k = -1``, NaN powers).

    State: ``acc`` ``(B, C)`` float64, ``fill`` / ``n_fine`` ``(B,)`` int64, ``ring_e``
    ``(B, 300)`` float64 and ``ring_n`` ``(B, 300)`` int64 (the last 300 fine blocks of
    10 ms), ``peak`` ``(B, 2)`` float64 (the largest momentary and short-term power at
    10 ms resolution, -1 before the first), and ``count`` ``(B,)`` int64 (steps written
    by the last block)."""

    name = "gating"
    in_kind = "channels"
    Params = GatingParams
    design = staticmethod(design)
    kernels = Kernels(numba=(block_powers,), triton=_triton)

    def _coeffs_for(self, n_in):
        return self.design(self.params, n_in)

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        return {"acc": np.zeros((batch, n_in)), "fill": np.zeros(batch, np.int64),
                "n_fine": np.zeros(batch, np.int64), "ring_e": np.zeros((batch, RING)),
                "ring_n": np.zeros((batch, RING), np.int64),
                "peak": np.full((batch, 2), -1.0), "count": np.zeros(batch, np.int64)}

    @staticmethod
    def n_out(coeffs, n_in):
        return 3

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        B, T, _ = x.shape
        k = stage.kern
        y = k.buffer(out, (B, T // coeffs.min_len + 1, 3), state["acc"])     # float64
        k.block_powers(k.coef(coeffs.weights), k.coef(coeffs.fine_lens), state["acc"],
                       state["fill"], state["n_fine"], state["ring_e"], state["ring_n"],
                       state["peak"], x, y, state["count"])
        return y

    @classmethod
    def grad_rule(cls):
        from .gating_grad import GatingGrad

        return GatingGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("gating", dict(fs=48000.0), "pair", streamed=False,
                        per_block=("count",), dtype_out="float64", dtypes=("float64",)),)


# ---------------------------------------------------------------- gated statistics
#: bin centres (geometric mean of the edges) as power dB, ``10 log10(e)``
_CENTRE_DB = 5.0 * np.log10(BIN_BOUNDS[:-1] * BIN_BOUNDS[1:])


@njit(**JIT)
def _bin_of(e):
    """Histogram bin of power ``e >= BIN_BOUNDS[0]`` (the top bin for louder values)."""
    i = np.searchsorted(BIN_BOUNDS, e, side="right") - 1
    return min(i, N_BINS - 1)


@njit(**JIT)
def hist_add(counts, sums, e, strict):
    """Count power ``e`` in the histogram ``(counts, sums)`` if it passes the absolute
    gate (``e > BIN_BOUNDS[0]`` when ``strict``, BS.1770; ``>=`` otherwise, Tech 3342)."""
    if e > BIN_BOUNDS[0] or (not strict and e == BIN_BOUNDS[0]):
        i = _bin_of(e)
        counts[i] += 1
        sums[i] += e


@njit(**JIT)
def hist_add_many(counts, sums, es, strict):
    """:func:`hist_add` for every power of ``es`` (NaN values are skipped)."""
    for e in es:
        if not math.isnan(e):
            hist_add(counts, sums, e, strict)


@njit(**JIT)
def hist_gate_parts(counts, sums):
    """The pieces of :func:`hist_gates`: ``(n, er, j, frac, cn, ce)``, the blocks above the
    absolute gate ``n``, the relative gate ``er`` (a power), its bin ``j`` (-1 below the
    histogram), the share ``frac`` of that bin above the gate, and the count ``cn`` and
    power sum ``ce`` of the blocks above the gate (bin ``j`` by its share); ``n = 0``:
    none passes the absolute gate (the rest 0)."""
    n = 0
    tot = 0.0
    for i in range(N_BINS):
        n += counts[i]
        tot += sums[i]
    if n == 0:
        return 0, 0.0, -1, 0.0, 0.0, 0.0
    er = tot / n * 10.0 ** (RELATIVE_GATE_LU / 10.0)
    if er < BIN_BOUNDS[0]:
        j = -1
    else:
        j = _bin_of(er)
    cn = 0.0
    ce = 0.0
    for i in range(j + 1, N_BINS):
        cn += counts[i]
        ce += sums[i]
    frac = 0.0
    if j >= 0 and counts[j] > 0:
        lo, hi = BIN_BOUNDS[j], BIN_BOUNDS[j + 1]
        if j == N_BINS - 1:
            frac = 1.0 if sums[j] / counts[j] > er else 0.0
        else:
            frac = math.log(hi / er) / math.log(hi / lo)
        cn += frac * counts[j]
        ce += frac * sums[j]
    return n, er, j, frac, cn, ce


@njit(**JIT)
def hist_gates(counts, sums):
    """Gated mean power of the histogram and its relative gate (BS.1770-4 eqs. (3)-(7)):
    ``(e_I, gate)`` with ``gate`` the mean power of the blocks above the absolute gate
    times ``10^(-10/10)`` (the relative gate as a power; exact: the bins hold the sums of
    the powers); ``(0.0, 0.0)`` when no block passes the absolute gate
    (:func:`hist_gate_parts`)."""
    n, er, j, frac, cn, ce = hist_gate_parts(counts, sums)
    if n == 0:
        return 0.0, 0.0
    return (ce / cn if cn > 0 else 0.0), er


@njit(**JIT)
def hist_integrated(counts, sums):
    """Gated mean power of the histogram (BS.1770-4 eqs. (3)-(7)); 0.0 when no block
    passes the absolute gate (:func:`hist_gates` without the gate)."""
    return hist_gates(counts, sums)[0]


@njit(**JIT)
def hist_running(counts, sums, es, out):
    """:func:`hist_add` (strict) of the powers ``es`` one at a time, writing the gated
    mean power after each to ``out`` (``NaN`` where ``es`` is NaN and nothing was added
    yet: no gating block so far); the running integrated loudness of every step."""
    seen = False
    for i in range(es.shape[0]):
        e = es[i]
        if not math.isnan(e):
            hist_add(counts, sums, e, True)
            seen = True
        out[i] = hist_integrated(counts, sums) if seen else np.nan


@njit(**JIT)
def _rank(n, p):
    """0-based rank of percentile ``p`` of ``n`` sorted values: ``round((n - 1) p)`` with
    halves away from zero (EBU Tech 3342, section 5)."""
    return int(math.floor((n - 1) * p + 0.5))


@njit(**JIT)
def hist_lra_stats(counts, sums):
    """The loudness range's statistics of a histogram of short-term powers (EBU Tech
    3342): ``(lo, hi, gate)``, the powers of the 10th and 95th percentiles and of the
    relative gate (the mean power of the values passing the absolute gate, -20 LU;
    exact); ``lo = hi = 0.0`` when no value passes the gates, ``gate = 0.0`` when none
    passes the absolute gate.  LRA = ``10 log10(hi / lo)``."""
    n = 0
    tot = 0.0
    for i in range(N_BINS):
        n += counts[i]
        tot += sums[i]
    if n == 0:
        return 0.0, 0.0, 0.0
    gate = 10.0 * math.log10(tot / n) + LRA_GATE_LU          # relative gate (power dB)
    first = np.searchsorted(_CENTRE_DB, gate, side="left")   # first bin centre >= gate
    m = 0
    for i in range(first, N_BINS):
        m += counts[i]
    g = 10.0 ** (gate / 10.0)
    if m == 0:
        return 0.0, 0.0, g
    lo_r, hi_r = _rank(m, LRA_LOW), _rank(m, LRA_HIGH)
    lo = hi = 0.0
    seen = 0
    for i in range(first, N_BINS):
        c = counts[i]
        if c == 0:
            continue
        if seen <= lo_r < seen + c:
            lo = sums[i] / c
        if seen <= hi_r < seen + c:
            hi = sums[i] / c
            break
        seen += c
    return lo, hi, g


@njit(**JIT)
def hist_lra(counts, sums):
    """Loudness range (LU) of a histogram of short-term powers (EBU Tech 3342); 0.0
    when no value passes the gates (:func:`hist_lra_stats`)."""
    lo, hi, _ = hist_lra_stats(counts, sums)
    return 10.0 * math.log10(hi / lo) if lo > 0.0 else 0.0


def exact_gates(e: np.ndarray) -> tuple[float, float]:
    """Gated mean power of the gating-block powers ``e`` and the relative gate as a power
    (BS.1770-4 eqs. (3)-(7), strict gates): ``(e_I, gate)``; ``(0.0, 0.0)`` when none
    passes the absolute gate."""
    e = e[e > BIN_BOUNDS[0]]
    if e.size == 0:
        return 0.0, 0.0
    er = float(np.mean(e)) * 10.0 ** (RELATIVE_GATE_LU / 10.0)
    kept = e[e > er]
    return (float(np.mean(kept)) if kept.size else 0.0), er


def exact_integrated(e: np.ndarray) -> float:
    """Gated mean power of the gating-block powers ``e`` (BS.1770-4 eqs. (3)-(7), strict
    gates); 0.0 when none passes the absolute gate."""
    return exact_gates(e)[0]


def exact_lra_stats(e: np.ndarray) -> tuple[float, float, float]:
    """``(lo, hi, gate)`` of the short-term powers ``e`` as :func:`hist_lra_stats` gives
    them, from every value (EBU Tech 3342: gates ``>=``, percentiles of rank
    ``round((n - 1) p)``)."""
    e = e[e >= BIN_BOUNDS[0]]
    if e.size == 0:
        return 0.0, 0.0, 0.0
    gate = float(np.mean(e)) * 10.0 ** (LRA_GATE_LU / 10.0)
    kept = np.sort(e[e >= gate])
    n = kept.size
    lo = kept[math.floor((n - 1) * LRA_LOW + 0.5)]
    hi = kept[math.floor((n - 1) * LRA_HIGH + 0.5)]
    return float(lo), float(hi), gate


def exact_lra(e: np.ndarray) -> float:
    """Loudness range (LU) of the short-term powers ``e`` (EBU Tech 3342: gates ``>=``,
    percentiles of rank ``round((n - 1) p)``); 0.0 when none passes the gates."""
    lo, hi, _ = exact_lra_stats(e)
    return 10.0 * math.log10(hi / lo) if lo > 0.0 else 0.0
