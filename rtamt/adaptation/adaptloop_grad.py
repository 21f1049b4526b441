"""The gradient rule of :class:`rtamt.adaptation.adaptloop.AdaptLoop` and the adjoint of
its kernel :func:`rtamt.adaptation.adaptloop.adaptloop`."""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.fastexp import exp_f64_short
from ..engine.grad import SEGMENT, StageGrad, lift
from ..engine.jit import JIT as _JIT
from . import adaptloop


@njit(**_JIT)
def _adapt_span(a, bcoef, lanes, limit_on, s, x, t0, t1, w, traj, tq, tv, store):
    """The adaptation loops of :func:`rtamt.adaptation.adaptloop.adaptloop` (the same
    arithmetic and exponential, per lane) on one stream for ``t0 <= t < t1``, all
    channels as lanes: ``s`` (K, L) the dividers, advanced in place; ``x`` (T, C), the
    ``L - C`` padding lanes fed their minimum level; ``w`` (L,) work.  With ``store``,
    sample ``t``'s dividers before its update, quotients and outputs go to
    ``traj[t - t0]``, ``tq[t - t0]``, ``tv[t - t0]`` (each (K, L))."""
    K, L = s.shape
    C = x.shape[1]
    ml = lanes[0]
    for t in range(t0, t1):
        w[:] = ml                                    # v_0 = max(x, minlvl)
        xt = x[t]
        for c in range(C):
            if xt[c] > ml[c]:
                w[c] = xt[c]
        for k in range(K):
            sk = s[k]
            fak = lanes[3 + k]
            efk = lanes[3 + K + k]
            ofk = lanes[3 + 2 * K + k]
            over = False
            for c in range(L):
                q = w[c] / sk[c]
                w[c] = q
                over |= q > 1.0
            if store:
                traj[t - t0, k] = sk
                tq[t - t0, k] = w
            if limit_on and over:
                for c in range(L):
                    q = w[c]
                    if q > 1.0:
                        w[c] = fak[c] / (1.0 + exp_f64_short(efk[c] * (q - 1.0))) - ofk[c]
            if store:
                tv[t - t0, k] = w
            ak = a[k]
            bk = bcoef[k]
            for c in range(L):
                sk[c] = ak * sk[c] + bk * w[c]


