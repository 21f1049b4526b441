"""4th-order complex all-pole gammatone filterbank (streaming).

Equations (AMT 0.9.10 ``auditoryfilterbank`` / ``gammatone`` 'allpole',
'causalphase'; Patterson et al. 1988; Hohmann 2002, Acta Acustica 88, 433-442;
Lyon 1997 all-pole gammatone):

* bandwidth ``beta = b * ERB(fc)`` with
  ``b = ((n-1)!)^2 / (pi (2n-2)! 2^-(2n-2))`` (= 1.0183 for n = 4; Holdsworth
  et al. 1988);
* pole ``p = exp(-2 pi beta / fs - i 2 pi fc / fs)``;
* gain ``g = (1 - exp(-2 pi beta / fs))^n`` (0 dB at fc);
* output ``y = 2 Re( g * x filtered by 1 / (1 - p z^-1)^n )``.

Streaming form: a cascade of n identical complex one-pole sections; the state is
the n complex section memories per channel.  Only n = 4 is compiled.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..engine import backend as _B
from ..engine import kernels as K
from ..engine.stage import Stage, work_buffer
from .erb import erb, erb_space

__all__ = ["GammatoneParams", "GammatoneCoeffs", "Gammatone", "design", "bandwidth_factor"]


def bandwidth_factor(n: int) -> float:
    """``b = ((n-1)!)^2 / (pi (2n-2)! 2^-(2n-2))`` (Holdsworth et al. 1988)."""
    return (math.factorial(n - 1) ** 2
            / (math.pi * math.factorial(2 * n - 2) * 2.0 ** (-(2 * n - 2))))


@dataclass(frozen=True)
class GammatoneParams:
    """User parameters.

    fs      : sample rate, Hz.
    flow, fhigh : range of centre frequencies, Hz (ignored if ``fc`` is given).
    spacing : channel spacing in ERB numbers (default 1).
    basef   : a centre frequency that must be on the grid (AMT 'basef'), Hz, or None.
    fc      : explicit centre frequencies, Hz (tuple), overrides the grid.
    order   : filter order n (4).
    """

    fs: float
    flow: float = 80.0
    fhigh: float = 8000.0
    spacing: float = 1.0
    basef: float | None = None
    fc: tuple | None = None
    order: int = 4


@dataclass(frozen=True)
class GammatoneCoeffs:
    """Designed coefficients: ``fc`` (C,) Hz, ``beta`` (C,) Hz, pole ``pr``/``pi`` (C,),
    output ``gain`` (C,) = 2 g (the 2 of 2 Re); ``lanes`` (3, L) rows ``pr, pi, gain`` on
    ``L`` = C rounded up to :data:`rtamt.engine.kernels.LANES` lanes, zero past C (what
    the kernel runs on, padded once here rather than per call)."""

    fs: float
    fc: np.ndarray
    beta: np.ndarray
    pr: np.ndarray
    pi: np.ndarray
    gain: np.ndarray
    lanes: np.ndarray


def design(params: GammatoneParams, n_in: int | None = None) -> GammatoneCoeffs:
    if params.order != 4:
        raise ValueError(f"gammatone order {params.order} not supported (compiled for n = 4)")
    if params.fs <= 0:
        raise ValueError(f"fs must be > 0, got {params.fs}")
    nyq = params.fs / 2
    if params.fc is not None:
        fc = np.asarray(params.fc, dtype=np.float64).ravel()
    else:
        fc = erb_space(params.flow, params.fhigh, params.spacing, params.basef)
    if fc.size and np.all(fc > 0) and np.any(fc >= nyq) and params.fc is None:
        raise ValueError(f"gammatone filterbank at {params.fs:g} Hz: channels up to fhigh "
                         f"{params.fhigh:g} Hz reach {fc.max():g} Hz, not below Nyquist "
                         f"({nyq:g} Hz); pass fhigh={0.45 * params.fs:g} or lower")
    if fc.size == 0 or np.any(fc <= 0) or np.any(fc >= nyq):
        got = f"{fc.size} from {fc.min():g} to {fc.max():g} Hz" if fc.size else "none"
        raise ValueError(f"centre frequencies must lie in (0, fs/2 = {nyq:g} Hz), got {got}")
    n = params.order
    beta = bandwidth_factor(n) * erb(fc)
    r = np.exp(-2 * np.pi * beta / params.fs)
    pole = r * np.exp(-1j * 2 * np.pi * fc / params.fs)
    gain = 2.0 * (1.0 - r) ** n
    lanes = K.pad_lanes(np.stack([pole.real, pole.imag, gain]), repeat_first=False)
    return GammatoneCoeffs(params.fs, fc, beta, np.ascontiguousarray(pole.real),
                           np.ascontiguousarray(pole.imag), gain, lanes)


class Gammatone(Stage):
    """Streaming gammatone filterbank: ``(T,)``/``(batch, T)`` -> ``(C, T)``/``(batch, C, T)``.

    State: ``sr``, ``si`` (batch, 4, C) - real/imaginary parts of the four section
    memories.
    """

    name = "gammatone"
    in_kind = "signal"
    triton_ready = True
    Params = GammatoneParams
    design = staticmethod(design)

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        C = coeffs.fc.size
        return {"sr": np.zeros((batch, 4, C), dtype), "si": np.zeros((batch, 4, C), dtype)}

    @staticmethod
    def n_out(coeffs, n_in):
        return coeffs.fc.size

    @staticmethod
    def process_tm(coeffs, state, x, out=None):
        B, T = x.shape
        C = coeffs.fc.size
        k, c = _B.dispatch(x)      # numba on numpy arrays, Triton on torch tensors
        y = work_buffer(out, (B, T, C), x.dtype, like=x)  # C-contiguous: written flat
        k.gammatone4(c(coeffs.lanes), state["sr"], state["si"], x, y)
        return y
