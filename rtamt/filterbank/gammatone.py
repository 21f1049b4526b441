"""4th-order complex all-pole gammatone filterbank (streaming).

Equations (AMT 0.9.10 ``auditoryfilterbank`` / ``gammatone`` 'allpole',
'causalphase'; Patterson et al. 1988; Hohmann 2002, Acta Acustica 88, 433-442;
Lyon 1997 all-pole gammatone):

* bandwidth ``beta = b * ERB(fc)`` with
  ``b = ((n-1)!)^2 / (pi (2n-2)! 2^-(2n-2))`` (= 1.0186 for n = 4; Holdsworth
  et al. 1988);
* pole ``p = exp(-2 pi beta / fs - i 2 pi fc / fs)``;
* gain ``g = (1 - exp(-2 pi beta / fs))^n`` (0 dB at fc);
* output ``y = 2 Re( g * x filtered by 1 / (1 - p z^-1)^n )``.

Streaming form: a cascade of n identical complex one-pole sections; the state is
the n complex section memories per channel.  Only n = 4 is compiled.

Kernels: :func:`gammatone4` (numba, here) and its Triton twin
:func:`rtamt.filterbank.gammatone_triton.gammatone4`; the gradient rule and adjoint are
in :mod:`rtamt.filterbank.gammatone_grad`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from ..engine.backend import Kernels, kernel_method
from ..engine.jit import JIT as _JIT
from ..engine.kernels import pad_lanes
from ..engine.stage import Stage
from .erb import erb, erb_space

__all__ = ["GammatoneParams", "GammatoneWeights", "GammatoneCoeffs", "Gammatone", "design",
           "poles", "bandwidth_factor", "gammatone4"]


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
    ``L`` = C rounded up to :data:`~rtamt.engine.kernels.LANES` lanes, zero past C (what
    the kernel runs on, padded once here rather than per call)."""

    fs: float
    fc: np.ndarray
    beta: np.ndarray
    pr: np.ndarray
    pi: np.ndarray
    gain: np.ndarray
    lanes: np.ndarray


@dataclass(frozen=True)
class GammatoneWeights:
    """The learnable values of the design (:mod:`rtamt.nn`): ``fc`` (C,) centre
    frequencies in Hz and ``bandwidth_factor`` ``b`` of ``beta = b ERB(fc)`` (numpy, or
    torch tensors where a gradient must reach them)."""

    fc: np.ndarray
    bandwidth_factor: float


def poles(fs: float, w: GammatoneWeights, xp=np) -> tuple:
    """``(beta, Re p, Im p, gain)`` (each (C,)) of the channels ``w`` at ``fs`` Hz, in
    the operations of array namespace ``xp`` (numpy; torch so that autograd reaches
    ``w``): ``beta = b ERB(fc)`` (Hz), ``r = exp(-2 pi beta / fs)``, pole
    ``p = r exp(-i 2 pi fc / fs)``, gain ``2 (1 - r)^4`` (the real part's 2 folded in)."""
    beta = w.bandwidth_factor * erb(w.fc, xp)
    r = xp.exp(-2 * xp.pi * beta / fs)
    pole = r * xp.exp(-1j * 2 * xp.pi * w.fc / fs)
    gain = 2.0 * (1.0 - r) ** 4
    return beta, pole.real, pole.imag, gain


def design(params: GammatoneParams, n_in: int | None = None,
           weights: GammatoneWeights | None = None) -> GammatoneCoeffs:
    """The coefficients of ``params``; ``weights`` (optional) replaces the centre
    frequencies and the bandwidth factor the params give (:func:`poles`)."""
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
    if weights is None:
        weights = GammatoneWeights(fc, bandwidth_factor(params.order))
    beta, pr, pi, gain = poles(params.fs, weights)
    lanes = pad_lanes(np.stack([pr, pi, gain]), repeat_first=False)
    return GammatoneCoeffs(params.fs, weights.fc, beta, np.ascontiguousarray(pr),
                           np.ascontiguousarray(pi), gain, lanes)


