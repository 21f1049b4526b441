"""The gradient rule of :class:`rtamt.engine.stage.SharedSOSStage` (the IHC envelope,
King2019's adaptation high-pass) and the adjoint of its kernel
:func:`rtamt.engine.sos.sos_shared`, which the modulation banks' rules use for their
low-pass and pre-filter sections too."""
from __future__ import annotations

from numba import njit

from .backend import Kernels
from .grad import StageGrad
from .jit import INLINE as _INLINE
from .jit import JIT as _JIT


@njit(**_INLINE)
def sos_back(sos, m, c, g):
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
    """Adjoint of :func:`rtamt.engine.sos.sos_shared` (DF-II transposed sections,
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
                g = sos_back(sos, m, c, gy[b, t, c])
                if rectify and not x[b, t, c] > 0.0:
                    g = 0.0
                gx[b, t, c] += g


def _triton():
    """The Triton twin (:mod:`rtamt.engine.sos_grad_triton`), imported on first binding."""
    from . import sos_grad_triton
    return (sos_grad_triton.sos_adjoint,)


#: the adjoint of the shared SOS cascade: :func:`sos_adjoint` and its Triton twin
SOS_ADJOINT = Kernels(numba=(sos_adjoint,), triton=_triton)


class SOSGrad(StageGrad):
    """Stages of :class:`rtamt.engine.stage.SharedSOSStage`: the IHC envelope, half-wave
    rectification then Butterworth low-pass sections (Dau et al. 1996a, JASA 99, 3615;
    presets in :mod:`rtamt.ihc.envelope`), and the Butterworth high-pass that stands in
    for adaptation in King, Varnet & Lorenzi (2019, JASA 145, 2277-2293;
    :class:`rtamt.adaptation.highpass.AdaptHighpass`), without the rectifier (the stage
    class's ``rectify``).  No learnable parameters."""

    kernels = SOS_ADJOINT

    def backward(self, coeffs, th, x, state, gy, mu):
        k = self.kern
        gx = k.zeros(x.shape, x)
        k.sos_adjoint(k.coef(coeffs.sos), bool(type(self.stage).rectify), x, gy, mu["zi"],
                      gx)
        return gx, None
