"""Modulation filterbank (streaming), Dau et al. (1997a) lineage.

Per auditory channel with centre frequency ``fc`` (AMT 0.9.10 ``modfilterbank``;
Dau, Kollmeier & Kohlrausch 1997a, JASA 102, 2892; Jepsen et al. 2008, JASA 124,
422; Paulick et al. 2024):

* upper modulation frequency ``u = min(upper_limit_factor * fc, max_mfc)`` (or
  ``max_mfc`` when ``upper_limit_factor`` is 0);
* centre frequencies: 0; then 5, 10 Hz (steps of 5 Hz up to ``min(u, 10)``); then
  log-spaced from ``(10 + 2.5) / (1 - 1/(2Q))`` with ratio
  ``(1 + 1/(2Q)) / (1 - 1/(2Q))`` while ``<= u``;
* ``mfc = 0``: Butterworth low-pass (``lp_order``, ``lp_cutoff``, bilinear), used as is;
* ``mfc > 0``, ``filter_type='efilt'``: complex frequency-shifted 1st-order
  low-pass, ``w0 = 2 pi mfc / fs``, bandwidth ``wb = 2 pi 5 / fs`` if mfc < 10 Hz
  else ``w0 / Q``, ``e0 = exp(-wb / 2)``,
  ``H(z) = (1 - e0) / (1 - e0 e^{i w0} z^-1)``, output ``2 H x``;
* ``filter_type='butterworth'`` (rtamt extension): a 2nd-order Butterworth low-pass
  with cut-off ``bw / 2`` moved to ``mfc`` by the frequency-shift theorem,
  ``2 H(z e^{-i w0})`` (symmetric, flat pass band of width ``bw``);
* ``mfc <= real_max_mfc`` (10 Hz): keep the real part; above: keep the magnitude
  (Hilbert envelope), times ``att_factor``;
* optional 1st-order Butterworth pre-filter (``prefilter_hz``, 150 Hz in
  jepsen2008 / paulick2024) before all modulation filters.

Presets:

===============  =======  =====  ======  ========  =========
preset           max_mfc  upper  att     prefilter lp
===============  =======  =====  ======  ========  =========
``amt0910``      1000     0.25   1       none      2nd, 2.5 Hz
``dau1997``      150      none   1       none      2nd, 2.5 Hz
``jepsen2008``   150      0.25   1/√2    150 Hz    2nd, 2.5 Hz
``paulick2024``  150      0.25   1/√2    150 Hz    2nd, 2.5 Hz
===============  =======  =====  ======  ========  =========

``dau1997``, ``jepsen2008`` and ``paulick2024`` are the seed's documented presets;
``amt0910`` is what AMT 0.9.10's ``dau1997_preproc`` actually computes (the
reference data).

**Ragged output.**  Channels have different numbers of modulation filters.  The
stage outputs a dense *packed* array ``(…, F, T)`` over all F filters, with
index maps in the coefficients: ``filter_channel[f]``, ``filter_slot[f]``
(position in its channel's list, 0 = the low-pass) and ``filter_mfc[f]`` (Hz).
Filters ``0..C-1`` are the low-passes of channels ``0..C-1``; the band-pass
filters follow, ordered (real-part filters first) by modulation band, then
channel.  :func:`to_padded` turns packed output into the ``(…, C, M, T)``
NaN-padded layout (``M`` = most filters in any channel) used by AMT and by
``rtamt process``; ``coeffs.mfc_padded`` is the matching (C, M) table.

State: low-pass ``lp`` (batch, S, 2, C); pre-filter ``pre`` (batch, 1, 2, C);
band-pass states ``bp`` (efilt: (batch, 2, Fb); butterworth: (batch, Fb, 2, 2)).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy import signal

from ..engine import backend as _B
from ..engine.stage import RtamtInputError, Stage, work_buffer

PRESETS = {
    "amt0910": dict(max_mfc=1000.0, upper_limit_factor=0.25, att_factor=1.0, prefilter_hz=0.0),
    "dau1997": dict(max_mfc=150.0, upper_limit_factor=0.0, att_factor=1.0, prefilter_hz=0.0),
    "jepsen2008": dict(max_mfc=150.0, upper_limit_factor=0.25, att_factor=2 ** -0.5,
                       prefilter_hz=150.0),
    "paulick2024": dict(max_mfc=150.0, upper_limit_factor=0.25, att_factor=2 ** -0.5,
                        prefilter_hz=150.0),
}


@dataclass(frozen=True)
class ModFilterbankParams:
    """User parameters (``None`` = take the preset's value).

    fs : Hz.  fc : auditory centre frequencies (Hz), one per input channel.
    preset : 'amt0910' | 'dau1997' | 'jepsen2008' | 'paulick2024'.
    filter_type : 'efilt' | 'butterworth'.  Q : quality factor of the log-spaced filters.
    max_mfc : Hz.  upper_limit_factor : u = factor * fc (0 = no per-channel limit).
    lp_cutoff (Hz), lp_order : the mfc = 0 low-pass.  att_factor : scale of envelope outputs.
    prefilter_hz : 1st-order low-pass before the bank (0 = none).
    real_max_mfc : highest mfc whose real part is kept (Hz).
    """

    fs: float
    fc: tuple
    preset: str = "amt0910"
    filter_type: str = "efilt"
    Q: float = 2.0
    max_mfc: float | None = None
    upper_limit_factor: float | None = None
    lp_cutoff: float = 2.5
    lp_order: int = 2
    att_factor: float | None = None
    prefilter_hz: float | None = None
    real_max_mfc: float = 10.0


@dataclass(frozen=True)
class ModFilterbankCoeffs:
    fs: float
    fc: np.ndarray
    filter_type: str
    mfc: list  # per channel: (M_c,) array, Hz
    mfc_padded: np.ndarray  # (C, M) NaN-padded
    filter_channel: np.ndarray  # (F,)
    filter_slot: np.ndarray  # (F,)
    filter_mfc: np.ndarray  # (F,)
    lp_sos: np.ndarray  # (S, 6), shared by all channels
    pre_sos: np.ndarray | None  # (1, 6) or None
    bp_channel: np.ndarray  # (Fb,)
    bp_runs: np.ndarray  # (R, 3) [first filter, first channel, length] of channel runs
    bp_nreal: int
    bp_coef: np.ndarray | None  # efilt (4, Fb)
    bp_b: np.ndarray | None  # butterworth (Fb, 3, 2)
    bp_a: np.ndarray | None
    bp_scale: np.ndarray  # (Fb,)
    bp_coef32: np.ndarray | None = None  # bp_coef for float32 streams (float32 arithmetic)

    @property
    def n_filters(self) -> int:
        return int(self.filter_channel.size)


def modulation_centre_frequencies(u: float, Q: float = 2.0) -> np.ndarray:
    """mfc list (Hz) for upper limit ``u`` (Hz), AMT 0.9.10 rule (see module doc)."""
    mfc = [0.0]
    if u >= 5.0:
        n_lin = int(np.floor((min(u, 10.0) - 5.0) / 5.0 + 1e-12))
        lin = 5.0 + 5.0 * np.arange(n_lin + 1)
        mfc += list(lin)
        start = (lin[-1] + 2.5) / (1 - 1 / (2 * Q))
        ratio = (1 + 1 / (2 * Q)) / (1 - 1 / (2 * Q))
        if u >= start:
            n_log = int(np.floor(np.log(u / start) / np.log(ratio) + 1e-12))
            mfc += list(start * ratio ** np.arange(n_log + 1))
    return np.asarray(mfc)


@dataclass(frozen=True)
class ModFilterbankWeights:
    """The learnable values of the design (:mod:`rtamt.nn`): ``mfc`` (Fb,) the centre
    frequency (Hz) of every band-pass filter, in packed order
    (``coeffs.filter_mfc[C:]``), and ``Q``, the quality factor of the filters designed at
    10 Hz and above (those below keep their 5 Hz bandwidth).  The filter layout and the
    spacing of the centre frequencies stay those of the params (numpy, or torch tensors
    where a gradient must reach them)."""

    mfc: np.ndarray
    Q: float


def bandpass_poles(w: ModFilterbankWeights, fixed_bw, fs: float, xp=np) -> tuple:
    """``(w0, bw, e0)`` (each (Fb,)) of the band-pass filters ``w`` at ``fs`` Hz, in the
    operations of array namespace ``xp`` (numpy; torch so that autograd reaches ``w``):
    ``w0 = 2 pi mfc / fs`` (rad/sample), bandwidth ``bw = 5`` Hz where ``fixed_bw``
    (bool (Fb,)) else ``mfc / Q`` (Hz), pole radius ``e0 = exp(-pi bw / fs)``."""
    w0 = 2 * xp.pi * w.mfc / fs
    bw = xp.where(fixed_bw, 5.0, w.mfc / w.Q)
    e0 = xp.exp(-(2 * xp.pi * bw / fs) / 2)
    return w0, bw, e0


def efilt_coefficients(w0, e0, xp=np) -> tuple:
    """``(Re p, Im p, g)`` of the ``efilt`` filters: pole ``p = e0 exp(i w0)``, gain
    ``g = 2 (1 - e0)`` (the output's 2 folded in), ``xp`` as in :func:`bandpass_poles`."""
    pole = e0 * xp.exp(1j * w0)
    return pole.real, pole.imag, 2.0 * (1.0 - e0)


def _resolve(params: ModFilterbankParams) -> ModFilterbankParams:
    if params.preset not in PRESETS:
        raise ValueError(
            f"unknown modulation preset {params.preset!r}; choose from {sorted(PRESETS)}")
    pre = PRESETS[params.preset]
    upd = {k: v for k, v in pre.items() if getattr(params, k) is None}
    return replace(params, **upd)


def design(params: ModFilterbankParams, n_in=None,
           weights: ModFilterbankWeights | None = None) -> ModFilterbankCoeffs:
    """The coefficients of ``params``; ``weights`` (optional) replaces the band-pass
    filters' centre frequencies and Q (:func:`bandpass_poles`)."""
    p = _resolve(params)
    fs = float(p.fs)
    if p.filter_type not in ("efilt", "butterworth"):
        raise ValueError(f"filter_type must be 'efilt' or 'butterworth', got {p.filter_type!r}")
    fc = np.asarray(p.fc, dtype=np.float64).ravel()
    C = fc.size
    if C == 0:
        raise ValueError("modulation filterbank needs at least one auditory channel (fc)")
    mfc = []
    for c in range(C):
        u = min(p.upper_limit_factor * fc[c], p.max_mfc) if p.upper_limit_factor > 0 else p.max_mfc
        m = modulation_centre_frequencies(u, p.Q)
        if m[-1] >= fs / 2:
            raise ValueError(f"modulation centre frequency {m[-1]:.1f} Hz >= fs/2")
        mfc.append(m)
    M = max(m.size for m in mfc)
    mfc_padded = np.full((C, M), np.nan)
    for c, m in enumerate(mfc):
        mfc_padded[c, : m.size] = m
    # band filters: (mode, slot, channel)
    bands = [(int(m[j] > p.real_max_mfc), j, c, m[j])
             for c, m in enumerate(mfc) for j in range(1, m.size)]
    bands.sort()
    bp_channel = np.array([b[2] for b in bands], dtype=np.int64)
    bp_slot = np.array([b[1] for b in bands], dtype=np.int64)
    bp_mfc = np.array([b[3] for b in bands], dtype=np.float64)
    bp_mode = np.array([b[0] for b in bands], dtype=np.int64)
    nreal = int(np.sum(bp_mode == 0))
    scale = np.where(bp_mode == 1, p.att_factor, 1.0).astype(np.float64)
    fixed_bw = bp_mfc < 10.0
    if weights is None:
        weights = ModFilterbankWeights(bp_mfc, p.Q)
    elif np.shape(weights.mfc) != bp_mfc.shape:
        raise ValueError(f"weights.mfc has shape {np.shape(weights.mfc)}, the bank has "
                         f"{bp_mfc.size} band-pass filters")
    bp_mfc = weights.mfc
    w0, bw_hz, e0 = bandpass_poles(weights, fixed_bw, fs)
    coef = bb = aa = None
    if p.filter_type == "efilt":
        coef = np.ascontiguousarray(np.stack([*efilt_coefficients(w0, e0), scale]))
    else:
        Fb = bp_mfc.size
        bb = np.zeros((Fb, 3, 2))
        aa = np.zeros((Fb, 3, 2))
        for f in range(Fb):
            b, a = signal.butter(2, bw_hz[f] / 2, btype="low", fs=fs)
            rot = np.exp(1j * w0[f] * np.arange(3))
            bs, as_ = 2.0 * b * rot, a * rot
            bb[f, :, 0], bb[f, :, 1] = bs.real, bs.imag
            aa[f, :, 0], aa[f, :, 1] = as_.real, as_.imag
    lp_sos = np.ascontiguousarray(signal.butter(p.lp_order, p.lp_cutoff, btype="low", fs=fs,
                                                output="sos"))
    pre_sos = None
    if p.prefilter_hz and p.prefilter_hz > 0:
        pre_sos = np.ascontiguousarray(
            signal.butter(1, p.prefilter_hz, btype="low", fs=fs, output="sos"))
    filter_channel = np.concatenate([np.arange(C), bp_channel])
    filter_slot = np.concatenate([np.zeros(C, np.int64), bp_slot])
    filter_mfc = np.concatenate([np.zeros(C), bp_mfc])
    return ModFilterbankCoeffs(fs, fc, p.filter_type, mfc, mfc_padded, filter_channel, filter_slot,
                               filter_mfc, lp_sos, pre_sos, bp_channel, channel_runs(bp_channel),
                               nreal, coef, bb, aa, scale,
                               None if coef is None else coef.astype(np.float32))


def channel_runs(ch: np.ndarray) -> np.ndarray:
    """``(R, 3)`` int64 rows ``[f0, c0, n]``: maximal runs of consecutive filters
    ``f0 .. f0+n-1`` that read consecutive channels ``c0 .. c0+n-1`` (``ch[f]``), so the
    filters' inputs are gathered by contiguous copies."""
    runs = []
    for f, c in enumerate(np.asarray(ch, dtype=np.int64)):
        if runs and runs[-1][0] + runs[-1][2] == f and runs[-1][1] + runs[-1][2] == c:
            runs[-1][2] += 1
        else:
            runs.append([f, int(c), 1])
    return np.array(runs, dtype=np.int64).reshape(-1, 3)


def to_padded(y, coeffs: ModFilterbankCoeffs):
    """Packed ``(…, F, T)`` -> NaN-padded ``(…, C, M, T)`` (numpy)."""
    y = np.asarray(y)
    C, M = coeffs.mfc_padded.shape
    out = np.full(y.shape[:-2] + (C, M, y.shape[-1]), np.nan, dtype=y.dtype)
    out[..., coeffs.filter_channel, coeffs.filter_slot, :] = y
    return out


def to_ragged(y, coeffs: ModFilterbankCoeffs) -> list:
    """Packed ``(…, F, T)`` -> list over channels of ``(…, M_c, T)`` arrays."""
    y = np.asarray(y)
    out = []
    for c in range(coeffs.fc.size):
        idx = np.nonzero(coeffs.filter_channel == c)[0]
        idx = idx[np.argsort(coeffs.filter_slot[idx])]
        out.append(y[..., idx, :])
    return out


class PackedFilterbank(Stage):
    """Base of modulation filterbanks designed for one auditory centre frequency per input
    channel (``coeffs.fc``) with a packed output of ``coeffs.n_filters`` rows."""

    name = "modfb"

    def _coeffs_for(self, n_in):
        if n_in != self.coeffs.fc.size:
            raise RtamtInputError(
                f"{self.name}: input has {n_in} channels, the filterbank was designed for "
                f"{self.coeffs.fc.size} (one fc per channel)")
        return self.coeffs

    @staticmethod
    def n_out(coeffs, n_in):
        return coeffs.n_filters

    @staticmethod
    def _prefilter(coeffs, state, x):
        """The optional low-pass before the bank (``coeffs.pre_sos``, state ``pre``)."""
        if coeffs.pre_sos is None:
            return x
        k, c = _B.dispatch(x)
        u = work_buffer(None, x.shape, x.dtype, like=x)
        k.sos_shared(c(coeffs.pre_sos), False, state["pre"], x, u, 0)
        return u


class ModFilterbank(PackedFilterbank):
    """Streaming modulation filterbank: ``(…, C, T)`` -> packed ``(…, F, T)``."""

    Params = ModFilterbankParams
    design = staticmethod(design)
    triton_ready = True

    @classmethod
    def grad_rule(cls):
        from .modfb_grad import ModFilterbankGrad
        return ModFilterbankGrad

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        C = coeffs.fc.size
        Fb = coeffs.bp_channel.size
        st = {"lp": np.zeros((batch, coeffs.lp_sos.shape[0], 2, C), dtype)}
        if coeffs.pre_sos is not None:
            st["pre"] = np.zeros((batch, coeffs.pre_sos.shape[0], 2, C), dtype)
        if coeffs.filter_type == "efilt":
            st["bp"] = np.zeros((batch, 2, Fb), dtype)
        else:
            st["bp"] = np.zeros((batch, Fb, 2, 2), dtype)
        return st

    @classmethod
    def process_tm(cls, coeffs, state, x, out=None):
        B, T, C = x.shape
        k, c = _B.dispatch(x)      # numba on numpy arrays, Triton on torch tensors
        if type(x) is np.ndarray:
            if not x.flags.c_contiguous:  # the kernels copy rows as vectors
                x = np.ascontiguousarray(x)
        else:
            x = x.contiguous()
        x = cls._prefilter(coeffs, state, x)
        y = work_buffer(out, (B, T, coeffs.n_filters), x.dtype, like=x)
        if coeffs.filter_type == "efilt":
            coef = coeffs.bp_coef if _B.is_float64(x) else coeffs.bp_coef32
            k.modfb_efilt(c(coeffs.lp_sos), state["lp"], c(coeffs.bp_runs), coeffs.bp_nreal,
                          c(coef), state["bp"], x, y)
            return y
        k.sos_shared(c(coeffs.lp_sos), False, state["lp"], x, y, 0)
        if coeffs.bp_channel.size:
            k.cplx_biquad_bank(c(coeffs.bp_channel), int(coeffs.bp_nreal), c(coeffs.bp_b),
                               c(coeffs.bp_a), c(coeffs.bp_scale), state["bp"], x, y, C)
        return y
