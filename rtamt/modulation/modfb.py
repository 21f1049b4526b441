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

Kernels: :func:`modfb_efilt` (low-passes and efilt band-passes in one call),
:func:`cplx_biquad_bank` (the Butterworth band-passes) and the shared SOS cascade
(:mod:`rtamt.engine.sos`: low-passes, pre-filter), numba here; their Triton twins are in
:mod:`rtamt.modulation.modfb_triton` (and :mod:`rtamt.engine.sos_triton`).  The gradient
rule and adjoints are in :mod:`rtamt.modulation.modfb_grad`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numba import njit
from scipy import signal

from ..engine.backend import Kernels, kernel_method
from ..engine.intrinsics import copy8, fma
from ..engine.jit import JIT as _JIT
from ..engine.sos import SOS, sos_rows
from ..engine.stage import RtamtInputError, Stage

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


# The modulation bank runs the same step in a 4-sample and a 1-sample path; with automatic
# FMA contraction LLVM may fuse a different product in each (operand order follows whether
# a value comes from memory or a register), so that bank is compiled without it and its
# step spells its fused multiply-adds out (:func:`rtamt.engine.intrinsics.fma`): the same
# roundings in both paths, and the two paths agree to the bit.
_JIT_EXACT = dict(_JIT, fastmath=False)
_INL_EXACT = dict(_JIT_EXACT, inline="always")


@njit(**_INL_EXACT)
def _efilt_step(pr, pi, g, ar, ai, u):
    """One sample of ``w <- p w + g u`` (complex pole ``p = pr + i pi``, real input ``u``);
    returns the new (Re w, Im w).  The only place this recursion is written.

    ``Re: fma(pr, ar, fma(-pi, ai, g u))``, ``Im: fma(pr, ai, pi ar)`` (explicit fused
    multiply-adds: 3 instead of 5 rounded operations for ``Re``), in the dtype of the
    arguments, which is the stream's: float32 streams run in float32 arithmetic (16 lanes
    per AVX-512 register instead of float64 arithmetic with conversions of every value)."""
    return fma(pr, ar, fma(-pi, ai, g * u)), fma(pr, ai, pi * ar)


@njit(**_INL_EXACT)
def _efilt_out(sc, wr, wi, magnitude):
    """Filter output: ``sc |w|`` (Hilbert envelope) or ``sc Re w``, in the arguments' dtype."""
    if magnitude:
        return sc * np.sqrt(fma(wr, wr, wi * wi))
    return sc * wr


@njit(**_INL_EXACT)
def _efilt_lanes4(pr, pi, g, sc, sr, si, u0, u1, u2, u3, y0, y1, y2, y3, magnitude):
    """Four consecutive samples of every filter (lane): the state stays in registers
    over the four samples.  All arguments are 1-D contiguous views starting at lane 0 (a
    loop that starts elsewhere keeps numba's negative-index wrap-around and does not
    vectorise); ``u*``/``y*`` are the input/output rows of the four samples."""
    for f in range(pr.shape[0]):
        p_r = pr[f]
        p_i = pi[f]
        gf = g[f]
        s = sc[f]
        ar, ai = _efilt_step(p_r, p_i, gf, sr[f], si[f], u0[f])
        y0[f] = _efilt_out(s, ar, ai, magnitude)
        ar, ai = _efilt_step(p_r, p_i, gf, ar, ai, u1[f])
        y1[f] = _efilt_out(s, ar, ai, magnitude)
        ar, ai = _efilt_step(p_r, p_i, gf, ar, ai, u2[f])
        y2[f] = _efilt_out(s, ar, ai, magnitude)
        ar, ai = _efilt_step(p_r, p_i, gf, ar, ai, u3[f])
        y3[f] = _efilt_out(s, ar, ai, magnitude)
        sr[f] = ar
        si[f] = ai


