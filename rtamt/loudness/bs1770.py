"""Streaming programme-loudness meter after ITU-R BS.1770-4 and EBU R128: momentary,
short-term and integrated loudness (EBU Tech 3341), loudness range (EBU Tech 3342) and
maximum true peak (BS.1770-4 Annex 2).

The meter is built from three stages, each a module with its ``Params``, design and numba
kernel (the stage contract of ``docs/architecture.md``):

* :class:`rtamt.loudness.kweighting.KWeighting` -- the K-weighting filter (BS.1770-4
  Annex 1, Tables 1 and 2 at 48 kHz; at any other rate fitted to the 48 kHz response);
* :class:`rtamt.loudness.gating.GatingBlocks` -- the 100 ms step clock and the power of
  the 400 ms (momentary) and 3 s (short-term) windows, channels weighted by ``G_i``
  (BS.1770-4 eqs. (1)-(2), Table 3);
* :class:`rtamt.loudness.truepeak.TruePeak` -- true peak and sample peak per channel
  (BS.1770-4 Annex 2): by default a windowed-sinc interpolator to >= 768 kHz with
  parabolic refinement (within 0.033 dB of a tone's peak up to 0.4 fs at any rate up to
  192 kHz); ``truepeak='bs1770'``: the Annex's 4x example filter.

The meter keeps the gated statistics: the integrated loudness (BS.1770-4 eqs. (3)-(7):
400 ms gating blocks every 100 ms, absolute gate -70 LUFS, relative gate -10 LU, strict)
and the loudness range (Tech 3342: the short-term values every ``lra_hop`` steps of
100 ms, absolute gate -70 LUFS, relative gate -20 LU, 95th minus 10th percentile), either
in fixed-size histograms of 0.01 LU bins (``mode='histogram'``, the default: the state
has the same size after a day as after a minute) or as the exact list of values
(``mode='exact'``: grows by 10 values a second; see :mod:`rtamt.loudness.gating` for the
histogram's resolution).

Channels (BS.1770-4/-5 Table 3 and, for the layouts of ITU-R BS.2051, the
position-dependent weights of BS.1770-5 Annex 3; EBU Tech 3341 section 2.10): 1.41
(+1.5 dB) for a channel beside the listener (elevation below 30 degrees, azimuth 60 to 120
degrees: Ls, Rs of 5.1, the side pair Lss, Rss of 7.1), 1.0 everywhere else (L, R, C, the
rear pair of 7.1, the upper layer), LFE excluded (weight 0); names, layouts and the rule
in :mod:`rtamt.loudness.layouts`.  The layout is given by ``layout`` (a
:data:`~rtamt.loudness.layouts.LAYOUTS` name: ``'mono'``, ``'stereo'``, ``'quad'``,
``'5.1'``, ``'5.1(film)'``, ``'7.1'``, ``'7.1.4'``, ... or a tuple of channel names) or by
``weights``; without either it follows from the channel count only where one layout is
the convention: 1 mono, 2 stereo, 5 = L R C Ls Rs, 6 = L R C LFE Ls Rs (the WAVE / SMPTE
order); any other count is refused (``ValueError`` naming the choices), never weighted
1.0 per channel.  ``weights`` overrides the layout's weights.

Time grid and conventions
-------------------------
The stream is cut into 100 ms sub-blocks; sub-block ``k`` (1-based) ends at sample
``e_k = floor(k fs / 10)``.  When sub-block ``k`` completes, one *step* is emitted at
stream time ``t_k = e_k / fs`` seconds: momentary ``M_k`` = loudness of samples
``[e_{k-4}, e_k)`` (``k >= 4``), short-term ``S_k`` = of ``[e_{k-30}, e_k)`` (``k >= 30``);
gating block ``j = k - 3`` is the momentary window, so the integrated loudness and the
loudness range change only at steps.

Samples before the stream start are absent, not silence: a window is reported once it
is full.  **Not yet defined** is ``None`` in scalar fields and ``NaN`` in step arrays;
the loudness of **digital silence** is ``-inf`` LUFS (also the integrated value while no
gating block passes the absolute gate); the loudness range is 0 LU while no short-term
value passes its gates.  :func:`lufs_or_none` maps ``-inf``/``NaN`` to ``None`` for JSON.

Filtering runs in float64 for float32 and float64 input alike, and any partition of a
stream into blocks (down to single samples) gives the bits of one call.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from fractions import Fraction
from typing import Any

import numpy as np

from ..engine import contract as _C
from ..engine.backend import block_movers, require_numpy, to_numpy
from ..engine.contract import RtamtInputError, check_float_dtype, reject_nonfinite
from ..engine.denormal import ensure_ftz
from ..engine.stage import StageGroup
from . import gating as _G
from . import layouts as _L
from .gatedstats import MODES, GatedStatistics, StatisticsParams, gated_i, gated_lra
from .gating import (
    ABSOLUTE_GATE_LUFS,
    LOUDNESS_OFFSET_DB,
    N_BINS,
    N_MOMENTARY,
    N_SHORT_TERM,
    RELATIVE_GATE_LU,
    GatingBlocks,
    GatingParams,
)
from .kweighting import (
    BS1770_48K_PREFILTER,
    BS1770_48K_RLB,
    PUBLISHED_FS,
    RLB_F0_HZ,
    RLB_GAIN,
    RLB_Q,
    SHELF_F0_HZ,
    SHELF_Q,
    SHELF_VB,
    SHELF_VH,
    KWeighting,
    KWeightingParams,
    k_weighting_sos,
    k_weighting_sos_bilinear,
)
from .truepeak import METHODS as TRUEPEAK_METHODS
from .truepeak import TruePeak, TruePeakParams, dbtp

__all__ = [
    "Params", "Coeffs", "LoudnessMeter", "LoudnessResult", "LoudnessStatistics",
    "LoudnessInputError", "REASON_TOO_SHORT", "REASON_BELOW_GATE",
    "design", "k_weighting_sos", "default_weights", "layout_weights", "lufs_or_none",
    "loudness_of_energy", "BS1770_48K_PREFILTER", "BS1770_48K_RLB",
    "ABSOLUTE_GATE_LUFS", "RELATIVE_GATE_LU", "LAYOUTS", "CHANNEL_WEIGHTS",
    # re-exported for the users of the former single-module meter
    "RLB_F0_HZ", "RLB_GAIN", "RLB_Q", "SHELF_F0_HZ", "SHELF_Q", "SHELF_VB", "SHELF_VH",
    "N_MOMENTARY", "N_SHORT_TERM", "LOUDNESS_OFFSET_DB",
]

SURROUND_WEIGHT = _L.SIDE_WEIGHT    #: BS.1770-4 Table 3, G for Ls / Rs
#: BS.1770 weights of the named channels (LFE excluded: Tech 3341 section 2.10; every name
#: and its position in :data:`rtamt.loudness.layouts.SPEAKERS`)
CHANNEL_WEIGHTS = {**{n: s.weight for n, s in _L.SPEAKERS.items()}, "M": 1.0}
#: named layouts, channel names in stream order (:data:`rtamt.loudness.layouts.LAYOUTS`)
LAYOUTS = _L.LAYOUTS
_DEFAULT_LAYOUT = _L.API_DEFAULTS
_NAME = "bs1770"


class LoudnessInputError(RtamtInputError):
    """A block was rejected before it touched the meter's state (a ``ValueError``).

    The message names the block index in the stream and, for non-finite values,
    the channel and sample of the first offending value.
    """


# ---------------------------------------------------------------- design
def layout_weights(layout) -> tuple[float, ...]:
    """BS.1770 weights ``G_i`` of a layout name (:data:`LAYOUTS`) or a sequence of channel
    names (:mod:`rtamt.loudness.layouts`); ``ValueError`` for an unknown one."""
    try:
        return _L.weights_of(_L.layout_names(layout))
    except _L.LayoutError as e:
        raise ValueError(f"{_NAME}: layout {layout!r}: {e}") from None


def default_weights(channels: int) -> tuple[float, ...]:
    """BS.1770 weights ``G_i`` of the default layout of ``channels`` channels (1 mono,
    2 stereo, 5 = L R C Ls Rs, 6 = L R C LFE Ls Rs); ``ValueError`` naming the layouts of
    that count for any other (no layout is the convention there)."""
    try:
        return _L.choose(channels, defaults=tuple(_DEFAULT_LAYOUT), how=_API_HOW).weights
    except _L.LayoutError as e:
        raise ValueError(f"{_NAME}: {e}") from None


_API_HOW = ("layout=NAME or a tuple of channel names (rtamt.loudness.layouts), or "
            "weights=(G_1, ..., G_C)")


@dataclasses.dataclass(frozen=True)
class Params:
    """What a user sets.

    fs: sample rate (Hz), > 2 * 1682 Hz, whose 100 ms grid repeats within 4096 steps
        (any integer rate).
    channels: number of input channels ``C`` (blocks are ``(C, T)``; ``(T,)`` if ``C == 1``).
    weights: BS.1770 channel weights ``G_i`` (length ``C``, >= 0); ``None``: the layout's.
    layout: a :data:`LAYOUTS` name (``'mono'``, ``'stereo'``, ``'quad'``, ``'5.1'``,
        ``'5.1(film)'``, ``'7.1'``, ``'7.1.4'``, ...) or a tuple of channel names
        (``L R C LFE Ls Rs Lss Rss Lrs Rrs Ltf ...``, BS.2051 labels, WAVE names);
        ``None``: the default of the channel count (1, 2, 5, 6; refused for others).
    mode: ``'histogram'`` (fixed-size state) or ``'exact'`` (every gating block kept).
    lra_hop: short-term values for the loudness range every ``lra_hop`` steps of 100 ms
        (Tech 3342 asks for at least 10 Hz, ``lra_hop=1``; libebur128 uses 1 s, 10).
    truepeak: the true-peak interpolator, ``'sinc'`` (windowed sinc to >= 768 kHz, refined:
        within 0.033 dB of a tone's peak up to 0.4 fs) or ``'bs1770'`` (BS.1770-4 Annex 2's
        4x example filter, as rtamt measured before; its snapshots load only here); see
        :mod:`rtamt.loudness.truepeak`.
    """

    fs: float = 48000.0
    channels: int = 2
    weights: tuple[float, ...] | None = None
    layout: Any = None
    mode: str = "histogram"
    lra_hop: int = 1
    truepeak: str = "sinc"

    def __post_init__(self):
        KWeightingParams(self.fs)          # the rate check
        _G.sub_block_lengths(float(self.fs), 10 * _G.FINE)
        object.__setattr__(self, "fs", float(self.fs))
        if int(self.channels) != self.channels or self.channels < 1:
            raise ValueError(f"{_NAME}: channels must be a positive integer, got {self.channels!r}")
        object.__setattr__(self, "channels", int(self.channels))
        lay = self.layout
        if lay is not None:
            lay = lay if isinstance(lay, str) else tuple(lay)
            object.__setattr__(self, "layout", lay)
            n = len(layout_weights(lay))
            if n != self.channels:
                raise ValueError(f"{_NAME}: layout {lay!r} has {n} channels, the meter "
                                 f"measures {self.channels}")
        if self.weights is not None:
            w = tuple(float(v) for v in self.weights)
        elif lay is not None:
            w = layout_weights(lay)
        else:
            w = default_weights(self.channels)
        if len(w) != self.channels:
            raise ValueError(f"{_NAME}: {len(w)} weights for {self.channels} channels")
        if not all(math.isfinite(v) and v >= 0.0 for v in w):
            raise ValueError(f"{_NAME}: weights must be finite and >= 0, got {w}")
        if not any(w):
            raise ValueError(f"{_NAME}: every channel weight is 0 (LFE only?), nothing "
                             f"would be measured: {w}")
        object.__setattr__(self, "weights", w)
        if self.mode not in MODES:
            raise ValueError(f"{_NAME}: mode must be one of {MODES}, got {self.mode!r}")
        if int(self.lra_hop) != self.lra_hop or not 1 <= self.lra_hop <= 10:
            raise ValueError(f"{_NAME}: lra_hop must be an integer 1..10 (steps of 100 ms), "
                             f"got {self.lra_hop!r}")
        object.__setattr__(self, "lra_hop", int(self.lra_hop))
        if self.truepeak not in TRUEPEAK_METHODS:
            raise ValueError(f"{_NAME}: truepeak must be one of {TRUEPEAK_METHODS}, got "
                             f"{self.truepeak!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class Coeffs:
    """Designed once from :class:`Params` by :func:`design`; never changes.

    sos: ``(2, 6)`` K-weighting sections; weights: ``(C,)`` float64 ``G_i``;
    sub_lens: ``(P,)`` int64 lengths of one period of the 100 ms sub-blocks.
    """

    sos: np.ndarray
    weights: np.ndarray
    fs: float
    channels: int
    sub_lens: np.ndarray

    def edge(self, k: int) -> int:
        """Sample index where 100 ms sub-block ``k`` ends: ``floor(k fs / 10)``."""
        return math.floor(Fraction(self.fs) * k / 10)


def design(params: Params) -> Coeffs:
    """Pure design step: :class:`Params` -> :class:`Coeffs`."""
    return Coeffs(sos=k_weighting_sos(params.fs),
                  weights=np.asarray(params.weights, dtype=np.float64), fs=params.fs,
                  channels=params.channels, sub_lens=_G.sub_block_lengths(params.fs))


# ---------------------------------------------------------------- helpers
def loudness_of_energy(e):
    """``-0.691 + 10 log10(e)`` (LUFS) for the weighted mean square ``e = sum_i G_i z_i``
    (BS.1770-4 eq. (2)); ``e == 0`` -> ``-inf``.  Scalars give a float, arrays an array."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = LOUDNESS_OFFSET_DB + 10.0 * np.log10(np.asarray(e, dtype=np.float64))
    return float(out) if np.ndim(out) == 0 else out


