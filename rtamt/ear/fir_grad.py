"""The gradient rule of :class:`rtamt.ear.fir.FIRSignalStage` (the headphone, middle-ear
and outer+middle-ear filters) and the adjoint of its kernel :func:`rtamt.ear.fir.fir_tm`."""
from __future__ import annotations

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.grad import StageGrad
from ..engine.jit import JIT as _JIT


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


def _triton():
    """The Triton twin (:mod:`rtamt.ear.fir_grad_triton`), imported on first binding."""
    from . import fir_grad_triton
    return (fir_grad_triton.fir_adjoint,)


class FIRGrad(StageGrad):
    """``(B, T)`` in and out; adjoint :func:`fir_adjoint`.  No learnable parameters."""

    kernels = Kernels(numba=(fir_adjoint,), triton=_triton)

    def backward(self, coeffs, th, x, state, gy, mu):
        k = self.kern
        gx = k.zeros(tuple(x.shape) + (1,), x)
        k.fir_adjoint(k.coef(coeffs.h), gy.reshape(gx.shape), mu["hist"], gx)
        return gx.reshape(x.shape), None
