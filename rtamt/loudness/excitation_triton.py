"""Triton twin of the excitation stage's kernel (:mod:`rtamt.loudness.excitation`):
the level-dependent lower skirts of the roex filters (ANSI S3.4-2007 §3.5), bit for bit
numba's in Triton's interpreter (see :mod:`rtamt.loudness.triton_common`)."""

from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

from ..engine import fastexp as _FX
from .excitation import SKIRT_FLUSH
from .triton_common import _F64, _K10, _check, _check_index

# constants of rtamt.engine.fastexp's exp2_neg_f32 (float32) and log_f64 (float64); the
# float32 ones pre-rounded to float32 as numba's types.float32(...) does
_LN2_32 = tl.constexpr(float(np.float32(math.log(2.0))))
_D0, _D1, _D2, _D3, _D4, _D5, _D6, _D7 = (tl.constexpr(float(np.float32(c))) for c in _FX._D7)
_LN2_HI64 = tl.constexpr(_FX._LN2_HI64)
_LN2_LO64 = tl.constexpr(_FX._LN2_LO64)
_SQRT2 = tl.constexpr(_FX._SQRT2)
_MANT64 = tl.constexpr(0xFFFFFFFFFFFFF)
_ONE64 = tl.constexpr(0x3FF0000000000000)
_Q3, _Q5, _Q7, _Q9, _Q11, _Q13, _Q15, _Q17, _Q19, _Q21, _Q23 = (
    tl.constexpr(1.0 / k) for k in range(3, 24, 2))                 # 1/3, ..., 1/23


#
# The two helpers below are rtamt.engine.fastexp's exp2_neg_f32 and log_f64, operation by
# operation, with tl.fma exactly where numba's machine code for excitation.lower_skirt has an
# FMA (its fastmath 'contract' lets LLVM fuse; checked with lower_skirt.inspect_asm on
# x86-64: every Horner step, ``1 + t ln 2``, the float32 accumulation, the two-part
# ``e ln 2 + ln m``, ``lm = 2s + (2s s^2) q``, ``10/ln10 * ln x - 51`` and ``1 - c_slope x``
# are fused; ``s^2``, ``2s s^2``, the division and the 2^k scaling are not).  The kernel
# is launched with enable_fp_fusion=False, so nothing else is fused.