def lufs_or_none(x):
    """JSON-friendly loudness: ``-inf`` / ``NaN`` / ``None`` -> ``None``, finite -> ``float``.

    Arrays (and lists) are mapped element-wise to a list.
    """
    if x is None:
        return None
    if isinstance(x, (np.ndarray, list, tuple)):
        return [lufs_or_none(v) for v in np.asarray(x, dtype=np.float64).ravel()]
    v = float(x)
    return v if math.isfinite(v) else None


def _scalar(v: float) -> float | None:
    return None if math.isnan(v) else v


def _lufs(e: float) -> float:
    """:func:`loudness_of_energy` of one power ``e >= 0`` (no numpy on the per-block path)."""
    return LOUDNESS_OFFSET_DB + 10.0 * math.log10(e) if e > 0.0 else -math.inf


def _dbtp_row(peaks: np.ndarray) -> np.ndarray:
    """``20 log10`` of a few linear peaks (-inf for 0) without numpy's error state."""
    return np.array([20.0 * math.log10(v) if v > 0.0 else -math.inf for v in peaks.tolist()])


#: :attr:`LoudnessResult.integrated_reason` before the first 400 ms gating block
REASON_TOO_SHORT = "too short"
#: :attr:`LoudnessResult.integrated_reason` when no gating block passes -70 LUFS
REASON_BELOW_GATE = "below the absolute gate"


