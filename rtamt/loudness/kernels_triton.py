"""Triton versions of the loudness-model kernels of :mod:`rtamt.loudness.kernels`.

Kernel by kernel, each public function here has the name, the argument order and the
argument meaning of the numba kernel it mirrors, but takes torch tensors (all on one
device, all contiguous) instead of numpy arrays: the spectrum of Glasberg & Moore (2002,
J. Audio Eng. Soc. 50, 331-342, §2.1), the excitation pattern and specific loudness of
ANSI S3.4-2007 (Moore, Glasberg & Baer 1997), the "AGC" integrators of Glasberg & Moore
(2002, eqs. 5-6) and the binaural inhibition of Moore et al. (2016, Trends in Hearing 20)
/ Moore & Glasberg (2007, JASA 121, 1604-1612).  In-place arguments are advanced in place
and outputs are preallocated tensors that the kernel writes, as in numba;
:func:`band_ranges` and :func:`matmul_rows` return new tensors, as in numba.

dtypes are those the callers in :mod:`rtamt.loudness` and :mod:`rtamt.models` use: every
signal, state and coefficient tensor is float64 (the loudness models convert their input
to float64), except the lower-skirt tables ``a``, ``b`` of :func:`lower_skirt`, which are
float32 and whose weights are computed in float32 as in numba; index tensors are int64.
The wrappers assert these dtypes.  Scalar coefficients (``c_slope``, ``aa``, ``ar``,
``p``, ``C``) are Python floats; the kernels declare them ``tl.float64`` so that a
compiled launch passes them as doubles (an unannotated float argument would be float32).

Layout of the work (one Triton lane per independent output element or recursion):

* recursions (:func:`agc`, :func:`agc_rows`, :func:`binaural_frames`, the chunk ring of
  :func:`spectrum_chunks`) keep their state in registers: a lane loads it once, loops
  over the block's frames or chunks inside the kernel and stores it at the end.  The
  number of frames is only a loop bound, so the arithmetic of one frame depends only on
  the state and on that frame's input: any partition of the frames into calls gives
  bit-identical results on this path, as on the numba path;
* sums whose order numba fixes (the lower-skirt float32 partial sums flushed every
  ``SKIRT_FLUSH`` components, the row-wise products, autocorrelations, group sums) run
  in the same order per output element, so they differ from numba only where one
  compiler contracts a product into an FMA and the other does not;
* the one reduction whose order is not kept is the sum over the 150 channels in
  :func:`binaural_frames` (``tl.sum``, a tree): its relative error stays at a few 1e-16.

All kernels but :func:`lower_skirt` are launched with ``enable_fp_fusion=True``, because
numba compiles all of :mod:`rtamt.loudness.kernels` with ``fastmath={'contract'}`` (FMA
contraction allowed; which products each compiler fuses may differ: the last bits only).
:func:`lower_skirt` is exact instead: it evaluates rtamt's own float32 ``exp2_neg_f32``
and float64 ``log_f64`` (:mod:`rtamt.engine.fastexp`) operation by operation, with
``tl.fma`` exactly where numba's x86-64 machine code for the kernel has an FMA (read with
``inspect_asm`` on an AVX-512 machine; the vector and the scalar remainder loops fuse the
same operations), launched with ``enable_fp_fusion=False`` so that nothing else is fused;
in the interpreter its excitation is bit-identical to numba's.  (On an x86 CPU without
FMA numba would not fuse at all, and the two would again differ in the last bits.)

Checked only in Triton's interpreter (``TRITON_INTERPRET=1``, CPU tensors) against the
numba kernels, and compiled (not run) for sm_80 with Triton 3.9's CUDA backend
(``tests/test_triton_loudness.py``).  Not checked on a real GPU:

* the float64 ``tl.exp``/``tl.log`` of the other kernels (libdevice code inlined into the
  PTX; the interpreter uses numpy's);
* that :func:`lower_skirt` is bit-identical on a device.  The compile test checks its
  sm_80 PTX: exactly the explicit FMAs as ``fma.rn`` (one rounding, as x86's FMA), every
  other float operation ``.rn``, the float-to-int conversion truncating (``cvt.rzi``, as
  numba's), no ``.ftz`` (float32 subnormals kept, as on the CPU) and no approximate
  ``ex2``/``lg2``; what ptxas and the hardware then do with it is not checked;
* the ``tl.float64`` scalar arguments on a real launch (the interpreter passes the
  Python float as is; the compile test checks that the annotations give ``fp64``
  parameters and compiles with them, but no launch passes a double to a device);
* read-after-write through global memory within one lane: the chunk ring of
  :func:`spectrum_chunks` (slot ``rho`` is read, then rewritten, and read again C chunks
  later) and the read-modify-write of ``P`` in :func:`group_add` (consecutive bins of
  one group update the same element).  Correct in program order; the compile test checks
  that the PTX of these kernels has no asynchronous copies (``cp.async``) or
  non-coherent loads (``ld.global.nc``) that could reorder them;
* the reduction order of ``tl.sum`` on the device (the interpreter's is numpy's);
* scalar stores (every thread of a program writes the same value to ``ste``/``lte``).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

from ..engine import fastexp as _FX
from .kernels import SKIRT_FLUSH, SKIRT_PAD

__all__ = ["SKIRT_PAD", "SKIRT_FLUSH", "lower_skirt", "specific_loudness", "agc", "agc_rows",
           "binaural_frames", "spectrum_chunks", "autocorr_frames", "group_add",
           "band_ranges", "rowwise_matmul", "matmul_rows"]

BLOCK = 64
"""Lanes per Triton program of the one-dimensional kernels (a power of two)."""

_NUM_WARPS = 2
_F64 = torch.float64

# module constants (a constexpr must stand to the right of a tensor operand: the
# interpreter does not turn ``constexpr * tensor`` back into a tensor)
_K10 = tl.constexpr(10.0 / math.log(10.0))          # dB from ln(power)
_LN2 = tl.constexpr(math.log(2.0))
_INV_10707 = tl.constexpr(1.0 / 1.0707)             # ANSI S3.4-2007 eq. 19
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


def _grid(n: int, block: int = BLOCK) -> tuple:
    return (triton.cdiv(n, block),)


def _check(dtype=None, **tensors) -> None:
    for name, t in tensors.items():
        assert t.is_contiguous(), f"{name} must be contiguous"
        if dtype is not None:
            assert t.dtype == dtype, f"{name} must be {dtype}, got {t.dtype}"


def _check_index(**tensors) -> None:
    for name, t in tensors.items():
        assert t.is_contiguous(), f"{name} must be contiguous"
        assert t.dtype == torch.int64, f"{name} must be int64, got {t.dtype}"


@triton.jit
def _lane_ids(BLOCK: tl.constexpr):
    """Global lane indices of this program (int64, so that offsets do not overflow)."""
    return tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)


@triton.jit
def _pymod(v, C):
    """``v mod C`` with Python's sign convention (result in ``[0, C)`` for ``C > 0``);
    Triton's ``%`` truncates like C."""
    return (v % C + C) % C


