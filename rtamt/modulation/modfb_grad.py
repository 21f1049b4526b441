"""The gradient rule of :class:`rtamt.modulation.modfb.ModFilterbank` and the adjoints of
its band-pass kernels (:func:`rtamt.modulation.modfb.modfb_efilt`,
:func:`rtamt.modulation.modfb.cplx_biquad_bank`); the pre-filter of every
:class:`~rtamt.modulation.modfb.PackedFilterbank` (:func:`prefiltered`,
:func:`prefilter_adjoint`)."""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..engine.backend import Kernels, copy_leaf
from ..engine.grad import SEGMENT, StageGrad, lift
from ..engine.jit import JIT as _JIT
from ..engine.sos import SOS
from ..engine.sos_grad import SOS_ADJOINT
from . import modfb


def prefiltered(k, coeffs, x, state):
    """A modulation bank's filter input, recomputed: ``x`` through the optional low-pass
    before the bank (``coeffs.pre_sos``) from its incoming state ``state["pre"]`` (not
    written; a copy is advanced), else ``x`` itself.  ``k``: the rule's bound kernel set,
    which holds the shared SOS cascade ``sos_shared`` (numba, or its Triton twin on
    ``x``'s device)."""
    if coeffs.pre_sos is None:
        return x
    u = k.empty(x.shape, x)
    k.sos_shared(k.coef(coeffs.pre_sos), False, copy_leaf(state["pre"]), x, u, 0)
    return u


def prefilter_adjoint(k, coeffs, x, gu, mu):
    """The input gradient of a modulation bank from that of its filters' input ``gu``:
    through the optional low-pass before the bank (``coeffs.pre_sos``, state ``pre``,
    whose gradient ``mu["pre"]`` becomes that of the incoming state), else ``gu``.
    ``k``: the rule's bound kernel set, which holds ``sos_adjoint``."""
    if coeffs.pre_sos is None:
        return gu
    gx = k.zeros(x.shape, x)
    k.sos_adjoint(k.coef(coeffs.pre_sos), False, x, gu, mu["pre"], gx)
    return gx


#: what the modulation banks' rules use besides their own adjoints: the shared SOS
#: cascade (the pre-filter, recomputed) and its adjoint (the low-pass and pre-filter)
PREFILTER_KERNELS = (SOS, SOS_ADJOINT)


@njit(**_JIT)
def _efilt_span(p_r, p_i, g, u, t0, t1, ar, ai, wr, wi, store):
    """``w <- p w + g u[t]`` for ``t0 <= t < t1`` from ``w = ar + i ai``; with ``store``,
    ``w[t]`` goes to ``wr[t - t0]``, ``wi[t - t0]``.  Returns the last ``w``."""
    for t in range(t0, t1):
        v = g * u[t]
        ar, ai = p_r * ar - p_i * ai + v, p_r * ai + p_i * ar
        if store:
            wr[t - t0] = ar
            wi[t - t0] = ai
    return ar, ai


