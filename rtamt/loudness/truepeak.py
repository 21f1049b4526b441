"""True-peak and sample-peak level (ITU-R BS.1770-4 Annex 2), as a stage.

The true peak is the peak of the continuous, band-limited waveform the samples stand for;
BS.1770-4 Annex 2 estimates it by over-sampling, taking the absolute value and converting
to dB TP (``20 log10``).  Two interpolators (``TruePeakParams.method``):

``'sinc'`` (the default): windowed-sinc interpolation to at least 768 kHz, refined
------------------------------------------------------------------------------------
* **Interpolator.**  A Kaiser-windowed sinc, ``s(u) = sinc(u) I0(beta sqrt(1 - (u/D)^2))
  / I0(beta)`` for ``|u| < D`` input samples (``D`` = :data:`SINC_HALF` = 24, so every
  fractional phase has ``N = 2 D = 48`` taps; ``beta`` = :data:`KAISER_BETA` = 7.5; cutoff
  ``fs/2``), tabulated at ``L`` phases: phase ``p`` is the waveform ``p / L`` of a sample
  period after input sample ``t - D``: ``y_p(t) = sum_k h[p, k] x[t - k]``,
  ``h[p, k] = s(k - D + p / L)``, each phase scaled to unity DC gain (``sum_k h[p, k] =
  1``).  Phase 0 is the identity (the sinc is 0 at the other integers): the samples lie on
  the interpolated waveform.  Its error on a tone, ``max_p |G_p(f) e^{j 2 pi f (D - p/L)}
  - 1|`` (``G_p`` the phase's response, in dB as ``20 log10(1 + error)``), is <= 0.0016 dB
  up to 0.4 fs and <= 0.003 dB up to 0.45 fs (the Annex 2 example filter: 0.23 dB, its
  phases' gains ranging -0.24 .. +0.22 dB up to 0.4 fs; DC gains 1.0016 and 0.9730).
* **Rate.**  ``L = 2 ceil(R / (2 fs))`` with ``R`` = :data:`TP_RATE_HZ` = 768 kHz (4 x the
  Annex's 192 kHz), so the interpolated rate ``L fs`` is at least 768 kHz at every sample
  rate (768 kHz at 48, 96 and 192 kHz, 793.8 kHz at 44.1 kHz; :func:`phase_count`): the
  inter-sample loss of a tone of frequency ``f`` then depends on ``f`` alone, not on the
  rate, and 768 kHz is what the bound below needs for 0.4 fs at 192 kHz.
* **Bound.**  On a grid of step ``1 / (L fs)`` a tone's crest is at most half a step from
  a grid point, so the grid alone may read ``cos(pi f / (L fs))`` of the peak (at 4 x and
  0.4 fs: 0.44 dB low).  The meter fits a parabola through the largest grid value and its
  two neighbours and takes its vertex.  For ``A cos`` sampled at offsets ``d - 1, d, d + 1``
  steps of ``theta = 2 pi f / (L fs)`` the vertex is ``A (cos u + sin^2 u (1 + cos theta)
  / (4 cos u))``, ``u = theta d``, which falls monotonically from ``A`` at ``d = 0`` to
  ``A c (3 - c^2) / 2`` at ``|d| = 1/2``, ``c = cos(theta / 2)``: never above the peak,
  and at most ``-20 log10(c (3 - c^2) / 2) ~ 13 (theta^2 / 8)^2`` dB below it (the grid
  alone: ``~ 8.7 theta^2 / 8`` dB).  With ``L fs >= 768 kHz``: <= 0.0002 dB for ``f <=
  19.2 kHz`` (0.4 x 48 kHz), <= 0.031 dB for ``f <= 76.8 kHz`` (0.4 x 192 kHz), 0.074 dB
  at 96 kHz (Nyquist at 192 kHz).  With the interpolator's <= 0.0016 dB, a tone up to
  0.4 fs reads within 0.033 dB of its peak at any rate up to 192 kHz, inside the 0.1 dB
  the meter is held to (``tests/loudness/test_r128.py``), and never above it by more
  than 0.002 dB.  (At 384 kHz and above ``L = 2``: the bound holds for ``f`` up to 76.8
  kHz, not up to 0.4 fs.)
* **Where.**  Interpolating all ``L`` phases would cost ``(L - 1) N`` multiply-adds a
  sample (720 at 48 kHz).  The kernel computes the half-sample phase only (a 2x grid:
  the samples and the midpoints, 24 multiplies a sample using the phase's symmetry), and
  refines a 2x-grid point that is a local maximum of ``|y|`` (with its sign) and at least
  :data:`SCREEN` = 0.5 (-6 dB) of the running true peak: a parabola through it and its
  2x neighbours predicts the crest, the fine phases are evaluated there (48 taps each)
  and climbed to the largest, and the parabola above is taken through it and its fine
  neighbours.  A crest that is not the largest so far by 6 dB cannot raise the maximum:
  the 2x grid loses at most 3 dB (``cos(pi/4)``, a tone at ``fs/2``).  The decision for
  each point depends only on the stream before it (in stream order), so any partition
  of the stream gives the same bits.  Programme-like material (speech, music, noise
  bursts) refines 0.3-0.5 % of its samples, white noise 2.6 %; a steady full-scale tone
  every crest (at 19 kHz the meter then takes 3.3 times as long as with Annex 2's filter,
  still 65 x real time for stereo 48 kHz on a 2-vCPU VM).
* **Delay.**  The interpolator looks ``D`` = 24 samples ahead: the waveform between the
  last 24 samples of a block is measured when the next block comes (their samples count
  at once, through the sample peak); a stream's last 0.5 ms (at 48 kHz) count through
  their samples only.

``'bs1770'``: the Annex 2 example
---------------------------------
4x over-sampling with the order-48, 4-phase FIR interpolating filter of Annex 2, section 3
(:data:`BS1770_TRUE_PEAK_PHASES`: phase ``p`` gives the interpolated value ``p / 4`` of a
sample period along, from the last 12 input samples); the 12.04 dB attenuation before and
the gain after the filter keep integer arithmetic in range and cancel in floating point
(as the Annex says).  The same filter runs at every rate (its band edges scale with
``fs``): 176.4 kHz at 44.1 kHz, below the 192 kHz the Annex asks for.  Its phases' DC gains
are 1.0016 and 0.9730 (on a tone its phases' gains range -0.24 ... +0.22 dB up to 0.4 fs)
and a tone may fall 0.44 dB between its 4x points, so tones up to 0.4 fs read up to 0.3 dB
low and 0.22 dB high (Tech 3341 case 17, 1/6 fs at 60 degrees: -6.32 dB TP for -6.02).
The samples are taken as well (phase 0 is not an identity: its centre tap is 0.972).

Both report the larger of the interpolated peak and the sample peak.

References: ITU-R BS.1770-4 (2015) Annex 2; J. F. Kaiser, "Nonrecursive digital filter
design using the I0-sinh window function", Proc. IEEE ISCAS 1974 (the window); R. E.
Crochiere & L. R. Rabiner, *Multirate Digital Signal Processing* (1983), ch. 3 (polyphase
interpolation); J. O. Smith, *Spectral Audio Signal Processing* (2011), "Quadratic
Interpolation of Spectral Peaks" (the parabola; its bound on a sinusoid is derived above).

Stage :class:`TruePeak`: time-major ``(B, T, C)`` float32/float64 in; out ``(B, 2, C)``
float64, the running linear true peak (row 0) and sample peak (row 1) per channel after
the block (with ``'sinc'`` a crest 6 dB below the running maximum is not refined, so a
block's own peak is not computed).  State ``hist`` ``(B, H, C)`` float64 (the last ``H``
input samples, oldest first: ``H = N = 48`` for ``'sinc'``, 11 for ``'bs1770'``),
``true_peak`` and ``sample_peak`` ``(B, C)`` float64 (the maxima since the stream began).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from numba import njit

from ..engine import contract
from ..engine.backend import Kernels, kernel_method
from ..engine.jit import JIT
from ..engine.stage import Stage

__all__ = ["TruePeakParams", "TruePeakCoeffs", "TruePeak", "BS1770_TRUE_PEAK_PHASES",
           "TP_RATE_HZ", "SINC_HALF", "KAISER_BETA", "SCREEN", "METHODS", "phase_count",
           "sinc_phases", "true_peak_fir", "true_peak_sinc", "dbtp"]

#: BS.1770-4 Annex 2, section 3: the 4-phase, order-48 FIR interpolator, one row per
#: phase, tap ``k`` multiplying the input ``k`` samples back.
BS1770_TRUE_PEAK_PHASES = np.array([
    [0.0017089843750, 0.0109863281250, -0.0196533203125, 0.0332031250000,
     -0.0594482421875, 0.1373291015625, 0.9721679687500, -0.1022949218750,
     0.0476074218750, -0.0266113281250, 0.0148925781250, -0.0083007812500],
    [-0.0291748046875, 0.0292968750000, -0.0517578125000, 0.0891113281250,
     -0.1665039062500, 0.4650878906250, 0.7797851562500, -0.2003173828125,
     0.1015625000000, -0.0582275390625, 0.0330810546875, -0.0189208984375],
    [-0.0189208984375, 0.0330810546875, -0.0582275390625, 0.1015625000000,
     -0.2003173828125, 0.7797851562500, 0.4650878906250, -0.1665039062500,
     0.0891113281250, -0.0517578125000, 0.0292968750000, -0.0291748046875],
    [-0.0083007812500, 0.0148925781250, -0.0266113281250, 0.0476074218750,
     -0.1022949218750, 0.9721679687500, 0.1373291015625, -0.0594482421875,
     0.0332031250000, -0.0196533203125, 0.0109863281250, 0.0017089843750],
])
N_TAPS = BS1770_TRUE_PEAK_PHASES.shape[1]          # 12 taps per phase

#: the interpolated rate of ``'sinc'`` is at least this (Hz): 4 x the Annex's 192 kHz
TP_RATE_HZ = 768000.0
#: half-length of the windowed sinc in input samples (the look-ahead); 2 D taps a phase
SINC_HALF = 24
#: Kaiser window parameter of the windowed sinc
KAISER_BETA = 7.5
#: a 2x-grid crest is refined when it is at least this fraction of the running true peak
SCREEN = 0.5
METHODS = ("sinc", "bs1770")


def dbtp(peak):
    """``20 log10(peak)`` (dB TP or dBFS of a linear peak); 0 -> ``-inf``."""
    with np.errstate(divide="ignore"):
        out = 20.0 * np.log10(np.asarray(peak, dtype=np.float64))
    return float(out) if np.ndim(out) == 0 else out


def phase_count(fs: float) -> int:
    """``L = 2 ceil(R / (2 fs))``, ``R`` = :data:`TP_RATE_HZ`: the (even) number of
    phases of the ``'sinc'`` interpolator at sample rate ``fs`` (Hz), so that ``L fs >=
    768 kHz``: 18 at 44.1 kHz (793.8 kHz), 16 at 48 kHz, 10 at 88.2 kHz (882 kHz), 8 at
    96 kHz, 6 at 176.4 kHz (1058.4 kHz), 4 at 192 kHz; 2 from 384 kHz up."""
    return 2 * max(1, math.ceil(TP_RATE_HZ / (2.0 * float(fs)) - 1e-12))


def sinc_phases(fs: float) -> np.ndarray:
    """The ``'sinc'`` interpolator for rate ``fs`` (Hz): ``(L, 2 D)`` float64, row ``p`` the
    taps ``h[p, k] = s(k - D + p / L)`` of the Kaiser-windowed sinc (module docstring),
    each row scaled to sum 1; row 0 is the unit impulse at ``k = D``."""
    L, D = phase_count(fs), SINC_HALF
    u = np.arange(2 * D)[None, :] - D + np.arange(L)[:, None] / L
    window = np.i0(KAISER_BETA * np.sqrt(np.clip(1.0 - (u / D) ** 2, 0.0, None)))
    h = np.sinc(u) * window / np.i0(KAISER_BETA)
    h[0] = 0.0
    h[0, D] = 1.0
    return np.ascontiguousarray(h / h.sum(axis=1, keepdims=True))


@dataclasses.dataclass(frozen=True)
class TruePeakParams:
    """fs: sample rate (Hz); method: ``'sinc'`` (windowed sinc to >= 768 kHz with
    refinement, the default) or ``'bs1770'`` (the Annex 2 example, 4x); module docstring."""

    fs: float = 48000.0
    method: str = "sinc"

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"truepeak: method must be one of {METHODS}, got {self.method!r}")
        fs = float(self.fs)
        if not (math.isfinite(fs) and fs > 0):
            raise ValueError(f"truepeak: fs must be a finite rate > 0 Hz, got {self.fs!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class TruePeakCoeffs:
    """phases: ``(L, K)`` float64 interpolator, row ``p`` the taps of phase ``p`` (``'sinc'``:
    :func:`sinc_phases`, ``(L, 48)``; ``'bs1770'``: :data:`BS1770_TRUE_PEAK_PHASES`, ``(4,
    12)``); method: which."""

    phases: np.ndarray
    method: str = "sinc"

    @property
    def history(self) -> int:
        """Input samples the state keeps: 48 (``'sinc'``) or 11 (``'bs1770'``)."""
        K = self.phases.shape[1]
        return K if self.method == "sinc" else K - 1


def design(params: TruePeakParams, n_in=None, weights=None) -> TruePeakCoeffs:
    if params.method == "bs1770":
        return TruePeakCoeffs(phases=np.ascontiguousarray(BS1770_TRUE_PEAK_PHASES),
                              method="bs1770")
    return TruePeakCoeffs(phases=sinc_phases(params.fs), method="sinc")


@njit(**JIT)
def _load_channel(hist, x, b, c, w, H):
    """``w[:H]`` = the history ``hist[b, :, c]``, ``w[H:H + T]`` = the block ``x[b, :, c]``
    in float64; returns the block's sample peak ``max |x|``."""
    T = x.shape[1]
    for i in range(H):
        w[i] = hist[b, i, c]
    peak = 0.0
    for t in range(T):
        v = np.float64(x[b, t, c])
        w[H + t] = v
        a = abs(v)
        if a > peak:
            peak = a
    return peak