@triton.jit
def _agc_step(x, y, aa, ar):
    """Asymmetric one-pole smoother ``y + a (x - y)``, ``a = aa`` if ``x > y`` else ``ar``
    (Glasberg & Moore 2002, eqs. 5-6; Moore et al. 2016)."""
    return y + tl.where(x > y, aa, ar) * (x - y)


# --- excitation: level-dependent lower skirts -----------------------------------------
#
# The two helpers below are rtamt.engine.fastexp's exp2_neg_f32 and log_f64, operation by
# operation, with tl.fma exactly where numba's machine code for kernels.lower_skirt has an
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

    Mirrors :func:`rtamt.loudness.kernels.lower_skirt` (ANSI S3.4-2007 §3.5; roex
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


# --- specific loudness ----------------------------------------------------------------


@triton.jit
def _sl_kernel(E_ptr, G_ptr, A_ptr, al_ptr, Aal_ptr, thr_ptr, C: tl.float64, out_ptr, N, K,
               BLOCK: tl.constexpr):
    C = tl.full([], C, tl.float64)
    i = _lane_ids(BLOCK)
    m = i < N * K
    k = i % K
    e = tl.load(E_ptr + i, mask=m, other=0.0)
    g = tl.load(G_ptr + k, mask=m, other=1.0)
    a = tl.load(A_ptr + k, mask=m, other=1.0)
    al = tl.load(al_ptr + k, mask=m, other=1.0)
    aal = tl.load(Aal_ptr + k, mask=m, other=1.0)
    thr = tl.load(thr_ptr + k, mask=m, other=1.0)
    hi = e > 1e10
    ep = tl.maximum(e, 1e-300)
    u = tl.where(hi, ep * _INV_10707, g * ep + a)
    v = tl.exp(tl.where(hi, 0.2, al) * tl.log(u)) - tl.where(hi, 0.0, aal)
    r = 2.0 * e / (e + thr)
    v = tl.where(e < thr, v * (r * tl.sqrt(r)), v)
    tl.store(out_ptr + i, tl.where(e > 0.0, C * v, 0.0), mask=m)


def specific_loudness(E, G, A, alpha, A_alpha, ethrq, C, out):
    """Specific loudness N' (sone/Cam) from linear excitation (Triton).

    Mirrors :func:`rtamt.loudness.kernels.specific_loudness`, ANSI S3.4-2007 eqs. 17-19
    (Moore, Glasberg & Baer 1997): ``N' = C [(G E + A)^alpha - A^alpha]``, times
    ``(2E / (E + E_THRQ))^1.5`` below threshold; ``C (E / 1.0707)^0.2`` above 1e10
    (100 dB); 0 for ``E <= 0``.

    E       : (N, K) float64  linear excitation (1.0 = 0 dB).
    G, A, alpha, A_alpha, ethrq : (K,) float64  per-channel constants
              (:class:`rtamt.loudness.ansi.SpecificLoudnessCoeffs`).
    C       : float           scaling constant.
    out     : (N, K) float64  written.

    One lane per element, float64 throughout (powers as ``exp(alpha log u)``).
    """
    N, K = E.shape
    _check(_F64, E=E, G=G, A=A, alpha=alpha, A_alpha=A_alpha, ethrq=ethrq, out=out)
    assert out.shape == (N, K) and G.shape == A.shape == alpha.shape == A_alpha.shape \
        == ethrq.shape == (K,)
    if N * K == 0:
        return
    _sl_kernel[_grid(N * K, 256)](E, G, A, alpha, A_alpha, ethrq, float(C), out, N, K,
                                  BLOCK=256, num_warps=4, enable_fp_fusion=True)


# --- AGC integrators ------------------------------------------------------------------


@triton.jit
def _agc_kernel(x_ptr, y_ptr, aa: tl.float64, ar: tl.float64, out_ptr, N, K,
                BLOCK: tl.constexpr):
    aa = tl.full([], aa, tl.float64)
    ar = tl.full([], ar, tl.float64)
    k = _lane_ids(BLOCK)
    m = k < K
    y = tl.load(y_ptr + k, mask=m, other=0.0)
    for n in range(N):
        y = _agc_step(tl.load(x_ptr + n * K + k, mask=m, other=0.0), y, aa, ar)
        tl.store(out_ptr + n * K + k, y, mask=m)
    tl.store(y_ptr + k, y, mask=m)


def agc(x, y, aa, ar, out):
    """Asymmetric one-pole "AGC" per channel, frame by frame (Triton).

    Mirrors :func:`rtamt.loudness.kernels.agc` (Glasberg & Moore 2002, eqs. 5-6):
    ``y <- y + a (x - y)``, ``a = aa`` (attack) where ``x > y`` else ``ar`` (release).

    x   : (N, K) float64  input frames (sone).
    y   : (K,) float64    state (the last output), advanced in place.
    aa, ar : float        attack and release coefficients per frame.
    out : (N, K) float64  written.

    One lane per channel; the lane holds ``y`` in a register over the N frames.
    """
    N, K = x.shape
    _check(_F64, x=x, y=y, out=out)
    assert y.shape == (K,) and out.shape == (N, K)
    if K == 0:
        return
    _agc_kernel[_grid(K)](x, y, float(aa), float(ar), out, N, K, BLOCK=BLOCK,
                          num_warps=_NUM_WARPS, enable_fp_fusion=True)


@triton.jit
def _agc_rows_kernel(x_ptr, y_ptr, aa: tl.float64, ar: tl.float64, out_ptr, R, F, K,
                     BLOCK: tl.constexpr):
    aa = tl.full([], aa, tl.float64)
    ar = tl.full([], ar, tl.float64)
    i = _lane_ids(BLOCK)
    m = i < R * K
    r = i // K
    k = i - r * K
    y = tl.load(y_ptr + i, mask=m, other=0.0)
    for f in range(F):
        y = _agc_step(tl.load(x_ptr + (r * F + f) * K + k, mask=m, other=0.0), y, aa, ar)
        tl.store(out_ptr + (f * R + r) * K + k, y, mask=m)
    tl.store(y_ptr + i, y, mask=m)


def agc_rows(x, y, aa, ar, out):
    """:func:`agc` for row-major input (Triton); mirrors
    :func:`rtamt.loudness.kernels.agc_rows` (the short-term AGC of Moore et al. 2016).

    x   : (R, F, K) float64  frames of R rows (specific loudness, sone/Cam).
    y   : (R, K) float64     state, advanced in place.
    aa, ar : float
    out : (F, R, K) float64  written (frame-major).

    One lane per (row, channel).
    """
    R, F, K = x.shape
    _check(_F64, x=x, y=y, out=out)
    assert y.shape == (R, K) and out.shape == (F, R, K)
    if R * K == 0:
        return
    _agc_rows_kernel[_grid(R * K)](x, y, float(aa), float(ar), out, R, F, K, BLOCK=BLOCK,
                                   num_warps=_NUM_WARPS, enable_fp_fusion=True)


# --- binaural inhibition --------------------------------------------------------------


@triton.jit
def _sech_pow(num, den, p):
    """``sech(num/den)^p`` as ``exp(-p ln cosh x)``, ``ln cosh x = x - ln 2 +
    ln(1 + e^{-2x})``; 1 where ``num <= 0``, 0 where ``den <= 0`` (mirrors numba's
    ``_sech_pow``)."""
    x = tl.minimum(num / tl.maximum(den, 1e-300), 1e300)
    lc = x - _LN2 + tl.log(1.0 + tl.exp(-2.0 * x))
    v = tl.exp(-p * lc)
    v = tl.where(den > 0.0, v, 0.0)
    return tl.where(num > 0.0, v, 1.0)


@triton.jit
def _binaural_kernel(st_ptr, S_ptr, E_ptr, lt_ptr, aa: tl.float64, ar: tl.float64,
                     p: tl.float64, spec_ptr, exc_ptr, ste_ptr, lte_ptr, F, R, K,
                     DIOTIC: tl.constexpr, KP: tl.constexpr):
    aa = tl.full([], aa, tl.float64)
    ar = tl.full([], ar, tl.float64)
    p = tl.full([], p, tl.float64)
    b = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, KP)
    m = k < K
    if DIOTIC:
        r0 = b * 0
        r1 = r0
    else:
        r0 = 2 * b
        r1 = r0 + 1
    lt0 = tl.load(lt_ptr + r0)
    lt1 = tl.load(lt_ptr + r1)
    o0 = (b * 2 * K + k) * F            # spec/exc [b, 0, k, f] = o0 + f
    o1 = o0 + K * F                     # [b, 1, k, f]
    for f in range(F):
        fr0 = (f * R + r0) * K + k
        fr1 = (f * R + r1) * K + k
        sl = tl.load(S_ptr + fr0, mask=m, other=0.0)
        sr = tl.load(S_ptr + fr1, mask=m, other=0.0)
        # inhibition factors I = 2 / (1 + sech(other/own)^p) (Moore & Glasberg 2007 eq. 1)
        il = 2.0 / (1.0 + _sech_pow(sr, sl, p))
        ir = 2.0 / (1.0 + _sech_pow(sl, sr, p))
        v0 = tl.load(st_ptr + fr0, mask=m, other=0.0) / il
        v1 = tl.load(st_ptr + fr1, mask=m, other=0.0) / ir
        tl.store(spec_ptr + o0 + f, v0, mask=m)
        tl.store(spec_ptr + o1 + f, v1, mask=m)
        tot0 = tl.sum(tl.where(m, v0, 0.0), axis=0) * 0.25
        tot1 = tl.sum(tl.where(m, v1, 0.0), axis=0) * 0.25
        lt0 = _agc_step(tot0, lt0, aa, ar)
        if DIOTIC:
            lt1 = lt0
        else:
            lt1 = _agc_step(tot1, lt1, aa, ar)
        so = (b * 2) * F + f
        tl.store(ste_ptr + so, tot0)
        tl.store(ste_ptr + so + F, tot1)
        tl.store(lte_ptr + so, lt0)
        tl.store(lte_ptr + so + F, lt1)
        e0 = tl.load(E_ptr + (r0 * F + f) * K + k, mask=m, other=1.0)
        e1 = tl.load(E_ptr + (r1 * F + f) * K + k, mask=m, other=1.0)
        tl.store(exc_ptr + o0 + f, tl.log(tl.maximum(e0, 1e-10)) * _K10, mask=m)
        tl.store(exc_ptr + o1 + f, tl.log(tl.maximum(e1, 1e-10)) * _K10, mask=m)
    tl.store(lt_ptr + r0, lt0)
    if not DIOTIC:
        tl.store(lt_ptr + r1, lt1)