@njit(**_JIT)
def adaptloop_adjoint(a, bcoef, lanes, limit_on, s_in, x, gy, mu, gx, ga):
    """Adjoint of :func:`rtamt.adaptation.adaptloop.adaptloop`, the nonlinear adaptation loops
    of Püschel (1988) and Dau, Püschel & Kohlrausch (1996a, JASA 99, 3615; Dau et al.
    1997a), with the overshoot limiter of Münkner (1993) as in AMT ``adaptloop``.

    Forward, per sample and channel: ``v_0 = max(x, m)``; for each loop k
    ``q_k = v_{k-1} / s_k``, ``v_k = f_k(q_k)`` (the limiter
    ``f(q) = F / (1 + exp(E (q - 1))) - O`` where it is on and ``q > 1``, else ``q``),
    ``s_k <- a_k s_k + b_k v_k``; ``y = (v_K - corr) mult``.

    Backwards, with ``lam_k`` the gradient of the updated divider ``s_k``:
    ``gv_K = mult gy``; for k = K..1: ``gv_k += b_k lam_k``,
    ``gq_k = f_k'(q_k) gv_k`` with ``f'(q) = -F E e / (1 + e)^2``, ``e = exp(E (q - 1))``
    (1 below the limiter), ``lam_k <- a_k lam_k - gq_k q_k / s_k``,
    ``gv_{k-1} = gq_k / s_k``; finally ``gx = gv_0`` where ``x > m``, else 0.  With
    ``b = 1 - a`` the gradient of the loop coefficient is
    ``ga_k += lam_k (s_k - v_k)`` (``lam_k`` before its update), summed over streams and
    channels.  The dividers ``s`` along the block are recomputed from ``s_in``
    (checkpointed every :data:`SEGMENT` samples).

    As in the forward kernel, the channels of a stream run as parallel lanes (the loops
    over channels are innermost, so they vectorise), padded to ``L`` lanes; a padding
    lane has no output or state gradient, so its ``lam`` and contributions stay 0.  Each
    lane's arithmetic is that of a scalar pass over the channel; ``ga`` is summed per
    lane over the block, then over the lanes.

    a, bcoef : (K,); lanes : (3 + 4K, L) the kernel's per-channel constants
    (``AdaptLoopCoeffs.lanes``: minlvl, corr, mult, factor, expfac, offset, s0);
    s_in : (B, K, C) incoming dividers; x, gy : (B, T, C);
    mu   : (B, K, C) in: gradient of the outgoing dividers; out: of the incoming ones;
    gx   : (B, T, C) added to; ga : (K,) added to.
    """
    B, T, C = x.shape
    K = a.shape[0]
    L = lanes.shape[1]
    ml = lanes[0]
    mult = lanes[2]
    nseg = (T + SEGMENT - 1) // SEGMENT
    ck = np.empty((nseg, K, L))
    traj = np.empty((SEGMENT, K, L))                 # s before each sample's update
    tq = np.empty((SEGMENT, K, L))                   # and its quotients, outputs
    tv = np.empty((SEGMENT, K, L))
    s = np.empty((K, L))
    w = np.empty(L)
    lam = np.zeros((K, L))
    gv = np.empty(L)
    gal = np.zeros((K, L))
    for b in range(B):
        s[:, C:] = lanes[3 + 3 * K:3 + 4 * K, C:]
        s[:, :C] = s_in[b]
        for kseg in range(nseg):                     # checkpoints of the trajectory
            ck[kseg] = s
            _adapt_span(a, bcoef, lanes, limit_on, s, x[b], kseg * SEGMENT,
                        min(T, (kseg + 1) * SEGMENT), w, traj, tq, tv, False)
        lam[:, :C] = mu[b]
        for kseg in range(nseg - 1, -1, -1):
            t0 = kseg * SEGMENT
            t1 = min(T, t0 + SEGMENT)
            s[:] = ck[kseg]
            _adapt_span(a, bcoef, lanes, limit_on, s, x[b], t0, t1, w, traj, tq, tv, True)
            for t in range(t1 - 1, t0 - 1, -1):
                i = t - t0
                gyt = gy[b, t]
                for c in range(C):
                    gv[c] = mult[c] * gyt[c]
                for c in range(C, L):
                    gv[c] = 0.0
                for k in range(K - 1, -1, -1):
                    st = traj[i, k]
                    q = tq[i, k]
                    v = tv[i, k]
                    lk = lam[k]
                    gk = gal[k]
                    ak = a[k]
                    bk = bcoef[k]
                    over = False
                    for c in range(L):
                        gv[c] += bk * lk[c]
                        gk[c] += lk[c] * (st[c] - v[c])
                        over |= q[c] > 1.0
                    if limit_on and over:
                        fak = lanes[3 + k]
                        efk = lanes[3 + K + k]
                        for c in range(L):
                            if q[c] > 1.0:
                                e = math.exp(efk[c] * (q[c] - 1.0))
                                gv[c] = -gv[c] * fak[c] * efk[c] * e / ((1.0 + e) * (1.0 + e))
                    for c in range(L):
                        lk[c] = ak * lk[c] - gv[c] * q[c] / st[c]
                        gv[c] = gv[c] / st[c]
                xt = x[b, t]
                gxt = gx[b, t]
                for c in range(C):
                    if xt[c] > ml[c]:
                        gxt[c] += gv[c]
        mu[b] = lam[:, :C]
    for k in range(K):
        for c in range(C):
            ga[k] += gal[k, c]


def _triton():
    """The Triton twin (:mod:`rtamt.adaptation.adaptloop_grad_triton`), imported on first
    binding."""
    from . import adaptloop_grad_triton
    return (adaptloop_grad_triton.adaptloop_adjoint,)


class AdaptLoopGrad(StageGrad):
    """Learnable: ``th`` (K,), the log of each time constant relative to its designed
    value, ``tau = tau0 exp(th)`` (s; positive for every th; th = 0 is the design, bit for
    bit), the :class:`~rtamt.adaptation.adaptloop.AdaptLoopWeights`; the loop low-pass
    poles ``a = exp(-1 / (tau fs))``, ``b = 1 - a`` come from
    :func:`rtamt.adaptation.adaptloop.loop_lowpass` (Dau, Püschel & Kohlrausch 1996a,
    JASA 99, 3615); the adjoint is :func:`adaptloop_adjoint`."""

    kernels = Kernels(numba=(adaptloop_adjoint,), triton=_triton)

    def __init__(self, stage, coeffs, n_in):
        super().__init__(stage, coeffs, n_in)
        self.n_params = coeffs.tau.size

    def weights(self, th, xp=np):
        return adaptloop.AdaptLoopWeights(lift(self.coeffs0.tau, th, xp) * xp.exp(th))

    def coefficients(self, w, xp):
        return (adaptloop.loop_lowpass(w.tau, self.coeffs0.fs, xp),)

    def backward(self, coeffs, th, x, state, gy, mu):
        k = self.kern
        gx = k.zeros(x.shape, x)
        ga = k.zeros((coeffs.a.size,), x)
        k.adaptloop_adjoint(k.coef(coeffs.a), k.coef(coeffs.b), k.coef(coeffs.lanes),
                            bool(coeffs.limit_on), state["s"], x, gy, mu["s"], gx, ga)
        return gx, None if th is None else self.chain(th, ga)
