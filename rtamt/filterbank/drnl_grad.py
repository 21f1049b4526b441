"""The gradient rule of :class:`rtamt.filterbank.drnl.DRNL` (both paths and the broken
stick of Meddis, O'Mard & Lopez-Poveda 2001 and Lopez-Poveda & Meddis 2001) and the adjoint
of its kernel :func:`rtamt.filterbank.drnl.drnl_kernel`."""
from __future__ import annotations

import math

import numba
import numpy as np

from ..engine.backend import Kernels, copy_leaf
from ..engine.grad import StageGrad
from ..engine.jit import INLINE as _INLINE
from ..engine.jit import JIT as _JIT
from .drnl import _biquad_row


@numba.njit(**_INLINE)
def _biquad_back(co, m1, m2, bi, k, g):
    """Adjoint of :func:`rtamt.filterbank.drnl._biquad_row` (section ``k`` of stream ``bi``,
    every channel), in place on ``g`` (C,): the gradient of the section's output in, that
    of its input out.  Forward (transposed direct form II; Oppenheim & Schafer,
    *Discrete-Time Signal Processing*, 3rd ed., ch. 6): ``o = b0 v + s1``,
    ``s1' = b1 v - a1 o + s2``, ``s2' = b2 v - a2 o``.  Backwards, ``m1``, ``m2`` the
    gradients of ``s1'``, ``s2'``: ``go = g - a1 m1 - a2 m2``, ``gv = b0 go + b1 m1 + b2 m2``,
    then the gradients of ``s1``, ``s2`` are ``go`` and ``m1``."""
    for c in range(g.shape[0]):
        p1 = m1[bi, k, c]
        p2 = m2[bi, k, c]
        go = g[c] - co[3, c] * p1 - co[4, c] * p2
        g[c] = co[0, c] * go + co[1, c] * p1 + co[2, c] * p2
        m1[bi, k, c] = go
        m2[bi, k, c] = p1


@numba.njit(**_INLINE)
def stick_slope(u, a, b, c, knee_test, quarter):
    """Derivative of the broken stick ``y = sign(u) min(a |u|, b |u|^c)`` (Meddis et al.
    2001; Lopez-Poveda & Meddis 2001) on the branch the forward kernel takes: ``a`` where it
    keeps ``a |u|`` (below the knee ``(b/a)^(1/(1-c))``, at ``u = 0`` and at an exact tie),
    ``b c |u|^(c-1)`` where ``b |u|^c < a |u|`` (above it).  At the knee this is the
    one-sided derivative of the branch taken (a subgradient: the function is continuous
    there, its slope jumps from ``a`` to ``a c``)."""
    au = abs(u)
    r = a * au
    if quarter:
        q = b * math.sqrt(math.sqrt(au))
    elif au > knee_test:
        q = b * au ** c
    else:
        return a
    if q < r:
        return c * q / au
    return a


@numba.njit(**_JIT)
def drnl_adjoint(scale, gain, gtl, lpl, gtn, lpn, bs, quarter, n_gl, n_ll, n_gb, n_ga, n_ln,
                 do_lin, do_nlin, n1, n2, x, gy, ml1, ml2, mn1, mn2, gx, u, g, h):
    """Adjoint of :func:`rtamt.filterbank.drnl.drnl_kernel`.

    Forward per sample: ``y = lin(x s) + nlin(x s)`` with the linear path ``g`` times the
    GT and LP cascades, and the nonlinear path GT cascade, broken stick, GT and LP cascades
    (Lopez-Poveda & Meddis 2001).  The cascades are linear; the stick's slope needs its
    input ``u[t]``, recomputed per stream from the incoming nonlinear memories ``n1``,
    ``n2`` (copies, advanced here) by the forward's own section function (the same bits).
    Backwards in time, per sample: ``gy`` runs through each path's sections last to first
    (:func:`_biquad_back`), through the stick's slope (:func:`stick_slope`) between the
    nonlinear cascades, and ``s`` times the two paths' gradients summed over channels is
    added to ``gx``.

    x : (B, T) input; gy : (B, T, C) (any strides); ml1, ml2 / mn1, mn2 : (B, S, C) in:
    gradients of the outgoing section memories of each path, out: of the incoming ones;
    gx : (B, T) (added to); u : (T, C), g, h : (C,) scratch.  Coefficients float64.
    """
    B, T = x.shape
    C = gain.shape[0]
    s = scale[0]
    for bi in range(B):
        if do_nlin:
            for t in range(T):
                xv = x[bi, t] * s
                for c in range(C):
                    h[c] = xv
                for k in range(n_gb):
                    _biquad_row(gtn, n1, n2, bi, k, h)
                for c in range(C):
                    u[t, c] = h[c]
        for t in range(T - 1, -1, -1):
            acc = 0.0
            if do_lin:
                for c in range(C):
                    g[c] = gy[bi, t, c]
                for k in range(n_ll - 1, -1, -1):
                    _biquad_back(lpl, ml1, ml2, bi, n_gl + k, g)
                for k in range(n_gl - 1, -1, -1):
                    _biquad_back(gtl, ml1, ml2, bi, k, g)
                for c in range(C):
                    acc += gain[c] * g[c]
            if do_nlin:
                for c in range(C):
                    h[c] = gy[bi, t, c]
                for k in range(n_ln - 1, -1, -1):
                    _biquad_back(lpn, mn1, mn2, bi, n_gb + n_ga + k, h)
                for k in range(n_ga - 1, -1, -1):
                    _biquad_back(gtn, mn1, mn2, bi, n_gb + k, h)
                for c in range(C):
                    h[c] *= stick_slope(u[t, c], bs[0, c], bs[1, c], bs[2, c], bs[3, c],
                                        quarter)
                for k in range(n_gb - 1, -1, -1):
                    _biquad_back(gtn, mn1, mn2, bi, k, h)
                for c in range(C):
                    acc += h[c]
            gx[bi, t] += s * acc


def _triton():
    """The Triton twin (:mod:`rtamt.filterbank.drnl_grad_triton`), imported on first
    binding."""
    from . import drnl_grad_triton
    return (drnl_grad_triton.drnl_adjoint,)


class DRNLGrad(StageGrad):
    """:class:`rtamt.filterbank.drnl.DRNL`, every preset, subject and ``paths``: input
    (stapes velocity) and the incoming memories of both paths by :func:`drnl_adjoint` with
    the float64 sections (numba, or its Triton twin once bound).  No learnable parameters
    (the stage declares no ``Weights``)."""

    kernels = Kernels(numba=(drnl_adjoint,), triton=_triton)

    def backward(self, coeffs, th, x, state, gy, mu):
        co = coeffs
        k = self.kern
        c = k.coef
        sec = co.sections[np.dtype(np.float64)]
        C = co.fc.size
        T = x.shape[1]
        gx = k.zeros(x.shape, x)
        k.drnl_adjoint(c(sec["scale"]), c(sec["gain"]), c(sec["gtl"]), c(sec["lpl"]),
                       c(sec["gtn"]), c(sec["lpn"]), c(sec["bs"]), co.quarter, *co.counts,
                       co.do_lin, co.do_nlin, copy_leaf(state["nlin_s1"]),
                       copy_leaf(state["nlin_s2"]), x, gy, mu["lin_s1"], mu["lin_s2"],
                       mu["nlin_s1"], mu["nlin_s2"], gx, k.scratch((T, C), x),
                       k.scratch(C, x), k.scratch(C, x))
        return gx, None
