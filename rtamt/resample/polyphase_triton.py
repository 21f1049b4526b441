"""Triton kernel of the streaming polyphase resampler; mirrors the numba kernel
:func:`rtamt.resample.polyphase.polyphase_resample`.

Causal polyphase FIR resampling by ``L / M = up / down`` (Crochiere & Rabiner 1983,
*Multirate Digital Signal Processing*, sec. 3.3.3): output ``i`` of a block, at position
``j = offset + i M`` of the upsampled grid relative to the block's first input, is
``y[i] = sum_{m=0}^{K-1} taps[p, m] ext[H + n0 - m]`` with ``n0 = j // L``,
``p = j mod L``, ``ext = concat(hist, x)`` along time and ``H = K - 1``.

Layout: one Triton lane per (stream, channel), :data:`BLOCK` lanes per program (the tail
masked).  A lane runs the block's outputs in a loop inside the kernel; each output sums
its ``K`` products in the order ``m = 0 .. K-1`` (as numba) in two loops, first the
taps that reach the block's input (``ext[n]`` with ``n >= H`` is ``x[n - H]``), then
those that reach the history, so it needs no copy of ``concat(hist, x)`` and no
per-tap select.  After its outputs the lane shifts its history in place
(``hist[t] <- ext[T + t]``, ascending ``t``: every element is read before it is
overwritten).  The phase ``offset`` is read by the kernel from the tensor (no host
round trip) and advanced afterwards on the device by the data-independent amount
``n_out M - T L``, exactly as numba does; the output count ``n_out`` is ``y``'s length
(:func:`rtamt.resample.polyphase.block_output_length`).  The value of an output depends
only on the taps and the input samples it covers, whatever the block boundaries, so any
block partition gives bit-identical outputs and state.

dtype semantics (those of the numba kernel): the products and the sum are in the stream's
dtype (float32 streams use the float32 taps ``ResamplerCoeffs.taps32``); the positions
are int64.

Rounding: the launch enables FP fusion (``enable_fp_fusion=True``) because numba compiles
the kernel with ``fastmath={'contract'}`` and fuses ``acc + h x``; the GPU compiler fuses
the multiply-adds (``fma.rn``), Triton's interpreter never does (the last bits differ).
The in-place history shift relies on the load-before-store order inside one lane.  The
sum starts from 0 where numba's one-channel branch starts from the first product: the
same value up to the sign of a zero.  The phase arithmetic is int64.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["BLOCK", "polyphase_resample"]

BLOCK = 32
"""Lanes (stream, channel) per Triton program; a power of two (``tl.arange``)."""


@triton.jit
def _polyphase_kernel(taps_ptr, offset_ptr, hist_ptr, x_ptr, y_ptr, N, T, C, K, NOUT,
                      UP, DOWN, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = i < N
    b = i // C
    c = i - b * C
    H = K - 1
    hrow = b * H * C + c             # hist[b, 0, c]
    xrow = b * T * C + c             # x[b, 0, c]
    yrow = b * NOUT * C + c          # y[b, 0, c]
    j = tl.load(offset_ptr)          # int64: position of output 0 on the upsampled grid
    for k in range(NOUT):
        n0 = j // UP                 # j >= 0: floor division; the newest input is x[n0]
        p = j - n0 * UP
        tp = taps_ptr + p * K
        nx = tl.minimum(n0 + 1, K)   # taps m < nx read x[n0 - m], the others hist
        acc = tl.zeros([BLOCK], dtype=y_ptr.dtype.element_ty)
        for m in range(0, nx):
            acc = acc + tl.load(tp + m) * tl.load(x_ptr + xrow + (n0 - m) * C, mask=live,
                                                  other=0.0)
        for m in range(nx, K):       # ext[H + n0 - m] = hist[H + n0 - m]
            acc = acc + tl.load(tp + m) * tl.load(hist_ptr + hrow + (H + n0 - m) * C,
                                                  mask=live, other=0.0)
        tl.store(y_ptr + yrow + k * C, acc, mask=live)
        j = j + DOWN
    # hist[t] <- ext[T + t]: from the old history while T + t < H, then from x
    nh = tl.maximum(H - T, 0)
    for t in range(0, nh):
        v = tl.load(hist_ptr + hrow + (T + t) * C, mask=live, other=0.0)
        tl.store(hist_ptr + hrow + t * C, v, mask=live)
    for t in range(nh, H):
        v = tl.load(x_ptr + xrow + (T + t - H) * C, mask=live, other=0.0)
        tl.store(hist_ptr + hrow + t * C, v, mask=live)


def polyphase_resample(taps, up, down, offset, hist, x, y):
    """Causal polyphase FIR resampling by ``up / down`` on torch tensors (Triton).

    Same arguments as the numba kernel :func:`rtamt.resample.polyphase.polyphase_resample`:

    taps   : (up, K) polyphase taps, x's dtype (``ResamplerCoeffs.taps`` / ``taps32``).
    up, down : Python ints, the reduced rate factors.
    offset : (1,) int64 tensor, the next output's position on the upsampled grid relative
             to ``x[0]``; advanced in place to ``offset + n_out down - T up``.
    hist   : (B, K-1, C) last K-1 input samples, x's dtype, advanced in place.
    x      : (B, T, C) input;  y : (B, n_out, C) output, x's dtype, ``n_out`` from
             :func:`rtamt.resample.polyphase.block_output_length` (if ``y`` shares memory
             with ``x``, ``x`` is copied first).

    All tensors contiguous and on one device; the grid is ``ceil(B C / BLOCK)`` programs.
    """
    B, T, C = x.shape
    K = taps.shape[1]
    nout = y.shape[1]
    for name, tns in (("taps", taps), ("offset", offset), ("hist", hist), ("x", x),
                      ("y", y)):
        assert tns.is_contiguous(), f"polyphase_resample: {name} must be contiguous"
    assert taps.shape[0] == up and taps.dtype == x.dtype
    assert offset.dtype == torch.int64 and tuple(offset.shape) == (1,)
    assert tuple(hist.shape) == (B, K - 1, C) and hist.dtype == x.dtype
    assert y.shape[0] == B and y.shape[2] == C and y.dtype == x.dtype
    n = B * C
    if n > 0 and T > 0:
        if y.numel() and x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr():
            x = x.clone()
        _polyphase_kernel[(triton.cdiv(n, BLOCK),)](
            taps, offset, hist, x, y, n, T, C, K, nout, int(up), int(down), BLOCK=BLOCK,
            enable_fp_fusion=True)
    offset += nout * int(down) - T * int(up)
