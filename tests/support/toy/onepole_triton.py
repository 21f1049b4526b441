"""Triton twin of :func:`tests.toy.onepole.one_pole`: one lane per (stream, channel)."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _one_pole_kernel(a_ptr, y0_ptr, x_ptr, y_ptr, N, T, C, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    b = i // C
    c = i % C
    a = tl.load(a_ptr)
    z = tl.load(y0_ptr + i, mask=m, other=0.0)
    for t in range(T):
        o = (b * T + t) * C + c
        xv = tl.load(x_ptr + o, mask=m, other=0.0).to(tl.float64)
        z = ((1.0 - a) * xv + a * z.to(tl.float64)).to(z.dtype)
        tl.store(y_ptr + o, z, mask=m)
    tl.store(y0_ptr + i, z, mask=m)


def one_pole(a, y0, x, y):
    B, T, C = x.shape
    N = B * C
    if N:
        _one_pole_kernel[(triton.cdiv(N, 64),)](a, y0, x, y, N, T, C, BLOCK=64,
                                                enable_fp_fusion=False)
