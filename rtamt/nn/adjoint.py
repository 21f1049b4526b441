"""Adjoint (reverse-time) recursions of the differentiable rtamt stages (numba).

Each forward recursion of rtamt has one source, in :mod:`rtamt.engine.kernels`; the
layers of :mod:`rtamt.nn` run those kernels unchanged for their forward pass.  This
module holds the matching *adjoint* recursions: given the gradient of a loss with respect
to a block's output ``gy`` and to the state the block leaves behind (``mu``, the
"terminal adjoint"), they run backwards in time over the block and return the gradient
with respect to the block's input and to the state it started from.  Chained over blocks
(the state's gradient of block ``n + 1`` is the terminal adjoint of block ``n``) they
give exactly the gradient of one call on the concatenated input.

Notation: a recursion ``s[t] = A s[t-1] + B u[t]``, ``y[t] = C s[t] + D u[t]`` has the
adjoint ``lam[t] = C^T gy[t] + A^T lam[t+1]``, ``gu[t] = B^T lam[t] + D^T gy[t]``, run
from ``t = T-1`` down to 0 with ``lam[T] = mu``; the gradient of the incoming state is
``A^T lam[0]`` (reverse-mode differentiation of a recursion; Griewank & Walther,
*Evaluating Derivatives*, 2nd ed., SIAM 2008).  Nonlinear recursions are linearised along
the forward trajectory, which is recomputed from the saved block input and incoming state
(checkpointed every :data:`SEGMENT` samples, so the memory is O(T/SEGMENT + SEGMENT)
states per stream; checkpointing as in the same book).

Every array is time-major ``(B, T, C)`` as in :mod:`rtamt.engine.kernels`; the
gradients are computed in float64.  Kernels *add* into ``gx`` (so that the gradients
of several consumers of one input accumulate) and replace ``mu`` by the gradient of the
incoming state.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..engine.fastexp import exp_f64_short
from ..engine.jit import INLINE as _INLINE
from ..engine.jit import JIT as _JIT

#: samples between checkpoints of the recomputed forward trajectory
SEGMENT = 512


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
    """Adjoint of :func:`rtamt.engine.kernels.gammatone4` (Hohmann 2002, Acta Acustica
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


@njit(**_INLINE)
def _sos_back(sos, m, c, g):
    """One sample of the adjoint of a DF-II transposed section cascade on channel ``c``:
    ``g`` is the gradient of the cascade's output, ``m`` (S, 2, C) the gradients of the
    section memories after the sample (replaced by those before it); returns the gradient
    of the cascade's input.  The derivation is in :func:`sos_adjoint`."""
    for s_ in range(sos.shape[0] - 1, -1, -1):
        b0 = sos[s_, 0]
        b1 = sos[s_, 1]
        b2 = sos[s_, 2]
        a1 = sos[s_, 4]
        a2 = sos[s_, 5]
        m0 = m[s_, 0, c]
        m1 = m[s_, 1, c]
        go = g - a1 * m0 - a2 * m1
        g = b0 * go + b1 * m0 + b2 * m1
        m[s_, 0, c] = go
        if b2 == 0.0 and a2 == 0.0:
            m[s_, 1, c] = m0 + m1
        else:
            m[s_, 1, c] = m0
    return g


@njit(**_JIT)
def sos_adjoint(sos, rectify, x, gy, mu, gx):
    """Adjoint of :func:`rtamt.engine.kernels.sos_shared` (DF-II transposed sections,
    Oppenheim & Schafer, *Discrete-Time Signal Processing*, 3rd ed., ch. 6, the difference
    equations of ``scipy.signal.sosfilt``; optionally after half-wave rectification).

    One section, forward: ``o = b0 v + z0``, ``z0' = b1 v - a1 o + z1``,
    ``z1' = b2 v - a2 o``.  Backwards, with ``mu0``, ``mu1`` the gradients of ``z0'``,
    ``z1'`` and ``g`` that of ``o``: ``go = g - a1 mu0 - a2 mu1``,
    ``gv = b0 go + b1 mu0 + b2 mu1``, then ``mu0 <- go``, ``mu1 <- mu0``.  The forward
    kernel leaves a first-order section's second memory unchanged (``z1' = z1``, always
    0 in a stream it started), so there ``mu1 <- mu0 + mu1``.  Sections run last to first;
    the rectifier passes the gradient where ``x > 0``.

    sos : (S, 6); x : (B, T, C) the stage input (read only with ``rectify``);
    gy  : (B, T, C) output gradient (any strides: a column slice of a packed output);
    mu  : (B, S, 2, C) in: gradient of the outgoing state ``zi``; out: of the incoming one;
    gx  : (B, T, C) input gradient (added to).
    """
    B, T, C = gy.shape
    for b in range(B):
        m = mu[b]
        for t in range(T - 1, -1, -1):
            for c in range(C):
                g = _sos_back(sos, m, c, gy[b, t, c])
                if rectify and not x[b, t, c] > 0.0:
                    g = 0.0
                gx[b, t, c] += g


@njit(**_JIT)
def _king_span(sos, u, t0, t1, z, o, store):
    """King2019's band-passes (one DF-II transposed section each, the arithmetic of
    :func:`rtamt.engine.kernels.sos_rows`) on one stream for ``t0 <= t < t1``: ``u``
    (T, C) the bank's input, ``z`` (M, 2, C) the memories, advanced in place; with
    ``store``, filter ``j``'s output on channel ``c`` at ``t`` goes to
    ``o[t - t0, j, c]``."""
    M = sos.shape[0]
    C = u.shape[1]
    for t in range(t0, t1):
        ut = u[t]
        for j in range(M):
            b0 = sos[j, 0, 0]
            b1 = sos[j, 0, 1]
            b2 = sos[j, 0, 2]
            a1 = sos[j, 0, 4]
            a2 = sos[j, 0, 5]
            z0 = z[j, 0]
            z1 = z[j, 1]
            for c in range(C):
                v = ut[c]
                out = b0 * v + z0[c]
                z0[c] = b1 * v - a1 * out + z1[c]
                z1[c] = b2 * v - a2 * out
                if store:
                    o[t - t0, j, c] = out


@njit(**_JIT)
def king_bank_adjoint(sos, gy, mu, gx, want, u, st, gc):
    """Adjoint of the King, Varnet & Lorenzi (2019, JASA 145, 2277-2293) modulation
    filterbank, :class:`rtamt.modulation.king2019.KingModFilterbank`: ``M`` real
    2nd-order Butterworth band-passes (one DF-II transposed section each, run by
    :func:`rtamt.engine.kernels.sos_shared`), every one applied to every channel, output
    column ``f = m C + c``.

    Derivation.  One section, per channel, in state-space form with memories
    ``s[t] = (z0[t], z1[t])`` after sample ``t`` and input ``v``::

        o[t]  = b0 v[t] + z0[t-1]
        z0[t] = b1 v[t] - a1 o[t] + z1[t-1]
        z1[t] = b2 v[t] - a2 o[t]

    For a loss ``L`` with ``g[t] = dL/do[t]`` (the output gradient) and ``m[t] =
    (dL/dz0[t], dL/dz1[t])`` (the memories' gradient, through the later samples),
    ``o[t]`` reaches ``L`` directly and through ``z0[t]``, ``z1[t]``; ``z0[t-1]`` only
    through ``o[t]``, ``z1[t-1]`` only through ``z0[t]``.  So, from ``t = T-1`` down to 0,
    starting from ``m[T-1] = mu`` (the gradient of the block's outgoing state)::

        go[t]  = g[t] - a1 m0[t] - a2 m1[t]           (total gradient of o[t])
        gv[t]  = b0 go[t] + b1 m0[t] + b2 m1[t]        (gradient of v[t])
        m[t-1] = (go[t], m0[t])

    Eliminating ``m`` (``m0[t] = go[t+1]``, ``m1[t] = go[t+2]``):
    ``go[t] = g[t] - a1 go[t+1] - a2 go[t+2]`` and
    ``gv[t] = b0 go[t] + b1 go[t+1] + b2 go[t+2]``, i.e. ``1 / A(z)`` then ``B(z)`` applied
    in reversed time: the input gradient is the output gradient filtered by the same
    transfer function ``H = B / A`` run backwards (the recursion is the direct form II,
    the transpose of the forward DF-II transposed form; LTI, so no forward trajectory is
    needed).  ``mu`` is the initial memory of that reversed pass, and its final memory
    ``m[-1] = (go[0], m0[0])`` is the gradient of the block's incoming state.  Each input
    channel feeds all ``M`` filters, so its gradient is the sum over ``m`` of those
    reversed filterings of columns ``m C + c``.  (A first-order section, e.g. the
    optional 150 Hz pre-filter, whose adjoint is :func:`sos_adjoint`, keeps ``z1``
    unchanged in the forward kernel, so there ``m1[t-1] = m0[t] + m1[t]``.)

    Coefficient gradients (with ``want``).  Each coefficient enters the three equations
    above once per sample, multiplied by ``v[t]`` or ``o[t]``, so, with ``go``, ``m0``,
    ``m1`` as above at sample ``t``::

        dL/db0 += go[t] v[t]     dL/db1 += m0[t] v[t]     dL/db2 += m1[t] v[t]
        dL/da1 -= m0[t] o[t]     dL/da2 -= m1[t] o[t]

    summed over samples, channels and streams.  ``o`` is recomputed from the incoming
    state ``st`` and the bank's input ``u`` (checkpointed every :data:`SEGMENT` samples,
    all filters and channels of a stream at once).  The input and state gradients are
    the same operations in the same order with and without ``want``.

    sos  : (M, 1, 6) the filters' sections (``KingModFilterbankCoeffs.sos``);
    gy   : (B, T, M*C) gradient of the packed output (any strides);
    mu   : (M, B, 1, 2, C) in: gradient of the outgoing state ``bp``; out: of the incoming;
    gx   : (B, T, C) input gradient of the bank (added to);
    want : bool; u : (B, T, C) the bank's input (after the pre-filter);
    st   : (M, B, 1, 2, C) the incoming state ``bp`` (``u``, ``st`` read only with want);
    gc   : (M, 5) gradients of ``b0, b1, b2, a1, a2`` of each filter (added to, with want).
    """
    M = sos.shape[0]
    B, T, C = gx.shape
    seg = SEGMENT if want else max(T, 1)
    nseg = (T + seg - 1) // seg
    ck = np.empty((nseg, M, 2, C))
    o = np.empty((seg if want else 0, M, C))
    z = np.empty((M, 2, C))
    gl = np.zeros((M, 5, C))                         # per channel, summed at the end
    for b in range(B):
        if want:                                     # checkpoints of the trajectory
            for j in range(M):
                z[j] = st[j, b, 0]
            for k in range(nseg):
                ck[k] = z
                _king_span(sos, u[b], k * seg, min(T, (k + 1) * seg), z, o, False)
        for k in range(nseg - 1, -1, -1):
            t0 = k * seg
            t1 = min(T, t0 + seg)
            if want:
                z[:] = ck[k]
                _king_span(sos, u[b], t0, t1, z, o, True)
            for t in range(t1 - 1, t0 - 1, -1):
                for j in range(M):
                    sj = sos[j]
                    mj = mu[j, b]
                    if not want:
                        for c in range(C):
                            gx[b, t, c] += _sos_back(sj, mj, c, gy[b, t, j * C + c])
                        continue
                    ut = u[b, t]
                    oj = o[t - t0, j]
                    gj = gl[j]
                    for c in range(C):
                        m0 = mj[0, 0, c]
                        m1 = mj[0, 1, c]
                        gx[b, t, c] += _sos_back(sj, mj, c, gy[b, t, j * C + c])
                        v = ut[c]
                        gj[0, c] += mj[0, 0, c] * v
                        gj[1, c] += m0 * v
                        gj[2, c] += m1 * v
                        gj[3, c] -= m0 * oj[c]
                        gj[4, c] -= m1 * oj[c]
    for j in range(M):
        for i in range(5):
            for c in range(C):
                gc[j, i] += gl[j, i, c]


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
    :func:`rtamt.engine.kernels.cplx_onepole_bank` (Dau et al. 1997a, JASA 102, 2892:
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
    """The complex DF-II transposed biquad of :func:`rtamt.engine.kernels.cplx_biquad_bank`
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
    """Adjoint of :func:`rtamt.engine.kernels.cplx_biquad_bank`, the frequency-shifted
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


@njit(**_JIT)
def _adapt_span(a, bcoef, lanes, limit_on, s, x, t0, t1, w, traj, tq, tv, store):
    """The adaptation loops of :func:`rtamt.engine.kernels.adaptloop` (the same
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
    """Adjoint of :func:`rtamt.engine.kernels.adaptloop`, the nonlinear adaptation loops
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


@njit(**_JIT)
def fir_adjoint(h, gy, mu, gx):
    """Adjoint of :func:`rtamt.ear.fir.fir_tm` (direct-form FIR with an input history).

    Forward, per stream and channel, on ``e = [hist, x]`` (``M = N - 1`` history samples,
    then the block): ``y[t] = sum_k h[k] e[M + t - k]``; the outgoing history is the last
    ``M`` samples of ``e``.  Backwards: ``ge[M + t - k] += h[k] gy[t]`` (a correlation of
    ``gy`` with the taps), plus ``mu`` on the last ``M`` samples of ``e``; the first ``M``
    values of ``ge`` are the gradient of the incoming history, the rest that of ``x``.

    h : (N,); gy : (B, T, C); mu : (B, M, C) in: gradient of the outgoing history, out:
    of the incoming one; gx : (B, T, C) (added to).
    """
    B, T, C = gy.shape
    N = h.shape[0]
    M = N - 1
    ge = np.empty(M + T)
    for b in range(B):
        for c in range(C):
            ge[:] = 0.0
            for t in range(T):
                g = gy[b, t, c]
                for k in range(N):
                    ge[M + t - k] += h[k] * g
            for i in range(M):
                ge[T + i] += mu[b, i, c]
            for i in range(M):
                mu[b, i, c] = ge[i]
            for t in range(T):
                gx[b, t, c] += ge[M + t]
