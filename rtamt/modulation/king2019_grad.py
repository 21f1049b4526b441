"""The gradient rule of :class:`rtamt.modulation.king2019.KingModFilterbank` and the
adjoint of its band-pass sections."""
from __future__ import annotations

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.grad import SEGMENT, StageGrad, lift
from ..engine.jit import JIT as _JIT
from ..engine.sos_grad import sos_back
from . import king2019
from .modfb_grad import PREFILTER_KERNELS, prefilter_adjoint, prefiltered


@njit(**_JIT)
def _king_span(sos, u, t0, t1, z, o, store):
    """King2019's band-passes (one DF-II transposed section each, the arithmetic of
    :func:`rtamt.engine.sos.sos_rows`) on one stream for ``t0 <= t < t1``: ``u``
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
    :func:`rtamt.engine.sos.sos_shared`), every one applied to every channel, output
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
    optional 150 Hz pre-filter, whose adjoint is
    :func:`rtamt.engine.sos_grad.sos_adjoint`, keeps ``z1``
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
                            gx[b, t, c] += sos_back(sj, mj, c, gy[b, t, j * C + c])
                        continue
                    ut = u[b, t]
                    oj = o[t - t0, j]
                    gj = gl[j]
                    for c in range(C):
                        m0 = mj[0, 0, c]
                        m1 = mj[0, 1, c]
                        gx[b, t, c] += sos_back(sj, mj, c, gy[b, t, j * C + c])
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


def _triton():
    """The Triton twin (:mod:`rtamt.modulation.king2019_grad_triton`), imported on first
    binding."""
    from . import king2019_grad_triton
    return (king2019_grad_triton.king_bank_adjoint,)


class KingModFilterbankGrad(StageGrad):
    """:class:`rtamt.modulation.king2019.KingModFilterbank` (King, Varnet & Lorenzi 2019,
    JASA 145, 2277-2293): the real Butterworth band-pass of every modulation filter on
    every channel, after the optional 150 Hz low-pass (fixed).  Adjoint:
    :func:`king_bank_adjoint` (linear: the input and state gradients need no forward
    trajectory; the coefficient gradients recompute the filter outputs).

    Learnable: ``th = [th_m (M,), log(Q / Q0)]``, the
    :class:`~rtamt.modulation.king2019.KingModFilterbankWeights`: each modulation
    filter's centre frequency and the bank's quality factor (shared by all filters, as in
    the paper).  ``Q = Q0 exp(th_Q) > 0``.  The centre frequencies are kept below the one
    whose upper -3 dB edge reaches ``fs / 2`` (the edges are linear in ``mfc``: ``f_hi =
    mfc k(Q)``): with ``a(Q) = mfc0 k(Q) / (fs / 2)``, the upper edge the designed centre
    frequency would have at ``Q``, relative to the Nyquist frequency,

        ``mfc = mfc0 / (exp(-th_m) (1 - a(Q0)) + a(Q))``,

    i.e. ``1 / mfc = exp(-th_m) / u0 + k(Q) / (fs / 2)`` with ``1 / u0 = 1 / mfc0 -
    k(Q0) / (fs / 2)``: ``mfc ~ mfc0 exp(th_m)`` for filters far below Nyquist, and the
    upper edge ``fs/2 a(Q) / (exp(-th_m) (1 - a(Q0)) + a(Q))`` stays below ``fs / 2`` for
    every ``th`` (the lower edge stays above 0).  At ``th = 0`` the denominator is
    ``(1 - a0) + a0``, exactly 1 in floating point, so ``mfc = mfc0`` and the filters are
    the design, bit for bit.

    The forward coefficients are designed by :func:`rtamt.modulation.king2019.design`
    (``scipy.signal.butter``); the chain rule to ``th`` runs torch's autograd through
    :func:`~rtamt.modulation.king2019.band_edges` and
    :func:`~rtamt.modulation.king2019.bandpass_sos`, the same design in closed form."""

    kernels = Kernels(numba=(king_bank_adjoint,), triton=_triton, uses=PREFILTER_KERNELS)

    def __init__(self, stage, coeffs, n_in):
        super().__init__(stage, coeffs, n_in)
        self.mfc0, self.Q0 = coeffs.mfc.copy(), float(stage.params.qfactor)
        self.n_params = self.mfc0.size + 1
        self.fn = coeffs.fs / 2
        self.a0 = king2019.band_edges(self.mfc0, self.Q0)[:, 1] / self.fn

    def weights(self, th, xp=np):
        """``mfc`` (M,) and ``Q`` for ``th`` (numpy float64, or a torch tensor with
        ``xp=torch``); ``a(Q)`` is the upper edge of ``band_edges`` at ``mfc0``."""
        M = self.mfc0.size
        mfc0, one_minus = lift(self.mfc0, th, xp), lift(1 - self.a0, th, xp)
        Q = self.Q0 * xp.exp(th[M])
        a = king2019.band_edges(mfc0, Q, xp)[:, 1] / self.fn
        return king2019.KingModFilterbankWeights(mfc0 / (xp.exp(-th[:M]) * one_minus + a), Q)

    def coefficients(self, w, xp):
        sos = king2019.bandpass_sos(king2019.band_edges(w.mfc, w.Q, xp), self.coeffs0.fs, xp)
        return (sos[:, [0, 1, 2, 4, 5]],)

    def backward(self, coeffs, th, x, state, gy, mu):
        want = th is not None
        k = self.kern
        gu = k.zeros(x.shape, x)
        u = prefiltered(k, coeffs, x, state) if want else x   # read only with want
        gc = k.zeros((coeffs.mfc.size, 5), x)
        k.king_bank_adjoint(k.coef(coeffs.sos), gy, mu["bp"], gu, want, u, state["bp"], gc)
        gx = prefilter_adjoint(k, coeffs, x, gu, mu)
        return gx, self.chain(th, gc) if want else None
