"""What the numba kernels share: the lane layout (:data:`LANES`, :data:`STREAMS`,
:func:`pad_lanes`) and the input checks of every block (:func:`all_finite`,
:func:`all_within`).  Each stage's own kernels live in the stage's module
(``gammatone4`` in :mod:`rtamt.filterbank.gammatone`, ``adaptloop`` in
:mod:`rtamt.adaptation.adaptloop`, the modulation banks in :mod:`rtamt.modulation.modfb`);
the SOS cascade that several stages run is :mod:`rtamt.engine.sos`.

Every rtamt kernel works on **time-major** arrays ``(B, T, C)`` (batch, time, channel)
so that the innermost loop runs over independent channels or filters: the compiler
vectorises it (AVX2/AVX-512) and the out-of-order core overlaps the independent
recursions.  The public API of rtamt is time-last; the stage wrappers transpose at
the boundary (:mod:`rtamt.engine.stage`).

Each kernel advances its state arrays **in place** and writes its output into a
preallocated array.  The arithmetic applied to sample ``t`` depends only on the
state and on ``x[t]``, never on where a block starts, so any block partition
gives bit-identical results.

Floating point: ``fastmath={'contract'}`` only (FMA contraction, deterministic per
element); no reassociation, no ``nnan``/``ninf`` assumptions.  Denormals are
handled by the calling thread's FTZ/DAZ flags (:mod:`rtamt.engine.denormal`).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .jit import JIT as _JIT

#: the largest finite float64: ``|v| <= DBL_MAX`` is false exactly for NaN and +-inf
DBL_MAX = 1.7976931348623157e308

LANES = 32
"""Channel loops run over a lane count rounded up to a multiple of this.  LLVM vectorises
them 32 float64 lanes per iteration (8 per AVX-512 register, 4 registers interleaved)
and runs whatever is left in scalar code, so without padding a bank of 30 channels would
run entirely in the scalar remainder loop.  Padded lanes carry zeros or copies of
channel 0 and are never written out (see :func:`pad_lanes`)."""

STREAMS = 8
"""Streams of a batch that the latency-bound recursions advance together, sample by sample
(their independent chains fill the out-of-order window: a single stream's 32 lanes leave
it waiting on one sample's division chain).  Only the order of independent operations
changes: every lane's arithmetic is the same whatever the batch."""


def pad_lanes(rows: np.ndarray, repeat_first: bool) -> np.ndarray:
    """Per-channel constants ``rows`` (R, C) laid out for a lane kernel: (R, L) float64,
    C-contiguous, L = C rounded up to :data:`LANES`; the padding lanes are 0
    (``repeat_first=False``) or copies of channel 0.  Done once per design (Coeffs)."""
    rows = np.asarray(rows, np.float64)
    C = rows.shape[1]
    L = -(-C // LANES) * LANES
    if repeat_first:
        return np.ascontiguousarray(rows[:, np.r_[np.arange(C), np.zeros(L - C, np.intp)]])
    out = np.zeros((rows.shape[0], L))
    out[:, :C] = rows
    return out


@njit(**_JIT)
def all_within(x, limit):
    """True if every ``|element| <= limit`` (false for NaN; one vectorised pass, no
    temporary).  The physical-limit check of a model's input blocks."""
    a = x.ravel()
    ok = True
    for i in range(a.size):
        ok &= abs(a[i]) <= limit
    return ok


@njit(**_JIT)
def all_finite(x):
    """True if no element of ``x`` is NaN or +-inf (one vectorised pass, no temporary:
    ``|v| <= DBL_MAX`` is false exactly for those).  The input check of every block."""
    a = x.ravel()
    ok = True
    for i in range(a.size):
        ok &= abs(a[i]) <= DBL_MAX
    return ok