def binaural_frames(st, S, E, lt, aa_lt, ar_lt, p, spec, exc, ste, lte):
    """Binaural inhibition and loudness of Moore et al. (2016), frame by frame (Triton).

    Mirrors :func:`rtamt.loudness.kernels.binaural_frames`: per ear pair and frame the
    inhibition factors ``I_L = 2 / (1 + sech(S_R/S_L)^p)`` and mirror (Moore & Glasberg
    2007, eq. 1), the inhibited patterns ``st / I``, short-term loudness
    ``0.25 sum_k st/I`` and long-term loudness by the asymmetric one-pole AGC.

    st, S : (F, R, K) float64  short-term specific loudness and its spatially smoothed
                               version (sone/Cam); rows are ear pairs (2b, 2b + 1), or
                               one row (diotic: both ears get it).
    E     : (R, F, K) float64  excitation (linear).
    lt    : (R,) float64       long-term AGC state, advanced in place.
    aa_lt, ar_lt, p : float    long-term AGC coefficients, inhibition exponent.
    spec, exc : (B, 2, K, F) float64  inhibited pattern (sone/Cam) and excitation
                               (dB, ``10 log10 max(E, 1e-10)``), written.
    ste, lte : (B, 2, F) float64  per-ear short- and long-term loudness (sone), written.
    B = R // 2, or 1 when R == 1.

    One program per ear pair, one lane per channel (K rounded up to a power of two);
    the pair's two long-term states are scalars carried over the frames.  The channel
    sum is ``tl.sum`` (a tree), numba's is sequential: relative differences ~1e-16 per
    frame, which the long-term AGC carries on (still far below 1e-12).
    """
    F, R, K = st.shape
    _check(_F64, st=st, S=S, E=E, lt=lt, spec=spec, exc=exc, ste=ste, lte=lte)
    diotic = R == 1
    nb = 1 if diotic else R // 2
    assert diotic or R % 2 == 0
    assert S.shape == (F, R, K) and E.shape == (R, F, K) and lt.shape == (R,)
    assert spec.shape == exc.shape == (nb, 2, K, F) and ste.shape == lte.shape == (nb, 2, F)
    if F == 0 or K == 0:
        return
    _binaural_kernel[(nb,)](st, S, E, lt, float(aa_lt), float(ar_lt), float(p), spec, exc,
                            ste, lte, F, R, K, DIOTIC=diotic,
                            KP=triton.next_power_of_2(K), num_warps=4,
                            enable_fp_fusion=True)


