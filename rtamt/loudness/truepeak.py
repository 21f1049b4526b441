"""True-peak and sample-peak level after ITU-R BS.1770-4 Annex 2, as a stage.

BS.1770-4 Annex 2 estimates the peak of the continuous waveform by 4x over-sampling with
an order-48, 4-phase FIR interpolating filter (the coefficients of its section 3,
:data:`BS1770_TRUE_PEAK_PHASES`: phase ``p`` gives the interpolated value ``p / 4`` of a
sample period along, from the last 12 input samples), taking the absolute value, and
converting to dB TP (``20 log10``).  The 12.04 dB attenuation before and the gain after
the filter keep integer arithmetic in range; in floating point they cancel and are left
out (as the Annex says).  The same filter runs at every sample rate (its band edges scale
with ``fs``): the Annex asks for at least 192 kHz after over-sampling, which 4x meets from
48 kHz up; at higher rates 4x over-samples more than needed.

The true peak reported is the larger of the interpolated peak and the sample peak: the
samples lie on the waveform too, and the filter's phase 0 is not an identity (its centre
tap is 0.972), so a lone full-scale sample would otherwise under-read.

Stage :class:`TruePeak`: time-major ``(B, T, C)`` float32/float64 in; out ``(B, 2, C)``
float64, the block's linear true peak (row 0) and sample peak (row 1) per channel.  State
``hist`` ``(B, 11, C)`` float64 (the last 11 input samples, oldest first), ``true_peak``
and ``sample_peak`` ``(B, C)`` float64 (the maxima since the stream began).
"""
from __future__ import annotations

import dataclasses

import numpy as np
from numba import njit

from ..engine.backend import Kernels, kernel_method
from ..engine.jit import JIT
from ..engine.stage import Stage

__all__ = ["TruePeakParams", "TruePeak", "BS1770_TRUE_PEAK_PHASES", "true_peak_fir", "dbtp"]

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


def dbtp(peak):
    """``20 log10(peak)`` (dB TP or dBFS of a linear peak); 0 -> ``-inf``."""
    with np.errstate(divide="ignore"):
        out = 20.0 * np.log10(np.asarray(peak, dtype=np.float64))
    return float(out) if np.ndim(out) == 0 else out


@dataclasses.dataclass(frozen=True)
class TruePeakParams:
    """fs: sample rate (Hz; recorded for the design identity, the filter is the same)."""

    fs: float = 48000.0


@dataclasses.dataclass(frozen=True, eq=False)
class TruePeakCoeffs:
    """phases: ``(4, 12)`` float64 interpolator (:data:`BS1770_TRUE_PEAK_PHASES`)."""

    phases: np.ndarray


def design(params: TruePeakParams, n_in=None, weights=None) -> TruePeakCoeffs:
    return TruePeakCoeffs(phases=np.ascontiguousarray(BS1770_TRUE_PEAK_PHASES))


@njit(**JIT)
def true_peak_fir(h, hist, tp, sp, x, out, work):
    """Advance the true-peak meter over ``x`` ``(B, T, C)``: for every sample the four
    interpolated values ``sum_k h[p, k] x[t - k]`` (BS.1770-4 Annex 2) and the sample
    itself update the running maxima ``tp`` / ``sp`` ``(B, C)``; ``hist`` ``(B, 11, C)``
    holds the previous 11 samples (oldest first).  ``out[b, 0 / 1, c]``: the block's
    true / sample peak.  ``work``: float64 scratch of at least ``2 T + 11`` values."""
    B, T, C = x.shape
    P, K = h.shape
    H = K - 1
    for b in range(B):
        for c in range(C):
            for i in range(H):
                work[i] = hist[b, i, c]
            bsp = 0.0
            for t in range(T):
                v = np.float64(x[b, t, c])
                work[H + t] = v
                a = abs(v)
                if a > bsp:
                    bsp = a
            btp = 0.0
            acc = work[H + T:H + 2 * T]
            for p in range(P):
                # tap by tap over the whole block (vectorisable); every output still sums
                # its taps in the order k = 0..11
                for t in range(T):
                    acc[t] = h[p, 0] * work[H + t]
                for k in range(1, K):
                    hk = h[p, k]
                    for t in range(T):
                        acc[t] += hk * work[H + t - k]
                for t in range(T):
                    a = abs(acc[t])
                    if a > btp:
                        btp = a
            for i in range(H):
                hist[b, i, c] = work[T + i]
            if bsp > btp:
                btp = bsp
            out[b, 0, c] = btp
            out[b, 1, c] = bsp
            if btp > tp[b, c]:
                tp[b, c] = btp
            if bsp > sp[b, c]:
                sp[b, c] = bsp


class TruePeak(Stage):
    """True peak (BS.1770-4 Annex 2) and sample peak of every channel; see the module
    docstring for shapes and state."""

    name = "truepeak"
    in_kind = "channels"
    Params = TruePeakParams
    design = staticmethod(design)
    kernels = Kernels(numba=(true_peak_fir,))

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        return {"hist": np.zeros((batch, N_TAPS - 1, n_in)),
                "true_peak": np.zeros((batch, n_in)), "sample_peak": np.zeros((batch, n_in))}

    @staticmethod
    def n_out(coeffs, n_in):
        return n_in

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        B, _, C = x.shape
        y = out if (out is not None and out.shape == (B, 2, C) and out.dtype == np.float64) \
            else np.empty((B, 2, C), np.float64)
        work = stage.__dict__.get("_work")
        if work is None or work.size < 2 * x.shape[1] + N_TAPS - 1:
            work = np.empty(2 * x.shape[1] + N_TAPS - 1)
            if not isinstance(stage, type):
                stage._work = work            # reused by the next block of this size or less
        stage.kern.true_peak_fir(coeffs.phases, state["hist"], state["true_peak"],
                                 state["sample_peak"], x, y, work)
        return y