def _reason(integrated: float | None) -> str | None:
    """Why an integrated loudness is empty (``None``: too short; ``-inf``: below the
    absolute gate); ``None`` for a loudness."""
    if integrated is None:
        return REASON_TOO_SHORT
    return REASON_BELOW_GATE if integrated == -math.inf else None


def _lufs_of(e: float) -> float | None:
    """Loudness (LUFS) of a statistic's power ``e``; ``None`` for 0 (not defined)."""
    return _lufs(e) if e > 0.0 else None


def _lra_of(lo: float, hi: float) -> float:
    """LRA (LU) of the percentile powers; 0.0 when no value passed the gates."""
    return 10.0 * math.log10(hi / lo) if lo > 0.0 else 0.0


@dataclasses.dataclass
class LoudnessResult:
    """What one call of :class:`LoudnessMeter` returns (loudness in LUFS, range in LU,
    peaks in dB TP / dBFS).

    momentary / short_term: the latest 400 ms / 3 s window loudness (state after
        this block's last completed 100 ms step; ``None`` until the first full window).
    integrated: gated loudness of the whole stream so far (``None`` before the first
        400 ms gating block; ``-inf`` while no block passes the absolute gate).
    step_time: ``(K,)`` float64 stream times (s) of the ``K`` 100 ms steps completed
        in this block (end of each window, ``e_k / fs``).
    step_momentary / step_short_term: ``(K,)`` float64 loudness at those steps
        (``NaN`` where the window is not yet full, ``-inf`` for silence).
    samples: total samples consumed by the stream (per channel), this block included.
    loudness_range: LRA (LU, EBU Tech 3342) of the stream so far (``None`` before the
        first short-term value).
    true_peak / sample_peak: maximum over channels since the stream began (dB TP /
        dBFS; ``-inf`` for silence); ``true_peak_channels`` / ``sample_peak_channels``:
        ``(C,)`` float64 per channel.
    max_momentary / max_short_term: the largest momentary / short-term loudness since the
        stream began, at 10 ms resolution (``None`` before the first full window).
    lra_stable: False during the first 60 s of the stream, when EBU Tech 3341 (section
        2.4) asks a meter to show that the loudness range is not yet stable.
    lra_low / lra_high: the 10th and 95th percentiles of the gated short-term loudness
        (LUFS, EBU Tech 3342 section 3.1; ``loudness_range = lra_high - lra_low``);
        ``None`` while no short-term value passes the gates.
    absolute_gate: the absolute gate of the integrated loudness and of the LRA (-70 LUFS,
        BS.1770-4 eq. (5), Tech 3342).
    relative_gate: the relative gate of the integrated loudness (LUFS: the loudness of
        the gating blocks above the absolute gate, -10 LU; BS.1770-4 eq. (6)); ``None``
        while no gating block passes the absolute gate.
    lra_gate: the relative gate of the LRA (LUFS: the loudness of the short-term values
        above the absolute gate, -20 LU; Tech 3342); ``None`` while none passes it.
    integrated_reason: why ``integrated`` holds no loudness: ``'too short'`` (``None``:
        not one 400 ms gating block yet), ``'below the absolute gate'`` (``-inf``: digital
        silence, or every gating block at or below -70 LUFS); ``None`` when it has one.
    step_integrated: ``(K,)`` float64 running integrated loudness after each step of
        ``step_time`` (``NaN`` before the first gating block, ``-inf`` while none passes
        the absolute gate), when the call asked for it (``meter(x,
        step_integrated=True)``); else ``None``.

    Every field is a function of the samples so far, whatever their partition into
    blocks (the gated statistics change only at 100 ms steps).
    """

    momentary: float | None
    short_term: float | None
    integrated: float | None
    step_time: np.ndarray
    step_momentary: np.ndarray
    step_short_term: np.ndarray
    samples: int
    loudness_range: float | None = None
    true_peak: float | None = None
    sample_peak: float | None = None
    true_peak_channels: np.ndarray | None = None
    sample_peak_channels: np.ndarray | None = None
    max_momentary: float | None = None
    max_short_term: float | None = None
    lra_stable: bool = False
    lra_low: float | None = None
    lra_high: float | None = None
    absolute_gate: float = ABSOLUTE_GATE_LUFS
    relative_gate: float | None = None
    lra_gate: float | None = None
    integrated_reason: str | None = None
    step_integrated: np.ndarray | None = None

    def to_json(self) -> dict:
        """A JSON-serialisable dict (``-inf`` / ``NaN`` -> ``None``)."""
        return {
            "momentary": lufs_or_none(self.momentary),
            "short_term": lufs_or_none(self.short_term),
            "integrated": lufs_or_none(self.integrated),
            "loudness_range": lufs_or_none(self.loudness_range),
            "lra_stable": bool(self.lra_stable),
            "true_peak": lufs_or_none(self.true_peak),
            "sample_peak": lufs_or_none(self.sample_peak),
            "max_momentary": lufs_or_none(self.max_momentary),
            "max_short_term": lufs_or_none(self.max_short_term),
            "lra_low": lufs_or_none(self.lra_low),
            "lra_high": lufs_or_none(self.lra_high),
            "absolute_gate": float(self.absolute_gate),
            "relative_gate": lufs_or_none(self.relative_gate),
            "lra_gate": lufs_or_none(self.lra_gate),
            "integrated_reason": self.integrated_reason,
            "true_peak_channels": lufs_or_none(self.true_peak_channels)
            if self.true_peak_channels is not None else None,
            "sample_peak_channels": lufs_or_none(self.sample_peak_channels)
            if self.sample_peak_channels is not None else None,
            "step_time": [float(t) for t in self.step_time],
            "step_momentary": lufs_or_none(self.step_momentary),
            "step_short_term": lufs_or_none(self.step_short_term),
            "step_integrated": None if self.step_integrated is None
            else lufs_or_none(self.step_integrated),
            "samples": int(self.samples),
        }