# --- spectrum: hopping DFT ------------------------------------------------------------


@triton.jit
def _chunk_ring_kernel(D_ptr, k0, lag, n_prime, F, rc_ptr, rs_ptr, wn_ptr, ring_ptr, T_ptr,
                       R, C, nF, BLOCK: tl.constexpr):
    i = _lane_ids(BLOCK)
    m = i < R * nF
    r = i // nF
    q = i - r * nF
    W = 2 * nF
    rg = r * (C + 2) * W + q                  # ring[r, slot, q] = rg + slot W
    sar = tl.load(ring_ptr + rg + C * W, mask=m, other=0.0)
    sai = tl.load(ring_ptr + rg + C * W + nF, mask=m, other=0.0)
    sbr = tl.load(ring_ptr + rg + (C + 1) * W, mask=m, other=0.0)
    sbi = tl.load(ring_ptr + rg + (C + 1) * W + nF, mask=m, other=0.0)
    wr = tl.load(wn_ptr + q, mask=m, other=0.0)
    wi = tl.load(wn_ptr + nF + q, mask=m, other=0.0)
    n_all = n_prime + F
    for j in range(n_all):
        rho = _pymod(k0 - lag - n_prime + j, C)
        dof = (r * n_all + j) * W + q
        dr = tl.load(D_ptr + dof, mask=m, other=0.0)
        di = tl.load(D_ptr + dof + nF, mask=m, other=0.0)
        cr = tl.load(rc_ptr + rho * nF + q, mask=m, other=0.0)
        ci = tl.load(rs_ptr + rho * nF + q, mask=m, other=0.0)
        slot = ring_ptr + rg + rho * W
        oldr = tl.load(slot, mask=m, other=0.0)
        oldi = tl.load(slot + nF, mask=m, other=0.0)
        # the chunk's DFT rotated to its position in the epoch
        hr = cr * dr - ci * di
        hi = cr * di + ci * dr
        # running sums of the previous (A) and current (B) epoch; restart at rho == 0
        start = rho == 0
        sar = tl.where(start, sbr, sar) - oldr
        sai = tl.where(start, sbi, sai) - oldi
        sbr = tl.where(start, hr, sbr + hr)
        sbi = tl.where(start, hi, sbi + hi)
        tl.store(slot, hr, mask=m)
        tl.store(slot + nF, hi, mask=m)
        # rectangular-window DFT of the frame whose newest chunk this is
        whole = rho == C - 1
        tr = tl.where(whole, sbr, sar + wr * sbr - wi * sbi)
        ti = tl.where(whole, sbi, sai + wr * sbi + wi * sbr)
        fo = tl.maximum(j - n_prime, 0)
        out = (r * F + fo) * W + q
        emit = tl.where(j >= n_prime, m, False)
        tl.store(T_ptr + out, tr, mask=emit)
        tl.store(T_ptr + out + nF, ti, mask=emit)
    tl.store(ring_ptr + rg + C * W, sar, mask=m)
    tl.store(ring_ptr + rg + C * W + nF, sai, mask=m)
    tl.store(ring_ptr + rg + (C + 1) * W, sbr, mask=m)
    tl.store(ring_ptr + rg + (C + 1) * W + nF, sbi, mask=m)