@njit(**_JIT)
def efilt_adjoint(coef, nreal, ch, x, st, gy, mu, gx, want, gc):
    """Adjoint of the complex one-pole modulation filters of
    :func:`rtamt.modulation.modfb.cplx_onepole_bank` (Dau et al. 1997a, JASA 102, 2892:
    ``w[t] = p w[t-1] + g u[t]``, output ``sc Re w`` for filters ``f < nreal``, else
    ``sc |w|``).

    Backwards: ``lam = mu + gout`` with ``gout = sc gy`` (real part) for a real-part
    filter and ``sc gy w / |w|`` for an envelope filter (0 where ``w = 0``);
    ``gu[t] += g Re lam``; ``mu <- conj(p) lam``.  The envelope filters need ``w[t]``:
    the forward recursion is rerun from the incoming state ``st``, checkpointed every
    :data:`SEGMENT` samples.  With ``want``, the gradient of the coefficients too
    (every filter's ``w`` is then recomputed): ``dL/dRe p += lr Re w[t-1] + li Im w[t-1]``,
    ``dL/dIm p += li Re w[t-1] - lr Im w[t-1]``, ``dL/dg += lr u[t]``.

    coef : (4, F) rows Re p, Im p, g, sc (``ModFilterbankCoeffs.bp_coef``);
    ch   : (F,) input channel of each filter; x : (B, T, C) the bank's input;
    st   : (B, 2, F) incoming state; gy : (B, T, F) gradient of the filters' outputs;
    mu   : (B, 2, F) in: gradient of the outgoing state; out: of the incoming one;
    gx   : (B, T, C) input gradient (added to);
    want : bool; gc : (3, F) gradients of Re p, Im p and g (added to, with want).
    """
    B, T, C = x.shape
    F = coef.shape[1]
    nseg = (T + SEGMENT - 1) // SEGMENT
    ck = np.empty((nseg, 2, F))
    wr = np.empty((SEGMENT, F))
    wi = np.empty((SEGMENT, F))
    first = 0 if want else nreal                     # filters whose w is needed
    for b in range(B):
        for f in range(F):
            ar, ai = st[b, 0, f], st[b, 1, f]
            for k in range(nseg):                    # checkpoints of the trajectory
                ck[k, 0, f], ck[k, 1, f] = ar, ai
                ar, ai = _efilt_span(coef[0, f], coef[1, f], coef[2, f], x[b, :, ch[f]],
                                     k * SEGMENT, min(T, (k + 1) * SEGMENT), ar, ai,
                                     wr[:, f], wi[:, f], False)
        for k in range(nseg - 1, -1, -1):
            t0 = k * SEGMENT
            t1 = min(T, t0 + SEGMENT)
            for f in range(first, F):                # w of the filters that need it
                _efilt_span(coef[0, f], coef[1, f], coef[2, f], x[b, :, ch[f]], t0, t1,
                            ck[k, 0, f], ck[k, 1, f], wr[:, f], wi[:, f], True)
            for f in range(F):
                p_r = coef[0, f]
                p_i = coef[1, f]
                g = coef[2, f]
                sc = coef[3, f]
                cf = ch[f]
                m_r = mu[b, 0, f]
                m_i = mu[b, 1, f]
                for t in range(t1 - 1, t0 - 1, -1):
                    gyv = sc * gy[b, t, f]
                    if f < nreal:
                        lr = m_r + gyv
                        li = m_i
                    else:
                        vr = wr[t - t0, f]
                        vi = wi[t - t0, f]
                        mag = math.sqrt(vr * vr + vi * vi)
                        if mag > 0.0:
                            lr = m_r + gyv * vr / mag
                            li = m_i + gyv * vi / mag
                        else:
                            lr = m_r
                            li = m_i
                    gx[b, t, cf] += g * lr
                    if want:
                        if t > t0:
                            qr = wr[t - t0 - 1, f]
                            qi = wi[t - t0 - 1, f]
                        else:
                            qr = ck[k, 0, f]
                            qi = ck[k, 1, f]
                        gc[0, f] += lr * qr + li * qi
                        gc[1, f] += li * qr - lr * qi
                        gc[2, f] += lr * x[b, t, cf]
                    m_r = p_r * lr + p_i * li
                    m_i = p_r * li - p_i * lr
                mu[b, 0, f] = m_r
                mu[b, 1, f] = m_i


@njit(**_JIT)
def _biquad_span(bc, ac, u, t0, t1, z, orr, oi, store):
    """The complex DF-II transposed biquad of :func:`rtamt.modulation.modfb.cplx_biquad_bank`
    on real input ``u[t]``, ``t0 <= t < t1``, from memories ``z`` (2, 2) [index,
    re/im], advanced in place; with ``store``, the output ``o[t]`` goes to
    ``orr[t - t0]``, ``oi[t - t0]``."""
    b0 = complex(bc[0, 0], bc[0, 1])
    b1 = complex(bc[1, 0], bc[1, 1])
    b2 = complex(bc[2, 0], bc[2, 1])
    a1 = complex(ac[1, 0], ac[1, 1])
    a2 = complex(ac[2, 0], ac[2, 1])
    z0 = complex(z[0, 0], z[0, 1])
    z1 = complex(z[1, 0], z[1, 1])
    for t in range(t0, t1):
        v = u[t]
        o = b0 * v + z0
        z0 = b1 * v - a1 * o + z1
        z1 = b2 * v - a2 * o
        if store:
            orr[t - t0] = o.real
            oi[t - t0] = o.imag
    z[0, 0], z[0, 1], z[1, 0], z[1, 1] = z0.real, z0.imag, z1.real, z1.imag


