"""Gradient rule of :class:`~rtamt.loudness.binaural.BinauralInhibition` (Moore et al.
2016; the inhibition of Moore & Glasberg 2007): w.r.t. the short-term specific loudness of
both ears (through the inhibited patterns and through the spatially smoothed patterns that
set the inhibition), the excitation (its dB form), the long-term integrator's incoming
state and, learnable, the inhibition exponent ``p = p0 exp(theta[0])`` and the long-term
integrator's attack and release time constants (``theta[1:3] = log(tau / tau0)``).

The inhibited pattern of an ear is ``st (1 + v) / 2``, ``v = sech(S_o / S_s)^p`` (``S_s``,
``S_o``: this ear's and the other ear's smoothed patterns), so
``dv/dx = -p tanh(x) v`` and ``dv/dp = -v ln cosh x`` at ``x = S_o / S_s``.  Where the kernel
holds a value (``v = 1`` where the other ear is silent, ``S_o = 0``; ``v = 0`` where this
ear's smoothed pattern is 0) the one-sided derivatives are 0 (``sech(x)^p = 1 - p x^2/2 +
...`` at 0, and it decays faster than any power as ``x`` grows), which is the gradient
used.  The long-term integrator's attack/release switch is held, as in
:func:`rtamt.loudness.frames_grad.agc_adjoint`.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.jit import JIT as _JIT
from ..engine.rowwise import band_ranges, product
from .binaural import _sech_pow
from .frames_grad import FrameGrad, agc_step_adjoint, owned, scalar, time_constant_coeff, zeros_or

__all__ = ["binaural_adjoint", "BinauralWeights", "BinauralGrad"]

_LN2 = math.log(2.0)
_K10 = 10.0 / math.log(10.0)


@njit(**_JIT)
def binaural_adjoint(st, S, E, lt0, aa, ar, p, gspec, gexc, gste, glte, mu, gst, gS, gE):
    """Adjoint of :func:`rtamt.loudness.binaural.binaural_frames` (same arguments, the
    outputs' gradients ``gspec``, ``gexc`` (B, 2, K, F), ``gste``, ``glte`` (B, 2, F)).
    The short-term loudness and the long-term trajectory are recomputed as the kernel does
    (the switch decisions equal); ``mu`` (R,) the gradient of the outgoing long-term state,
    replaced by that of the incoming one; ``gst``, ``gS`` (F, R, K) and ``gE`` (R, F, K)
    added into.  Returns the gradients of ``(p, attack, release)``."""
    F, R, K = st.shape
    diotic = R == 1
    nb = 1 if diotic else R // 2
    inh = np.empty(K)
    tot = np.empty((2, F))
    ltp = np.empty((2, F))
    gp = 0.0
    ga = 0.0
    gr = 0.0
    for b in range(nb):
        r0 = 0 if diotic else 2 * b
        r1 = r0 if diotic else r0 + 1
        lt = np.array([lt0[r0], lt0[r1]])
        for f in range(F):                       # the forward pass, as the kernel
            for e in range(2):
                rs, ro = (r0, r1) if e == 0 else (r1, r0)
                for k in range(K):
                    inh[k] = 2.0 / (1.0 + _sech_pow(S[f, ro, k], S[f, rs, k], p))
                t = 0.0
                for k in range(K):
                    t += st[f, rs, k] / inh[k]
                t *= 0.25
                tot[e, f] = t
                if e == 0 or not diotic:
                    ltp[e, f] = lt[e]
                    lt[e] = lt[e] + (aa if t > lt[e] else ar) * (t - lt[e])
        lam = np.array([mu[r0], mu[r1]])
        for f in range(F - 1, -1, -1):
            for e in range(2):
                rs, ro = (r0, r1) if e == 0 else (r1, r0)
                gt = gste[b, e, f]
                if e == 0 or not diotic:
                    gl = lam[e] + glte[b, e, f]
                    if diotic:
                        gl += glte[b, 1, f]
                    dx, lam[e], da, dr = agc_step_adjoint(gl, tot[e, f], ltp[e, f], aa, ar)
                    gt += dx
                    ga += da
                    gr += dr
                for k in range(K):
                    num = S[f, ro, k]
                    den = S[f, rs, k]
                    v = _sech_pow(num, den, p)
                    y = st[f, rs, k]
                    gv = gspec[b, e, k, f] + 0.25 * gt
                    gst[f, rs, k] += gv * 0.5 * (1.0 + v)
                    if num > 0.0 and den > 0.0:
                        x = num / den
                        if x < 1e300:
                            gvv = gv * 0.5 * y
                            lc = x - _LN2 + math.log(1.0 + math.exp(-2.0 * x))
                            dvdx = -p * math.tanh(x) * v
                            gp += gvv * (-lc * v)
                            gS[f, ro, k] += gvv * dvdx / den
                            gS[f, rs, k] -= gvv * dvdx * x / den
                    er = E[rs, f, k]
                    if er > 1e-10:
                        gE[rs, f, k] += gexc[b, e, k, f] * _K10 / er
        mu[r0] = lam[0]
        if not diotic:
            mu[r1] = lam[1]
    return gp, ga, gr


@dataclasses.dataclass(frozen=True)
class BinauralWeights:
    """p: the inhibition exponent; attack, release: the long-term integrator's
    coefficients per frame."""

    p: object
    attack: object
    release: object


def _triton():
    """The Triton twin (:mod:`rtamt.loudness.binaural_grad_triton`), imported on first
    binding."""
    from . import binaural_grad_triton
    return (binaural_grad_triton.binaural_adjoint,)


class BinauralGrad(FrameGrad):
    """``fr['st']`` (F, R, K), ``fr['E']`` (R F, K) -> ``fr['spec']``, ``fr['exc']``,
    ``fr['ste']``, ``fr['lte']``; state ``lt`` (R,); learnable ``p``, attack, release."""

    n_params = 3
    kernels = Kernels(numba=(binaural_adjoint,), triton=_triton)

    def __init__(self, stage, rows: int = 1):
        super().__init__(stage, rows)
        self.smooth_t = np.ascontiguousarray(stage.coeffs.smooth.T)
        self.smooth_t_rng = band_ranges(self.smooth_t)

    def weights(self, th, xp=np):
        q = self.stage.params
        return BinauralWeights(q.p * xp.exp(th[0]), time_constant_coeff(q.attack, th[1], xp),
                               time_constant_coeff(q.release, th[2], xp))

    def coefficients(self, w, xp):
        return (w.p, w.attack, w.release)

    def params_for(self, w):
        return dataclasses.replace(self.stage.params, p=float(w.p), attack=float(w.attack),
                                   release=float(w.release))

    def backward(self, stage, fr, state, g, mu, th):
        q, c, kern = stage.params, stage.kcoeffs, self.kern   # arrays as kernels take them
        st = kern.contiguous(fr["st"])
        F, R, K = st.shape
        B = 1 if R == 1 else R // 2
        S = product(stage.kern, st.reshape(F * R, K), c.smooth, c.smooth_rng).reshape(F, R, K)
        E = kern.contiguous(fr["E"]).reshape(R, F, K)
        gst = kern.zeros((F, R, K), st)
        gS = kern.zeros((F, R, K), st)
        gE = kern.zeros((R, F, K), st)
        m = owned(kern, mu["lt"])
        gp, ga, gr = kern.binaural_adjoint(
            st, S, E, kern.contiguous(state["lt"]), q.attack, q.release, q.p,
            zeros_or(kern, g["spec"], (B, 2, K, F), st),
            zeros_or(kern, g["exc"], (B, 2, K, F), st),
            zeros_or(kern, g["ste"], (B, 2, F), st),
            zeros_or(kern, g["lte"], (B, 2, F), st), m, gst, gS, gE)
        mu["lt"] = m
        co = kern.coef
        gst += product(stage.kern, gS.reshape(F * R, K), co(self.smooth_t),
                       co(self.smooth_t_rng)).reshape(F, R, K)
        gth = None if th is None else self.chain(th, scalar(kern, gp), scalar(kern, ga),
                                                 scalar(kern, gr))
        return {"st": gst, "E": gE.reshape(R * F, K)}, gth
