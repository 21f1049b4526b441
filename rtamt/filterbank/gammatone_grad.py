"""The gradient rule of :class:`rtamt.filterbank.gammatone.Gammatone` and the adjoint of
its kernel :func:`rtamt.filterbank.gammatone.gammatone4`."""
from __future__ import annotations

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.grad import SEGMENT, StageGrad, lift
from ..engine.jit import JIT as _JIT
from . import gammatone


@njit(**_JIT)
def _gammatone_span(p_r, p_i, x, t0, t1, wr, wi, zr, zi, store):
    """The four sections ``z_j <- p z_j + z_{j-1}`` (``z_0 = x[t]``) for
    ``t0 <= t < t1`` from the memories ``wr``, ``wi`` (4,), advanced in place; with
    ``store``, ``z_j[t]`` goes to row ``t - t0 + 1`` of ``zr``, ``zi`` (row 0 is left
    to the caller: the memories before ``t0``)."""
    for t in range(t0, t1):
        ur = x[t]
        ui = 0.0
        for j in range(4):
            ar = wr[j]
            ai = wi[j]
            ur, ui = p_r * ar - p_i * ai + ur, p_r * ai + p_i * ar + ui
            wr[j] = ur
            wi[j] = ui
        if store:
            zr[t - t0 + 1] = wr
            zi[t - t0 + 1] = wi


@njit(**_JIT)
def gammatone4_adjoint(pr, pi, gain, gy, mur, mui, gx, want, sr, si, x, gp):
    """Adjoint of :func:`rtamt.filterbank.gammatone.gammatone4` (Hohmann 2002, Acta Acustica
    88, 433-442: the all-pole gammatone as a cascade of four identical complex one-pole
    sections ``z_j[t] = p z_j[t-1] + z_{j-1}[t]``, ``z_0 = x``, ``y = gain Re z_4``).

    A complex multiplication by ``p``, seen as a real 2x2 map on (Re, Im), has the
    transpose "multiply by conj(p)".  So, backwards in time, with ``mu_j`` the gradient of
    ``z_j[t]`` through ``z_j[t+1]``: ``lam_4 = gain gy[t] + mu_4``,
    ``lam_j = lam_{j+1} + mu_j`` (j = 3, 2, 1), ``gx[t] += Re lam_1`` and
    ``mu_j <- conj(p) lam_j``.  The recursion is linear: the input gradient needs no
    trajectory.

    With ``want``, the gradient of the coefficients too: ``z_j[t]`` depends on ``p``
    through ``p z_j[t-1]``, so ``dL/dRe p += Re(conj(lam_j[t]) z_j[t-1])`` and
    ``dL/dIm p += Im(conj(lam_j[t]) z_j[t-1])`` (as real pairs: ``lr ar + li ai`` and
    ``li ar - lr ai``), and ``dL/dgain += gy[t] Re z_4[t]``.  The section memories
    along the block are recomputed from the incoming state, checkpointed every
    :data:`SEGMENT` samples.

    pr, pi, gain : (C,) pole and output gain (``GammatoneCoeffs.pr``, ``.pi``, ``.gain``).
    gy   : (B, T, C) output gradient.
    mur, mui : (B, 4, C) in: gradient of the outgoing state ``(sr, si)``; out: of the
               incoming state.
    gx   : (B, T) input gradient (added to).
    want : bool; sr, si : (B, 4, C) the incoming state; x : (B, T) the block input;
    gp   : (3, C) gradients of ``pr``, ``pi``, ``gain`` (added to; read only with want).
    """
    B, T, C = gy.shape
    lr = np.empty(4)
    li = np.empty(4)
    seg = SEGMENT if want else max(T, 1)
    nseg = (T + seg - 1) // seg
    ck = np.empty((nseg, 2, 4))
    zr = np.empty((seg + 1, 4))
    zi = np.empty((seg + 1, 4))
    wr = np.empty(4)
    wi = np.empty(4)
    for b in range(B):
        for c in range(C):
            p_r = pr[c]
            p_i = pi[c]
            g = gain[c]
            if want:                                 # checkpoints of the trajectory
                wr[:] = sr[b, :, c]
                wi[:] = si[b, :, c]
                for k in range(nseg):
                    ck[k, 0] = wr
                    ck[k, 1] = wi
                    _gammatone_span(p_r, p_i, x[b], k * seg, min(T, (k + 1) * seg), wr, wi,
                                    zr, zi, False)
            m_r = mur[b, :, c].copy()
            m_i = mui[b, :, c].copy()
            for k in range(nseg - 1, -1, -1):
                t0 = k * seg
                t1 = min(T, t0 + seg)
                if want:
                    wr[:] = ck[k, 0]
                    wi[:] = ck[k, 1]
                    zr[0] = wr
                    zi[0] = wi
                    _gammatone_span(p_r, p_i, x[b], t0, t1, wr, wi, zr, zi, True)
                for t in range(t1 - 1, t0 - 1, -1):
                    ar = g * gy[b, t, c]
                    ai = 0.0
                    for j in range(3, -1, -1):
                        ar += m_r[j]
                        ai += m_i[j]
                        lr[j] = ar
                        li[j] = ai
                    gx[b, t] += lr[0]
                    if want:
                        i = t - t0
                        gp[2, c] += gy[b, t, c] * zr[i + 1, 3]
                        for j in range(4):
                            gp[0, c] += lr[j] * zr[i, j] + li[j] * zi[i, j]
                            gp[1, c] += li[j] * zr[i, j] - lr[j] * zi[i, j]
                    for j in range(4):
                        m_r[j] = p_r * lr[j] + p_i * li[j]
                        m_i[j] = p_r * li[j] - p_i * lr[j]
            mur[b, :, c] = m_r
            mui[b, :, c] = m_i


