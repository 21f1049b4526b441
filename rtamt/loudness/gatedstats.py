"""The gated statistics of the BS.1770 / EBU R128 meter, as a stage of its own: the
integrated loudness (ITU-R BS.1770-4 Annex 1, eqs. (3)-(7): absolute gate -70 LUFS,
relative gate -10 LU, strict) and the loudness range (EBU Tech 3342 section 3.1: the
short-term values every ``lra_hop`` steps of 100 ms, absolute gate -70 LUFS, relative
gate -20 LU, 95th minus 10th percentile).

Its input is what :class:`rtamt.loudness.gating.GatingBlocks` emits for a block: the
100 ms steps ``k`` completed in it with their momentary (400 ms gating block) and
short-term (3 s) window powers.  Its state is the statistics gathered so far, either
fixed-size histograms of 0.01 LU bins (``mode='histogram'``: ``gate_n`` / ``gate_e`` and
``lra_n`` / ``lra_e``, ``(10000,)`` counts and power sums) or every value (``mode=
'exact'``: ``gate_e`` and ``lra_e``, growing by 10 values a second), and the latest
integrated loudness and loudness range; the gates and percentiles are derived from
them (the histogram's resolution and the exact formulas: :mod:`rtamt.loudness.gating`).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..engine.contract import RtamtInputError
from . import gating as _G
from .gating import LOUDNESS_OFFSET_DB, N_BINS, N_SHORT_TERM

__all__ = ["StatisticsParams", "GatedStatistics", "MODES", "gated_i", "gated_lra"]

MODES = ("histogram", "exact")
#: the scalar entries of the state (NaN: not defined yet)
SCALARS = ("integrated", "loudness_range")


@dataclasses.dataclass(frozen=True)
class StatisticsParams:
    """mode: ``'histogram'`` (fixed-size state) or ``'exact'`` (every value kept);
    lra_hop: a short-term value enters the loudness range every ``lra_hop`` steps of
    100 ms (1..10; Tech 3342 asks for at least 10 Hz, ``lra_hop=1``).  Checked by the
    meter's :class:`~rtamt.loudness.bs1770.Params`."""

    mode: str = "histogram"
    lra_hop: int = 1


def gated_i(mode: str, arrays: dict) -> tuple[float, float]:
    """``(e_I, relative gate)`` as powers (0.0: no gating block passes the absolute gate)
    of the gating blocks in ``arrays`` (the histogram ``gate_n``/``gate_e``, or the values
    ``gate_e`` in the exact mode)."""
    if mode == "histogram":
        return _G.hist_gates(arrays["gate_n"], arrays["gate_e"])
    return _G.exact_gates(arrays["gate_e"])


def gated_lra(mode: str, arrays: dict) -> tuple[float, float, float]:
    """``(lo, hi, gate)`` powers of the loudness range's percentiles and relative gate
    (0.0: not defined) of the short-term values in ``arrays`` (``lra_n``/``lra_e``, or
    ``lra_e``)."""
    if mode == "histogram":
        return _G.hist_lra_stats(arrays["lra_n"], arrays["lra_e"])
    return _G.exact_lra_stats(arrays["lra_e"])


