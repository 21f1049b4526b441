"""The real second-order-section cascade shared by several stages, one kernel pair: the
numba kernel here (:func:`sos_shared`), its Triton twin in :mod:`rtamt.engine.sos_triton`,
and the kernel set that declares both (:data:`SOS`).

Stages that run it: :class:`SharedSOSStage` (the IHC envelope
:class:`rtamt.ihc.envelope.IHCEnvelope`, the adaptation high-pass
:class:`rtamt.adaptation.highpass.AdaptHighpass`), and the modulation banks
(:mod:`rtamt.modulation.modfb`: the low-passes and the pre-filter; King's band-passes,
:mod:`rtamt.modulation.king2019`), which declare ``uses=(SOS,)``.  The gradient rule of
:class:`SharedSOSStage` and the adjoint of the cascade are in :mod:`rtamt.engine.sos_grad`.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .backend import Kernels, kernel_method
from .jit import JIT as _JIT
from .stage import Stage

__all__ = ["sos_shared", "sos_rows", "SOS", "SharedSOSStage"]


@njit(**_JIT)
def sos_shared(sos, rectify, zi, x, y, yoff):
    """Real second-order-section cascade shared by all channels (DF-II transposed).

    Same difference equations as ``scipy.signal.sosfilt`` (Oppenheim & Schafer,
    *Discrete-Time Signal Processing*, 3rd ed., sec. 6.5), optionally after
    half-wave rectification ``max(x, 0)``.

    sos     : (S, 6)       sections [b0 b1 b2 a0 a1 a2], a0 == 1.
    rectify : bool
    zi      : (B, S, 2, C) section states, advanced in place.
    x       : (B, T, C)    input.
    y       : (B, T, Ftot) output; channel c -> column ``yoff + c`` (Ftot = C, yoff = 0
              for a plain (B, T, C) output; y may then be x itself).

    First-order sections (``b2 = a2 = 0``, e.g. the IHC low-passes) take a shorter loop
    that leaves their (always zero) second memory alone.
    """
    for b in range(x.shape[0]):
        sos_rows(sos, rectify, zi[b], x[b], y[b], yoff)


@njit(**_JIT)
def sos_rows(sos, rectify, zi, x, y, yoff):
    """:func:`sos_shared` for one stream: ``zi`` (S, 2, C), ``x`` (T, C), ``y`` (T, Ftot)."""
    T, C = x.shape
    S = sos.shape[0]
    for t in range(T):
        xt = x[t]
        yt = y[t, yoff:yoff + C]
        for c in range(C):
            v = xt[c]
            if rectify:
                v = max(v, 0.0)
            yt[c] = v
        for s_ in range(S):
            b0 = sos[s_, 0]
            b1 = sos[s_, 1]
            b2 = sos[s_, 2]
            a1 = sos[s_, 4]
            a2 = sos[s_, 5]
            z0 = zi[s_, 0]
            z1 = zi[s_, 1]
            if b2 == 0.0 and a2 == 0.0:
                # first-order section: the second memory stays exactly 0 (b2 v - a2 y);
                # skipping it changes no value (at most the sign of a zero)
                for c in range(C):
                    v = yt[c]
                    out = b0 * v + z0[c]
                    z0[c] = b1 * v - a1 * out + z1[c]
                    yt[c] = out
                continue
            for c in range(C):
                v = yt[c]
                out = b0 * v + z0[c]
                z0[c] = b1 * v - a1 * out + z1[c]
                z1[c] = b2 * v - a2 * out
                yt[c] = out


def _triton():
    """The Triton twin (:mod:`rtamt.engine.sos_triton`), imported on first binding."""
    from . import sos_triton
    return (sos_triton.sos_shared,)


#: the shared SOS cascade: :func:`sos_shared` and its Triton twin
SOS = Kernels(numba=(sos_shared,), triton=_triton)


class SharedSOSStage(Stage):
    """Base of channel stages that run one real SOS cascade ``coeffs.sos`` (S, 6) on every
    channel (DF-II transposed, :func:`sos_shared`), after half-wave rectification if the
    class sets ``rectify = True``.  State: ``zi`` (batch, S, 2, C)."""

    rectify = False
    kernels = SOS

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        return {"zi": np.zeros((batch, coeffs.sos.shape[0], 2, n_in), dtype)}

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        k = stage.kern
        y = k.buffer(out, x.shape, x)
        k.sos_shared(k.coef(coeffs.sos), stage.rectify, state["zi"], x, y, 0)
        return y

    @classmethod
    def grad_rule(cls):
        from .sos_grad import SOSGrad
        return SOSGrad

    @classmethod
    def examples(cls):
        return ()                            # a base class: its subclasses run
