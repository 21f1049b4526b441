"""Triton kernel of the streaming FIR ear filters; mirrors :func:`rtamt.ear.fir.fir_tm`.

Direct-form FIR (Oppenheim & Schafer, *Discrete-Time Signal Processing*, 3rd ed., sec.
6.5): ``y[t] = sum_{k=0}^{N-1} h[k] x[t-k]`` on time-major blocks, with the last N-1
input samples of the previous blocks as history.  The filters are those of
:mod:`rtamt.ear.filters` (headphone and outer ear after Pralong & Carlile 1996, middle ear
after Lopez-Poveda & Meddis 2001 / Jepsen et al. 2008), designed by
:func:`rtamt.ear.fir.fir_from_table`.  Declared with its numba twin by the ear filters
(:data:`rtamt.ear.fir.FIR`) and imported when a stage is bound to ``backend='triton'``.

Layout of the work: an FIR has no recursion, so every output sample is independent of
the others given the history.  One Triton lane per output sample ``(stream, t,
channel)`` (flat index of ``y``, channel fastest); a program runs :data:`BLOCK` lanes
(the tail is masked).  A lane loops over the taps ``k = 0 .. N-1`` in ascending order,
reading ``x[t-k]`` from the block when ``t - k >= 0`` and ``hist[N-1 + t-k]`` otherwise,
and writes its one output.  This departs from the one-lane-per-(stream, channel) layout
of the recursive kernels (:mod:`rtamt.engine.triton_lanes`): with one lane per
(stream, channel) a single-channel ear filter would run ``T * N`` dependent steps on as
many lanes as there are streams; here it runs ``N`` steps on ``B * T * C`` lanes, with
the same operations for every output sample.  The history is advanced afterwards, by a
copy in the wrapper (the last N-1 samples of ``[hist, x]``), once the kernel has read it.

Arithmetic (that of the numba kernel): the accumulator has the stream's dtype (float32
streams accumulate in float32, with the float32 taps ``FIRCoeffs.h32``), starts at 0 and
takes one fused multiply-add per tap in ascending k, ``acc = fma(h[k], x[t-k], acc)``.
Numba compiles ``v += h[k] * e[i]`` with ``fastmath={'contract'}``; on a CPU with FMA
(its assembly has only ``vfmadd*`` instructions there, no separate multiply or add)
every term is one fused multiply-add in that order, so the interpreter's
``tl.fma`` (exact, ``fma_fp64``/``fma_fp32``) gives the numba results bit for bit.  On a
CPU without FMA numba rounds the product and the sum separately (last-bit differences,
far below the tests' tolerances).  The launch disables FP fusion: there is no other
floating-point operation to fuse.  The output of sample t depends only on the history,
on ``x[t-N+1 .. t]`` and on the taps, in a fixed order, so any block partition gives
bit-identical results.

Constructs used: ``tl.program_id``, ``tl.arange``, ``tl.zeros``, masked ``tl.load`` /
``tl.store``, ``tl.where``, ``tl.fma``, integer arithmetic and a ``range`` loop over a
scalar kernel argument.  Compiled for a GPU (float32 and float64, also with ``C``, ``T``
and ``N`` specialised to 1) its only floating-point arithmetic is ``fma.rn.f32`` /
``fma.rn.f64``.  Each tap re-reads the inputs from global memory and loads its tap as a
scalar; a shared-memory tiling of the input window would be faster for the 513-tap
designs.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["BLOCK", "fir_tm"]

BLOCK = 128
"""Output samples (lanes) per Triton program; a power of two (``tl.arange``)."""

_NUM_WARPS = 4
"""Warps per program: 128 threads for the :data:`BLOCK` = 128 lanes (ignored by the
interpreter)."""


@triton.jit
def _fir_kernel(h_ptr, N, hist_ptr, x_ptr, y_ptr, L, T, C, BLOCK: tl.constexpr):
    """Lane ``i`` (flat index of ``y`` (B, T, C)) -> ``y[i] = sum_k h[k] e[t-k]``,
    ``e`` = the history (B, N-1, C) followed by the block x (B, T, C)."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = i < L
    bt = i // C                      # int64 from here on (i is int64)
    c = i - bt * C
    b = bt // T
    t = bt - b * T
    M = N - 1
    xo = b * T * C + c               # x[b, 0, c]
    ho = b * M * C + c               # hist[b, 0, c]
    acc = tl.zeros([BLOCK], dtype=y_ptr.dtype.element_ty)
    for k in range(N):
        hk = tl.load(h_ptr + k)
        s = t - k                    # input time; < 0: in the history (s >= -M)
        inx = s >= 0
        ex = tl.load(x_ptr + xo + s * C, mask=live & inx, other=0.0)
        eh = tl.load(hist_ptr + ho + (M + s) * C, mask=live & (s < 0), other=0.0)
        acc = tl.fma(hk, tl.where(inx, ex, eh), acc)
    tl.store(y_ptr + i, acc, mask=live)


def _overlap(a, b) -> bool:
    """Whether the memory of tensors ``a`` and ``b`` overlaps (both non-empty)."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


def fir_tm(h, hist, x, y):
    """Direct-form FIR on time-major torch tensors with an input history (Triton).

    Same arguments as :func:`rtamt.ear.fir.fir_tm`:

    h    : (N,)          taps, the stream's dtype (``FIRCoeffs.h`` float64 or ``h32``
                         float32).
    hist : (B, N-1, C)   the last N-1 input samples before this block, oldest first
                         (stream dtype); advanced in place to the last N-1 samples of
                         ``[hist, x]``.
    x    : (B, T, C)     input block (stream dtype).
    y    : (B, T, C)     output (stream dtype), ``y[t] = sum_{k=0}^{N-1} h[k] x[t-k]``;
                         may be ``x`` itself (then the kernel writes a temporary first).

    Each output is accumulated in the stream's dtype from 0 with one fused multiply-add
    per tap, k ascending (see the module docstring).  All tensors contiguous, on one
    device.  The grid is ceil(B T C / BLOCK) programs; the history is advanced after the
    kernel has read it (launches on one stream run in order).
    """
    B, T, C = x.shape
    N = h.shape[0]
    M = N - 1
    for name, tns in (("h", h), ("hist", hist), ("x", x), ("y", y)):
        assert tns.is_contiguous(), f"fir_tm: {name} must be contiguous"
    assert h.dtype == hist.dtype == x.dtype == y.dtype, \
        "fir_tm: h, hist, x, y must share the stream's dtype (FIRCoeffs.taps(dtype))"
    assert N >= 1 and hist.shape == (B, M, C) and y.shape == x.shape
    L = B * T * C
    if L == 0:
        return
    out = torch.empty_like(y) if _overlap(x, y) else y
    _fir_kernel[(triton.cdiv(L, BLOCK),)](h, N, hist, x, out, L, T, C, BLOCK=BLOCK,
                                         num_warps=_NUM_WARPS, enable_fp_fusion=False)
    if M:
        if T >= M:
            hist.copy_(x[:, T - M:])
        else:
            hist.copy_(torch.cat((hist[:, T:], x), dim=1))
    if out is not y:
        y.copy_(out)
