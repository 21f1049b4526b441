"""LLVM operations that numba's Python subset cannot spell, as numba intrinsics.

* :func:`fma` - ``a * b + c`` with one rounding (IEEE 754-2008 fusedMultiplyAdd), the
  ``llvm.fma`` intrinsic.  Written explicitly it is the same instruction wherever the
  expression is inlined, unlike automatic contraction, which LLVM applies per call site
  (so two code paths of one recursion could round differently).
* :func:`copy8` - eight consecutive values copied as one vector (the modulation bank's
  input gather).
* ``bits_to_f32``, ``bits_to_f64``, ``f64_to_bits`` - reinterpret an IEEE-754 bit pattern
  (LLVM ``bitcast``), for the exponent arithmetic of :mod:`rtamt.engine.fastexp`.

All use a documented numba extension point (:func:`numba.extending.intrinsic`); they
are inlined into the calling kernel and cached with it.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["copy8", "fma", "bits_to_f32", "bits_to_f64", "f64_to_bits"]


@intrinsic
def fma(typingctx, a, b, c):
    """``a * b + c`` rounded once (float32 or float64, all three the same type)."""
    if not (isinstance(a, types.Float) and a == b == c):
        return None

    def codegen(context, builder, sig, args):
        lt = context.get_value_type(sig.return_type)
        name = "llvm.fma.f64" if sig.return_type == types.float64 else "llvm.fma.f32"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(lt, [lt, lt, lt]),
                                            name)
        return builder.call(fn, args)

    return a(a, a, a), codegen


@intrinsic
def copy8(typingctx, src, soff, dst, doff):
    """``dst[doff:doff+8] = src[soff:soff+8]``: one vector load, one vector store.

    ``src``/``dst``: 1-D C-contiguous arrays of one float dtype.  An element loop
    between two arrays is kept in order one value at a time (numba cannot tell LLVM
    that the arrays are distinct); as one vector the copy does not depend on that.
    No bounds check: the caller keeps both ranges inside their arrays.
    """
    if not (isinstance(src, types.Array) and isinstance(dst, types.Array)
            and src.ndim == dst.ndim == 1 and src.layout == dst.layout == "C"
            and src.dtype == dst.dtype and isinstance(src.dtype, types.Float)):
        return None
    sig = types.void(src, types.intp, dst, types.intp)

    def codegen(context, builder, signature, args):
        s, so, d, do = args
        sa = context.make_array(signature.args[0])(context, builder, s)
        da = context.make_array(signature.args[2])(context, builder, d)
        et = context.get_data_type(signature.args[0].dtype)
        vp = ir.VectorType(et, 8).as_pointer()
        align = signature.args[0].dtype.bitwidth // 8
        v = builder.load(builder.bitcast(builder.gep(sa.data, [so]), vp), align=align)
        builder.store(v, builder.bitcast(builder.gep(da.data, [do]), vp), align=align)
        return context.get_dummy_value()

    return sig, codegen


def _bitcast(src, dst):
    """An intrinsic reinterpreting a ``src`` value's bits as ``dst`` (same width)."""
    @intrinsic
    def cast(typingctx, v):
        if v != src:
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], context.get_value_type(dst))

        return dst(src), codegen

    return cast


bits_to_f32 = _bitcast(types.int32, types.float32)
bits_to_f64 = _bitcast(types.int64, types.float64)
f64_to_bits = _bitcast(types.float64, types.int64)