@dataclasses.dataclass
class LoudnessStatistics:
    """The gated statistics and peaks of one programme (:meth:`LoudnessMeter.statistics`)
    or of several merged (:meth:`merge`): what a programme or album loudness over several
    files needs.  BS.1770-4 and Tech 3342 define the integrated loudness and the LRA over
    the gating blocks and short-term values of a programme, so the total of several files
    gates all their 400 ms blocks (and 3 s values) together: their histograms (or value
    lists) are added, never their LUFS averaged (as libebur128's
    ``ebur128_loudness_global_multiple`` / ``_range_multiple`` do).  No window spans two
    programmes.

    mode: ``'histogram'`` or ``'exact'``; arrays: ``gate_n``/``gate_e``/``lra_n``/``lra_e``
    ``(10000,)`` counts and power sums (histogram) or ``gate_e``/``lra_e`` every power
    (exact), as in the meter's state; gating_blocks / short_term_values: the 400 ms
    blocks and 3 s windows seen (below the gates too); seconds: the programmes' length
    (s); true_peak / sample_peak: the largest linear peak over channels and programmes;
    max_momentary_power / max_short_term_power: the largest window power (-1: none).

    The properties give the report's figures in LUFS / LU / dB TP, as the meter's do.
    """

    mode: str
    arrays: dict
    gating_blocks: int = 0
    short_term_values: int = 0
    seconds: float = 0.0
    true_peak: float = 0.0
    sample_peak: float = 0.0
    max_momentary_power: float = -1.0
    max_short_term_power: float = -1.0
    programmes: int = 1

    def merge(self, *others: LoudnessStatistics) -> LoudnessStatistics:
        """A new :class:`LoudnessStatistics` of this programme and ``others`` together (the
        histograms added, or the value lists joined; an exact mode's values are put into
        histogram bins when the modes differ); the inputs are unchanged."""
        parts = (self, *others)
        mode = "exact" if all(p.mode == "exact" for p in parts) else "histogram"
        if mode == "exact":
            arrays = {k: np.concatenate([p.arrays[k] for p in parts])
                      for k in ("gate_e", "lra_e")}
        else:
            arrays = {"gate_n": np.zeros(N_BINS, np.int64), "gate_e": np.zeros(N_BINS),
                      "lra_n": np.zeros(N_BINS, np.int64), "lra_e": np.zeros(N_BINS)}
            for p in parts:
                if p.mode == "histogram":
                    for k in arrays:
                        arrays[k] += p.arrays[k]
                else:
                    _G.hist_add_many(arrays["gate_n"], arrays["gate_e"], p.arrays["gate_e"],
                                     True)
                    _G.hist_add_many(arrays["lra_n"], arrays["lra_e"], p.arrays["lra_e"],
                                     False)
        return LoudnessStatistics(
            mode=mode, arrays=arrays, gating_blocks=sum(p.gating_blocks for p in parts),
            short_term_values=sum(p.short_term_values for p in parts),
            seconds=sum(p.seconds for p in parts),
            true_peak=max(p.true_peak for p in parts),
            sample_peak=max(p.sample_peak for p in parts),
            max_momentary_power=max(p.max_momentary_power for p in parts),
            max_short_term_power=max(p.max_short_term_power for p in parts),
            programmes=sum(p.programmes for p in parts))

    @property
    def integrated(self) -> float | None:
        """Integrated loudness (LUFS) over every gating block; ``None`` without one,
        ``-inf`` when none passes the absolute gate."""
        if self.gating_blocks == 0:
            return None
        return loudness_of_energy(gated_i(self.mode, self.arrays)[0])

    @property
    def integrated_reason(self) -> str | None:
        """``'too short'``, ``'below the absolute gate'`` or ``None`` (as the meter's)."""
        return _reason(self.integrated)

    @property
    def relative_gate(self) -> float | None:
        """Relative gate of the integrated loudness (LUFS), ``None`` when not defined."""
        return _lufs_of(gated_i(self.mode, self.arrays)[1])

    def _lra(self) -> tuple[float, float, float]:
        return gated_lra(self.mode, self.arrays)

    @property
    def loudness_range(self) -> float | None:
        """LRA (LU) over every short-term value; ``None`` without one."""
        return None if self.short_term_values == 0 else _lra_of(*self._lra()[:2])

    @property
    def lra_low(self) -> float | None:
        """10th percentile of the gated short-term loudness (LUFS) or ``None``."""
        return _lufs_of(self._lra()[0])

    @property
    def lra_high(self) -> float | None:
        """95th percentile of the gated short-term loudness (LUFS) or ``None``."""
        return _lufs_of(self._lra()[1])

    @property
    def lra_gate(self) -> float | None:
        """Relative gate of the LRA (LUFS) or ``None``."""
        return _lufs_of(self._lra()[2])

    @property
    def max_momentary(self) -> float | None:
        """Largest momentary loudness (LUFS) or ``None``."""
        e = self.max_momentary_power
        return None if e < 0 else _lufs(e)

    @property
    def max_short_term(self) -> float | None:
        """Largest short-term loudness (LUFS) or ``None``."""
        e = self.max_short_term_power
        return None if e < 0 else _lufs(e)

    @property
    def true_peak_dbtp(self) -> float:
        """Maximum true peak (dB TP; -inf for silence)."""
        return dbtp(self.true_peak)

    @property
    def sample_peak_dbfs(self) -> float:
        """Maximum sample peak (dBFS; -inf for silence)."""
        return dbtp(self.sample_peak)


# ---------------------------------------------------------------- the meter
#: the meter's own state entries (each stage's are its own, in ``children``); ``block`` is
#: its stages' block count (:meth:`LoudnessMeter.blocks_processed`)
_SCALARS = ("samples", "block", "momentary", "short_term")
#: the ``kind`` of the meter's snapshots (the scheduler's front end
#: :class:`~rtamt.loudness.r128stream.R128Stream` writes and reads the same)
_KIND = "LoudnessMeter"
#: EBU Tech 3341 section 2.4: the LRA is not yet stable during the first 60 s
LRA_SETTLE_S = 60.0