@triton.jit
def _chunk_power_kernel(T_ptr, k0, lag, F, rc_ptr, rs_ptr, offs_ptr, cm_ptr, cp_ptr,
                        gain_ptr, pw_ptr, RF, Bn, C, nF, BLOCK: tl.constexpr):
    lane = _lane_ids(BLOCK)
    m = lane < RF * Bn
    i = lane // Bn                        # row r F + f of P
    b = lane - i * Bn
    f = i % F
    of0 = tl.load(offs_ptr)
    of1 = tl.load(offs_ptr + 1)
    of2 = tl.load(offs_ptr + 2)
    rho = _pymod(k0 - lag + f, C)
    rho0 = tl.where(rho + 1 < C, rho + 1, 0)
    # phase of the f -+ 1/n terms relative to f: e^{-+j 2 pi rho0 / C}
    c00 = tl.load(rc_ptr + rho0 * nF + of0, mask=m, other=0.0)
    c01 = tl.load(rc_ptr + rho0 * nF + of1, mask=m, other=0.0)
    s00 = tl.load(rs_ptr + rho0 * nF + of0, mask=m, other=0.0)
    s01 = tl.load(rs_ptr + rho0 * nF + of1, mask=m, other=0.0)
    c0 = c00 * c01 + s00 * s01
    s0 = s00 * c01 - c00 * s01
    cma = tl.load(cm_ptr)
    cmb = tl.load(cm_ptr + 1)
    cpa = tl.load(cp_ptr)
    cpb = tl.load(cp_ptr + 1)
    cm0 = cma * c0 - cmb * s0
    cm1 = cma * s0 + cmb * c0
    cp0 = cpa * c0 + cpb * s0
    cp1 = cpb * c0 - cpa * s0
    W = 2 * nF
    t = T_ptr + i * W + b
    ar = tl.load(t + of0, mask=m, other=0.0)
    ai = tl.load(t + of0 + nF, mask=m, other=0.0)
    mr = tl.load(t + of1, mask=m, other=0.0)
    mi = tl.load(t + of1 + nF, mask=m, other=0.0)
    pr = tl.load(t + of2, mask=m, other=0.0)
    pi = tl.load(t + of2 + nF, mask=m, other=0.0)
    # Hann window in the frequency domain (Harris 1978, §V)
    xr = 0.5 * ar + cm0 * mr - cm1 * mi + cp0 * pr - cp1 * pi
    xi = 0.5 * ai + cm0 * mi + cm1 * mr + cp0 * pi + cp1 * pr
    g = tl.load(gain_ptr + b, mask=m, other=0.0)
    tl.store(pw_ptr + lane, g * (xr * xr + xi * xi), mask=m)