@njit(**_JIT)
def biquad_bank_adjoint(ch, nreal, bcoef, acoef, scale, x, st, gy, mu, gx):
    """Adjoint of :func:`rtamt.modulation.modfb.cplx_biquad_bank`, the frequency-shifted
    Butterworth modulation filters (rtamt's ``filter_type='butterworth'``, an rtamt
    extension with no paper of its own, :mod:`rtamt.modulation.modfb`: a 2nd-order
    Butterworth low-pass moved to ``mfc`` by the frequency-shift theorem,
    ``H(z e^{-i w0})``, ``w0 = 2 pi mfc / fs``; output ``sc Re o`` for ``f < nreal``,
    else ``sc |o|``).

    Forward, complex coefficients, real input ``v``: ``o = b0 v + z0``,
    ``z0' = b1 v - a1 o + z1``, ``z1' = b2 v - a2 o``.  Backwards (the transpose of a
    multiplication by ``c`` is one by ``conj(c)``), with ``m0``, ``m1`` the gradients
    of ``z0'``, ``z1'``: ``go = gout - conj(a1) m0 - conj(a2) m1`` (``gout = sc gy``, or
    ``sc gy o / |o|`` for an envelope filter, 0 where ``o = 0``),
    ``gv = Re(conj(b0) go + conj(b1) m0 + conj(b2) m1)``, then ``m1 <- m0``,
    ``m0 <- go``.  The envelope filters' ``o`` is recomputed from the incoming state,
    checkpointed every :data:`SEGMENT` samples.

    ch : (F,); bcoef, acoef : (F, 3, 2); scale : (F,); x : (B, T, C) the bank's input;
    st : (B, F, 2, 2) incoming state; gy : (B, T, F) gradient of the filters' outputs;
    mu : (B, F, 2, 2) in: gradient of the outgoing state; out: of the incoming one;
    gx : (B, T, C) (added to).
    """
    B, T, C = x.shape
    F = ch.shape[0]
    nseg = (T + SEGMENT - 1) // SEGMENT
    ck = np.empty((nseg, 2, 2))
    orr = np.empty(SEGMENT)
    oi = np.empty(SEGMENT)
    z = np.empty((2, 2))
    for b in range(B):
        for f in range(F):
            bc = bcoef[f]
            ac = acoef[f]
            u = x[b, :, ch[f]]
            env = f >= nreal
            if env:
                z[:] = st[b, f]
                for k in range(nseg):
                    ck[k] = z
                    _biquad_span(bc, ac, u, k * SEGMENT, min(T, (k + 1) * SEGMENT), z, orr,
                                 oi, False)
            m = mu[b, f]
            m0r, m0i, m1r, m1i = m[0, 0], m[0, 1], m[1, 0], m[1, 1]
            for k in range(nseg - 1, -1, -1):
                t0 = k * SEGMENT
                t1 = min(T, t0 + SEGMENT)
                if env:
                    z[:] = ck[k]
                    _biquad_span(bc, ac, u, t0, t1, z, orr, oi, True)
                for t in range(t1 - 1, t0 - 1, -1):
                    g = scale[f] * gy[b, t, f]
                    gr = g
                    gi = 0.0
                    if env:
                        vr = orr[t - t0]
                        vi = oi[t - t0]
                        mag = math.sqrt(vr * vr + vi * vi)
                        if mag > 0.0:
                            gr = g * vr / mag
                            gi = g * vi / mag
                        else:
                            gr = 0.0
                    gor = (gr - (ac[1, 0] * m0r + ac[1, 1] * m0i)
                           - (ac[2, 0] * m1r + ac[2, 1] * m1i))
                    goi = (gi - (ac[1, 0] * m0i - ac[1, 1] * m0r)
                           - (ac[2, 0] * m1i - ac[2, 1] * m1r))
                    gx[b, t, ch[f]] += (bc[0, 0] * gor + bc[0, 1] * goi
                                        + bc[1, 0] * m0r + bc[1, 1] * m0i
                                        + bc[2, 0] * m1r + bc[2, 1] * m1i)
                    m1r, m1i = m0r, m0i
                    m0r, m0i = gor, goi
            m[0, 0], m[0, 1], m[1, 0], m[1, 1] = m0r, m0i, m1r, m1i