class LoudnessMeter(StageGroup):
    """Streaming BS.1770-4 / EBU R128 loudness meter (M, S, I, LRA, true peak).

    ``LoudnessMeter(fs=48000, channels=2, weights=None, layout=None, mode='histogram',
    lra_hop=1, truepeak='sinc')`` or ``LoudnessMeter(Params(...))``.

    ``meter(block)`` takes a float32/float64 numpy block of shape ``(channels, T)``
    (or ``(T,)`` when ``channels == 1``), ``T >= 1``, finite values in full-scale units
    (a full-scale sine has peak amplitude 1.0), and returns a :class:`LoudnessResult`.
    Invalid blocks raise :class:`LoudnessInputError` (a ``ValueError``) and leave the
    state untouched.  ``reset()`` forgets the stream; ``state_dict()`` /
    ``load_state_dict()`` snapshot and restore it (deep copies; bit-exact continuation;
    snapshots of the former single-module meter load too, and those of the meter before
    issue 39 at 48 kHz into a meter with ``truepeak='bs1770'``).

    The meter is a group of stages (:class:`~rtamt.engine.stage.StageGroup`, the base of
    every composite: one :meth:`to`, one reset, all-or-none load), each reached only
    through its public interface: K-weighting
    (:class:`~rtamt.loudness.kweighting.KWeighting`) -> gating blocks
    (:class:`~rtamt.loudness.gating.GatingBlocks`) -> gated statistics
    (:class:`~rtamt.loudness.gatedstats.GatedStatistics`), and the true peak
    (:class:`~rtamt.loudness.truepeak.TruePeak`) on the raw input beside them
    (``stages``, in that order).  The meter checks the block, runs the stages'
    ``process_tm`` and advances every stage's block counter with its own.
    ``to(device, backend='triton')`` runs the three sample stages' Triton twins (the
    state moved exactly); the statistics stay on the host (a few values per 100 ms step).

    State (``state_dict()``): ``children`` holds every stage's state by name
    (``kweighting``: ``zi``; ``gating``: the current sub-block's channel sums, the last 30
    sub-block powers; ``statistics``: ``integrated``, ``loudness_range`` and the gated
    statistics -- histogram mode: ``gate_n`` / ``gate_e`` and ``lra_n`` / ``lra_e``,
    ``(10000,)`` counts (int64) and power sums (float64) per 0.01 LU bin; exact mode:
    ``gate_e`` and ``lra_e``, every gating-block and short-term power so far;
    ``truepeak``: the last 48 samples, 11 with ``truepeak='bs1770'``, and the peaks),
    ``arrays`` the meter's counters ``samples``, ``block`` and the latest ``momentary``,
    ``short_term``.  Snapshots of the meter before the statistics were in ``children``
    (they were in ``arrays``) load too.

    ``threads=2`` (keyword only, not part of the design): each block's true peak runs on a
    second thread beside the K-weighting and gating (its kernels release the GIL), with
    the same bits; for measuring files on a machine with a core to spare (``rtamt
    loudness``: the true peak is about two thirds of the meter's time).  The default, 1,
    runs everything on the calling thread, as a real-time caller wants.
    """

    name = _NAME

    def __init__(self, params: Params | None = None, *, threads: int = 1, **kwargs):
        if params is None:
            params = Params(**kwargs)
        elif kwargs:
            params = dataclasses.replace(params, **kwargs)
        if threads not in (1, 2):
            raise ValueError(f"{_NAME}: threads must be 1 or 2, got {threads!r}")
        self.threads = threads
        self._pool = None               # the true peak's thread (threads=2), made on first use
        self.params = params
        self.coeffs = design(params)
        self.kweighting = KWeighting(KWeightingParams(params.fs))
        self.gating = GatingBlocks(GatingParams(params.fs, params.weights))
        #: the gated statistics (integrated loudness, loudness range) of the gating blocks
        self.gated = GatedStatistics(StatisticsParams(params.mode, params.lra_hop))
        self.truepeak = TruePeak(TruePeakParams(params.fs, method=params.truepeak))
        self.stages = [self.kweighting, self.gating, self.gated, self.truepeak]
        self.reset()

    def __repr__(self):
        return f"{type(self).__name__}({self.params!r})"

    def __getstate__(self):             # copies and pickles leave the thread behind
        d = self.__dict__.copy()
        d["_pool"] = None
        return d

    def _rebound(self) -> None:
        """After :meth:`to`, :meth:`reset` and a load: the block path's conversions for the
        stages' binding (:func:`~rtamt.engine.backend.block_movers`: a checked block to the
        kernels, the gating rows back to the host for the statistics), chosen here once,
        and new work buffers."""
        self._to_kernels, self._to_host = block_movers(self.backend, self.device)
        self._work = [None, None]

    def _true_peak_pool(self):
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            # denormals flushed there too (MXCSR is per thread): the same bits as one thread
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="rtamt-truepeak",
                                            initializer=ensure_ftz)
        return self._pool

    # -- state ------------------------------------------------------------------------
    def _initial_state(self) -> dict:
        return {"samples": 0, "momentary": math.nan, "short_term": math.nan}

    def reset(self) -> None:
        """Forget the stream: the next block is the first one (empty history, filters at
        rest); every stage's state made for one stream of ``C`` channels (the statistics':
        of the gating rows ``(k, e_M, e_S)``)."""
        self._s = self._initial_state()
        super().reset()
        C = self.coeffs.channels
        for st in self.stages:
            st.prepare(np.zeros((1, 3 if st is self.gated else C, 1)))

    # -- the streaming contract ---------------------------------------------------------
    batchable = False      # one programme per meter: its channels are summed (BS.1770 eq. 2)
    input_limit = math.inf
    outputs = ("momentary", "short_term", "integrated", "loudness_range", "true_peak")

    def process_all(self, x) -> dict:
        """``{'momentary', 'short_term', 'integrated', 'loudness_range', 'true_peak'}``
        (LUFS / LU / dB TP, or ``None``) after the block."""
        r = self._measure(x)
        return {"momentary": r.momentary, "short_term": r.short_term,
                "integrated": r.integrated, "loudness_range": r.loudness_range,
                "true_peak": r.true_peak}

    def output_info(self) -> dict:
        """Values updated every 100 ms sub-block (EBU Tech 3341); the true peak every block."""
        return {k: {"rate": 10.0, "channels": None} for k in self.outputs}

    def _identity(self) -> dict:
        """``{'name': 'bs1770', 'fs', 'channels', 'fingerprint'}`` (params and the stages'
        designs): the design identity of the meter's snapshots, whichever front end."""
        fp = self.__dict__.get("_fp")
        if fp is None:
            fp = self._fp = _fingerprint_of(self.params, self.coeffs)
        return {"name": _NAME, "fs": float(self.params.fs),
                "channels": int(self.coeffs.channels), "fingerprint": fp}

    def design_identity(self) -> dict:
        """``{'name', 'fs', 'channels', 'fingerprint'}`` (params and the stages' designs;
        ``name``: this object's)."""
        return dict(self._identity(), name=self.name)

    def state_dict(self) -> dict:
        """Deep copy of the meter's state in the contract's schema (class docstring)."""
        blk = self.blocks_processed
        sd = _C.header(self, blk, _C.stream_meta(None, [self.coeffs.channels], np.float64),
                       arrays=dict(self._s, block=blk), children=self._children_state())
        sd["kind"], sd["design"] = _KIND, self._identity()
        return sd

    def _check_identity(self, sd: dict) -> None:
        """Raise unless ``sd`` is a meter snapshot (kind ``LoudnessMeter``) of this design."""
        _C.check_identity(self.name, sd, self, self._identity(), kind=_KIND)

    def load_state_dict(self, sd: dict) -> None:
        """Restore a snapshot from :meth:`state_dict`: checked before anything changes, all
        stages or none.  A snapshot of the meter before the statistics were a child, or of
        the former single-module meter (arrays ``zi``, ``buf``, ``gate_e``, ...), is
        converted."""
        arrays = sd.get("arrays") if isinstance(sd, dict) else None
        try:
            if isinstance(arrays, dict) and "buf" in arrays:
                sd = _from_v1(self, sd)
            else:
                try:
                    self._check_identity(sd)
                except RtamtInputError:
                    _refuse_former(self, sd)
                    raise
                sd = _statistics_as_child(self, sd)
            st = sd.get("arrays")
            if not isinstance(st, dict) or set(st) != set(_SCALARS):
                raise RtamtInputError(
                    f"{self.name}: state keys {sorted(st) if isinstance(st, dict) else st} "
                    f"!= {sorted(_SCALARS)}")
            self._load_children(sd.get("children"))
        except RtamtInputError as e:
            raise LoudnessInputError(str(e)) from None
        self._s = copy.deepcopy({k: st[k] for k in _SCALARS if k != "block"})

    @classmethod
    def stack_state_dicts(cls, states):
        raise RtamtInputError(
            f"{cls.__name__}: meter states do not stack (one programme per meter; its "
            "channels are one loudness); run one meter per programme")

    @classmethod
    def split_state_dict(cls, state, i):
        raise RtamtInputError(f"{cls.__name__}: meter states hold one programme, no batch")

    @property
    def channel_names(self) -> tuple[str, ...] | None:
        """The channels' names (:mod:`rtamt.loudness.layouts`) in stream order: the
        layout's, or the channel count's default; None when only ``weights`` were given."""
        p = self.params
        if p.layout is not None:
            return _L.layout_names(p.layout)
        lay = _DEFAULT_LAYOUT.get(p.channels)        # weights given, or the default's
        return None if lay is None or p.weights != layout_weights(lay) else LAYOUTS[lay]

    @property
    def blocks_processed(self) -> int:
        """Number of blocks accepted since the last reset (every stage's block count)."""
        return self.kweighting.blocks_processed

    @property
    def samples_processed(self) -> int:
        """Samples (per channel) accepted since the last reset."""
        return self._s["samples"]

    @property
    def momentary(self) -> float | None:
        """Latest momentary loudness (LUFS), ``None`` until 400 ms have been heard."""
        return _scalar(self._s["momentary"])

    @property
    def short_term(self) -> float | None:
        """Latest short-term loudness (LUFS), ``None`` until 3 s have been heard."""
        return _scalar(self._s["short_term"])

    @property
    def integrated(self) -> float | None:
        """Gated integrated loudness so far (LUFS); ``None`` before the first gating block."""
        return _scalar(self.gated.integrated)

    @property
    def loudness_range(self) -> float | None:
        """Loudness range so far (LU, EBU Tech 3342); ``None`` before 3 s have been heard."""
        return _scalar(self.gated.loudness_range)

    @property
    def integrated_reason(self) -> str | None:
        """Why :attr:`integrated` holds no loudness: ``'too short'`` (no 400 ms gating
        block yet), ``'below the absolute gate'`` (every gating block at or below -70 LUFS:
        digital silence); ``None`` when it holds one."""
        return _reason(self.integrated)

    @property
    def relative_gate(self) -> float | None:
        """Relative gate of the integrated loudness so far (LUFS, BS.1770-4 eq. (6)): the
        loudness of the gating blocks above -70 LUFS, -10 LU; ``None`` while none is."""
        return _lufs_of(self.gated.derived[0])

    @property
    def lra_low(self) -> float | None:
        """10th percentile of the gated short-term loudness so far (LUFS, EBU Tech 3342);
        ``None`` while no short-term value passes the gates."""
        return _lufs_of(self.gated.derived[1])

    @property
    def lra_high(self) -> float | None:
        """95th percentile of the gated short-term loudness so far (LUFS, EBU Tech 3342);
        ``None`` while no short-term value passes the gates."""
        return _lufs_of(self.gated.derived[2])

    @property
    def lra_gate(self) -> float | None:
        """Relative gate of the loudness range so far (LUFS, EBU Tech 3342): the loudness
        of the short-term values at or above -70 LUFS, -20 LU; ``None`` while none is."""
        return _lufs_of(self.gated.derived[3])

    def statistics(self) -> LoudnessStatistics:
        """The stream's gated statistics and peaks as a :class:`LoudnessStatistics` (a
        copy), to merge with other programmes' (:meth:`LoudnessStatistics.merge`)."""
        n_steps = int(self.gating.state["n_fine"][0]) // _G.FINE
        tp = self.truepeak.state
        pk = self.gating.state["peak"][0]
        return LoudnessStatistics(
            mode=self.params.mode,
            arrays=copy.deepcopy({k: v for k, v in self.gated.arrays.items()
                                  if k in ("gate_n", "gate_e", "lra_n", "lra_e")}),
            gating_blocks=max(0, n_steps - N_MOMENTARY + 1),
            short_term_values=max(0, n_steps - N_SHORT_TERM + 1),
            seconds=self._s["samples"] / self.params.fs,
            true_peak=float(tp["true_peak"].max()), sample_peak=float(tp["sample_peak"].max()),
            max_momentary_power=float(pk[0]), max_short_term_power=float(pk[1]))

    @property
    def max_momentary(self) -> float | None:
        """Largest momentary loudness so far (LUFS, 10 ms resolution); ``None`` before 400 ms."""
        e = float(self.gating.state["peak"][0, 0])
        return None if e < 0 else _lufs(e)

    @property
    def max_short_term(self) -> float | None:
        """Largest short-term loudness so far (LUFS, 10 ms resolution); ``None`` before 3 s."""
        e = float(self.gating.state["peak"][0, 1])
        return None if e < 0 else _lufs(e)

    @property
    def true_peak_channels(self) -> np.ndarray:
        """``(C,)`` maximum true peak per channel so far (dB TP)."""
        return dbtp(to_numpy(self.truepeak.state["true_peak"][0]))

    @property
    def sample_peak_channels(self) -> np.ndarray:
        """``(C,)`` maximum sample peak per channel so far (dBFS)."""
        return dbtp(to_numpy(self.truepeak.state["sample_peak"][0]))

    @property
    def true_peak(self) -> float:
        """Maximum true peak over the channels so far (dB TP, BS.1770-4 Annex 2)."""
        return dbtp(float(self.truepeak.state["true_peak"].max()))

    @property
    def sample_peak(self) -> float:
        """Maximum sample peak over the channels so far (dBFS)."""
        return dbtp(float(self.truepeak.state["sample_peak"].max()))

    # -- validation ---------------------------------------------------------------------
    def _check(self, x: Any) -> np.ndarray:
        """Return the block as a C-contiguous time-major ``(T, C)`` array (what the stages
        take), or raise before anything changes.  A ``(C, T)`` block that is the transpose of
        a ``(T, C)`` array (``buf.T`` of a file's frames as soundfile reads them) is not
        copied."""
        C = self.coeffs.channels
        where = f"{self.name}: block {self.kweighting.blocks_processed}"
        x = require_numpy(x, lambda: where, LoudnessInputError)
        check_float_dtype(x, where, LoudnessInputError)
        if x.ndim == 1 and C == 1:
            x = x[None, :]
        elif x.ndim != 2:
            want = "(T,) or (1, T)" if C == 1 else f"({C}, T)"
            raise LoudnessInputError(
                f"{where}: expected shape {want}, got ndim={x.ndim} shape {x.shape}")
        if x.shape[0] != C:
            raise LoudnessInputError(
                f"{where}: got {x.shape[0]} channels (shape {x.shape}), the meter measures {C}")
        if x.shape[1] == 0:
            raise LoudnessInputError(f"{where}: empty block (0 samples); blocks need >= 1 sample")
        xt = np.ascontiguousarray(x.T)
        reject_nonfinite(xt, where, lambda b: f"channel {b[1]}, sample {b[0]}",
                         LoudnessInputError)
        return xt

    # -- processing ---------------------------------------------------------------------
    def __call__(self, x: np.ndarray, *, step_integrated: bool = False) -> LoudnessResult:
        """Measure one block; returns a :class:`LoudnessResult` (see class docstring).
        ``step_integrated``: also the running integrated loudness after each 100 ms step of
        the block (:attr:`LoudnessResult.step_integrated`; a 10000-bin pass per step in
        the histogram mode, a pass over every gating block so far in the exact mode)."""
        return self._measure(x, step_integrated)

    def _measure(self, x, step_integrated: bool = False) -> LoudnessResult:
        """The block path of :meth:`__call__` (and of :meth:`process_all`, which a front
        end's call may be)."""
        xt = self._to_kernels(self._check(x)[None])            # (1, T, C) time-major
        ensure_ftz()
        s, p = self._s, self.params
        kw, gt, gs, tp = self.stages
        peak = None if self.threads == 1 else self._true_peak_pool().submit(
            tp.process_tm, tp.coeffs, tp.state, xt)                  # beside the rest
        y = self._work[0] = kw.process_tm(kw.coeffs, kw.state, xt, self._work[0])
        gst = gt.state
        steps = gt.process_tm(gt.coeffs, gst, y, self._work[1])
        self._work[1] = steps
        n = int(gst["count"][0])
        rows = self._to_host(steps[:, :n])                      # (1, n, 3) on the host
        # the statistics of the block's steps (if any), then the true peak: stage order
        run = gs.process_tm(gs.coeffs, gs.state, rows, None, step_integrated) if n else None
        if peak is None:
            tp.process_tm(tp.coeffs, tp.state, xt)
        else:
            peak.result()
        self.advance_blocks()                   # every stage's block counter
        k, e_m, e_s = rows[0, :, 0], rows[0, :, 1], rows[0, :, 2]
        s["samples"] += xt.shape[1]
        if n:
            mom, sht = loudness_of_energy(e_m), loudness_of_energy(e_s)
            s["momentary"], s["short_term"] = float(mom[-1]), float(sht[-1])
            # step i ends at sample floor(fs i / 10): exact integers (an integer rate, the
            # usual case, in one vectorised floor division; any other through Fraction)
            if float(p.fs).is_integer():
                times = (int(p.fs) * k.astype(np.int64)) // 10 / p.fs
            else:
                fs = Fraction(p.fs)
                times = np.array([math.floor(fs * int(i) / 10) for i in k],
                                 dtype=np.float64) / p.fs
        else:
            mom = sht = times = np.zeros(0)
        peaks = tp.state
        tpc, spc = _dbtp_row(peaks["true_peak"][0]), _dbtp_row(peaks["sample_peak"][0])
        # the statistics' summary, read once: I (LUFS), LRA (LU), then the powers of the
        # relative gate and of the LRA's low, high and gate (GatedStatistics)
        i_lufs, lra, rel, lo, hi, lra_g = gs.state["summary"].tolist()
        integrated = _scalar(i_lufs)
        return LoudnessResult(
            momentary=_scalar(s["momentary"]), short_term=_scalar(s["short_term"]),
            integrated=integrated, step_time=times,
            step_momentary=np.asarray(mom, dtype=np.float64).reshape(-1),
            step_short_term=np.asarray(sht, dtype=np.float64).reshape(-1),
            samples=s["samples"], loudness_range=_scalar(lra),
            true_peak=float(max(tpc)), sample_peak=float(max(spc)),
            true_peak_channels=tpc, sample_peak_channels=spc,
            max_momentary=self.max_momentary, max_short_term=self.max_short_term,
            lra_stable=s["samples"] >= LRA_SETTLE_S * p.fs, lra_low=_lufs_of(lo),
            lra_high=_lufs_of(hi), relative_gate=_lufs_of(rel), lra_gate=_lufs_of(lra_g),
            integrated_reason=_reason(integrated),
            step_integrated=None if not step_integrated
            else loudness_of_energy(run if n else np.zeros(0)).reshape(-1))

    def warm_kernels(self) -> None:
        """Load (or compile) the gating kernels of this meter's mode that a stream reaches
        only after its first 400 ms gating block (the integrated loudness) and its first
        3 s short-term value (the loudness range): :meth:`GatedStatistics.warm`, one block
        of power 1e-3 (-30 LUFS, inside every gate) through a fresh statistics stage of the
        same design.  The meter's state is not changed.  Called by
        :func:`rtamt.engine.jit.warmup` (the apps' warm-up), so that no kernel loads on
        the real-time path."""
        self.gated.warm()


