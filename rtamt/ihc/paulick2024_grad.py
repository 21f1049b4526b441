"""The gradient rule of :class:`rtamt.ihc.paulick2024.IHCPaulick2024` (the MET conductance
and the membrane ODE of the revised CASP IHC, Paulick, Relaño-Iborra & Dau 2024) and the
adjoint of its kernel :func:`rtamt.ihc.paulick2024.ihc_paulick2024_kernel`."""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.grad import StageGrad
from ..engine.jit import INLINE as _INLINE
from ..engine.jit import JIT as _JIT
from .paulick2024 import _met_g, _step


@njit(**_INLINE)
def met_dg(d, gmet, x0, inv_s0, inv_s1):
    """``dG/dd`` (S/m) of the MET conductance of Altoè et al. (2018, Eq. A2; Paulick et al.
    2024), ``G = gmet / D``, ``D = 1 + e1 (1 + e0)``, ``e1 = exp((x0 - d)/s1)``,
    ``e0 = exp((x0 - d)/s0)``: ``dG/dd = gmet q ((1 - q)/s1 + e1 e0 q/s0)`` with
    ``q = 1/D`` (``e1 (1 + e0) = D - 1``).  Where ``D`` overflows the forward ``G`` is 0
    and so is this (the true value is below ``gmet (1/s0 + 1/s1) 1e-308``)."""
    u = x0 - d
    e1 = math.exp(u * inv_s1)
    e0 = math.exp(u * inv_s0)
    D = 1.0 + e1 * (1.0 + e0)
    if not D < math.inf:
        return 0.0
    q = 1.0 / D
    return gmet * q * ((1.0 - q) * inv_s1 + (e1 * e0 * q) * inv_s0)


@njit(**_INLINE)
def step_partials(vm, g, ep, gkf, ekf, gks, eks, k, method):
    """``(dV'/dV, dV'/dG)`` of one step :func:`rtamt.ihc.paulick2024._step` of the membrane
    equation ``Cm dV/dt = G (EP - V) + Gkf (Ekf - V) + Gks (Eks - V)`` (Altoè et al. 2018,
    Eqs. A1, A4, A7, conductances held constant as in Paulick et al. 2024), ``k = dt/Cm``.

    Forward Euler, ``V' = V + k (G (EP - V) + Gkf (Ekf - V) + Gks (Eks - V))``:
    ``dV'/dV = 1 - k Gtot``, ``dV'/dG = k (EP - V)``, ``Gtot = G + Gkf + Gks``.
    Exponential Euler (Rush & Larsen 1978), ``V' = Vinf + (V - Vinf) E``,
    ``E = exp(-k Gtot)``, ``Vinf = (G EP + Gkf Ekf + Gks Eks)/Gtot``:
    ``dV'/dV = E``, ``dV'/dG = (EP - Vinf)(1 - E)/Gtot - k E (V - Vinf)``
    (``dVinf/dG = (EP - Vinf)/Gtot``, ``dE/dG = -k E``)."""
    gt = g + gkf + gks
    if method == 0:
        return 1.0 - k * gt, k * (ep - vm)
    vinf = (g * ep + gkf * ekf + gks * eks) / gt
    e = math.exp(-k * gt)
    return e, (ep - vinf) * (1.0 - e) / gt - k * e * (vm - vinf)


@njit(**_JIT)
def ihc_paulick2024_adjoint(alpha, gmet, x0, inv_s0, inv_s1, ep, gkf, ekf, gks, eks, k,
                            method, v0, x, gy, mu, gx):
    """Adjoint of :func:`rtamt.ihc.paulick2024.ihc_paulick2024_kernel`.

    Forward, per stream and channel: ``d = alpha x[t]``, ``G = G(d)`` (Eq. A2),
    ``V[t] = step(V[t-1], G)`` (Eq. A1, :func:`step_partials`), ``y[t] = V[t] - offset``.
    The trajectory ``V`` is recomputed from ``v0`` with the forward's own functions (the
    same bits), kept for one stream at a time (``(T, C)``); then backwards, with ``lam``
    the gradient of ``V[t]``: ``lam <- lam + gy[t]``,
    ``gx[t] += lam dV/dG G'(d) alpha``, ``lam <- lam dV/dV``; ``lam`` starts at ``mu``
    (the gradient of the outgoing ``V``) and ends as that of the incoming one.

    v0 : (B, C) incoming membrane potential (V);  x : (B, T, C) BM velocity (m/s);
    gy : (B, T, C) output gradient (any strides);
    mu : (B, C) in: gradient of the outgoing ``v``, out: of the incoming one;
    gx : (B, T, C) (added to).
    """
    B, T, C = x.shape
    vb = np.empty((T, C))
    for b in range(B):
        for c in range(C):
            vm = v0[b, c]
            for t in range(T):
                vb[t, c] = vm
                g = _met_g(alpha * x[b, t, c], gmet, x0, inv_s0, inv_s1)
                vm = _step(vm, g, ep, gkf, ekf, gks, eks, k, method)
        for c in range(C):
            lam = mu[b, c]
            for t in range(T - 1, -1, -1):
                lam += gy[b, t, c]
                d = alpha * x[b, t, c]
                g = _met_g(d, gmet, x0, inv_s0, inv_s1)
                dvv, dvg = step_partials(vb[t, c], g, ep, gkf, ekf, gks, eks, k, method)
                gx[b, t, c] += lam * dvg * met_dg(d, gmet, x0, inv_s0, inv_s1) * alpha
                lam *= dvv
            mu[b, c] = lam


def _triton():
    """The Triton twin (:mod:`rtamt.ihc.paulick2024_grad_triton`), imported on first
    binding."""
    from . import paulick2024_grad_triton
    return (paulick2024_grad_triton.ihc_paulick2024_adjoint,)


class IHCPaulick2024Grad(StageGrad):
    """:class:`rtamt.ihc.paulick2024.IHCPaulick2024`, both integrators and outputs: input
    (BM velocity) and incoming membrane potential by :func:`ihc_paulick2024_adjoint`.  The
    stage declares no ``Weights``: no learnable parameters."""

    kernels = Kernels(numba=(ihc_paulick2024_adjoint,), triton=_triton)

    def backward(self, coeffs, th, x, state, gy, mu):
        c = coeffs
        k = self.kern
        gx = k.zeros(x.shape, x)
        k.ihc_paulick2024_adjoint(c.alpha, c.gmet, c.x0, c.inv_s0, c.inv_s1, c.ep, c.gkf,
                                  c.ekf, c.gks, c.eks, c.k, c.method, state["v"], x, gy,
                                  mu["v"], gx)
        return gx, None