def _triton():
    """The Triton twins (:mod:`rtamt.modulation.modfb_grad_triton`), imported on first
    binding."""
    from . import modfb_grad_triton
    return (modfb_grad_triton.efilt_adjoint, modfb_grad_triton.biquad_bank_adjoint)


class ModFilterbankGrad(StageGrad):
    """The modulation bank: low-pass, optional pre-filter, and the ``efilt`` complex
    one-poles (Dau, Kollmeier & Kohlrausch 1997a, JASA 102, 2892; AMT 0.9.10
    ``modfilterbank``) or the frequency-shifted Butterworth biquads (an rtamt extension,
    :mod:`rtamt.modulation.modfb`).

    Learnable: ``th = [log(mfc / mfc0) (Fb,), log(Q / Q0)]``, the
    :class:`~rtamt.modulation.modfb.ModFilterbankWeights`: the centre frequency (Hz) of
    every band-pass filter (packed order, ``coeffs.filter_mfc[C:]``) and the quality
    factor.  The filters keep their design's structure: those designed below 10 Hz keep
    their 5 Hz bandwidth (``Q`` does not act on them), the others have bandwidth
    ``bw = mfc / Q`` (Hz); the pole ``e0 exp(i 2 pi mfc / fs)``, ``e0 = exp(-pi bw /
    fs)`` (:func:`rtamt.modulation.modfb.bandpass_poles`,
    :func:`~rtamt.modulation.modfb.efilt_coefficients`), has radius below 1 for every
    ``th``; real-part / envelope outputs stay as designed.  The 2.5 Hz low-pass and the
    pre-filter are fixed.  The Butterworth bank has no learnable parameters (input and
    state gradients only)."""

    kernels = Kernels(numba=(efilt_adjoint, biquad_bank_adjoint), triton=_triton,
                      uses=PREFILTER_KERNELS)

    def __init__(self, stage, coeffs, n_in):
        super().__init__(stage, coeffs, n_in)
        C = coeffs.fc.size
        self.mfc0 = coeffs.filter_mfc[C:].copy()
        self.fixed_bw = self.mfc0 < 10.0
        self.n_params = self.mfc0.size + 1 if coeffs.filter_type == "efilt" else 0
        self.Q0 = float(stage.params.Q)

    def weights(self, th, xp=np):
        Fb = self.mfc0.size
        return modfb.ModFilterbankWeights(lift(self.mfc0, th, xp) * xp.exp(th[:Fb]),
                                          self.Q0 * xp.exp(th[Fb]))

    def coefficients(self, w, xp):
        w0, _, e0 = modfb.bandpass_poles(w, lift(self.fixed_bw, w.mfc, xp),
                                         self.coeffs0.fs, xp)
        return modfb.efilt_coefficients(w0, e0, xp)

    def backward(self, coeffs, th, x, state, gy, mu):
        C, Fb = coeffs.fc.size, coeffs.bp_channel.size
        want = th is not None
        k = self.kern
        u = prefiltered(k, coeffs, x, state)
        gu = k.zeros(x.shape, x)
        k.sos_adjoint(k.coef(coeffs.lp_sos), False, u, gy[:, :, :C], mu["lp"], gu)
        gc = k.zeros((3, Fb), x)
        if Fb and coeffs.filter_type == "butterworth":
            k.biquad_bank_adjoint(k.coef(coeffs.bp_channel), coeffs.bp_nreal,
                                  k.coef(coeffs.bp_b), k.coef(coeffs.bp_a),
                                  k.coef(coeffs.bp_scale), u, state["bp"], gy[:, :, C:],
                                  mu["bp"], gu)
        elif Fb:
            k.efilt_adjoint(k.coef(coeffs.bp_coef), coeffs.bp_nreal,
                            k.coef(coeffs.bp_channel), u, state["bp"], gy[:, :, C:],
                            mu["bp"], gu, want, gc)
        gx = prefilter_adjoint(k, coeffs, x, gu, mu)
        return gx, self.chain(th, *gc) if want else None