# ---------------------------------------------------------------- former snapshots
#: the fields of :class:`Params` before ``truepeak`` (issue 39)
_FORMER_FIELDS = ("fs", "channels", "weights", "layout", "mode", "lra_hop")


def _former_params(params: Params):
    """``params`` as the meter's params were before the ``truepeak`` option (what the
    fingerprint of the stage-built meter of rtamt before issue 39 was taken of)."""
    old = dataclasses.make_dataclass("Params", [(f, object) for f in _FORMER_FIELDS])
    return old(*(getattr(params, f) for f in _FORMER_FIELDS))


def _fingerprint_of(params: Params, coeffs: Coeffs) -> str:
    """The meter's design fingerprint.  A meter with ``truepeak='bs1770'`` whose other
    fields are those of the meter before issue 39 (any field added since at its default)
    keeps that meter's fingerprint, so that its snapshots load."""
    later = [f for f in dataclasses.fields(params)
             if f.name not in _FORMER_FIELDS and f.name != "truepeak"]
    former = params.truepeak == "bs1770" and all(
        f.default is not dataclasses.MISSING and getattr(params, f.name) == f.default
        for f in later)
    return _C.fingerprint(_former_params(params) if former else params, coeffs)


def _refuse_former(meter: LoudnessMeter, sd: dict) -> None:
    """Raise a clear :class:`RtamtInputError` if ``sd`` is a snapshot that ``meter`` cannot
    continue for a reason a user can act on: made with the other true-peak interpolator
    (snapshots of rtamt before issue 39 are ``truepeak='bs1770'`` ones), or at a rate other
    than 48 kHz by the meter before issue 39 (the prewarped bilinear K-weighting).  Return
    otherwise."""
    theirs = sd.get("design") if isinstance(sd, dict) else None
    if not isinstance(theirs, dict) or sd.get("kind") != _KIND:
        return
    p = meter.params
    fp = theirs.get("fingerprint")
    for other in TRUEPEAK_METHODS:
        if other != p.truepeak and fp == _fingerprint_of(
                dataclasses.replace(p, truepeak=other), meter.coeffs):
            note = (" (BS.1770-4 Annex 2's 4x filter, as every rtamt meter before issue 39)"
                    if other == "bs1770" else "")
            raise RtamtInputError(
                f"{meter.name}: the state was made by a meter with truepeak={other!r}{note}, "
                f"this meter's is {p.truepeak!r}: load it into LoudnessMeter(..., "
                f"truepeak={other!r}) to continue it exactly")
    if p.fs != PUBLISHED_FS and fp == _C.fingerprint(_former_params(p), dataclasses.replace(
            meter.coeffs, sos=k_weighting_sos_bilinear(p.fs))):
        raise _former_k_weighting(meter)


