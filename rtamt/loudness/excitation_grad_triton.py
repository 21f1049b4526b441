"""Triton twins of the excitation stage's adjoints (:mod:`rtamt.loudness.excitation_grad`:
the level-dependent lower skirts of the roex filters, ANSI S3.4-2007 §3.5, in float64, and
the dB form of the excitation), same names and arguments, torch tensors on one device;
the derivation is in the numba kernels' docstrings."""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .triton_common import _F64, _K10, _LN2, _check, _check_index, _grid, _lane_ids

__all__ = ["lower_skirt_adjoint", "excitation_db_adjoint"]

_LN2SQ = tl.constexpr(math.log(2.0) ** 2)
_BLOCK = 256


@triton.jit
def _skirt_adjoint_kernel(P_ptr, lvl_ptr, c_slope: tl.float64, a_ptr, b_ptr, i0_ptr, seg_ptr,
                          cnt_ptr, gE_ptr, gP_ptr, glvl_ptr, N, J, nf, CMAX,
                          BLOCK: tl.constexpr):
    c_slope = tl.full([], c_slope, tl.float64)
    i = _lane_ids(BLOCK)
    m = i < N * J
    n = i // J
    j = i - n * J
    lv = tl.load(lvl_ptr + i, mask=m, other=1.0)
    s = 1.0 - c_slope * (_K10 * tl.log(tl.maximum(lv, 1e-10)) - 51.0)
    k0 = tl.load(i0_ptr + j, mask=m, other=0)
    sg = tl.load(seg_ptr + j, mask=m, other=0)
    cj = tl.load(cnt_ptr + j, mask=m, other=0)
    pj = tl.load(P_ptr + i, mask=m, other=0.0)
    gp = tl.zeros([BLOCK], tl.float64)
    gs = tl.zeros([BLOCK], tl.float64)
    for q in range(CMAX):
        f = k0 + q
        v = m & (q < cj) & (f < nf)
        aa = tl.load(a_ptr + sg + q, mask=v, other=0.0).to(tl.float64)
        bb = tl.load(b_ptr + sg + q, mask=v, other=0.0).to(tl.float64)
        t = tl.maximum(bb, aa * s)
        e2 = tl.exp(-t * _LN2)
        ge = tl.load(gE_ptr + n * nf + f, mask=v, other=0.0)
        gp += ge * (1.0 + t * _LN2) * e2
        gs += tl.where(aa * s > bb, ge * pj * (-t * _LN2SQ * e2) * aa, 0.0)
    tl.store(gP_ptr + i, tl.load(gP_ptr + i, mask=m, other=0.0) + gp, mask=m)
    gl = tl.load(glvl_ptr + i, mask=m, other=0.0)
    tl.store(glvl_ptr + i, tl.where(lv > 1e-10, gl + gs * (-c_slope * _K10 / lv), gl), mask=m)


def lower_skirt_adjoint(P, lvl, c_slope, a, b, i0, seg, cnt, gE, gP, glvl):
    """Adjoint of the lower skirts in float64 (Triton); mirrors
    :func:`rtamt.loudness.excitation_grad.lower_skirt_adjoint`:

    P, lvl (N, J) float64; c_slope float; a, b (S,) float32 tables; i0, seg, cnt (J,)
    int64; gE (N, nf) the excitation's gradient; gP, glvl (N, J) float64, added into.

    One lane per (frame, component), looping over the component's filters in the order
    numba does (``CMAX`` = the largest pair count, lanes past their own count masked).
    """
    N, J = P.shape
    nf = gE.shape[1]
    _check(_F64, P=P, lvl=lvl, gE=gE, gP=gP, glvl=glvl)
    _check(torch.float32, a=a, b=b)
    _check_index(i0=i0, seg=seg, cnt=cnt)
    assert lvl.shape == gP.shape == glvl.shape == (N, J) and gE.shape[0] == N
    assert i0.shape == seg.shape == cnt.shape == (J,)
    if N * J == 0:
        return
    cmax = int(cnt.max())                # one read of a (J,) coefficient table
    _skirt_adjoint_kernel[_grid(N * J, _BLOCK)](P, lvl, float(c_slope), a, b, i0, seg, cnt,
                                                gE, gP, glvl, N, J, nf, cmax, BLOCK=_BLOCK,
                                                num_warps=4, enable_fp_fusion=True)


@triton.jit
def _db_adjoint_kernel(E_ptr, gdb_ptr, gE_ptr, n, BLOCK: tl.constexpr):
    i = _lane_ids(BLOCK)
    m = i < n
    e = tl.load(E_ptr + i, mask=m, other=1.0)
    g = tl.load(gE_ptr + i, mask=m, other=0.0)
    d = tl.load(gdb_ptr + i, mask=m, other=0.0) * _K10 / tl.maximum(e, 1e-10)
    tl.store(gE_ptr + i, tl.where(e > 1e-10, g + d, g), mask=m)


def excitation_db_adjoint(E, gdb, gE):
    """Adjoint of ``10 log10 max(E, 1e-10)`` (Triton); mirrors
    :func:`rtamt.loudness.excitation_grad.excitation_db_adjoint`: E, gdb, gE (N, K)
    float64, ``gE += gdb 10/(E ln 10)`` where ``E > 1e-10``.  One lane per element."""
    _check(_F64, E=E, gdb=gdb, gE=gE)
    assert E.shape == gdb.shape == gE.shape
    n = E.numel()
    if n:
        _db_adjoint_kernel[_grid(n, _BLOCK)](E, gdb, gE, n, BLOCK=_BLOCK, num_warps=4,
                                             enable_fp_fusion=True)
