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

from ..engine import contract
from ..engine.contract import RtamtInputError
from ..engine.stage import Stage
from . import gating as _G
from .gating import LOUDNESS_OFFSET_DB, N_BINS, N_SHORT_TERM

__all__ = ["StatisticsParams", "GatedStatistics", "MODES", "gated_i", "gated_lra", "design"]

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


def design(params: StatisticsParams, n_in=None) -> StatisticsParams:
    """The statistics need no designed coefficients: their coeffs are the params (mode,
    ``lra_hop``)."""
    return params


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


class GatedStatistics(Stage):
    """The gated statistics stage (see the module docstring), the last stage of the
    meter's chain (:class:`~rtamt.loudness.bs1770.LoudnessMeter`).

    ``process_tm(coeffs, state, x, out=None, running=False)`` adds one block's steps:
    ``x`` ``(1, K, 3)`` float64 host rows ``(k, e_M, e_S)`` (the step numbers and the
    momentary / short-term powers, NaN where a window is not full; what
    :class:`~rtamt.loudness.gating.GatingBlocks` emits for its ``count`` completed
    steps).  It returns ``(1, K)`` float64, the gated mean power after each step (NaN
    before the first gating block), when ``running``; else ``None`` (that pass costs a
    histogram scan per step).  :meth:`add` is the same on the stage's own state, from
    three ``(K,)`` arrays.

    The state is one stream's (no batch axis; the meter measures one programme):
    ``summary`` ``(6,)`` float64 -- the integrated loudness (LUFS) and loudness range (LU),
    NaN while not defined, then the relative gate and the LRA's low, high and gate as
    powers (0.0: not defined) -- and the statistics: histogram mode ``gate_n`` /
    ``gate_e`` and ``lra_n`` / ``lra_e`` ``(10000,)`` int64 counts and float64 power sums;
    exact mode ``gate_e`` and ``lra_e``, every value (growing lists).  It lives on the host
    whatever the backend (a few values per 100 ms step: :meth:`to` moves nothing and binds
    no kernel).  Its snapshot's ``arrays`` are ``integrated``, ``loudness_range`` and the
    statistics (the schema the meter's own snapshot had before this was a stage)."""

    name = "statistics"
    in_kind = "channels"
    Params = StatisticsParams
    design = staticmethod(design)
    #: runs on the host on either backend (no kernel to bind; the state stays numpy)
    triton_ready = True
    batchable = False

    @staticmethod
    def init_state(coeffs, batch=1, n_in=3, dtype=np.float64) -> dict:
        """The state of a stream that has no step yet (see the class docstring)."""
        st = {"summary": np.array([math.nan, math.nan, 0.0, 0.0, 0.0, 0.0])}
        if coeffs.mode == "histogram":
            st.update(gate_n=np.zeros(N_BINS, np.int64), gate_e=np.zeros(N_BINS),
                      lra_n=np.zeros(N_BINS, np.int64), lra_e=np.zeros(N_BINS))
        else:
            st.update(gate_e=Growing(), lra_e=Growing())
        return st

    @staticmethod
    def n_out(coeffs, n_in):
        return 1

    @staticmethod
    def process_tm(coeffs, state, x, out=None, running: bool = False):
        """Add the steps of ``x`` ``(1, K, 3)`` to ``state`` (class docstring); returns the
        running gated power ``(1, K)`` when ``running``, else ``None``."""
        run = _add(coeffs, state, x[0, :, 0], x[0, :, 1], x[0, :, 2], running)
        return None if run is None else run[None]

    # -- the stage's own state ------------------------------------------------------
    def _own(self) -> dict:
        if self._state is None:
            self.prepare(np.zeros((1, 3, 1)))
        return self._state

    def add(self, k: np.ndarray, e_m: np.ndarray, e_s: np.ndarray,
            running: bool = False) -> np.ndarray | None:
        """Add a block's gating blocks and short-term values (``(K,)`` float64 step
        numbers and momentary / short-term powers) to this stage's state and update the
        integrated loudness, the loudness range and their gates; ``running``: returns the
        gated mean power after each step (NaN before the first gating block)."""
        return _add(self.coeffs, self._own(), k, e_m, e_s, running)

    @property
    def integrated(self) -> float:
        """Integrated loudness so far (LUFS), NaN before the first gating block."""
        return float(self._own()["summary"][0])

    @property
    def loudness_range(self) -> float:
        """Loudness range so far (LU), NaN before the first short-term value."""
        return float(self._own()["summary"][1])

    @property
    def derived(self) -> list:
        """The relative gate and the LRA's low, high and gate as powers (0.0: not defined)."""
        return self._own()["summary"][2:].tolist()

    @property
    def arrays(self) -> dict:
        """The statistics' arrays (views, not copies): the histograms, or the exact mode's
        values."""
        return _arrays(self._own())

    def warm(self) -> None:
        """Load (or compile) the kernels this mode reaches only after the first gating
        block and short-term value: one block of power 1e-3 (-30 LUFS, inside every gate)
        through a fresh state of the same design (this stage's unchanged)."""
        e = np.full(1, 1e-3)
        k = np.full(1, float(N_SHORT_TERM))
        for running in (False, True):
            _add(self.coeffs, self.init_state(self.coeffs), k, e, e.copy(), running)

    def _state_on(self, st: dict, backend: str, device) -> dict:
        return st                            # on the host on either backend

    # -- snapshots ------------------------------------------------------------------
    def state_arrays(self) -> dict:
        """A copy of the state as a snapshot holds it: ``integrated``, ``loudness_range``
        (NaN: not defined) and the statistics' arrays (:attr:`arrays`)."""
        st = self._own()
        out = {"integrated": float(st["summary"][0]), "loudness_range": float(st["summary"][1])}
        out.update({k: v.copy() for k, v in _arrays(st).items()})
        return out

    def keys(self) -> set:
        """The keys of :meth:`state_arrays` in this mode."""
        return set(SCALARS) | ({"gate_n", "gate_e", "lra_n", "lra_e"}
                               if self.params.mode == "histogram" else {"gate_e", "lra_e"})

    def state_dict(self) -> dict:
        """Deep copy of the state in the contract's schema; ``arrays``: :meth:`state_arrays`."""
        self._own()
        return contract.header(self, self._block, self._stream_meta(),
                               arrays=self.state_arrays())

    def load_state_dict(self, sd: dict) -> None:
        """Restore a snapshot from :meth:`state_dict` (checked before anything changes:
        identity, keys, histogram shapes and dtypes, finite values)."""
        contract.check_state_header(self.name, sd)
        contract.check_identity(self.name, sd, self)
        st = sd.get("arrays")
        if not isinstance(st, dict) or set(st) != self.keys():
            raise RtamtInputError(
                f"{self.name}: state keys {sorted(st) if isinstance(st, dict) else st} != "
                f"{sorted(self.keys())} (mode {self.params.mode!r})")
        self.check_arrays(st, self.name)
        try:
            block = int(sd["block"])
        except (KeyError, TypeError, ValueError):
            raise RtamtInputError(f"{self.name}: malformed block count") from None
        self._state = _from_arrays(self.coeffs, st)
        self._meta = ((1, 3), 3, np.dtype(np.float64))
        self._block = block

    def check_arrays(self, st: dict, who: str) -> None:
        """Raise :class:`RtamtInputError` (naming ``who``) unless ``st`` holds this
        stage's arrays: histograms of the right shape and dtype, finite values."""
        if self.params.mode == "histogram":
            for k, v in self.init_state(self.coeffs).items():
                if k == "summary":
                    continue
                a = np.asarray(st[k])
                if a.shape != v.shape or a.dtype != v.dtype:
                    raise RtamtInputError(f"{who}: state array {k!r} has shape {a.shape} "
                                          f"{a.dtype}, expected {v.shape} {v.dtype}")
        for k in ("gate_e", "lra_e"):
            if not np.isfinite(np.asarray(st[k], dtype=np.float64)).all():
                raise RtamtInputError(f"{who}: state array {k!r} holds a non-finite value; "
                                      "refused")

    def add_gating_blocks(self, e: np.ndarray) -> None:
        """Add gating-block powers ``e`` (a former snapshot's; no loudness range)."""
        st = self._own()
        if self.params.mode == "histogram":
            _G.hist_add_many(st["gate_n"], st["gate_e"], e, True)
        else:
            st["gate_e"].extend(e)

    @classmethod
    def grad_rule(cls):
        from .gatedstats_grad import GatedStatisticsGrad

        return GatedStatisticsGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("statistics-histogram", dict(mode="histogram"), input="steps"),
                Example("statistics-exact", dict(mode="exact", lra_hop=10), input="steps"))


