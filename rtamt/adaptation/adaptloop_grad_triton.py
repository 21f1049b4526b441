"""Triton twin of the adaptation-loop adjoint, :func:`rtamt.adaptation.adaptloop_grad.
adaptloop_adjoint` (same name, same arguments, torch tensors on one device); the
derivation is in the numba kernel's docstring (Püschel 1988; Dau, Püschel & Kohlrausch
1996a, JASA 99, 3615; the overshoot limiter of Münkner 1993).

One Triton lane per (stream, channel), the K dividers as (KP, BLOCK) register tiles as in
the forward twin (:mod:`rtamt.adaptation.adaptloop_triton`).  The dividers along the block
are recomputed from the incoming ones, checkpointed every
:data:`~rtamt.engine.grad.SEGMENT` samples; within a segment the dividers before each
sample's update are kept in a work array and each sample's quotients and loop outputs
are recomputed from them in the backward step (the same operations as the forward pass,
so the same values).  The limiter's exponential is ``tl.exp`` (libdevice on a GPU, numpy
in the interpreter) where numba's trajectory uses :func:`rtamt.engine.fastexp.
exp_f64_short`: the trajectories may differ in the last bit, within the tests' 1e-12.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..engine.grad import SEGMENT
from .adaptloop_triton import lane_constants

__all__ = ["adaptloop_adjoint"]

BLOCK = 32
"""Lanes (stream, channel) per Triton program."""


@triton.jit
def _row(tile, kidx, k):
    """Row ``k`` of a (KP, BLOCK) tile (a one-hot masked sum: exact)."""
    return tl.sum(tl.where(kidx[:, None] == k, tile, 0.0), axis=0)


@triton.jit
def _loops(v, S, fa, ef, of, kidx, K: tl.constexpr, LIMIT_ON: tl.constexpr):
    """The loops' quotients ``Q`` and outputs ``V`` (KP, BLOCK) of one sample from the
    loop input ``v`` and the dividers ``S`` before the sample's update."""
    Q = tl.zeros_like(S)
    V = tl.zeros_like(S)
    for k in tl.static_range(K):
        sel = kidx[:, None] == k
        q = v / _row(S, kidx, k)
        v = q
        if LIMIT_ON:
            hi = q > 1.0
            e = tl.exp(tl.where(hi, _row(ef, kidx, k) * (q - 1.0), 0.0))
            v = tl.where(hi, _row(fa, kidx, k) / (1.0 + e) - _row(of, kidx, k), q)
        Q = tl.where(sel, q[None, :], Q)
        V = tl.where(sel, v[None, :], V)
    return Q, V


