"""The cost model: the predicted wall time of one call of a design, measured at the
block the design runs at and corrected by every call.

A design's model is ``t(call) = scale * (fixed_s + per_sample_s * n * T)`` for a call of
``n`` streams of ``T`` samples, plus the scheduler's own time for the call
(``call_overhead_s + n * block_overhead_s``: picking the call, taking each block in,
publishing each result).  :meth:`CostTable.measure` times copies of the design's
processor when its first stream opens (which also compiles or loads its kernels) at a
reference block of 256 samples, and the scheduler's own time on a private scheduler
(:func:`measure_overhead`); :meth:`CostTable.at_block` measures the call again at each
block size a group runs at, because the per-call cost is not linear in the block (Dau1997
takes 12 us for 1 sample, 24 us for 16 and 105 us for 256 on the development machine).
:meth:`CostModel.observe` folds every call's measured time into ``scale``.  Admission and
placement (:mod:`rtamt.scheduler.placement`) predict with it.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np

from .groups import make_runner

__all__ = ["CostModel", "CostTable"]

_perf = time.perf_counter


@dataclass
class CostModel:
    """Predicted wall time of one call: ``scale * (fixed_s + per_sample_s * n * T)`` for
    ``n`` streams of ``T`` samples (:meth:`call`), plus the scheduler's own time for it,
    ``call_overhead_s + n * block_overhead_s`` (:meth:`cost`).  ``fixed_s`` and
    ``per_sample_s`` are measured once per design and block size, the overheads once per
    design; ``scale`` follows the measured time of every call (exponential average of
    measured / predicted, weight ``alpha``)."""

    fixed_s: float
    per_sample_s: float
    scale: float = 1.0
    alpha: float = 0.02
    calls: int = 0
    #: the scheduler's own time per call (the pick, the hand-back), seconds
    call_overhead_s: float = 0.0
    #: the scheduler's own time per stream-block of a call (intake, publication), seconds
    block_overhead_s: float = 0.0

    def call(self, n: int, T: int) -> float:
        """The processor's time for a call of ``n`` streams of ``T`` samples, seconds."""
        return self.scale * (self.fixed_s + self.per_sample_s * n * T)

    def cost(self, n: int, T: int) -> float:
        """A worker's time for that call: :meth:`call` plus the scheduler's overhead."""
        return self.call(n, T) + self.call_overhead_s + n * self.block_overhead_s

    def observe(self, n: int, T: int, seconds: float) -> None:
        pred = self.fixed_s + self.per_sample_s * n * T
        if pred > 0:
            r = min(max(seconds / pred, 0.25), 8.0)
            self.scale += self.alpha * (r - self.scale)
            self.calls += 1

    def with_overhead(self, other: CostModel) -> CostModel:
        """This model with the overheads of ``other`` (the design's measurement)."""
        self.call_overhead_s = other.call_overhead_s
        self.block_overhead_s = other.block_overhead_s
        return self

    def describe(self) -> str:
        text = (f"{1e6 * self.scale * self.fixed_s:.1f} us per call + "
                f"{1e9 * self.scale * self.per_sample_s:.1f} ns per stream-sample")
        if self.call_overhead_s or self.block_overhead_s:
            text += (f" + scheduler {1e6 * self.call_overhead_s:.1f} us per call + "
                     f"{1e6 * self.block_overhead_s:.1f} us per stream-block")
        return text


def nbytes(out) -> int:
    """Bytes of a processor's output: arrays and tensors, in dicts, lists and tuples."""
    if isinstance(out, dict):
        return sum(nbytes(v) for v in out.values())
    if isinstance(out, (list, tuple)):
        return sum(nbytes(v) for v in out)
    n = getattr(out, "nbytes", None)            # numpy; a tensor: element size x count
    if n is None and hasattr(out, "element_size"):
        n = out.element_size() * out.numel()
    return int(n or 0)


def _best(obj, x, reps: int, stat=min):
    """``(stat of the times of reps calls of obj(x), the last output)`` after one untimed
    call (compile / load, state creation)."""
    obj(x)
    ts, out = [], None
    for _ in range(reps):
        t0 = _perf()
        out = obj(x)
        ts.append(_perf() - t0)
    return float(stat(ts)), out