def _arrays(st: dict) -> dict:
    """The statistics' arrays of a state (views): histograms, or the exact values."""
    return {k: (v.view() if isinstance(v, Growing) else v)
            for k, v in st.items() if k != "summary"}


def _from_arrays(coeffs, arrays: dict) -> dict:
    """A state from a snapshot's arrays (checked; copied), its gates and percentiles
    derived from the statistics."""
    st = GatedStatistics.init_state(coeffs)
    for k, v in st.items():
        if k == "summary":
            continue
        if coeffs.mode == "histogram":
            v[...] = np.asarray(arrays[k], dtype=v.dtype)
        else:
            st[k] = Growing(np.asarray(arrays[k], dtype=np.float64))
    s = st["summary"]
    s[0], s[1] = float(arrays["integrated"]), float(arrays["loudness_range"])
    a = _arrays(st)
    if not math.isnan(s[0]):
        s[2] = gated_i(coeffs.mode, a)[1]
    if not math.isnan(s[1]):
        s[3:] = gated_lra(coeffs.mode, a)
    return st


def _add(coeffs, st: dict, k, e_m, e_s, running: bool):
    """Add steps ``k`` with powers ``e_m`` / ``e_s`` (``(K,)`` float64) to state ``st`` and
    update its summary (the integrated loudness, BS.1770-4 eqs. (3)-(7); the loudness
    range, Tech 3342); ``running``: returns the gated power after each step."""
    hop, mode = coeffs.lra_hop, coeffs.mode
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
    a, s = _arrays(st), st["summary"]
    if ok_m.any():
        ei, s[2] = gated_i(mode, a)
        s[0] = _loudness(ei)
    if (~np.isnan(e_s)).any():
        lo, hi, g = gated_lra(mode, a)
        s[3], s[4], s[5] = lo, hi, g
        s[1] = 10.0 * math.log10(hi / lo) if lo > 0.0 else 0.0
    return run