@triton.jit
def _exp2_neg_f32(t):
    """``2^-t`` in float32 for ``t >= 0`` (``t`` clamped at 125), bit for bit
    :func:`rtamt.engine.fastexp.exp2_neg_f32`: ``k = int(t + 1/2)``, ``r = t - k`` (exact),
    degree-7 Taylor polynomial of ``e^{-r ln 2}`` (Horner, fused) times ``2^-k`` built from
    its float32 bit pattern ``(127 - k) << 23``."""
    t = tl.minimum(t, 125.0)
    k = (t + 0.5).to(tl.int32)
    r = t - k.to(tl.float32)
    p = tl.fma(tl.full(t.shape, _D7, tl.float32), r, _D6)
    p = tl.fma(p, r, _D5)
    p = tl.fma(p, r, _D4)
    p = tl.fma(p, r, _D3)
    p = tl.fma(p, r, _D2)
    p = tl.fma(p, r, _D1)
    p = tl.fma(p, r, _D0)
    return p * ((127 - k) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _log_f64(x):
    """Natural logarithm of a positive normal float64, bit for bit
    :func:`rtamt.engine.fastexp.log_f64` (as numba fuses it): ``x = 2^e m`` from the bit
    pattern, ``m`` in [sqrt(1/2), sqrt(2)), ``ln m = 2 atanh(s)``, ``s = (m - 1)/(m + 1)``,
    odd series to ``s^23``; ``ln x = e ln2_hi + (ln m + e ln2_lo)``."""
    b = x.to(tl.int64, bitcast=True)
    e = (b >> 52) - 1023
    m = ((b & _MANT64) | _ONE64).to(tl.float64, bitcast=True)
    big = m > _SQRT2
    m = tl.where(big, m * 0.5, m)
    ef = tl.where(big, e + 1, e).to(tl.float64)
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    q = tl.fma(tl.full(s.shape, _Q23, tl.float64), s2, _Q21)
    q = tl.fma(q, s2, _Q19)
    q = tl.fma(q, s2, _Q17)
    q = tl.fma(q, s2, _Q15)
    q = tl.fma(q, s2, _Q13)
    q = tl.fma(q, s2, _Q11)
    q = tl.fma(q, s2, _Q9)
    q = tl.fma(q, s2, _Q7)
    q = tl.fma(q, s2, _Q5)
    q = tl.fma(q, s2, _Q3)
    s_2 = s + s
    lm = tl.fma(s_2 * s2, q, s_2)
    return tl.fma(ef, _LN2_HI64, tl.fma(ef, _LN2_LO64, lm))


@triton.jit
def _skirt_kernel(P_ptr, lvl_ptr, c_slope: tl.float64, a_ptr, b_ptr, i0_ptr, seg_ptr,
                  cnt_ptr, E_ptr, J, nf, FLUSH: tl.constexpr, BLOCK: tl.constexpr):
    c_slope = tl.full([], c_slope, tl.float64)
    n = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = i < nf
    e = tl.load(E_ptr + n * nf + i, mask=m, other=0.0)
    acc = tl.zeros([BLOCK], tl.float32)
    for j in range(J):
        pj = tl.load(P_ptr + n * J + j)
        lv = tl.load(lvl_ptr + n * J + j)
        # s_j = 1 - c_slope (X_j - 51), X_j the level per ERB in dB (float64, then float32)
        x_db = tl.fma(_log_f64(tl.maximum(lv, 1e-10)), _K10, -51.0)
        sj = tl.fma(-x_db, c_slope, 1.0).to(tl.float32)
        k0 = tl.load(i0_ptr + j)
        sg = tl.load(seg_ptr + j)
        cj = tl.load(cnt_ptr + j)
        q = i - k0
        # (a scalar condition is applied with tl.where: the interpreter splats a scalar
        # boolean to int32, which a load mask rejects)
        v = tl.where(pj != 0.0, m & (q >= 0) & (q < cj), False)
        aa = tl.load(a_ptr + sg + q, mask=v, other=0.0)
        bb = tl.load(b_ptr + sg + q, mask=v, other=0.0)
        t = tl.maximum(bb, aa * sj)
        # roex weight (1 + t ln 2) 2^-t (float32, fused as numba fuses it)
        w = tl.fma(t, _LN2_32, 1.0) * _exp2_neg_f32(t)
        acc = tl.where(v, tl.fma(w, pj.to(tl.float32), acc), acc)
        flush = (j % FLUSH == FLUSH - 1) | (j == J - 1)
        e = tl.where(flush, e + acc.to(tl.float64), e)
        acc = tl.where(flush, 0.0, acc)
    tl.store(E_ptr + n * nf + i, e, mask=m)


def lower_skirt(P, lvl, c_slope, a, b, i0, seg, cnt, E):
    """Add the level-dependent lower skirts of the roex filters to ``E`` (Triton).

    Mirrors :func:`rtamt.loudness.excitation.lower_skirt` (ANSI S3.4-2007 §3.5; roex
    weights of Patterson et al. 1982): for component j below the centre of filter i,
    ``s_j = 1 - c_slope (X_j - 51)`` (``X_j = 10 log10 max(lvl, 1e-10)`` dB),
    ``t = max(b_ij, a_ij s_j)``, ``W = (1 + t ln 2) 2^-t`` and ``E_i += W P_j``.

    P       : (N, J) float64   component powers (linear, 1.0 = 0 dB).
    lvl     : (N, J) float64   level per ERB at each component (linear).
    c_slope : float            0.35 / p51_1k.
    a, b    : (S,) float32     flat pair tables (``ExcitationCoeffs.a``, ``.b``).
    i0, seg, cnt : (J,) int64  first filter, table offset and padded pair count of
                               component j.
    E       : (N, nf) float64  excitation, accumulated in place.

    One program per (frame, tile of filters), one lane per filter i; the lane loops over
    the J components in order.  As in numba, ``s_j`` is rounded to float32 and the
    weights, products and partial sums are float32; a lane's partial sum is added to
    its float64 ``E`` after every ``SKIRT_FLUSH`` components (the same groups as numba)
    and reset.  Lanes outside a component's pair range, and components with ``P == 0``,
    add nothing.
    """
    N, J = P.shape
    nf = E.shape[1]
    _check(_F64, P=P, lvl=lvl, E=E)
    _check(torch.float32, a=a, b=b)
    _check_index(i0=i0, seg=seg, cnt=cnt)
    assert lvl.shape == (N, J) and E.shape[0] == N and i0.shape == seg.shape == cnt.shape == (J,)
    if N == 0 or J == 0 or nf == 0:
        return
    blk = min(256, triton.next_power_of_2(nf))
    _skirt_kernel[(N, triton.cdiv(nf, blk))](P, lvl, float(c_slope), a, b, i0, seg, cnt, E,
                                             J, nf, FLUSH=SKIRT_FLUSH, BLOCK=blk,
                                             num_warps=4, enable_fp_fusion=False)


def excitation_db(E):
    """``10 log10 max(E, 1e-10)`` on a tensor (mirrors
    :func:`rtamt.loudness.excitation.excitation_db`)."""
    return 10.0 * torch.log10(torch.clamp_min(E, 1e-10))
