"""Triton twin of the tvl2018 ear FIR's adjoint (:func:`rtamt.loudness.tvl2018_grad.
fir_adjoint`: the correlation of the output gradient with the taps), same name and
arguments, torch float64 tensors on one device."""
from __future__ import annotations

import triton
import triton.language as tl

from .triton_common import _F64, _check, _grid, _lane_ids

__all__ = ["fir_adjoint"]

_BLOCK = 128


@triton.jit
def _fir_adjoint_kernel(h_ptr, gy_ptr, gz_ptr, R, T, N, BLOCK: tl.constexpr):
    """Lane (r, p) of gz (R, M + T): ``gz[r, p] += h[k] gy[r, p - M + k]`` for k in order
    (numba's order of additions), where ``0 <= p - M + k < T``."""
    i = _lane_ids(BLOCK)
    L = N - 1 + T
    m = i < R * L
    r = i // L
    p = i - r * L
    acc = tl.load(gz_ptr + i, mask=m, other=0.0)
    for k in range(N):
        t = p - (N - 1) + k
        v = m & (t >= 0) & (t < T)
        acc = tl.where(v, acc + tl.load(h_ptr + k) * tl.load(gy_ptr + r * T + t, mask=v,
                                                               other=0.0), acc)
    tl.store(gz_ptr + i, acc, mask=m)


def fir_adjoint(h, gy, gz):
    """Adjoint of the FIR ``y[t] = sum_k h[k] z[t + M - k]`` (Triton); mirrors
    :func:`rtamt.loudness.tvl2018_grad.fir_adjoint`: h (N,), gy (R, T), gz (R, M + T)
    float64, added into (``M = N - 1``).  One lane per element of ``gz``."""
    R, T = gy.shape
    N = h.shape[0]
    _check(_F64, h=h, gy=gy, gz=gz)
    assert gz.shape == (R, N - 1 + T)
    if R * T == 0 or N == 0:
        return
    _fir_adjoint_kernel[_grid(gz.numel(), _BLOCK)](h, gy, gz, R, T, N, BLOCK=_BLOCK,
                                                   num_warps=4, enable_fp_fusion=True)
