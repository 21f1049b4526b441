"""Streaming FIR machinery shared by the ear filters.

* :func:`fir_from_table` - frequency-sampling design (``scipy.signal.firwin2``, Hamming
  window; the same method as MATLAB ``fir2`` used by AMT) followed by
  :func:`minimum_phase`.
* :func:`minimum_phase` - homomorphic (real-cepstrum) minimum-phase conversion that keeps
  the magnitude response of the input filter.  ``scipy.signal.minimum_phase(h,
  'homomorphic', half=False)`` computes the same filter (3.5e-10 relative difference on the
  513-tap headphone design) but regularises ``|H|`` by 1e-7 of its smallest value, which
  limits its magnitude match to ~1e-7 dB (here: 1e-12 dB), and refuses filters shorter
  than 3 taps; the dozen lines below keep the exact magnitude.
* :func:`fir_tm` - compiled direct-form convolution on time-major arrays with an input
  history; any block partition gives bit-identical output because every output sample
  is accumulated as ``sum_k h[k] x[t-k]`` in the same order (k = 0, 1, ..., N-1)
  whatever the block boundaries.  Its Triton twin (``backend='triton'``, torch tensors) is
  :func:`rtamt.ear.fir_triton.fir_tm`, with the same per-output operation sequence; the
  stage declares both (:data:`FIR`).
* :class:`FIRSignalStage` - the signal -> signal :class:`~rtamt.engine.stage.Stage`
  base of :class:`~rtamt.ear.HeadphoneFilter`, :class:`~rtamt.ear.MiddleEarFilter` and
  :class:`~rtamt.ear.OuterMiddleEarFilter`.

Why a compiled kernel and not ``scipy.signal.lfilter(b, 1, x, zi=...)`` per block: the
kernel is faster (see docs/performance.md), and it is exact.  lfilter with a 1-tap
denominator is a convolution of the block plus the carried-in ``zi``, i.e. the history
part of each sum is added in a different order for different partitions (not
bit-identical; ~1e-16 relative), whereas this kernel is bit-identical under any
partition.  An FFT
(overlap-save) convolution would be faster for very long filters but is neither exact
under arbitrary partitions nor useful for 1-sample blocks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from scipy import signal

from ..engine.backend import Kernels, kernel_method
from ..engine.jit import JIT as _JIT
from ..engine.stage import RtamtInputError, Stage

__all__ = ["FIRCoeffs", "FIRSignalStage", "fir_from_table", "minimum_phase", "fir_tm",
           "magnitude_response", "PHASES", "fir_delay"]


# ------------------------------------------------------------------------------ design
def minimum_phase(h: np.ndarray, nfft: int | None = None, floor_db: float = -160.0) -> np.ndarray:
    """Minimum-phase FIR with the magnitude response of ``h`` (same length).

    Homomorphic method (Oppenheim & Schafer, *Discrete-Time Signal Processing*, 3rd ed.,
    sec. 13.8): real cepstrum of ``log|H|`` on an ``nfft``-point grid (default: >= 32x
    the filter length, so cepstral aliasing is negligible), folded onto positive
    quefrencies, exponentiated and transformed back; the result is truncated to
    ``len(h)`` taps (a length-N FIR has a length-N minimum-phase equivalent).  ``|H|``
    is floored at ``floor_db`` below its maximum so that exact spectral zeros (e.g. the
    0 gain at DC of the AMT designs) stay finite.
    """
    h = np.asarray(h, dtype=np.float64)
    n = h.size
    if nfft is None:
        nfft = 1 << int(np.ceil(np.log2(32 * n)))
    mag = np.abs(np.fft.rfft(h, nfft))
    mag = np.maximum(mag, mag.max() * 10.0 ** (floor_db / 20.0))
    cep = np.fft.irfft(np.log(mag), nfft)
    fold = np.zeros(nfft)
    fold[0] = 1.0
    fold[1:nfft // 2] = 2.0
    fold[nfft // 2] = 1.0
    hmin = np.fft.irfft(np.exp(np.fft.rfft(cep * fold)), nfft)
    return np.ascontiguousarray(hmin[:n])


def fir_from_table(fs: float, freq, gain, order: int) -> tuple[np.ndarray, np.ndarray]:
    """Design ``(h_min, h_lin)``: an ``order + 1``-tap linear-phase FIR through the points
    ``(freq, gain)`` (Hz, linear amplitude; ``freq`` from 0 to ``fs / 2``, ascending) by
    frequency sampling (``scipy.signal.firwin2``, Hamming window = MATLAB ``fir2``), and
    its minimum-phase equivalent (same magnitude response)."""
    if order < 2 or order % 2:
        raise ValueError(f"FIR order must be an even integer >= 2 (odd number of taps, "
                         f"so that the gain at fs/2 may be non-zero), got {order}")
    freq = np.asarray(freq, dtype=np.float64)
    gain = np.asarray(gain, dtype=np.float64)
    h_lin = signal.firwin2(order + 1, freq, gain, fs=fs)
    return minimum_phase(h_lin), h_lin


def magnitude_response(h: np.ndarray, fs: float, f) -> np.ndarray:
    """``|H(f)|`` of FIR ``h`` at frequencies ``f`` (Hz)."""
    _, H = signal.freqz(h, 1, worN=np.atleast_1d(np.asarray(f, dtype=np.float64)), fs=fs)
    return np.abs(H)


# ------------------------------------------------------------------------------ kernel
_CHUNK = 512  # output samples accumulated together (fits L1 with the input slices)


@njit(**_JIT)
def _fir_chunk(h, e, acc, base, n):
    """``acc[i] = sum_{k=0}^{N-1} h[k] e[base + i - k]`` for i < n, k ascending from 0.

    k is unrolled by 4 with the four products added to ``acc[i]`` one after the other,
    so the per-output operation sequence is exactly that of the plain k loop; the
    inner loop over i is contiguous (vectorised)."""
    N = h.shape[0]
    N4 = N - N % 4
    for i in range(n):
        acc[i] = 0.0
    for k in range(0, N4, 4):
        h0 = h[k]
        h1 = h[k + 1]
        h2 = h[k + 2]
        h3 = h[k + 3]
        s = base - k
        e0 = e[s:s + n]
        e1 = e[s - 1:s - 1 + n]
        e2 = e[s - 2:s - 2 + n]
        e3 = e[s - 3:s - 3 + n]
        for i in range(n):
            v = acc[i]
            v += h0 * e0[i]
            v += h1 * e1[i]
            v += h2 * e2[i]
            v += h3 * e3[i]
            acc[i] = v
    for k in range(N4, N):
        hk = h[k]
        ek = e[base - k:base - k + n]
        for i in range(n):
            acc[i] += hk * ek[i]


@njit(**_JIT)
def fir_tm(h, hist, x, y):
    """Direct-form FIR on time-major arrays with an input history.

    h    : (N,)          taps (same dtype as x).
    hist : (B, N-1, C)   the last N-1 input samples before this block, oldest first;
                         advanced in place.
    x    : (B, T, C)     input.
    y    : (B, T, C)     output, ``y[t] = sum_{k=0}^{N-1} h[k] x[t-k]``.

    Every output sample is accumulated from 0.0 in ascending k with the same
    operations whatever the block length, so any block partition gives the same
    result.  Per (batch, channel) the history and the block are copied into one
    contiguous buffer, and chunks of ``_CHUNK`` outputs are computed with the time
    index innermost (SIMD over time; the k order of each sum is untouched).
    """
    B, T, C = x.shape
    N = h.shape[0]
    M = N - 1
    e = np.empty(M + T, x.dtype)
    acc = np.empty(min(T, _CHUNK), x.dtype)
    for b in range(B):
        for c in range(C):
            for i in range(M):
                e[i] = hist[b, i, c]
            for t in range(T):
                e[M + t] = x[b, t, c]
            for t0 in range(0, T, _CHUNK):
                n = min(_CHUNK, T - t0)
                _fir_chunk(h, e, acc, M + t0, n)
                for i in range(n):
                    y[b, t0 + i, c] = acc[i]
            for i in range(M):
                hist[b, i, c] = e[T + i]


# ------------------------------------------------------------------------------ stage
@dataclass(frozen=True)
class FIRCoeffs:
    """Designed FIR: ``h`` (N,) float64 streamed taps (``h32`` its float32 copy): the
    minimum-phase taps, or with ``phase='linear'`` (:class:`~rtamt.ear.OuterMiddleEarFilter`)
    the linear-phase design itself; ``h_linear`` the linear-phase frequency-sampling design
    (same magnitude), ``freq``/``gain`` the design points (Hz, linear amplitude) handed to
    ``firwin2``, ``table`` the data points ``(f, value)`` the filter follows, in the
    units of ``gain`` (after Nyquist clipping; for ``lopezpoveda2001`` above 10 kHz
    including AMT's extension points towards fs/2), ``scale`` the factor applied after
    design (normalisation / units), ``fs``."""

    fs: float
    h: np.ndarray
    h32: np.ndarray
    h_linear: np.ndarray
    freq: np.ndarray
    gain: np.ndarray
    table: np.ndarray
    scale: float

    @property
    def ntaps(self) -> int:
        return int(self.h.size)

    def taps(self, dtype) -> np.ndarray:
        return self.h32 if np.dtype(dtype) == np.float32 else self.h

    def response(self, f) -> np.ndarray:
        """``|H(f)|`` of the streamed filter at ``f`` Hz."""
        return magnitude_response(self.h, self.fs, f)


def make_coeffs(fs, h_min, h_lin, freq, gain, table, scale) -> FIRCoeffs:
    h = np.ascontiguousarray(np.asarray(h_min, dtype=np.float64) * scale)
    return FIRCoeffs(float(fs), h, h.astype(np.float32), np.asarray(h_lin) * scale,
                     np.asarray(freq, dtype=np.float64), np.asarray(gain, dtype=np.float64),
                     np.asarray(table, dtype=np.float64), float(scale))


#: the FIR phases a stage can stream: ``'minimum'`` (the minimum-phase equivalent of the
#: design, no look-ahead) and ``'linear'`` (the linear-phase design itself, a constant delay
#: of ``(ntaps - 1) / 2`` samples)
PHASES = ("minimum", "linear")


def check_phase(phase: str, allowed: tuple = PHASES) -> None:
    if phase not in allowed:
        raise ValueError(
            f"phase={phase!r} is not available: choose from {allowed} (causal FIRs that "
            "stream). Zero-phase (forward-backward, filtfilt) filtering needs the "
            "future of the signal and is not offered by rtamt's streaming stages; "
            "'linear' is the zero-phase response delayed by half the filter length.")


def streaming_taps(phase: str, h_min: np.ndarray, h_lin: np.ndarray) -> np.ndarray:
    """The taps a stage of ``phase`` streams: for ``'linear'`` ``h_lin`` made exactly
    symmetric (``(h + h[::-1]) / 2``; the design is symmetric up to rounding), else
    ``h_min``."""
    return 0.5 * (h_lin + h_lin[::-1]) if phase == "linear" else h_min


def fir_delay(phase: str, ntaps: int) -> float:
    """Group delay (samples) of a stage's FIR: ``(ntaps - 1) / 2`` for ``'linear'`` (exact,
    every frequency), 0 for ``'minimum'`` (frequency dependent and short; not a constant)."""
    return (ntaps - 1) / 2.0 if phase == "linear" else 0.0


def _triton():
    """The Triton twin (:mod:`rtamt.ear.fir_triton`), imported on first binding."""
    from . import fir_triton
    return (fir_triton.fir_tm,)


#: the FIR kernel pair of the ear filters: :func:`fir_tm` and its Triton twin
FIR = Kernels(numba=(fir_tm,), triton=_triton)


class FIRSignalStage(Stage):
    """Signal -> signal streaming FIR stage: ``(T,)``/``(batch, T)`` in, same shape out.

    ``in_kind = "signal"`` so that it can be the first stage of a
    :class:`~rtamt.engine.stage.Chain` and hand its ``(B, T)`` time-major output on to
    another signal stage (a second ear filter, the gammatone filterbank).  The kernel
    (:meth:`process_tm`) also accepts time-major ``(B, T, C)`` blocks (pure functional
    use on several channels); the stateful object and chains use it on one signal.

    State: ``hist`` (batch, ntaps-1, 1) - the last ntaps-1 input samples, oldest first
    (zeros = a stream that has heard silence).
    """

    in_kind = "signal"
    kernels = FIR

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        return {"hist": np.zeros((batch, coeffs.ntaps - 1, n_in), dtype)}

    @classmethod
    def grad_rule(cls):
        from .fir_grad import FIRGrad
        return FIRGrad

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        """Time-major ``x`` (B, T) (one signal per row) or (B, T, C); output same shape:
        :func:`fir_tm` (or its Triton twin, on the stage's bound kernels) with the taps of
        ``x``'s dtype."""
        k = stage.kern
        x3 = x[:, :, None] if x.ndim == 2 else x
        y = k.buffer(out, x.shape, x)
        y3 = y[:, :, None] if y.ndim == 2 else y
        h = coeffs.h if k.is64(x) else coeffs.h32
        k.fir_tm(k.coef(h), state["hist"], x3, y3)
        return y

    def _coeffs_for(self, n_in):
        if n_in != 1:
            raise RtamtInputError(
                f"{self.name}: an ear filter is a signal stage (one signal per batch row); "
                f"it got {n_in} channels - place it before the filterbank")
        return self.coeffs

    def _to_public(self, yt, lead):
        if yt.ndim == 2:  # this stage's own (B, T) output -> lead + (T,), a view (yt is new)
            return yt.reshape(tuple(lead) + (yt.shape[-1],))
        return super()._to_public(yt, lead)

    @classmethod
    def examples(cls):
        return ()                            # a base class: its subclasses run
