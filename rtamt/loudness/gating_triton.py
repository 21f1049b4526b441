"""Triton twin of the gating-block kernel (:func:`rtamt.loudness.gating.block_powers`):
the 100 ms step clock of the BS.1770 / EBU R128 meter with the momentary (400 ms) and
short-term (3 s) window powers (BS.1770-4 Annex 1, eqs. (1)-(2); EBU Tech 3341 section
2.2) over 10 ms fine blocks.

Same name, arguments and arithmetic as the numba kernel, on torch tensors (one device,
contiguous): ``weights`` ``(C,)`` float64, ``fine_lens`` ``(P,)`` int64, the state
``acc`` ``(B, C)`` float64, ``fill`` / ``n_fine`` / ``count`` ``(B,)`` int64, ``ring_e``
``(B, 300)`` float64, ``ring_n`` ``(B, 300)`` int64, ``peak`` ``(B, 2)`` float64 (advanced
in place), ``y`` ``(B, T, C)`` float64 and ``out`` ``(B, K, 3)`` float64 (written).  One
lane per stream walks the block sample by sample: each channel's squares are added to its
fine-block sum in time order (what numba's per-channel runs add), a completed fine block's
weighted sum goes to the ring and the window means are summed oldest first, as in numba;
the window sums run only when some lane of the program completed a fine block.  The two
paths differ only where one compiler contracts ``a + v * v`` into an FMA and the other
does not, and any partition of a stream gives the same bits on either.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .gating import FINE, N_MOMENTARY, RING
from .triton_common import _F64, _NUM_WARPS, _check, _check_index, _grid, _lane_ids

__all__ = ["block_powers"]

#: lanes (streams) per program
_BLOCK = 16
_NM = tl.constexpr(N_MOMENTARY * FINE)     # fine blocks in the momentary window (40)
_NS = tl.constexpr(RING)                   # ... in the short-term window (300)
_FINE = tl.constexpr(FINE)


@triton.jit
def _window(ring_e_ptr, ring_n_ptr, b, k, n, m):
    """Mean power of the last ``n`` fine blocks before fine block ``k`` (oldest first)."""
    se = tl.zeros(k.shape, tl.float64)
    sn = tl.zeros(k.shape, tl.int64)
    for j in range(n):
        r = (k - n + j) % _NS
        se += tl.load(ring_e_ptr + b * _NS + r, mask=m, other=0.0)
        sn += tl.load(ring_n_ptr + b * _NS + r, mask=m, other=1)
    return se / sn.to(tl.float64)


@triton.jit
def _square_in(y_ptr, acc_ptr, b, t, T, C, m):
    """Sample ``t``'s squares added to each channel's open fine-block sum ``acc``."""
    for c in range(C):
        v = tl.load(y_ptr + (b * T + t) * C + c, mask=m, other=0.0)
        a = tl.load(acc_ptr + b * C + c, mask=m, other=0.0)
        tl.store(acc_ptr + b * C + c, a + v * v, mask=m)


@triton.jit
def _close(w_ptr, acc_ptr, b, C, done):
    """The weighted energy ``sum_c G_c acc_c`` of the lanes ``done`` (a fine block
    completed), their sums reset to 0."""
    e = tl.zeros(done.shape, tl.float64)
    for c in range(C):
        e += tl.load(w_ptr + c) * tl.load(acc_ptr + b * C + c, mask=done, other=0.0)
        tl.store(acc_ptr + b * C + c, tl.zeros(done.shape, tl.float64), mask=done)
    return e


@triton.jit
def _block_powers_kernel(w_ptr, lens_ptr, acc_ptr, fill_ptr, nf_ptr, ring_e_ptr, ring_n_ptr,
                         peak_ptr, y_ptr, out_ptr, count_ptr, B, T, C, P, K,
                         BLOCK: tl.constexpr):
    b = _lane_ids(BLOCK)
    m = b < B
    fill = tl.load(fill_ptr + b, mask=m, other=0)
    k = tl.load(nf_ptr + b, mask=m, other=0)
    pm = tl.load(peak_ptr + b * 2, mask=m, other=0.0)
    ps = tl.load(peak_ptr + b * 2 + 1, mask=m, other=0.0)
    cnt = tl.zeros([BLOCK], tl.int64)
    nan = tl.full([BLOCK], float("nan"), tl.float64)
    for t in range(T):
        _square_in(y_ptr, acc_ptr, b, t, T, C, m)
        fill += 1
        flen = tl.load(lens_ptr + k % P, mask=m, other=1)
        done = m & (fill == flen)
        if tl.max(done.to(tl.int32), axis=0) > 0:
            e = _close(w_ptr, acc_ptr, b, C, done)
            tl.store(ring_e_ptr + b * _NS + k % _NS, e, mask=done)
            tl.store(ring_n_ptr + b * _NS + k % _NS, fill, mask=done)
            fill = tl.where(done, 0, fill)
            k = tl.where(done, k + 1, k)
            full_m = done & (k >= _NM)
            em = tl.where(full_m, _window(ring_e_ptr, ring_n_ptr, b, k, _NM, full_m), nan)
            pm = tl.where(full_m & (em > pm), em, pm)
            full_s = done & (k >= _NS)
            es = nan
            if tl.max(full_s.to(tl.int32), axis=0) > 0:
                es = tl.where(full_s, _window(ring_e_ptr, ring_n_ptr, b, k, _NS, full_s), nan)
            ps = tl.where(full_s & (es > ps), es, ps)
            step = done & (k % _FINE == 0)
            row = out_ptr + (b * K + cnt) * 3
            tl.store(row, (k // _FINE).to(tl.float64), mask=step)
            tl.store(row + 1, em, mask=step)
            tl.store(row + 2, es, mask=step)
            cnt = tl.where(step, cnt + 1, cnt)
    tl.store(fill_ptr + b, fill, mask=m)
    tl.store(nf_ptr + b, k, mask=m)
    tl.store(peak_ptr + b * 2, pm, mask=m)
    tl.store(peak_ptr + b * 2 + 1, ps, mask=m)
    tl.store(count_ptr + b, cnt, mask=m)
    for r in range(K):
        rest = m & (r >= cnt)
        row = out_ptr + (b * K + r) * 3
        tl.store(row, tl.full([BLOCK], -1.0, tl.float64), mask=rest)
        tl.store(row + 1, nan, mask=rest)
        tl.store(row + 2, nan, mask=rest)


def block_powers(weights, fine_lens, acc, fill, n_fine, ring_e, ring_n, peak, y, out, count):
    """Advance the step clock over K-weighted ``y`` ``(B, T, C)`` (Triton); mirrors
    :func:`rtamt.loudness.gating.block_powers` (see the module docstring)."""
    B, T, C = y.shape
    _check(_F64, weights=weights, acc=acc, ring_e=ring_e, peak=peak, y=y, out=out)
    _check_index(fine_lens=fine_lens, fill=fill, n_fine=n_fine, ring_n=ring_n, count=count)
    K = out.shape[1]
    assert acc.shape == (B, C) and ring_e.shape == ring_n.shape == (B, RING)
    assert peak.shape == (B, 2) and tuple(out.shape) == (B, K, 3) and weights.shape == (C,)
    if B == 0:
        return
    _block_powers_kernel[_grid(B, _BLOCK)](
        weights, fine_lens, acc, fill, n_fine, ring_e, ring_n, peak, y, out, count, B, T, C,
        fine_lens.shape[0], K, BLOCK=_BLOCK, num_warps=_NUM_WARPS, enable_fp_fusion=True)
