"""The lane layout shared by the Triton kernels of the recursive stages (gammatone,
the shared SOS cascade, the modulation banks: ``gammatone_triton``, ``sos_triton``,
``modfb_triton``).

Each Triton twin has the name, the argument order and the argument meaning of the numba
kernel it mirrors, but takes torch tensors (all on one device) instead of numpy arrays.
Coefficient tensors are float64 as in numba (except the float32 coefficient row set of the
modulation bank, ``ModFilterbankCoeffs.bp_coef32``, which numba also uses as is); state,
``x`` and ``y`` tensors have the stream's dtype (float32 or float64); flags and counts
stay Python scalars.  States are advanced in place and ``y`` is a preallocated output
that the kernel writes; every tensor passed in must be contiguous.

The Triton modules are imported only when a stage is bound to ``backend='triton'``
(:class:`rtamt.engine.backend.Kernels`): importing triton costs start-up time and triton
is an optional extra (``pip install -e '.[gpu]'``).

Layout of the work: one Triton lane per independent recursion, i.e. per (stream,
channel) or (stream, filter); a program runs :data:`BLOCK` lanes (the tail is masked).
A lane loads its state once, runs the block's ``T`` samples in a ``for t in range(T)``
loop inside the kernel, writes ``y[b, t, ...]`` sample by sample and stores its state
back at the end.  ``T`` is only a loop bound, never an operand, so the arithmetic applied
to sample ``t`` depends only on the state and on ``x[t]``: any block partition gives
bit-identical results on this path, as on the numba path.

dtype semantics follow the numba kernels exactly: where numba multiplies a float64
coefficient by a state or input value, the product is formed in float64 here too and the
state is rounded to its own dtype after every sample; the modulation bank's complex
one-pole filters run in the dtype of their coefficients (float32 arithmetic for float32
streams) with the fused multiply-adds that the numba version spells out
(:func:`rtamt.engine.intrinsics.fma`), as ``tl.fma`` in the same places.

The kernels use only ``tl.load``/``tl.store`` with masks, ``tl.where``, ``tl.fma``,
``tl.sqrt``/``tl.sqrt_rn``, ``tl.maximum``, arithmetic, ``tl.constexpr`` flags and
``range`` loops over scalar kernel arguments.  CI checks their results with
``TRITON_INTERPRET=1`` on CPU tensors; every kernel also compiles to a cubin for sm_80
with Triton 3.9's CUDA backend (``triton.compile`` with a ``GPUTarget``, no device
needed), float32 and float64, with every ``tl.constexpr`` combination.  Numba compiles
``gammatone4``, ``sos_shared`` and ``cplx_biquad_bank`` with FMA contraction allowed;
their Triton launches pass ``enable_fp_fusion=True`` (contraction allowed; the default of
Triton 3.9, but 3.10 changes it) and the modulation bank's ``enable_fp_fusion=False``, as
numba's exact build.  Where contraction is allowed the two compilers may fuse different
products, which changes the last bits only (the tests allow 1e-12 relative in float64).
"""
from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["BLOCK", "NUM_WARPS", "grid", "check_contiguous", "lanes"]

BLOCK = 64
"""Lanes (independent recursions) per Triton program; a power of two (``tl.arange``)."""

NUM_WARPS = 2
"""Warps per program: 64 threads for the :data:`BLOCK` = 64 lanes (ignored by the
interpreter)."""


def grid(n_lanes: int) -> tuple:
    return (triton.cdiv(n_lanes, BLOCK),)


def check_contiguous(**tensors) -> None:
    for name, t in tensors.items():
        assert t.is_contiguous(), f"{name} must be contiguous"


@triton.jit
def lanes(N, W, BLOCK: tl.constexpr):
    """This program's lanes: mask ``i < N`` and (row, column) of lane ``i`` in a
    row-major (rows, W) lane grid, int64 (stream, channel or filter)."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    b = i // W
    return i < N, b, i - b * W
