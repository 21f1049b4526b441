"""Gradient rules of the stages Moore2016's ``config='tvl2018'`` adds
(:mod:`rtamt.loudness.tvl2018`): the linear-phase ear FIR (its adjoint is the correlation
with the taps, through the sample history) and the component floor (the components it
keeps pass their gradient, the dropped ones none: the floor's decisions are held, the
output does not depend on the threshold between its jumps)."""
from __future__ import annotations

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.jit import JIT as _JIT
from .frames_grad import FrameGrad, zeros_if_none
from .tvl2018 import component_floor

__all__ = ["fir_adjoint", "EarFIRGrad", "ComponentFloorGrad"]


@njit(**_JIT)
def fir_adjoint(h, gy, gz):
    """Adjoint of the FIR ``y[t] = sum_k h[k] z[t + M - k]`` (``z`` the ``M = N - 1``
    history samples, then the block; :func:`rtamt.ear.fir.fir_tm`): ``gz[t + M - k] +=
    h[k] gy[t]``.  h (N,), gy (R, T), gz (R, M + T) added into."""
    R, T = gy.shape
    N = h.shape[0]
    M = N - 1
    for r in range(R):
        g = gy[r]
        for k in range(N):
            hk = h[k]
            o = gz[r, M - k:M - k + T]
            for t in range(T):
                o[t] += hk * g[t]


def _triton():
    """The Triton twin (:mod:`rtamt.loudness.tvl2018_grad_triton`), imported on first
    binding."""
    from . import tvl2018_grad_triton
    return (tvl2018_grad_triton.fir_adjoint,)


class EarFIRGrad(FrameGrad):
    """``fr['rows']`` (R, T) -> ``fr['rows']``; state ``hist`` (R, ntaps - 1)."""

    kernels = Kernels(numba=(fir_adjoint,), triton=_triton)
    #: its ``backward`` prepares numpy arrays: a layer of this configuration stays on the
    #: host (the Triton twin is checked at kernel level)
    device_ready = False

    def backward(self, stage, fr, state, g, mu, th):
        x = fr["rows"]
        R, T = x.shape
        M = state["hist"].shape[1]
        gz = np.zeros((R, M + T))
        gz[:, gz.shape[1] - M:] += mu["hist"]
        self.kern.fir_adjoint(np.asarray(stage.coeffs.h, dtype=np.float64),
                              np.ascontiguousarray(zeros_if_none(g["rows"], (R, T))), gz)
        mu["hist"] = np.ascontiguousarray(gz[:, :M])
        return {"rows": np.ascontiguousarray(gz[:, M:])}, None


class ComponentFloorGrad(FrameGrad):
    """``fr['P']`` (R F, J) -> ``fr['P']``: the gradient of a kept component passes, that of
    a dropped one is 0.  No kernel of its own and numpy only: host-only."""

    device_ready = False

    def backward(self, stage, fr, state, g, mu, th):
        P = np.array(fr["P"], dtype=np.float64, copy=True)
        R, F = int(fr["R"]), int(fr["F"])
        thr_min, rel = stage.coeffs
        component_floor(P, R, F, 2 if R % 2 == 0 else 1, thr_min, rel)
        return {"P": zeros_if_none(g["P"], P.shape) * (P != 0.0)}, None