def spectrum_chunks(D, k0, lag, F, n_prime, rc, rs, wn, ring, offs, cm, cp, gain, grp, P):
    """Hann-windowed DFT powers of one analysis window from hop-long chunk DFTs (hopping
    DFT; Triton).

    Mirrors :func:`rtamt.loudness.kernels.spectrum_chunks` (see
    :mod:`rtamt.loudness.spectrum`, method ``chunk``; Glasberg & Moore 2002 §2.1, Hann
    window applied in the frequency domain after Harris 1978, §V).

    D     : (R, n_prime + F, 2 nF) float64  chunk DFTs (re | im), oldest first.
    k0, lag, F, n_prime : int  absolute index of the first frame, hops between window
                               end and frame end, frames, priming chunks.
    rc, rs : (C, nF) float64   ``cos``, ``-sin`` of the epoch rotations; wn (2, nF).
    ring  : (R, C + 2, 2 nF) float64  rotated chunk DFTs and the two epoch sums (state),
                               advanced in place.
    offs  : (3,) int64;  cm, cp : (2,) float64;  gain : (B,) float64;  grp : (B,) int64.
    P     : (R F, J) float64   ``P[r F + f, grp[b]] += gain[b] |X_b|^2``, in place.

    Three launches: (1) one lane per (row, frequency) runs the chunk recursion (epoch
    sums in registers, ring slots in memory) and writes each frame's rectangular-window
    DFT to a scratch (R, F, 2 nF); (2) one lane per (row-frame, bin) forms the windowed
    power; (3) :func:`group_add` adds the powers into ``P`` in bin order.  Same
    operations per element as numba.
    """
    R = D.shape[0]
    C, nF = rc.shape
    Bn = gain.shape[0]
    _check(_F64, D=D, rc=rc, rs=rs, wn=wn, ring=ring, cm=cm, cp=cp, gain=gain, P=P)
    _check_index(offs=offs, grp=grp)
    assert D.shape == (R, n_prime + F, 2 * nF) and rs.shape == (C, nF) and wn.shape == (2, nF)
    assert ring.shape == (R, C + 2, 2 * nF) and grp.shape == (Bn,) and P.shape[0] == R * F
    if R == 0 or n_prime + F == 0 or nF == 0:
        return
    T = torch.empty((R, max(F, 1), 2 * nF), dtype=_F64, device=D.device)
    _chunk_ring_kernel[_grid(R * nF)](D, int(k0), int(lag), int(n_prime), int(F), rc, rs, wn,
                                      ring, T, R, C, nF, BLOCK=BLOCK, num_warps=_NUM_WARPS,
                                      enable_fp_fusion=True)
    if F == 0 or Bn == 0:
        return
    pw = torch.empty((R * F, Bn), dtype=_F64, device=D.device)
    _chunk_power_kernel[_grid(R * F * Bn)](T, int(k0), int(lag), int(F), rc, rs, offs, cm, cp,
                                           gain, pw, R * F, Bn, C, nF, BLOCK=BLOCK,
                                           num_warps=_NUM_WARPS, enable_fp_fusion=True)
    _group_add_launch(pw, gain, grp, P, with_gain=False)


