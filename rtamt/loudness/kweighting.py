"""K-weighting, the frequency weighting of ITU-R BS.1770-4 (Annex 1), as a stage.

Two biquads in cascade: a high-shelf "pre-filter" (head acoustics, about +4 dB above
2 kHz, Annex 1 Table 1) and the "RLB" high-pass (revised low-frequency B-curve, Table 2).
The Recommendation publishes the coefficients for 48 kHz only.

**Analog prototypes.**  With the normalised Laplace variable ``p = s / (2 pi f0)``:

- pre-filter (high shelf)  ``H1(p) = (Vh p^2 + Vb p / Q + 1) / (p^2 + p / Q + 1)``
- RLB (high-pass)          ``H2(p) = g p^2 / (p^2 + p / Q + 1)``

The prototype parameters (module constants ``SHELF_*`` and ``RLB_*``) are the exact
inverse bilinear transform of the published 48 kHz coefficients (``K^2 = D(1)/D(-1)``,
``K/Q = 2 (1 - a2) / D(-1)``, ``Vh = N(-1)/D(-1)``, ``Vb = (b0 - b2) / (1 - a2)``,
``g = 1 + K/Q + K^2``, with ``N``/``D`` the numerator and denominator polynomials in
``z``; shelf ``f0`` = 1681.97 Hz, ``Q`` = 0.7072, ``Vh`` = +4.00 dB; RLB ``f0`` = 38.14 Hz,
``Q`` = 0.5003): the parameters libebur128 uses too.  :func:`k_weighting_sos_bilinear`
maps them back by the bilinear transform prewarped at ``f0`` (``K = tan(pi f0 / fs)``),
which gives Tables 1 and 2 at 48 kHz to rounding (|error| < 1e-12).

**Any rate: the 48 kHz response.**  What a meter at another rate should measure is what
it would measure on the same signal resampled to 48 kHz.  The 48 kHz filter is not the
analog prototype: the bilinear transform compresses its frequency axis (by 2.3 % at
4 kHz), and at a low rate the prewarped bilinear design compresses it more, around the
shelf's 1.7 kHz corner: at 8 kHz it reads a 1 kHz tone 0.20 dB low and is 0.29 dB off at
2.4 kHz (0.1 dB at 11.025 kHz, 0.01 dB at 32 kHz).  So :func:`k_weighting_sos` keeps the
published biquads at 48 kHz and, at any other rate ``fs``, designs the pre-filter as the
biquad whose log magnitude fits, in least squares, the target

    ``|H48(f)| / |H2_fs(f)|``  for ``f < min(fs / 2, 24 kHz)``
    (the published 48 kHz cascade over this rate's RLB high-pass), and
    ``|H1_fs(f)|``            for ``24 kHz <= f < fs / 2`` (the prototype's shelf by the
    prewarped bilinear transform, where 48 kHz has nothing to say),

on 512 frequencies uniform in ``(0, fs/2)``, by Gauss-Newton iterations (Nocedal & Wright,
*Numerical Optimization*, 2nd ed., sec. 10.3; the Jacobian of ``ln|B/A|`` is
``Re(z^-k / B)``, ``-Re(z^-k / A)``; a root leaving the unit circle is reflected back,
which keeps the magnitude) from the prewarped bilinear design;
the RLB high-pass keeps its prewarped bilinear design (its 38 Hz corner is far below any
Nyquist rate).  The fitted coefficients are rounded to 12 decimals, so the design is the
same on every machine.  Largest |error| against the 48 kHz response below
``min(fs/2, 24 kHz)``: 0.024 dB at 8 kHz (at 4 kHz, the top of the band), 0.008 dB at
11.025 kHz, 0.002 dB at 16 kHz, < 0.001 dB from 22.05 kHz up; tones (100 Hz, 1 kHz,
0.4 fs) and noise read within 0.008 LU of the same signal resampled to 48 kHz at every
rate from 8 to 192 kHz (``tests/loudness/test_bs1770.py``).  Below 8 kHz one biquad
cannot follow the shelf up to Nyquist: 0.06 dB at 6 kHz, 0.13 dB at 4 kHz.

The stage (:class:`KWeighting`) takes time-major ``(B, T, C)`` float32 or float64 blocks
and returns the K-weighted signal as float64 ``(B, T, C)``: the filter runs in float64
for either input dtype, with its state ``zi`` ``(B, 2, 2, C)`` (section, memory,
channel) in float64, so any partition of a stream gives the bits of one call.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from numba import njit

from ..engine.backend import Kernels, kernel_method
from ..engine.jit import JIT
from ..engine.stage import Stage

__all__ = ["KWeightingParams", "KWeightingCoeffs", "KWeighting", "k_weighting_sos",
           "k_weighting_sos_bilinear", "design", "k_weight", "BS1770_48K_PREFILTER",
           "BS1770_48K_RLB"]

#: BS.1770-4 Annex 1, Table 1: pre-filter (high shelf) at 48 kHz, (b, a).
BS1770_48K_PREFILTER = ((1.53512485958697, -2.69169618940638, 1.19839281085285),
                        (1.0, -1.69065929318241, 0.73248077421585))
#: BS.1770-4 Annex 1, Table 2: RLB high-pass at 48 kHz, (b, a).
BS1770_48K_RLB = ((1.0, -2.0, 1.0),
                  (1.0, -1.99004745483398, 0.99007225036621))

# Analog prototypes, from the exact inverse bilinear transform of the tables above.
SHELF_F0_HZ = 1681.9744509555323    #: pre-filter corner frequency (Hz)
SHELF_Q = 0.7071752369554194        #: pre-filter quality factor
SHELF_VH = 1.5848647011308554       #: pre-filter high-frequency gain (linear, +4.0 dB)
SHELF_VB = 1.2587209302325613       #: pre-filter band (s-term) gain (linear)
RLB_F0_HZ = 38.13547087611305       #: RLB corner frequency (Hz)
RLB_Q = 0.5003270373250421          #: RLB quality factor
RLB_GAIN = 1.0049948987146884       #: RLB pass-band gain (linear; published b = [1, -2, 1])


def _bilinear_biquad(num_p, den_p, f0: float, fs: float) -> np.ndarray:
    """Bilinear transform, prewarped at ``f0``, of ``N(p) / D(p)`` with ``p = s / (2 pi f0)``.

    ``num_p`` / ``den_p`` are ``(c2, c1, c0)`` for ``c2 p^2 + c1 p + c0``.  Substituting
    ``p = (1/K) (1 - z^-1) / (1 + z^-1)``, ``K = tan(pi f0 / fs)``, and multiplying by
    ``K^2 (1 + z^-1)^2`` gives the coefficients of ``z^0, z^-1, z^-2``:
    ``c2 + c1 K + c0 K^2``, ``2 (c0 K^2 - c2)``, ``c2 - c1 K + c0 K^2``.
    Returns one normalised sos row ``[b0, b1, b2, 1, a1, a2]``.
    """
    K = math.tan(math.pi * f0 / fs)

    def z_poly(c):
        c2, c1, c0 = c
        return np.array([c2 + c1 * K + c0 * K * K, 2.0 * (c0 * K * K - c2),
                         c2 - c1 * K + c0 * K * K])

    b, a = z_poly(num_p), z_poly(den_p)
    return np.concatenate([b / a[0], a / a[0]])


def k_weighting_sos_bilinear(fs: float) -> np.ndarray:
    """The analog prototypes (module docstring) by the bilinear transform prewarped at
    their corner frequencies, for sample rate ``fs`` (Hz), as ``(2, 6)`` sos (row 0 the
    pre-filter, row 1 the RLB high-pass).  At 48 kHz: BS.1770-4 Tables 1 and 2."""
    fs = float(fs)
    shelf = _bilinear_biquad((SHELF_VH, SHELF_VB / SHELF_Q, 1.0), (1.0, 1.0 / SHELF_Q, 1.0),
                             SHELF_F0_HZ, fs)
    rlb = _bilinear_biquad((RLB_GAIN, 0.0, 0.0), (1.0, 1.0 / RLB_Q, 1.0), RLB_F0_HZ, fs)
    return np.stack([shelf, rlb])


def _biquad_response(sec: np.ndarray, z1: np.ndarray) -> np.ndarray:
    """Complex response of one sos row at ``z1 = exp(-j w)``."""
    return (sec[0] + z1 * (sec[1] + z1 * sec[2])) / (sec[3] + z1 * (sec[4] + z1 * sec[5]))


#: frequencies of the pre-filter fit (uniform in (0, fs/2)) and its Gauss-Newton iterations
FIT_POINTS = 512
FIT_ITERATIONS = 40
#: the rate the published coefficients belong to (Hz)
PUBLISHED_FS = 48000.0


def _reflect_inside(c: np.ndarray) -> np.ndarray:
    """The quadratic ``c0 + c1 z^-1 + c2 z^-2`` with any root outside the unit circle
    reflected inside (``r -> 1 / conj(r)``), scaled to the same magnitude response."""
    r = np.roots(c)
    out = np.abs(r) > 1.0
    if not out.any():
        return c
    g = float(c[0]) * float(np.prod(np.abs(r[out])))
    return g * np.real(np.poly(np.where(out, 1.0 / np.conj(r), r)))


def _fit_prefilter(fs: float, rlb: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The pre-filter biquad for rate ``fs`` whose log magnitude fits the 48 kHz response
    (module docstring), Gauss-Newton from ``start`` (the prewarped bilinear shelf)."""
    n = FIT_POINTS
    w = np.pi * (np.arange(n) + 0.5) / n                   # rad / sample at fs
    f = w * fs / (2.0 * np.pi)
    z1 = np.exp(-1j * w)
    low = f < PUBLISHED_FS / 2
    pub = k_weighting_sos_bilinear(PUBLISHED_FS)
    z48 = np.exp(-2j * np.pi * f[low] / PUBLISHED_FS)
    target = np.empty(n)
    target[low] = np.log(np.abs(_biquad_response(pub[0], z48) * _biquad_response(pub[1], z48))
                         / np.abs(_biquad_response(rlb, z1[low])))
    target[~low] = np.log(np.abs(_biquad_response(start, z1[~low])))
    p = start[[0, 1, 2, 4, 5]].astype(np.float64)          # b0, b1, b2, a1, a2
    z2 = z1 * z1
    for _ in range(FIT_ITERATIONS):
        B = p[0] + p[1] * z1 + p[2] * z2
        A = 1.0 + p[3] * z1 + p[4] * z2
        resid = np.log(np.abs(B / A)) - target
        jac = np.stack([np.real(1 / B), np.real(z1 / B), np.real(z2 / B),
                        -np.real(z1 / A), -np.real(z2 / A)], axis=1)
        step = np.linalg.lstsq(jac, -resid, rcond=None)[0]
        p = p + step
        # a root that wandered outside the unit circle is reflected back (same magnitude)
        b = _reflect_inside(p[:3])
        a = _reflect_inside(np.array([1.0, p[3], p[4]]))
        p = np.concatenate([b / a[0], a[1:] / a[0]])
        if np.abs(step).max() < 1e-13:
            break
    return np.round(np.array([p[0], p[1], p[2], 1.0, p[3], p[4]]), 12)


