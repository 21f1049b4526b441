"""Triton twins of the row-wise matrix products of :mod:`rtamt.engine.rowwise` (torch
tensors on one device, float64, contiguous; index tensors int64).  Each output element
follows numba's sequence of operations, so a row's result depends only on that row,
never on how many rows are computed together."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 64
"""Lanes per Triton program of the one-dimensional kernels (a power of two)."""
_NUM_WARPS = 2
_F64 = torch.float64


def _grid(n: int, block: int = BLOCK) -> tuple:
    return (triton.cdiv(n, block),)


def _check(dtype=None, **tensors) -> None:
    for name, t in tensors.items():
        assert t.is_contiguous(), f"{name} must be contiguous"
        if dtype is not None:
            assert t.dtype == dtype, f"{name} must be {dtype}, got {t.dtype}"


def _check_index(**tensors) -> None:
    for name, t in tensors.items():
        assert t.is_contiguous(), f"{name} must be contiguous"
        assert t.dtype == torch.int64, f"{name} must be int64, got {t.dtype}"


@triton.jit
def _lane_ids(BLOCK: tl.constexpr):
    """Global lane indices of this program (int64, so that offsets do not overflow)."""
    return tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)


@triton.jit
def _band_ranges_kernel(B_ptr, rng_ptr, K, J, BLOCK: tl.constexpr):
    k = _lane_ids(BLOCK)
    m = k < K
    first = tl.full([BLOCK], 0, tl.int64) + J
    last = tl.zeros([BLOCK], tl.int64)
    for j in range(J):
        nz = tl.load(B_ptr + k * J + j, mask=m, other=0.0) != 0.0
        first = tl.minimum(first, tl.where(nz, j, J))
        last = tl.maximum(last, tl.where(nz, j + 1, 0))
    tl.store(rng_ptr + 2 * k, first, mask=m)
    tl.store(rng_ptr + 2 * k + 1, tl.where(last > first, last, first), mask=m)


def band_ranges(B):
    """``rng (K, 2)`` int64: columns ``[rng[k, 0], rng[k, 1])`` from the first to the last
    nonzero of each row k of ``B`` (K, J) float64 (Triton; a new tensor on B's device).

    Mirrors :func:`rtamt.engine.rowwise.band_ranges` including its all-zero rows,
    which get ``[J, J)`` (the numba code's result; its docstring says ``[0, 0)``; both are
    empty).  One lane per row.
    """
    K, J = B.shape
    _check(_F64, B=B)
    rng = torch.empty((K, 2), dtype=torch.int64, device=B.device)
    if K:
        _band_ranges_kernel[_grid(K)](B, rng, K, J, BLOCK=BLOCK, num_warps=_NUM_WARPS)
    return rng


_BM = 16
_BN = 64


@triton.jit
def _rowwise_kernel(A_ptr, B_ptr, rng_ptr, out_ptr, M, K, J, BM: tl.constexpr,
                    BN: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)
    j = tl.program_id(1).to(tl.int64) * BN + tl.arange(0, BN)
    mi = i < M
    mj = j < J
    acc = tl.zeros([BM, BN], tl.float64)
    for k in range(K):
        lo = tl.load(rng_ptr + 2 * k)
        hi = tl.load(rng_ptr + 2 * k + 1)
        inb = mj & (j >= lo) & (j < hi)
        a = tl.load(A_ptr + i * K + k, mask=mi, other=0.0)
        b = tl.load(B_ptr + k * J + j, mask=inb, other=0.0)
        use = (a != 0.0)[:, None] & inb[None, :]
        acc = tl.where(use, acc + a[:, None] * b[None, :], acc)
    tl.store(out_ptr + i[:, None] * J + j[None, :], acc, mask=mi[:, None] & mj[None, :])


def rowwise_matmul(A, B, rng, out):
    """``out[i] = A[i] @ B`` (float64), each element by numba's sequence of operations
    (Triton); mirrors :func:`rtamt.engine.rowwise.rowwise_matmul`.

    A (M, K), B (K, J) float64; rng (K, 2) int64 (:func:`band_ranges` of B); out (M, J)
    float64, overwritten and returned.

    One lane per output element (tiles of 16 rows x 64 columns): ``out[i, j] = 0``, then
    for k = 0, 1, ...: ``+= A[i, k] B[k, j]`` where ``j`` is in ``rng[k]`` and
    ``A[i, k] != 0`` (numba skips the other terms; they would add exact zeros).  A row's
    result depends only on that row of A, never on M or on the other rows.  Every k is
    visited by every tile (no skipping of whole k ranges outside a tile's band).
    """
    M, K = A.shape
    J = B.shape[1]
    _check(_F64, A=A, B=B, out=out)
    _check_index(rng=rng)
    assert B.shape[0] == K and rng.shape == (K, 2) and out.shape == (M, J)
    if M == 0 or J == 0:
        return out
    _rowwise_kernel[(triton.cdiv(M, _BM), triton.cdiv(J, _BN))](
        A, B, rng, out, M, K, J, BM=_BM, BN=_BN, num_warps=4, enable_fp_fusion=True)
    return out


def matmul_rows(A, B, rng=None):
    """``A @ B`` by :func:`rowwise_matmul` (float64 tensors, contiguous copies made here if
    needed; ``rng`` from :func:`band_ranges`, computed here if not given); mirrors
    :func:`rtamt.engine.rowwise.matmul_rows`."""
    A = A.to(_F64).contiguous()
    B = B.to(_F64).contiguous()
    if rng is None:
        rng = band_ranges(B)
    out = torch.empty((A.shape[0], B.shape[1]), dtype=_F64, device=A.device)
    return rowwise_matmul(A, B, rng, out)