@njit(**_INL_EXACT)
def _efilt_lanes1(pr, pi, g, sc, sr, si, u0, y0, magnitude):
    """One sample of every filter (the < 4 samples left at the end of a block)."""
    for f in range(pr.shape[0]):
        ar, ai = _efilt_step(pr[f], pi[f], g[f], sr[f], si[f], u0[f])
        y0[f] = _efilt_out(sc[f], ar, ai, magnitude)
        sr[f] = ar
        si[f] = ai


@njit(**_JIT_EXACT)
def cplx_onepole_bank(runs, nreal, coef, st, x, y, yoff):
    """Bank of complex one-pole filters ('efilt': frequency-shifted 1st-order low-pass).

    ``w[n] = g x_ch[n] + p w[n-1]`` with complex pole ``p`` (Dau et al. 1997a;
    AMT 0.9.10 ``modfilterbank``); output ``scale * Re(w)`` for filters
    ``f < nreal`` and ``scale * |w|`` for the others.

    runs  : (R, 3) int  ``[first filter, first channel, length]``: filters
            ``f0 .. f0+n-1`` read channels ``c0 .. c0+n-1`` (the bank is ordered by
            modulation band, then channel, so a band is one run); rows in increasing
            ``f0``, together covering filters ``0 .. F-1``.
    nreal : int         filters 0..nreal-1 output the real part, the rest the magnitude.
    coef  : (4, F)      rows: Re p, Im p, input gain g, output scale; same dtype as st, x.
    st    : (B, 2, F)   states (real, imag), advanced in place.
    x     : (B, T, C);  y : (B, T, Ftot), filter f -> column ``yoff + f``.

    Samples are taken four at a time (each filter's state stays in registers over the
    four; the lane loop over filters vectorises), the rest one at a time with the same
    step function, so the result does not depend on where a block starts or ends.
    The inputs are gathered by 8-wide vector copies (:func:`rtamt.engine.intrinsics.copy8`)
    rather than element loops over the runs: numba cannot tell LLVM that source and
    destination do not overlap, so an element loop is copied one value at a time.
    """
    B, T, C = x.shape
    F = coef.shape[1]
    # the inputs of four samples, gathered run by run; lane f at uf[j, 8 + f] (8 lanes of
    # slack in front for the vector copies below)
    uf = np.empty((4, F + 8), x.dtype)
    xp = np.zeros(C + 16, x.dtype)  # one input row with 8 values of slack on both sides
    for b in range(B):
        efilt_rows(runs, nreal, coef, st[b], x[b], y[b], yoff, uf, xp)


