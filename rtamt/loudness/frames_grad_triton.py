"""Triton twins of the frame stages' shared adjoint kernels
(:mod:`rtamt.loudness.frames_grad`): the adjoint of the loudness integrators' asymmetric
one-pole (Glasberg & Moore 2002, J. Audio Eng. Soc. 50, 331-342, eqs. 5-6; Moore et al.
2016), same names and arguments as the numba kernels, torch float64 tensors on one
device; the derivation is in the numba kernels' docstrings."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_common import _F64, _NUM_WARPS, BLOCK, _check, _grid, _lane_ids

__all__ = ["agc_adjoint", "agc_step_adjoint"]


@triton.jit
def agc_step_adjoint(g, x, yp, aa, ar):
    """Adjoint of one step ``y = yp + a (x - yp)`` (``a = aa`` where ``x > yp`` else
    ``ar``, the switch held) for the gradient ``g`` of ``y``: the gradients of
    ``(x, yp, aa, ar)``, as :func:`rtamt.loudness.frames_grad.agc_step_adjoint`."""
    up = x > yp
    a = tl.where(up, aa, ar)
    gd = g * (x - yp)
    return g * a, g * (1.0 - a), tl.where(up, gd, 0.0), tl.where(up, 0.0, gd)


@triton.jit
def _agc_adjoint_kernel(x_ptr, y0_ptr, aa: tl.float64, ar: tl.float64, gy_ptr, mu_ptr,
                        gx_ptr, yp_ptr, gar_ptr, N, K, BLOCK: tl.constexpr):
    aa = tl.full([], aa, tl.float64)
    ar = tl.full([], ar, tl.float64)
    k = _lane_ids(BLOCK)
    m = k < K
    y = tl.load(y0_ptr + k, mask=m, other=0.0)
    for n in range(N):                           # the trajectory, as the forward kernel
        o = n * K + k
        x = tl.load(x_ptr + o, mask=m, other=0.0)
        tl.store(yp_ptr + o, y, mask=m)
        y = y + tl.where(x > y, aa, ar) * (x - y)
    lam = tl.load(mu_ptr + k, mask=m, other=0.0)
    ga = tl.zeros_like(y)
    gr = tl.zeros_like(y)
    for nn in range(N):
        o = (N - 1 - nn) * K + k
        g = lam + tl.load(gy_ptr + o, mask=m, other=0.0)
        dx, lam, da, dr = agc_step_adjoint(g, tl.load(x_ptr + o, mask=m, other=0.0),
                                           tl.load(yp_ptr + o, mask=m, other=0.0), aa, ar)
        tl.store(gx_ptr + o, tl.load(gx_ptr + o, mask=m, other=0.0) + dx, mask=m)
        ga += da
        gr += dr
    tl.store(mu_ptr + k, lam, mask=m)
    tl.store(gar_ptr + k, ga, mask=m)
    tl.store(gar_ptr + K + k, gr, mask=m)


def agc_adjoint(x, y0, aa, ar, gy, mu, gx):
    """Adjoint of the asymmetric one-pole over the frames of a block (Triton); mirrors
    :func:`rtamt.loudness.frames_grad.agc_adjoint`:

    x (N, K) input frames, y0 (K,) incoming state (not written); gy (N, K) gradient of
    the outputs; mu (K,) gradient of the outgoing state, replaced by that of the incoming
    state; gx (N, K) added into; aa, ar: floats.  Returns ``(g_attack, g_release)`` as
    0-d float64 tensors on the device (no copy to the host).

    One lane per channel: the trajectory goes forward into an (N, K) work array, then the
    adjoint runs backward with the switch held; each lane's coefficient gradients are
    summed over the frames, then over the channels (``torch.sum``: an order other than
    numba's, a few 1e-16 relative).
    """
    N, K = x.shape
    _check(_F64, x=x, y0=y0, gy=gy, mu=mu, gx=gx)
    assert y0.shape == mu.shape == (K,) and gy.shape == gx.shape == (N, K)
    gar = torch.zeros((2, K), dtype=torch.float64, device=x.device)
    if K and N:
        yp = torch.empty((N, K), dtype=torch.float64, device=x.device)
        _agc_adjoint_kernel[_grid(K)](x, y0, float(aa), float(ar), gy, mu, gx, yp, gar, N, K,
                                      BLOCK=BLOCK, num_warps=_NUM_WARPS,
                                      enable_fp_fusion=True)
    s = gar.sum(dim=1)
    return s[0], s[1]
