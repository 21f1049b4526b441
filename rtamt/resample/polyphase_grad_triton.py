"""Triton twin of the polyphase resampler's adjoint
:func:`rtamt.resample.polyphase_grad.polyphase_adjoint` (Crochiere & Rabiner 1983,
*Multirate Digital Signal Processing*, sec. 3.3.3): the same name, arguments and
mathematics, on float64 torch tensors on one device.

The forward map is linear in ``e = [hist, x]`` (``H = K - 1`` history samples then the
``T`` block samples): output ``i`` is ``sum_m taps[p, m] e[H + n0 - m]`` with
``j = offset + i down``, ``n0 = j // up``, ``p = j - n0 up``.  numba scatters each output's
gradient onto the ``K`` samples it read; this kernel gathers instead, one Triton lane per
(stream, sample of ``e``, channel), :data:`BLOCK` lanes per program, a grid of
``ceil(B (H + T) C / BLOCK)`` programs.  Lane ``(b, n, c)`` visits the taps ``m`` in
ascending order; tap ``m`` reaches ``e[n]`` from the outputs whose ``n0 = n - H + m``, i.e.
``j`` in ``[n0 up, n0 up + up)``: at most ``ceil(up / down)`` consecutive outputs, from
``i = ceil((n0 up - offset) / down)``.  The outputs are thus met in ascending ``i``, the
order in which numba adds them, each term added with one fused multiply-add as numba's
contracted ``+=``.  Then the gradient ``mu`` of the outgoing history is added on the last
``H`` samples; lanes ``n < H`` write the gradient of the incoming history into ``mu``
(read from a copy of the incoming ``mu``: lanes read and write it), lanes ``n >= H`` add
theirs to ``gx[b, n - H, c]``.  The phase ``offset`` is read from the device tensor (no
host round trip) and not changed.

On a GPU: a program has exactly one thread per lane (BLOCK = 32 lanes, 1 warp), so each
``gx`` element a lane reads and writes is touched by one thread only, in program order;
the launch sets ``num_stages=1`` (no software pipelining of the loops' loads).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .polyphase_triton import BLOCK

__all__ = ["BLOCK", "polyphase_adjoint"]


@triton.jit
def _polyphase_adj_kernel(taps_ptr, offset_ptr, gy_ptr, gys_b, gys_i, gys_c, mu_ptr,
                          mu_in_ptr, gx_ptr, N, T, C, K, NOUT, UP, DOWN, QMAX,
                          BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = i < N
    H = K - 1
    E = H + T
    bn = i // C
    c = i - bn * C
    b = bn // E
    n = bn - b * E
    r = tl.load(offset_ptr)                          # int64, >= 0
    gyo = b * gys_b + c * gys_c
    ge = tl.zeros([BLOCK], dtype=tl.float64)
    for m in range(K):
        n0 = n - H + m                               # outputs whose newest sample is e[H+n0]
        num = tl.maximum(n0 * UP - r, 0)
        ilo = (num + DOWN - 1) // DOWN
        for q in range(QMAX):
            io = ilo + q
            j = r + io * DOWN
            ok = live & (io < NOUT) & (j < n0 * UP + UP)
            p = tl.where(ok, j - n0 * UP, 0)
            tap = tl.load(taps_ptr + p * K + m, mask=ok, other=0.0)
            g = tl.load(gy_ptr + gyo + tl.where(ok, io, 0) * gys_i, mask=ok, other=0.0)
            ge = tl.where(ok, tl.fma(tap, g, ge), ge)
    # the outgoing history is e[T:], whose gradient mu comes in
    hi = n >= T
    ge += tl.load(mu_in_ptr + (b * H + tl.where(hi, n - T, 0)) * C + c, mask=live & hi,
                  other=0.0)
    ish = n < H
    tl.store(mu_ptr + (b * H + tl.where(ish, n, 0)) * C + c, ge, mask=live & ish)
    xo = (b * T + tl.where(ish, 0, n - H)) * C + c
    xm = live & (n >= H)
    tl.store(gx_ptr + xo, tl.load(gx_ptr + xo, mask=xm, other=0.0) + ge, mask=xm)


def polyphase_adjoint(taps, up, down, offset, gy, mu, gx):
    """Adjoint of the causal polyphase FIR resampler (Triton); the arguments of the numba
    :func:`rtamt.resample.polyphase_grad.polyphase_adjoint`.

    taps   : (up, K) float64 polyphase taps;  up, down : Python ints;
    offset : (1,) int64 tensor, the block's incoming phase (read only, on the device);
    gy     : (B, n_out, C) output gradient, any strides;
    mu     : (B, K-1, C) in: gradient of the outgoing history, out: of the incoming one;
    gx     : (B, T, C) input gradient (added to).

    Float64 (``offset`` int64), contiguous except ``gy``, on one device; one launch of
    ``ceil(B (K - 1 + T) C / BLOCK)`` programs (module docstring), after a copy of ``mu``.
    """
    B, T, C = gx.shape
    K = taps.shape[1]
    nout = gy.shape[1]
    for name, tns in (("taps", taps), ("gy", gy), ("mu", mu), ("gx", gx)):
        assert name == "gy" or tns.is_contiguous(), \
            f"polyphase_adjoint: {name} must be contiguous"
        assert tns.dtype == torch.float64, f"polyphase_adjoint: {name} is not float64"
        assert tns.device == gx.device, f"polyphase_adjoint: {name} not on gx's device"
    assert offset.dtype == torch.int64 and tuple(offset.shape) == (1,)
    assert offset.device == gx.device
    assert taps.shape[0] == up and K >= 1
    assert tuple(mu.shape) == (B, K - 1, C) and gy.shape[0] == B and gy.shape[2] == C
    n = B * (K - 1 + T) * C
    if n == 0:
        return
    mu_in = mu.clone()
    _polyphase_adj_kernel[(triton.cdiv(n, BLOCK),)](
        taps, offset, gy, *gy.stride(), mu, mu_in, gx, n, T, C, K, nout, int(up), int(down),
        -(-int(up) // int(down)), BLOCK=BLOCK, num_warps=1, num_stages=1,
        enable_fp_fusion=True)
