"""Triton twins of the true-peak kernels (:mod:`rtamt.loudness.truepeak`): the ``'sinc'``
meter (Kaiser-windowed sinc to >= 768 kHz, 2x screening grid, parabolic refinement) and
the BS.1770-4 Annex 2 4x FIR (``'bs1770'``).

Same names, arguments and arithmetic as the numba kernels, on torch tensors (all on one
device, contiguous): ``h`` float64 phases, ``hist`` / ``tp`` / ``sp`` / ``out`` float64,
``x`` float32 or float64 (read as float64).  ``work`` (the numba kernels' scratch) is not
used: a lane reads its input samples from ``hist`` (before the block) and ``x`` directly.
One lane per (stream, channel) holds the running maximum in a register and loops over the
block's samples in stream order, so any partition of a stream gives the same bits on this
path, as on the numba path.  The taps of one interpolated value go in chunks of 16 along
a second tensor axis, each chunk summed by ``tl.sum`` (a tree; numba sums the half-sample
phase pair by pair, a fine phase as four partial sums and the Annex 2 taps in order), so
the two differ in the last bits (a few 1e-16 relative); every decision (candidate, climb,
maximum) is taken on those values in the same order.  The body of a lane's loop runs once
per point of the 2x grid (a sample point, then a midpoint), so the refinement is inlined
once; its hill climb, a ``while`` loop in numba, runs here as ``L`` masked steps (a climb
moves at most ``L`` times); refinements and climbing steps are skipped when no lane of
the program needs them.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .triton_common import _F64, _NUM_WARPS, BLOCK, _check, _grid, _lane_ids, _pymod
from .truepeak import SCREEN

__all__ = ["true_peak_fir", "true_peak_sinc"]

#: taps per chunk of an interpolated value's sum (a second tensor axis)
_KC = 16


@triton.jit
def _sample(x_ptr, hist_ptr, b, c, n, T, C, H, m):
    """Input sample ``n`` (``-H <= n < T``, relative to the block) of lane ``(b, c)``:
    ``hist[b, H + n, c]`` before the block, ``x[b, n, c]`` in it, as float64."""
    inx = n >= 0
    vx = tl.load(x_ptr + (b * T + n) * C + c, mask=m & inx, other=0.0).to(tl.float64)
    vh = tl.load(hist_ptr + (b * H + H + n) * C + c, mask=m & (n < 0), other=0.0)
    return tl.where(inx, vx, vh)


@triton.jit
def _finish(x_ptr, hist_ptr, tp_ptr, sp_ptr, out_ptr, i, b, c, zero, T, C, H, m, btp, bsp):
    """End of a block: the last ``H`` samples become the history (ascending, so a slot is
    read before it is written), the running peaks take the block's ``btp`` / ``bsp`` and
    ``out`` the running peaks."""
    for k in range(H):
        v = _sample(x_ptr, hist_ptr, b, c, zero + T - H + k, T, C, H, m)
        tl.store(hist_ptr + (b * H + k) * C + c, v, mask=m)
    tp = tl.load(tp_ptr + i, mask=m, other=0.0)
    sp = tl.load(sp_ptr + i, mask=m, other=0.0)
    tp = tl.where(btp > tp, btp, tp)
    sp = tl.where(bsp > sp, bsp, sp)
    tl.store(tp_ptr + i, tp, mask=m)
    tl.store(sp_ptr + i, sp, mask=m)
    tl.store(out_ptr + (b * 2) * C + c, tp, mask=m)
    tl.store(out_ptr + (b * 2 + 1) * C + c, sp, mask=m)


@triton.jit
def _taps(h_ptr, x_ptr, hist_ptr, b, c, row, j, T, C, K, H, m, KC: tl.constexpr):
    """``sum_k h[row, k] x[j - k]``, ``k = 0 .. K-1``, per lane (``row``, ``j``: ``[BLOCK]``;
    the history holds ``H`` samples): the taps in chunks of ``KC`` along a second axis,
    each chunk summed by ``tl.sum``, the chunks in order."""
    k = tl.arange(0, KC)
    acc = tl.zeros(j.shape, tl.float64)
    for k0 in range(0, K, KC):
        kk = k0 + k
        mk = m[:, None] & (kk < K)[None, :]
        hk = tl.load(h_ptr + row[:, None] * K + kk[None, :], mask=mk, other=0.0)
        xk = _sample(x_ptr, hist_ptr, b[:, None], c[:, None], j[:, None] - kk[None, :], T, C,
                     H, mk)
        acc += tl.sum(hk * xk, axis=1)
    return acc


@triton.jit
def _fine(h_ptr, x_ptr, hist_ptr, b, c, q, T, C, L, K, m, KC: tl.constexpr):
    """The waveform at fine position ``q`` (numba's ``_fine_value``): phase ``p = q mod L``
    of input sample ``n0 = q div L``, ``sum_k h[p, k] x[n0 + D - k]``; the sample itself
    for ``p = 0``."""
    p = _pymod(q, L)
    n0 = (q - p) // L
    acc = _taps(h_ptr, x_ptr, hist_ptr, b, c, p, n0 + K // 2, T, C, K, K, m, KC)
    return tl.where(p == 0, _sample(x_ptr, hist_ptr, b, c, n0, T, C, K, m), acc)


@triton.jit
def _climb(h_ptr, x_ptr, hist_ptr, b, c, qc, um, u0, up, s, T, C, L, K, cand,
           KC: tl.constexpr):
    """numba's ``_climb`` for the lanes ``cand``: from the 2x-grid point ``qc`` (signed
    values ``um``, ``u0``, ``up``) the fine grid is hill-climbed within
    ``[qc - L/2, qc + L/2]``; returns ``(q, gm, g0, gp, inner)`` as numba's."""
    Lh = L // 2
    den = 2.0 * u0 - um - up
    safe = tl.where(den > 0.0, den, 1.0)
    off = tl.floor((up - um) / (2.0 * safe) * Lh + 0.5)
    q = qc + tl.where(den > 0.0, off, 0.0).to(tl.int64)
    lo = qc - Lh
    hi = qc + Lh
    ninf = tl.full(q.shape, float("-inf"), tl.float64)
    g0 = s * _fine(h_ptr, x_ptr, hist_ptr, b, c, q, T, C, L, K, cand, KC)
    gm = tl.where(q > lo, s * _fine(h_ptr, x_ptr, hist_ptr, b, c, q - 1, T, C, L, K,
                                   cand & (q > lo), KC), ninf)
    gp = tl.where(q < hi, s * _fine(h_ptr, x_ptr, hist_ptr, b, c, q + 1, T, C, L, K,
                                   cand & (q < hi), KC), ninf)
    for _ in range(L):
        right = cand & (gp > g0) & (gp > gm)
        left = cand & (gm > g0) & (gm >= gp)
        if tl.sum((right | left).to(tl.int32), axis=0) > 0:
            q1 = tl.where(right, q + 1, tl.where(left, q - 1, q))
            qn = tl.where(right, q1 + 1, q1 - 1)
            ok = tl.where(right, q1 < hi, q1 > lo)
            gn = tl.where(ok, s * _fine(h_ptr, x_ptr, hist_ptr, b, c, qn, T, C, L, K,
                                        (right | left) & ok, KC), ninf)
            g1 = tl.where(right, gp, tl.where(left, gm, g0))
            gm = tl.where(right, g0, tl.where(left, gn, gm))
            gp = tl.where(right, gn, tl.where(left, g0, gp))
            g0 = g1
            q = q1
    return q, gm, g0, gp, (q > lo) & (q < hi)


