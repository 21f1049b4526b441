"""Binaural inhibition and the per-ear loudness of Moore, Glasberg, Varathanathan &
Schlittenlacher (2016), "A loudness model for time-varying sounds incorporating binaural
inhibition", Trends in Hearing 20, 1-16; the inhibition of Moore & Glasberg (2007),
"Modeling binaural loudness", J. Acoust. Soc. Am. 121, 1604-1612.

:class:`BinauralInhibition` takes the short-term specific loudness ``fr['st']`` (F, R, K)
of the ear rows (pairs (2b, 2b + 1) = left, right; one row = diotic, both ears hear it)
and the excitation ``fr['E']`` (R F, K), smooths each ear's pattern over frequency with a
Gaussian ``exp(-(sigma g)^2)`` (g in Cam, ``|g| <= width_cam``), divides each ear's pattern
by its inhibition factor ``I_L = 2/(1 + sech(S_R/S_L)^p)`` (and mirror), sums it to the
short-term loudness per ear ``0.25 sum_K N'/I`` and integrates that to the long-term
loudness per ear by an asymmetric one-pole (:func:`rtamt.loudness.agc.agc`; fused in
one kernel with the inhibition).  It adds ``fr['spec']``, ``fr['exc']`` (B, 2, K, F)
(inhibited pattern, sone/Cam; excitation, dB) and ``fr['ste']``, ``fr['lte']`` (B, 2, F)
(sone), ``B`` ear pairs; state ``lt`` (R,), the long-term loudness of each ear.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.fastexp import exp_f64, log_f64
from ..engine.jit import INLINE as _INL
from ..engine.jit import JIT as _JIT
from ..engine.rowwise import ROWWISE, band_ranges, product
from .agc import _agc_step
from .frames import FrameStage

__all__ = ["binaural_frames", "P_INHIBIT", "BinauralParams", "BinauralCoeffs",
           "BinauralInhibition"]

_LN2 = math.log(2.0)
#: the exponent of the inhibition function (Moore et al. 2016)
P_INHIBIT = 1.5978


@njit(**_JIT)
def binaural_frames(st, S, E, lt, aa_lt, ar_lt, p, spec, exc, ste, lte):
    """Binaural inhibition and loudness of Moore et al. (2016), frame by frame.

    Per ear pair: inhibition factors of Moore & Glasberg (2007, eq. 1)
    ``I_L = 2 / (1 + sech(S_R / S_L)^p)`` (and mirror; ``sech(1)^p`` for equal patterns,
    1 when the other ear is silent) from the spatially smoothed short-term patterns S
    -> inhibited pattern ``st / I`` -> short-term loudness ``0.25 sum_k st/I`` ->
    long-term loudness by the asymmetric one-pole AGC (:func:`agc`).

    st, S : (F, R, K) short-term specific loudness and its smoothed version; rows are
            ear pairs (2b, 2b + 1), or one row (diotic: both ears get it).
    E  : (R, F, K) excitation (linear).  lt (R,): long-term AGC state, advanced in place.
    Outputs: spec, exc (B, 2, K, F): inhibited pattern (sone/Cam) and excitation (dB,
    ``10 log10(max(E, 1e-10))``); ste, lte (B, 2, F) per-ear short- and long-term
    loudness (sone).  B = R // 2, or 1 for a single (diotic) row.
    """
    F, R, K = st.shape
    diotic = R == 1
    nb = 1 if diotic else R // 2
    il = np.empty(K)
    ir = np.empty(K)
    x = np.empty(K)
    k10 = 10.0 / math.log(10.0)
    for b in range(nb):
        r0 = 0 if diotic else 2 * b
        r1 = r0 if diotic else r0 + 1
        for f in range(F):
            sl = S[f, r0]
            sr = S[f, r1]
            for k in range(K):
                il[k] = 2.0 / (1.0 + _sech_pow(sr[k], sl[k], p))
                ir[k] = 2.0 / (1.0 + _sech_pow(sl[k], sr[k], p))
            for e in range(2):
                re = r0 if e == 0 else r1
                y = st[f, re]
                inh = il if e == 0 else ir
                tot = 0.0
                for k in range(K):
                    v = y[k] / inh[k]
                    spec[b, e, k, f] = v
                    tot += v
                tot *= 0.25
                ste[b, e, f] = tot
                if e == 0 or not diotic:
                    lt[re] = _agc_step(tot, lt[re], aa_lt, ar_lt)
                    er = E[re, f]
                    for k in range(K):
                        x[k] = k10 * log_f64(max(er[k], 1e-10))
                lte[b, e, f] = lt[re]
                for k in range(K):
                    exc[b, e, k, f] = x[k]


@njit(**_INL)
def _sech_pow(num, den, p):
    # sech(num/den)^p = exp(-p ln cosh x), ln cosh x = x - ln 2 + ln(1 + e^{-2x}) (x >= 0);
    # 1 where num <= 0 (this ear's pattern dominates), 0 where den <= 0 (the other ear
    # is silent) or x is huge; branch-free so that the loop vectorises
    x = min(num / max(den, 1e-300), 1e300)
    lc = x - _LN2 + log_f64(1.0 + exp_f64(-2.0 * x))
    v = exp_f64(-p * lc)
    v = v if den > 0.0 else 0.0
    return v if num > 0.0 else 1.0


def _triton():
    from . import binaural_triton as t

    return (t.binaural_frames,)


@dataclasses.dataclass(frozen=True)
class BinauralParams:
    """cam: the channels' centre frequencies (Cam); sigma (1/Cam), width_cam (Cam): the
    spatial smoothing; p: the inhibition exponent; attack, release: the long-term
    integrator's coefficients per frame."""

    cam: tuple = ()
    sigma: float = 0.08
    width_cam: float = 18.0
    p: float = P_INHIBIT
    attack: float = 0.01
    release: float = 0.00133