def _former_k_weighting(meter: LoudnessMeter) -> RtamtInputError:
    return RtamtInputError(
        f"{meter.name}: the state was made at {meter.params.fs:g} Hz by an earlier rtamt "
        "meter whose K-weighting at rates other than 48 kHz was the prewarped bilinear "
        "design (up to 0.2 dB off the 48 kHz response); the loudness it gathered cannot "
        "continue with the corrected filter.  only 48 kHz snapshots of that meter load")


def _v1_fingerprint(params: Params) -> str:
    """The design fingerprint the single-module meter (state arrays ``zi``, ``buf``,
    ``gate_e``) gave ``params``' rate, channels and weights."""
    fs = Fraction(params.fs)
    period = (fs / 10).denominator
    lens = tuple(math.floor(fs * (k + 1) / 10) - math.floor(fs * k / 10)
                 for k in range(period)) if period <= 4096 else None
    old_p = dataclasses.make_dataclass("Params", [("fs", object), ("channels", object),
                                                  ("weights", object)])
    old_c = dataclasses.make_dataclass("Coeffs", [(n, object) for n in (
        "sos", "weights", "fs", "fs_exact", "channels", "max_sub", "sub_lens")])
    return _C.fingerprint(
        old_p(params.fs, params.channels, params.weights),
        old_c(k_weighting_sos_bilinear(params.fs), np.asarray(params.weights, np.float64),
              params.fs,
              fs, params.channels, math.ceil(fs / 10), lens))