def _triton():
    """The Triton twin (:mod:`rtamt.filterbank.gammatone_grad_triton`), imported on first
    binding."""
    from . import gammatone_grad_triton
    return (gammatone_grad_triton.gammatone4_adjoint,)


class GammatoneGrad(StageGrad):
    """Learnable: ``th = [log(fc / fc0) (C,), log(b / b0)]``, the centre frequencies
    ``fc`` (Hz) and the bandwidth factor ``b`` of ``beta = b ERB(fc)`` (Hz; Holdsworth et
    al. 1988, ``b0`` = 1.0186 for order 4; ERB of Glasberg & Moore 1990, Hear. Res. 47,
    103-138), the :class:`~rtamt.filterbank.gammatone.GammatoneWeights`.  Every ``th``
    keeps ``fc > 0`` and ``beta > 0``, so the pole radius ``r = exp(-2 pi beta / fs)``
    stays below 1.  The coefficients come from :func:`rtamt.filterbank.gammatone.poles`
    (Hohmann 2002, Acta Acustica 88, 433-442), the adjoint is
    :func:`gammatone4_adjoint`."""

    kernels = Kernels(numba=(gammatone4_adjoint,), triton=_triton)

    def __init__(self, stage, coeffs, n_in):
        super().__init__(stage, coeffs, n_in)
        self.n_params = coeffs.fc.size + 1
        self.b0 = gammatone.bandwidth_factor(stage.params.order)

    def weights(self, th, xp=np):
        C = self.coeffs0.fc.size
        return gammatone.GammatoneWeights(lift(self.coeffs0.fc, th, xp) * xp.exp(th[:C]),
                                          self.b0 * xp.exp(th[C]))

    def coefficients(self, w, xp):
        return gammatone.poles(self.coeffs0.fs, w, xp)[1:]

    def backward(self, coeffs, th, x, state, gy, mu):
        k = self.kern
        gx = k.zeros(x.shape, x)
        gp = k.zeros((3, coeffs.fc.size), x)
        k.gammatone4_adjoint(k.coef(coeffs.pr), k.coef(coeffs.pi), k.coef(coeffs.gain), gy,
                             mu["sr"], mu["si"], gx, th is not None, state["sr"],
                             state["si"], x, gp)
        return gx, None if th is None else self.chain(th, *gp)