@triton.jit
def _refine(h_ptr, x_ptr, hist_ptr, b, c, qc, um, u0, up, s, T, C, L, K, cand,
            KC: tl.constexpr):
    """numba's ``_refine`` for the lanes ``cand``: the climb (:func:`_climb`), then the
    vertex of the parabola through the point reached and its neighbours."""
    q, gm, g0, gp, inner = _climb(h_ptr, x_ptr, hist_ptr, b, c, qc, um, u0, up, s, T, C, L,
                                  K, cand, KC)
    d = 2.0 * g0 - gm - gp
    inner = inner & (d > 0.0)
    dsafe = tl.where(inner, d, 1.0)
    return tl.where(inner, g0 + (gp - gm) * (gp - gm) / (8.0 * dsafe), g0)


@triton.jit
def _sinc_pass(h_ptr, x_ptr, hist_ptr, b, c, m, M, T, C, L, K, screen, BLOCK: tl.constexpr,
               KC: tl.constexpr):
    """The stream-order pass of one lane per (stream, channel) over the block from the
    incoming peak ``M``: the body runs once per 2x-grid point ``jj`` (even: the sample
    point ``t - D`` of output ``t = jj // 2``, after the sample ``|x[t]|`` joined the
    maximum; odd: the midpoint ``m(t)``), in numba's order.  Returns ``(M, bsp, tsp,
    kind, ridx, rum, ru0, rup, rs)``: the true and sample peak, the sample peak's first
    index, and what set the last new true peak (numba's ``rec``: ``kind`` -1 the incoming
    peak, 0 a sample, ``ridx`` its index after the ``K`` history samples; 1 a refined
    crest from ``ridx = qc`` with ``rum``, ``ru0``, ``rup``, ``rs``; 2 a midpoint
    ``m[ridx]`` of sign ``rs``).  The forward kernel uses the peaks only (the compiler
    drops the rest); the adjoint the record."""
    zero = b * 0
    D = K // 2
    half = zero + L // 2                # the half-sample phase's row
    bsp = tl.zeros([BLOCK], tl.float64)
    tsp = zero
    kind = zero - 1
    ridx = zero
    rum = tl.zeros([BLOCK], tl.float64)
    ru0 = rum
    rup = rum
    rs = rum
    mprev = _taps(h_ptr, x_ptr, hist_ptr, b, c, half, zero - 1, T, C, K, K, m, KC)
    mc = mprev
    xs = tl.zeros([BLOCK], tl.float64)
    for jj in range(2 * T):
        tt = zero + jj // 2
        if jj % 2 == 0:
            a = tl.abs(_sample(x_ptr, hist_ptr, b, c, tt, T, C, K, m))
            tsp = tl.where(a > bsp, tt, tsp)
            bsp = tl.where(a > bsp, a, bsp)
            up = a > M
            kind = tl.where(up, 0, kind)
            ridx = tl.where(up, K + tt, ridx)
            M = tl.where(up, a, M)
            xs = _sample(x_ptr, hist_ptr, b, c, tt - D, T, C, K, m)
            mc = _taps(h_ptr, x_ptr, hist_ptr, b, c, half, tt, T, C, K, K, m, KC)
            cur = xs
            prv = mprev
            nxt = mc
            qc = (tt - D) * L
        else:
            cur = mc
            prv = xs
            nxt = _sample(x_ptr, hist_ptr, b, c, tt - D + 1, T, C, K, m)
            qc = (tt - D) * L + L // 2
            up = m & (mc != 0.0) & (tl.abs(mc) > M)
            kind = tl.where(up, 2, kind)
            ridx = tl.where(up, tt + 1, ridx)
            rs = tl.where(up, tl.where(mc > 0.0, 1.0, -1.0), rs)
            M = tl.where(up, tl.abs(mc), M)
            mprev = mc
        s = tl.where(cur > 0.0, 1.0, -1.0)
        u0 = s * cur
        cand = m & (cur != 0.0) & (u0 >= M * screen) & (u0 >= s * prv) & (u0 >= s * nxt)
        if tl.sum(cand.to(tl.int32), axis=0) > 0:
            v = _refine(h_ptr, x_ptr, hist_ptr, b, c, qc, s * prv, u0, s * nxt, s, T, C, L, K,
                        cand, KC)
            up = cand & (v > M)
            kind = tl.where(up, 1, kind)
            ridx = tl.where(up, qc, ridx)
            rum = tl.where(up, s * prv, rum)
            ru0 = tl.where(up, u0, ru0)
            rup = tl.where(up, s * nxt, rup)
            rs = tl.where(up, s, rs)
            M = tl.where(up, v, M)
    return M, bsp, tsp, kind, ridx, rum, ru0, rup, rs


