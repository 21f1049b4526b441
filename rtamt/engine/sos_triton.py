"""Triton twin of the shared real SOS cascade, :func:`rtamt.engine.sos.sos_shared` (the
IHC envelope, the adaptation high-pass, the low-passes and pre-filters of the modulation
banks, King's band-passes); lane layout and dtype semantics in
:mod:`rtamt.engine.triton_lanes`.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_lanes import BLOCK
from .triton_lanes import NUM_WARPS as _NUM_WARPS
from .triton_lanes import check_contiguous as _contiguous
from .triton_lanes import grid as _grid
from .triton_lanes import lanes as _lanes

__all__ = ["sos_shared"]


@triton.jit
def _sos_load(sos_ptr, s):
    """Coefficients ``b0 b1 b2 a1 a2`` of section ``s`` (scalars, float64) and whether it
    is first-order (``b2 == a2 == 0``)."""
    b0 = tl.load(sos_ptr + s * 6)
    b1 = tl.load(sos_ptr + s * 6 + 1)
    b2 = tl.load(sos_ptr + s * 6 + 2)
    a1 = tl.load(sos_ptr + s * 6 + 4)
    a2 = tl.load(sos_ptr + s * 6 + 5)
    return b0, b1, b2, a1, a2, (b2 == 0.0) & (a2 == 0.0)


@triton.jit
def _sos_step(v, z0, z1, b0, b1, b2, a1, a2, first):
    """One sample of a DF-II transposed section on float64 input ``v``: returns the
    float64 output and the new memories in the state's dtype; a first-order section
    (``first``) leaves ``z1`` as it was (numba's shorter loop does not touch it)."""
    out = b0 * v + z0.to(tl.float64)
    n0 = b1 * v - a1 * out + z1.to(tl.float64)
    n1 = tl.where(first, z1, (b2 * v - a2 * out).to(z1.dtype))
    return out, n0.to(z0.dtype), n1


@triton.jit
def _sos_kernel(sos_ptr, S, zi_ptr, x_ptr, y_ptr, N, T, C, F, yoff,
                RECTIFY: tl.constexpr, HAS_SOS: tl.constexpr, BLOCK: tl.constexpr):
    m, b, c = _lanes(N, C, BLOCK)
    ydt = y_ptr.dtype.element_ty
    xo = b * T * C + c
    yo = b * T * F + yoff + c
    zo = b * S * 2 * C + c
    # pass 0: input (rectified, rounded to y's dtype as numba's copy into y does), then
    # section 0; each lane reads x[t] before it writes y[t], so y may be x
    if HAS_SOS:
        b0, b1, b2, a1, a2, first = _sos_load(sos_ptr, 0)
        z0 = tl.load(zi_ptr + zo, mask=m, other=0.0)
        z1 = tl.load(zi_ptr + zo + C, mask=m, other=0.0)
    for t in range(T):
        xv = tl.load(x_ptr + xo + t * C, mask=m, other=0.0)
        if RECTIFY:
            xv = tl.maximum(xv, 0.0)
        yv = xv.to(ydt)
        if HAS_SOS:
            o0, z0, z1 = _sos_step(yv.to(tl.float64), z0, z1, b0, b1, b2, a1, a2, first)
            yv = o0.to(ydt)
        tl.store(y_ptr + yo + t * F, yv, mask=m)
    if HAS_SOS:
        tl.store(zi_ptr + zo, z0, mask=m)
        tl.store(zi_ptr + zo + C, z1, mask=m)
    # passes 1..S-1: section s on y in place (numba also passes each section's output,
    # rounded to y's dtype, to the next section through y)
    for s in range(1, S):
        b0, b1, b2, a1, a2, first = _sos_load(sos_ptr, s)
        zs = zo + s * 2 * C
        z0 = tl.load(zi_ptr + zs, mask=m, other=0.0)
        z1 = tl.load(zi_ptr + zs + C, mask=m, other=0.0)
        for t in range(T):
            yp = y_ptr + yo + t * F
            u = tl.load(yp, mask=m, other=0.0).to(tl.float64)
            o, z0, z1 = _sos_step(u, z0, z1, b0, b1, b2, a1, a2, first)
            tl.store(yp, o.to(ydt), mask=m)
        tl.store(zi_ptr + zs, z0, mask=m)
        tl.store(zi_ptr + zs + C, z1, mask=m)


def sos_shared(sos, rectify, zi, x, y, yoff):
    """Real second-order-section cascade shared by all channels, DF-II transposed (Triton).

    Mirrors :func:`rtamt.engine.sos.sos_shared`: the difference equations of
    ``scipy.signal.sosfilt`` (Oppenheim & Schafer, *Discrete-Time Signal Processing*,
    3rd ed., sec. 6.5), optionally after half-wave rectification ``max(x, 0)``.

    sos     : (S, 6) float64     sections [b0 b1 b2 a0 a1 a2], a0 == 1.
    rectify : bool
    zi      : (B, S, 2, C)       section states, stream dtype, advanced in place.
    x       : (B, T, C)          input.
    y       : (B, T, Ftot)       output; channel c -> column ``yoff + c``; may be ``x``
                                 itself when Ftot == C and yoff == 0.

    One lane per (stream, channel).  Products are formed in float64 (float64
    coefficients times widened values); each section's output is rounded to ``y``'s
    dtype before the next section and its memories to the state's dtype, as in numba.
    A first-order section (``b2 == a2 == 0``, decided in the kernel from the loaded
    coefficients) leaves ``zi[:, s, 1]`` unchanged, like numba's shorter loop.

    The sections run one after the other over the whole block (section-major): the
    lane loads section s's memories once, runs its T samples reading and writing
    ``y[:, :, yoff + c]`` in place, stores the memories, then moves to section s + 1.
    Each sample gets the same operations as in numba's sample-major order (a section's
    output at t depends only on its memories and its input at t).  A lane's load of
    ``y[t]`` in pass s + 1 reads its own store of pass s: same thread, same address, in
    program order (both passes use the same offset tensor, so the same lane-to-thread
    layout).
    """
    B, T, C = x.shape
    S = sos.shape[0]
    _contiguous(sos=sos, zi=zi, x=x, y=y)
    assert sos.dtype == torch.float64 and sos.shape[1] == 6
    assert zi.shape == (B, S, 2, C) and y.shape[:2] == (B, T)
    F = y.shape[2]
    assert 0 <= yoff and yoff + C <= F
    N = B * C
    if N == 0:
        return
    _sos_kernel[_grid(N)](sos, S, zi, x, y, N, T, C, F, yoff,
                          RECTIFY=bool(rectify), HAS_SOS=S > 0, BLOCK=BLOCK,
                          num_warps=_NUM_WARPS, enable_fp_fusion=True)
