"""King et al. (2019) modulation filterbank (exact IIR), streaming.

King, Varnet & Lorenzi (2019), JASA 145, 2277-2293 (AMT ``king2019``): the same bank of
modulation band-pass filters in every auditory channel, constant quality factor ``Q``:

* centre frequencies ``mfc_i = mflow * r^i`` while ``<= mfhigh``, with the ratio of adjacent
  centres for filters that touch at their -3 dB edges
  ``r = (sqrt(4 Q^2 + 1) + 1) / (sqrt(4 Q^2 + 1) - 1)`` (Q = 1: 2, 5.24, 13.7, 35.9, 94.0 Hz);
  or ``nmod`` centres log-spaced from ``mflow`` to ``mfhigh``;
* -3 dB edges ``f_lo,hi = mfc/2 * sqrt(4 + 1/Q^2) -/+ mfc/(2Q)`` (so ``f_hi - f_lo =
  mfc/Q`` and ``sqrt(f_lo f_hi) = mfc``);
* each filter the 2nd-order Butterworth band-pass of those edges,
  ``H(s) = B s / (s^2 + B s + w_lo w_hi)``, ``B = w_hi - w_lo``, digitised by the bilinear
  transform with pre-warped edges (``scipy.signal.butter(1, [f_lo, f_hi], 'bandpass')``);
* optional 1st-order Butterworth 150 Hz low-pass before the bank (``lp150``, King 2019's
  ``lp_150Hz`` flag).

The seed's "Fast" FFT variant approximates these filters (up to 15 % off); this stage runs
the exact recursions, one compiled biquad per (filter, channel).

Output: packed ``(…, F, T)`` with ``F = M * C``, ordered by modulation filter then channel
(``f = m * C + c``), with the same index maps as :mod:`rtamt.modulation.modfb`
(``filter_channel``, ``filter_slot``, ``filter_mfc``, ``mfc_padded`` (C, M)), so
:func:`rtamt.modulation.to_padded` gives ``(…, C, M, T)``.

State: ``bp`` (M, batch, 1, 2, C) biquad memories; ``pre`` (batch, 1, 2, C) if ``lp150``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import signal

from ..engine.backend import kernel_method
from .modfb import PackedFilterbank


@dataclass(frozen=True)
class KingModFilterbankParams:
    """fs (Hz); fc (auditory centre frequencies, Hz - one per input channel); mflow, mfhigh
    (Hz); qfactor; nmod (None: spacing from Q); lp150 (150 Hz pre-filter)."""

    fs: float
    fc: tuple
    mflow: float = 2.0
    mfhigh: float = 150.0
    qfactor: float = 1.0
    nmod: int | None = None
    lp150: bool = False


@dataclass(frozen=True)
class KingModFilterbankCoeffs:
    fs: float
    fc: np.ndarray              # (C,)
    mfc: np.ndarray             # (M,) Hz
    edges: np.ndarray           # (M, 2) -3 dB edges, Hz
    sos: np.ndarray             # (M, 1, 6)
    pre_sos: np.ndarray | None  # (1, 6)
    filter_channel: np.ndarray  # (F,)
    filter_slot: np.ndarray     # (F,)
    filter_mfc: np.ndarray      # (F,)
    mfc_padded: np.ndarray      # (C, M)

    @property
    def n_filters(self) -> int:
        return int(self.filter_channel.size)


def king_centre_frequencies(mflow: float, mfhigh: float, Q: float, nmod: int | None = None):
    """Modulation centre frequencies (Hz) of King et al. (2019) (see module docstring)."""
    if not 0 < mflow <= mfhigh or Q <= 0:
        raise ValueError(f"need 0 < mflow <= mfhigh and Q > 0, got {mflow}, {mfhigh}, {Q}")
    if nmod is not None:
        if nmod < 1:
            raise ValueError(f"nmod must be >= 1, got {nmod}")
        return np.logspace(np.log10(mflow), np.log10(mfhigh), int(nmod)) if nmod > 1 \
            else np.array([float(mflow)])
    s = np.sqrt(4 * Q * Q + 1)
    r = (s + 1) / (s - 1)
    n = int(np.floor(np.log(mfhigh / mflow) / np.log(r) + 1e-9)) + 1
    return mflow * r ** np.arange(n)


@dataclass(frozen=True)
class KingModFilterbankWeights:
    """The learnable values of the design (:mod:`rtamt.nn`): the modulation centre
    frequencies ``mfc`` (M,) in Hz and the bank's quality factor ``Q`` (numpy, or torch
    tensors where a gradient must reach them)."""

    mfc: np.ndarray
    Q: float


def band_edges(mfc, Q, xp=np):
    """-3 dB edges (M, 2) in Hz of the band-passes of centre ``mfc`` (M,) in Hz and
    quality factor ``Q``: ``f_lo,hi = mfc/2 sqrt(4 + 1/Q^2) -/+ mfc/(2Q)`` (so ``f_hi -
    f_lo = mfc / Q`` and ``sqrt(f_lo f_hi) = mfc``), in the operations of array namespace
    ``xp`` (numpy; torch so that autograd reaches ``mfc`` and ``Q``)."""
    mid = mfc / 2 * xp.sqrt(4 + 1 / Q ** 2)
    return xp.stack([mid - mfc / (2 * Q), mid + mfc / (2 * Q)], 1)


def bandpass_sos(edges, fs: float, xp=np):
    """The band-passes of -3 dB ``edges`` (M, 2) (Hz, ``0 < f_lo < f_hi < fs / 2``) as
    rows ``[b0, b1, b2, 1, a1, a2]`` (M, 6): the values of
    ``scipy.signal.butter(1, [f_lo, f_hi], 'bandpass', fs=fs, output='sos')`` (to
    rounding; :func:`design` keeps scipy's, this closed form is for the array namespaces
    ``xp`` that scipy does not take, torch so that autograd reaches the edges).

    Derivation: the 1st-order Butterworth low-pass prototype ``1 / (s + 1)`` becomes,
    with ``s -> (s^2 + w_lo w_hi) / (B s)``, ``B = w_hi - w_lo``, the band-pass
    ``H(s) = B s / (s^2 + B s + w_lo w_hi)`` whose -3 dB edges are ``w_lo``, ``w_hi``.
    The bilinear transform ``s = 2 fs (z - 1) / (z + 1)`` with pre-warped edges
    ``w = 2 fs tan(pi f / fs)`` keeps the edges of the digital filter at ``f_lo``,
    ``f_hi`` (Oppenheim & Schafer, *Discrete-Time Signal Processing*, 3rd ed., sec.
    7.2.2).  The factor ``2 fs`` cancels: with ``W = tan(pi f / fs)``, ``b = W_hi - W_lo``
    and ``p = W_lo W_hi``, multiplying numerator and denominator by ``(z + 1)^2`` gives
    ``H(z) = b (z^2 - 1) / ((1 + b + p) z^2 + 2 (p - 1) z + (1 - b + p))``, so with
    ``D = 1 + b + p``: ``b0 = b / D``, ``b1 = 0``, ``b2 = -b / D``, ``a1 = 2 (p - 1) / D``,
    ``a2 = (1 - b + p) / D``.  For every ``0 < f_lo < f_hi < fs / 2`` the poles are inside
    the unit circle (``0 < a2 < 1`` and ``|a1| < 1 + a2``)."""
    w_lo, w_hi = xp.tan(xp.pi * edges[:, 0] / fs), xp.tan(xp.pi * edges[:, 1] / fs)
    b, p = w_hi - w_lo, w_lo * w_hi
    d = 1.0 + b + p
    zero = xp.zeros_like(d)
    return xp.stack([b / d, zero, -b / d, zero + 1.0, 2.0 * (p - 1.0) / d,
                     (1.0 - b + p) / d], 1)


def design(p: KingModFilterbankParams, n_in=None,
           weights: KingModFilterbankWeights | None = None) -> KingModFilterbankCoeffs:
    """The coefficients of ``p``; ``weights`` (optional) replaces the centre frequencies
    and Q the params give (the sections are scipy's Butterworth band-passes of
    :func:`band_edges`)."""
    fs = float(p.fs)
    fc = np.asarray(p.fc, dtype=np.float64)
    if fc.ndim != 1 or fc.size < 1:
        raise ValueError("fc must list one auditory centre frequency per channel")
    if weights is None:
        weights = KingModFilterbankWeights(
            king_centre_frequencies(p.mflow, p.mfhigh, p.qfactor, p.nmod), float(p.qfactor))
    mfc = weights.mfc
    edges = band_edges(mfc, weights.Q)
    if edges.max() >= fs / 2:
        raise ValueError(f"modulation filter edge {edges.max():.1f} Hz >= fs/2")
    if edges.min() <= 0:
        raise ValueError(f"modulation filter edge {edges.min():.3g} Hz <= 0")
    sos = np.stack([signal.butter(1, e, btype="bandpass", fs=fs, output="sos") for e in edges])
    pre = signal.butter(1, 150.0, btype="low", fs=fs, output="sos") if p.lp150 else None
    C, M = fc.size, mfc.size
    filter_channel = np.tile(np.arange(C), M)
    filter_slot = np.repeat(np.arange(M), C)
    return KingModFilterbankCoeffs(fs, fc, mfc, edges, np.ascontiguousarray(sos), pre,
                                   filter_channel, filter_slot, mfc[filter_slot],
                                   np.tile(mfc, (C, 1)))


class KingModFilterbank(PackedFilterbank):
    """Streaming King (2019) modulation filterbank: ``(…, C, T)`` -> packed ``(…, M*C, T)``."""

    Params = KingModFilterbankParams
    design = staticmethod(design)
    batch_axes = {"bp": 1}          # (M, batch, 1, 2, C): the batch is axis 1

    @classmethod
    def grad_rule(cls):
        from .king2019_grad import KingModFilterbankGrad
        return KingModFilterbankGrad

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        st = {"bp": np.zeros((coeffs.mfc.size, batch, 1, 2, n_in), dtype)}
        if coeffs.pre_sos is not None:
            st["pre"] = np.zeros((batch, 1, 2, n_in), dtype)
        return st

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        B, T, C = x.shape
        k = stage.kern                     # the shared SOS cascade (PackedFilterbank)
        x = stage._prefilter(coeffs, state, x)
        F = coeffs.n_filters
        y = k.buffer(out, (B, T, F), x)
        bp = state["bp"]
        for m in range(coeffs.mfc.size):   # one compiled kernel call per modulation filter
            k.sos_shared(k.coef(coeffs.sos[m]), False, bp[m], x, y, m * C)
        return y

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("modfb-king2019", dict(fs=48000.0), "adapted", per_channel={"fc": "fc"}),
                Example("modfb-king2019-lp150-nmod",
                        dict(fs=48000.0, lp150=True, nmod=8, qfactor=2.0), "adapted",
                        per_channel={"fc": "fc"}))
