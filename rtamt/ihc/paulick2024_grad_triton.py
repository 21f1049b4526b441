"""Triton twin of the adjoint of Paulick2024's IHC,
:func:`rtamt.ihc.paulick2024_grad.ihc_paulick2024_adjoint` (the MET conductance of Altoè et
al. 2018, Eq. A2, and the membrane ODE, Eq. A1, as in Paulick, Relaño-Iborra & Dau 2024):
the same name, arguments and mathematics, on float64 torch tensors on one device.

Work layout: one Triton lane per (stream, channel), :data:`BLOCK` lanes per program, a
grid of ``ceil(B C / BLOCK)`` programs (as the forward twin
:mod:`rtamt.ihc.paulick2024_triton`).  A lane recomputes the membrane potential before
every sample from ``v0`` into a float64 scratch ``(B, T, C)``, then runs backwards in
time, adding its own ``gx[b, t, c]`` (no two lanes write one element).  The constants go
to the kernel as one cached float64 device vector (the forward twin's
:func:`~rtamt.ihc.paulick2024_triton._constants`).  Exponentials are libdevice's on a GPU,
numpy's in the interpreter: the twins agree to rounding (1e-12 relative).

On a GPU: a program has exactly one thread per lane (BLOCK = 32 lanes, 1 warp), so the
scratch a lane writes in its forward recomputation and reads backwards is touched by one
thread only, in program order; the launch sets ``num_stages=1`` (no software pipelining
of the loops' loads).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .paulick2024_triton import BLOCK, _constants, _model_constants

__all__ = ["BLOCK", "ihc_paulick2024_adjoint"]


@triton.jit
def _met(d, gmet, x0, inv_s0, inv_s1):
    """MET conductance ``G(d)`` (S) and ``dG/dd`` (S/m) (Altoè et al. 2018, Eq. A2; numba's
    ``_met_g`` and ``met_dg``): ``G = gmet / D``, ``D = 1 + e1 (1 + e0)``,
    ``dG/dd = gmet q ((1 - q)/s1 + e1 e0 q/s0)``, ``q = 1/D``; 0 where ``D`` overflows."""
    u = x0 - d
    e1 = tl.exp(u * inv_s1)
    e0 = tl.exp(u * inv_s0)
    D = 1.0 + e1 * (1.0 + e0)
    g = gmet / D
    fin = (D - D) == 0.0                       # D finite (D >= 1: never NaN)
    q = 1.0 / tl.where(fin, D, 1.0)
    dg = gmet * q * ((1.0 - q) * inv_s1 + (tl.where(fin, e1 * e0, 0.0) * q) * inv_s0)
    return g, tl.where(fin, dg, 0.0)


@triton.jit
def _ihc_adj_kernel(cst_ptr, v0_ptr, x_ptr, gy_ptr, gys_b, gys_t, gys_c, mu_ptr, gx_ptr,
                    vb_ptr, N, T, C, METHOD: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = i < N
    b = i // C
    c = i - b * C
    alpha, gmet, x0, inv_s0, inv_s1, ep, gkf, ekf, gks, eks, k = _model_constants(cst_ptr)
    xo = b * T * C + c
    gyo = b * gys_b + c * gys_c
    vm = tl.load(v0_ptr + i, mask=live, other=0.0)
    for t in range(T):                          # V before each sample
        tl.store(vb_ptr + xo + t * C, vm, mask=live)
        g, _ = _met(alpha * tl.load(x_ptr + xo + t * C, mask=live, other=0.0), gmet, x0,
                    inv_s0, inv_s1)
        if METHOD == 0:
            vm = vm + k * (g * (ep - vm) + gkf * (ekf - vm) + gks * (eks - vm))
        else:
            gt = g + gkf + gks
            vinf = (g * ep + gkf * ekf + gks * eks) / gt
            vm = vinf + (vm - vinf) * tl.exp(-k * gt)
    lam = tl.load(mu_ptr + i, mask=live, other=0.0)
    for tt in range(T):
        t = T - 1 - tt
        lam += tl.load(gy_ptr + gyo + t * gys_t, mask=live, other=0.0)
        d = alpha * tl.load(x_ptr + xo + t * C, mask=live, other=0.0)
        g, dg = _met(d, gmet, x0, inv_s0, inv_s1)
        v = tl.load(vb_ptr + xo + t * C, mask=live, other=0.0)
        gt = g + gkf + gks
        # (dV'/dV, dV'/dG) of the step (numba's step_partials)
        if METHOD == 0:
            dvv = 1.0 - k * gt
            dvg = k * (ep - v)
        else:
            vinf = (g * ep + gkf * ekf + gks * eks) / gt
            e = tl.exp(-k * gt)
            dvv = e
            dvg = (ep - vinf) * (1.0 - e) / gt - k * e * (v - vinf)
        gxv = tl.load(gx_ptr + xo + t * C, mask=live, other=0.0)
        tl.store(gx_ptr + xo + t * C, gxv + lam * dvg * dg * alpha, mask=live)
        lam *= dvv
    tl.store(mu_ptr + i, lam, mask=live)


def ihc_paulick2024_adjoint(alpha, gmet, x0, inv_s0, inv_s1, ep, gkf, ekf, gks, eks, k,
                            method, v0, x, gy, mu, gx):
    """Adjoint of Paulick2024's IHC kernel (Triton); the arguments of the numba
    :func:`rtamt.ihc.paulick2024_grad.ihc_paulick2024_adjoint`.

    alpha ... k : Python floats (``IHCPaulick2024Coeffs``);  method : 0 forward Euler,
    1 exponential Euler;  v0 : (B, C) incoming membrane potential (V);  x : (B, T, C) BM
    velocity (m/s);  gy : (B, T, C) output gradient, any strides;  mu : (B, C) in:
    gradient of the outgoing ``v``, out: of the incoming one;  gx : (B, T, C) added to.

    All float64, contiguous except ``gy``, on one device; one launch of
    ``ceil(B C / BLOCK)`` programs.
    """
    B, T, C = x.shape
    for name, tns in (("v0", v0), ("x", x), ("gy", gy), ("mu", mu), ("gx", gx)):
        assert name == "gy" or tns.is_contiguous(), \
            f"ihc_paulick2024_adjoint: {name} must be contiguous"
        assert tns.dtype == torch.float64, f"ihc_paulick2024_adjoint: {name} is not float64"
        assert tns.device == x.device, f"ihc_paulick2024_adjoint: {name} not on x's device"
    assert v0.shape == mu.shape == (B, C) and gy.shape == gx.shape == (B, T, C)
    assert method in (0, 1)
    n = B * C
    if n == 0 or T == 0:
        return
    cst = _constants(tuple(float(a) for a in (alpha, gmet, x0, inv_s0, inv_s1, ep, gkf, ekf,
                                              gks, eks, k)), x.device)
    vb = torch.empty((B, T, C), dtype=torch.float64, device=x.device)
    _ihc_adj_kernel[(triton.cdiv(n, BLOCK),)](cst, v0, x, gy, *gy.stride(), mu, gx, vb, n, T,
                                              C, METHOD=int(method), BLOCK=BLOCK,
                                              num_warps=1, num_stages=1,
                                              enable_fp_fusion=True)
