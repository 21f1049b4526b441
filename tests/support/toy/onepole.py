"""A one-pole low-pass per channel, ``y[t] = (1 - a) x[t] + a y[t-1]``, ``a = exp(-1 /
(tau fs))`` (the impulse-invariant first-order low-pass; Oppenheim & Schafer, *Discrete-Time
Signal Processing*, 3rd ed., sec. 7.2).  State: ``y`` (batch, C), the last output."""
from __future__ import annotations

import dataclasses

import numpy as np
from numba import njit

from rtamt.engine.backend import Kernels, kernel_method
from rtamt.engine.stage import Stage


@dataclasses.dataclass(frozen=True)
class OnePoleParams:                     # fixed design
    fs: float
    tau: float = 0.002                   # s


@dataclasses.dataclass(frozen=True)
class OnePoleWeights:                    # what rtamt.nn may learn
    tau: float


@dataclasses.dataclass(frozen=True)
class OnePoleCoeffs:
    a: np.ndarray                        # (1,) float64


def pole(tau, fs, xp=np):
    """The formula the weights reach, once, for numpy and torch."""
    return xp.exp(-1.0 / (tau * fs))


def design(params, n_in=None, weights=None):
    tau = params.tau if weights is None else weights.tau
    return OnePoleCoeffs(np.array([pole(tau, params.fs)], np.float64))


@njit(nogil=True)
def one_pole(a, y0, x, y):
    """Time-major ``x``, ``y`` (B, T, C); ``y0`` (B, C) advanced in place."""
    B, T, C = x.shape
    for b in range(B):
        for c in range(C):
            for t in range(T):
                y[b, t, c] = (1.0 - a[0]) * x[b, t, c] + a[0] * y0[b, c]
                y0[b, c] = y[b, t, c]             # the state in its own dtype


def _triton():
    from . import onepole_triton
    return (onepole_triton.one_pole,)


class OnePole(Stage):
    name = "onepole"
    in_kind = "channels"
    Params = OnePoleParams
    design = staticmethod(design)
    kernels = Kernels(numba=(one_pole,), triton=_triton)

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        return {"y": np.zeros((batch, n_in), dtype)}

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        k = stage.kern
        y = k.buffer(out, x.shape, x)
        k.one_pole(k.coef(coeffs.a), state["y"], x, y)
        return y

    @classmethod
    def grad_rule(cls):
        from .onepole_grad import OnePoleGrad
        return OnePoleGrad

    @classmethod
    def examples(cls):
        from rtamt.engine.examples import Example

        return (Example("onepole", dict(fs=48000.0), "envelopes"),
                Example("onepole-slow", dict(fs=48000.0, tau=0.02), "pair"))