def k_weighting_sos(fs: float) -> np.ndarray:
    """K-weighting filter (BS.1770-4 Annex 1) for sample rate ``fs`` (Hz) as ``(2, 6)`` sos
    ``[b0, b1, b2, 1, a1, a2]``.

    Row 0 is the pre-filter (high shelf), row 1 the RLB high-pass.  At 48 kHz: the
    published Tables 1 and 2 (:func:`k_weighting_sos_bilinear`); at any other rate the
    pre-filter is fitted to the 48 kHz response (module docstring), so a signal measured
    at ``fs`` reads what it reads resampled to 48 kHz.
    """
    fs = float(fs)
    sos = k_weighting_sos_bilinear(fs)
    if fs != PUBLISHED_FS:
        sos[0] = _fit_prefilter(fs, sos[1], sos[0])
    return sos


@dataclasses.dataclass(frozen=True)
class KWeightingParams:
    """fs: sample rate (Hz), finite and above ``2 * SHELF_F0_HZ`` (3364 Hz)."""

    fs: float = 48000.0

    def __post_init__(self):
        fs = float(self.fs)
        if not math.isfinite(fs) or fs <= 2.0 * SHELF_F0_HZ:
            raise ValueError(f"kweighting: fs must be a finite rate above "
                             f"{2 * SHELF_F0_HZ:.0f} Hz, got {self.fs!r}")
        object.__setattr__(self, "fs", fs)


