"""Triton twins of the loudness integrators' kernels (:mod:`rtamt.loudness.agc`: the
asymmetric one-pole "AGC" of Glasberg & Moore 2002, eqs. 5-6, and Moore et al. 2016)."""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_common import _F64, _NUM_WARPS, BLOCK, _agc_step, _check, _grid, _lane_ids


@triton.jit
def _agc_kernel(x_ptr, y_ptr, aa: tl.float64, ar: tl.float64, out_ptr, N, K,
                BLOCK: tl.constexpr):
    aa = tl.full([], aa, tl.float64)
    ar = tl.full([], ar, tl.float64)
    k = _lane_ids(BLOCK)
    m = k < K
    y = tl.load(y_ptr + k, mask=m, other=0.0)
    for n in range(N):
        y = _agc_step(tl.load(x_ptr + n * K + k, mask=m, other=0.0), y, aa, ar)
        tl.store(out_ptr + n * K + k, y, mask=m)
    tl.store(y_ptr + k, y, mask=m)


def agc(x, y, aa, ar, out):
    """Asymmetric one-pole "AGC" per channel, frame by frame (Triton).

    Mirrors :func:`rtamt.loudness.agc.agc` (Glasberg & Moore 2002, eqs. 5-6):
    ``y <- y + a (x - y)``, ``a = aa`` (attack) where ``x > y`` else ``ar`` (release).

    x   : (N, K) float64  input frames (sone).
    y   : (K,) float64    state (the last output), advanced in place.
    aa, ar : float        attack and release coefficients per frame.
    out : (N, K) float64  written.

    One lane per channel; the lane holds ``y`` in a register over the N frames.
    """
    N, K = x.shape
    _check(_F64, x=x, y=y, out=out)
    assert y.shape == (K,) and out.shape == (N, K)
    if K == 0:
        return
    _agc_kernel[_grid(K)](x, y, float(aa), float(ar), out, N, K, BLOCK=BLOCK,
                          num_warps=_NUM_WARPS, enable_fp_fusion=True)


@triton.jit
def _agc_rows_kernel(x_ptr, y_ptr, aa: tl.float64, ar: tl.float64, out_ptr, R, F, K,
                     BLOCK: tl.constexpr):
    aa = tl.full([], aa, tl.float64)
    ar = tl.full([], ar, tl.float64)
    i = _lane_ids(BLOCK)
    m = i < R * K
    r = i // K
    k = i - r * K
    y = tl.load(y_ptr + i, mask=m, other=0.0)
    for f in range(F):
        y = _agc_step(tl.load(x_ptr + (r * F + f) * K + k, mask=m, other=0.0), y, aa, ar)
        tl.store(out_ptr + (f * R + r) * K + k, y, mask=m)
    tl.store(y_ptr + i, y, mask=m)


def agc_rows(x, y, aa, ar, out):
    """:func:`agc` for row-major input (Triton); mirrors
    :func:`rtamt.loudness.agc.agc_rows` (the short-term AGC of Moore et al. 2016).

    x   : (R, F, K) float64  frames of R rows (specific loudness, sone/Cam).
    y   : (R, K) float64     state, advanced in place.
    aa, ar : float
    out : (F, R, K) float64  written (frame-major).

    One lane per (row, channel).
    """
    R, F, K = x.shape
    _check(_F64, x=x, y=y, out=out)
    assert y.shape == (R, K) and out.shape == (F, R, K)
    if R * K == 0:
        return
    _agc_rows_kernel[_grid(R * K)](x, y, float(aa), float(ar), out, R, F, K, BLOCK=BLOCK,
                                   num_warps=_NUM_WARPS, enable_fp_fusion=True)