@triton.jit
def _true_peak_sinc_kernel(h_ptr, hist_ptr, tp_ptr, sp_ptr, x_ptr, out_ptr, B, T, C, L, K,
                           screen: tl.float64, BLOCK: tl.constexpr, KC: tl.constexpr):
    """One lane per (stream, channel): :func:`_sinc_pass`, then the new history and
    peaks."""
    i = _lane_ids(BLOCK)
    m = i < B * C
    b = i // C
    c = i - b * C
    M = tl.load(tp_ptr + i, mask=m, other=0.0)
    M, bsp, _, _, _, _, _, _, _ = _sinc_pass(h_ptr, x_ptr, hist_ptr, b, c, m, M, T, C, L, K,
                                             screen, BLOCK, KC)
    _finish(x_ptr, hist_ptr, tp_ptr, sp_ptr, out_ptr, i, b, c, i * 0, T, C, K, m, M, bsp)


def true_peak_sinc(h, hist, tp, sp, x, out, work=None):
    """The ``'sinc'`` true-peak meter over ``x`` ``(B, T, C)`` (Triton); mirrors
    :func:`rtamt.loudness.truepeak.true_peak_sinc`.

    h    : (L, 2 D) float64  the interpolator (:func:`~rtamt.loudness.truepeak.sinc_phases`).
    hist : (B, 2 D, C) float64  the previous 2 D input samples, advanced in place.
    tp, sp : (B, C) float64  running true / sample peak, advanced in place.
    x    : (B, T, C) float32 or float64.
    out  : (B, 2, C) float64  written: ``tp``, ``sp`` after the block.
    work : ignored (the numba kernel's scratch).
    """
    B, T, C = x.shape
    L, K = h.shape
    _check(_F64, h=h, hist=hist, tp=tp, sp=sp, out=out)
    _check(x=x)
    assert hist.shape == (B, K, C) and tp.shape == sp.shape == (B, C)
    assert out.shape == (B, 2, C) and L % 2 == 0 and K % 4 == 0
    if B * C == 0:
        return
    _true_peak_sinc_kernel[_grid(B * C)](h, hist, tp, sp, x, out, B, T, C, L, K,
                                         float(SCREEN), BLOCK=BLOCK, KC=_KC,
                                         num_warps=_NUM_WARPS, enable_fp_fusion=True)


