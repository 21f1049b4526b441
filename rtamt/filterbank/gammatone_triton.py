"""Triton twin of the gammatone kernel, :func:`rtamt.filterbank.gammatone.gammatone4`;
lane layout and dtype semantics in :mod:`rtamt.engine.triton_lanes`.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..engine.triton_lanes import BLOCK
from ..engine.triton_lanes import NUM_WARPS as _NUM_WARPS
from ..engine.triton_lanes import check_contiguous as _contiguous
from ..engine.triton_lanes import grid as _grid
from ..engine.triton_lanes import lanes as _lanes

__all__ = ["gammatone4"]


@triton.jit
def _gt_section(pr, pi, sr, si, ur, ui):
    """One complex one-pole section ``z <- p z + u`` in float64 on state ``(sr, si)``
    (state dtype); returns the new state rounded to that dtype and the float64 value."""
    ar = sr.to(tl.float64)
    ai = si.to(tl.float64)
    zr = pr * ar - pi * ai + ur
    zi = pr * ai + pi * ar + ui
    return zr.to(sr.dtype), zi.to(si.dtype), zr, zi


@triton.jit
def _gammatone4_kernel(lanes_ptr, L, sr_ptr, si_ptr, x_ptr, y_ptr, N, T, C,
                       BLOCK: tl.constexpr):
    m, b, c = _lanes(N, C, BLOCK)
    pr = tl.load(lanes_ptr + c, mask=m, other=0.0)
    pi = tl.load(lanes_ptr + L + c, mask=m, other=0.0)
    pg = tl.load(lanes_ptr + 2 * L + c, mask=m, other=0.0)
    so = b * (4 * C) + c
    r0 = tl.load(sr_ptr + so, mask=m, other=0.0)
    r1 = tl.load(sr_ptr + so + C, mask=m, other=0.0)
    r2 = tl.load(sr_ptr + so + 2 * C, mask=m, other=0.0)
    r3 = tl.load(sr_ptr + so + 3 * C, mask=m, other=0.0)
    j0 = tl.load(si_ptr + so, mask=m, other=0.0)
    j1 = tl.load(si_ptr + so + C, mask=m, other=0.0)
    j2 = tl.load(si_ptr + so + 2 * C, mask=m, other=0.0)
    j3 = tl.load(si_ptr + so + 3 * C, mask=m, other=0.0)
    xo = b * T
    yo = b * T * C + c
    for t in range(T):
        xv = tl.load(x_ptr + xo + t, mask=m, other=0.0).to(tl.float64)
        # section 1 has the real input x and no imaginary input
        ar = r0.to(tl.float64)
        ai = j0.to(tl.float64)
        zr = pr * ar - pi * ai + xv
        zi = pr * ai + pi * ar
        r0 = zr.to(r0.dtype)
        j0 = zi.to(j0.dtype)
        r1, j1, zr, zi = _gt_section(pr, pi, r1, j1, zr, zi)
        r2, j2, zr, zi = _gt_section(pr, pi, r2, j2, zr, zi)
        r3, j3, zr, zi = _gt_section(pr, pi, r3, j3, zr, zi)
        tl.store(y_ptr + yo + t * C, (pg * zr).to(y_ptr.dtype.element_ty), mask=m)
    tl.store(sr_ptr + so, r0, mask=m)
    tl.store(sr_ptr + so + C, r1, mask=m)
    tl.store(sr_ptr + so + 2 * C, r2, mask=m)
    tl.store(sr_ptr + so + 3 * C, r3, mask=m)
    tl.store(si_ptr + so, j0, mask=m)
    tl.store(si_ptr + so + C, j1, mask=m)
    tl.store(si_ptr + so + 2 * C, j2, mask=m)
    tl.store(si_ptr + so + 3 * C, j3, mask=m)


def gammatone4(lanes, sr, si, x, y):
    """Cascade of four identical complex one-pole sections per channel (Triton).

    Mirrors :func:`rtamt.filterbank.gammatone.gammatone4`: ``y = gain * Re( x filtered by
    1 / (1 - p z^-1)^4 )``, the AMT all-pole gammatone (Hohmann 2002, Acta Acustica 88,
    433-442 / Lyon 1997 form, see :mod:`rtamt.filterbank.gammatone`).

    lanes  : (3, L) float64  rows pole real part, pole imaginary part, real output gain
                             (``GammatoneCoeffs.lanes``; only the first C lanes are read).
    sr, si : (B, 4, C)       section states (real, imag), stream dtype, advanced in place.
    x      : (B, T)          input, stream dtype.
    y      : (B, T, C)       output, stream dtype.

    One lane per (stream, channel).  Every product is formed in float64 (float64 poles
    times the widened state); each section's new state is rounded to the state's dtype
    and stored, while the float64 value feeds the next section, as in numba; the output
    ``gain * Re z4`` is rounded to ``y``'s dtype.  The float64 arithmetic, slow on
    consumer GPUs, is what matches numba for float32 streams too.
    """
    B, T = x.shape
    C = sr.shape[2]
    _contiguous(lanes=lanes, sr=sr, si=si, x=x, y=y)
    assert lanes.dtype == torch.float64 and lanes.shape[0] == 3 and lanes.shape[1] >= C
    assert sr.shape == si.shape == (B, 4, C) and y.shape == (B, T, C)
    N = B * C
    if N == 0:
        return
    _gammatone4_kernel[_grid(N)](lanes, lanes.shape[1], sr, si, x, y, N, T, C,
                                 BLOCK=BLOCK, num_warps=_NUM_WARPS, enable_fp_fusion=True)
