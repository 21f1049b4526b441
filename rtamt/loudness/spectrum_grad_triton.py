"""Triton twin of the spectrum's adjoint (:func:`rtamt.loudness.spectrum_grad.
dft_power_adjoint`: the windowed DFT powers of Glasberg & Moore 2002, J. Audio Eng. Soc.
50, 331-342, §2.1), same name and arguments, torch tensors on one device; the derivation
is in :mod:`rtamt.loudness.spectrum_grad`."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_common import _F64, _check, _check_index, _grid, _lane_ids

__all__ = ["dft_power_adjoint"]

_BLOCK = 128


@triton.jit
def _dft_grad_kernel(z_ptr, Lz, st, F, H, mat_ptr, gain_ptr, grp_ptr, gP_ptr, J, G_ptr, R, n,
                     B, BLOCK: tl.constexpr):
    """Lane (r, f, q): ``y_q = sum_m z[r, s + m] mat[m, q]`` (m in order, as numba) and
    ``G[r, f, q] = 2 gain[b] gP[r F + f, grp[b]] y_q`` (``b = q mod B``)."""
    i = _lane_ids(BLOCK)
    B2 = 2 * B
    m = i < R * F * B2
    rf = i // B2
    q = i - rf * B2
    r = rf // F
    f = rf - r * F
    s = st + f * H
    y = tl.zeros([BLOCK], tl.float64)
    for k in range(n):
        y += tl.load(z_ptr + r * Lz + s + k, mask=m, other=0.0) \
            * tl.load(mat_ptr + k * B2 + q, mask=m, other=0.0)
    b = tl.where(q < B, q, q - B)
    g = tl.load(grp_ptr + b, mask=m, other=0)
    w = 2.0 * tl.load(gain_ptr + b, mask=m, other=0.0) \
        * tl.load(gP_ptr + rf * J + g, mask=m, other=0.0)
    tl.store(G_ptr + i, w * y, mask=m)


@triton.jit
def _dft_scatter_kernel(G_ptr, mat_t_ptr, gz_ptr, Lz, st, F, H, R, n, B2,
                        BLOCK: tl.constexpr):
    """Lane (r, p): ``gz[r, p] += G[r, f, q] mat_t[q, p - s_f]`` over the frames f whose
    window covers p (in frame order) and q in order: numba's order of additions."""
    i = _lane_ids(BLOCK)
    m = i < R * Lz
    r = i // Lz
    p = i - r * Lz
    acc = tl.load(gz_ptr + i, mask=m, other=0.0)
    for f in range(F):
        d = p - (st + f * H)
        v = m & (d >= 0) & (d < n)
        for q in range(B2):
            gq = tl.load(G_ptr + (r * F + f) * B2 + q, mask=v, other=0.0)
            acc = tl.where(v, acc + gq * tl.load(mat_t_ptr + q * n + d, mask=v, other=0.0),
                           acc)
    tl.store(gz_ptr + i, acc, mask=m)


def dft_power_adjoint(z, st, F, H, mat, mat_t, gain, grp, gP, gz):
    """Adjoint of one window's DFT powers (Triton); mirrors
    :func:`rtamt.loudness.spectrum_grad.dft_power_adjoint`:

    z (R, L) float64 the history and the block's samples; st, F, H ints (the first
    frame's window start in z, frames per row, hop); mat (n, 2B), mat_t (2B, n) float64
    the windowed ``cos | -sin`` matrix and its transpose; gain (B,) float64; grp (B,)
    int64 the component of each bin; gP (R F, J) float64 the components' gradients; gz
    (R, L) float64, added into.

    Two launches: one lane per (row, frame, bin half) for the weighted DFT ``G`` (a
    (R, F, 2B) work array), then one lane per (row, sample) summing the frames' and bins'
    contributions to that sample in numba's order.
    """
    R, Lz = z.shape
    n, B2 = mat.shape
    _check(_F64, z=z, mat=mat, mat_t=mat_t, gain=gain, gP=gP, gz=gz)
    _check_index(grp=grp)
    assert mat_t.shape == (B2, n) and gain.shape == grp.shape == (B2 // 2,)
    assert gz.shape == (R, Lz) and gP.shape[0] == R * F
    if R * F * B2 == 0:
        return
    G = torch.empty((R, F, B2), dtype=torch.float64, device=z.device)
    _dft_grad_kernel[_grid(R * F * B2, _BLOCK)](z, Lz, int(st), F, int(H), mat, gain, grp, gP,
                                                gP.shape[1], G, R, n, B2 // 2, BLOCK=_BLOCK,
                                                num_warps=4, enable_fp_fusion=True)
    _dft_scatter_kernel[_grid(R * Lz, _BLOCK)](G, mat_t, gz, Lz, int(st), F, int(H), R, n, B2,
                                               BLOCK=_BLOCK, num_warps=4,
                                               enable_fp_fusion=True)
