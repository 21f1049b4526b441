"""Nonlinear adaptation loops (streaming).

A chain of K feedback loops, each dividing its input by a low-passed copy of its
own output (Püschel 1988; Dau, Püschel & Kohlrausch 1996a, JASA 99, 3615; Dau et
al. 1997a), with the overshoot limiter of Münkner (1993) as implemented in AMT
0.9.10 ``adaptloop``.  Per sample, channel c:

* ``v = max(x, m_c)`` (minimum level ``m = 10^((minspl - 100)/20)``: the input is in the
  models' internal units, RMS 1 = 100 dB SPL, see :mod:`rtamt.ear.calibration`);
* for k = 1..K: ``v = v / s_k``; if ``limit > 1`` and ``v > 1``:
  ``v = 2 M_k / (1 + exp(-2 (v - 1) / M_k)) - (M_k - 1)`` with
  ``M_k = (1 - s_k(0)^2) * limit - 1``; then ``s_k = a_k s_k + (1 - a_k) v``,
  ``a_k = exp(-1 / (tau_k fs))``;
* output ``(v - c) * 100 / (1 - c)`` with ``c = m^(1/2^K)`` (model units, 0 for
  input at the minimum level).

The initial state is the steady state of silence, ``s_k(0) = m^(1/2^k)``.

Steady-state input-output law (constant input ``x >= m``): each loop outputs the
square root of its input, so ``y = (x^(1/2^K) - c) * 100 / (1 - c)``.

Note: the seed documentation writes the limiter offset as ``-M_k - 1``; AMT and
the reference data use ``-(M_k - 1)`` (continuous at v = 1).  rtamt follows AMT.

Presets: ``dau1997`` (limit 10), ``osses2021`` (limit 5; Osses et al. 2022),
``paulick2024`` (limit 10, tau = [7, 31.8, 87.8, 214.3, 500] ms; Paulick et al.
2024).  The per-channel minimum levels of paulick2024 are not tabulated in the
seed; pass them as a per-channel ``minspl``.

State: the loop dividers ``s`` (batch, K, C).

Kernels: :func:`adaptloop` (numba, here) and its Triton twin
:func:`rtamt.adaptation.adaptloop_triton.adaptloop`; the gradient rule and adjoint are in
:mod:`rtamt.adaptation.adaptloop_grad`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..ear.calibration import INTERNAL_SPL_REF
from ..engine.backend import Kernels, kernel_method
from ..engine.fastexp import exp_f64_short
from ..engine.jit import JIT as _JIT
from ..engine.kernels import STREAMS, pad_lanes
from ..engine.stage import RtamtInputError, Stage

_TAU_DAU = (0.005, 0.050, 0.129, 0.253, 0.500)
PRESETS = {
    "dau1997": dict(tau=_TAU_DAU, limit=10.0),
    "osses2021": dict(tau=_TAU_DAU, limit=5.0),
    "paulick2024": dict(tau=(0.007, 0.0318, 0.0878, 0.2143, 0.5), limit=10.0),
}


@dataclass(frozen=True)
class AdaptLoopParams:
    """fs (Hz); preset; tau (s) and limit override it; minspl (dB SPL, scalar or
    per-channel tuple).  The input is in the internal units (RMS 1 =
    :data:`~rtamt.ear.calibration.INTERNAL_SPL_REF` = 100 dB SPL): a model's calibration stage
    scales its input to them."""

    fs: float
    preset: str = "dau1997"
    tau: tuple | None = None
    limit: float | None = None
    minspl: float | tuple = 0.0


@dataclass(frozen=True)
class AdaptLoopCoeffs:
    """a, b (K,); minlvl, corr, mult (C,); s0, factor, expfac, offset (K, C); limit_on.

    ``lanes`` ((3 + 4K, L) float64): the per-channel constants laid out for the kernel
    (:func:`adaptloop`): rows ``minlvl, corr, mult, factor, expfac,
    offset, s0`` on L = C rounded up to :data:`~rtamt.engine.kernels.LANES` lanes, the
    padding lanes repeating channel 0.  Derived from the fields above, once per design.
    """

    fs: float
    tau: np.ndarray
    limit: float
    a: np.ndarray
    b: np.ndarray
    minlvl: np.ndarray
    s0: np.ndarray
    factor: np.ndarray
    expfac: np.ndarray
    offset: np.ndarray
    corr: np.ndarray
    mult: np.ndarray
    limit_on: bool
    lanes: np.ndarray


@dataclass(frozen=True)
class AdaptLoopWeights:
    """The learnable values of the design (:mod:`rtamt.nn`): the loops' time constants
    ``tau`` (K,) in s (numpy, or a torch tensor where a gradient must reach it)."""

    tau: np.ndarray


def loop_lowpass(tau, fs: float, xp=np):
    """The pole ``a = exp(-1 / (tau fs))`` (K,) of each loop's low-pass (``b = 1 - a``),
    ``tau`` in s, ``fs`` in Hz, in the operations of array namespace ``xp`` (numpy; torch
    so that autograd reaches ``tau``)."""
    return xp.exp(-1.0 / (tau * fs))


def design(params: AdaptLoopParams, n_in: int | None = None,
           weights: AdaptLoopWeights | None = None) -> AdaptLoopCoeffs:
    """The coefficients of ``params`` for ``n_in`` channels; ``weights`` (optional)
    replaces the time constants the params give."""
    if params.preset not in PRESETS:
        raise ValueError(
            f"unknown adaptation preset {params.preset!r}; choose from {sorted(PRESETS)}")
    pre = PRESETS[params.preset]
    tau = np.asarray(params.tau if params.tau is not None else pre["tau"], dtype=np.float64)
    if weights is not None:
        tau = np.asarray(weights.tau, dtype=np.float64)
    limit = float(params.limit if params.limit is not None else pre["limit"])
    if tau.ndim != 1 or tau.size == 0 or np.any(tau <= 0):
        raise ValueError(f"tau must be a non-empty list of positive times (s), got {tau}")
    minspl = np.atleast_1d(np.asarray(params.minspl, dtype=np.float64))
    if n_in is not None and minspl.size not in (1, n_in):
        raise ValueError(f"minspl has {minspl.size} values for {n_in} channels")
    C = n_in if n_in is not None else minspl.size
    minlvl = np.broadcast_to(10.0 ** ((minspl - INTERNAL_SPL_REF) / 20.0), (C,)).copy()
    Kn = tau.size
    a = loop_lowpass(tau, params.fs)
    b = 1.0 - a
    s0 = minlvl[None, :] ** (1.0 / 2.0 ** np.arange(1, Kn + 1))[:, None]  # (K, C)
    M = (1.0 - s0 ** 2) * limit - 1.0
    factor = 2.0 * M
    expfac = -2.0 / M
    offset = M - 1.0
    corr = minlvl ** (1.0 / 2.0 ** Kn)
    mult = 100.0 / (1.0 - corr)
    rows = np.concatenate([minlvl[None], corr[None], mult[None], factor, expfac, offset, s0])
    lanes = pad_lanes(rows, repeat_first=True)
    return AdaptLoopCoeffs(params.fs, tau, limit, a, b, minlvl, np.ascontiguousarray(s0),
                           factor, expfac, offset, corr, mult, limit > 1.0, lanes)


@njit(**_JIT)
def adaptloop(a, bcoef, lanes, limit_on, s, x, y):
    """Chain of nonlinear adaptation loops (Püschel 1988; Dau et al. 1996a, 1997a).

    Per sample and channel: ``v = max(x, minlvl)``; for each loop k:
    ``v = v / s_k``; if overshoot limiting is on and ``v > 1``:
    ``v = factor_k / (1 + exp(expfac_k (v - 1))) - offset_k`` (Münkner 1993, as in
    AMT ``adaptloop``); ``s_k = a_k s_k + b_k v``.  Output ``(v - corr) * mult``.

    The loop over channels is innermost for each loop k, so the divisions of all
    channels vectorise; the limiter pass runs only in loops where some channel needs it
    (on 70 dB noise: loops 3-5, about 20 of the 150 channel-loops per sample), and LLVM
    turns its ``if`` into AVX-512-masked vector code; the limiter is where most of this
    kernel's time goes.  Its exponential is :func:`rtamt.engine.fastexp.exp_f64_short`
    inlined (within 2 ulp of libm): a libm call would not vectorise and would force the
    live vector registers to be spilled around it.

    a, bcoef : (K,)            RC low-pass coefficients per loop.
    lanes    : (3 + 4K, L)     per-channel constants on L lanes (L = C rounded up to
               :data:`~rtamt.engine.kernels.LANES`; the padding lanes repeat channel 0),
               rows ``minlvl, corr, mult, factor[K], expfac[K], offset[K], s0[K]``
               (``s0``: the loop dividers at the steady state of silence), float64; built
               once by :func:`design` (``AdaptLoopCoeffs.lanes``).
    limit_on : bool
    s        : (B, K, C)       loop dividers (state), advanced in place.
    x, y     : (B, T, C)

    The channel loops run on all L lanes (a per-call copy of the state, in the state's
    dtype, so a float32 state is rounded to float32 every sample; the padding lanes start
    from ``s0`` and are fed their minimum level, so they stay at the steady state of
    silence, are never written out and cannot reach a real lane: every operation is per
    lane).  Without the padding a channel count that is not a multiple of the vector
    width leaves a scalar remainder (with a branch per channel in the limiter); the
    constants are padded at design time, so a call copies only the state.
    """
    B, T, C = x.shape
    K = a.shape[0]
    L = lanes.shape[1]
    ml = lanes[0]
    cr = lanes[1]
    mu = lanes[2]
    fa = lanes[3:3 + K]
    ef = lanes[3 + K:3 + 2 * K]
    of = lanes[3 + 2 * K:3 + 3 * K]
    s0 = lanes[3 + 3 * K:3 + 4 * K]
    G = min(B, STREAMS)
    v = np.empty((G, L), np.float64)
    sl = np.empty((G, K, L), s.dtype)  # the state keeps its dtype sample by sample
    for b0 in range(0, B, G):
        gn = min(G, B - b0)
        for g in range(gn):
            sl[g, :, C:] = s0[:, C:]
            sl[g, :, :C] = s[b0 + g]
        for t in range(T):
            for g in range(gn):
                xt = x[b0 + g, t]
                vg = v[g]
                for c in range(C):
                    vg[c] = max(xt[c], ml[c])
                for c in range(C, L):
                    vg[c] = ml[c]
            for k in range(K):
                ak = a[k]
                bk = bcoef[k]
                fak = fa[k]
                efk = ef[k]
                ofk = of[k]
                for g in range(gn):
                    vg = v[g]
                    sk = sl[g, k]
                    over = False
                    for c in range(L):
                        q = vg[c] / sk[c]
                        vg[c] = q
                        over |= q > 1.0
                    if limit_on and over:
                        for c in range(L):
                            q = vg[c]
                            if q > 1.0:
                                e = exp_f64_short(efk[c] * (q - 1.0))
                                vg[c] = fak[c] / (1.0 + e) - ofk[c]
                    for c in range(L):
                        sk[c] = ak * sk[c] + bk * vg[c]
            for g in range(gn):
                yt = y[b0 + g, t]
                vg = v[g]
                for c in range(C):
                    yt[c] = (vg[c] - cr[c]) * mu[c]
        for g in range(gn):
            s[b0 + g] = sl[g, :, :C]


def _triton():
    """The Triton twin (:mod:`rtamt.adaptation.adaptloop_triton`), imported on first
    binding."""
    from . import adaptloop_triton
    return (adaptloop_triton.adaptloop,)


class AdaptLoop(Stage):
    """Streaming adaptation loops: ``(…, C, T)`` -> same shape (model units)."""

    name = "adaptloop"
    Params = AdaptLoopParams
    design = staticmethod(design)
    kernels = Kernels(numba=(adaptloop,), triton=_triton)

    def _coeffs_for(self, n_in):
        if self.coeffs.minlvl.size == n_in:
            return self.coeffs
        n_min = np.atleast_1d(self.params.minspl).size
        if n_min not in (1, n_in):
            raise RtamtInputError(
                f"{self.name}: block has {n_in} channels but minspl gives {n_min} per-channel "
                "values")
        return self.design(self.params, n_in)

    @classmethod
    def grad_rule(cls):
        from .adaptloop_grad import AdaptLoopGrad
        return AdaptLoopGrad

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        s = np.empty((batch, coeffs.tau.size, n_in), dtype)
        s[...] = coeffs.s0[None]
        return {"s": s}

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        k = stage.kern
        y = k.buffer(out, x.shape, x)
        k.adaptloop(k.coef(coeffs.a), k.coef(coeffs.b), k.coef(coeffs.lanes),
                    bool(coeffs.limit_on), state["s"], x, y)
        return y

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (*(Example(f"adapt-{p}", dict(fs=48000.0, preset=p), "envelopes")
                  for p in ("dau1997", "osses2021", "paulick2024")),
                Example("adapt-minspl-per-channel", dict(fs=48000.0), "envelopes",
                        per_channel={"minspl": (-10.0, 20.0)}))