# --- spectrum: autocorrelation and group sums -----------------------------------------


@triton.jit
def _autocorr_kernel(z_ptr, L, e0, F, H, start, win_ptr, out_ptr, RFn, n,
                     BLOCK: tl.constexpr):
    lane = _lane_ids(BLOCK)
    m = lane < RFn
    i = lane // n                          # row r F + f of out
    d = lane - i * n                       # lag
    r = i // F
    f = i - r * F
    seg = z_ptr + r * L + e0 + f * H + start
    ac = tl.zeros([BLOCK], tl.float64)
    for mm in range(n):
        v = m & (mm + d < n)
        ym = tl.load(win_ptr + mm) * tl.load(seg + mm, mask=m, other=0.0)
        yd = tl.load(win_ptr + mm + d, mask=v, other=0.0) * tl.load(seg + mm + d, mask=v,
                                                                     other=0.0)
        ac = tl.where(v, ac + ym * yd, ac)
    tl.store(out_ptr + lane, ac, mask=m)


def autocorr_frames(z, e0, F, H, start, win, out):
    """Autocorrelations of Hann-windowed short segments (Triton); mirrors
    :func:`rtamt.loudness.kernels.autocorr_frames` (Wiener-Khinchin, method ``autocorr``
    of :mod:`rtamt.loudness.spectrum`).

    z     : (R, L) float64  signal rows (history + block).
    e0, F, H, start : int   end of the first frame's history in z, frames, hop
                            (samples), segment start relative to a frame's end (< 0).
    win   : (n,) float64    window.
    out   : (R F, n) float64  ``out[r F + f, d] = sum_m y_m y_{m+d}``, ``y = win *
                            z[r, e0 + f H + start:][:n]``, written.

    One lane per (row-frame, lag d); the lane sums over m in increasing order, as numba.
    """
    R, L = z.shape
    n = win.shape[0]
    _check(_F64, z=z, win=win, out=out)
    assert out.shape == (R * F, n)
    if R * F * n == 0:
        return
    _autocorr_kernel[_grid(R * F * n)](z, L, int(e0), int(F), int(H), int(start), win, out,
                                       R * F * n, n, BLOCK=BLOCK, num_warps=_NUM_WARPS,
                                       enable_fp_fusion=True)


@triton.jit
def _group_add_kernel(pb_ptr, gain_ptr, grp_ptr, P_ptr, N, Bn, J, WITH_GAIN: tl.constexpr,
                      BLOCK: tl.constexpr):
    i = _lane_ids(BLOCK)
    m = i < N
    for b in range(Bn):
        g = tl.load(grp_ptr + b)
        v = tl.load(pb_ptr + i * Bn + b, mask=m, other=0.0)
        if WITH_GAIN:
            v = tl.load(gain_ptr + b) * v
        dst = P_ptr + i * J + g
        tl.store(dst, tl.load(dst, mask=m, other=0.0) + v, mask=m)


def _group_add_launch(pb, gain, grp, P, with_gain):
    N, Bn = pb.shape
    if N == 0 or Bn == 0:
        return
    _group_add_kernel[_grid(N)](pb, gain, grp, P, N, Bn, P.shape[1], WITH_GAIN=with_gain,
                                BLOCK=BLOCK, num_warps=_NUM_WARPS, enable_fp_fusion=True)


def group_add(pb, gain, grp, P):
    """``P[i, grp[b]] += gain[b] pb[i, b]``, bin powers into compression groups (Triton);
    mirrors :func:`rtamt.loudness.kernels.group_add` (spectral compression of Ward et al.
    2015, see :mod:`rtamt.loudness.spectrum`).

    pb   : (N, B) float64  bin powers.      gain : (B,) float64.
    grp  : (B,) int64      column of P of each bin.
    P    : (N, J) float64  accumulated in place.

    One lane per row i, looping over the bins in order (read-modify-write of ``P[i, .]``
    by that lane only): the same sequence of additions as numba, for any ``grp``.
    """
    N, Bn = pb.shape
    _check(_F64, pb=pb, gain=gain, P=P)
    _check_index(grp=grp)
    assert gain.shape == grp.shape == (Bn,) and P.shape[0] == N
    _group_add_launch(pb, gain, grp, P, with_gain=True)


