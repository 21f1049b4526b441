"""Triton twin of the K-weighting kernel (:func:`rtamt.loudness.kweighting.k_weight`):
the BS.1770-4 Annex 1 pre-filter and RLB high-pass, two biquads in DF-II transposed form
(the difference equations of ``scipy.signal.sosfilt``; Oppenheim & Schafer,
*Discrete-Time Signal Processing*, 3rd ed., sec. 6.5), in float64.

Same name, arguments and arithmetic as the numba kernel, on torch tensors (one device,
contiguous): ``sos`` ``(2, 6)`` float64, ``zi`` ``(B, 2, 2, C)`` float64 advanced in place,
``x`` ``(B, T, C)`` float32 or float64 (read as float64), ``y`` ``(B, T, C)`` float64
written.  One lane per (stream, channel) keeps the four memories in registers and loops
over the block's samples in order, so any partition of a stream gives the same bits on
this path as on the numba path; the two differ only where one compiler contracts a
product into an FMA and the other does not (both may: numba's ``fastmath={'contract'}``).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .triton_common import _F64, _NUM_WARPS, BLOCK, _check, _grid, _lane_ids

__all__ = ["k_weight"]


@triton.jit
def _k_weight_kernel(sos_ptr, zi_ptr, x_ptr, y_ptr, B, T, C, BLOCK: tl.constexpr):
    i = _lane_ids(BLOCK)
    m = i < B * C
    b = i // C
    c = i - b * C
    p0 = tl.load(sos_ptr + 0)
    p1 = tl.load(sos_ptr + 1)
    p2 = tl.load(sos_ptr + 2)
    p4 = tl.load(sos_ptr + 4)
    p5 = tl.load(sos_ptr + 5)
    r0 = tl.load(sos_ptr + 6)
    r1 = tl.load(sos_ptr + 7)
    r2 = tl.load(sos_ptr + 8)
    r4 = tl.load(sos_ptr + 10)
    r5 = tl.load(sos_ptr + 11)
    zo = b * 4 * C + c                    # zi[b, s, j, c] at zo + (2 s + j) C
    z00 = tl.load(zi_ptr + zo, mask=m, other=0.0)
    z01 = tl.load(zi_ptr + zo + C, mask=m, other=0.0)
    z10 = tl.load(zi_ptr + zo + 2 * C, mask=m, other=0.0)
    z11 = tl.load(zi_ptr + zo + 3 * C, mask=m, other=0.0)
    xo = b * T * C + c
    for t in range(T):
        v = tl.load(x_ptr + xo + t * C, mask=m, other=0.0).to(tl.float64)
        out = p0 * v + z00
        z00 = p1 * v - p4 * out + z01
        z01 = p2 * v - p5 * out
        v = out
        out = r0 * v + z10
        z10 = r1 * v - r4 * out + z11
        z11 = r2 * v - r5 * out
        tl.store(y_ptr + xo + t * C, out, mask=m)
    tl.store(zi_ptr + zo, z00, mask=m)
    tl.store(zi_ptr + zo + C, z01, mask=m)
    tl.store(zi_ptr + zo + 2 * C, z10, mask=m)
    tl.store(zi_ptr + zo + 3 * C, z11, mask=m)


def k_weight(sos, zi, x, y):
    """K-weight ``x`` ``(B, T, C)`` into ``y`` (Triton); mirrors
    :func:`rtamt.loudness.kweighting.k_weight` (see the module docstring)."""
    B, T, C = x.shape
    _check(_F64, sos=sos, zi=zi, y=y)
    _check(x=x)
    assert sos.shape == (2, 6) and zi.shape == (B, 2, 2, C) and tuple(y.shape) == (B, T, C)
    if B * C == 0:
        return
    _k_weight_kernel[_grid(B * C)](sos, zi, x, y, B, T, C, BLOCK=BLOCK,
                                   num_warps=_NUM_WARPS, enable_fp_fusion=True)
