"""Vectorisable exponentials and logarithms for compiled kernels (numba).

LLVM's loop vectoriser cannot vectorise calls to the C library's ``exp``/``log``
without a vector math library (SVML is not available in the llvmlite wheels), so a
kernel whose inner loop calls ``math.exp`` runs one scalar library call per element.
The functions here are pure arithmetic plus integer/float bit casts, which the
vectoriser turns into AVX2/AVX-512 code, an order of magnitude cheaper per element.

Exponential (Cody & Waite 1980, "Software Manual for the Elementary Functions",
ch. 6; Muller 2016, "Elementary Functions", 3rd ed., §11.3): ``e^x = 2^k e^r`` with
``k = round(x / ln 2)`` and ``r = x - k ln 2`` in [-ln2/2, ln2/2], computed with ``ln 2``
split into a short high part (``k ln2_hi`` exact) and a correction; ``e^r`` is a
Taylor polynomial (degree 13: truncation < 5e-18; Horner, or Estrin in ``exp_f64_short``)
and ``2^k`` is built from its IEEE-754 bit pattern.  ``2^{-t}`` in float32 needs no split
(``t - round(t)`` is exact).

Logarithm (Muller 2016, §11.3; Abramowitz & Stegun 4.1.28): ``x = 2^e m`` with
``m`` in [sqrt(1/2), sqrt(2)) from the bit pattern; ``ln m = 2 atanh(s)``,
``s = (m - 1)/(m + 1)``, ``|s| <= 0.1716``, by its odd series to ``s^23`` (truncation
< 3e-19); ``ln x = e ln 2 + ln m``.

Accuracy (tests/engine/test_fastexp.py, against numpy): float64 ``exp`` and ``log`` within
4 eps relative (measured: 1 and 2 ulp); float32 ``exp2_neg_f32`` within 2e-7 relative.
"""
from __future__ import annotations

import math

from numba import njit, types

from .intrinsics import bits_to_f32 as _bits_to_f32
from .intrinsics import bits_to_f64 as _bits_to_f64
from .intrinsics import f64_to_bits as _f64_to_bits
from .jit import INLINE as _INLINE

_LN2 = 0.6931471805599453
_LOG2E = 1.4426950408889634
# float64 split of ln 2 (fdlibm): k * _LN2_HI64 is exact for |k| < 2^20
_LN2_HI64 = 6.93147180369123816490e-01
_LN2_LO64 = 1.90821492927058770002e-10
_E13 = tuple(1.0 / math.factorial(n) for n in range(14))
_D7 = tuple((-_LN2) ** n / float(math.factorial(n)) for n in range(8))
_SQRT2 = 1.4142135623730951


@njit(**_INLINE)
def _exp_reduce(x):
    """Cody-Waite reduction: ``x`` (clamped to [-708, 709]) = ``k ln 2 + r``; returns
    (k as float, r) with ``|r| <= ln 2 / 2``."""
    xc = min(max(x, -708.0), 709.0)
    kf = math.floor(xc * _LOG2E + 0.5)
    return kf, (xc - kf * _LN2_HI64) - kf * _LN2_LO64


@njit(**_INLINE)
def _exp_scale(p, kf, x):
    """``p * 2^k`` from the bit pattern of ``2^k``; 0 below the normal range."""
    v = p * _bits_to_f64((types.int64(kf) + 1023) << 52)
    return v if x >= -708.0 else 0.0


@njit(**_INLINE)
def exp_f64(x):
    """``e^x`` in float64, vectorisable (relative error <= 4 eps).  ``x`` below -708 gives 0
    (the float64 normal range ends at e^-708; subnormals are flushed anyway), above
    709 it is clamped (e^709 = 8.2e307).  Horner's rule: fewest operations, for
    throughput-bound vector loops."""
    kf, r = _exp_reduce(x)
    p = _E13[13]
    p = p * r + _E13[12]
    p = p * r + _E13[11]
    p = p * r + _E13[10]
    p = p * r + _E13[9]
    p = p * r + _E13[8]
    p = p * r + _E13[7]
    p = p * r + _E13[6]
    p = p * r + _E13[5]
    p = p * r + _E13[4]
    p = p * r + _E13[3]
    p = p * r + _E13[2]
    p = p * r + 1.0
    p = p * r + 1.0
    return _exp_scale(p, kf, x)


@njit(**_INLINE)
def exp_f64_short(x):
    """:func:`exp_f64` with the same polynomial evaluated by Estrin's scheme (Knuth,
    TAOCP vol. 2, 4.6.4): 5 dependent steps instead of 13, for scalar code whose time
    goes into latency (the adaptation-loop limiter).  Same accuracy bound (4 eps;
    measured 1.97 eps over [-700, 700]); results may differ from :func:`exp_f64` in the
    last bits."""
    kf, r = _exp_reduce(x)
    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    q0 = (1.0 + r) + (_E13[2] + _E13[3] * r) * r2
    q1 = (_E13[4] + _E13[5] * r) + (_E13[6] + _E13[7] * r) * r2
    q2 = (_E13[8] + _E13[9] * r) + (_E13[10] + _E13[11] * r) * r2
    q3 = _E13[12] + _E13[13] * r
    p = (q0 + q1 * r4) + (q2 + q3 * r4) * r8
    return _exp_scale(p, kf, x)


@njit(**_INLINE)
def log_f64(x):
    """Natural logarithm of a positive normal float64, vectorisable (relative error
    <= 4 eps).
    The caller guarantees ``x > 0`` (0, negatives, inf and NaN are not handled)."""
    b = _f64_to_bits(x)
    e = (b >> 52) - 1023
    m = _bits_to_f64((b & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000)
    big = m > _SQRT2
    m = m * 0.5 if big else m
    ef = types.float64(e + 1 if big else e)
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    q = 1.0 / 23.0
    q = q * s2 + 1.0 / 21.0
    q = q * s2 + 1.0 / 19.0
    q = q * s2 + 1.0 / 17.0
    q = q * s2 + 1.0 / 15.0
    q = q * s2 + 1.0 / 13.0
    q = q * s2 + 1.0 / 11.0
    q = q * s2 + 1.0 / 9.0
    q = q * s2 + 1.0 / 7.0
    q = q * s2 + 1.0 / 5.0
    q = q * s2 + 1.0 / 3.0
    lm = 2.0 * s + 2.0 * s * s2 * q
    return ef * _LN2_HI64 + (lm + ef * _LN2_LO64)


@njit(**_INLINE)
def exp2_neg_f32(t):
    """``2^{-t}`` in float32 for ``t >= 0`` (relative error < 2e-7; ``t`` is clamped at
    125).  ``r = t - round(t)`` is exact, so no Cody-Waite split is needed; ``2^{-r}``
    is the degree-7 Taylor polynomial of ``e^{-r ln 2}``, ``|r ln 2| <= 0.35``."""
    t = min(t, types.float32(125.0))
    k = types.int32(t + types.float32(0.5))
    r = t - types.float32(k)
    p = types.float32(_D7[7])
    p = p * r + types.float32(_D7[6])
    p = p * r + types.float32(_D7[5])
    p = p * r + types.float32(_D7[4])
    p = p * r + types.float32(_D7[3])
    p = p * r + types.float32(_D7[2])
    p = p * r + types.float32(_D7[1])
    p = p * r + types.float32(_D7[0])
    return p * _bits_to_f32(types.int32((127 - k) << 23))