def measure_overhead(proc, fs: float, example, max_batch: int, blocks: int = 200):
    """The scheduler's own time per call and per stream-block, beyond the processor's
    call: ``(call_overhead_s, block_overhead_s)``.

    Runs ``blocks`` one-sample blocks of 1 stream, then of ``k = min(4, max_batch)``
    streams (copies of ``proc``, pristine), through a private one-worker scheduler
    recording every call (:class:`~rtamt.scheduler.trace.CallTrace`), queued before it
    starts so that the worker goes from call to call: the median time from one call's
    start to the next, less the processor's own call of 1 (k) one-sample blocks timed
    alone, is the overhead of a call of 1 (k) streams: intake, the pick, the state
    gather, publication, the hand-back.  Two sizes give the part per call and the part
    per stream-block."""
    from .core import Scheduler  # the scheduler measures itself
    from .trace import CallTrace

    batched = getattr(proc, "batchable", False) and proc.state_leaves() is not None
    k = min(4, max_batch) if batched else 1
    x1 = np.zeros(example.shape[:-1] + (1,), example.dtype)
    per_n = {}
    for n in sorted({1, k}):
        tr = CallTrace(capacity=blocks + 16)
        s = Scheduler(threads=1, max_batch=n, realtime=None, freeze_gc=False,
                      gil_switch_ms=None, trace=tr, start=False)
        try:
            hs = [s.open(copy.deepcopy(proc), fs, 1, budget_ms=1e3, dtype=example.dtype,
                         channels=1 if example.ndim == 1 else example.shape[0],
                         measure=False, admission="best-effort", history=0,
                         policy="drop-newest", source_timeout=None) for _ in range(n)]
            z = np.zeros((blocks,) + x1.shape[:-1][::-1], example.dtype)
            for h in hs:
                h.push(z)
            s.start()
            for h in hs:
                h.wait_idle(30.0)
        finally:
            s.close("discard", 10.0)
        rec = tr.records()
        rec = rec[rec["batch"] == n]
        cycle = float(np.median(np.diff(rec["start"]))) if rec.size > 2 else 0.0
        alone = _best(make_runner(proc, n)[0], _stacked(proc, x1, n), 20)[0] if batched \
            else _best(copy.deepcopy(proc), x1, 20)[0]
        per_n[n] = max(cycle - alone, 0.0)
    if k == 1:
        return 0.0, per_n[1]
    block = max((per_n[k] - per_n[1]) / (k - 1), 0.0)
    return max(per_n[1] - block, 0.0), block


def _stacked(proto, x1, n: int):
    """``n`` copies of one stream's block ``x1`` as a batched copy of ``proto`` takes
    them (a stream of several rows, e.g. a stereo loudness stream: ``n x rows`` rows)."""
    x = np.stack([x1] * n)
    b = proto.state_dict()["stream"].get("batch")
    return x if b is None else x.reshape((n * b,) + x.shape[2:])