@njit(**JIT)
def _fir_peak(h, work, T, rec):
    """The largest ``|sum_k h[p, k] w[H + t - k]|`` over the phases ``p`` and ``t < T``
    (``w = work``: the history's ``H = K - 1`` samples, then the block; ``work[H + T:H +
    2 T]`` scratch); 0.0 for none above it.  ``rec`` (empty: not kept) ``[p, t]`` of the
    first largest (phase-major, strict comparisons)."""
    P, K = h.shape
    H = K - 1
    btp = 0.0
    acc = work[H + T:H + 2 * T]
    for p in range(P):
        # tap by tap over the whole block (vectorisable); every output still sums
        # its taps in the order k = 0..11
        for t in range(T):
            acc[t] = h[p, 0] * work[H + t]
        for k in range(1, K):
            hk = h[p, k]
            wk = work[H - k:H - k + T]       # a slice: the loop vectorises
            for t in range(T):
                acc[t] += hk * wk[t]
        for t in range(T):
            a = abs(acc[t])
            if a > btp:
                btp = a
                if rec.size:
                    rec[0] = p
                    rec[1] = t
    return btp


@njit(**JIT)
def true_peak_fir(h, hist, tp, sp, x, out, work):
    """Advance the Annex 2 true-peak meter over ``x`` ``(B, T, C)``: for every sample the
    four interpolated values ``sum_k h[p, k] x[t - k]`` (BS.1770-4 Annex 2) and the sample
    itself update the running maxima ``tp`` / ``sp`` ``(B, C)``; ``hist`` ``(B, 11, C)``
    holds the previous 11 samples (oldest first).  ``out[b, 0 / 1, c]``: the running true
    / sample peak after the block.  ``work``: float64 scratch of at least ``2 T + 11``
    values."""
    B, T, C = x.shape
    P, K = h.shape
    H = K - 1
    for b in range(B):
        for c in range(C):
            bsp = _load_channel(hist, x, b, c, work, H)
            btp = _fir_peak(h, work, T, work[:0])
            for i in range(H):
                hist[b, i, c] = work[T + i]
            if bsp > btp:
                btp = bsp
            if btp > tp[b, c]:
                tp[b, c] = btp
            if bsp > sp[b, c]:
                sp[b, c] = bsp
            out[b, 0, c] = tp[b, c]
            out[b, 1, c] = sp[b, c]