def _loudness(e) -> np.ndarray | float:
    """``-0.691 + 10 log10(e)`` (BS.1770-4 eq. (2)); 0 -> -inf."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = LOUDNESS_OFFSET_DB + 10.0 * np.log10(np.asarray(e, dtype=np.float64))
    return float(out) if np.ndim(out) == 0 else out


class Growing:
    """A float64 list with amortised appends (the exact mode's values)."""

    def __init__(self, values=None):
        v = np.zeros(0) if values is None else np.asarray(values, np.float64).ravel()
        self._a = np.zeros(max(64, 2 * v.size))
        self._a[:v.size] = v
        self._n = v.size

    def extend(self, v) -> None:
        v = np.asarray(v, np.float64)
        if self._n + v.size > self._a.size:
            grown = np.zeros(2 * (self._n + v.size))
            grown[:self._n] = self._a[:self._n]
            self._a = grown
        self._a[self._n:self._n + v.size] = v
        self._n += v.size

    def view(self) -> np.ndarray:
        return self._a[:self._n]


class GatedStatistics:
    """The gated statistics stage (see the module docstring).

    ``process(k, e_m, e_s, running=False)`` adds one block's steps (``(K,)`` float64
    step numbers and momentary / short-term powers, NaN where a window is not full);
    ``running``: returns the gated mean power after each step (NaN before the first
    gating block).  ``integrated`` / ``loudness_range``: LUFS / LU (NaN: not defined);
    ``derived``: the relative gate and the LRA's low, high and gate as powers (0.0: not
    defined).  ``state_arrays()`` / ``check_arrays()`` / ``load_arrays()``: its part of
    the meter's snapshot (see :class:`~rtamt.loudness.bs1770.LoudnessMeter`)."""

    name = "statistics"

    def __init__(self, params: StatisticsParams | None = None, **kwargs):
        self.params = StatisticsParams(**kwargs) if params is None else params
        self.reset()

    def __repr__(self):
        return f"{type(self).__name__}({self.params!r})"

    def reset(self) -> None:
        """Forget every value."""
        self.integrated = math.nan
        self.loudness_range = math.nan
        self.derived = [0.0, 0.0, 0.0, 0.0]   # relative gate, LRA lo, hi, gate (powers)
        if self.params.mode == "histogram":
            self._store = {"gate_n": np.zeros(N_BINS, np.int64), "gate_e": np.zeros(N_BINS),
                           "lra_n": np.zeros(N_BINS, np.int64), "lra_e": np.zeros(N_BINS)}
        else:
            self._store = {"gate_e": Growing(), "lra_e": Growing()}

    @property
    def arrays(self) -> dict:
        """The statistics' arrays (views, not copies): the histograms, or the exact mode's
        values."""
        if self.params.mode == "histogram":
            return self._store
        return {k: g.view() for k, g in self._store.items()}

    # -- processing -----------------------------------------------------------------
    def process(self, k: np.ndarray, e_m: np.ndarray, e_s: np.ndarray,
                running: bool = False) -> np.ndarray | None:
        """Add a block's gating blocks and short-term values and update the integrated
        loudness, the loudness range and their gates (see the class docstring)."""
        hop, mode, st = self.params.lra_hop, self.params.mode, self._store
        ok_m = ~np.isnan(e_m)
        lra_pick = ~np.isnan(e_s) & ((k.astype(np.int64) - N_SHORT_TERM) % hop == 0)
        run = np.empty(e_m.size) if running else None
        if mode == "histogram":
            if running:
                _G.hist_running(st["gate_n"], st["gate_e"], e_m, run)
            else:
                _G.hist_add_many(st["gate_n"], st["gate_e"], e_m[ok_m], True)
            _G.hist_add_many(st["lra_n"], st["lra_e"], e_s[lra_pick], False)
        else:
            gate = st["gate_e"]
            if running:
                for i in range(e_m.size):
                    if ok_m[i]:
                        gate.extend(e_m[i:i + 1])
                    run[i] = _G.exact_integrated(gate.view()) if gate.view().size else np.nan
            else:
                gate.extend(e_m[ok_m])
            st["lra_e"].extend(e_s[lra_pick])
        a = self.arrays
        if ok_m.any():
            ei, self.derived[0] = gated_i(mode, a)
            self.integrated = _loudness(ei)
        if (~np.isnan(e_s)).any():
            lo, hi, g = gated_lra(mode, a)
            self.derived[1:] = [lo, hi, g]
            self.loudness_range = 10.0 * math.log10(hi / lo) if lo > 0.0 else 0.0
        return run

    def warm(self) -> None:
        """Load (or compile) the kernels this mode reaches only after the first gating
        block and short-term value: one block of power 1e-3 (-30 LUFS, inside every gate)
        through a fresh stage of the same design (this one unchanged)."""
        w = GatedStatistics(self.params)
        e = np.full(1, 1e-3)
        w.process(e, e.copy(), np.full(1, float(N_SHORT_TERM)))
        w.process(e, e.copy(), np.full(1, float(N_SHORT_TERM)), running=True)

    # -- state ------------------------------------------------------------------------
    def state_arrays(self) -> dict:
        """A copy of the state: ``integrated``, ``loudness_range`` (NaN: not defined) and
        the statistics' arrays (:attr:`arrays`)."""
        out = {"integrated": self.integrated, "loudness_range": self.loudness_range}
        out.update({k: v.copy() for k, v in self.arrays.items()})
        return out

    def keys(self) -> set:
        """The keys of :meth:`state_arrays` in this mode."""
        return set(SCALARS) | set(self._store)

    def check_arrays(self, st: dict, who: str) -> None:
        """Raise :class:`RtamtInputError` (naming ``who``) unless ``st`` holds this
        stage's arrays: histograms of the right shape and dtype, finite values."""
        if self.params.mode == "histogram":
            for k, v in self._store.items():
                a = np.asarray(st[k])
                if a.shape != v.shape or a.dtype != v.dtype:
                    raise RtamtInputError(f"{who}: state array {k!r} has shape {a.shape} "
                                          f"{a.dtype}, expected {v.shape} {v.dtype}")
        for k in ("gate_e", "lra_e"):
            if not np.isfinite(np.asarray(st[k], dtype=np.float64)).all():
                raise RtamtInputError(f"{who}: state array {k!r} holds a non-finite value; "
                                      "refused")

    def load_arrays(self, st: dict) -> None:
        """Take the state ``st`` (checked by :meth:`check_arrays`; copied) and derive the
        gates and percentiles from it."""
        self.integrated = float(st["integrated"])
        self.loudness_range = float(st["loudness_range"])
        if self.params.mode == "histogram":
            self._store = {k: np.array(st[k], dtype=v.dtype) for k, v in self._store.items()}
        else:
            self._store = {k: Growing(np.asarray(st[k], dtype=np.float64))
                           for k in ("gate_e", "lra_e")}
        a, mode = self.arrays, self.params.mode
        gi = gated_i(mode, a)[1] if not math.isnan(self.integrated) else 0.0
        lra = gated_lra(mode, a) if not math.isnan(self.loudness_range) else (0.0, 0.0, 0.0)
        self.derived = [gi, *lra]

    def add_gating_blocks(self, e: np.ndarray) -> None:
        """Add gating-block powers ``e`` (a former snapshot's; no loudness range)."""
        if self.params.mode == "histogram":
            _G.hist_add_many(self._store["gate_n"], self._store["gate_e"], e, True)
        else:
            self._store["gate_e"].extend(e)