@njit(**_JIT)
def gammatone4(lanes, sr, si, x, y):
    """Cascade of four identical complex one-pole sections per channel.

    Implements ``y = gain * Re( x filtered by 1 / (1 - p z^-1)^4 )`` (the AMT
    all-pole gammatone, Hohmann 2002 / Lyon 1997 form, see
    :mod:`rtamt.filterbank.gammatone`).

    lanes : (3, L)    rows: pole real part, pole imaginary part, real output gain (includes
                      the 2 of 2·Re), on L = C rounded up to
                      :data:`~rtamt.engine.kernels.LANES` lanes with zeros past C
                      (``GammatoneCoeffs.lanes``, padded once at design time).
    sr, si : (B, 4, C) section states (real, imag), advanced in place.
    x      : (B, T)    input, one signal per batch item.
    y      : (B, T, C) output, C-contiguous.

    The recursion runs on the ``L`` lanes (a per-call copy of the state; the extra lanes
    have pole and gain 0 and stay 0).  Each sample's ``L`` outputs are written straight
    into the flat output, the lanes past ``C`` landing in the following rows, which are
    written afterwards; only where that would run past the end of ``y`` they go through
    a scratch row.  The states are stored per sample in their own dtype, so the
    padding changes no bit of the result.
    """
    B, T = x.shape
    C = sr.shape[2]
    L = lanes.shape[1]
    ppr = lanes[0]
    ppi = lanes[1]
    pg = lanes[2]
    wr = np.zeros((4, L), sr.dtype)
    wi = np.zeros((4, L), si.dtype)
    row = np.empty(L, y.dtype)
    yf = y.reshape(-1)
    n = yf.shape[0]
    for b in range(B):
        wr[:, :C] = sr[b]
        wi[:, :C] = si[b]
        for t in range(T):
            xv = x[b, t]
            o = (b * T + t) * C
            tail = o + L > n
            dst = row if tail else yf[o:o + L]
            for c in range(L):
                p_r = ppr[c]
                p_i = ppi[c]
                # section 1: z1 = p*z1 + x
                ar = wr[0, c]
                ai = wi[0, c]
                zr = p_r * ar - p_i * ai + xv
                zi = p_r * ai + p_i * ar
                wr[0, c] = zr
                wi[0, c] = zi
                # section 2
                ar = wr[1, c]
                ai = wi[1, c]
                zr2 = p_r * ar - p_i * ai + zr
                zi2 = p_r * ai + p_i * ar + zi
                wr[1, c] = zr2
                wi[1, c] = zi2
                # section 3
                ar = wr[2, c]
                ai = wi[2, c]
                zr3 = p_r * ar - p_i * ai + zr2
                zi3 = p_r * ai + p_i * ar + zi2
                wr[2, c] = zr3
                wi[2, c] = zi3
                # section 4
                ar = wr[3, c]
                ai = wi[3, c]
                zr4 = p_r * ar - p_i * ai + zr3
                zi4 = p_r * ai + p_i * ar + zi3
                wr[3, c] = zr4
                wi[3, c] = zi4
                dst[c] = pg[c] * zr4
            if tail:
                yf[o:] = row[:n - o]
        sr[b] = wr[:, :C]
        si[b] = wi[:, :C]


def _triton():
    """The Triton twin (:mod:`rtamt.filterbank.gammatone_triton`), imported on first
    binding."""
    from . import gammatone_triton
    return (gammatone_triton.gammatone4,)


class Gammatone(Stage):
    """Streaming gammatone filterbank: ``(T,)``/``(batch, T)`` -> ``(C, T)``/``(batch, C, T)``.

    State: ``sr``, ``si`` (batch, 4, C) - real/imaginary parts of the four section
    memories.
    """

    name = "gammatone"
    in_kind = "signal"
    Params = GammatoneParams
    design = staticmethod(design)
    kernels = Kernels(numba=(gammatone4,), triton=_triton)

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        C = coeffs.fc.size
        return {"sr": np.zeros((batch, 4, C), dtype), "si": np.zeros((batch, 4, C), dtype)}

    @staticmethod
    def n_out(coeffs, n_in):
        return coeffs.fc.size

    @classmethod
    def grad_rule(cls):
        from .gammatone_grad import GammatoneGrad
        return GammatoneGrad

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        B, T = x.shape
        C = coeffs.fc.size
        k = stage.kern
        y = k.buffer(out, (B, T, C), x)  # C-contiguous: written flat
        k.gammatone4(k.coef(coeffs.lanes), state["sr"], state["si"], x, y)
        return y

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("gammatone", dict(fs=48000.0, basef=1000.0)),)
