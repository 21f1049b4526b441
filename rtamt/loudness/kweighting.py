"""K-weighting, the frequency weighting of ITU-R BS.1770-4 (Annex 1), as a stage.

Two biquads in cascade: a high-shelf "pre-filter" (head acoustics, about +4 dB above
2 kHz, Annex 1 Table 1) and the "RLB" high-pass (revised low-frequency B-curve, Table 2).
The Recommendation publishes the coefficients for 48 kHz only; :func:`k_weighting_sos`
designs them for any sample rate from analog prototypes by the bilinear transform,
prewarped at the prototype's corner frequency ``f0`` (``K = tan(pi f0 / fs)``).  With the
normalised Laplace variable ``p = s / (2 pi f0)``:

- pre-filter (high shelf)  ``H1(p) = (Vh p^2 + Vb p / Q + 1) / (p^2 + p / Q + 1)``
- RLB (high-pass)          ``H2(p) = g p^2 / (p^2 + p / Q + 1)``

The prototype parameters (module constants ``SHELF_*`` and ``RLB_*``) are the exact
inverse bilinear transform of the published 48 kHz coefficients (``K^2 = D(1)/D(-1)``,
``K/Q = 2 (1 - a2) / D(-1)``, ``Vh = N(-1)/D(-1)``, ``Vb = (b0 - b2) / (1 - a2)``,
``g = 1 + K/Q + K^2``, with ``N``/``D`` the numerator and denominator polynomials in
``z``), so the design reproduces Tables 1 and 2 at 48 kHz to rounding (|error| < 1e-12)
and keeps the same analog response at other rates.

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

__all__ = ["KWeightingParams", "KWeightingCoeffs", "KWeighting", "k_weighting_sos", "design",
           "k_weight", "BS1770_48K_PREFILTER", "BS1770_48K_RLB"]

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


def k_weighting_sos(fs: float) -> np.ndarray:
    """K-weighting filter (BS.1770-4 Annex 1) for sample rate ``fs`` (Hz) as ``(2, 6)`` sos.

    Row 0 is the pre-filter (high shelf), row 1 the RLB high-pass, both from their
    analog prototypes (module docstring) by the prewarped bilinear transform.  At
    48 kHz the rows equal the published Tables 1 and 2.
    """
    fs = float(fs)
    shelf = _bilinear_biquad((SHELF_VH, SHELF_VB / SHELF_Q, 1.0), (1.0, 1.0 / SHELF_Q, 1.0),
                             SHELF_F0_HZ, fs)
    rlb = _bilinear_biquad((RLB_GAIN, 0.0, 0.0), (1.0, 1.0 / RLB_Q, 1.0), RLB_F0_HZ, fs)
    return np.stack([shelf, rlb])


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


class KWeighting(Stage):
    """BS.1770-4 K-weighting of every channel (time-major ``(B, T, C)`` in, float64 out).

    State: ``zi`` ``(B, 2, 2, C)`` float64 (the two sections' memories)."""

    name = "kweighting"
    in_kind = "channels"
    Params = KWeightingParams
    design = staticmethod(design)
    kernels = Kernels(numba=(k_weight,))

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        return {"zi": np.zeros((batch, 2, 2, n_in), np.float64)}

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        k = stage.kern
        y = out if (out is not None and out.shape == x.shape and out.dtype == np.float64
                    and out.flags.c_contiguous) else np.empty(x.shape, np.float64)
        k.k_weight(coeffs.sos, state["zi"], x, y)
        return y