@triton.jit
def _adaptloop_adjoint_kernel(a_ptr, b_ptr, lanes_ptr, s_ptr, x_ptr, gy_ptr, mu_ptr, gx_ptr,
                              ga_ptr, ck_ptr, tr_ptr, n_lanes, T, C, L, SEG, NSEG,
                              K: tl.constexpr, KP: tl.constexpr, LIMIT_ON: tl.constexpr,
                              BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    lane = pid * BLOCK + tl.arange(0, BLOCK)
    live = lane < n_lanes
    n = lane.to(tl.int64)
    b = n // C
    c = n - b * C
    kidx = tl.arange(0, KP)
    krow = kidx < K
    m2 = krow[:, None] & live[None, :]
    ml, _, mult, fa, ef, of, av, bv = lane_constants(a_ptr, b_ptr, lanes_ptr, L, c, live,
                                                     kidx, krow, m2, K)
    # (K, lanes) work layout of a checkpoint / trajectory row; masked rows hold 1 (no 0/0)
    s_off = (b[None, :] * K + kidx[:, None]) * C + c[None, :]
    w_off = kidx[:, None].to(tl.int64) * n_lanes + n[None, :]
    S = tl.load(s_ptr + s_off, mask=m2, other=1.0)
    xo = b * T * C + c
    for kseg in range(NSEG):                     # checkpoints of the trajectory
        tl.store(ck_ptr + kseg * K * n_lanes + w_off, S, mask=m2)
        for t in range(kseg * SEG, tl.minimum(T, (kseg + 1) * SEG)):
            v = tl.maximum(tl.load(x_ptr + xo + t * C, mask=live, other=0.0), ml)
            Q, V = _loops(v, S, fa, ef, of, kidx, K, LIMIT_ON)
            S = tl.where(krow[:, None], av[:, None] * S + bv[:, None] * V, S)
    lam = tl.load(mu_ptr + s_off, mask=m2, other=0.0)
    gal = tl.zeros_like(lam)
    for kk in range(NSEG):
        kseg = NSEG - 1 - kk
        t0 = kseg * SEG
        t1 = tl.minimum(T, t0 + SEG)
        S = tl.load(ck_ptr + kseg * K * n_lanes + w_off, mask=m2, other=1.0)
        for t in range(t0, t1):
            tl.store(tr_ptr + (t - t0) * K * n_lanes + w_off, S, mask=m2)
            v = tl.maximum(tl.load(x_ptr + xo + t * C, mask=live, other=0.0), ml)
            Q, V = _loops(v, S, fa, ef, of, kidx, K, LIMIT_ON)
            S = tl.where(krow[:, None], av[:, None] * S + bv[:, None] * V, S)
        for ii in range(t1 - t0):
            t = t1 - 1 - ii
            S = tl.load(tr_ptr + (t - t0) * K * n_lanes + w_off, mask=m2, other=1.0)
            xv = tl.load(x_ptr + xo + t * C, mask=live, other=0.0)
            Q, V = _loops(tl.maximum(xv, ml), S, fa, ef, of, kidx, K, LIMIT_ON)
            gv = mult * tl.load(gy_ptr + xo + t * C, mask=live, other=0.0)
            for j in tl.static_range(K):
                k = K - 1 - j
                sel = kidx[:, None] == k
                st = _row(S, kidx, k)
                q = _row(Q, kidx, k)
                lk = _row(lam, kidx, k)
                ak = tl.sum(tl.where(kidx == k, av, 0.0), axis=0)
                bk = tl.sum(tl.where(kidx == k, bv, 0.0), axis=0)
                gv += bk * lk
                gal = tl.where(sel, gal + (lk * (st - _row(V, kidx, k)))[None, :], gal)
                if LIMIT_ON:
                    hi = q > 1.0
                    fak = _row(fa, kidx, k)
                    efk = _row(ef, kidx, k)
                    e = tl.exp(tl.where(hi, efk * (q - 1.0), 0.0))
                    gv = tl.where(hi, -gv * fak * efk * e / ((1.0 + e) * (1.0 + e)), gv)
                lam = tl.where(sel, (ak * lk - gv * q / st)[None, :], lam)
                gv = gv / st
            go = gx_ptr + xo + t * C
            tl.store(go, tl.load(go, mask=live, other=0.0) + tl.where(xv > ml, gv, 0.0),
                     mask=live)
    tl.store(mu_ptr + s_off, lam, mask=m2)
    tl.store(ga_ptr + w_off, gal, mask=m2)


def adaptloop_adjoint(a, bcoef, lanes, limit_on, s_in, x, gy, mu, gx, ga):
    """Adjoint of the adaptation loops (Triton); mirrors
    :func:`rtamt.adaptation.adaptloop_grad.adaptloop_adjoint`, same arguments as float64
    tensors on one device:

    a, bcoef : (K,); lanes : (3 + 4K, L) the forward kernel's per-channel constants
    (``AdaptLoopCoeffs.lanes``; the first C lanes are read); limit_on : bool;
    s_in : (B, K, C) incoming dividers; x, gy : (B, T, C);
    mu : (B, K, C) in: gradient of the outgoing dividers, out: of the incoming ones;
    gx : (B, T, C) added to; ga : (K,) added to (summed per lane over the block, then
    over the lanes).

    Work arrays allocated here: the checkpoints ``(T / SEGMENT) K`` and one segment's
    dividers ``SEGMENT K`` values a lane, and the per-lane sums of ``ga``.
    """
    B, T, C = x.shape
    K = a.shape[0]
    for name, t in (("a", a), ("bcoef", bcoef), ("lanes", lanes), ("s_in", s_in), ("x", x),
                    ("gy", gy), ("mu", mu), ("gx", gx), ("ga", ga)):
        assert t.is_contiguous(), f"adaptloop_adjoint: {name} must be contiguous"
        assert t.dtype == torch.float64, f"adaptloop_adjoint: {name} must be float64"
    assert bcoef.shape == ga.shape == (K,) and lanes.shape[0] == 3 + 4 * K
    assert lanes.shape[1] >= C and s_in.shape == mu.shape == (B, K, C)
    assert gy.shape == gx.shape == x.shape
    n = B * C
    if n == 0 or T == 0:
        return
    nseg = -(-T // SEGMENT)
    dev = x.device
    ck = torch.empty((nseg, K, n), dtype=torch.float64, device=dev)
    tr = torch.empty((min(SEGMENT, T), K, n), dtype=torch.float64, device=dev)
    gal = torch.empty((K, n), dtype=torch.float64, device=dev)
    KP = triton.next_power_of_2(K)
    _adaptloop_adjoint_kernel[(triton.cdiv(n, BLOCK),)](
        a, bcoef, lanes, s_in, x, gy, mu, gx, gal, ck, tr, n, T, C, lanes.shape[1],
        SEGMENT, nseg, K=K, KP=KP, LIMIT_ON=bool(limit_on), BLOCK=BLOCK)
    ga += gal.sum(dim=1)
