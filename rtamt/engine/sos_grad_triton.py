"""Triton twin of the adjoint of the shared SOS cascade,
:func:`rtamt.engine.sos_grad.sos_adjoint` (same name, same arguments, torch tensors on one
device); the lane layout is that of :mod:`rtamt.engine.triton_lanes`, the derivation in
the numba kernel's docstring.
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

__all__ = ["sos_adjoint"]


@triton.jit
def _section_back(sos_ptr, s, mu_ptr, mo, C, g_ptr, go_ptr, gs, T, m):
    """Section ``s`` backwards over the block: reads the gradient of its output from
    ``g_ptr`` (offset ``go`` of sample 0, stride ``gs`` per sample), writes that of its
    input to ``go_ptr`` (the lane's (T,) run of the work array, stride C; may be the
    same memory), replaces the lane's memories' gradients in ``mu``."""
    b0 = tl.load(sos_ptr + s * 6)
    b1 = tl.load(sos_ptr + s * 6 + 1)
    b2 = tl.load(sos_ptr + s * 6 + 2)
    a1 = tl.load(sos_ptr + s * 6 + 4)
    a2 = tl.load(sos_ptr + s * 6 + 5)
    first = (b2 == 0.0) & (a2 == 0.0)
    ms = mo + s * 2 * C
    m0 = tl.load(mu_ptr + ms, mask=m, other=0.0)
    m1 = tl.load(mu_ptr + ms + C, mask=m, other=0.0)
    for i in range(T):
        t = T - 1 - i
        g = tl.load(g_ptr + t * gs, mask=m, other=0.0)
        go = g - a1 * m0 - a2 * m1
        gv = b0 * go + b1 * m0 + b2 * m1
        m1 = tl.where(first, m0 + m1, m0)
        m0 = go
        tl.store(go_ptr + t * C, gv, mask=m)
    tl.store(mu_ptr + ms, m0, mask=m)
    tl.store(mu_ptr + ms + C, m1, mask=m)


@triton.jit
def _sos_adjoint_kernel(sos_ptr, S, x_ptr, gy_ptr, gy_sb, gy_st, gy_sc, mu_ptr, gx_ptr,
                        w_ptr, N, T, C, RECTIFY: tl.constexpr, BLOCK: tl.constexpr):
    m, b, c = _lanes(N, C, BLOCK)
    xo = b * T * C + c
    mo = b * S * 2 * C + c
    if S > 0:
        # the last section reads gy (any strides), every section writes the gradient of
        # its input to the work array w (B, T, C), the sections before read it back
        _section_back(sos_ptr, S - 1, mu_ptr, mo, C, gy_ptr + b * gy_sb + c * gy_sc,
                      w_ptr + xo, gy_st, T, m)
        for j in range(1, S):
            _section_back(sos_ptr, S - 1 - j, mu_ptr, mo, C, w_ptr + xo, w_ptr + xo, C, T, m)
        for t in range(T):
            g = tl.load(w_ptr + xo + t * C, mask=m, other=0.0)
            if RECTIFY:
                xv = tl.load(x_ptr + xo + t * C, mask=m, other=0.0)
                g = tl.where(xv > 0.0, g, 0.0)
            tl.store(gx_ptr + xo + t * C, tl.load(gx_ptr + xo + t * C, mask=m) + g, mask=m)
    else:
        for t in range(T):
            g = tl.load(gy_ptr + b * gy_sb + t * gy_st + c * gy_sc, mask=m, other=0.0)
            if RECTIFY:
                xv = tl.load(x_ptr + xo + t * C, mask=m, other=0.0)
                g = tl.where(xv > 0.0, g, 0.0)
            tl.store(gx_ptr + xo + t * C, tl.load(gx_ptr + xo + t * C, mask=m) + g, mask=m)


def sos_adjoint(sos, rectify, x, gy, mu, gx):
    """Adjoint of the DF-II transposed section cascade (Triton); mirrors
    :func:`rtamt.engine.sos_grad.sos_adjoint` (Oppenheim & Schafer, *Discrete-Time Signal
    Processing*, 3rd ed., ch. 6; reverse-mode differentiation of the recursion).

    sos : (S, 6) float64; x : (B, T, C) float64, the stage input (read only with
    ``rectify``); gy : (B, T, C) float64 output gradient, any strides (a column slice of
    a packed output); mu : (B, S, 2, C) float64, in: gradient of the outgoing section
    memories, out: of the incoming ones; gx : (B, T, C) float64, added to.

    One lane per (stream, channel).  The sections run backwards one after the other over
    the whole block (last section first; each sample gets the operations of numba's
    sample-major order: a section's adjoint at ``t`` depends only on its memories'
    gradients and the gradient of its output at ``t``), through a float64 work array
    (B, T, C) allocated here.
    """
    B, T, C = gy.shape
    S = sos.shape[0]
    _contiguous(sos=sos, x=x, mu=mu, gx=gx)
    assert sos.dtype == torch.float64 and sos.shape[1] == 6
    assert mu.shape == (B, S, 2, C) and gx.shape == (B, T, C) and x.shape == (B, T, C)
    for t in (x, gy, mu, gx):
        assert t.dtype == torch.float64
    N = B * C
    if N == 0 or T == 0:
        return
    w = torch.empty((B, T, C), dtype=torch.float64, device=gx.device) if S > 0 else gx
    _sos_adjoint_kernel[_grid(N)](sos, S, x, gy, *gy.stride(), mu, gx, w, N, T, C,
                                  RECTIFY=bool(rectify), BLOCK=BLOCK,
                                  num_warps=_NUM_WARPS, enable_fp_fusion=True)
