"""Triton twin of the specific-loudness adjoint (:func:`rtamt.loudness.specific_loudness_grad.
specific_loudness_adjoint`; ANSI S3.4-2007 eqs. 17-19), same name and arguments, torch
float64 tensors on one device; the derivation is in the numba kernel's docstring."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .specific_loudness_triton import _sl_lane
from .triton_common import _F64, _check, _grid

__all__ = ["specific_loudness_adjoint"]

_BLOCK = 256


@triton.jit
def _sl_adjoint_kernel(E_ptr, G_ptr, A_ptr, al_ptr, Aal_ptr, thr_ptr, C: tl.float64, gN_ptr,
                       gE_ptr, gC_ptr, N, K, BLOCK: tl.constexpr):
    C = tl.full([], C, tl.float64)
    i, m, e, g, a, al, aal, thr = _sl_lane(E_ptr, G_ptr, A_ptr, al_ptr, Aal_ptr, thr_ptr, N, K,
                                           BLOCK)
    pos = e > 0.0
    ep = tl.maximum(e, 1e-300)                   # no log of a non-positive value
    hi = ep > 1e10
    u = tl.where(hi, ep / 1.0707, g * ep + a)                    # eq. 19 / eq. 17
    ua = tl.exp(tl.where(hi, 0.2, al) * tl.log(u))
    v = ua - tl.where(hi, 0.0, aal)
    dv = tl.where(hi, 0.2 * ua / u / 1.0707, al * g * ua / u)
    d = ep + thr                                                  # eq. 18 below threshold
    r = 2.0 * ep / d
    sr = tl.sqrt(r)
    lo = ep < thr
    dv = tl.where(lo, dv * (r * sr) + v * (1.5 * sr * 2.0 * thr / (d * d)), dv)
    v = tl.where(lo, v * (r * sr), v)
    gn = tl.load(gN_ptr + i, mask=m, other=0.0)
    ge = tl.load(gE_ptr + i, mask=m, other=0.0)
    tl.store(gE_ptr + i, tl.where(pos, ge + gn * C * dv, ge), mask=m)
    tl.store(gC_ptr + i, tl.where(pos, gn * v, 0.0), mask=m)


def specific_loudness_adjoint(E, G, A, alpha, A_alpha, ethrq, C, gN, gE):
    """Adjoint of the specific loudness (Triton); mirrors
    :func:`rtamt.loudness.specific_loudness_grad.specific_loudness_adjoint`:

    E, gN (N, K) float64: excitation (linear) and the gradient of the specific loudness;
    G, A, alpha, A_alpha, ethrq (K,) float64; C float; gE (N, K) added into.  Returns the
    gradient of ``C`` as a 0-d float64 tensor on the device.

    One lane per element, powers as ``exp(alpha log u)`` (as the forward twin); the
    elements' terms of the ``C`` gradient are summed by ``torch.sum`` (an order other
    than numba's: a few 1e-16 relative).
    """
    N, K = E.shape
    _check(_F64, E=E, G=G, A=A, alpha=alpha, A_alpha=A_alpha, ethrq=ethrq, gN=gN, gE=gE)
    assert gN.shape == gE.shape == (N, K) and G.shape == A.shape == alpha.shape \
        == A_alpha.shape == ethrq.shape == (K,)
    gC = torch.zeros((N, K), dtype=torch.float64, device=E.device)
    if N * K:
        _sl_adjoint_kernel[_grid(N * K, _BLOCK)](E, G, A, alpha, A_alpha, ethrq, float(C),
                                                  gN, gE, gC, N, K, BLOCK=_BLOCK,
                                                  num_warps=4, enable_fp_fusion=True)
    return gC.sum()
