"""Causal, streaming polyphase resampler: ``fs_out = fs_in * up / down`` (rational).

Theory (Crochiere & Rabiner 1983, *Multirate Digital Signal Processing*, ch. 2-3):
the input ``x[n]`` is upsampled by ``L = up`` (``L - 1`` zeros after each sample),
low-pass filtered at the rate ``L fs_in`` by a linear-phase FIR ``h`` (length
``N = 2 half_len + 1``) and decimated by ``M = down`` (``up/down`` reduced by their
gcd).  With ``v = h * upsample_L(x)``, output sample ``k`` is

    ``y[k] = v[k M] = sum_{m=0}^{K-1} h[p + m L] x[n0 - m]``,
    ``n0 = floor(k M / L)``,  ``p = k M mod L``,

i.e. the filtered upsampled signal at input-rate position ``k M / L`` (in input
samples; time ``k / fs_out`` seconds).  Only the ``K = ceil(N / L)`` taps of phase
``p`` are computed (the polyphase decomposition), so the cost is ``K`` multiply-adds
per output sample and channel.  Inputs before the stream start are zero.

**Causal** (no look-ahead): ``y[k]`` uses inputs up to ``x[floor(k M / L)]`` only.
This is what ``scipy.signal.upfirdn(h, x, up, down)`` computes, truncated to
:func:`output_length` samples.  ``scipy.signal.resample_poly`` applies the same
filter but is an *offline, zero-phase* operation: it advances the output by the
filter's group delay (``resample_poly(x)[k] = upfirdn(h, x)[k M + half_len]`` on the
upsampled grid, i.e. it drops the first ``half_len / M`` outputs when ``M`` divides
``half_len``) and so looks into the future; here the delay stays in the output.

Length bookkeeping (exact for any block partition, see :func:`output_length`):

* after ``n`` input samples in total, ``ceil(n up / down)`` output samples have been
  produced (outputs ``k`` with ``k M < n L``: the newest input they need has arrived);
* a block of ``T`` samples yields ``output_length(coeffs, n + T) - output_length(coeffs, n)``
  samples - possibly 0 (e.g. 1-sample blocks when down-sampling), returned as an array
  whose time axis has length 0.

Group delay (:func:`group_delay`): the linear-phase filter delays by ``half_len``
samples at the rate ``L fs_in``, i.e. ``half_len / down`` output samples,
``half_len / up`` input samples, ``half_len / (up fs_in)`` seconds.  With the default
``half_len = 10 max(up, down)`` that is 10 samples at the lower of the two rates
(``10 / min(fs_in, fs_out)`` s).  For a band-limited input ``x(t)`` (``x[n] = x(n / fs_in)``):
``y[k] ~= x(k / fs_out - delay_s)`` within the passband.

Filter design (Kaiser 1974, "Nonrecursive digital filter design using the I0-sinh
window function", Proc. IEEE ISCAS; Oppenheim & Schafer, *Discrete-Time Signal
Processing*, 3rd ed., sec. 7.6): windowed sinc ``scipy.signal.firwin(2 half_len + 1,
cutoff / max(up, down), window=('kaiser', beta))`` times ``up``, cutoff relative to the
lower Nyquist frequency ``min(fs_in, fs_out) / 2``.  Presets:

==========  ================  =====  ======  ==============================================
preset      half_len          beta   cutoff  response (f relative to min(fs_in, fs_out)/2)
==========  ================  =====  ======  ==============================================
``scipy``   10 max(up, down)  5.0    1.0     = ``resample_poly``'s default filter:
                                             |ripple| <= 0.02 dB for f <= 0.8; -6 dB at
                                             f = 1; stop band >= 54 dB for f >= 1.2
``hq``      20 max(up, down)  8.6    0.9     |ripple| <= 0.001 dB for f <= 0.7, <= 0.1 dB
                                             for f <= 0.8; stop band >= 85 dB for f >= 1.1
                                             (twice the delay and the taps)
==========  ================  =====  ======  ==============================================

(stop-band figures: the least attenuation over the band, checked by
``tests/resample/test_resample.py`` for the tested ratios; :func:`gain_db` evaluates the response).
A component at ``f`` in the stop band is attenuated by at least that much: when
down-sampling it would alias, when up-sampling it is an image.

State: ``hist`` ``(B, K - 1, C)`` - the last ``K - 1`` input samples of each channel
(zeros at the start) - and ``offset`` ``(1,)`` int64 - ``k_next M - n L`` in
``[0, M)``, where ``n`` is the number of input samples heard and ``k_next`` the index of
the next output sample (``offset`` is the position of the next output on the
upsampled grid, relative to the start of the next block).  Computation in the input's
dtype (taps rounded to float32 for float32 input).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numba
import numpy as np
from scipy import signal

from ..engine.backend import Kernels, kernel_method
from ..engine.jit import JIT as _JIT
from ..engine.stage import RtamtInputError, Stage

__all__ = ["ResamplerParams", "ResamplerCoeffs", "Resampler", "design", "output_length",
           "block_output_length", "group_delay", "gain_db", "PRESETS", "MAX_RATE"]

#: preset -> (half_len factor, Kaiser beta, cutoff relative to the lower Nyquist)
PRESETS = {
    "scipy": (10, 5.0, 1.0),
    "hq": (20, 8.6, 0.9),
}

#: largest allowed ``max(up, down)`` after reduction (the filter has about
#: ``2 * factor * max(up, down)`` taps).
MAX_RATE = 4096


@dataclass(frozen=True)
class ResamplerParams:
    """Resampling from ``fs_in`` (Hz) to ``fs_out`` (Hz) = ``fs_in * up / down``.

    Give ``fs_out`` or ``up`` and ``down`` (positive ints; both may be given if they
    agree).  ``fs_out / fs_in`` must be a rational number with ``max(up, down) <=
    MAX_RATE`` after reduction (decimal sample rates such as 44100.0 or 22050.5 are
    read exactly).  ``preset`` (see the module table) sets the filter;
    ``half_len_factor`` (int >= 1: ``half_len = half_len_factor * max(up, down)``),
    ``beta`` (Kaiser window, >= 0) and ``cutoff`` (fraction of ``min(fs_in, fs_out)/2``,
    in (0, 1]) override it.
    """

    fs_in: float
    fs_out: float | None = None
    up: int | None = None
    down: int | None = None
    preset: str = "scipy"
    half_len_factor: int | None = None
    beta: float | None = None
    cutoff: float | None = None


@dataclass(frozen=True)
class ResamplerCoeffs:
    """Designed resampler.

    ``up``, ``down``: reduced rate factors; ``h`` ``(2 half_len + 1,)`` float64 prototype
    filter (DC gain ``up``); ``taps`` ``(up, K)`` float64 polyphase taps,
    ``taps[p, m] = h[p + m up]`` (zero past the end of ``h``); ``taps32`` the same in
    float32.
    """

    fs_in: float
    fs_out: float
    up: int
    down: int
    half_len: int
    beta: float
    cutoff: float
    h: np.ndarray
    taps: np.ndarray
    taps32: np.ndarray

    @property
    def taps_per_phase(self) -> int:
        """``K = ceil((2 half_len + 1) / up)``: multiply-adds per output sample and channel."""
        return int(self.taps.shape[1])

    @property
    def delay(self) -> float:
        """Group delay in output samples (``half_len / down``)."""
        return group_delay(self, "out")


def _ratio(fs_in: float, fs_out: float) -> Fraction:
    return Fraction(repr(float(fs_out))) / Fraction(repr(float(fs_in)))


def design(params: ResamplerParams, n_in=None) -> ResamplerCoeffs:
    """Design the polyphase filter of ``params`` (raises ``ValueError`` on bad params)."""
    fs_in = float(params.fs_in)
    if not (math.isfinite(fs_in) and fs_in > 0):
        raise ValueError(f"fs_in must be a positive finite sample rate, got {params.fs_in}")
    if params.up is not None or params.down is not None:
        if params.up is None or params.down is None:
            raise ValueError("give both up and down (or fs_out)")
        up, down = params.up, params.down
        if int(up) != up or int(down) != down or up < 1 or down < 1:
            raise ValueError(f"up and down must be positive integers, got {up}, {down}")
        r = Fraction(int(up), int(down))
        if params.fs_out is not None and _ratio(fs_in, params.fs_out) != r:
            raise ValueError(f"fs_out = {params.fs_out} disagrees with fs_in * up / down = "
                             f"{fs_in * int(up) / int(down)}")
    else:
        if params.fs_out is None:
            raise ValueError("give fs_out, or up and down")
        fs_out = float(params.fs_out)
        if not (math.isfinite(fs_out) and fs_out > 0):
            raise ValueError(f"fs_out must be a positive finite sample rate, got {params.fs_out}")
        r = _ratio(fs_in, fs_out)
    up, down = r.numerator, r.denominator
    max_rate = max(up, down)
    if max_rate > MAX_RATE:
        raise ValueError(
            f"rate change {up}/{down} (fs_in {fs_in}) is too fine: max(up, down) = {max_rate} "
            f"> {MAX_RATE}; choose sample rates with a simpler ratio or give up/down")
    if params.preset not in PRESETS:
        raise ValueError(
            f"unknown resampler preset {params.preset!r}; choose from {sorted(PRESETS)}")
    fac0, beta0, cut0 = PRESETS[params.preset]
    fac = params.half_len_factor if params.half_len_factor is not None else fac0
    beta = float(params.beta if params.beta is not None else beta0)
    cutoff = float(params.cutoff if params.cutoff is not None else cut0)
    if int(fac) != fac or fac < 1:
        raise ValueError(f"half_len_factor must be an integer >= 1, got {fac}")
    if not (math.isfinite(beta) and beta >= 0):
        raise ValueError(f"Kaiser beta must be >= 0, got {beta}")
    if not 0 < cutoff <= 1:
        raise ValueError(
            f"cutoff must lie in (0, 1] (fraction of min(fs_in, fs_out)/2), got {cutoff}")
    half_len = int(fac) * max_rate
    h = signal.firwin(2 * half_len + 1, cutoff / max_rate, window=("kaiser", beta)) * up
    K = -(-h.size // up)
    hp = np.zeros(K * up)
    hp[:h.size] = h
    taps = np.ascontiguousarray(hp.reshape(K, up).T)  # taps[p, m] = h[p + m up]
    return ResamplerCoeffs(fs_in, fs_in * up / down, int(up), int(down), half_len, beta, cutoff,
                           h, taps, taps.astype(np.float32))


def output_length(coeffs: ResamplerCoeffs, n: int) -> int:
    """Total output samples after ``n`` input samples: ``ceil(n up / down)``."""
    return -(-int(n) * coeffs.up // coeffs.down)


def block_output_length(coeffs: ResamplerCoeffs, state: dict, T: int) -> int:
    """Output samples that the next block of ``T`` input samples will produce from ``state``:
    ``max(0, ceil((T up - offset) / down))``."""
    r = int(state["offset"][0])
    return max(0, -(-(int(T) * coeffs.up - r) // coeffs.down))


def group_delay(coeffs: ResamplerCoeffs, unit: str = "out") -> float:
    """Group delay of the (linear-phase) resampling filter.

    ``unit``: ``"out"`` output samples (``half_len / down``), ``"in"`` input samples
    (``half_len / up``) or ``"s"`` seconds (``half_len / (up fs_in)``).
    """
    if unit == "out":
        return coeffs.half_len / coeffs.down
    if unit == "in":
        return coeffs.half_len / coeffs.up
    if unit == "s":
        return coeffs.half_len / (coeffs.up * coeffs.fs_in)
    raise ValueError(f"unit must be 'out', 'in' or 's', got {unit!r}")


def gain_db(coeffs: ResamplerCoeffs, f) -> np.ndarray:
    """Magnitude response (dB, 0 = unity) of the resampling filter at frequencies ``f``
    (Hz, array-like, 0 <= f <= up fs_in / 2): the gain applied to an input component at
    ``f`` (passband), or the attenuation of its alias / image (stop band)."""
    f = np.atleast_1d(np.asarray(f, dtype=np.float64))
    _, H = signal.freqz(coeffs.h / coeffs.up, worN=f, fs=coeffs.up * coeffs.fs_in)
    return 20 * np.log10(np.maximum(np.abs(H), 1e-300))


@numba.njit(**_JIT)
def polyphase_resample(taps, up, down, offset, hist, x, y):
    """Causal polyphase FIR resampling by ``up / down``, channels innermost.

    ``y[b, i, c] = sum_m taps[p, m] ext[b, H + n0 - m, c]`` with ``j = offset + i down``,
    ``n0 = j // up``, ``p = j % up``, ``ext = concat(hist, x)`` along time,
    ``H = K - 1`` (Crochiere & Rabiner 1983, sec. 3.3.3).  The taps are summed in
    the order ``m = 0 .. K-1`` whatever the block boundaries (bit-exact partitions).

    taps   : (up, K)    polyphase taps (dtype of x).
    offset : (1,) int64 next output's position on the upsampled grid relative to x[0];
             advanced in place to ``offset + n_out down - T up``.
    hist   : (B, K-1, C) last K-1 input samples, advanced in place.
    x      : (B, T, C)  input;  y : (B, n_out, C) output, ``n_out`` from
             :func:`block_output_length` (y may alias x: x is copied first).
    """
    B, T, C = x.shape
    K = taps.shape[1]
    H = K - 1
    nout = y.shape[1]
    r = offset[0]
    ext = np.empty((H + T, C), x.dtype)
    for b in range(B):
        hb = hist[b]
        xb = x[b]
        for t in range(H):
            for c in range(C):
                ext[t, c] = hb[t, c]
        for t in range(T):
            for c in range(C):
                ext[H + t, c] = xb[t, c]
        for i in range(nout):
            j = r + i * down
            n0 = j // up
            p = j - n0 * up
            yi = y[b, i]
            tp = taps[p]
            base = H + n0
            if C == 1:  # scalar accumulator: same order and arithmetic, no store/reload
                acc = tp[0] * ext[base, 0]
                for m in range(1, K):
                    acc += tp[m] * ext[base - m, 0]
                yi[0] = acc
                continue
            for c in range(C):
                yi[c] = 0.0
            for m in range(K):
                hm = tp[m]
                row = ext[base - m]
                for c in range(C):
                    yi[c] += hm * row[c]
        for t in range(H):
            for c in range(C):
                hb[t, c] = ext[T + t, c]
    offset[0] = r + nout * down - T * up


def _triton():
    """The Triton twin (:mod:`rtamt.resample.polyphase_triton`), imported on first
    binding."""
    from . import polyphase_triton
    return (polyphase_triton.polyphase_resample,)


class Resampler(Stage):
    """Streaming polyphase resampler: ``(T,)``, ``(C, T)`` or ``(batch, C, T)`` at ``fs_in``
    -> the same leading shape at ``fs_out = fs_in * up / down`` with
    ``T_out`` = :func:`block_output_length` (may be 0) samples per block.

    ``Resampler(fs_in=44100, fs_out=16000)`` or ``Resampler(fs_in=48000, up=1, down=3)``;
    see :class:`ResamplerParams` and the module docstring (delay, lengths, response).
    """

    #: the polyphase phase depends only on the samples heard, so streams stacked into one
    #: batch (rtamt.stack_states) must be at the same position and share it
    shared_state = ("offset",)

    name = "resample"
    in_kind = "channels"
    Params = ResamplerParams
    design = staticmethod(design)
    kernels = Kernels(numba=(polyphase_resample,), triton=_triton)

    @classmethod
    def grad_rule(cls):
        from .polyphase_grad import ResamplerGrad
        return ResamplerGrad

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        return {"hist": np.zeros((batch, coeffs.taps_per_phase - 1, n_in), dtype),
                "offset": np.zeros(1, np.int64)}

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        """Advance ``state`` over ``x`` (B, T, C); return (B, T_out, C) in x's dtype.
        ``out`` is used only if it has exactly that shape and dtype.  The kernel is
        :func:`polyphase_resample`, or its Triton twin
        (:mod:`rtamt.resample.polyphase_triton`) on the stage's bound kernels."""
        B, T, C = x.shape
        n = block_output_length(coeffs, state, T)
        k = stage.kern
        out = k.buffer(out, (B, n, C), x)
        taps = k.coef(coeffs.taps if k.is64(x) else coeffs.taps32)
        k.polyphase_resample(taps, coeffs.up, coeffs.down, state["offset"], state["hist"],
                             k.contiguous(x), out)
        return out

    # -- conveniences ---------------------------------------------------------------------
    @property
    def up(self) -> int:
        return self.coeffs.up

    @property
    def down(self) -> int:
        return self.coeffs.down

    @property
    def fs_in(self) -> float:
        return self.coeffs.fs_in

    @property
    def fs_out(self) -> float:
        return self.coeffs.fs_out

    @property
    def delay(self) -> float:
        """Group delay in output samples (``half_len / down``); see :func:`group_delay`."""
        return group_delay(self.coeffs, "out")

    @property
    def delay_s(self) -> float:
        """Group delay in seconds (``half_len / (up fs_in)``)."""
        return group_delay(self.coeffs, "s")

    def output_length(self, n: int) -> int:
        """Total output samples after ``n`` input samples: ``ceil(n up / down)``."""
        return output_length(self.coeffs, n)

    def next_block_length(self, T: int) -> int:
        """Output samples that the next block of ``T`` samples will produce."""
        if self._state is None:
            return output_length(self.coeffs, T)
        return block_output_length(self.coeffs, self._state, T)

    def load_state_dict(self, sd: dict) -> None:
        """As :meth:`Stage.load_state_dict`, and the phase ``offset`` must lie in
        ``[0, down)`` (checked before anything changes)."""
        arrays = sd.get("arrays") if isinstance(sd, dict) else None
        if arrays is not None and "offset" in arrays:
            off = np.asarray(arrays["offset"])
            if off.shape == (1,) and off.dtype == np.int64 and not 0 <= int(off[0]) < self.down:
                raise RtamtInputError(
                    f"{self.name}: snapshot offset {int(off[0])} outside [0, {self.down})")
        super().load_state_dict(sd)

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("resample-48k-16k", dict(fs_in=48000.0, fs_out=16000.0), "pair"),
                Example("resample-48k-44k1", dict(fs_in=48000.0, fs_out=44100.0), "pair"))
