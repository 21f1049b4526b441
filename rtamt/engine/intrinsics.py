"""LLVM operations that numba's Python subset cannot spell, as numba intrinsics.

* :func:`fma` - ``a * b + c`` with one rounding (IEEE 754-2008 fusedMultiplyAdd), the
  ``llvm.fma`` intrinsic.  Written explicitly it is the same instruction wherever the
  expression is inlined, unlike automatic contraction, which LLVM applies per call site
  (so two code paths of one recursion could round differently).
* :func:`transpose4` - a 4 x 4 tile copy ``dst[j, i] = src[i, j]`` through four vector
  loads, eight shuffles and four vector stores (the textbook two-stage unpack
  transpose, e.g. Intel's optimisation manual, "matrix transposition" with
  ``unpcklpd``/``shufpd``); numba's scalar element loop moves one value per load/store
  pair.  Pure data movement: the values are copied bit for bit.
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

__all__ = ["copy8", "fma", "transpose4", "bits_to_f32", "bits_to_f64", "f64_to_bits"]

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


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


def _mask(*idx):
    return ir.Constant(ir.VectorType(_I32, len(idx)), [ir.Constant(_I32, i) for i in idx])


@intrinsic
def transpose4(typingctx, src, soff, sstride, dst, doff, dstride):
    """``dst[doff + j*dstride + i] = src[soff + i*sstride + j]`` for ``i, j < 4``.

    ``src``/``dst``: 1-D C-contiguous arrays of one float dtype (flat views of 2-D
    arrays); offsets and row strides in elements.  No bounds check: the caller keeps
    every touched element inside both arrays.
    """
    if not (isinstance(src, types.Array) and isinstance(dst, types.Array)
            and src.ndim == dst.ndim == 1 and src.layout == dst.layout == "C"
            and src.dtype == dst.dtype and isinstance(src.dtype, types.Float)):
        return None
    sig = types.void(src, types.intp, types.intp, dst, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        s, so, ss, d, do, ds = args
        sa = context.make_array(signature.args[0])(context, builder, s)
        da = context.make_array(signature.args[3])(context, builder, d)
        et = context.get_data_type(signature.args[0].dtype)
        vp = ir.VectorType(et, 4).as_pointer()
        align = signature.args[0].dtype.bitwidth // 8
        rows = []
        for i in range(4):
            p = builder.gep(sa.data, [builder.add(so, builder.mul(ss, ir.Constant(_I64, i)))])
            rows.append(builder.load(builder.bitcast(p, vp), align=align))
        # rows r_i = (a_i0, a_i1, a_i2, a_i3); stage 1 pairs rows, stage 2 pairs halves
        t0 = builder.shuffle_vector(rows[0], rows[1], _mask(0, 4, 2, 6))  # a00 a10 a02 a12
        t1 = builder.shuffle_vector(rows[0], rows[1], _mask(1, 5, 3, 7))  # a01 a11 a03 a13
        t2 = builder.shuffle_vector(rows[2], rows[3], _mask(0, 4, 2, 6))  # a20 a30 a22 a32
        t3 = builder.shuffle_vector(rows[2], rows[3], _mask(1, 5, 3, 7))  # a21 a31 a23 a33
        cols = (builder.shuffle_vector(t0, t2, _mask(0, 1, 4, 5)),
                builder.shuffle_vector(t1, t3, _mask(0, 1, 4, 5)),
                builder.shuffle_vector(t0, t2, _mask(2, 3, 6, 7)),
                builder.shuffle_vector(t1, t3, _mask(2, 3, 6, 7)))
        for j, col in enumerate(cols):
            p = builder.gep(da.data, [builder.add(do, builder.mul(ds, ir.Constant(_I64, j)))])
            builder.store(col, builder.bitcast(p, vp), align=align)
        return context.get_dummy_value()

    return sig, codegen


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
