"""Dual-resonance nonlinear (DRNL) filterbank as a streaming stage.

The DRNL filter models the velocity of one place of the human basilar membrane (BM) as
the sum of two parallel paths driven by the same stapes velocity (Meddis, O'Mard &
Lopez-Poveda 2001, JASA 109:2852; Lopez-Poveda & Meddis 2001, JASA 110:3107 - "LP&M
2001" below):

* **linear path**: gain ``g``, a cascade of ``n_gt_lin`` gammatone sections centred on
  ``CF_lin`` with bandwidth ``BW_lin``, a cascade of ``n_lp_lin`` second-order
  Butterworth low-pass filters with cut-off ``LP_lin``;
* **nonlinear path**: a cascade of ``n_gt_nlin_before`` gammatone sections (``CF_nlin``,
  ``BW_nlin``), the instantaneous broken-stick nonlinearity

  ``y = sign(x) * min(a |x|, b |x|^c)``        (Meddis et al. 2001; LP&M 2001)

  a second cascade of ``n_gt_nlin_after`` identical gammatone sections and a cascade of
  ``n_lp_nlin`` Butterworth low-pass filters with cut-off ``LP_nlin``;
* **output**: linear + nonlinear path.

Every per-channel parameter follows the regression on the channel's characteristic
frequency ``CF`` (Hz) used by LP&M 2001 (Table III) and Jepsen, Ewert & Dau 2008
(JASA 124:422, Table I):

  ``log10(p) = p0 + m * log10(CF)``   i.e.   ``p = 10^p0 * CF^m``.

For the normal-hearing parameter set of Jepsen et al. (2008), ``a`` and ``b`` are
evaluated at ``min(CF, 1500 Hz)`` (values above 1.5 kHz are frozen at their 1.5-kHz
values; ``ab_limit_hz``).  ``c = 10^-0.60206 = 0.25``.

Units (LP&M 2001, model description and Fig. 2b): the DRNL input is the **stapes velocity in
m/s** (the output of the outer- and middle-ear filters, which turn sound pressure in Pa
into stapes velocity); ``b`` carries units of (m/s)^(1-c) and the output is BM
velocity in m/s.  The stage multiplies its input by ``input_scale`` first, so a signal
in other units can be fed in with a documented flat conversion factor.  For reference,
LP&M 2001 Fig. 2b (derived from Goode et al. 1994) gives a stapes **peak** velocity of
about 8.2e-9 m/s for a 1-kHz tone at 0 dB SPL (:data:`STAPES_PEAK_VELOCITY_1KHZ_0DB`);
:func:`flat_stapes_scale` turns that into a flat factor for a signal calibrated in
rtamt's convention (digital RMS 1 = ``spl_ref`` dB SPL).  A flat factor is exact at
1 kHz only: Paulick et al. (2024) and the AMT run a headphone (outer-ear) filter and
the LP&M 2001 middle-ear filter (Pa -> stapes velocity in m/s) before the DRNL; with
such stages in front, leave ``input_scale = 1``.

Gammatone section (LP&M 2001 build their gammatone filters as cascades of identical
"first-order" gammatone filters; the form below is the real two-pole/one-zero section
that the AMT ``gammatone(..., 'classic')`` call of Jepsen's and Paulick's DRNL code
designs): with ``r = exp(-2 pi BW / fs)`` and ``theta = 2 pi f_GT / fs``

  ``H(z) = G (1 - r cos(theta) z^-1) / (1 - 2 r cos(theta) z^-1 + r^2 z^-2)``,

the real part of a complex one-pole resonator ``1 / (1 - r e^{i theta} z^-1)``; ``G``
makes ``|H(e^{i theta})| = 1`` (0 dB at ``f_GT``).

Low-pass section: second-order Butterworth low-pass ``1 / (s^2 + sqrt(2) s + 1)``
mapped by the bilinear transform with the cut-off pre-warped (``K = tan(pi f_c / fs)``;
Oppenheim & Schafer, *Discrete-Time Signal Processing*, 3rd ed., Sec. 7.2), i.e. the
filter of MATLAB/scipy ``butter(2, f_c / (fs/2))`` used by the DRNL code of the AMT.

Streaming: every section is a biquad in transposed direct form II; its two memories per
channel live in the state, so any block partition gives bit-identical output to one
call on the whole signal.  The recursion runs in one compiled numba kernel, time-major,
with the innermost loop over channels (vectorises); on the Triton backend (torch tensors,
``DRNL.to(device, backend='triton')``) the same recursion runs in its Triton twin
:func:`rtamt.filterbank.drnl_triton.drnl_kernel`, one lane per (stream, channel), with the
same dtype semantics and the same fused multiply-adds.  The stage declares both
(``DRNL.kernels``).

Numerics: float64 and float32 run the same kernel with coefficients rounded to the
dtype; float32 agrees with float64 to about 1e-4 of the output peak (up to ~1e-3 of a
low channel's own peak, where the low-pass poles sit closest to z = 1).  The exponent
``c = 10^-0.60206`` is ``0.25`` to 5 digits and is taken as exactly 0.25 (the value the
papers state), evaluated as a double square root.

Presets (:data:`PRESETS`; regression constants as ``(p0, m)``):

================  =======================  =======================  ====================
parameter         ``lopezpoveda2001``      ``jepsen2008``           ``paulick2024``
================  =======================  =======================  ====================
CF_lin            (-0.06762, 1.01679)      (-0.06762, 1.01679)      as jepsen2008
BW_lin            (0.03728, 0.78563)       (0.03728, 0.75)          as jepsen2008
g                 (4.20405, -0.47909)      (4.20405, -0.47909)      as jepsen2008
LP_lin cut-off    (-0.06762, 1.01679)      (-0.06762, 1.01)         as jepsen2008
CF_nlin           (-0.05252, 1.01650)      (-0.05252, 1.01650)      as jepsen2008
BW_nlin           (-0.03193, 0.77426)      (-0.03193, 0.77)         as jepsen2008
LP_nlin cut-off   (-0.05252, 1.01650)      (-0.05252, 1.01650)      as jepsen2008
a                 (1.40298, 0.81916)       same, CF <= 1.5 kHz      as jepsen2008
b                 (1.61912, -0.81867)      same, CF <= 1.5 kHz      as jepsen2008
c                 (-0.60206, 0)            (-0.60206, 0)            as jepsen2008
GT lin / LP lin   3 / 4                    2 / 4                    2 / 4
GT nlin b/a, LP   3 / 3, 3                 2 / 2, 1                 2 / 2, 1
grid              80-8000 Hz, 1 ERB        80-8000 Hz, 1 ERB        250-8000 Hz, 50 ch.
================  =======================  =======================  ====================

Sources: LP&M 2001 Table III (average human regression; digits as in the AMT
``arg_drnl``; cascade lengths 3 / 4 / 3 / 3 as in the DSAM parameter file
``BM_DRNLHuman.par`` that implements LP&M 2001), Jepsen et al. 2008 Table I (modified
bandwidth and low-pass slopes, a/b frozen above 1.5 kHz).  The cascade lengths of
``jepsen2008`` are those of Jepsen's own DRNL implementation distributed with the AMT
(``drnl.m`` / ``getDRNLparam.m``, "DRNL for normal hearing, Morten 2007"); Paulick et al.
(2024) keep that DRNL (AMT 1.6 ``paulick2024_drnl``, model 'paulick2024': 2 / 4 / 2 / 1
with the 2008 constants), so ``jepsen2008`` and ``paulick2024`` differ only in their default
channel grid (Paulick et al.: 50 channels equally spaced on the ERB-rate scale from 250 Hz
to 8 kHz, AMT 1.6 ``arg_paulick2024``).

Differences from the seed (torch_amt ``DRNLFilterbank``) and from the AMT code, with the
reason:

1. a, b above 1 kHz: the seed (like ``paulick2024_drnl.m`` and ``getDRNLparam.m``) uses
   the CF regression for CF <= 1000 Hz and the 1500-Hz values above 1000 Hz, which
   makes a and b jump at 1 kHz and gives channels between 1 and 1.5 kHz the 1.5-kHz
   values.  Jepsen et al. (2008) freeze a and b *above 1.5 kHz*; this module evaluates
   them at ``min(CF, ab_limit_hz)`` (continuous).  ``ab_switch_hz=1000`` in a preset
   reproduces the code's switch.
2. Seed ``model='jepsen2008'`` uses cascades of 3 / 4 / 3 / 3 sections: these are the
   LP&M 2001 cascade lengths (preset ``lopezpoveda2001`` here), not those of Jepsen's
   implementation (2 / 4 / 2 / 1, preset ``jepsen2008``).  AMT 1.6's 'jepsen2008'
   switch is ``get_preset('jepsen2008', n_gt_lin=3, n_gt_nlin_before=3,
   n_gt_nlin_after=3, n_lp_nlin=3, ab_switch_hz=1000)``.
3. Seed gammatone: a complex all-pole cascade ``b0 / (1 - alpha z^-1)^n`` with
   ``b0 = (1 - e^-phi)^n`` whose real part is taken, documented as "unit gain at DC";
   the AMT 'classic' design that the reference DRNL code calls is the cascade of real
   two-pole/one-zero sections above, each with 0 dB gain at its centre frequency.
   This module implements the latter, as second-order sections (the AMT code multiplies
   the sections out into one high-order polynomial, which is numerically worse).
4. Seed 'HIx' subject is documented as "purely compressive"; with ``a = 0`` the
   broken stick returns ``min(0, b|x|^c) = 0``, so the nonlinear path is silent and the
   DRNL reduces to its linear path (no compression) - implemented and documented so.
5. The seed clips low-pass cut-offs to 0.9999 * fs/2 silently; here any centre or
   cut-off frequency at or above fs/2 is a ``ValueError``.
6. The seed's channel grid interpolates ``n_channels`` between flow and fhigh only when
   the 1-ERB grid has a different count, and its Paulick2024 documentation gives a
   125-Hz lower limit; here a grid is either ``n_channels`` points equally spaced on
   the ERB-rate scale including both ends (AMT ``erbspace``), or ``spacing``-ERB steps
   (AMT ``erbspacebw``), or explicit ``fc``.
7. The seed's Paulick2024 overview writes the nonlinear path as a power law with
   exponent 0.2 on a 4th-order gammatone; the DRNL used there is the broken stick with
   c = 0.25 between 2-section cascades (as implemented here).
8. The seed's ``FastDRNLFilterbank`` (FFT convolution with truncated impulse
   responses) is not reproduced: the IIR sections here are exact and streamable.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numba
import numpy as np

from ..engine.backend import Kernels, kernel_method
from ..engine.jit import INLINE as _INLINE
from ..engine.jit import JIT as _JIT
from ..engine.stage import Stage
from .erb import erb_number, erb_space, erb_to_hz

__all__ = ["DRNLPreset", "PRESETS", "get_preset", "DRNLParams", "DRNLCoeffs", "DRNL",
           "design", "path_responses", "gammatone_section", "butter2_lowpass",
           "flat_stapes_scale", "STAPES_PEAK_VELOCITY_1KHZ_0DB"]

#: Stapes peak velocity (m/s) for a 1-kHz tone at 0 dB SPL, LP&M 2001 Fig. 2b (points
#: derived from Goode et al. 1994; value as tabulated by the AMT ``data_lopezpoveda2001``).
STAPES_PEAK_VELOCITY_1KHZ_0DB = 8.235e-9

_P_REF = 20e-6  # Pa, 0 dB SPL


def flat_stapes_scale(spl_ref: float = 100.0,
                      v0: float = STAPES_PEAK_VELOCITY_1KHZ_0DB) -> float:
    """Flat factor from a digital signal (RMS 1 = ``spl_ref`` dB SPL) to stapes velocity.

    A sinusoid of RMS ``r`` has the level ``L = 20 log10(r) + spl_ref`` dB SPL and, by
    LP&M 2001 Fig. 2b, a stapes peak velocity ``v0 * 10^(L/20)``; its digital peak is
    ``sqrt(2) r``, so the instantaneous factor is ``v0 * 10^(spl_ref/20) / sqrt(2)``
    (exact at 1 kHz for ``v0`` = :data:`STAPES_PEAK_VELOCITY_1KHZ_0DB`; use as
    ``DRNL(..., input_scale=flat_stapes_scale())``).
    """
    return float(v0 * 10.0 ** (spl_ref / 20.0) / math.sqrt(2.0))


@dataclass(frozen=True)
class DRNLPreset:
    """One DRNL parameter set.  Regressions are ``(p0, m)``: ``p = 10^p0 * CF^m``.

    cf_lin, bw_lin, lp_lin, gain     : linear path GT centre (Hz), GT bandwidth (Hz),
                                       low-pass cut-off (Hz), gain.
    cf_nlin, bw_nlin, lp_nlin        : nonlinear path GT centre, bandwidth, low-pass
                                       cut-off (the same GT before and after the stick).
    a, b, c                          : broken-stick constants (b in (m/s)^(1-c)).
    n_gt_lin, n_lp_lin               : cascade lengths, linear path.
    n_gt_nlin_before, n_gt_nlin_after, n_lp_nlin : cascade lengths, nonlinear path.
    ab_limit_hz   : a and b are evaluated at ``min(CF, ab_limit_hz)`` (None: no limit).
    ab_switch_hz  : CF above which the limit applies (None: ``ab_limit_hz``, i.e.
                    continuous; 1000 reproduces the switch of the AMT/Jepsen code).
    flow, fhigh, spacing, n_channels : default channel grid (n_channels wins if set).
    """

    name: str
    cf_lin: tuple
    bw_lin: tuple
    lp_lin: tuple
    gain: tuple
    cf_nlin: tuple
    bw_nlin: tuple
    lp_nlin: tuple
    a: tuple
    b: tuple
    c: tuple
    n_gt_lin: int
    n_lp_lin: int
    n_gt_nlin_before: int
    n_gt_nlin_after: int
    n_lp_nlin: int
    ab_limit_hz: float | None = None
    ab_switch_hz: float | None = None
    flow: float = 80.0
    fhigh: float = 8000.0
    spacing: float = 1.0
    n_channels: int | None = None


_LPM2001 = DRNLPreset(
    name="lopezpoveda2001",
    cf_lin=(-0.06762, 1.01679), bw_lin=(0.03728, 0.78563), lp_lin=(-0.06762, 1.01679),
    gain=(4.20405, -0.47909),
    cf_nlin=(-0.05252, 1.01650), bw_nlin=(-0.03193, 0.77426), lp_nlin=(-0.05252, 1.01650),
    a=(1.40298, 0.81916), b=(1.61912, -0.81867), c=(-0.60206, 0.0),
    n_gt_lin=3, n_lp_lin=4, n_gt_nlin_before=3, n_gt_nlin_after=3, n_lp_nlin=3,
)

_JEPSEN2008 = dataclasses.replace(
    _LPM2001, name="jepsen2008",
    bw_lin=(0.03728, 0.75), lp_lin=(-0.06762, 1.01), bw_nlin=(-0.03193, 0.77),
    n_gt_lin=2, n_lp_lin=4, n_gt_nlin_before=2, n_gt_nlin_after=2, n_lp_nlin=1,
    ab_limit_hz=1500.0,
)

_PAULICK2024 = dataclasses.replace(_JEPSEN2008, name="paulick2024", flow=250.0,
                                   fhigh=8000.0, n_channels=50)

#: Named parameter sets (see the module docstring for sources).
PRESETS = {p.name: p for p in (_LPM2001, _JEPSEN2008, _PAULICK2024)}


def get_preset(name: str, **overrides) -> DRNLPreset:
    """A copy of preset ``name`` with fields replaced by ``overrides``."""
    if name not in PRESETS:
        raise ValueError(f"unknown DRNL preset {name!r}; choose one of {sorted(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **overrides)


@dataclass(frozen=True)
class DRNLParams:
    """User parameters of the DRNL stage.

    fs          : sample rate, Hz.
    preset      : a :data:`PRESETS` name or a :class:`DRNLPreset`.
    flow, fhigh : channel range, Hz (None: the preset's).
    spacing     : channel spacing in ERB numbers (AMT ``erbspacebw``; None: preset's).
    n_channels  : number of channels equally spaced on the ERB-rate scale from flow to
                  fhigh inclusive (AMT ``erbspace``); wins over ``spacing``.
    basef       : a frequency that must be on the grid, Hz (selects the ``spacing``
                  grid, with the preset's spacing unless given).
    fc          : explicit characteristic frequencies, Hz (overrides the grid).
    subject     : 'NH' (normal hearing) or 'HIx' (a = 0: nonlinear path silent, the
                  DRNL is linear; AMT 1.6 ``paulick2024_drnl``).
    input_scale : factor applied to the input to get stapes velocity in m/s (1.0: the
                  input is already stapes velocity; see :func:`flat_stapes_scale`).
    paths       : 'both' (default), 'lin' or 'nlin' (one path only, for analysis).
    """

    fs: float
    preset: str | DRNLPreset = "paulick2024"
    flow: float | None = None
    fhigh: float | None = None
    spacing: float | None = None
    n_channels: int | None = None
    basef: float | None = None
    fc: tuple | None = None
    subject: str = "NH"
    input_scale: float = 1.0
    paths: str = "both"


@dataclass(frozen=True)
class DRNLCoeffs:
    """Designed DRNL: per-channel parameters (C,) and section coefficients.

    fc (CF), cf_lin, bw_lin, lp_lin, gain, cf_nlin, bw_nlin, lp_nlin, a, b, c, knee:
    knee = ``(b/a)^(1/(1-c))`` is the broken-stick input (m/s) where ``a|x| = b|x|^c``.
    ``sections[dtype]`` holds the kernel arrays for float32 / float64.
    """

    fs: float
    preset: DRNLPreset
    fc: np.ndarray
    cf_lin: np.ndarray
    bw_lin: np.ndarray
    lp_lin: np.ndarray
    gain: np.ndarray
    cf_nlin: np.ndarray
    bw_nlin: np.ndarray
    lp_nlin: np.ndarray
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    knee: np.ndarray
    counts: tuple  # (n_gt_lin, n_lp_lin, n_gt_nlin_before, n_gt_nlin_after, n_lp_nlin)
    do_lin: bool
    do_nlin: bool
    input_scale: float
    quarter: bool  # every c == 0.25 (the kernel then takes |x|^c as a double square root)
    sections: dict = dataclasses.field(repr=False)

    @property
    def n_sections_lin(self) -> int:
        return self.counts[0] + self.counts[1]

    @property
    def n_sections_nlin(self) -> int:
        return self.counts[2] + self.counts[3] + self.counts[4]


def _reg(pm, f):
    """``10^p0 * f^m`` (regression of LP&M 2001 / Jepsen et al. 2008)."""
    p0, m = pm
    return 10.0 ** p0 * np.asarray(f, dtype=np.float64) ** m


def gammatone_section(f_gt, bw, fs):
    """Real gammatone section(s) ``[b0, b1, b2, a1, a2]`` (5, C) - see module docstring.

    ``r = exp(-2 pi bw/fs)``, ``theta = 2 pi f_gt/fs``; numerator ``G (1 - r cos theta
    z^-1)``, denominator ``1 - 2 r cos theta z^-1 + r^2 z^-2``, ``G`` for 0 dB at f_gt.
    """
    f_gt = np.asarray(f_gt, dtype=np.float64)
    r = np.exp(-2.0 * np.pi * np.asarray(bw, dtype=np.float64) / fs)
    th = 2.0 * np.pi * f_gt / fs
    zi = np.exp(-1j * th)  # z^-1 on the unit circle at f_gt
    den = 1.0 - 2.0 * r * np.cos(th) * zi + r * r * zi * zi
    num = 1.0 - r * np.cos(th) * zi
    G = np.abs(den) / np.abs(num)
    zero = np.zeros_like(r)
    return np.stack([G, -G * r * np.cos(th), zero, -2.0 * r * np.cos(th), r * r])


def butter2_lowpass(fcut, fs):
    """Second-order Butterworth low-pass sections ``[b0, b1, b2, a1, a2]`` (5, C):
    bilinear transform of ``1/(s^2 + sqrt(2) s + 1)`` with ``K = tan(pi fcut/fs)``."""
    K = np.tan(np.pi * np.asarray(fcut, dtype=np.float64) / fs)
    K2 = K * K
    q = math.sqrt(2.0)
    norm = 1.0 / (1.0 + q * K + K2)
    b0 = K2 * norm
    return np.stack([b0, 2.0 * b0, b0, 2.0 * (K2 - 1.0) * norm, (1.0 - q * K + K2) * norm])


def _grid(params: DRNLParams, pre: DRNLPreset) -> np.ndarray:
    if params.fc is not None:
        return np.asarray(params.fc, dtype=np.float64).ravel()
    flow = pre.flow if params.flow is None else params.flow
    fhigh = pre.fhigh if params.fhigh is None else params.fhigh
    n = params.n_channels
    if n is not None and params.basef is not None:
        raise ValueError("basef needs a spacing grid; it cannot be combined with n_channels")
    if n is None and params.spacing is None and params.basef is None:
        n = pre.n_channels
    if n is not None:
        if int(n) != n or n < 1:
            raise ValueError(f"n_channels must be a positive integer, got {n}")
        if not (0 < flow <= fhigh):
            raise ValueError(f"need 0 < flow <= fhigh, got flow={flow}, fhigh={fhigh}")
        if n == 1:
            return np.array([float(flow)])
        return erb_to_hz(np.linspace(erb_number(flow), erb_number(fhigh), int(n)))
    spacing = pre.spacing if params.spacing is None else params.spacing
    return erb_space(flow, fhigh, spacing, params.basef)


def _as_preset(p) -> DRNLPreset:
    if isinstance(p, DRNLPreset):
        return p
    if isinstance(p, str):
        return get_preset(p)
    raise ValueError(f"preset must be a name or a DRNLPreset, got {type(p).__name__}")


def design(params: DRNLParams, n_in: int | None = None) -> DRNLCoeffs:
    """Per-channel DRNL parameters and section coefficients from ``params``."""
    fs = float(params.fs)
    if not (fs > 0 and math.isfinite(fs)):
        raise ValueError(f"fs must be > 0, got {params.fs}")
    pre = _as_preset(params.preset)
    counts = (pre.n_gt_lin, pre.n_lp_lin, pre.n_gt_nlin_before, pre.n_gt_nlin_after,
              pre.n_lp_nlin)
    if any(int(k) != k or k < 0 for k in counts):
        raise ValueError(f"cascade lengths must be integers >= 0, got {counts}")
    counts = tuple(int(k) for k in counts)
    if params.subject not in ("NH", "HIx"):
        raise ValueError(f"subject must be 'NH' or 'HIx', got {params.subject!r}")
    if params.paths not in ("both", "lin", "nlin"):
        raise ValueError(f"paths must be 'both', 'lin' or 'nlin', got {params.paths!r}")
    scale = float(params.input_scale)
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"input_scale must be finite and > 0, got {params.input_scale}")

    fc = _grid(params, pre)
    nyq = fs / 2.0
    if fc.size == 0 or np.any(~np.isfinite(fc)) or np.any(fc <= 0) or np.any(fc >= nyq):
        got = (f"{fc.size} from {np.min(fc):g} to {np.max(fc):g} Hz" if fc.size else "none")
        hint = ("" if params.fc is not None or not np.all(np.isfinite(fc)) or np.any(fc <= 0)
                else f"; pass fhigh={0.45 * fs:g} or lower")
        raise ValueError(f"DRNL filterbank at {fs:g} Hz: characteristic frequencies must lie "
                         f"in (0, fs/2 = {nyq:g} Hz), got {got}{hint}")

    cf_lin, bw_lin = _reg(pre.cf_lin, fc), _reg(pre.bw_lin, fc)
    lp_lin, gain = _reg(pre.lp_lin, fc), _reg(pre.gain, fc)
    cf_nlin, bw_nlin, lp_nlin = _reg(pre.cf_nlin, fc), _reg(pre.bw_nlin, fc), _reg(pre.lp_nlin, fc)
    for name, v in (("CF_lin", cf_lin), ("LP_lin cut-off", lp_lin), ("CF_nlin", cf_nlin),
                    ("LP_nlin cut-off", lp_nlin)):
        if np.any(v >= nyq):
            i = int(np.argmax(v >= nyq))
            raise ValueError(
                f"DRNL channel CF={fc[i]:.1f} Hz: {name} = {v[i]:.1f} Hz is not below fs/2 = "
                f"{nyq:.1f} Hz; lower fhigh or raise fs")

    # broken-stick constants: a, b at min(CF, limit) above the switch frequency
    f_ab = fc.copy()
    if pre.ab_limit_hz is not None:
        switch = pre.ab_limit_hz if pre.ab_switch_hz is None else pre.ab_switch_hz
        f_ab = np.where(fc > switch, float(pre.ab_limit_hz), fc)
    a = _reg(pre.a, f_ab)
    b = _reg(pre.b, f_ab)
    c = _reg(pre.c, fc)
    # -0.60206 is log10(0.25) to 5 decimals; the papers' exponent is 0.25 (LP&M 2001,
    # Jepsen et al. 2008), taken exactly (the kernel then uses a double square root)
    c = np.where(np.abs(c - 0.25) <= 1e-7, 0.25, c)
    if params.subject == "HIx":
        a = np.zeros_like(a)
    if np.any(b <= 0) or np.any(c <= 0):
        raise ValueError("broken-stick b and c must be > 0")
    with np.errstate(divide="ignore", invalid="ignore"):
        knee = np.where((a > 0) & (c < 1.0), (b / np.where(a > 0, a, 1.0)) ** (1.0 / (1.0 - c)),
                        0.0)
    # the kernel skips b|x|^c only where |x| is clearly below the knee (margin >> eps)
    knee_test = knee * (1.0 - 1e-5)

    gtl = gammatone_section(cf_lin, bw_lin, fs)
    lpl = butter2_lowpass(lp_lin, fs)
    gtn = gammatone_section(cf_nlin, bw_nlin, fs)
    lpn = butter2_lowpass(lp_nlin, fs)
    bs = np.stack([a, b, c, knee_test])
    sections = {}
    for dt in (np.float32, np.float64):
        def cast(v, dt=dt):
            return np.ascontiguousarray(v, dtype=dt)

        sections[np.dtype(dt)] = dict(
            gain=cast(gain), gtl=cast(gtl), lpl=cast(lpl), gtn=cast(gtn), lpn=cast(lpn),
            bs=cast(bs), scale=np.array([scale], dtype=dt))
    return DRNLCoeffs(fs, pre, fc, cf_lin, bw_lin, lp_lin, gain, cf_nlin, bw_nlin, lp_nlin,
                      a, b, c, knee, counts, params.paths in ("both", "lin"),
                      params.paths in ("both", "nlin"), scale, bool(np.all(c == 0.25)),
                      sections)


def _section_response(sec: np.ndarray, f, fs) -> np.ndarray:
    """Complex response (C, F) of the sections (5, C) at frequencies f (Hz)."""
    zi = np.exp(-2j * np.pi * np.atleast_1d(np.asarray(f, dtype=np.float64)) / fs)[None, :]
    b0, b1, b2, a1, a2 = (s[:, None] for s in sec)
    return (b0 + b1 * zi + b2 * zi ** 2) / (1.0 + a1 * zi + a2 * zi ** 2)


def path_responses(coeffs: DRNLCoeffs, f) -> dict:
    """Small-signal complex responses (C, F) at frequencies ``f`` (Hz), from the design.

    Keys: ``'lin'`` - linear path (gain, GT and LP cascades); ``'gt_before'`` - the GT
    cascade in front of the broken stick; ``'nlin_low'`` - nonlinear path below the knee
    (where the stick is the gain ``a``); ``'nlin_after'`` - the part after the stick
    (GT and LP cascades).  All per unit of *stapes velocity* (``input_scale`` excluded).
    """
    fs = coeffs.fs
    n1, n2, n3, n4, n5 = coeffs.counts
    gt_l = gammatone_section(coeffs.cf_lin, coeffs.bw_lin, fs)
    lp_l = butter2_lowpass(coeffs.lp_lin, fs)
    gt_n = gammatone_section(coeffs.cf_nlin, coeffs.bw_nlin, fs)
    lp_n = butter2_lowpass(coeffs.lp_nlin, fs)
    Hgl, Hll = _section_response(gt_l, f, fs), _section_response(lp_l, f, fs)
    Hgn, Hln = _section_response(gt_n, f, fs), _section_response(lp_n, f, fs)
    lin = coeffs.gain[:, None] * Hgl ** n1 * Hll ** n2
    before = Hgn ** n3
    after = Hgn ** n4 * Hln ** n5
    return {"lin": lin, "gt_before": before, "nlin_after": after,
            "nlin_low": coeffs.a[:, None] * before * after}


# ----------------------------------------------------------------------------------------
# compiled kernel
#
# The two memories of every section live in two separate arrays (s1, s2): with both in
# one array the compiler cannot rule out overlap of the rows it reads and writes and
# falls back to scalar code.


@numba.njit(**_INLINE)
def _biquad_row(co, s1, s2, bi, k, v):
    """One transposed-direct-form-II biquad per channel, in place on ``v`` (C,):
    ``out = b0 v + s1;  s1 = b1 v - a1 out + s2;  s2 = b2 v - a2 out``.
    co: (5, C) [b0 b1 b2 a1 a2]; s1, s2: (B, S, C) memories of section ``k``, batch ``bi``."""
    for c in range(v.shape[0]):
        vin = v[c]
        out = co[0, c] * vin + s1[bi, k, c]
        s1[bi, k, c] = co[1, c] * vin - co[3, c] * out + s2[bi, k, c]
        s2[bi, k, c] = co[2, c] * vin - co[4, c] * out
        v[c] = out


@numba.njit(**_JIT)
def drnl_kernel(scale, gain, gtl, lpl, gtn, lpn, bs, quarter, n_gl, n_ll, n_gb, n_ga, n_ln,
                do_lin, do_nlin, l1, l2, n1, n2, x, y, v, w):
    """DRNL of Lopez-Poveda & Meddis (2001), one sample at a time, all channels.

    scale        : (1,)   input scale (to stapes velocity, m/s).
    gain         : (C,)   linear-path gain g.
    gtl, lpl     : (5, C) linear-path GT section and LP section [b0 b1 b2 a1 a2].
    gtn, lpn     : (5, C) nonlinear-path GT section (before and after) and LP section.
    bs           : (4, C) broken stick a, b, c and the knee below which a|x| <= b|x|^c.
    quarter      : bool, every c == 0.25: ``|x|^c`` as ``sqrt(sqrt(|x|))`` (vectorises).
    n_*          : cascade lengths (GT lin, LP lin, GT before, GT after, LP nlin).
    do_lin, do_nlin : which paths contribute.
    l1, l2       : (B, n_gl + n_ll, C) linear-path section memories (advanced in place).
    n1, n2       : (B, n_gb + n_ga + n_ln, C) nonlinear-path section memories.
    x            : (B, T) input;  y : (B, T, C) output;  v, w : (C,) scratch.
    """
    B, T = x.shape
    C = gain.shape[0]
    s = scale[0]
    ba = bs[0]
    bb = bs[1]
    bc = bs[2]
    bk = bs[3]
    for bi in range(B):
        for t in range(T):
            xv = x[bi, t] * s
            if do_lin:
                for c in range(C):
                    v[c] = gain[c] * xv
                for k in range(n_gl):
                    _biquad_row(gtl, l1, l2, bi, k, v)
                for k in range(n_ll):
                    _biquad_row(lpl, l1, l2, bi, n_gl + k, v)
            if do_nlin:
                for c in range(C):
                    w[c] = xv
                for k in range(n_gb):
                    _biquad_row(gtn, n1, n2, bi, k, w)
                # broken stick: sign(u) * min(a|u|, b|u|^c)
                if quarter:
                    for c in range(C):
                        u = w[c]
                        au = abs(u)
                        r = ba[c] * au
                        q = bb[c] * math.sqrt(math.sqrt(au))
                        r = q if q < r else r
                        w[c] = r if u >= 0 else -r
                else:
                    for c in range(C):
                        u = w[c]
                        au = abs(u)
                        r = ba[c] * au
                        if au > bk[c]:
                            q = bb[c] * au ** bc[c]
                            r = q if q < r else r
                        w[c] = r if u >= 0 else -r
                for k in range(n_ga):
                    _biquad_row(gtn, n1, n2, bi, n_gb + k, w)
                for k in range(n_ln):
                    _biquad_row(lpn, n1, n2, bi, n_gb + n_ga + k, w)
            if do_lin and do_nlin:
                for c in range(C):
                    y[bi, t, c] = v[c] + w[c]
            elif do_lin:
                for c in range(C):
                    y[bi, t, c] = v[c]
            elif do_nlin:
                for c in range(C):
                    y[bi, t, c] = w[c]
            else:
                for c in range(C):
                    y[bi, t, c] = 0.0


def _triton():
    """The Triton twin (:mod:`rtamt.filterbank.drnl_triton`), imported on first binding."""
    from . import drnl_triton
    return (drnl_triton.drnl_kernel,)


class DRNL(Stage):
    """Streaming DRNL filterbank: stapes velocity ``(T,)``/``(batch, T)`` ->
    BM velocity ``(C, T)``/``(batch, C, T)`` (m/s).

    State: ``lin_s1``, ``lin_s2`` (batch, n_gt_lin + n_lp_lin, C) and ``nlin_s1``,
    ``nlin_s2`` (batch, n_gt_nlin_before + n_gt_nlin_after + n_lp_nlin, C) - the two
    transposed-direct-form-II memories of every section of each path, in cascade order.
    Silence is the initial state.  Runs on the numba backend (numpy arrays) and on the
    Triton backend (torch tensors on a device; :mod:`rtamt.filterbank.drnl_triton`).
    """

    name = "drnl"
    in_kind = "signal"
    Params = DRNLParams
    design = staticmethod(design)
    kernels = Kernels(numba=(drnl_kernel,), triton=_triton)

    @property
    def fc(self) -> np.ndarray:
        return self.coeffs.fc

    @classmethod
    def grad_rule(cls):
        from .drnl_grad import DRNLGrad
        return DRNLGrad

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        C = coeffs.fc.size
        sl, sn = coeffs.n_sections_lin, coeffs.n_sections_nlin
        return {"lin_s1": np.zeros((batch, sl, C), dtype),
                "lin_s2": np.zeros((batch, sl, C), dtype),
                "nlin_s1": np.zeros((batch, sn, C), dtype),
                "nlin_s2": np.zeros((batch, sn, C), dtype)}

    @staticmethod
    def n_out(coeffs, n_in):
        return coeffs.fc.size

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        B, T = x.shape
        C = coeffs.fc.size
        n1, n2, n3, n4, n5 = coeffs.counts
        k = stage.kern
        y = k.buffer(out, (B, T, C), x)
        s = coeffs.sections[k.dtype(x)]
        c = k.coef
        k.drnl_kernel(c(s["scale"]), c(s["gain"]), c(s["gtl"]), c(s["lpl"]), c(s["gtn"]),
                      c(s["lpn"]), c(s["bs"]), coeffs.quarter, n1, n2, n3, n4, n5,
                      coeffs.do_lin, coeffs.do_nlin, state["lin_s1"], state["lin_s2"],
                      state["nlin_s1"], state["nlin_s2"], x, y, k.scratch(C, x),
                      k.scratch(C, x))
        return y

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("drnl", dict(fs=48000.0, n_channels=6)),)