@njit(**_JIT_EXACT)
def efilt_rows(runs, nreal, coef, st, x, y, yoff, uf, xp):
    """:func:`cplx_onepole_bank` for one stream: ``st`` (2, F), ``x`` (T, C), ``y``
    (T, Ftot); ``uf`` (4, F + 8) and ``xp`` (C + 16, zero) are scratch rows."""
    T, C = x.shape
    F = coef.shape[1]
    a = nreal
    R = runs.shape[0]
    # every lane view is sliced once, outside the sample loop: slices taken per step with a
    # run-time start (``pr[a:]``) left the step loops about twice as slow
    prA = coef[0, :a]
    piA = coef[1, :a]
    gA = coef[2, :a]
    scA = coef[3, :a]
    prB = coef[0, a:]
    piB = coef[1, a:]
    gB = coef[2, a:]
    scB = coef[3, a:]
    srA = st[0, :a]
    siA = st[1, :a]
    srB = st[0, a:]
    siB = st[1, a:]
    u0A = uf[0, 8:8 + a]
    u1A = uf[1, 8:8 + a]
    u2A = uf[2, 8:8 + a]
    u3A = uf[3, 8:8 + a]
    u0B = uf[0, 8 + a:8 + F]
    u1B = uf[1, 8 + a:8 + F]
    u2B = uf[2, 8 + a:8 + F]
    u3B = uf[3, 8 + a:8 + F]
    ya = yoff + a
    ye = yoff + F
    t = 0
    while t < T:
        n = min(4, T - t)
        for j in range(n):
            xt = x[t + j]
            uj = uf[j]
            if C >= 8:
                # 8-wide vector copies (`copy8`): the row into xp, then each run in
                # chunks aligned to its end, last run first, so a chunk reaching in
                # front of its run writes lanes of the run below, copied afterwards
                for c in range(0, C - 8, 8):
                    copy8(xt, c, xp, 8 + c)
                copy8(xt, C - 8, xp, C)
                for r in range(R - 1, -1, -1):
                    m = runs[r, 2]
                    es = 8 + runs[r, 1] + m
                    ed = 8 + runs[r, 0] + m
                    k = 8
                    while k < m + 8:
                        copy8(xp, es - k, uj, ed - k)
                        k += 8
            else:
                for r in range(R):
                    ud = uj[8 + runs[r, 0]:]
                    xs = xt[runs[r, 1]:]
                    for i in range(runs[r, 2]):
                        ud[i] = xs[i]
        if n == 4:
            y0 = y[t]
            y1 = y[t + 1]
            y2 = y[t + 2]
            y3 = y[t + 3]
            _efilt_lanes4(prA, piA, gA, scA, srA, siA, u0A, u1A, u2A, u3A,
                          y0[yoff:ya], y1[yoff:ya], y2[yoff:ya], y3[yoff:ya], False)
            _efilt_lanes4(prB, piB, gB, scB, srB, siB, u0B, u1B, u2B, u3B,
                          y0[ya:ye], y1[ya:ye], y2[ya:ye], y3[ya:ye], True)
        else:
            for j in range(n):
                yj = y[t + j]
                _efilt_lanes1(prA, piA, gA, scA, srA, siA, uf[j, 8:8 + a],
                              yj[yoff:ya], False)
                _efilt_lanes1(prB, piB, gB, scB, srB, siB, uf[j, 8 + a:8 + F],
                              yj[ya:ye], True)
        t += n


@njit(**_JIT)
def modfb_efilt(lp_sos, lp_zi, runs, nreal, coef, st, x, y):
    """The Dau1997-lineage modulation bank in one call, stream by stream: the low-passes
    (:func:`rtamt.engine.sos.sos_rows`, outputs ``0 .. C-1``) then the band-pass filters
    (:func:`efilt_rows`, outputs ``C ..``) of a stream, so that its output rows
    (2.2 KB per sample for 275 filters) are completed while they are still in cache
    rather than written in two passes over the whole batch.  Same functions, same
    arithmetic as :func:`rtamt.engine.sos.sos_shared` followed by :func:`cplx_onepole_bank`."""
    B, T, C = x.shape
    F = coef.shape[1]
    uf = np.empty((4, F + 8), x.dtype)
    xp = np.zeros(C + 16, x.dtype)
    for b in range(B):
        sos_rows(lp_sos, False, lp_zi[b], x[b], y[b], 0)
        if F:
            efilt_rows(runs, nreal, coef, st[b], x[b], y[b], C, uf, xp)


@njit(**_JIT)
def cplx_biquad_bank(ch, nreal, bcoef, acoef, scale, st, x, y, yoff):
    """Bank of complex-coefficient biquads (DF-II transposed) on real inputs.

    Used for the frequency-shifted Butterworth modulation filters: a real low-pass
    prototype ``H(z)`` moved to centre ``w0`` by ``H(z e^{-i w0})`` (frequency-shift
    theorem), so ``Re`` is a band-pass and ``|.|`` its envelope.

    ch     : (F,) int input channel per filter;  nreal as in :func:`cplx_onepole_bank`.
    bcoef  : (F, 3, 2) numerator (real, imag);  acoef : (F, 3, 2) denominator, a0 == 1.
    scale  : (F,)
    st     : (B, F, 2, 2) states [z index, real/imag], advanced in place.
    x      : (B, T, C);  y : (B, T, Ftot), filter f -> column ``yoff + f``.
    """
    B, T, C = x.shape
    F = ch.shape[0]
    for b in range(B):
        for t in range(T):
            xt = x[b, t]
            for f in range(F):
                v = xt[ch[f]]
                z = st[b, f]
                bc = bcoef[f]
                ac = acoef[f]
                o_r = bc[0, 0] * v + z[0, 0]
                o_i = bc[0, 1] * v + z[0, 1]
                z[0, 0] = bc[1, 0] * v - (ac[1, 0] * o_r - ac[1, 1] * o_i) + z[1, 0]
                z[0, 1] = bc[1, 1] * v - (ac[1, 0] * o_i + ac[1, 1] * o_r) + z[1, 1]
                z[1, 0] = bc[2, 0] * v - (ac[2, 0] * o_r - ac[2, 1] * o_i)
                z[1, 1] = bc[2, 1] * v - (ac[2, 0] * o_i + ac[2, 1] * o_r)
                if f < nreal:
                    y[b, t, yoff + f] = scale[f] * o_r
                else:
                    y[b, t, yoff + f] = scale[f] * math.sqrt(o_r * o_r + o_i * o_i)


