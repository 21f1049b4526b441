"""Triton twin of the gammatone adjoint, :func:`rtamt.filterbank.gammatone_grad.
gammatone4_adjoint` (same name, same arguments, torch tensors on one device); the lane
layout is that of :mod:`rtamt.engine.triton_lanes`, the derivation in the numba kernel's
docstring (Hohmann 2002, Acta Acustica 88, 433-442).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..engine.grad import SEGMENT
from ..engine.triton_lanes import BLOCK
from ..engine.triton_lanes import NUM_WARPS as _NUM_WARPS
from ..engine.triton_lanes import check_contiguous as _contiguous
from ..engine.triton_lanes import grid as _grid
from ..engine.triton_lanes import lanes as _lanes

__all__ = ["gammatone4_adjoint"]


@triton.jit
def _span_step(p_r, p_i, u, r0, r1, r2, r3, j0, j1, j2, j3):
    """One sample of the four sections ``z_j <- p z_j + z_{j-1}`` (``z_0 = u``, real), as
    numba's ``_gammatone_span``: returns the new memories."""
    r0, j0 = p_r * r0 - p_i * j0 + u, p_r * j0 + p_i * r0
    r1, j1 = p_r * r1 - p_i * j1 + r0, p_r * j1 + p_i * r1 + j0
    r2, j2 = p_r * r2 - p_i * j2 + r1, p_r * j2 + p_i * r2 + j1
    r3, j3 = p_r * r3 - p_i * j3 + r2, p_r * j3 + p_i * r3 + j2
    return r0, r1, r2, r3, j0, j1, j2, j3


@triton.jit
def _put8(ptr, row, n, N, m, r0, r1, r2, r3, j0, j1, j2, j3):
    """Store the eight memories at row ``row`` of a (rows, 8, N) array, lane ``n``."""
    o = row * 8 * N + n
    _store4(ptr, o, N, m, r0, r1, r2, r3)
    _store4(ptr, o + 4 * N, N, m, j0, j1, j2, j3)


@triton.jit
def _load4(ptr, o, C, m):
    """The four memories of a lane, ``ptr[o + j C]`` for j = 0..3."""
    return (tl.load(ptr + o, mask=m, other=0.0), tl.load(ptr + o + C, mask=m, other=0.0),
            tl.load(ptr + o + 2 * C, mask=m, other=0.0),
            tl.load(ptr + o + 3 * C, mask=m, other=0.0))


@triton.jit
def _store4(ptr, o, C, m, v0, v1, v2, v3):
    tl.store(ptr + o, v0, mask=m)
    tl.store(ptr + o + C, v1, mask=m)
    tl.store(ptr + o + 2 * C, v2, mask=m)
    tl.store(ptr + o + 3 * C, v3, mask=m)


@triton.jit
def _get(ptr, row, j, n, N, m):
    return tl.load(ptr + (row * 8 + j) * N + n, mask=m, other=0.0)


@triton.jit
def _pole_grad(zs_ptr, i, j, n, N, m, lr, li, g0, g1):
    """Add section ``j``'s term to the pole's gradient ``(g0, g1)`` = (Re, Im):
    ``conj(lam_j) z_j`` with ``z_j`` the memory before the sample (row ``i``)."""
    a_r = _get(zs_ptr, i, j, n, N, m)
    a_i = _get(zs_ptr, i, j + 4, n, N, m)
    return g0 + (lr * a_r + li * a_i), g1 + (li * a_r - lr * a_i)


