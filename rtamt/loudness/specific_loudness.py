"""Specific loudness from excitation, ANSI S3.4-2007 eqs. (17)-(19) (Moore, Glasberg &
Baer 1997, "A model for the prediction of thresholds, loudness, and partial loudness",
J. Audio Eng. Soc. 45, 224-240), and the instantaneous loudness of Glasberg & Moore
(2002, J. Audio Eng. Soc. 50, 331-342, §2.4).

:class:`SpecificLoudness` takes linear excitation ``fr['E']`` (R F, K) and adds the
specific loudness ``fr['N']`` (R F, K), sone/Cam, with the per-channel constants of
:class:`rtamt.loudness.ansi.SpecificLoudnessCoeffs` and the scaling constant ``C``.
:class:`InstantaneousLoudness` sums it over the channels: ``fr['inst']`` (R, F) =
``k 0.25 sum_K N'`` sone (``k = 2`` for diotic presentation, 1 for monaural; the 0.25 is
the Cam step).  Neither has state.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.fastexp import exp_f64, log_f64
from ..engine.jit import JIT as _JIT
from .ansi import SpecificLoudnessCoeffs
from .frames import FrameStage

__all__ = ["specific_loudness", "SpecificLoudnessParams", "SpecificLoudness",
           "ReferenceSpecificLoudnessParams",
           "InstantaneousLoudnessParams", "InstantaneousLoudness"]


@njit(**_JIT)
def specific_loudness(E, G, A, alpha, A_alpha, ethrq, C, out):
    """Specific loudness N' (sone/Cam) from linear excitation (ANSI S3.4-2007 eqs. 17-19).

    E (N, K) linear excitation (1.0 = 0 dB); G, A, alpha, A_alpha, ethrq (K,) per channel;
    C scalar; out (N, K).  See :func:`rtamt.loudness.ansi.specific_loudness_ref`.
    """
    N, K = E.shape
    for n in range(N):
        for k in range(K):
            e = E[n, k]
            # branch-free so that the loop vectorises (exp/log from engine.fastexp)
            hi = e > 1e10
            ep = max(e, 1e-300)
            u = ep * (1.0 / 1.0707) if hi else G[k] * ep + A[k]
            v = exp_f64((0.2 if hi else alpha[k]) * log_f64(u)) - (0.0 if hi else A_alpha[k])
            r = 2.0 * e / (e + ethrq[k])
            v = v * (r * math.sqrt(r)) if e < ethrq[k] else v
            out[n, k] = C * v if e > 0.0 else 0.0


def _triton():
    from . import specific_loudness_triton as t

    return (t.specific_loudness,)


@dataclasses.dataclass(frozen=True)
class SpecificLoudnessParams:
    """fc: the excitation channels' centre frequencies (Hz); C: the scaling constant
    (0.046871 in ANSI S3.4-2007; Moore2016 uses 0.06084, see its docstring)."""

    fc: tuple = ()
    C: float = 0.046871


@dataclasses.dataclass(frozen=True)
class ReferenceSpecificLoudnessParams(SpecificLoudnessParams):
    """:class:`SpecificLoudnessParams` with the threshold excitation from 500 Hz up
    (``thrq_500_db``; the Cambridge loudness program's 3.63 dB, ANSI S3.4-2007: 3.73 dB)."""

    thrq_500_db: float = 3.63


class SpecificLoudness(FrameStage):
    """Specific loudness (ANSI S3.4-2007 eqs. 17-19) as a frame stage: ``fr['E']`` (R F, K)
    linear excitation -> ``fr['N']`` (R F, K) sone/Cam."""

    name = "specific_loudness"
    Params = SpecificLoudnessParams
    kernels = Kernels(numba=(specific_loudness,), triton=_triton)
    reads = ("E",)
    writes = ("N",)

    @staticmethod
    def design(params: SpecificLoudnessParams) -> SpecificLoudnessCoeffs:
        extra = {} if not hasattr(params, "thrq_500_db") else {"thrq_500_db": params.thrq_500_db}
        return SpecificLoudnessCoeffs(np.asarray(params.fc, dtype=np.float64), params.C,
                                      **extra)

    def process_tm(self, fr: dict, state: dict) -> None:
        E = fr["E"]
        c = self.kc
        N = fr["N"] = self.kern.empty(E.shape, E)
        self.kern.specific_loudness(E, c.G, c.A, c.alpha, c.A_alpha, c.ethrq, c.C, N)

    @classmethod
    def grad_rule(cls):
        """The gradient rule (:class:`~rtamt.loudness.specific_loudness_grad.
        SpecificLoudnessGrad`)."""
        from .specific_loudness_grad import SpecificLoudnessGrad

        return SpecificLoudnessGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("specific-loudness", {}, "frames"),)


@dataclasses.dataclass(frozen=True)
class InstantaneousLoudnessParams:
    """ear_factor: 2 for diotic presentation (both ears hear the signal), 1 monaural."""

    ear_factor: float = 2.0


class InstantaneousLoudness(FrameStage):
    """``fr['N']`` (R F, K) -> ``fr['inst']`` (R, F) = ``ear_factor 0.25 sum_K N'`` sone
    (Glasberg & Moore 2002, §2.4).  Array operations only (no kernels): the same code on
    numpy arrays and torch tensors."""

    name = "instantaneous_loudness"
    Params = InstantaneousLoudnessParams
    triton_ready = True
    reads = ("N",)
    writes = ("inst",)

    @staticmethod
    def design(params: InstantaneousLoudnessParams) -> float:
        return float(params.ear_factor)

    def process_tm(self, fr: dict, state: dict) -> None:
        N = fr["N"]
        fr["inst"] = self.coeffs * 0.25 * N.reshape(fr["R"], fr["F"], N.shape[1]).sum(axis=2)

    @classmethod
    def grad_rule(cls):
        """The gradient rule (:class:`~rtamt.loudness.specific_loudness_grad.
        InstantaneousLoudnessGrad`)."""
        from .specific_loudness_grad import InstantaneousLoudnessGrad

        return InstantaneousLoudnessGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("instantaneous-loudness", {}, "frames"),)
