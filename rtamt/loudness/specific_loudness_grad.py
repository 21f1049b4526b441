"""Gradient rules of :class:`~rtamt.loudness.specific_loudness.SpecificLoudness` (ANSI
S3.4-2007 eqs. 17-19; learnable scaling constant ``C = C0 exp(theta)``) and
:class:`~rtamt.loudness.specific_loudness.InstantaneousLoudness` (a scaled sum)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from numba import njit

from ..engine.backend import Kernels, NumbaKernels
from ..engine.jit import JIT as _JIT
from .frames_grad import FrameGrad, scalar, zeros_or

__all__ = ["specific_loudness_adjoint", "SpecificLoudnessWeights", "SpecificLoudnessGrad",
           "InstantaneousLoudnessGrad"]


@njit(**_JIT)
def specific_loudness_adjoint(E, G, A, alpha, A_alpha, ethrq, C, gN, gE):
    """Adjoint of :func:`rtamt.loudness.specific_loudness.specific_loudness`, branch by
    branch as the kernel takes them (ANSI S3.4-2007): above 1e10 ``N' = C (E/1.0707)^0.2``
    (eq. 19); else ``N' = C ((G E + A)^alpha - A^alpha)`` (eq. 17), times
    ``(2E/(E + E_thrq))^1.5`` below threshold (eq. 18); 0 at ``E <= 0`` (its gradient 0).

    E, gN (N, K): excitation (linear) and the gradient of the specific loudness; gE (N, K)
    the gradient of E, added into.  Returns the gradient of ``C``.
    """
    N, K = E.shape
    gC = 0.0
    for n in range(N):
        for k in range(K):
            e = E[n, k]
            if not e > 0.0:
                continue
            if e > 1e10:
                u = e / 1.0707
                v = u ** 0.2
                dv = 0.2 * v / u / 1.0707
            else:
                u = G[k] * e + A[k]
                ua = u ** alpha[k]
                v = ua - A_alpha[k]
                dv = alpha[k] * G[k] * ua / u
            if e < ethrq[k]:
                d = e + ethrq[k]
                r = 2.0 * e / d
                s = r * math.sqrt(r)
                ds = 1.5 * math.sqrt(r) * 2.0 * ethrq[k] / (d * d)
                dv = dv * s + v * ds
                v = v * s
            g = gN[n, k]
            gE[n, k] += g * C * dv
            gC += g * v
    return gC


@dataclasses.dataclass(frozen=True)
class SpecificLoudnessWeights:
    """C: the scaling constant of the specific loudness (sone/Cam per unit)."""

    C: object


def _triton():
    """The Triton twin (:mod:`rtamt.loudness.specific_loudness_grad_triton`), imported on
    first binding."""
    from . import specific_loudness_grad_triton
    return (specific_loudness_grad_triton.specific_loudness_adjoint,)


class SpecificLoudnessGrad(FrameGrad):
    """``fr['E']`` (R F, K) -> ``fr['N']``; learnable ``C = C0 exp(theta[0])``."""

    n_params = 1
    kernels = Kernels(numba=(specific_loudness_adjoint,), triton=_triton)

    def weights(self, th, xp=np):
        return SpecificLoudnessWeights(self.stage.params.C * xp.exp(th[0]))

    def coefficients(self, w, xp):
        return (w.C,)

    def params_for(self, w):
        return dataclasses.replace(self.stage.params, C=float(w.C))

    def backward(self, stage, fr, state, g, mu, th):
        c, kern = stage.kcoeffs, self.kern         # the arrays as the kernels take them
        E = kern.contiguous(fr["E"])
        gE = kern.zeros(tuple(E.shape), E)
        gN = zeros_or(kern, g["N"], tuple(E.shape), E)
        gC = kern.specific_loudness_adjoint(E, c.G, c.A, c.alpha, c.A_alpha, c.ethrq,
                                            float(stage.coeffs.C), gN, gE)
        return {"E": gE}, (None if th is None else self.chain(th, scalar(kern, gC)))


class InstantaneousLoudnessGrad(FrameGrad):
    """``fr['N']`` (R F, K) -> ``fr['inst']`` (R, F) = ``c 0.25 sum_K N'``: each channel's
    gradient is ``c 0.25`` times the frame's.  Array operations only (no kernel): it runs
    on both backends."""

    device_ready = True
    kern = NumbaKernels({})

    def backward(self, stage, fr, state, g, mu, th):
        R, F = int(fr["R"]), int(fr["F"])
        K = fr["N"].shape[1]
        like = fr["N"]
        gi = zeros_or(self.kern, g["inst"], (R, F), like) * (stage.coeffs * 0.25)
        gN = self.kern.empty((R * F, K), like)
        gN[...] = gi.reshape(R * F, 1)            # each channel: the frame's gradient
        return {"N": gN}, None
