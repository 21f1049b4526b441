"""Triton twin of the DRNL adjoint :func:`rtamt.filterbank.drnl_grad.drnl_adjoint`: the same
name, arguments and mathematics (both paths and the broken stick of Meddis, O'Mard &
Lopez-Poveda 2001 and Lopez-Poveda & Meddis 2001), on float64 torch tensors on one device.

Work layout: one Triton lane per (stream, channel), :data:`BLOCK` lanes per program, a
grid of ``ceil(B C / BLOCK)`` programs, as the forward twin
:mod:`rtamt.filterbank.drnl_triton`, whose register tiles of section memories (one row per
section, rows read and written through one-hot masks, the cascade unrolled over the
``tl.constexpr`` lengths) and forward section :func:`~rtamt.filterbank.drnl_triton._biquad`
this kernel reuses.  A lane first recomputes the broken stick's input ``u[t]`` (the
nonlinear path's first gammatone cascade, run from the incoming memories ``n1``, ``n2``)
into a float64 scratch ``(B, T, C)``, then runs backwards in time through both paths'
sections (last to first), the stick's slope between the nonlinear cascades, and writes
its channel's term of the input gradient over ``u[t]``.  The launcher then adds
``scale`` times the sum over channels to ``gx`` (one torch reduction on the device; numba
sums the channels in another order, so the twins agree to rounding, 1e-12 relative).

On a GPU: a program has exactly one thread per lane (BLOCK = 32 lanes, 1 warp), so the
scratch a lane writes in its forward recomputation and reads backwards is touched by one
thread only, in program order; the launch sets ``num_stages=1`` (no software pipelining
of the loops' loads).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .drnl_triton import _NUM_WARPS, BLOCK, _biquad, _coef5, _memories, _stick

__all__ = ["BLOCK", "drnl_adjoint"]


@triton.jit
def _back(g, M1, M2, sel, b0, b1, b2, a1, a2):
    """Adjoint of one transposed-direct-form-II section (numba's ``_biquad_back``) whose
    memories' gradients are row ``sel`` ((KP, 1) one-hot) of ``M1``, ``M2`` (KP, BLOCK):
    ``go = g - a1 m1 - a2 m2``, returns ``b0 go + b1 m1 + b2 m2`` and the tiles with that
    row replaced by ``(go, m1)``."""
    p1 = tl.sum(tl.where(sel, M1, 0.0), axis=0)
    p2 = tl.sum(tl.where(sel, M2, 0.0), axis=0)
    go = g - a1 * p1 - a2 * p2
    gv = b0 * go + b1 * p1 + b2 * p2
    M1 = tl.where(sel, go[None, :], M1)
    M2 = tl.where(sel, p1[None, :], M2)
    return gv, M1, M2


@triton.jit
def _drnl_adj_kernel(gain_ptr, gtl_ptr, lpl_ptr, gtn_ptr, lpn_ptr, bs_ptr, n1_ptr, n2_ptr,
                     x_ptr, gy_ptr, gys_b, gys_t, gys_c, ml1_ptr, ml2_ptr, mn1_ptr, mn2_ptr,
                     u_ptr, s_ptr, N, T, C,
                     N_GL: tl.constexpr, N_LL: tl.constexpr, N_GB: tl.constexpr,
                     N_GA: tl.constexpr, N_LN: tl.constexpr, KL: tl.constexpr,
                     KN: tl.constexpr, QUARTER: tl.constexpr, DO_LIN: tl.constexpr,
                     DO_NLIN: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    b = i // C
    c = i - b * C
    SL: tl.constexpr = N_GL + N_LL
    SN: tl.constexpr = N_GB + N_GA + N_LN
    s = tl.load(s_ptr)
    uo = b * T * C + c
    gyo = b * gys_b + c * gys_c
    if DO_LIN:         # the memories' gradients of the linear path, in (KL, BLOCK) tiles
        rl, ml, ol, L1, L2 = _memories(ml1_ptr, ml2_ptr, b, c, m, C, SL, KL)
        g = tl.load(gain_ptr + c, mask=m, other=0.0)
        gl0, gl1, gl2, gl3, gl4 = _coef5(gtl_ptr, C, c, m)
        ll0, ll1, ll2, ll3, ll4 = _coef5(lpl_ptr, C, c, m)
    if DO_NLIN:
        # the stick's input u[t]: the first nonlinear cascade from the incoming memories
        rn, mn, on, F1, F2 = _memories(n1_ptr, n2_ptr, b, c, m, C, SN, KN)
        gn0, gn1, gn2, gn3, gn4 = _coef5(gtn_ptr, C, c, m)
        ln0, ln1, ln2, ln3, ln4 = _coef5(lpn_ptr, C, c, m)
        ba, bb, bc, bk = _stick(bs_ptr, C, c, m)
        for t in range(T):
            w = tl.load(x_ptr + b * T + t, mask=m, other=0.0) * s
            for k in tl.static_range(N_GB):
                w, F1, F2 = _biquad(w, F1, F2, rn == k, gn0, gn1, gn2, gn3, gn4)
            tl.store(u_ptr + uo + t * C, w, mask=m)
        tl.store(n1_ptr + on, F1, mask=mn)
        tl.store(n2_ptr + on, F2, mask=mn)
        M1 = tl.load(mn1_ptr + on, mask=mn, other=0.0)
        M2 = tl.load(mn2_ptr + on, mask=mn, other=0.0)
    for tt in range(T):
        t = T - 1 - tt
        gyv = tl.load(gy_ptr + gyo + t * gys_t, mask=m, other=0.0)
        acc = tl.zeros([BLOCK], dtype=tl.float64)
        if DO_LIN:
            v = gyv
            for kk in tl.static_range(N_LL):
                v, L1, L2 = _back(v, L1, L2, rl == N_GL + N_LL - 1 - kk,
                                  ll0, ll1, ll2, ll3, ll4)
            for kk in tl.static_range(N_GL):
                v, L1, L2 = _back(v, L1, L2, rl == N_GL - 1 - kk, gl0, gl1, gl2, gl3, gl4)
            acc = g * v
        if DO_NLIN:
            h = gyv
            for kk in tl.static_range(N_LN):
                h, M1, M2 = _back(h, M1, M2, rn == SN - 1 - kk, ln0, ln1, ln2, ln3, ln4)
            for kk in tl.static_range(N_GA):
                h, M1, M2 = _back(h, M1, M2, rn == N_GB + N_GA - 1 - kk,
                                  gn0, gn1, gn2, gn3, gn4)
            # the broken stick's slope on the branch the forward takes (drnl_grad.stick_slope)
            au = tl.abs(tl.load(u_ptr + uo + t * C, mask=m, other=0.0))
            r = ba * au
            if QUARTER:
                q = bb * tl.sqrt(tl.sqrt(au))
                take = q < r
            else:
                above = au > bk
                q = bb * tl.exp(bc * tl.log(tl.where(above, au, 1.0)))
                take = above & (q < r)
            h = h * tl.where(take, bc * q / tl.where(take, au, 1.0), ba)
            for kk in tl.static_range(N_GB):
                h, M1, M2 = _back(h, M1, M2, rn == N_GB - 1 - kk, gn0, gn1, gn2, gn3, gn4)
            acc = acc + h
        tl.store(u_ptr + uo + t * C, acc, mask=m)
    if DO_LIN:
        tl.store(ml1_ptr + ol, L1, mask=ml)
        tl.store(ml2_ptr + ol, L2, mask=ml)
    if DO_NLIN:
        tl.store(mn1_ptr + on, M1, mask=mn)
        tl.store(mn2_ptr + on, M2, mask=mn)


def drnl_adjoint(scale, gain, gtl, lpl, gtn, lpn, bs, quarter, n_gl, n_ll, n_gb, n_ga, n_ln,
                 do_lin, do_nlin, n1, n2, x, gy, ml1, ml2, mn1, mn2, gx, u=None, g=None,
                 h=None):
    """Adjoint of the DRNL kernel (Triton); the arguments of the numba
    :func:`rtamt.filterbank.drnl_grad.drnl_adjoint`.

    scale : (1,); gain : (C,); gtl, lpl, gtn, lpn : (5, C); bs : (4, C): the float64
    sections (``DRNLCoeffs.sections[float64]``);  quarter, do_lin, do_nlin : bools and
    n_gl, n_ll, n_gb, n_ga, n_ln : ints (Python);
    n1, n2 : (B, n_gb + n_ga + n_ln, C) incoming nonlinear memories (copies: advanced here
    through the first cascade, as numba does);  x : (B, T) input;  gy : (B, T, C) output
    gradient, any strides;  ml1, ml2 : (B, n_gl + n_ll, C), mn1, mn2 : (B, n_gb + n_ga +
    n_ln, C): in, gradients of the outgoing memories; out, of the incoming ones;
    gx : (B, T) added to;
    u : scratch: used when it is a contiguous float64 tensor of at least ``B T C``
    elements on ``x``'s device (numba's ``(T, C)`` scratch is not), else a ``(B, T, C)``
    tensor is allocated; g, h : ignored (numba's ``(C,)`` scratch rows; here registers).

    All float64, contiguous except ``gy``, on one device.  One launch of
    ``ceil(B C / BLOCK)`` programs, then ``gx += scale * (terms summed over channels)``.
    """
    B, T = x.shape
    C = gain.shape[0]
    SL, SN = n_gl + n_ll, n_gb + n_ga + n_ln
    for name, t in (("scale", scale), ("gain", gain), ("gtl", gtl), ("lpl", lpl),
                    ("gtn", gtn), ("lpn", lpn), ("bs", bs), ("n1", n1), ("n2", n2),
                    ("x", x), ("gy", gy), ("ml1", ml1), ("ml2", ml2), ("mn1", mn1),
                    ("mn2", mn2), ("gx", gx)):
        assert name == "gy" or t.is_contiguous(), f"drnl_adjoint: {name} must be contiguous"
        assert t.dtype == torch.float64, f"drnl_adjoint: {name} is {t.dtype}, not float64"
        assert t.device == x.device, f"drnl_adjoint: {name} is not on x's device"
    assert scale.shape == (1,) and bs.shape == (4, C)
    assert gtl.shape == lpl.shape == gtn.shape == lpn.shape == (5, C)
    assert ml1.shape == ml2.shape == (B, SL, C)
    assert n1.shape == n2.shape == mn1.shape == mn2.shape == (B, SN, C)
    assert gy.shape == (B, T, C) and gx.shape == (B, T)
    N = B * C
    if N == 0 or T == 0:
        return
    if (u is None or not u.is_contiguous() or u.dtype != torch.float64
            or u.device != x.device or u.numel() < B * T * C):
        u = torch.empty((B, T, C), dtype=torch.float64, device=x.device)
    u = u.reshape(-1)[:B * T * C].view(B, T, C)
    _drnl_adj_kernel[(triton.cdiv(N, BLOCK),)](
        gain, gtl, lpl, gtn, lpn, bs, n1, n2, x, gy, *gy.stride(), ml1, ml2, mn1, mn2, u,
        scale, N, T, C,
        N_GL=int(n_gl), N_LL=int(n_ll), N_GB=int(n_gb), N_GA=int(n_ga), N_LN=int(n_ln),
        KL=triton.next_power_of_2(max(SL, 1)), KN=triton.next_power_of_2(max(SN, 1)),
        QUARTER=bool(quarter), DO_LIN=bool(do_lin), DO_NLIN=bool(do_nlin), BLOCK=BLOCK,
        num_warps=_NUM_WARPS, num_stages=1, enable_fp_fusion=False)
    gx += scale * u.sum(2)
