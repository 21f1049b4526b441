"""Triton twin of the true peak's adjoint,
:func:`rtamt.loudness.truepeak_grad.true_peak_adjoint` (same name, same arguments, torch
tensors on one device; the derivation, a subgradient of the maximum at the value that set
it, is in :mod:`rtamt.loudness.truepeak_grad`: ITU-R BS.1770-4 Annex 2, quadratic
interpolation after J. O. Smith, *Spectral Audio Signal Processing*, 2011).

One lane per (stream, channel) reruns the forward twin's pass
(:mod:`rtamt.loudness.truepeak_triton`: its sample reads, interpolated values and hill
climb) and records what set the last new maximum, as the numba adjoint does with
``rec``; then the gradient of the outgoing peak goes to the samples that value reads, that
of the sample peak to the first largest sample, that of the outgoing history to its
samples, in the numba kernel's order, through a float64 work row of ``H + T`` values a
lane (allocated here).  The interpolated values are summed as the forward twin sums them
(chunks of taps, a tree each), so the two adjoints differ in the last bits of the values
(not in the decisions, for any input without exact ties).  ``work`` is not used.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_common import _F64, _NUM_WARPS, BLOCK, _check, _grid, _lane_ids, _pymod
from .truepeak import SCREEN
from .truepeak_triton import _KC, _climb, _sample, _sinc_pass, _taps

__all__ = ["true_peak_adjoint"]


@triton.jit
def _add(gw_ptr, row, idx, g, m):
    """``gw[row, idx] += g`` for the lanes ``m``."""
    p = gw_ptr + row + idx
    tl.store(p, tl.load(p, mask=m, other=0.0) + g, mask=m)


@triton.jit
def _fine_grad(h_ptr, gw_ptr, row, q, g, L, K, m):
    """``gw += g d/dw`` of the interpolated value at fine position ``q`` (numba's
    ``_fine_grad``; the work row's index ``K`` is the block's first sample)."""
    p = _pymod(q, L)
    n0 = (q - p) // L
    _add(gw_ptr, row, K + n0, g, m & (p == 0))
    j = K + n0 + K // 2
    mp = m & (p != 0)
    for k in range(K):
        _add(gw_ptr, row, j - k, g * tl.load(h_ptr + p * K + k, mask=mp, other=0.0), mp)


@triton.jit
def _signed(x_ptr, hist_ptr, b, c, n, T, C, H, m):
    """``+1`` / ``-1``: the sign of input sample ``n`` (``-1`` for 0, as numba)."""
    v = _sample(x_ptr, hist_ptr, b, c, n, T, C, H, m)
    return tl.where(v > 0.0, 1.0, -1.0)


@triton.jit
def _adjoint_kernel(h_ptr, hist_ptr, tp_ptr, sp_ptr, x_ptr, gy_ptr, mu_hist_ptr, mu_tp_ptr,
                    mu_sp_ptr, gx_ptr, gw_ptr, B, T, C, L, K, screen: tl.float64,
                    SINC: tl.constexpr, BLOCK: tl.constexpr, KC: tl.constexpr):
    i = _lane_ids(BLOCK)
    m = i < B * C
    b = i // C
    c = i - b * C
    zero = i * 0
    H = K if SINC else K - 1
    row = i * (H + T)
    tp0 = tl.load(tp_ptr + i, mask=m, other=0.0)
    # what set the outgoing true peak: kind -1 the incoming peak, 0 a sample (its w
    # index), 1 a refined crest (qc, um, u0, up, s), 2 a midpoint (m index, s)
    # (:func:`~rtamt.loudness.truepeak_triton._sinc_pass`), 3 the sample peak (bs1770),
    # 4 an Annex 2 phase (p, t); the sample peak's first maximum
    rp = zero
    if SINC:
        M, bsp, tsp, kind, ridx, rum, ru0, rup, rs = _sinc_pass(
            h_ptr, x_ptr, hist_ptr, b, c, m, tp0, T, C, L, K, screen, BLOCK, KC)
    else:
        kind = zero - 1
        ridx = zero
        rs = tl.zeros([BLOCK], tl.float64)
        bsp = tl.zeros([BLOCK], tl.float64)
        tsp = zero
        btp = tl.zeros([BLOCK], tl.float64)
        for t in range(T):
            a = tl.abs(_sample(x_ptr, hist_ptr, b, c, zero + t, T, C, H, m))
            tsp = tl.where(a > bsp, t, tsp)
            bsp = tl.where(a > bsp, a, bsp)
        for p in range(L):                   # phase-major, as numba's record
            for t in range(T):
                a = tl.abs(_taps(h_ptr, x_ptr, hist_ptr, b, c, zero + p, zero + t, T, C, K, H,
                                 m, KC))
                up_ = a > btp
                rp = tl.where(up_, p, rp)
                ridx = tl.where(up_, t, ridx)
                btp = tl.where(up_, a, btp)
        kind = tl.where(bsp > btp, 3, 4)
        btp = tl.where(bsp > btp, bsp, btp)
        kind = tl.where(btp > tp0, kind, -1)
    # the outgoing history
    for k in range(H):
        _add(gw_ptr, row, T + k, tl.load(mu_hist_ptr + (b * H + k) * C + c, mask=m,
                                         other=0.0), m)
    g = tl.load(gy_ptr + (b * 2) * C + c, mask=m, other=0.0) + tl.load(mu_tp_ptr + i, mask=m,
                                                                       other=0.0)
    tl.store(mu_tp_ptr + i, tl.where(kind == -1, g, 0.0), mask=m)
    # a sample: its own (0), or the first largest of the block (3)
    one = m & ((kind == 0) | (kind == 3))
    ws = tl.where(kind == 3, H + tsp, ridx)
    _add(gw_ptr, row, ws, g * _signed(x_ptr, hist_ptr, b, c, ws - H, T, C, H, one), one)
    if SINC:
        # a midpoint m[ridx]: the half-sample phase's symmetric pairs
        mid = m & (kind == 2)
        sg = g * rs
        for k in range(K // 2):
            hk = tl.load(h_ptr + (L // 2) * K + k + zero, mask=mid, other=0.0)
            _add(gw_ptr, row, ridx + K - 1 - k, sg * hk, mid)
            _add(gw_ptr, row, ridx + k, sg * hk, mid)
        # a refined crest: the climb again, then the vertex's derivatives
        cr = m & (kind == 1)
        if tl.sum(cr.to(tl.int32), axis=0) > 0:
            q, gm, g0, gp, inner = _climb(h_ptr, x_ptr, hist_ptr, b, c, ridx, rum, ru0, rup,
                                          rs, T, C, L, K, cr, KC)
            d = 2.0 * g0 - gm - gp
            ok = inner & (d > 0.0)
            ds = tl.where(ok, d, 1.0)
            r = tl.where(ok, gp - gm, 0.0)
            c0 = tl.where(ok, 1.0 - r * r / (4.0 * ds * ds), 1.0)
            cp = tl.where(ok, r / (4.0 * ds) + r * r / (8.0 * ds * ds), 0.0)
            cm = tl.where(ok, -r / (4.0 * ds) + r * r / (8.0 * ds * ds), 0.0)
            gs = g * rs
            _fine_grad(h_ptr, gw_ptr, row, q, gs * c0, L, K, cr)
            _fine_grad(h_ptr, gw_ptr, row, q - 1, gs * cm, L, K, cr & (cm != 0.0))
            _fine_grad(h_ptr, gw_ptr, row, q + 1, gs * cp, L, K, cr & (cp != 0.0))
    else:
        # an Annex 2 phase p at t: the sign of its value, then its taps
        ph = m & (kind == 4)
        v = _taps(h_ptr, x_ptr, hist_ptr, b, c, rp, ridx, T, C, K, H, ph, KC)
        sg = tl.where(v > 0.0, g, -g)
        for k in range(K):
            hk = tl.load(h_ptr + rp * K + k, mask=ph, other=0.0)
            _add(gw_ptr, row, H + ridx - k, sg * hk, ph)
    # the sample peak: the first largest |x| of the block, or the incoming one
    g = tl.load(gy_ptr + (b * 2 + 1) * C + c, mask=m, other=0.0) + tl.load(
        mu_sp_ptr + i, mask=m, other=0.0)
    sp0 = tl.load(sp_ptr + i, mask=m, other=0.0)
    new = m & (bsp > sp0)
    tl.store(mu_sp_ptr + i, tl.where(new, 0.0, g), mask=m)
    _add(gw_ptr, row, H + tsp, g * _signed(x_ptr, hist_ptr, b, c, tsp, T, C, H, new), new)
    # out: the incoming history's gradient, the block's
    for k in range(H):
        tl.store(mu_hist_ptr + (b * H + k) * C + c, tl.load(gw_ptr + row + k, mask=m,
                                                             other=0.0), mask=m)
    for t in range(T):
        px = gx_ptr + (b * T + t) * C + c
        tl.store(px, tl.load(px, mask=m, other=0.0) + tl.load(gw_ptr + row + H + t, mask=m,
                                                               other=0.0), mask=m)


def true_peak_adjoint(h, sinc, hist, tp, sp, x, gy, mu_hist, mu_tp, mu_sp, gx, work=None):
    """Adjoint of the true and sample peak (Triton); mirrors
    :func:`rtamt.loudness.truepeak_grad.true_peak_adjoint`.

    h ``(L, K)`` float64; hist ``(B, H, C)``, tp / sp ``(B, C)`` float64: the incoming
    state (read only); x ``(B, T, C)`` float64; gy ``(B, 2, C)`` float64 (NaN-free);
    mu_hist ``(B, H, C)``, mu_tp / mu_sp ``(B, C)`` float64, in: the gradients of the
    outgoing state, out: of the incoming one; gx ``(B, T, C)`` float64, added to; work:
    ignored (the numba kernel's scratch)."""
    B, T, C = x.shape
    L, K = h.shape
    gy = gy.contiguous()
    _check(_F64, h=h, hist=hist, tp=tp, sp=sp, x=x, gy=gy, mu_hist=mu_hist, mu_tp=mu_tp,
           mu_sp=mu_sp, gx=gx)
    H = K if sinc else K - 1
    assert hist.shape == mu_hist.shape == (B, H, C) and gx.shape == (B, T, C)
    assert tp.shape == sp.shape == mu_tp.shape == mu_sp.shape == (B, C)
    assert gy.shape == (B, 2, C)
    if B * C == 0:
        return
    gw = torch.zeros((B * C, H + T), dtype=torch.float64, device=x.device)
    _adjoint_kernel[_grid(B * C)](h, hist, tp, sp, x, gy, mu_hist, mu_tp, mu_sp, gx, gw,
                                  B, T, C, L, K, float(SCREEN), SINC=bool(sinc), BLOCK=BLOCK,
                                  KC=_KC, num_warps=_NUM_WARPS, enable_fp_fusion=True)