@njit(**JIT)
def _fine_value(h, w, base, q):
    """The interpolated waveform at fine position ``q`` (``q / L`` input samples after the
    sample at ``w[base]``): phase ``p = q mod L`` of input sample ``n0 = q div L``,
    ``sum_k h[p, k] w[base + n0 + D - k]`` (``w[base + n0]`` itself for ``p = 0``)."""
    L, K = h.shape
    n0 = q // L
    p = q - n0 * L
    if p == 0:
        return w[base + n0]
    j = base + n0 + K // 2
    # four partial sums (taps k = r, r + 4, ...; K is a multiple of 4), added pairwise:
    # independent chains of multiply-adds instead of one
    a0 = h[p, 0] * w[j]
    a1 = h[p, 1] * w[j - 1]
    a2 = h[p, 2] * w[j - 2]
    a3 = h[p, 3] * w[j - 3]
    for k in range(4, K, 4):
        a0 += h[p, k] * w[j - k]
        a1 += h[p, k + 1] * w[j - k - 1]
        a2 += h[p, k + 2] * w[j - k - 2]
        a3 += h[p, k + 3] * w[j - k - 3]
    return (a0 + a1) + (a2 + a3)


@njit(**JIT)
def _climb(h, w, base, qc, um, u0, up, s):
    """The fine-grid climb of :func:`_refine`: ``(q, gm, g0, gp, inner)``, the local
    maximum ``q`` reached, the signed values at ``q - 1``, ``q``, ``q + 1`` (``-inf``
    beyond the range) and whether ``q`` is inside ``(qc - L/2, qc + L/2)``."""
    L = h.shape[0]
    Lh = L // 2
    den = 2.0 * u0 - um - up
    q = qc
    if den > 0.0:
        q = qc + int(math.floor((up - um) / (2.0 * den) * Lh + 0.5))
    lo = qc - Lh
    hi = qc + Lh
    g0 = s * _fine_value(h, w, base, q)
    has_m = q > lo
    has_p = q < hi
    gm = s * _fine_value(h, w, base, q - 1) if has_m else -np.inf
    gp = s * _fine_value(h, w, base, q + 1) if has_p else -np.inf
    while gp > g0 or gm > g0:
        if gp > gm:
            gm = g0
            g0 = gp
            q += 1
            gp = s * _fine_value(h, w, base, q + 1) if q < hi else -np.inf
        else:
            gp = g0
            g0 = gm
            q -= 1
            gm = s * _fine_value(h, w, base, q - 1) if q > lo else -np.inf
    return q, gm, g0, gp, (q > lo and q < hi)


