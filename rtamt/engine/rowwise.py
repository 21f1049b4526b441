"""Row-wise matrix products whose rows do not depend on each other (numba), shared by the
loudness stages (:mod:`rtamt.loudness`: the spectrum's DFT tables, the excitation's
filter weights, the binaural spatial smoothing).

numpy's ``A @ B`` (BLAS dgemv / dgemm) picks its blocking and summation order from the
number of rows M, so one row's result can differ in the last bits between M = 1, a few
rows and M >= 16: a stream's output would depend on the block size and on the batch it
runs in.  :func:`rowwise_matmul` computes every row with one fixed sequence of
operations; :func:`band_ranges` gives, at design time, the nonzero band of each row of
the right-hand matrix so that the exact zeros outside it are skipped.

:data:`ROWWISE` is the kernel set (numba, and the Triton twins of
:mod:`rtamt.engine.rowwise_triton`) that a stage using these products declares with
``Kernels(..., uses=(ROWWISE,))``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .backend import Kernels
from .jit import INLINE as _INL
from .jit import JIT as _JIT

__all__ = ["band_ranges", "rowwise_matmul", "matmul_rows", "product", "ROWWISE"]


@njit(**_JIT)
def band_ranges(B):
    """``rng (K, 2)``: the columns ``[rng[k, 0], rng[k, 1])`` between the first and the
    last nonzero of each row k of ``B`` (``[0, 0)`` for an all-zero row).  Design-time
    input of :func:`rowwise_matmul`."""
    K, J = B.shape
    rng = np.zeros((K, 2), np.int64)
    for k in range(K):
        j0 = 0
        while j0 < J and B[k, j0] == 0.0:
            j0 += 1
        j1 = J
        while j1 > j0 and B[k, j1 - 1] == 0.0:
            j1 -= 1
        rng[k, 0] = j0
        rng[k, 1] = j1 if j1 > j0 else j0
    return rng


@njit(**_JIT)
def rowwise_matmul(A, B, rng, out):
    """``out[i] = A[i] @ B`` (float64), each row by the same sequence of operations
    whatever the number of rows: ``out[i] = 0``, then for k = 0, 1, ...:
    ``out[i, j] += A[i, k] B[k, j]`` for j in ``rng[k]`` (:func:`band_ranges`; the
    columns outside it add exact zeros).  A row's bits therefore depend only on that row
    of ``A`` (and on ``B``), never on the other rows, so neither the block size nor the
    batch changes them.  Terms with ``A[i, k] == 0`` are skipped (they add +-0 to sums
    that are never -0: same bits).

    A (M, K), B (K, J) C-contiguous; rng (K, 2) int64; out (M, J), overwritten.
    Rows are taken four at a time (each B row is loaded once per four rows); the
    arithmetic of each row is the same as one at a time.
    """
    M, K = A.shape
    i = 0
    while i + 4 <= M:
        o0, o1, o2, o3 = out[i], out[i + 1], out[i + 2], out[i + 3]
        o0[:] = 0.0
        o1[:] = 0.0
        o2[:] = 0.0
        o3[:] = 0.0
        for k in range(K):
            j0 = rng[k, 0]
            n = rng[k, 1] - j0
            b = B[k, j0:j0 + n]
            a0, a1, a2, a3 = A[i, k], A[i + 1, k], A[i + 2, k], A[i + 3, k]
            p0, p1, p2, p3 = o0[j0:j0 + n], o1[j0:j0 + n], o2[j0:j0 + n], o3[j0:j0 + n]
            if a0 != 0.0 and a1 != 0.0 and a2 != 0.0 and a3 != 0.0:
                for j in range(n):
                    bj = b[j]
                    p0[j] += a0 * bj
                    p1[j] += a1 * bj
                    p2[j] += a2 * bj
                    p3[j] += a3 * bj
            else:
                _axpy(a0, b, p0, n)
                _axpy(a1, b, p1, n)
                _axpy(a2, b, p2, n)
                _axpy(a3, b, p3, n)
        i += 4
    while i < M:
        o = out[i]
        o[:] = 0.0
        for k in range(K):
            j0 = rng[k, 0]
            n = rng[k, 1] - j0
            _axpy(A[i, k], B[k, j0:j0 + n], o[j0:j0 + n], n)
        i += 1
    return out


@njit(**_INL)
def _axpy(a, b, p, n):
    # p += a b (skipped for a == 0, see rowwise_matmul)
    if a != 0.0:
        for j in range(n):
            p[j] += a * b[j]


def matmul_rows(A, B, rng=None):
    """``A @ B`` by :func:`rowwise_matmul` (float64; ``rng`` from :func:`band_ranges`,
    computed here if not given)."""
    A = np.ascontiguousarray(A, dtype=np.float64)
    B = np.ascontiguousarray(B, dtype=np.float64)
    if rng is None:
        rng = band_ranges(B)
    out = np.empty((A.shape[0], B.shape[1]))
    return rowwise_matmul(A, B, rng, out)


def product(kern, A, B, rng):
    """``A @ B`` by the bound kernel set ``kern``'s :func:`rowwise_matmul` (a set that uses
    :data:`ROWWISE`): ``A`` (M, K) float64 (made contiguous if it is not), ``B``, ``rng``
    as that set takes them (design-time arrays), the output a new (M, J) array."""
    A = kern.contiguous(A)
    return kern.rowwise_matmul(A, B, rng, kern.empty((A.shape[0], B.shape[1]), A))


def _triton():
    from . import rowwise_triton

    return (rowwise_triton.rowwise_matmul, rowwise_triton.matmul_rows)


#: the row-wise product kernels, for ``Kernels(uses=(ROWWISE,))``
ROWWISE = Kernels(numba=(rowwise_matmul, matmul_rows), triton=_triton)
