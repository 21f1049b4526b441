"""Triton twin of the gating blocks' adjoint,
:func:`rtamt.loudness.gating_grad.block_powers_adjoint` (same name, same arguments, torch
tensors on one device; the derivation is in :mod:`rtamt.loudness.gating_grad`: ITU-R
BS.1770-4 Annex 1 eqs. (1)-(2), EBU Tech 3341 section 2.2, reverse mode as in Griewank &
Walther, *Evaluating Derivatives*, 2nd ed., 2008).

One lane per stream walks the block as the forward twin does
(:mod:`rtamt.loudness.gating_triton`): each channel's squares are added to its fine-block
sum in time order and a completed fine block's weighted energy is recomputed in the
numba adjoint's order (so the maxima's decisions are those of the forward pass); then the
window powers, their gradients from the output rows and the maxima, the fine blocks'
energy gradients, the ring's and the samples', all in the numba kernel's order.  Work
arrays (fine-block energies, lengths, ends and gradients, ``(B, 300 + F)`` with ``F`` the
most fine blocks a block of ``T`` samples completes) are allocated here.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .gating import RING
from .gating_triton import _BLOCK, _FINE, _NM, _NS, _close, _square_in
from .triton_common import _F64, _NUM_WARPS, _check, _check_index, _grid, _lane_ids

__all__ = ["block_powers_adjoint"]


@triton.jit
def _sums(E_ptr, N_ptr, base, f, n, m):
    """Energy and length sums of the ``n`` fine blocks before work entry ``RING + f + 1``
    (oldest first, as numba)."""
    se = tl.zeros(m.shape, tl.float64)
    sn = tl.zeros(m.shape, tl.float64)
    for j in range(n):
        i = base + _NS + f + 1 - n + j
        se += tl.load(E_ptr + i, mask=m, other=0.0)
        sn += tl.load(N_ptr + i, mask=m, other=1.0)
    return se, sn


@triton.jit
def _adjoint_kernel(w_ptr, lens_ptr, acc_ptr, fill_ptr, nf_ptr, ring_e_ptr, ring_n_ptr,
                    peak_ptr, y_ptr, gy_ptr, mu_acc_ptr, mu_ring_ptr, mu_peak_ptr, gx_ptr,
                    accw_ptr, E_ptr, N_ptr, ends_ptr, gw_ptr, gE_ptr, B, T, C, P, K, F,
                    BLOCK: tl.constexpr):
    b = _lane_ids(BLOCK)
    m = b < B
    W = _NS + F                               # work entries per stream
    base = b * W
    n0 = tl.load(nf_ptr + b, mask=m, other=0)
    fill = tl.load(fill_ptr + b, mask=m, other=0)
    # the ring's entries (fine blocks n0 - RING .. n0 - 1; none before the stream began)
    for i in range(_NS):
        j = n0 - _NS + i
        ok = m & (j >= 0)
        r = (j + _NS) % _NS
        tl.store(E_ptr + base + i, tl.load(ring_e_ptr + b * _NS + r, mask=ok, other=0.0), mask=m)
        tl.store(N_ptr + base + i,
                 tl.load(ring_n_ptr + b * _NS + r, mask=ok, other=0).to(tl.float64), mask=m)
    # walk the block: the fine blocks it completes, their energies and ends
    nf = tl.zeros([BLOCK], tl.int64)
    for t in range(T):
        _square_in(y_ptr, accw_ptr, b, t, T, C, m)
        fill += 1
        flen = tl.load(lens_ptr + (n0 + nf) % P, mask=m, other=1)
        done = m & (fill == flen)
        if tl.max(done.to(tl.int32), axis=0) > 0:
            e = _close(w_ptr, accw_ptr, b, C, done)
            tl.store(E_ptr + base + _NS + nf, e, mask=done)
            tl.store(N_ptr + base + _NS + nf, flen.to(tl.float64), mask=done)
            tl.store(ends_ptr + b * F + nf, tl.zeros([BLOCK], tl.int64) + t + 1, mask=done)
            fill = tl.where(done, 0, fill)
            nf = tl.where(done, nf + 1, nf)
    # the window powers' gradients: the output rows, then the maxima (arg -1: incoming)
    best_m = tl.load(peak_ptr + b * 2, mask=m, other=0.0)
    best_s = tl.load(peak_ptr + b * 2 + 1, mask=m, other=0.0)
    arg_m = tl.full([BLOCK], -1, tl.int64)
    arg_s = tl.full([BLOCK], -1, tl.int64)
    row = tl.zeros([BLOCK], tl.int64)
    for f in range(F):
        act = m & (f < nf)
        k = n0 + f + 1
        fm = act & (k >= _NM)
        se, sn = _sums(E_ptr, N_ptr, base, f, _NM, fm)
        up = fm & (se / sn > best_m)
        best_m = tl.where(up, se / sn, best_m)
        arg_m = tl.where(up, f, arg_m)
        fs = act & (k >= _NS)
        se, sn = _sums(E_ptr, N_ptr, base, f, _NS, fs)
        up = fs & (se / sn > best_s)
        best_s = tl.where(up, se / sn, best_s)
        arg_s = tl.where(up, f, arg_s)
        step = act & (k % _FINE == 0)
        g = tl.load(gy_ptr + (b * K + row) * 3 + 1, mask=step & fm, other=0.0)
        tl.store(gw_ptr + (b * F + f) * 2, tl.load(gw_ptr + (b * F + f) * 2, mask=act) + g,
                 mask=act)
        g = tl.load(gy_ptr + (b * K + row) * 3 + 2, mask=step & fs, other=0.0)
        tl.store(gw_ptr + (b * F + f) * 2 + 1,
                 tl.load(gw_ptr + (b * F + f) * 2 + 1, mask=act) + g, mask=act)
        row = tl.where(step, row + 1, row)
    for w in tl.static_range(2):
        arg = arg_m if w == 0 else arg_s
        hit = m & (arg >= 0)
        p = gw_ptr + (b * F + arg) * 2 + w
        tl.store(p, tl.load(p, mask=hit, other=0.0)
                 + tl.load(mu_peak_ptr + b * 2 + w, mask=hit, other=0.0), mask=hit)
        tl.store(mu_peak_ptr + b * 2 + w, tl.zeros([BLOCK], tl.float64), mask=hit)
    # back to the fine blocks' energies
    for f in range(F):
        act = m & (f < nf)
        k = n0 + f + 1
        for w in tl.static_range(2):
            n = _NM if w == 0 else _NS
            g = tl.load(gw_ptr + (b * F + f) * 2 + w, mask=act, other=0.0)
            on = act & (k >= n) & (g != 0.0)
            _, sn = _sums(E_ptr, N_ptr, base, f, n, on)
            for j in range(n):
                ix = base + _NS + f + 1 - n + j
                tl.store(gE_ptr + ix, tl.load(gE_ptr + ix, mask=on, other=0.0) + g / sn,
                         mask=on)
    # the ring: outgoing entries written here take mu_ring; the others pass it through
    for f in range(F):
        on = m & (f < nf) & (f >= nf - _NS)
        ix = base + _NS + f
        r = (n0 + f) % _NS
        tl.store(gE_ptr + ix, tl.load(gE_ptr + ix, mask=on, other=0.0)
                 + tl.load(mu_ring_ptr + b * _NS + r, mask=on, other=0.0), mask=on)
    for f in range(F):
        on = m & (f < nf) & (f < _NS)
        tl.store(mu_ring_ptr + b * _NS + (n0 + f) % _NS, tl.zeros([BLOCK], tl.float64),
                 mask=on)
    for i in range(_NS):
        j = n0 - _NS + i
        on = m & (j >= 0)
        p = mu_ring_ptr + b * _NS + (j + _NS) % _NS
        tl.store(p, tl.load(p, mask=on, other=0.0)
                 + tl.load(gE_ptr + base + i, mask=on, other=0.0), mask=on)
    # back to the samples (fine block f, or the block still open at the end: mu_acc),
    # then the incoming open-block sums (those of the first fine block, when one completed)
    cur = tl.zeros([BLOCK], tl.int64)
    for t in range(T):
        inb = m & (cur < nf)
        gf = tl.load(gE_ptr + base + _NS + cur, mask=inb, other=0.0)
        for c in range(C):
            v = tl.load(y_ptr + (b * T + t) * C + c, mask=m, other=0.0)
            gc = tl.where(inb, 2.0 * tl.load(w_ptr + c) * gf,
                          2.0 * tl.load(mu_acc_ptr + b * C + c, mask=m, other=0.0))
            p = gx_ptr + (b * T + t) * C + c
            tl.store(p, tl.load(p, mask=m, other=0.0) + gc * v, mask=m)
        end = tl.load(ends_ptr + b * F + cur, mask=inb, other=-1)
        cur = tl.where(inb & (end == t + 1), cur + 1, cur)
    some = m & (nf > 0)
    g0 = tl.load(gE_ptr + base + _NS, mask=some, other=0.0)
    for c in range(C):
        tl.store(mu_acc_ptr + b * C + c, tl.load(w_ptr + c) * g0, mask=some)


def block_powers_adjoint(weights, fine_lens, acc, fill, n_fine, ring_e, ring_n, peak, y, gy,
                         mu_acc, mu_ring, mu_peak, gx):
    """Adjoint of the gating blocks (Triton); mirrors
    :func:`rtamt.loudness.gating_grad.block_powers_adjoint`.

    weights ``(C,)`` float64, fine_lens ``(P,)`` int64; acc ``(B, C)`` float64, fill /
    n_fine ``(B,)`` int64, ring_e ``(B, 300)`` float64, ring_n ``(B, 300)`` int64, peak
    ``(B, 2)`` float64: the incoming state (read only); y ``(B, T, C)`` float64; gy
    ``(B, K, 3)`` float64 (NaN-free: the rule zeroes undefined rows); mu_acc ``(B, C)``,
    mu_ring ``(B, 300)``, mu_peak ``(B, 2)`` float64, in: gradients of the outgoing state,
    out: of the incoming one; gx ``(B, T, C)`` float64, added to."""
    B, T, C = y.shape
    gy = gy.contiguous()
    _check(_F64, weights=weights, acc=acc, ring_e=ring_e, peak=peak, y=y, gy=gy,
           mu_acc=mu_acc, mu_ring=mu_ring, mu_peak=mu_peak, gx=gx)
    _check_index(fine_lens=fine_lens, fill=fill, n_fine=n_fine, ring_n=ring_n)
    K = gy.shape[1]
    assert acc.shape == mu_acc.shape == (B, C) and weights.shape == (C,)
    assert ring_e.shape == ring_n.shape == mu_ring.shape == (B, RING)
    assert peak.shape == mu_peak.shape == (B, 2) and gx.shape == (B, T, C)
    if B == 0:
        return
    F = T // int(fine_lens.min()) + 1          # the most fine blocks T samples complete
    dev = y.device
    z = dict(dtype=torch.float64, device=dev)
    accw = acc.clone()
    E, N, gE = (torch.zeros((B, RING + F), **z) for _ in range(3))
    gw = torch.zeros((B, F, 2), **z)
    ends = torch.zeros((B, F), dtype=torch.int64, device=dev)
    _adjoint_kernel[_grid(B, _BLOCK)](
        weights, fine_lens, acc, fill, n_fine, ring_e, ring_n, peak, y, gy, mu_acc, mu_ring,
        mu_peak, gx, accw, E, N, ends, gw, gE, B, T, C, fine_lens.shape[0], K, F,
        BLOCK=_BLOCK, num_warps=_NUM_WARPS, enable_fp_fusion=True)
