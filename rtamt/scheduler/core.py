"""The scheduler: many streams, batched by design, earliest deadline first on a pool of
worker threads.

::

    push(x) ─► stream ring ─► intake (scheduler thread): re-block, validate, deadline
                                  │
              group (one per design: model, configuration, fs, dtype, block, layout)
              keeps every member's state in one slot store; ready blocks wait at most
              max_queue_delay, and never past what the earliest deadline allows
                                  │
              worker threads (numba kernels release the GIL): pick the group whose
              ready block has the earliest deadline, run up to max_batch of its streams
              in ONE call per stage on views of the slot store, publish each result
                                  │
    latest() / history() / subscribe(fn) / stats()  ◄─┘

:class:`Scheduler` is a facade over one unit per concern:

=======================================  ==============================================
:mod:`~rtamt.scheduler.costs`            the cost model of a design (measured, corrected)
:mod:`~rtamt.scheduler.placement`        admission, the block of ``open(block=None)``,
                                         CPU or GPU placement (``device='auto'``)
:mod:`~rtamt.scheduler.groups`           a design's slot store and its batched call
:mod:`~rtamt.scheduler.dispatch`         workers, earliest-deadline dispatch, closing,
                                         between-blocks holds
:mod:`~rtamt.scheduler.moves`            device moves (``move``, ``rebalance``)
:mod:`~rtamt.scheduler.stream`           one stream: input ring, re-blocking, results
:mod:`~rtamt.scheduler.link`             what a stream may ask of its scheduler
:mod:`~rtamt.scheduler.options`          a stream's policy (:class:`StreamOptions`)
=======================================  ==============================================

**Bit identity.**  A stream's state lives in its slot of the group's store
(:mod:`~rtamt.scheduler.groups`); a batched call runs each stream's lanes with exactly
the arithmetic it runs alone.

**Cost model and admission.**  Each design has a cost model ``t(call) = a + b * n * T``
(``n`` streams of ``T`` samples) plus the scheduler's own time per call and block, measured
at the block it runs at (:mod:`~rtamt.scheduler.costs`) and corrected by every call.
:meth:`Scheduler.open` predicts the workers' load, the worst latency of the new stream's
blocks and its own call against its period (a stream's blocks run one after another)
and raises :class:`RtamtCapacityError` with the numbers if the budget cannot be met
(``admission='best-effort'`` opens it anyway), and, in either mode, when the stream's
block would not fit in memory (:mod:`~rtamt.scheduler.memory`).
"""
from __future__ import annotations

import copy
import gc
import logging
import os
import threading
import time

import numpy as np

from ..engine import backend as backends
from ..engine import contract as streaming
from ..engine.contract import Streaming
from ..engine.parallel import Parallel
from ..engine.realtime import DEFAULT_PRIORITY
from .costs import CostModel, CostTable
from .dispatch import Dispatcher
from .groups import Group
from .link import RtamtClosedError, SchedulerLink
from .moves import Mover
from .options import StreamOptions
from .placement import BLOCKS, Admission, Placement, RtamtCapacityError, accelerator
from .stream import Stream

_log = logging.getLogger("rtamt.scheduler")
_perf = time.perf_counter
_accelerator_for = accelerator

__all__ = ["BLOCKS", "Scheduler", "RtamtCapacityError", "RtamtClosedError", "CostModel",
           "StreamOptions"]

#: distinct errors a scheduler lists in ``Scheduler.errors`` (later ones are counted only)
MAX_ERRORS = 100

