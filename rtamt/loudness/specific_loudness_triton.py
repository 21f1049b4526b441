"""Triton twin of the specific-loudness stage's kernel
(:mod:`rtamt.loudness.specific_loudness`, ANSI S3.4-2007 eqs. 17-19)."""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_common import _F64, _check, _grid, _lane_ids

_INV_10707 = tl.constexpr(1.0 / 1.0707)             # ANSI S3.4-2007 eq. 19


@triton.jit
def _sl_lane(E_ptr, G_ptr, A_ptr, al_ptr, Aal_ptr, thr_ptr, N, K, BLOCK: tl.constexpr):
    """This program's lanes ``i`` (one per element of the (N, K) excitation; mask ``m``),
    their excitation ``e`` and their channel's constants ``G, A, alpha, A^alpha,
    E_thrq``."""
    i = _lane_ids(BLOCK)
    m = i < N * K
    k = i % K
    return (i, m, tl.load(E_ptr + i, mask=m, other=0.0), tl.load(G_ptr + k, mask=m, other=1.0),
            tl.load(A_ptr + k, mask=m, other=1.0), tl.load(al_ptr + k, mask=m, other=1.0),
            tl.load(Aal_ptr + k, mask=m, other=1.0), tl.load(thr_ptr + k, mask=m, other=1.0))


@triton.jit
def _sl_kernel(E_ptr, G_ptr, A_ptr, al_ptr, Aal_ptr, thr_ptr, C: tl.float64, out_ptr, N, K,
               BLOCK: tl.constexpr):
    C = tl.full([], C, tl.float64)
    i, m, e, g, a, al, aal, thr = _sl_lane(E_ptr, G_ptr, A_ptr, al_ptr, Aal_ptr, thr_ptr, N, K,
                                           BLOCK)
    hi = e > 1e10
    ep = tl.maximum(e, 1e-300)
    u = tl.where(hi, ep * _INV_10707, g * ep + a)
    v = tl.exp(tl.where(hi, 0.2, al) * tl.log(u)) - tl.where(hi, 0.0, aal)
    r = 2.0 * e / (e + thr)
    v = tl.where(e < thr, v * (r * tl.sqrt(r)), v)
    tl.store(out_ptr + i, tl.where(e > 0.0, C * v, 0.0), mask=m)


def specific_loudness(E, G, A, alpha, A_alpha, ethrq, C, out):
    """Specific loudness N' (sone/Cam) from linear excitation (Triton).

    Mirrors :func:`rtamt.loudness.specific_loudness.specific_loudness`, ANSI S3.4-2007 eqs. 17-19
    (Moore, Glasberg & Baer 1997): ``N' = C [(G E + A)^alpha - A^alpha]``, times
    ``(2E / (E + E_THRQ))^1.5`` below threshold; ``C (E / 1.0707)^0.2`` above 1e10
    (100 dB); 0 for ``E <= 0``.

    E       : (N, K) float64  linear excitation (1.0 = 0 dB).
    G, A, alpha, A_alpha, ethrq : (K,) float64  per-channel constants
              (:class:`rtamt.loudness.ansi.SpecificLoudnessCoeffs`).
    C       : float           scaling constant.
    out     : (N, K) float64  written.

    One lane per element, float64 throughout (powers as ``exp(alpha log u)``).
    """
    N, K = E.shape
    _check(_F64, E=E, G=G, A=A, alpha=alpha, A_alpha=A_alpha, ethrq=ethrq, out=out)
    assert out.shape == (N, K) and G.shape == A.shape == alpha.shape == A_alpha.shape \
        == ethrq.shape == (K,)
    if N * K == 0:
        return
    _sl_kernel[_grid(N * K, 256)](E, G, A, alpha, A_alpha, ethrq, float(C), out, N, K,
                                  BLOCK=256, num_warps=4, enable_fp_fusion=True)