def _from_v1(meter: LoudnessMeter, sd: dict) -> dict:
    """A snapshot of the single-module meter as this meter's snapshot (the filter memories,
    the open sub-block's channel sums, the last 30 sub-blocks and every gating block;
    the loudness range and the maxima start empty: that meter kept no short-term history
    beyond 3 s; its 100 ms sub-block powers are spread over their 10 ms fine blocks in
    proportion to length, so the 100 ms windows continue exactly)."""
    _C.check_state_header(meter.name, sd)
    p = meter.params
    theirs = sd.get("design") or {}
    if sd.get("kind") != _KIND or theirs.get("fingerprint") != _v1_fingerprint(p):
        raise RtamtInputError(
            f"{meter.name}: the state was made by a meter with other parameters (sample rate "
            f"{theirs.get('fs')!r}, channels {theirs.get('channels')!r}; this meter: "
            f"{p.fs!r}, {p.channels!r}, weights {p.weights})")
    if p.fs != PUBLISHED_FS:
        raise _former_k_weighting(meter)
    a = sd["arrays"]
    C = p.channels
    zi, buf = np.asarray(a["zi"], np.float64), np.asarray(a["buf"], np.float64)
    if zi.shape != (2, C, 2) or buf.ndim != 2 or buf.shape[0] != C:
        raise RtamtInputError(f"{meter.name}: malformed former snapshot (zi {zi.shape}, "
                              f"buf {buf.shape}) for {C} channels")
    fill, n_sub = int(a["fill"]), int(a["n_sub"])
    F, R = _G.FINE, _G.RING
    lens = _G.sub_block_lengths(p.fs, 10 * F)
    ring_e, ring_n = np.zeros((1, R)), np.zeros((1, R), np.int64)
    old_e, old_n = np.asarray(a["ring_e"], np.float64), np.asarray(a["ring_n"], np.int64)
    for j in range(min(n_sub, N_SHORT_TERM)):   # old ring: newest last; spread evenly
        k = n_sub - 1 - j
        fine = np.arange(k * F, (k + 1) * F)
        part = lens[fine % lens.size]
        ring_n[0, fine % R] = part
        ring_e[0, fine % R] = old_e[-1 - j] * part / old_n[-1 - j]
    fresh = LoudnessMeter(p)
    kw, gt = fresh.kweighting, fresh.gating
    kw.state["zi"][...] = np.ascontiguousarray(zi.transpose(0, 2, 1))[None]
    gst = gt.state
    gst["n_fine"][...] = n_sub * F
    gst["ring_e"][...], gst["ring_n"][...] = ring_e, ring_n
    if fill:       # the open sub-block's K-weighted samples through the stage's own kernel
        gt.process_tm(gt.coeffs, gst, np.ascontiguousarray(buf[:, :fill].T)[None])
    gst["peak"][:] = -1.0                        # the maxima start empty
    fresh.gated.add_gating_blocks(np.asarray(a["gate_e"], np.float64).ravel())
    fresh._s.update(samples=int(a["samples"]), momentary=float(a["momentary"]),
                    short_term=float(a["short_term"]))
    fresh.advance_blocks(int(a["block"]))     # the meter's block count in every stage
    sd = fresh.state_dict()
    sd["children"][fresh.gated.name]["arrays"]["integrated"] = float(a["integrated"])
    return sd


def _statistics_as_child(meter: LoudnessMeter, sd: dict) -> dict:
    """A snapshot of the meter before the statistics were a stage of it (their state in
    the meter's ``arrays`` beside its counters, ``children`` the three sample stages) as
    this meter's: the statistics' entries moved into ``children['statistics']``, a
    statistics stage's snapshot at the meter's block count.  Others are returned as they
    are."""
    ch, arrays = sd.get("children"), sd.get("arrays")
    name = meter.gated.name
    if not isinstance(ch, dict) or not isinstance(arrays, dict) or name in ch \
            or set(arrays) <= set(_SCALARS):
        return sd
    child = meter.gated.state_dict()             # a snapshot's header of the stage
    child.update(block=sd.get("block", 0),
                 arrays={k: v for k, v in arrays.items() if k not in _SCALARS})
    return dict(sd, arrays={k: v for k, v in arrays.items() if k in _SCALARS},
                children={**ch, name: child})