class CostTable(dict):
    """The cost models of a scheduler: ``{design key: CostModel}`` measured at the
    reference block (one per design and device: a design's key names its backend and
    device), and ``{design key + (block,): CostModel}`` measured at each block size a
    group runs at (:meth:`at_block`).  ``max_batch`` is the scheduler's largest call.
    ``memory[design key]``: ``(output, work)`` bytes per input sample of one stream
    (what a call returns, and its other stages' outputs), measured with the design."""

    #: the reference block of a design's measurement, samples
    T_REF = 256

    def __init__(self, max_batch: int):
        super().__init__()
        self.max_batch = int(max_batch)
        self.memory: dict = {}

    #: the length of a design's key (:meth:`Scheduler._prepare`); a processor that does
    #: not batch runs in groups of its own, its key ending in the object's ``id`` after it
    DESIGN_KEY = 7

    def _adopt(self, key) -> CostModel | None:
        """The cost model of ``key``: its own, or for the key of a processor that runs
        alone (the design's key + the object's id) a copy of the model of its design
        (measured once per design: every meter of one design costs the same; the copy's
        ``scale`` follows its own stream's calls), with the design's output bytes."""
        c = self.get(key)
        if c is not None or len(key) <= self.DESIGN_KEY:
            return c
        shared = key[:self.DESIGN_KEY] + key[self.DESIGN_KEY + 1:]
        base = self.get(shared)
        if base is None:
            return None
        c = self[key] = copy.deepcopy(base)
        c.scale, c.calls = 1.0, 0
        if shared in self.memory:
            self.memory[key] = self.memory[shared]
        return c

    def known(self, dkey) -> bool:
        """Is design ``dkey``'s cost measured (:meth:`measure` needs no copy to time)?"""
        return self._adopt(dkey) is not None

    def _share(self, key, c: CostModel) -> None:
        """Keep a lone processor's measured model ``c`` under its design's key too."""
        if len(key) > self.DESIGN_KEY:
            self.setdefault(key[:self.DESIGN_KEY] + key[self.DESIGN_KEY + 1:], copy.deepcopy(c))

    def measure(self, proto, example_T, dkey, fs: float | None = None) -> CostModel:
        """The cost model of design ``dkey``: measured once per design on copies of
        ``proto`` at :data:`T_REF` samples (this also compiles or loads the design's
        kernels; ``example_T`` is an input of the design's shape and dtype), with the
        scheduler's overhead (:func:`measure_overhead`, numba designs, once per process
        and design) and the design's output bytes per sample; or nominal (``1e-4`` s per
        call) when ``proto`` is None, corrected by every call."""
        c = self._adopt(dkey)
        if c is not None:
            return c
        if proto is None:     # not measured: a nominal model, corrected by every call
            c = self[dkey] = CostModel(1e-4, 0.0)
            return c
        T = self.T_REF
        x1 = np.zeros(example_T.shape[:-1] + (T,), example_T.dtype)
        t1, out = _best(copy.deepcopy(proto), x1, 5)
        every = getattr(proto, "process_all", None)
        every = nbytes(every(x1)) if every is not None else 0
        self.memory[dkey] = (nbytes(out) / T, max(every - nbytes(out), 0) / T)
        leaves = proto.state_leaves() if getattr(proto, "batchable", False) else None
        if leaves is not None:
            k = min(8, self.max_batch) if self.max_batch > 1 else 1
        else:
            k = 1
        if k > 1:
            tk = _best(make_runner(proto, k)[0], _stacked(proto, x1, k), 3)[0]
            per = max((tk - t1) / ((k - 1) * T), 0.0)
            fixed = max(t1 - per * T, 0.1 * t1)
            # other batch sizes once: kernels that a batch size selects are loaded (or
            # compiled) here, not in the first call of a running stream.  2..17 covers
            # every specialisation a size selects (numba: layout; Triton: 1 and multiples
            # of 16), max_batch the largest call; not every size up to a max_batch of
            # thousands (a GPU group), which would take minutes
            for n in sorted(set(range(2, min(self.max_batch, 17) + 1)) | {self.max_batch}):
                if n != k:
                    make_runner(proto, n)[0](_stacked(proto, x1, n))
        else:
            fixed, per = 0.3 * t1, 0.7 * t1 / T
        c = CostModel(fixed, per)
        if fs is not None and getattr(proto, "backend", "numba") == "numba":
            okey = dkey[:7]                    # the design, whichever object runs it
            ovh = _OVERHEADS.get(okey)
            if ovh is None:
                ovh = _OVERHEADS[okey] = measure_overhead(proto, fs, example_T,
                                                          self.max_batch)
            c.call_overhead_s, c.block_overhead_s = ovh
        self[dkey] = c
        if dkey in self.memory and len(dkey) > self.DESIGN_KEY:
            self.memory[dkey[:self.DESIGN_KEY]] = self.memory[dkey]
        self._share(dkey, c)
        return c

    def at_block(self, proc, example_T, dkey, block: int, measure: bool = True) -> CostModel:
        """The cost model of design ``dkey`` (measured already, :meth:`measure`) at
        ``block`` samples: one stream's call timed at that block on a copy of ``proc``
        (pristine; up to 5 calls, fewer when a call is long), and below :data:`T_REF` a
        call of ``min(8, max_batch)`` streams too (the fixed cost per call dominates
        there); medians, what a call typically takes.  At larger blocks the cost per
        stream-sample is the reference measurement's.  Without ``measure``, for a
        processor that cannot be copied, and off the numba backend (a Triton call's cost
        is its launches' more than its samples') the design's model.  The scheduler's
        overheads are the design's."""
        key = dkey + (block,)
        c = self._adopt(key)
        if c is not None:
            return c
        base = self[dkey]
        try:
            probe = copy.deepcopy(proc) if measure and dkey in self.memory and \
                getattr(proc, "backend", "numba") == "numba" else None
        except Exception:  # noqa: BLE001 - e.g. a user object holding locks
            probe = None
        if probe is None:
            return base
        x1 = np.zeros(example_T.shape[:-1] + (block,), example_T.dtype)
        guess = base.call(1, block)
        t1 = _best(probe, x1, int(min(max(0.05 // max(guess, 1e-9), 1), 5)), np.median)[0]
        per = base.per_sample_s
        k = min(8, self.max_batch)
        if block < self.T_REF and k > 1 and probe.state_leaves() is not None \
                and getattr(probe, "batchable", False):
            tk = _best(make_runner(proc, k)[0], _stacked(proc, x1, k), 5, np.median)[0]
            per = max((tk - t1) / ((k - 1) * block), 0.0)
        fixed = t1 - per * block
        if fixed < 0.1 * t1:
            fixed, per = 0.1 * t1, 0.9 * t1 / block
        c = self[key] = CostModel(fixed, per).with_overhead(base)
        self._share(key, c)
        return c


#: the scheduler's overhead per design (``measure_overhead``), measured once per process
_OVERHEADS: dict = {}
