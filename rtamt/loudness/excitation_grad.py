"""Gradient rule of :class:`~rtamt.loudness.excitation.Excitation` (ANSI S3.4-2007 §3.5):
the adjoint of the banded products (the upper skirts and the level per ERB) and of the
level-dependent lower skirts, w.r.t. the component powers.

The lower skirts' kernel (:func:`rtamt.loudness.excitation.lower_skirt`) rounds its
weights to float32; the adjoint is that of the same function in float64 (the tables
``a``, ``b`` as the kernel holds them, the slope factor ``s`` unrounded), checked against
torch's autograd through a float64 form of it (``tests/loudness/test_excitation_grad.py``).
The floor of the lower slope (``p_l = max(0.1, ...)``) is a max: where it is at the floor
the slope has no derivative w.r.t. the level (the floor's side is taken at a tie); the
level per ERB is floored at 1e-10 (no derivative below), as the excitation in dB is.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.jit import JIT as _JIT
from ..engine.rowwise import band_ranges, product
from .frames_grad import FrameGrad, owned

__all__ = ["lower_skirt_adjoint", "lower_skirt_f64", "excitation_db_adjoint", "ExcitationGrad"]

_LN2 = math.log(2.0)
_K10 = 10.0 / math.log(10.0)


@njit(**_JIT)
def lower_skirt_adjoint(P, lvl, c_slope, a, b, i0, seg, cnt, gE, gP, glvl):
    """Adjoint of :func:`rtamt.loudness.excitation.lower_skirt` in float64: with
    ``s_j = 1 - c_slope (10 log10 max(lvl_j, 1e-10) - 51)``, ``t = max(b_ij, a_ij s_j)``,
    ``W = (1 + t ln 2) 2^{-t}`` and ``E_i += W_ij P_j``:
    ``gP_j += sum_i gE_i W_ij`` and ``glvl_j += sum_i gE_i P_j dW/dt a_ij ds/dlvl`` where
    ``a_ij s_j > b_ij`` (``dW/dt = -t ln^2 2 2^{-t}``).

    P, lvl (N, J); gE (N, nf) the excitation's gradient; gP, glvl (N, J) added into.
    """
    N, J = P.shape
    nf = gE.shape[1]
    for n in range(N):
        for j in range(J):
            lv = lvl[n, j]
            s = 1.0 - c_slope * (_K10 * math.log(max(lv, 1e-10)) - 51.0)
            k0 = i0[j]
            base = seg[j]
            pj = P[n, j]
            gp = 0.0
            gs = 0.0
            for q in range(cnt[j]):
                i = k0 + q
                if i >= nf:
                    break
                aa = np.float64(a[base + q])
                bb = np.float64(b[base + q])
                t = max(bb, aa * s)
                e2 = math.exp(-t * _LN2)
                ge = gE[n, i]
                gp += ge * (1.0 + t * _LN2) * e2
                if aa * s > bb:
                    gs += ge * pj * (-t * _LN2 * _LN2 * e2) * aa
            gP[n, j] += gp
            if lv > 1e-10:
                glvl[n, j] += gs * (-c_slope * _K10 / lv)


@njit(**_JIT)
def lower_skirt_f64(P, lvl, c_slope, a, b, i0, seg, cnt, E):
    """:func:`rtamt.loudness.excitation.lower_skirt` in float64 throughout (the function
    whose adjoint :func:`lower_skirt_adjoint` is; for checks: the kernel's float32
    rounding, relative 2e-6, swamps finite differences)."""
    N, J = P.shape
    nf = E.shape[1]
    for n in range(N):
        for j in range(J):
            s = 1.0 - c_slope * (_K10 * math.log(max(lvl[n, j], 1e-10)) - 51.0)
            base = seg[j]
            for q in range(cnt[j]):
                i = i0[j] + q
                if i >= nf:
                    break
                t = max(np.float64(b[base + q]), np.float64(a[base + q]) * s)
                E[n, i] += (1.0 + t * _LN2) * math.exp(-t * _LN2) * P[n, j]


@njit(**_JIT)
def excitation_db_adjoint(E, gdb, gE):
    """Adjoint of ``10 log10 max(E, 1e-10)``: ``gE += gdb 10/(E ln 10)`` where
    ``E > 1e-10`` (0 on the floor)."""
    N, K = E.shape
    for n in range(N):
        for k in range(K):
            if E[n, k] > 1e-10:
                gE[n, k] += gdb[n, k] * _K10 / E[n, k]


def _triton():
    """The Triton twins (:mod:`rtamt.loudness.excitation_grad_triton`), imported on first
    binding."""
    from . import excitation_grad_triton as t
    return (t.lower_skirt_adjoint, t.excitation_db_adjoint)


class ExcitationGrad(FrameGrad):
    """``fr['P']`` (R F, J) -> ``fr['E']`` (R F, nf) (and ``fr['E_db']``)."""

    kernels = Kernels(numba=(lower_skirt_adjoint, excitation_db_adjoint), triton=_triton)

    def __init__(self, stage, rows: int = 1):
        super().__init__(stage, rows)
        c = stage.coeffs
        # the transposed banded matrices, for the row-wise products of the adjoint
        self.up = np.ascontiguousarray(c.up_t.T)
        self.sym = np.ascontiguousarray(c.sym_t.T)
        self.up_rng, self.sym_rng = band_ranges(self.up), band_ranges(self.sym)

    def backward(self, stage, fr, state, g, mu, th):
        c, kern, co = stage.kcoeffs, self.kern, self.kern.coef   # arrays as kernels take them
        P = kern.contiguous(fr["P"])
        N = P.shape[0]
        nf = c.fc.shape[0]
        gE = kern.zeros((N, nf), P) if g["E"] is None else owned(kern, g["E"])
        if stage.params.level_db and g.get("E_db") is not None:
            kern.excitation_db_adjoint(kern.contiguous(fr["out"]["E"]),
                                       kern.contiguous(g["E_db"]), gE)
        lvl = product(stage.kern, P, c.sym_t, c.sym_rng)     # as the forward pass
        gP = product(stage.kern, gE, co(self.up), co(self.up_rng))
        glvl = kern.zeros(tuple(P.shape), P)
        kern.lower_skirt_adjoint(P, lvl, c.c_slope, c.a, c.b, c.i0, c.seg, c.cnt, gE, gP, glvl)
        gP += product(stage.kern, glvl, co(self.sym), co(self.sym_rng))
        return {"P": gP}, None
