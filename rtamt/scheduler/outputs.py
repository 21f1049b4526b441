"""Output memory that already exists: the buffers a processing call writes its outputs
into, reused once nothing outside the scheduler holds them.

A call's output is one time-major array (a batched call: every stream's rows); each
stream's :class:`~rtamt.scheduler.stream.Result` holds views of it.  An
:class:`OutputPool` keeps such arrays (up to a depth its owner gives) and hands one back
for the next call only when no view of it is alive any more (its reference count is back to the
pool's own references: the result left the stream's history and every subscriber let
it go).  So a result never changes under whoever holds it, and a stream whose results
are dropped in time (``history`` results kept, subscribers that copy what they keep)
runs on the same few arrays block after block: no allocation on the worker's path.
When every array is still held the call gets a new one (the pool does not grow past the
depth; the extra array is freed with its last view).  A pool serves one runner, which one
worker uses at a time, so taking an array needs no lock.
"""
from __future__ import annotations

import inspect
import sys

import numpy as np

__all__ = ["OutputPool", "output_owner", "pools_outputs", "takes_out"]


def takes_out(proc) -> bool:
    """``proc(x, out=...)`` writes its output into ``out`` (stages and chains)."""
    try:
        return "out" in inspect.signature(proc.__call__).parameters
    except (AttributeError, TypeError, ValueError):
        return False


def pools_outputs(proc) -> bool:
    """Do ``proc``'s calls get their output memory from an :class:`OutputPool`?  Decided
    once, when a group or a stream is set up, not per call: a processor that writes into
    a given array (:func:`takes_out`) on the numba backend, whose output is then one numpy
    array (time-major memory, a view of it returned).  On the Triton backend the output
    is a tensor on the processor's device, which the processor allocates."""
    return takes_out(proc) and getattr(proc, "backend", "numba") == "numba"


def output_owner(out) -> np.ndarray:
    """The array whose memory a processor's output ``out`` (a numpy view of the array it
    wrote; a processor for which :func:`pools_outputs` holds) lies in, the one to hand
    back as ``out=``."""
    return out if out.base is None else out.base

#: references to a pooled array while :meth:`OutputPool.take` tests it: the pool's
#: list, the loop variable and ``sys.getrefcount``'s argument
_OWN_REFS = 3


class OutputPool:
    """The output arrays of one runner (or of one stream's own calls)."""

    __slots__ = ("arrays",)

    def __init__(self):
        self.arrays: list[np.ndarray] = []

    def take(self):
        """An array of the pool that no result holds any more, or None."""
        for a in self.arrays:
            if sys.getrefcount(a) <= _OWN_REFS:
                return a
        return None

    def fill(self, depth: int) -> None:
        """Add arrays like the first one, each written once (so that its pages are
        mapped now, not by the call that first writes it), until the pool holds
        ``depth``; nothing when it is empty."""
        while self.arrays and len(self.arrays) < depth:
            a = np.empty_like(self.arrays[0])
            a.fill(0)
            self.arrays.append(a)

    def keep(self, out, depth: int) -> None:
        """After a call: adopt the memory of its output ``out`` (a numpy view of the array
        the processor wrote) if it is new and the pool holds fewer than ``depth``."""
        if len(self.arrays) >= depth:
            return
        owner = output_owner(out)
        for a in self.arrays:
            if a is owner:
                return
        self.arrays.append(owner)