class Scheduler:
    """Runs many streams on a pool of worker threads under latency budgets.

    threads          : worker threads (default: every core, ``os.cpu_count()``).
    max_batch        : most streams of one group in one call (default 8).
    max_queue_delay_ms: how long a group's first ready block may wait for the blocks of
                       the group's other streams before a call starts anyway (default 1 ms;
                       never past what the earliest deadline allows).
    max_load         : admission refuses streams that would make the predicted busy
                       fraction of the workers exceed this (default 0.9).
    freeze_gc        : ``gc.freeze()`` when starting and after opening a stream while
                       running: the objects alive then (modules, models, streams) leave the
                       garbage collector's scans.  A full collection otherwise scans every
                       object numba, numpy and torch created at import and pauses every
                       thread in the middle of a stream (docs/performance.md).
    backend, device  : where every stream's processor runs (see
                       :func:`rtamt.engine.backend.resolve`; default: the processor's own
                       backend, numba on the CPU).  ``device='auto'`` places each group
                       (see :mod:`rtamt.scheduler.placement`): on the CPU with the
                       processor's own backend, or on ``accelerator`` when its cost model
                       meets the budget there and the CPU is the tighter resource;
                       :meth:`rebalance` re-decides every group between two blocks.
    accelerator      : with ``device='auto'``, the device a ``'gpu'`` placement runs on
                       (Triton backend): default ``'cuda'`` when torch sees a CUDA device
                       and triton is installed, else none (every group on the CPU).
                       ``'cpu'`` names Triton's interpreter on CPU tensors, which exercises
                       the placement without a GPU.
    realtime         : SCHED_FIFO priority the workers ask for (default
                       ``rtamt.engine.realtime.DEFAULT_PRIORITY`` = 1; ``None``: normal
                       priority).  Without it a time-sharing task (on the benchmark machine
                       the kernel's ``kdamond``) can take a busy core for whole scheduler
                       ticks, and the blocks on it miss their budget (docs/performance.md).
                       When the
                       OS refuses (no ``CAP_SYS_NICE`` / ``RLIMIT_RTPRIO``) the workers run
                       at normal priority; ``stats()['_realtime']`` says which.
    trace            : a :class:`~rtamt.scheduler.trace.CallTrace` that records every
                       call's start, end, earliest deadline, batch size, group and worker
                       (preallocated, no lock; default None: no record).
    gil_switch_ms    : while running, Python's thread switch interval
                       (``sys.setswitchinterval``) is lowered to this (default 0.5 ms;
                       ``None`` leaves it).  With the default 5 ms, a worker whose kernel
                       returns waits up to 5 ms for the interpreter lock held by another
                       thread's Python code, several times per call (docs/performance.md).
                       The schedulers of a process share the interval
                       (:data:`~rtamt.scheduler.dispatch.SWITCH_INTERVAL`): the smallest
                       value of those running; the last one to stop restores it.

    ``s = Scheduler(); h = s.open('dau1997', 48000, budget_ms=10)``; ``h.push(x)`` from an
    audio callback; ``h.latest()``; ``h.close()``; ``s.close()``.  A scheduler is also a
    context manager (closing every stream on exit).  A closed scheduler refuses
    ``open``, ``push`` and ``start`` (:class:`RtamtClosedError`).

    ``errors``: the distinct errors seen (a processing call that failed, a subscriber
    that raised; at most ``MAX_ERRORS``), each also logged once on the ``rtamt.scheduler``
    logger; ``error_counts`` counts every occurrence per entry.
    """

    def __init__(self, threads: int | None = None, *, max_batch: int = 8,
                 max_queue_delay_ms: float = 1.0, max_load: float = 0.9,
                 gil_switch_ms: float | None = 0.5,
                 realtime: int | None = DEFAULT_PRIORITY,
                 backend: str | None = None, device=None, accelerator=None,
                 freeze_gc: bool = True, trace=None, start: bool = True):
        self.threads = int(threads or os.cpu_count() or 1)
        if self.threads < 1 or max_batch < 1 or not 0 < max_load <= 1.0:
            raise ValueError("threads and max_batch must be >= 1 and 0 < max_load <= 1")
        self.max_batch = int(max_batch)
        self.max_queue_delay = float(max_queue_delay_ms) / 1e3
        self.max_load = float(max_load)
        self.gil_switch = None if gil_switch_ms is None else float(gil_switch_ms) / 1e3
        #: 'auto' (groups placed by their cost models) or None (one backend for all)
        self.placement = "auto" if device == "auto" else None
        #: (backend, torch.device) of 'gpu' placements, or None (device='auto' only)
        self.accelerator = None
        if self.placement:
            if backend is not None:
                raise ValueError("device='auto' places groups on the processor's own "
                                 "backend or on the accelerator; leave backend=None")
            device = None
            self.accelerator = _accelerator_for(accelerator)
        elif accelerator is not None:
            raise ValueError("accelerator= goes with device='auto'")
        #: compute backend and device of every stream's processor (None: the processor's)
        self.backend, self.device = (None, None) if backend is None and device is None \
            else backends.resolve(backend, device)
        self.realtime = None if realtime is None else int(realtime)
        if self.realtime is not None and not 1 <= self.realtime <= 99:
            raise ValueError(f"realtime must be a SCHED_FIFO priority 1..99 or None, "
                             f"got {realtime}")
        #: per worker name: None (SCHED_FIFO granted) or why not
        self.realtime_status: dict[str, str | None] = {}
        self.freeze_gc = bool(freeze_gc)
        self._groups: dict = {}
        self._streams: list[Stream] = []
        self._names = 0
        self.errors: list[str] = []
        self.error_counts: dict[str, int] = {}
        self._error_keys: dict = {}
        self._error_lock = threading.Lock()
        # the units (module docstring), sharing the groups, the streams and one lock
        self._costs = CostTable(self.max_batch)
        self._dispatch = Dispatcher(self._groups, self._streams, self.max_queue_delay,
                                    self.realtime, self.realtime_status, self._report,
                                    trace)
        self._cv = self._dispatch.cv
        self._admission = Admission(self._groups, self._costs, self.threads, self.max_load,
                                    self.max_batch, self.accelerator)
        self._mover = Mover(self._dispatch, self._costs, self._admission, self.max_batch)
        d = self._dispatch
        #: what this scheduler's streams may ask of it (handed to every stream)
        self.link = SchedulerLink(notify=d.notify, attach_state=d.attach_state,
                                  between_blocks=d.between_blocks, deliver=d.deliver,
                                  close_stream=d.close_stream, start=self.start,
                                  report=self._report, running=lambda: d.running)
        if start:
            self.start()

    # ================================================================ lifecycle
    @property
    def running(self) -> bool:
        return self._dispatch.running

    @property
    def trace(self):
        """The :class:`~rtamt.scheduler.trace.CallTrace` given to the constructor, or None."""
        return self._dispatch.trace

    @property
    def closed(self) -> bool:
        """:meth:`close` was called: no more ``open``, ``push`` or ``start``."""
        return self.link.closed

    def _report(self, key, msg: str) -> None:
        """Any thread: an error occurred (``key`` says which kind: the same key is one
        error).  The first occurrence of a key is listed in :attr:`errors` and logged;
        every one is counted in :attr:`error_counts`."""
        with self._error_lock:
            first = self._error_keys.get(key)
            if first is None:
                if len(self.errors) >= MAX_ERRORS:
                    first = "(further distinct errors)"
                    self.error_counts[first] = self.error_counts.get(first, 0) + 1
                    return
                first = self._error_keys[key] = msg
                self.errors.append(msg)
                self.error_counts[msg] = 0
                _log.warning("rtamt scheduler: %s (logged once; stats() and "
                             "Scheduler.error_counts count every occurrence)", msg)
            self.error_counts[first] += 1

    def start(self) -> Scheduler:
        """Start the scheduler thread and the workers (idempotent)."""
        if self.closed:
            self.link.refuse("start")
        if self._dispatch.started:
            return self
        if self.freeze_gc:
            gc.freeze()
        self._dispatch.start(self.threads, self.gil_switch)
        return self

    def close(self, policy: str = "drain", timeout: float = 30.0) -> None:
        """Close every stream (``policy`` as in :meth:`Stream.close`), then stop the threads.
        Waits at most ``timeout`` seconds in all.  The scheduler stays closed: ``open``,
        ``push`` and ``start`` raise :class:`RtamtClosedError` afterwards."""
        self.link.closed = True
        end = _perf() + timeout
        for s in list(self._streams):
            s.close(policy, max(end - _perf(), 0.01))
        self.stop(max(end - _perf(), 0.01))

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the threads (streams stay open, their queues kept); bounded by ``timeout``."""
        if not self._dispatch.started:
            return
        alive = self._dispatch.stop(timeout)
        if alive:
            raise RuntimeError(f"rtamt scheduler threads did not stop within {timeout} s: "
                               f"{alive}")

    def __enter__(self):
        return self.start()

    def __exit__(self, et, ev, tb):
        self.close("discard" if et is not None else "drain")

    @property
    def streams(self) -> list[Stream]:
        """The open streams."""
        return [s for s in self._streams if not s.closed]

    # ================================================================ opening
    def _build(self, model, fs, kwargs, channels: int = 1):
        """The stream's processor: a model or meter made by name
        (:func:`rtamt.models.processor_by_name`), a dict's ``Parallel``, or the given
        streaming object (not already running another stream)."""
        if isinstance(model, str):
            from ..models import processor_by_name
            return processor_by_name(model, fs, channels, kwargs)
        if kwargs:
            raise ValueError("model keyword arguments need a model name, not an object")
        if isinstance(model, dict):
            return Parallel(model)
        if not isinstance(model, Streaming):
            raise TypeError(f"open: {type(model).__name__} does not follow the streaming "
                            "contract (rtamt.Streaming)")
        for s in self._streams:
            if s.proc is model and not s.closed:
                raise ValueError(f"open: this processor object already runs stream {s.name!r}; "
                                 "give every stream its own instance")
        return model

    def open(self, model, fs: float, block: int | None = None, *, budget_ms: float | None = None,
             dtype="float64", name: str | None = None, channels: int = 1,
             model_kwargs: dict | None = None, measure: bool = True,
             options: StreamOptions | None = None, **option_kw) -> Stream:
        """Open a stream and return its handle (:class:`Stream`).

        model      : a model name (``'dau1997'``, ...; keyword arguments in
                     ``model_kwargs``), a streaming object (used as the stream's own
                     processor: one object per stream), or ``{name: object}`` (a
                     :class:`~rtamt.engine.parallel.Parallel`).
        fs         : sample rate, Hz.
        block      : frames per processing block; ``None`` picks the largest power of two
                     (16-4096) whose period plus predicted worst latency fits the budget.
        budget_ms  : latency budget of a block's last sample (default: the block period;
                     with ``block=None``: 20 ms).
        dtype      : ``'float64'`` (AMT-exact) or ``'float32'``.
        channels   : input channels (a processor taking ``(channels, T)`` blocks).
        measure    : measure the design's cost model on copies of the processor (the
                     first stream of a design; also compiles its kernels).  ``False``
                     starts from a nominal model corrected by the measured calls (for
                     processors that cannot be copied; admission is then a guess).
        options    : the stream's policy, a :class:`StreamOptions` (default: every option
                     at its default): ``admission``, ``policy``, ``max_backlog_s``,
                     ``ring_seconds``, ``max_chunks``, ``sample_dtype``, ``on_error``,
                     ``source_timeout``, ``history``, ``stats_window``, ``idle_timeout``,
                     ``subscriber_backlog_s``.
        Each option is also accepted as a keyword (``open(..., policy='drop-newest',
        history=0)``); keywords replace the fields of ``options``.  An unknown keyword
        raises ``TypeError``.  ``admission='strict'`` (the default) raises
        :class:`RtamtCapacityError` when the budget cannot be met at the current load, the
        block's call outlasts its period or the block outlasts the budget; a block whose
        stream would not fit in memory is refused in either mode.  ``history`` (default 1)
        is the number of results kept: every result holds its block's outputs (Dau1997,
        float64: 563 KB per 256-sample block) and the results of one call share one
        batched array, so each result kept makes later calls write cache-cold memory
        (docs/performance.md); ``0`` keeps none (subscribers get every result).
        """
        if self.closed:
            self.link.refuse("open")
        opts = (StreamOptions() if options is None else options).replace(**option_kw)
        fs = float(fs)
        if not fs > 0 or channels < 1:
            raise ValueError("fs must be > 0 and channels >= 1")
        dtype = np.dtype(dtype)
        if dtype not in streaming.FLOATS:
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
        if block is not None and int(block) < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        proc = self._build(model, fs, model_kwargs, channels)
        example, batchable, ident, dkey, proto = self._prepare(proc, dtype, channels, fs,
                                                               measure)
        self._costs.measure(proto, example, dkey, fs)
        akey = self._admission.accelerator_cost(proc, proto, example, dkey, measure)
        if budget_ms is None:
            budget_s = (int(block) / fs) if block else 0.020
        else:
            budget_s = float(budget_ms) / 1e3
            if not budget_s > 0:
                raise ValueError(f"budget_ms must be > 0, got {budget_ms!r}")
        # refused before anything of the block's size exists, then timed at that size
        blocks = self._admission.blocks(None if block is None else int(block), dkey,
                                        name or getattr(proc, "name", "stream"),
                                        ident.get("name", type(proc).__name__), opts, fs,
                                        budget_s, channels, dtype)
        costs = {B: self._costs.at_block(proc, example, dkey, B, measure) for B in blocks}
        with self._cv:
            if block is None:
                block = self._admission.pick_block(dkey, costs, fs, budget_s, batchable)
            block = int(block)
            gkey, cost = dkey + (block,), costs[block]
            if self.placement:
                gkey = self._admission.place(proc, dkey, akey, block, fs, batchable,
                                             budget_s)
                cost = self._costs.get(gkey, self._costs[gkey[:-1]])
            self._names += 1
            nm = name or f"{getattr(proc, 'name', 'stream')}-{self._names}"
            s = Stream(self.link, proc, nm, fs, channels, block, budget_s, dtype, opts)
            g = self._groups.get(gkey)
            if g is None:
                g = self._new_group(gkey, dkey, akey, proc, proto, ident, block, fs, dtype,
                                    cost, batchable)
            self._admission.admit(g, s, opts.admission, len(self.streams))
            self._groups[gkey] = g
            if g.batchable and all(v is not None for v in g.slots):
                self._dispatch.quiesce(g)
            g.add(s)
            self._streams.append(s)
        # outside the lock: deep copies and warm calls
        g.prebuild(len(g.members), self.threads,
                   np.zeros((block,) if channels == 1 else (channels, block), dtype))
        if self.freeze_gc and self.running:
            gc.freeze()
        return s

    def _prepare(self, proc, dtype, channels: int, fs: float, measure: bool):
        """The processor on the scheduler's backend with its state made: ``(example
        input, batchable, design identity, design key, proto)``; ``proto`` is a pristine copy of the
        processor when a new design's cost is to be measured (else None)."""
        if self.backend is not None and getattr(proc, "backend", "numba") != self.backend:
            to = getattr(proc, "to", None)
            if to is None:
                raise backends.RtamtBackendError(
                    f"open: {type(proc).__name__} cannot change backend; the scheduler runs "
                    f"backend={self.backend!r}")
            to(self.device, backend=self.backend)
        example = np.zeros((1,) if channels == 1 else (channels, 1), dtype)
        prep = getattr(proc, "prepare", None)
        if prep is not None:
            prep(example)
        leaves = proc.state_leaves() if hasattr(proc, "state_leaves") else None
        # stateless objects run alone: nothing to batch, and their batched output layout
        # is not known
        batchable = bool(getattr(proc, "batchable", False)) and bool(leaves)
        ident = proc.design_identity()
        dkey = (type(proc).__name__, ident.get("fingerprint"), str(dtype), channels, fs,
                getattr(proc, "backend", "numba"), str(getattr(proc, "device", None)))
        # the cost table finds a lone processor's design by this length (CostTable._adopt)
        assert len(dkey) == self._costs.DESIGN_KEY, dkey
        if not batchable:
            dkey += (id(proc),)
        proto = None            # a pristine copy of the processor, made only when needed:
        if measure and not self._costs.known(dkey):       # to measure a new design's cost
            try:
                proto = copy.deepcopy(proc)
            except Exception:  # noqa: BLE001 - e.g. a user object holding locks
                if batchable:
                    raise
        return example, batchable, ident, dkey, proto

    def _new_group(self, gkey, dkey, akey, proc, proto, ident: dict, block: int, fs: float,
                   dtype, cost, batchable: bool) -> Group:
        """Under the lock: the group of a design's first stream of this block size (and
        device); its batched copies are made from ``proto`` (or a copy of ``proc``)."""
        label = f"{ident.get('name', type(proc).__name__)}@{fs:g}Hz/{block}/{dtype}"
        if getattr(proc, "backend", "numba") == "triton":
            label += f"/triton:{proc.device}"
        if batchable and (proto is None or gkey[:-1] != dkey):
            proto = copy.deepcopy(proc)          # the batched copies' template
        g = Group(gkey, label, proto, block, fs, cost, batchable, self.max_batch,
                  getattr(proc, "device", None))
        if self.placement:
            g.homes = (dkey, akey)
        return g

    # ================================================================ placement (device='auto')
    def placement_of(self, s: Stream) -> Placement:
        """``device='auto'``: the placement :func:`rtamt.scheduler.placement.decide` gives
        the group of stream ``s`` now (its cost models per device, the other groups'
        loads, the group's tightest budget)."""
        with self._cv:
            g = s.group
            if g is None or not self.placement:
                raise ValueError("placement_of: an open stream of a device='auto' scheduler")
            return self._admission.placement_of(g)

    def cost_models(self, s: Stream) -> dict:
        """``device='auto'``: ``{'cpu': CostModel, 'gpu': CostModel or None}`` of the
        design of stream ``s`` (the live objects the placement reads)."""
        h = s.group.homes
        return {"cpu": self._costs[h[0]], "gpu": None if h[1] is None else self._costs[h[1]]}

    def rebalance(self, timeout: float = 10.0) -> dict:
        """``device='auto'``: re-decide every group's placement (:meth:`placement_of`) and
        move each group whose device changes with :meth:`move` (between two of its
        blocks, the state exactly).  Returns ``{old label: new label}`` of the moves."""
        if not self.placement:
            return {}
        return self._mover.rebalance(timeout)

    def move(self, s: Stream, device=None, *, backend: str | None = None,
             timeout: float = 10.0) -> str:
        """Move the group of stream ``s`` to ``backend`` / ``device`` between two of its
        blocks; returns the new group's label (see
        :meth:`rtamt.scheduler.moves.Mover.move`)."""
        return self._mover.move(s, device, backend=backend, timeout=timeout)

    def load(self) -> float:
        """Predicted busy fraction of the workers for the open streams."""
        with self._cv:
            return self._admission.load()

    # ================================================================ introspection
    def stats(self) -> dict:
        """``{stream name: StreamStats}`` of the open streams, plus ``'_groups'``: per group
        its label, members and cost model, and ``'_load'``: the predicted worker load."""
        out = {s.name: s.stats() for s in self.streams}
        with self._cv:
            out["_groups"] = {g.label: {"streams": len(g.members), "cost": g.cost.describe(),
                                        "scale": g.cost.scale}
                              for g in self._groups.values() if g.members}
        out["_load"] = self.load()
        out["_realtime"] = self.realtime_info()
        return out

    def realtime_info(self) -> dict:
        """``{'priority': asked (None: not asked), 'workers': how many run SCHED_FIFO,
        'refused': the OS's reason for the others (None if all got it)}``."""
        st = dict(self.realtime_status)
        bad = [r for r in st.values() if r is not None]
        return {"priority": self.realtime, "workers": sum(r is None for r in st.values()),
                "refused": bad[0] if bad else None}