@triton.jit
def _true_peak_fir_kernel(h_ptr, hist_ptr, tp_ptr, sp_ptr, x_ptr, out_ptr, B, T, C, P, K,
                          BLOCK: tl.constexpr, KC: tl.constexpr):
    i = _lane_ids(BLOCK)
    m = i < B * C
    b = i // C
    c = i - b * C
    H = K - 1
    zero = i * 0
    bsp = tl.zeros([BLOCK], tl.float64)
    btp = tl.zeros([BLOCK], tl.float64)
    for t in range(T):
        tt = zero + t
        a = tl.abs(_sample(x_ptr, hist_ptr, b, c, tt, T, C, H, m))
        bsp = tl.where(a > bsp, a, bsp)
        for p in range(P):
            a = tl.abs(_taps(h_ptr, x_ptr, hist_ptr, b, c, zero + p, tt, T, C, K, H, m, KC))
            btp = tl.where(a > btp, a, btp)
    btp = tl.where(bsp > btp, bsp, btp)
    _finish(x_ptr, hist_ptr, tp_ptr, sp_ptr, out_ptr, i, b, c, zero, T, C, H, m, btp, bsp)


def true_peak_fir(h, hist, tp, sp, x, out, work=None):
    """The Annex 2 (``'bs1770'``) true-peak meter over ``x`` ``(B, T, C)`` (Triton);
    mirrors :func:`rtamt.loudness.truepeak.true_peak_fir`.

    h    : (4, 12) float64  BS.1770-4 Annex 2 phases.
    hist : (B, 11, C) float64  the previous 11 input samples, advanced in place.
    tp, sp, x, out, work : as :func:`true_peak_sinc`.
    """
    B, T, C = x.shape
    P, K = h.shape
    _check(_F64, h=h, hist=hist, tp=tp, sp=sp, out=out)
    _check(x=x)
    assert hist.shape == (B, K - 1, C) and tp.shape == sp.shape == (B, C)
    assert out.shape == (B, 2, C)
    if B * C == 0:
        return
    _true_peak_fir_kernel[_grid(B * C)](h, hist, tp, sp, x, out, B, T, C, P, K, BLOCK=BLOCK,
                                        KC=_KC, num_warps=_NUM_WARPS, enable_fp_fusion=True)
