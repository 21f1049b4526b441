"""Triton twin of the FIR adjoint, :func:`rtamt.ear.fir_grad.fir_adjoint` (same name, same
arguments, torch tensors on one device); the derivation is in the numba kernel's
docstring.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["fir_adjoint"]

BLOCK = 64
"""Positions of the extended signal ``e = [hist, x]`` per Triton program."""


@triton.jit
def _fir_adjoint_kernel(h_ptr, gy_ptr, mu_ptr, nmu_ptr, gx_ptr, T, C, N, M,
                        BLOCK: tl.constexpr):
    """Program (position block, lane): ``ge[j] = sum_k h[k] gy[j - M + k]`` over the taps
    in ascending order (numba's order of accumulation), plus the outgoing history's
    gradient on the last ``M`` positions; ``j < M`` goes to ``nmu`` (the incoming
    history's gradient), the rest is added to ``gx``."""
    pj = tl.program_id(0)
    lane = tl.program_id(1).to(tl.int64)
    b = lane // C
    c = lane - b * C
    j = pj * BLOCK + tl.arange(0, BLOCK)
    live = j < M + T
    acc = tl.zeros((BLOCK,), dtype=tl.float64)
    go = b * T * C + c
    for k in range(N):
        t = j - M + k
        ok = live & (t >= 0) & (t < T)
        acc += tl.load(h_ptr + k) * tl.load(gy_ptr + go + t * C, mask=ok, other=0.0)
    mo = b * M * C + c
    tail = live & (j >= T)
    acc += tl.load(mu_ptr + mo + (j - T) * C, mask=tail, other=0.0)
    tl.store(nmu_ptr + mo + j * C, acc, mask=live & (j < M))
    xs = live & (j >= M)
    gp = gx_ptr + go + (j - M) * C
    tl.store(gp, tl.load(gp, mask=xs, other=0.0) + acc, mask=xs)


def fir_adjoint(h, gy, mu, gx):
    """Adjoint of the direct-form FIR with an input history (Triton); mirrors
    :func:`rtamt.ear.fir_grad.fir_adjoint`, same arguments as float64 tensors on one
    device: h : (N,); gy : (B, T, C); mu : (B, N - 1, C) in: gradient of the outgoing
    history, out: of the incoming one; gx : (B, T, C) added to.

    A correlation of ``gy`` with the taps, parallel over the ``M + T`` positions of the
    extended signal and the (stream, channel) lanes; the new history gradient goes
    through a work array (the old one is read by other programs)."""
    B, T, C = gy.shape
    N = h.shape[0]
    M = N - 1
    for name, t in (("h", h), ("gy", gy), ("mu", mu), ("gx", gx)):
        assert t.is_contiguous(), f"fir_adjoint: {name} must be contiguous"
        assert t.dtype == torch.float64, f"fir_adjoint: {name} must be float64"
    assert mu.shape == (B, M, C) and gx.shape == (B, T, C)
    if B * C == 0 or M + T == 0:
        return
    nmu = torch.empty_like(mu)
    _fir_adjoint_kernel[(triton.cdiv(M + T, BLOCK), B * C)](h, gy, mu, nmu, gx, T, C, N, M,
                                                             BLOCK=BLOCK)
    mu.copy_(nmu)
