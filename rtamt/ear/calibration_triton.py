"""Triton twin of the calibration stage (:mod:`rtamt.ear.calibration`).

``y = x * gain`` elementwise on a time-major signal block, one lane per sample: one
correctly rounded product in the block's dtype, as numpy's (``float32(x) *
float32(gain)`` for a float32 block), so the two backends agree bit for bit.  The gain
comes as a (1,) tensor in the block's dtype, the device copy the stage's coefficient cache
keeps (a Python float argument would reach a compiled kernel as float32).
"""
from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["scale"]

BLOCK = 256


@triton.jit
def _scale_kernel(x_ptr, y_ptr, g_ptr, N, BLOCK: tl.constexpr):
    """``y[i] = x[i] * g`` for the flat indices ``i < N``."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    g = tl.load(g_ptr)
    x = tl.load(x_ptr + i, mask=m, other=0.0)
    tl.store(y_ptr + i, x * g, mask=m)


def scale(x, gain, y):
    """``y = x * gain`` (``x``, ``y``: tensors of one shape and dtype on one device, ``y``
    contiguous; ``gain`` a (1,) tensor in their dtype there).  Returns ``y``."""
    x = x.contiguous()
    n = x.numel()
    if n:
        _scale_kernel[(triton.cdiv(n, BLOCK),)](x, y, gain, n, BLOCK=BLOCK)
    return y
