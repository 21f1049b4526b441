"""The loudness integrators: asymmetric one-pole smoothers over frames (the "automatic
gain control" of Glasberg & Moore 2002, J. Audio Eng. Soc. 50, 331-342, eqs. 5-6, and of
Moore et al. 2016, Trends in Hearing 20).

Per frame ``y <- y + a (x - y)`` with ``a = attack`` where ``x > y`` else ``release``
(coefficients per frame, ``1 - exp(-hop/tau)``).  Two stages:

* :class:`LoudnessIntegrator` smooths one loudness value per row and frame
  (Glasberg2002's short-term loudness from the instantaneous loudness, then its long-term
  loudness from the short-term): ``fr[source]`` (F, R) (or (R, F) with ``transpose``) ->
  ``fr[key]`` (F, R) sone; state ``key`` (R,), the last output.
* :class:`SpecificLoudnessAGC` smooths each channel of the specific loudness (Moore2016's
  short-term specific loudness): ``fr['N']`` (R F, K) -> ``fr['st']`` (F, R, K) sone/Cam;
  state ``st`` (R, K).
"""
from __future__ import annotations

import dataclasses

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.jit import INLINE as _INL
from ..engine.jit import JIT as _JIT
from .frames import FrameStage

__all__ = ["agc", "agc_rows", "LoudnessIntegratorParams", "LoudnessIntegrator",
           "SpecificLoudnessAGCParams", "SpecificLoudnessAGC"]


@njit(**_INL)
def _agc_step(x, y, aa, ar):
    """One step of the asymmetric one-pole smoother (the "automatic gain control" of
    Glasberg & Moore 2002, eqs. 5-6, and Moore et al. 2016): ``y + a (x - y)`` with
    ``a = aa`` (attack) if ``x > y`` else ``ar`` (release)."""
    return y + (aa if x > y else ar) * (x - y)


@njit(**_JIT)
def agc(x, y, aa, ar, out):
    """:func:`_agc_step` per channel, frame by frame: x (N, K) input frames; y (K,) state
    (the last output), advanced in place; out (N, K)."""
    N, K = x.shape
    for n in range(N):
        for k in range(K):
            y[k] = _agc_step(x[n, k], y[k], aa, ar)
            out[n, k] = y[k]


@njit(**_JIT)
def agc_rows(x, y, aa, ar, out):
    """:func:`agc` for row-major input: x (R, F, K) frames of R rows, y (R, K) state,
    out (F, R, K) (frame-major, ready for the spatial-smoothing product)."""
    R, F, K = x.shape
    for r in range(R):
        yr = y[r]
        for f in range(F):
            xr = x[r, f]
            o = out[f, r]
            for k in range(K):
                yr[k] = _agc_step(xr[k], yr[k], aa, ar)
                o[k] = yr[k]


def _triton():
    from . import agc_triton as t

    return (t.agc, t.agc_rows)


#: the integrators' kernels (both stages of this module run them)
_AGC = Kernels(numba=(agc, agc_rows), triton=_triton)


@dataclasses.dataclass(frozen=True)
class LoudnessIntegratorParams:
    """attack, release: coefficients per frame; source: the frames it smooths; key: its
    output and state name; transpose: the source is (R, F) (else (F, R))."""

    attack: float = 0.0
    release: float = 0.0
    source: str = "inst"
    key: str = "stl"
    transpose: bool = False


class LoudnessIntegrator(FrameStage):
    """One asymmetric one-pole integrator per row (see the module docstring)."""

    name = "loudness_integrator"
    Params = LoudnessIntegratorParams
    kernels = _AGC

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self.name = f"{self.params.key}_integrator"

    @property
    def reads(self) -> tuple:
        return (self.params.source,)

    @property
    def writes(self) -> tuple:
        return (self.params.key,)

    @staticmethod
    def design(params: LoudnessIntegratorParams) -> tuple:
        return (float(params.attack), float(params.release))

    def init_state(self, R: int) -> dict:
        return {self.params.key: np.zeros(R)}

    def process_tm(self, fr: dict, state: dict) -> None:
        p = self.params
        x = fr[p.source]
        if p.transpose:
            x = self.kern.contiguous(x.T)
        y = fr[p.key] = self.kern.empty(x.shape, x)
        self.kern.agc(x, state[p.key], p.attack, p.release, y)

    @classmethod
    def grad_rule(cls):
        """The gradient rule (:class:`rtamt.loudness.agc_grad.LoudnessIntegratorGrad`)."""
        from .agc_grad import LoudnessIntegratorGrad

        return LoudnessIntegratorGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("loudness-integrator", dict(attack=0.02, release=0.05), "frames"),)


@dataclasses.dataclass(frozen=True)
class SpecificLoudnessAGCParams:
    """attack, release: coefficients per frame; channels: K."""

    attack: float = 0.0
    release: float = 0.0
    channels: int = 150


class SpecificLoudnessAGC(FrameStage):
    """One asymmetric one-pole integrator per row and channel (see the module docstring)."""

    name = "specific_loudness_agc"
    Params = SpecificLoudnessAGCParams
    kernels = _AGC
    reads = ("N",)
    writes = ("st",)

    @staticmethod
    def design(params: SpecificLoudnessAGCParams) -> tuple:
        return (float(params.attack), float(params.release))

    def init_state(self, R: int) -> dict:
        return {"st": np.zeros((R, self.params.channels))}

    def process_tm(self, fr: dict, state: dict) -> None:
        p = self.params
        R, F = fr["R"], fr["F"]
        N = self.kern.contiguous(fr["N"]).reshape(R, F, p.channels)
        st = fr["st"] = self.kern.empty((F, R, p.channels), N)
        self.kern.agc_rows(N, state["st"], p.attack, p.release, st)

    @classmethod
    def grad_rule(cls):
        """The gradient rule (:class:`rtamt.loudness.agc_grad.SpecificLoudnessAGCGrad`)."""
        from .agc_grad import SpecificLoudnessAGCGrad

        return SpecificLoudnessAGCGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("specific-loudness-agc", dict(attack=0.02, release=0.05), "frames"),)