@njit(**JIT)
def _refine(h, w, base, qc, um, u0, up, s):
    """The crest near the 2x-grid point at fine position ``qc`` (signed values ``s y``:
    ``um``, ``u0``, ``up`` at ``qc - L/2``, ``qc``, ``qc + L/2``, ``u0`` the largest): the
    parabola through them predicts the crest, the fine grid is climbed from the nearest
    fine point to a local maximum within ``[qc - L/2, qc + L/2]`` (:func:`_climb`), and
    the vertex of the parabola through it and its neighbours is returned (the point
    itself at an end)."""
    q, gm, g0, gp, inner = _climb(h, w, base, qc, um, u0, up, s)
    if inner:
        d = 2.0 * g0 - gm - gp
        if d > 0.0:
            return g0 + (gp - gm) * (gp - gm) / (8.0 * d)
    return g0


@njit(**JIT)
def _midpoints(hm, w, m, T, K):
    """``m[i]`` = the half-sample phase ``m(i - 1)``, ``i = 0 .. T`` (:func:`true_peak_sinc`),
    from ``w`` (the history's ``K`` samples, then the block)."""
    for i in range(T + 1):
        m[i] = hm[0] * (w[i + K - 1] + w[i])
    for k in range(1, K // 2):
        hk = hm[k]
        # the pair as slices: the loop vectorises (1.7x faster than indexing w)
        wa = w[K - 1 - k:K + T - k]
        wb = w[k:k + T + 1]
        for i in range(T + 1):
            m[i] += hk * (wa[i] + wb[i])


@njit(**JIT)
def _sinc_scan(h, w, m, T, M, rec):
    """The stream-order pass of :func:`true_peak_sinc` over one channel: the running
    maximum ``M`` advanced over the samples, the refined crests and the midpoints;
    returns it.  ``rec`` (empty: not kept) describes what set the last new maximum:
    ``[0, w index]`` a sample, ``[1, qc, um, u0, up, s]`` a refined crest (the arguments of
    :func:`_refine`), ``[2, m index, 0, 0, 0, s]`` a midpoint; ``rec[0] = -1`` when none
    exceeded the incoming ``M``."""
    L, K = h.shape
    D = K // 2
    Lh = L // 2
    lim = SCREEN * M
    for t in range(T):
        a = abs(w[K + t])
        if a > M:
            M = a
            lim = SCREEN * M
            if rec.size:
                rec[0] = 0
                rec[1] = K + t
        # the sample point n = t - D (w index K + t - D), its midpoints m(t-1), m(t)
        xs = w[K + t - D]
        mp = m[t]
        mc = m[t + 1]
        if xs != 0.0:
            s = 1.0 if xs > 0.0 else -1.0
            u0 = s * xs
            if u0 >= lim and u0 >= s * mp and u0 >= s * mc:
                v = _refine(h, w, K, (t - D) * L, s * mp, u0, s * mc, s)
                if v > M:
                    M = v
                    lim = SCREEN * M
                    if rec.size:
                        rec[0] = 1
                        rec[1] = (t - D) * L
                        rec[2] = s * mp
                        rec[3] = u0
                        rec[4] = s * mc
                        rec[5] = s
        if mc != 0.0:
            s = 1.0 if mc > 0.0 else -1.0
            u0 = s * mc
            if u0 > M:
                M = u0
                lim = SCREEN * M
                if rec.size:
                    rec[0] = 2
                    rec[1] = t + 1
                    rec[5] = s
            xn = w[K + t - D + 1]
            if u0 >= lim and u0 >= s * xs and u0 >= s * xn:
                v = _refine(h, w, K, (t - D) * L + Lh, s * xs, u0, s * xn, s)
                if v > M:
                    M = v
                    lim = SCREEN * M
                    if rec.size:
                        rec[0] = 1
                        rec[1] = (t - D) * L + Lh
                        rec[2] = s * xs
                        rec[3] = u0
                        rec[4] = s * xn
                        rec[5] = s
    return M


@njit(**JIT)
def true_peak_sinc(h, hist, tp, sp, x, out, work):
    """Advance the ``'sinc'`` true-peak meter (module docstring) over ``x`` ``(B, T, C)``.

    ``h`` ``(L, 2 D)``: :func:`sinc_phases`.  ``hist`` ``(B, 2 D, C)``: the previous ``2 D``
    input samples (oldest first).  ``tp`` / ``sp`` ``(B, C)``: running true / sample peak,
    advanced.  ``out[b, 0 / 1, c]``: their values after the block.  ``work``: float64
    scratch of at least ``2 D + 2 T + 1`` values.

    Per channel: the block after its history in ``w``; the half-sample phase ``m(t)`` (the
    waveform half a sample after input sample ``t - D``, from ``x[t - 2D + 1 .. t]``) for
    ``t = -1 .. T-1``, tap by tap over the block (vectorisable; symmetric taps paired, in
    the order ``k = 0 .. D-1``); then in stream order, for each ``t``: the sample ``|x[t]|``
    into the running maximum ``M``; the sample point ``t - D``, refined if it is a signed
    local maximum of the 2x grid (against ``m(t-1)``, ``m(t)``) and ``>= SCREEN M``; the
    midpoint ``m(t)`` into ``M``, refined likewise (against the samples ``t - D``,
    ``t - D + 1``).
    """
    B, T, C = x.shape
    L, K = h.shape
    hm = h[L // 2]
    for b in range(B):
        for c in range(C):
            w = work[:K + T]
            m = work[K + T:K + 2 * T + 1]       # m[i] = m(i - 1)
            bsp = _load_channel(hist, x, b, c, w, K)
            # m(t), t = -1 .. T-1, from w[K + t - K + 1 .. K + t] = w[t + 1 .. t + K]
            _midpoints(hm, w, m, T, K)
            M = _sinc_scan(h, w, m, T, tp[b, c], w[:0])
            for i in range(K):
                hist[b, i, c] = w[T + i]
            tp[b, c] = M
            if bsp > sp[b, c]:
                sp[b, c] = bsp
            out[b, 0, c] = M
            out[b, 1, c] = sp[b, c]


def _former_identity_parts(coeffs: TruePeakCoeffs, fs: float):
    """The params and coefficients the stage's fingerprint was taken of before it had a
    ``method`` (only the Annex 2 filter): ``TruePeakParams(fs)``, ``TruePeakCoeffs(phases)``."""
    old_p = dataclasses.make_dataclass("TruePeakParams", [("fs", float)])
    old_c = dataclasses.make_dataclass("TruePeakCoeffs", [("phases", object)])
    return old_p(fs), old_c(coeffs.phases)


def _triton():
    from . import truepeak_triton as t
    return (t.true_peak_fir, t.true_peak_sinc)


class TruePeak(Stage):
    """True peak and sample peak of every channel (``'sinc'``: windowed sinc to >= 768 kHz,
    refined; ``'bs1770'``: BS.1770-4 Annex 2, 4x); see the module docstring for shapes and
    state.  The ``'bs1770'`` stage keeps the design fingerprint it had before the
    ``method`` existed, so its earlier snapshots load."""

    name = "truepeak"
    in_kind = "channels"
    Params = TruePeakParams
    design = staticmethod(design)
    kernels = Kernels(numba=(true_peak_fir, true_peak_sinc), triton=_triton)

    def design_identity(self, coeffs=None) -> dict:
        if self.params.method != "bs1770":
            return super().design_identity(coeffs)
        c = self.coeffs if coeffs is None else coeffs
        return {"name": self.name, "fs": float(self.params.fs),
                "fingerprint": contract.fingerprint(*_former_identity_parts(c, self.params.fs))}

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        return {"hist": np.zeros((batch, coeffs.history, n_in)),
                "true_peak": np.zeros((batch, n_in)), "sample_peak": np.zeros((batch, n_in))}

    @staticmethod
    def n_out(coeffs, n_in):
        return n_in

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        """Advance the meter over ``x`` ``(B, T, C)``; returns ``(B, 2, C)`` float64, the
        running true and sample peak.  The numba kernels get a float64 scratch of
        ``H + 2 T + 1`` values, kept on the stage for the next block (the Triton twins
        read the samples where they are and ignore it)."""
        B, T, C = x.shape
        k = stage.kern
        y = k.buffer(out, (B, 2, C), state["true_peak"])
        need = coeffs.history + 2 * T + 1
        work = stage.__dict__.get("_work")
        if work is None or work.size < need:
            work = np.empty(need)
            if not isinstance(stage, type):
                stage._work = work            # reused by the next block of this size or less
        kern = k.true_peak_sinc if coeffs.method == "sinc" else k.true_peak_fir
        kern(k.coef(coeffs.phases), state["hist"], state["true_peak"], state["sample_peak"], x,
             y, work)
        return y

    @classmethod
    def grad_rule(cls):
        from .truepeak_grad import TruePeakGrad

        return TruePeakGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("truepeak", dict(fs=48000.0), "pair", streamed=False,
                        dtype_out="float64"),
                Example("truepeak-bs1770", dict(fs=48000.0, method="bs1770"), "pair",
                        streamed=False, dtype_out="float64"))
