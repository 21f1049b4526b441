"""Flush-to-zero / denormals-are-zero for the processing thread.

After loud input followed by digital silence, IIR states decay geometrically into
the subnormal range, where x86 arithmetic can be 10-100x slower.  rtamt sets the
FTZ (bit 15) and DAZ (bit 6) bits of the calling thread's MXCSR the first time a
thread processes a block.  This changes results only for values below 2.2e-308
(float64) / 1.2e-38 (float32): it adds no dither and no DC.

On x86 the bits are set by a tiny compiled function (``stmxcsr``/``ldmxcsr``,
:func:`set_mxcsr_bits`), cached on disk like the kernels.  Elsewhere (e.g. ARM, whose
flush bit lives in FPCR) ``torch.set_flush_denormal`` is used if torch is installed;
torch is imported only there, because importing it costs about a second.

The flags are per thread; :func:`ensure_ftz` is cheap after the first call in a
thread.  Set ``RTAMT_KEEP_DENORMALS=1`` to leave the thread's flags alone.
"""
from __future__ import annotations

import os
import platform
import threading

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .jit import JIT

_local = threading.local()

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")
_FTZ_DAZ = 0x8040


@intrinsic
def _mxcsr_or(typingctx, bits):
    """x86 only: OR ``bits`` (uint32) into the calling thread's MXCSR, return the old value."""
    if bits != types.uint32:
        return None

    def codegen(context, builder, sig, args):
        i8p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i8p])
        stmxcsr = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse.stmxcsr")
        ldmxcsr = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse.ldmxcsr")
        slot = cgutils.alloca_once(builder, ir.IntType(32))
        ptr = builder.bitcast(slot, i8p)
        builder.call(stmxcsr, [ptr])
        old = builder.load(slot)
        builder.store(builder.or_(old, args[0]), slot)
        builder.call(ldmxcsr, [ptr])
        return old

    return types.uint32(types.uint32), codegen


@njit(cache=JIT["cache"], nogil=True)   # False where no cache folder is writable (jit.py)
def set_mxcsr_bits(bits):
    """Compiled on first call (x86 only); the flags stay set in the thread after it returns."""
    return _mxcsr_or(bits)


def _flush_denormals() -> bool:
    """Set FTZ/DAZ in the calling thread; False where that is not possible."""
    if _X86:
        set_mxcsr_bits(np.uint32(_FTZ_DAZ))
        return True
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.set_flush_denormal(True))


def ftz_supported() -> bool:
    """Enable FTZ/DAZ in the calling thread; True if the platform supports it."""
    return _flush_denormals()


def ensure_ftz() -> None:
    """Enable FTZ/DAZ in the calling thread once (no-op afterwards)."""
    if getattr(_local, "done", False):
        return
    _local.done = True
    if os.environ.get("RTAMT_KEEP_DENORMALS") == "1":
        return
    _flush_denormals()