@dataclasses.dataclass(frozen=True, eq=False)
class KWeightingCoeffs:
    """sos: ``(2, 6)`` float64 sections ``[b0, b1, b2, 1, a1, a2]`` (pre-filter, RLB)."""

    sos: np.ndarray


def design(params: KWeightingParams, n_in=None, weights=None) -> KWeightingCoeffs:
    """The K-weighting sections for ``params.fs`` (:func:`k_weighting_sos`)."""
    return KWeightingCoeffs(sos=k_weighting_sos(params.fs))


@njit(**JIT)
def k_weight(sos, zi, x, y):
    """K-weight time-major ``x`` ``(B, T, C)`` (float32/float64) into float64 ``y``.

    Two sections in DF-II transposed form, the difference equations of
    ``scipy.signal.sosfilt`` (Oppenheim & Schafer, *Discrete-Time Signal Processing*,
    3rd ed., sec. 6.5), in float64.  ``zi`` ``(B, 2, 2, C)`` float64, advanced in place.
    """
    B, T, C = x.shape
    for b in range(B):
        z = zi[b]
        for t in range(T):
            for c in range(C):
                v = np.float64(x[b, t, c])
                for s in range(2):
                    out = sos[s, 0] * v + z[s, 0, c]
                    z[s, 0, c] = sos[s, 1] * v - sos[s, 4] * out + z[s, 1, c]
                    z[s, 1, c] = sos[s, 2] * v - sos[s, 5] * out
                    v = out
                y[b, t, c] = v


def _triton():
    from .kweighting_triton import k_weight as t
    return (t,)


class KWeighting(Stage):
    """BS.1770-4 K-weighting of every channel (time-major ``(B, T, C)`` in, float64 out).

    State: ``zi`` ``(B, 2, 2, C)`` float64 (the two sections' memories)."""

    name = "kweighting"
    in_kind = "channels"
    Params = KWeightingParams
    design = staticmethod(design)
    kernels = Kernels(numba=(k_weight,), triton=_triton)

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        return {"zi": np.zeros((batch, 2, 2, n_in), np.float64)}

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        k = stage.kern
        y = k.buffer(out, x.shape, state["zi"])             # float64, like the state
        k.k_weight(k.coef(coeffs.sos), state["zi"], x, y)
        return y

    @classmethod
    def grad_rule(cls):
        from .kweighting_grad import KWeightingGrad

        return KWeightingGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("kweighting", dict(fs=48000.0), "pair", dtype_out="float64"),)