@triton.jit
def _gt_adjoint_kernel(pr_ptr, pi_ptr, gain_ptr, gy_ptr, mur_ptr, mui_ptr, gxc_ptr,
                       sr_ptr, si_ptr, x_ptr, gp_ptr, ck_ptr, zs_ptr, N, T, C, SEG, NSEG,
                       WANT: tl.constexpr, BLOCK: tl.constexpr):
    m, b, c = _lanes(N, C, BLOCK)
    n = b * C + c
    p_r = tl.load(pr_ptr + c, mask=m, other=0.0)
    p_i = tl.load(pi_ptr + c, mask=m, other=0.0)
    g = tl.load(gain_ptr + c, mask=m, other=0.0)
    so = b * (4 * C) + c
    xo = b * T
    yo = b * T * C + c
    if WANT:                                     # checkpoints of the trajectory
        r0, r1, r2, r3 = _load4(sr_ptr, so, C, m)
        j0, j1, j2, j3 = _load4(si_ptr, so, C, m)
        for k in range(NSEG):
            _put8(ck_ptr, k, n, N, m, r0, r1, r2, r3, j0, j1, j2, j3)
            for t in range(k * SEG, tl.minimum(T, (k + 1) * SEG)):
                u = tl.load(x_ptr + xo + t, mask=m, other=0.0)
                r0, r1, r2, r3, j0, j1, j2, j3 = _span_step(p_r, p_i, u, r0, r1, r2, r3,
                                                            j0, j1, j2, j3)
    m0r, m1r, m2r, m3r = _load4(mur_ptr, so, C, m)
    m0i, m1i, m2i, m3i = _load4(mui_ptr, so, C, m)
    g0 = tl.zeros_like(p_r)
    g1 = tl.zeros_like(p_r)
    g2 = tl.zeros_like(p_r)
    for kk in range(NSEG):
        k = NSEG - 1 - kk
        t0 = k * SEG
        t1 = tl.minimum(T, t0 + SEG)
        if WANT:                                 # the segment's trajectory, row 0 first
            r0, r1, r2, r3 = _load4(ck_ptr, k * 8 * N + n, N, m)
            j0, j1, j2, j3 = _load4(ck_ptr, (k * 8 + 4) * N + n, N, m)
            _put8(zs_ptr, 0, n, N, m, r0, r1, r2, r3, j0, j1, j2, j3)
            for t in range(t0, t1):
                u = tl.load(x_ptr + xo + t, mask=m, other=0.0)
                r0, r1, r2, r3, j0, j1, j2, j3 = _span_step(p_r, p_i, u, r0, r1, r2, r3,
                                                            j0, j1, j2, j3)
                _put8(zs_ptr, t - t0 + 1, n, N, m, r0, r1, r2, r3, j0, j1, j2, j3)
        for ii in range(t1 - t0):
            t = t1 - 1 - ii
            gyv = tl.load(gy_ptr + yo + t * C, mask=m, other=0.0)
            l3r = g * gyv + m3r
            l3i = m3i
            l2r = l3r + m2r
            l2i = l3i + m2i
            l1r = l2r + m1r
            l1i = l2i + m1i
            l0r = l1r + m0r
            l0i = l1i + m0i
            tl.store(gxc_ptr + yo + t * C, l0r, mask=m)
            if WANT:
                i = t - t0
                g2 += gyv * _get(zs_ptr, i + 1, 3, n, N, m)
                g0, g1 = _pole_grad(zs_ptr, i, 0, n, N, m, l0r, l0i, g0, g1)
                g0, g1 = _pole_grad(zs_ptr, i, 1, n, N, m, l1r, l1i, g0, g1)
                g0, g1 = _pole_grad(zs_ptr, i, 2, n, N, m, l2r, l2i, g0, g1)
                g0, g1 = _pole_grad(zs_ptr, i, 3, n, N, m, l3r, l3i, g0, g1)
            m0r, m0i = p_r * l0r + p_i * l0i, p_r * l0i - p_i * l0r
            m1r, m1i = p_r * l1r + p_i * l1i, p_r * l1i - p_i * l1r
            m2r, m2i = p_r * l2r + p_i * l2i, p_r * l2i - p_i * l2r
            m3r, m3i = p_r * l3r + p_i * l3i, p_r * l3i - p_i * l3r
    _store4(mur_ptr, so, C, m, m0r, m1r, m2r, m3r)
    _store4(mui_ptr, so, C, m, m0i, m1i, m2i, m3i)
    if WANT:
        tl.store(gp_ptr + n, g0, mask=m)
        tl.store(gp_ptr + N + n, g1, mask=m)
        tl.store(gp_ptr + 2 * N + n, g2, mask=m)


def gammatone4_adjoint(pr, pi, gain, gy, mur, mui, gx, want, sr, si, x, gp):
    """Adjoint of the all-pole gammatone cascade (Triton); mirrors
    :func:`rtamt.filterbank.gammatone_grad.gammatone4_adjoint` (Hohmann 2002), same
    arguments as float64 tensors on one device:

    pr, pi, gain : (C,); gy : (B, T, C); mur, mui : (B, 4, C) in: gradient of the
    outgoing state, out: of the incoming one; gx : (B, T) added to; want : bool;
    sr, si : (B, 4, C) the incoming state; x : (B, T); gp : (3, C) gradients of
    ``pr``, ``pi``, ``gain``, added to (read only with ``want``).

    One lane per (stream, channel).  A lane's input gradient goes to a (B, T, C) work
    array, summed over channels into ``gx`` afterwards (every channel of a stream adds
    to the same input sample); the coefficient gradients are summed per lane over the
    block, then over the streams.  With ``want`` the trajectory is recomputed from
    checkpoints every :data:`~rtamt.engine.grad.SEGMENT` samples (work arrays of
    ``(T / SEGMENT + SEGMENT) * 8`` values a lane, allocated here).
    """
    B, T, C = gy.shape
    _contiguous(pr=pr, pi=pi, gain=gain, gy=gy, mur=mur, mui=mui, gx=gx, sr=sr, si=si, x=x,
                gp=gp)
    for t in (pr, pi, gain, gy, mur, mui, gx, sr, si, x, gp):
        assert t.dtype == torch.float64
    assert mur.shape == mui.shape == sr.shape == si.shape == (B, 4, C)
    assert gx.shape == x.shape == (B, T) and gp.shape == (3, C)
    N = B * C
    if N == 0 or T == 0:
        return
    want = bool(want)
    seg = SEGMENT if want else T
    nseg = -(-T // seg)
    dev = gy.device
    gxc = torch.empty((B, T, C), dtype=torch.float64, device=dev)
    if want:
        gpl = torch.empty((3, N), dtype=torch.float64, device=dev)
        ck = torch.empty((nseg, 8, N), dtype=torch.float64, device=dev)
        zs = torch.empty((seg + 1, 8, N), dtype=torch.float64, device=dev)
    else:
        gpl = ck = zs = gxc                      # not read
    _gt_adjoint_kernel[_grid(N)](pr, pi, gain, gy, mur, mui, gxc, sr, si, x, gpl, ck, zs,
                                 N, T, C, seg, nseg, WANT=want, BLOCK=BLOCK,
                                 num_warps=_NUM_WARPS, enable_fp_fusion=True)
    gx += gxc.sum(dim=2)
    if want:
        gp += gpl.view(3, B, C).sum(dim=1)
