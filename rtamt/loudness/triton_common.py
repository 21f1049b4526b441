"""What the Triton twins of the loudness stages share: launch helpers, the AGC step, and
the notes that hold for all of them.

The twins sit beside their stages (``spectrum_triton``, ``excitation_triton``,
``specific_loudness_triton``, ``agc_triton``, ``binaural_triton``; the row-wise products in
:mod:`rtamt.engine.rowwise_triton`).

Kernel by kernel, each public function of a twin module has the name, the argument
order and the argument meaning of the numba kernel it mirrors, but takes torch tensors
(all on one device, all contiguous) instead of numpy arrays: the spectrum of Glasberg &
Moore (2002, J. Audio Eng. Soc. 50, 331-342, §2.1), the excitation pattern and specific
loudness of ANSI S3.4-2007 (Moore, Glasberg & Baer 1997), the "AGC" integrators of
Glasberg & Moore (2002, eqs. 5-6) and the binaural inhibition of Moore et al. (2016,
Trends in Hearing 20) / Moore & Glasberg (2007, JASA 121, 1604-1612).  In-place arguments
are advanced in place and outputs are preallocated tensors that the kernel writes, as in
numba; ``band_ranges`` and ``matmul_rows`` return new tensors, as in numba.

dtypes are those the callers in :mod:`rtamt.loudness` and :mod:`rtamt.models` use: every
signal, state and coefficient tensor is float64 (the loudness models convert their input
to float64), except the lower-skirt tables ``a``, ``b`` of :func:`lower_skirt`, which are
float32 and whose weights are computed in float32 as in numba; index tensors are int64.
The wrappers assert these dtypes.  Scalar coefficients (``c_slope``, ``aa``, ``ar``,
``p``, ``C``) are Python floats; the kernels declare them ``tl.float64`` so that a
compiled launch passes them as doubles (an unannotated float argument would be float32).

Layout of the work (one Triton lane per independent output element or recursion):

* recursions (:func:`agc`, :func:`agc_rows`, :func:`binaural_frames`, the chunk ring of
  :func:`spectrum_chunks`) keep their state in registers: a lane loads it once, loops
  over the block's frames or chunks inside the kernel and stores it at the end.  The
  number of frames is only a loop bound, so the arithmetic of one frame depends only on
  the state and on that frame's input: any partition of the frames into calls gives
  bit-identical results on this path, as on the numba path;
* sums whose order numba fixes (the lower-skirt float32 partial sums flushed every
  ``SKIRT_FLUSH`` components, the row-wise products, autocorrelations, group sums) run
  in the same order per output element, so they differ from numba only where one
  compiler contracts a product into an FMA and the other does not;
* the one reduction whose order is not kept is the sum over the 150 channels in
  :func:`binaural_frames` (``tl.sum``, a tree): its relative error stays at a few 1e-16.

All kernels but :func:`lower_skirt` are launched with ``enable_fp_fusion=True``, because
numba compiles the loudness kernels with ``fastmath={'contract'}`` (FMA
contraction allowed; which products each compiler fuses may differ: the last bits only).
:func:`lower_skirt` is exact instead: it evaluates rtamt's own float32 ``exp2_neg_f32``
and float64 ``log_f64`` (:mod:`rtamt.engine.fastexp`) operation by operation, with
``tl.fma`` exactly where numba's x86-64 machine code for the kernel has an FMA (read with
``inspect_asm`` on an AVX-512 machine; the vector and the scalar remainder loops fuse the
same operations), launched with ``enable_fp_fusion=False`` so that nothing else is fused;
in the interpreter its excitation is bit-identical to numba's.  (On an x86 CPU without
FMA numba would not fuse at all, and the two would again differ in the last bits.)

What the kernels rely on where they are compiled for a device:

* the float64 ``tl.exp``/``tl.log`` of the kernels other than the lower skirt are
  libdevice's (the interpreter uses numpy's), so they may differ from numba's in the
  last bits;
* the lower skirt's float operations are correctly rounded (``.rn``), with exactly the
  explicit FMAs, float-to-int conversion truncating (as numba's), float32 subnormals kept
  (no flush to zero) and no approximate ``ex2``/``lg2``;
* scalar coefficients reach the kernels as doubles (the ``tl.float64`` annotations);
* reads after writes through global memory within one lane (the chunk ring of
  ``spectrum_chunks`` reads slot ``rho``, rewrites it and reads it again C chunks later;
  ``group_add`` updates one element for consecutive bins of a group) happen in program
  order: the kernels use no asynchronous copies or non-coherent loads that could reorder
  them;
* every thread of a binaural program writes the same value to ``ste``/``lte``.
"""
from __future__ import annotations

import math

import triton
import triton.language as tl

# launch helpers shared with the row-wise products (lanes per program, warps, checks of
# contiguity and dtype, the program's lane indices)
from ..engine.rowwise_triton import (  # noqa: E402
    _F64,
    _NUM_WARPS,
    BLOCK,
    _check,
    _check_index,
    _grid,
    _lane_ids,
)

__all__ = ["BLOCK", "_F64", "_NUM_WARPS", "_check", "_check_index", "_grid", "_lane_ids",
           "_pymod", "_agc_step", "_K10", "_LN2"]

# module constants (a constexpr must stand to the right of a tensor operand: the
# interpreter does not turn ``constexpr * tensor`` back into a tensor)
_K10 = tl.constexpr(10.0 / math.log(10.0))          # dB from ln(power)
_LN2 = tl.constexpr(math.log(2.0))


@triton.jit
def _pymod(v, C):
    """``v mod C`` with Python's sign convention (result in ``[0, C)`` for ``C > 0``);
    Triton's ``%`` truncates like C."""
    return (v % C + C) % C


@triton.jit
def _agc_step(x, y, aa, ar):
    """Asymmetric one-pole smoother ``y + a (x - y)``, ``a = aa`` if ``x > y`` else ``ar``
    (Glasberg & Moore 2002, eqs. 5-6; Moore et al. 2016)."""
    return y + tl.where(x > y, aa, ar) * (x - y)