# --- row-wise matrix products ---------------------------------------------------------


@triton.jit
def _band_ranges_kernel(B_ptr, rng_ptr, K, J, BLOCK: tl.constexpr):
    k = _lane_ids(BLOCK)
    m = k < K
    first = tl.full([BLOCK], 0, tl.int64) + J
    last = tl.zeros([BLOCK], tl.int64)
    for j in range(J):
        nz = tl.load(B_ptr + k * J + j, mask=m, other=0.0) != 0.0
        first = tl.minimum(first, tl.where(nz, j, J))
        last = tl.maximum(last, tl.where(nz, j + 1, 0))
    tl.store(rng_ptr + 2 * k, first, mask=m)
    tl.store(rng_ptr + 2 * k + 1, tl.where(last > first, last, first), mask=m)


def band_ranges(B):
    """``rng (K, 2)`` int64: columns ``[rng[k, 0], rng[k, 1])`` from the first to the last
    nonzero of each row k of ``B`` (K, J) float64 (Triton; a new tensor on B's device).

    Mirrors :func:`rtamt.loudness.kernels.band_ranges` including its all-zero rows,
    which get ``[J, J)`` (the numba code's result; its docstring says ``[0, 0)``; both are
    empty).  One lane per row.
    """
    K, J = B.shape
    _check(_F64, B=B)
    rng = torch.empty((K, 2), dtype=torch.int64, device=B.device)
    if K:
        _band_ranges_kernel[_grid(K)](B, rng, K, J, BLOCK=BLOCK, num_warps=_NUM_WARPS)
    return rng


_BM = 16
_BN = 64


@triton.jit
def _rowwise_kernel(A_ptr, B_ptr, rng_ptr, out_ptr, M, K, J, BM: tl.constexpr,
                    BN: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)
    j = tl.program_id(1).to(tl.int64) * BN + tl.arange(0, BN)
    mi = i < M
    mj = j < J
    acc = tl.zeros([BM, BN], tl.float64)
    for k in range(K):
        lo = tl.load(rng_ptr + 2 * k)
        hi = tl.load(rng_ptr + 2 * k + 1)
        inb = mj & (j >= lo) & (j < hi)
        a = tl.load(A_ptr + i * K + k, mask=mi, other=0.0)
        b = tl.load(B_ptr + k * J + j, mask=inb, other=0.0)
        use = (a != 0.0)[:, None] & inb[None, :]
        acc = tl.where(use, acc + a[:, None] * b[None, :], acc)
    tl.store(out_ptr + i[:, None] * J + j[None, :], acc, mask=mi[:, None] & mj[None, :])


def rowwise_matmul(A, B, rng, out):
    """``out[i] = A[i] @ B`` (float64), each element by numba's sequence of operations
    (Triton); mirrors :func:`rtamt.loudness.kernels.rowwise_matmul`.

    A (M, K), B (K, J) float64; rng (K, 2) int64 (:func:`band_ranges` of B); out (M, J)
    float64, overwritten and returned.

    One lane per output element (tiles of 16 rows x 64 columns): ``out[i, j] = 0``, then
    for k = 0, 1, ...: ``+= A[i, k] B[k, j]`` where ``j`` is in ``rng[k]`` and
    ``A[i, k] != 0`` (numba skips the other terms; they would add exact zeros).  A row's
    result depends only on that row of A, never on M or on the other rows.  Every k is
    visited by every tile (no skipping of whole k ranges outside a tile's band).
    """
    M, K = A.shape
    J = B.shape[1]
    _check(_F64, A=A, B=B, out=out)
    _check_index(rng=rng)
    assert B.shape[0] == K and rng.shape == (K, 2) and out.shape == (M, J)
    if M == 0 or J == 0:
        return out
    _rowwise_kernel[(triton.cdiv(M, _BM), triton.cdiv(J, _BN))](
        A, B, rng, out, M, K, J, BM=_BM, BN=_BN, num_warps=4, enable_fp_fusion=True)
    return out


def matmul_rows(A, B, rng=None):
    """``A @ B`` by :func:`rowwise_matmul` (float64 tensors, contiguous copies made here if
    needed; ``rng`` from :func:`band_ranges`, computed here if not given); mirrors
    :func:`rtamt.loudness.kernels.matmul_rows`."""
    A = A.to(_F64).contiguous()
    B = B.to(_F64).contiguous()
    if rng is None:
        rng = band_ranges(B)
    out = torch.empty((A.shape[0], B.shape[1]), dtype=_F64, device=A.device)
    return rowwise_matmul(A, B, rng, out)