def _triton():
    """The Triton twins (:mod:`rtamt.modulation.modfb_triton`), imported on first
    binding."""
    from . import modfb_triton
    return (modfb_triton.modfb_efilt, modfb_triton.cplx_biquad_bank)


class PackedFilterbank(Stage):
    """Base of modulation filterbanks designed for one auditory centre frequency per input
    channel (``coeffs.fc``) with a packed output of ``coeffs.n_filters`` rows."""

    name = "modfb"
    kernels = Kernels(uses=(SOS,))          # the pre-filter: the shared SOS cascade

    def _coeffs_for(self, n_in):
        if n_in != self.coeffs.fc.size:
            raise RtamtInputError(
                f"{self.name}: input has {n_in} channels, the filterbank was designed for "
                f"{self.coeffs.fc.size} (one fc per channel)")
        return self.coeffs

    @staticmethod
    def n_out(coeffs, n_in):
        return coeffs.n_filters

    @kernel_method
    def _prefilter(stage, coeffs, state, x):
        """The optional low-pass before the bank (``coeffs.pre_sos``, state ``pre``)."""
        if coeffs.pre_sos is None:
            return x
        k = stage.kern
        u = k.buffer(None, x.shape, x)
        k.sos_shared(k.coef(coeffs.pre_sos), False, state["pre"], x, u, 0)
        return u

    @classmethod
    def examples(cls):
        return ()                            # a base class: its subclasses run


class ModFilterbank(PackedFilterbank):
    """Streaming modulation filterbank: ``(…, C, T)`` -> packed ``(…, F, T)``."""

    Params = ModFilterbankParams
    design = staticmethod(design)
    kernels = Kernels(numba=(modfb_efilt, cplx_biquad_bank), triton=_triton, uses=(SOS,))

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

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        B, T, C = x.shape
        k = stage.kern
        c = k.coef
        x = k.contiguous(x)            # the kernels copy rows as vectors
        x = stage._prefilter(coeffs, state, x)
        y = k.buffer(out, (B, T, coeffs.n_filters), x)
        if coeffs.filter_type == "efilt":
            coef = coeffs.bp_coef if k.is64(x) else coeffs.bp_coef32
            k.modfb_efilt(c(coeffs.lp_sos), state["lp"], c(coeffs.bp_runs), coeffs.bp_nreal,
                          c(coef), state["bp"], x, y)
            return y
        k.sos_shared(c(coeffs.lp_sos), False, state["lp"], x, y, 0)
        if coeffs.bp_channel.size:
            k.cplx_biquad_bank(c(coeffs.bp_channel), int(coeffs.bp_nreal), c(coeffs.bp_b),
                               c(coeffs.bp_a), c(coeffs.bp_scale), state["bp"], x, y, C)
        return y

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return tuple(Example(f"modfb-{p}-{ft}", dict(fs=48000.0, preset=p, filter_type=ft),
                             "adapted", per_channel={"fc": "fc"})
                     for p in ("amt0910", "dau1997", "jepsen2008", "paulick2024")
                     for ft in ("efilt", "butterworth"))