@dataclasses.dataclass
class BinauralCoeffs:
    smooth: np.ndarray       # (K, K) Gaussian spatial smoothing weights
    smooth_rng: np.ndarray   # (K, 2) nonzero band of each row (band_ranges)


class BinauralInhibition(FrameStage):
    """Binaural inhibition and per-ear loudness (see the module docstring)."""

    name = "binaural_inhibition"
    Params = BinauralParams
    kernels = Kernels(numba=(binaural_frames,), triton=_triton, uses=(ROWWISE,))
    reads = ("st", "E")
    rows_per_stream = 2          # a stereo stream is an ear pair (one row: diotic)
    writes = ("spec", "exc", "ste", "lte")

    @staticmethod
    def design(params: BinauralParams) -> BinauralCoeffs:
        cam = np.asarray(params.cam, dtype=np.float64)
        g = cam[None, :] - cam[:, None]
        smooth = np.where(np.abs(g) <= params.width_cam + 1e-9,
                          np.exp(-(params.sigma * g) ** 2), 0.0)
        return BinauralCoeffs(smooth, band_ranges(smooth))

    def init_state(self, R: int) -> dict:
        return {"lt": np.zeros(R)}

    def process_tm(self, fr: dict, state: dict) -> None:
        p, c, kern = self.params, self.kc, self.kern
        st = fr["st"]
        F, R, K = st.shape
        B = 1 if R == 1 else R // 2
        S = product(kern, st.reshape(F * R, K), c.smooth,     # spatial smoothing
                    c.smooth_rng).reshape(F, R, K)
        E = kern.contiguous(fr["E"]).reshape(R, F, K)
        spec = fr["spec"] = kern.empty((B, 2, K, F), st)
        exc = fr["exc"] = kern.empty((B, 2, K, F), st)
        ste = fr["ste"] = kern.empty((B, 2, F), st)
        lte = fr["lte"] = kern.empty((B, 2, F), st)
        kern.binaural_frames(st, S, E, state["lt"], p.attack, p.release, p.p, spec, exc,
                             ste, lte)

    @classmethod
    def grad_rule(cls):
        """The gradient rule (:class:`rtamt.loudness.binaural_grad.BinauralGrad`)."""
        from .binaural_grad import BinauralGrad

        return BinauralGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("binaural-inhibition", {}, "frames"),)
