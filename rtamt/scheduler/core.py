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

**Bit identity.**  A stream's state lives in its slot of the group's store (the stream's
own processor holds views of that slot).  A batched call gathers the members' slots
(a view when the slots are contiguous) into a batched copy of the processor, so every
kernel runs each stream's lanes with exactly the arithmetic it runs alone; outputs are
split back by stream.  States that all streams of a call must share (a loudness model's
frame clock, a resampler's phase) partition the ready streams: only streams at the same
value share a call.

**One block in flight per stream**: a stream that is in a worker's call (or in a
:meth:`Stream.snapshot` / :meth:`~Stream.restore` / :meth:`~Stream.reset`) is not picked
again until it is back, so its state is never touched by two threads.

**Cost model and admission.**  Each design has a cost model ``t(call) = a + b * n * T``
(``n`` streams of ``T`` samples), measured when its first stream opens (this also
compiles or loads its kernels) and kept current by a running correction factor from every
call's measured time.  :meth:`Scheduler.open` predicts the load (busy fraction of the
workers) and the worst latency of the new stream's blocks with it and raises
:class:`RtamtCapacityError` with the numbers if the budget cannot be met;
``admission='best-effort'`` opens the stream anyway and counts its misses.
"""
from __future__ import annotations

import collections
import copy
import gc
import logging
import math
import os
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from ..engine import backend as _B
from ..engine import contract as _C
from ..engine.contract import RtamtInputError, Streaming
from ..engine.denormal import ensure_ftz
from ..engine.parallel import Parallel
from ..engine.realtime import DEFAULT_PRIORITY, request_realtime
from . import placement as _P
from .stream import Stream

_perf = time.perf_counter
_log = logging.getLogger("rtamt.scheduler")

__all__ = ["Scheduler", "RtamtCapacityError", "RtamtClosedError", "CostModel"]

#: distinct errors a scheduler lists in ``Scheduler.errors`` (later ones are counted only)
MAX_ERRORS = 100

#: candidate blocks of ``open(block=None)``, largest first
BLOCKS = (4096, 2048, 1024, 512, 256, 128, 64, 32, 16)


class RtamtCapacityError(RuntimeError):
    """A stream's budget cannot be met at the current load (the message gives the cost
    model, the predicted load and latency, and the budget)."""


class RtamtClosedError(RuntimeError):
    """The scheduler was closed (:meth:`Scheduler.close`): it opens no stream, takes no
    push and does not start again."""


@dataclass
class CostModel:
    """Predicted wall time of one call: ``scale * (fixed_s + per_sample_s * n * T)`` for
    ``n`` streams of ``T`` samples.  ``fixed_s`` and ``per_sample_s`` are measured once per
    design; ``scale`` follows the measured time of every call (exponential average of
    measured / predicted, weight ``alpha``)."""

    fixed_s: float
    per_sample_s: float
    scale: float = 1.0
    alpha: float = 0.02
    calls: int = 0

    def cost(self, n: int, T: int) -> float:
        return self.scale * (self.fixed_s + self.per_sample_s * n * T)

    def observe(self, n: int, T: int, seconds: float) -> None:
        pred = self.fixed_s + self.per_sample_s * n * T
        if pred > 0:
            r = min(max(seconds / pred, 0.25), 8.0)
            self.scale += self.alpha * (r - self.scale)
            self.calls += 1

    def describe(self) -> str:
        return (f"{1e6 * self.scale * self.fixed_s:.1f} us per call + "
                f"{1e9 * self.scale * self.per_sample_s:.1f} ns per stream-sample")


def _make_runner(proto, n: int):
    """A copy of ``proto`` whose state is a batch of ``n`` streams: ``(obj, leaves,
    buffers)``; ``leaves`` are its ``(holder, key, axis)``, ``buffers`` the arrays it was
    built with (used to gather slots that are not contiguous)."""
    r = copy.deepcopy(proto)
    sd = proto.state_dict()
    r.load_state_dict(_C.stack_states([sd] * n))
    leaves = r._state_leaves()
    return r, leaves, [h[k] for h, k, _ in leaves]


def _is_tensor(a) -> bool:
    return type(a) is not np.ndarray


def _zeros(shape, like):
    """Zeros of ``shape`` in the dtype, library and device of ``like`` (a state leaf)."""
    if type(like) is np.ndarray:
        return np.zeros(shape, like.dtype)
    import torch
    return torch.zeros(shape, dtype=like.dtype, device=like.device)


def _copy(a):
    return np.array(a, copy=True) if type(a) is np.ndarray else a.clone()


def _host_bytes(a) -> bytes:
    """The bytes of a state leaf (a numpy array directly, a tensor through a host copy)."""
    return a.tobytes() if type(a) is np.ndarray else _B.to_numpy(a).tobytes()


def _split(obj, out, sl):
    """Stream ``sl``'s part of a batched call's output ``out`` of ``obj``."""
    if isinstance(out, dict):
        sub = getattr(obj, "children_map", None)
        if sub is not None:
            return {k: _split(sub[k], v, sl) for k, v in out.items()}
        ub = getattr(obj, "unbatched_outputs", ())
        return {k: (v if k in ub else v[sl]) for k, v in out.items()}
    return out[sl]


class Group:
    """Streams of one design (see the module docstring): a slot store of their states,
    a pool of batched copies of the processor, and a cost model."""

    def __init__(self, key, label: str, proto, block: int, fs: float, cost: CostModel,
                 batchable: bool, max_batch: int, device=None):
        self.key = key
        self.label = label
        self.proto = proto
        self.block = block
        self.fs = fs
        self.cost = cost
        self.batchable = batchable
        self.max_batch = max_batch if batchable else 1
        self.members: list[Stream] = []
        self.inflight = 0
        self.frozen = False
        self.runners: dict[int, list] = {}
        self.period = block / fs
        #: CUDA groups only (None elsewhere): the group's CUDA stream, on which its calls
        #: copy and launch, and its pinned host staging buffers, a pool per input shape
        self.cuda_stream, self.staging = None, None
        #: device='auto': the design's cost-model keys (CPU, accelerator or None)
        self.homes = None
        if device is not None and getattr(device, "type", None) == "cuda":
            import torch
            self.cuda_stream, self.staging = torch.cuda.Stream(device), {}
        if batchable:
            sd = proto.state_dict()["stream"]
            self.stream_batch = sd.get("batch")
            leaves = proto._state_leaves()
            # (axis, shape, a leaf to copy dtype / library / device from: numpy arrays on
            # the numba backend, tensors on a device on the Triton backend)
            self.spec = [(axis, tuple(h[k].shape), h[k]) for h, k, axis in leaves]
            self.has_shared = any(a is None for a, _, _ in self.spec)
            self._alloc(4)
        else:
            self.spec, self.has_shared, self.store, self.slots = [], False, [], []

    def _alloc(self, S: int) -> None:
        old = getattr(self, "store", None)
        self.store = [_zeros((S,) + shape, like) for _, shape, like in self.spec]
        slots = getattr(self, "slots", [])
        if old is not None:
            for new, o in zip(self.store, old):
                new[:o.shape[0]] = o
        self.slots = slots + [None] * (S - len(slots))

    # -- state attachment (scheduler lock; the stream not in flight) -------------------
    def attach(self, s: Stream) -> None:
        """Write the stream's state into its slot and point the processor at the slot."""
        if not self.batchable:
            return
        leaves = s.proc._state_leaves()
        if leaves is None or len(leaves) != len(self.spec):
            raise RtamtInputError(f"{s.name}: the processor's state does not fit its group")
        for j, (h, k, _) in enumerate(leaves):
            v = self.store[j][s.slot]
            if h[k] is not v:
                v[...] = h[k]
                h[k] = v

    def detach(self, s: Stream) -> None:
        """Give the processor its own copy of the state (the slot is freed)."""
        s._flush_bumps()
        if self.batchable and s.slot >= 0:
            leaves = s.proc._state_leaves() or []
            for h, k, _ in leaves:
                h[k] = _copy(h[k])
            self.slots[s.slot] = None
        s.slot = -1

    def add(self, s: Stream) -> None:
        if self.batchable:
            free = [i for i, v in enumerate(self.slots) if v is None]
            if not free:
                S = len(self.slots)
                self._alloc(2 * S)
                for m in self.members:
                    self.attach(m)
                free = [S]
            s.slot = free[0]
            self.slots[s.slot] = s
            self.attach(s)
        self.members.append(s)
        s.group = self

    def remove(self, s: Stream) -> None:
        self.detach(s)
        if s in self.members:
            self.members.remove(s)
        s.group = None

    def shared_key(self, s: Stream):
        if not self.has_shared:
            return None
        return tuple(_host_bytes(self.store[j][s.slot])
                     for j, (a, _, _) in enumerate(self.spec) if a is None)

    # -- a call (worker thread, outside the lock) --------------------------------------
    def runner(self, n: int):
        pool = self.runners.setdefault(n, [])
        return pool.pop() if pool else _make_runner(self.proto, n)

    def run(self, streams: list) -> list:
        """Process the ready block of every stream in ``streams`` (sorted by slot, same
        length, same shared state) in one call; returns each stream's output.

        A CUDA group stages the input in a pinned host buffer and runs the call on its
        CUDA stream (after the work queued on the device's default stream), then waits
        for that stream: the outputs (tensors on the device) are complete when this
        returns."""
        if self.cuda_stream is None:
            return self._call(streams, None)
        import torch
        pool, cs = self.staging, self.cuda_stream
        # state written on the default stream (attach, move, restore) comes first
        cs.wait_stream(torch.cuda.default_stream(cs.device))
        try:
            with torch.cuda.stream(cs):
                return self._call(streams, pool)
        finally:
            cs.synchronize()

    def _input(self, blocks: list, pool):
        """The ready blocks as one call's input: the one block itself, or the blocks
        stacked (a new numpy array) when ``pool`` is None; otherwise written into a pinned
        host buffer from ``pool`` (a CPU tensor, so the model's copy to the device reads
        page-locked memory) that :meth:`_release` returns to the pool after the call."""
        if pool is None:
            return blocks[0] if len(blocks) == 1 else np.stack(blocks)
        import torch
        shape = blocks[0].shape if len(blocks) == 1 else (len(blocks),) + blocks[0].shape
        key = (shape, blocks[0].dtype.str)
        free = pool.setdefault(key, [])
        buf = free.pop() if free else torch.empty(
            shape, dtype=torch.from_numpy(blocks[0][:0]).dtype, pin_memory=True)
        dst = buf.numpy()
        if len(blocks) == 1:
            dst[...] = blocks[0]
        else:
            np.stack(blocks, out=dst)
        return buf

    @staticmethod
    def _release(pool, x) -> None:
        if pool is not None:
            pool[(tuple(x.shape), x.numpy().dtype.str)].append(x)

    def _call(self, streams: list, pool) -> list:
        n = len(streams)
        if n == 1 or not self.batchable:
            s = streams[0]
            if pool is None:
                return [s.proc(s._block_input())]
            x = self._input([s._block_input()], pool)
            try:
                return [s.proc(x)]
            finally:
                self._release(pool, x)
        obj, leaves, bufs = self.runner(n)
        x = None
        try:
            idx = [s.slot for s in streams]
            contiguous = idx[-1] - idx[0] == n - 1
            set_ = []
            for j, ((h, k, axis), buf) in enumerate(zip(leaves, bufs)):
                st = self.store[j]
                if axis is None:
                    buf[...] = st[idx[0]]
                    v = buf
                elif axis == 0 and contiguous:
                    v = st[idx[0]:idx[0] + n].reshape(buf.shape)
                elif axis == 0:
                    if _is_tensor(st):
                        buf.view((n,) + tuple(st.shape[1:]))[...] = st[idx]
                    else:
                        np.take(st, idx, axis=0, out=buf.reshape((n,) + st.shape[1:]))
                    v = buf
                else:
                    if _is_tensor(st):
                        import torch
                        torch.cat([st[i] for i in idx], dim=axis, out=buf)
                    else:
                        np.concatenate([st[i] for i in idx], axis=axis, out=buf)
                    v = buf
                h[k] = v
                set_.append(v)
            x = self._input([s._block_input() for s in streams], pool)
            out = obj(x if self.stream_batch is None else
                      x.reshape((n * self.stream_batch,) + tuple(x.shape[2:])))
            # write back what does not live in the store already
            for j, ((h, k, axis), buf) in enumerate(zip(leaves, bufs)):
                st = self.store[j]
                v = h[k]
                if v is not set_[j]:          # the object rebound the array: copy it back
                    buf = v
                elif not (axis == 0 and contiguous):
                    buf = v
                else:
                    continue
                if axis is None:
                    for i in idx:
                        st[i] = buf
                elif axis == 0:
                    st[idx] = buf.reshape((n,) + st.shape[1:])
                else:
                    r = st.shape[1 + axis]
                    for p, i in enumerate(idx):
                        sl = (slice(None),) * axis + (slice(p * r, (p + 1) * r),)
                        st[i][...] = buf[sl]
            b = self.stream_batch
            outs = []
            for p, s in enumerate(streams):
                s._bumps += 1          # counted into the processor between blocks
                outs.append(_split(obj, out, p if b is None else slice(p * b, (p + 1) * b)))
            return outs
        finally:
            for (h, k, _), buf in zip(leaves, bufs):
                h[k] = buf
            self.runners[n].append((obj, leaves, bufs))
            if x is not None:
                self._release(pool, x)


def _accelerator(name):
    """``(backend, device)`` of a ``'gpu'`` placement, or None: ``name=None`` is CUDA when
    torch sees a device and triton is installed, else None; a name is resolved on the
    Triton backend (raising if it cannot run here)."""
    if name is None:
        import torch
        if not torch.cuda.is_available() or _B._triton_available() is not None:
            return None
        name = "cuda"
    return _B.resolve("triton", name)


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
    gil_switch_ms    : while running, Python's thread switch interval
                       (``sys.setswitchinterval``) is lowered to this (default 0.5 ms;
                       ``None`` leaves it).  With the default 5 ms, a worker whose kernel
                       returns waits up to 5 ms for the interpreter lock held by another
                       thread's Python code, several times per call (docs/performance.md).

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
                 freeze_gc: bool = True, start: bool = True):
        self.threads = int(threads or os.cpu_count() or 1)
        if self.threads < 1 or max_batch < 1 or not 0 < max_load <= 1.0:
            raise ValueError("threads and max_batch must be >= 1 and 0 < max_load <= 1")
        self.max_batch = int(max_batch)
        self.max_queue_delay = float(max_queue_delay_ms) / 1e3
        self.max_load = float(max_load)
        self.gil_switch = None if gil_switch_ms is None else float(gil_switch_ms) / 1e3
        #: compute backend of every stream's processor (None: the processor's own)
        #: 'auto' (groups placed by their cost models) or None (one backend for all)
        self.placement = "auto" if device == "auto" else None
        #: (backend, torch.device) of 'gpu' placements, or None (device='auto' only)
        self.accelerator = None
        if self.placement:
            if backend is not None:
                raise ValueError("device='auto' places groups on the processor's own "
                                 "backend or on the accelerator; leave backend=None")
            device = None
            self.accelerator = _accelerator(accelerator)
        elif accelerator is not None:
            raise ValueError("accelerator= goes with device='auto'")
        self.backend, self.device = (None, None) if backend is None and device is None \
            else _B.resolve(backend, device)
        self.realtime = None if realtime is None else int(realtime)
        if self.realtime is not None and not 1 <= self.realtime <= 99:
            raise ValueError(f"realtime must be a SCHED_FIFO priority 1..99 or None, "
                             f"got {realtime}")
        #: per worker name: None (SCHED_FIFO granted) or why not
        self.realtime_status: dict[str, str | None] = {}
        self.freeze_gc = bool(freeze_gc)
        self._old_switch = None
        self._cv = threading.Condition(threading.Lock())
        self._groups: dict = {}
        self._costs: dict = {}
        self._streams: list[Stream] = []
        self._dirty: collections.deque = collections.deque()
        self._bell = threading.Lock()
        self._bell.acquire()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self._idle = 0
        self._t_watch = 0.0
        self._names = 0
        self._closed = False
        self.errors: list[str] = []
        self.error_counts: dict[str, int] = {}
        self._error_keys: dict = {}
        self._error_lock = threading.Lock()
        if start:
            self.start()

    # ================================================================ lifecycle
    @property
    def running(self) -> bool:
        return bool(self._threads) and not self._stopping

    @property
    def closed(self) -> bool:
        """:meth:`close` was called: no more ``open``, ``push`` or ``start``."""
        return self._closed

    def _refuse(self, what: str):
        raise RtamtClosedError(f"{what}: this Scheduler was closed (Scheduler.close()); "
                               "nothing was queued or opened; make a new Scheduler")

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
        if self._closed:
            self._refuse("start")
        if self._threads:
            return self
        self._stopping = False
        if self.freeze_gc:
            gc.freeze()
        if self.gil_switch is not None and sys.getswitchinterval() > self.gil_switch:
            self._old_switch = sys.getswitchinterval()
            sys.setswitchinterval(self.gil_switch)
        th = [threading.Thread(target=self._worker, name=f"rtamt-worker-{i}", daemon=True)
              for i in range(self.threads)]
        self._threads = th
        for t in th:
            t.start()
        if self.realtime is not None:      # each worker reports its SCHED_FIFO request
            end = _perf() + 1.0
            while len(self.realtime_status) < len(th) and _perf() < end:
                time.sleep(0.0005)
        return self

    def close(self, policy: str = "drain", timeout: float = 30.0) -> None:
        """Close every stream (``policy`` as in :meth:`Stream.close`), then stop the threads.
        Waits at most ``timeout`` seconds in all.  The scheduler stays closed: ``open``,
        ``push`` and ``start`` raise :class:`RtamtClosedError` afterwards."""
        self._closed = True
        end = _perf() + timeout
        for s in list(self._streams):
            s.close(policy, max(end - _perf(), 0.01))
        self.stop(max(end - _perf(), 0.01))

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the threads (streams stay open, their queues kept); bounded by ``timeout``."""
        th = self._threads
        if not th:
            return
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        for _ in th:
            self._ring()
        end = _perf() + timeout
        for t in th:
            t.join(max(end - _perf(), 0.0))
        alive = [t.name for t in th if t.is_alive()]
        self._threads = []
        if self._old_switch is not None and sys.getswitchinterval() == self.gil_switch:
            sys.setswitchinterval(self._old_switch)
        self._old_switch = None
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
    def _build(self, model, fs, kwargs):
        if isinstance(model, str):
            from ..models import MODELS
            cls = MODELS.get(model.lower())
            if cls is None:
                raise ValueError(f"unknown model {model!r}; choose from {sorted(MODELS)}")
            return cls(fs, **(kwargs or {}))
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

    def _design_cost(self, proto, example_T, dkey) -> CostModel:
        """Measure (once per design) the cost model on copies of ``proto``; this also
        compiles or loads the design's kernels."""
        c = self._costs.get(dkey)
        if c is not None:
            return c
        if proto is None:     # not measured: a nominal model, corrected by every call
            c = self._costs[dkey] = CostModel(1e-4, 0.0)
            return c
        T = 256
        x1 = np.zeros(example_T.shape[:-1] + (T,), example_T.dtype)

        def best(obj, x, reps):
            obj(x)                       # first call: compile / load, state creation
            ts = []
            for _ in range(reps):
                t0 = _perf()
                obj(x)
                ts.append(_perf() - t0)
            return min(ts)

        t1 = best(copy.deepcopy(proto), x1, 5)
        leaves = proto._state_leaves() if getattr(proto, "batchable", False) else None
        if leaves is not None:
            k = min(8, self.max_batch) if self.max_batch > 1 else 1
        else:
            k = 1
        if k > 1:
            b = proto.state_dict()["stream"].get("batch")

            def batch(n):
                x = np.stack([x1] * n)
                return x if b is None else x.reshape((n * b,) + x.shape[2:])
            tk = best(_make_runner(proto, k)[0], batch(k), 3)
            per = max((tk - t1) / ((k - 1) * T), 0.0)
            fixed = max(t1 - per * T, 0.1 * t1)
            # other batch sizes once: kernels that a batch size selects are loaded (or
            # compiled) here, not in the first call of a running stream.  2..17 covers
            # every specialisation a size selects (numba: layout; Triton: 1 and multiples
            # of 16), max_batch the largest call; not every size up to a max_batch of
            # thousands (a GPU group), which would take minutes
            for n in sorted(set(range(2, min(self.max_batch, 17) + 1)) | {self.max_batch}):
                if n != k:
                    _make_runner(proto, n)[0](batch(n))
        else:
            fixed, per = 0.3 * t1, 0.7 * t1 / T
        c = self._costs[dkey] = CostModel(fixed, per)
        return c

    def open(self, model, fs: float, block: int | None = None, *, budget_ms: float | None = None,
             dtype="float64", name: str | None = None, channels: int = 1,
             admission: str = "strict", model_kwargs: dict | None = None,
             idle_timeout: float | None = None, measure: bool = True, history: int = 1,
             **stream_kw) -> Stream:
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
        admission  : ``'strict'`` raises :class:`RtamtCapacityError` when the budget cannot
                     be met at the current load; ``'best-effort'`` opens anyway.
        idle_timeout: seconds without a push after which the stream is closed (drained)
                     and reported ``aged-out`` (``None``: never).
        measure    : measure the design's cost model on copies of the processor (the
                     first stream of a design; also compiles its kernels).  ``False``
                     starts from a nominal model corrected by the measured calls (for
                     processors that cannot be copied; admission is then a guess).
        history    : results kept for :meth:`Stream.history` (default 1: the latest).
                     Every result holds its block's outputs (Dau1997, float64: 563 KB per
                     256-sample block), and the results of one call share one batched
                     array: each result kept makes later calls write cache-cold memory
                     (docs/performance.md).  ``0`` keeps none (``latest()`` is ``None``;
                     subscribers get every result): the calls then reuse cache-warm memory.
        Other keywords go to the stream (``policy``, ``max_backlog_s``, ``ring_seconds``,
        ``on_error``, ``source_timeout``, ``sample_dtype`` (the input ring's dtype;
        default ``dtype``, so float64 input stays exact), ...).
        """
        if self._closed:
            self._refuse("open")
        if admission not in ("strict", "best-effort"):
            raise ValueError("admission must be 'strict' or 'best-effort'")
        fs = float(fs)
        if not fs > 0 or channels < 1:
            raise ValueError("fs must be > 0 and channels >= 1")
        dtype = np.dtype(dtype)
        if dtype not in _C.FLOATS:
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
        proc = self._build(model, fs, model_kwargs)
        if self.backend is not None and getattr(proc, "backend", "numba") != self.backend:
            to = getattr(proc, "to", None)
            if to is None:
                raise _B.RtamtBackendError(
                    f"open: {type(proc).__name__} cannot change backend; the scheduler runs "
                    f"backend={self.backend!r}")
            to(self.device, backend=self.backend)
        example = np.zeros((1,) if channels == 1 else (channels, 1), dtype)
        prep = getattr(proc, "prepare", None)
        if prep is not None:
            prep(example)
        leaves = proc._state_leaves() if hasattr(proc, "_state_leaves") else None
        # stateless objects run alone: nothing to batch, and their batched output layout
        # is not known
        batchable = bool(getattr(proc, "batchable", False)) and bool(leaves)
        ident = proc.design_identity()
        dkey = (type(proc).__name__, ident.get("fingerprint"), str(dtype), channels, fs,
                getattr(proc, "backend", "numba"), str(getattr(proc, "device", None)))
        if not batchable:
            dkey += (id(proc),)
        proto = None            # a pristine copy of the processor, made only when needed:
        if measure and dkey not in self._costs:       # to measure a new design's cost
            try:
                proto = copy.deepcopy(proc)
            except Exception:  # noqa: BLE001 - e.g. a user object holding locks
                if batchable:
                    raise
        cost = self._design_cost(proto, example, dkey)
        akey = self._accelerator_cost(proc, proto, example, dkey, measure)
        if budget_ms is None:
            budget_s = (block / fs) if block else 0.020
        else:
            budget_s = float(budget_ms) / 1e3
            if not budget_s > 0:
                raise ValueError(f"budget_ms must be > 0, got {budget_ms!r}")
        with self._cv:
            if block is None:
                block = self._pick_block(dkey, cost, fs, budget_s, batchable)
            block = int(block)
            if block < 1:
                raise ValueError(f"block must be >= 1, got {block}")
            gkey = dkey + (block,)
            if self.placement:
                gkey = self._place(proc, dkey, akey, block, fs, batchable, budget_s)
                cost = self._costs[gkey[:-1]]
            self._names += 1
            nm = name or f"{getattr(proc, 'name', 'stream')}-{self._names}"
            s = Stream(self, proc, nm, fs, channels, block, budget_s, dtype,
                       idle_timeout=idle_timeout, admission=admission, history=history,
                       **stream_kw)
            g = self._groups.get(gkey)
            if g is None:
                label = f"{ident.get('name', type(proc).__name__)}@{fs:g}Hz/{block}/{dtype}"
                if getattr(proc, "backend", "numba") == "triton":
                    label += f"/triton:{proc.device}"
                if batchable and (proto is None or gkey[:-1] != dkey):
                    proto = copy.deepcopy(proc)          # the batched copies' template
                g = Group(gkey, label, proto, block, fs, cost, batchable, self.max_batch,
                          getattr(proc, "device", None))
                if self.placement:
                    g.homes = (dkey, akey)
            self._admit(g, s, admission)
            self._groups[gkey] = g
            if g.batchable and all(v is not None for v in g.slots):
                self._quiesce(g)
            g.add(s)
            self._streams.append(s)
        if self.freeze_gc and self.running:
            gc.freeze()
        return s

    # ================================================================ placement (device='auto')
    def _accelerator_cost(self, proc, proto, example, dkey, measure: bool):
        """``device='auto'`` with an accelerator: the design's key there, its cost model
        made once per (design, device) (measured on a copy of the processor moved there;
        nominal when ``measure`` is False), or None when the processor cannot move."""
        if self.accelerator is None:
            return None
        b, d = self.accelerator
        akey = dkey[:5] + (b, str(d)) + dkey[7:]
        if akey not in self._costs:
            try:
                probe = copy.deepcopy(proto if proto is not None else proc)
                probe.to(d, backend=b)
            except Exception:  # noqa: BLE001 - no Triton kernel, not copyable: CPU only
                return None
            self._design_cost(probe if measure else None, example, akey)
        return akey

    def _decision(self, g: Group | None, homes, block: int, fs: float, max_batch: int,
                  streams: int, budget_s: float) -> _P.Placement:
        """Under the lock: :func:`rtamt.scheduler.placement.decide` for ``streams``
        streams of the design whose CPU and accelerator keys are ``homes``, with the
        loads of every group but ``g``."""
        others = [h for h in self._groups.values() if h is not g and h.members]
        akey = homes[1]
        return _P.decide(
            self._costs[homes[0]], None if akey is None else self._costs[akey],
            streams=streams, block=block, fs=fs, budget_s=budget_s, max_batch=max_batch,
            cpu_busy=sum(self._work(h, len(h.members)) for h in others), cores=self.threads,
            gpu_busy=0.0 if akey is None else sum(
                self._work(h, len(h.members)) for h in others if h.key[5:7] == akey[5:7]),
            max_load=self.max_load)

    def _place(self, proc, dkey, akey, block: int, fs: float, batchable: bool,
               budget_s: float):
        """Under the lock (``device='auto'``): the key of the group a new stream joins and
        ``proc`` moved there: its design's group wherever that runs, else where
        :meth:`_decision` places a new group."""
        cpu, acc = dkey + (block,), None if akey is None else akey + (block,)
        if acc is None:
            return cpu
        running = [k for k in (acc, cpu) if k in self._groups and self._groups[k].members]
        if running:
            key = running[0]
        else:
            p = self._decision(None, (dkey, akey), block, fs,
                               self.max_batch if batchable else 1, 1, budget_s)
            key = acc if p.device == "gpu" else cpu
        if key == acc:
            proc.to(self.accelerator[1], backend=self.accelerator[0])
        return key

    def placement_of(self, s: Stream) -> _P.Placement:
        """``device='auto'``: the placement :func:`rtamt.scheduler.placement.decide` gives
        the group of stream ``s`` now (its cost models per device, the other groups'
        loads, the group's tightest budget)."""
        with self._cv:
            g = s.group
            if g is None or not self.placement:
                raise ValueError("placement_of: an open stream of a device='auto' scheduler")
            return self._decision(g, g.homes, g.block, g.fs, g.max_batch, len(g.members),
                                  min(m.budget_s for m in g.members))

    def cost_models(self, s: Stream) -> dict:
        """``device='auto'``: ``{'cpu': CostModel, 'gpu': CostModel or None}`` of the
        design of stream ``s`` (the live objects the placement reads)."""
        h = s.group.homes
        return {"cpu": self._costs[h[0]], "gpu": None if h[1] is None else self._costs[h[1]]}

    def rebalance(self, timeout: float = 10.0) -> dict:
        """``device='auto'``: re-decide every group's placement (:meth:`placement_of`) and
        move each group whose device changes with :meth:`move` (between two of its
        blocks, the state exactly).  Returns ``{old label: new label}`` of the moves."""
        moved = {}
        if not self.placement or self.accelerator is None:
            return moved
        with self._cv:
            groups = [g for g in self._groups.values() if g.members]
        for g in groups:
            if not g.members:
                continue
            s = g.members[0]
            where = self.placement_of(s).device
            home = g.homes[1] if where == "gpu" else g.homes[0]
            if g.key[:-1] != home:
                moved[g.label] = self.move(s, None if home[6] == "None" else home[6],
                                           backend=home[5], timeout=timeout)
        return moved

    def _quiesce(self, g: Group, timeout: float = 5.0) -> None:
        """Under the lock: wait until no call of ``g`` is in flight (its store may move)."""
        g.frozen = True
        end = _perf() + timeout
        try:
            while g.inflight:
                if _perf() > end:
                    raise RuntimeError(f"group {g.label}: calls still in flight after "
                                       f"{timeout} s")
                self._cv.wait(0.05)
        finally:
            g.frozen = False

    # ================================================================ admission
    def _work(self, g: Group, m: int) -> float:
        """Predicted busy seconds per second of group ``g`` with ``m`` streams."""
        return _P.work(g.cost, m, g.block, g.fs, g.max_batch)

    def _predict(self, g: Group, s_budget: float, extra: bool = True):
        """(load, latency) predicted for a stream of budget ``s_budget`` joining ``g``."""
        load, tighter, cmax = 0.0, 0.0, 0.0
        groups = set(self._groups.values()) | {g}
        for h in groups:
            m = len([x for x in h.members if not x.closed]) + (1 if (extra and h is g) else 0)
            w = self._work(h, m)
            load += w
            if m:
                ms = [x for x in h.members if not x.closed and x.budget_s <= s_budget]
                k = len(ms) + (1 if (extra and h is g) else 0)
                tighter += w * k / m
                cmax = max(cmax, h.cost.cost(min(m, h.max_batch), h.block))
        m = len(g.members) + (1 if extra else 0)
        own = g.cost.cost(min(m, g.max_batch), g.block)
        load /= self.threads
        tighter /= self.threads
        return load, own + cmax + tighter * g.period

    def _admit(self, g: Group, s: Stream, admission: str) -> None:
        load, lat = self._predict(g, s.budget_s)
        s.predicted_latency_s = lat
        s.predicted_load = load
        if admission == "strict" and (load > self.max_load or lat > s.budget_s):
            raise RtamtCapacityError(
                f"cannot open {s.name!r} ({g.label}, budget {1e3 * s.budget_s:.2f} ms): "
                f"predicted worker load {load:.2f} (limit {self.max_load:.2f}) and worst "
                f"latency {1e3 * lat:.2f} ms with {len(self.streams)} open streams on "
                f"{self.threads} threads; cost model {g.cost.describe()}; "
                "close streams, lengthen the budget, or open with admission='best-effort'")

    def _pick_block(self, dkey, cost, fs, budget_s, batchable) -> int:
        for B in BLOCKS:
            if B / fs >= budget_s:
                continue
            g = self._groups.get(dkey + (B,))
            if g is None:
                g = Group(dkey + (B,), "", None, B, fs, cost, False, 1)
                g.batchable, g.max_batch = batchable, self.max_batch if batchable else 1
            load, lat = self._predict(g, budget_s)
            if B / fs + lat <= budget_s and load <= self.max_load:
                return B
        raise RtamtCapacityError(
            f"no block from {BLOCKS[-1]} to {BLOCKS[0]} meets a budget of {1e3 * budget_s:.2f} "
            f"ms at {fs:g} Hz (block period plus predicted latency); cost model "
            f"{cost.describe()}")

    def load(self) -> float:
        """Predicted busy fraction of the workers for the open streams."""
        with self._cv:
            return sum(self._work(g, len(g.members)) for g in self._groups.values()) \
                / self.threads

    # ================================================================ producer notification
    def _notify(self, s: Stream) -> None:
        """From push(): the stream has new input (no lock; a deque append and a doorbell)."""
        self._dirty.append(s)
        self._ring()

    def _ring(self) -> None:
        try:
            self._bell.release()
        except RuntimeError:  # already rung, not yet answered
            pass

    # ================================================================ workers
    def _pick(self, now: float):
        """Under the lock: the next call to run (EDF over groups), or ``(None, wake)``."""
        best, best_d, wake = None, math.inf, now + 0.05
        for g in self._groups.values():
            if g.frozen or not g.members:
                continue
            ready = [s for s in g.members if s.ready and not s.busy]
            if not ready:
                continue
            d = min(s.deadline for s in ready)
            if d >= best_d:
                continue
            partial = any(s._fill != g.block for s in ready)
            expected = sum(1 for s in g.members if not s.busy and not s.closed and
                           (s.ready or now - s._t_push < 2.0 * g.period))
            if not partial and len(ready) < min(expected, g.max_batch):
                n_exp = min(expected, g.max_batch)
                t0 = min(s.t_ready for s in ready)
                until = min(t0 + self.max_queue_delay, d - 2.0 * g.cost.cost(n_exp, g.block))
                if now < until:
                    wake = min(wake, until)
                    continue
            best, best_d = (g, ready), d
        if best is None:
            return None, wake
        g, ready = best
        ready.sort(key=lambda s: s.deadline)
        first = ready[0]
        if first._fill != g.block:
            job = [first]
        else:
            ready = [s for s in ready if s._fill == g.block]
            if g.has_shared:
                k0 = g.shared_key(first)
                ready = [s for s in ready if g.shared_key(s) == k0]
            share = max(1, self._idle + 1)
            size = min(g.max_batch, max(1, math.ceil(len(ready) / share)))
            job = ready[:size]
            job.sort(key=lambda s: s.slot)
        for s in job:
            s.busy = True
            s.ready = False
        g.inflight += 1
        return (g, job), wake

    def _service(self, now: float) -> None:
        """Under the lock: take in the input of every stream that was pushed to (a FanOut
        push: of every stream it feeds), and every 20 ms run the watchdogs (silent
        sources, idle streams, closes in progress)."""
        dirty = self._dirty
        while dirty:
            s = dirty.popleft()
            s._dirty = False
            fan = getattr(s, "streams", None)
            if fan is None:
                self._take(s, now)
                continue
            t, k = s._t_push, s._push_n
            for m in fan:
                m._t_push, m._push_n = t, k
                self._take(m, now)
        if now - self._t_watch > 0.02:
            self._t_watch = now
            for s in self._streams:
                if s.closed:
                    continue
                s._watch(now)
                if s.closing and not s.busy:
                    self._progress_close(s, now)

    def _take(self, s: Stream, now: float) -> None:
        """Under the lock: take in a stream's new input, or advance its close."""
        if s.closed or s.busy:
            return
        if s.closing:
            self._progress_close(s, now)
        else:
            s._intake(now)

    def _worker(self) -> None:
        """A worker: take in new input, pick the earliest-deadline call, run it; when there
        is nothing to run, sleep on the doorbell that every push (and every worker that
        leaves work behind) rings."""
        ensure_ftz()
        if self.realtime is not None:
            self.realtime_status[threading.current_thread().name] = \
                request_realtime(self.realtime)
        cv = self._cv
        while not self._stopping:
            with cv:
                now = _perf()
                self._service(now)
                job, wake = self._pick(now)
                if job is not None and self._idle and self._more_work(now):
                    self._ring()               # wake an idle worker for the rest
                if job is None:
                    self._idle += 1
            if job is None:
                self._bell.acquire(True, min(max(wake - _perf(), 0.0002), 0.02))
                with cv:
                    self._idle -= 1
                continue
            self._run(*job)

    def _more_work(self, now: float) -> bool:
        """Under the lock: is any stream's block ready and not taken?"""
        return any(s.ready and not s.busy for g in self._groups.values() for s in g.members)

    def _run(self, g: Group, job: list) -> None:
        """Run one call (outside the lock), publish, then hand the streams back."""
        t0 = _perf()
        err = None
        try:
            outs = g.run(job)
        except RtamtInputError as e:      # a block slipped past intake's checks
            outs, err = None, e
        except Exception as e:  # noqa: BLE001 - reported on the streams, the worker lives
            outs, err = None, e
        t1 = _perf()
        n = len(job)
        if outs is not None:
            g.cost.observe(n, job[0]._fill, t1 - t0)
            for s, o in zip(job, outs):
                key = getattr(s.proc, "name", "out")
                try:
                    s._publish(o if isinstance(s.proc, Parallel) else {key: o}, t0, t1,
                               (t1 - t0) / n, n)
                except Exception as e:  # noqa: BLE001 - the worker and the others live
                    s._last_error = f"{s.name}: publishing block {s._seq} failed: {e!r}"
                    self._report((g.key, "publish", type(e)), s._last_error)
        else:
            msg = str(err) if isinstance(err, RtamtInputError) else repr(err)
            self._report((g.key, type(err)),
                          f"{g.label}: a call of {len(job)} stream(s) ("
                          f"{', '.join(s.name for s in job[:4])}{', ...' if n > 4 else ''}) "
                          f"failed: {msg}")
            for s in job:
                s._rejected += 1
                s._last_error = msg
                s._fill = 0
                s._blk_gap = True
                if s.on_error == "stop" or not isinstance(err, RtamtInputError):
                    s.error = err
                    s.closing = "discard"
        now = _perf()
        with self._cv:
            g.inflight -= 1
            for s in job:
                s.busy = False
                if s.closing:
                    self._progress_close(s, now)
                else:
                    s._intake(now)
            self._cv.notify_all()          # close() / between-blocks waiters

    # ================================================================ closing
    def _progress_close(self, s: Stream, now: float) -> None:
        """Under the lock, the stream not in flight: advance its close."""
        s.ring.retire()                # a FanOut offers it nothing more
        if s.closed or s.busy:
            return
        if s.closing == "discard":
            s._discarded += s.ring.queued_frames() - s._coff + s._fill
            while s.ring.available():
                s.ring.release(s.ring.chunk()[1])
            s._coff = s._fill = 0
            s.ready = False
        else:
            s._intake(now)
            if s.ready:
                return
            if s._fill:
                s.ready = True
                s.t_capture = None
                s.deadline = now + s.budget_s
                s.t_ready = now
                return
        if s.group is not None:
            s.group.remove(s)
        s.closed = True
        if s in self._streams:
            self._streams.remove(s)
        self._cv.notify_all()

    def _close_stream(self, s: Stream, policy: str, timeout: float) -> None:
        if policy not in ("drain", "discard"):
            raise ValueError("close policy must be 'drain' or 'discard'")
        s._src_armed = False
        end = _perf() + timeout
        with self._cv:
            if s.closed:
                return
            if s.closing != "discard":
                s.closing = policy
            if not self.running and not s.busy:
                if s.closing == "drain":
                    self._drain_inline(s, end)
                if not s.closed:
                    s.closing = "discard"
            self._progress_close(s, _perf())
            self._cv.notify_all()
            self._ring()
            while not s.closed:
                left = end - _perf()
                if left <= 0:
                    raise RuntimeError(f"stream {s.name!r} did not close within {timeout} s")
                self._cv.wait(min(left, 0.05))
                if not s.busy:
                    self._progress_close(s, _perf())
                    self._ring()

    def _drain_inline(self, s: Stream, end: float) -> None:
        """Scheduler not running: process the stream's queue in the caller's thread."""
        while _perf() < end and not s.closed:
            s._intake(_perf())
            if not s.ready:
                if not s._fill:
                    return
                s.ready, s.t_capture = True, None
            g = s.group
            s.busy, s.ready = True, False
            g.inflight += 1
            self._cv.release()
            try:
                self._run(g, [s])
            finally:
                self._cv.acquire()

    # ================================================================ between blocks
    def move(self, s: Stream, device=None, *, backend: str | None = None,
             timeout: float = 10.0) -> str:
        """Move the group of stream ``s`` (every open stream of its design and block size)
        to ``backend`` / ``device`` (see :func:`rtamt.engine.backend.resolve`) between two
        of its blocks; returns the new group's label.

        The group's calls stop (the ones in flight finish), every member's state is copied
        out of the slot store exactly, each processor moves with its state
        (``proc.to(device, backend=...)``), and the members form a group on the new
        device; blocks already queued then run there.  All or nothing: a processor that
        cannot run on the new backend raises and the group stays where it was.  The cost
        model starts from the old one and is corrected by the new device's calls."""
        b, d = _B.resolve(backend, device)
        end = _perf() + timeout
        with self._cv:
            g = s.group
            if g is None or s.closed:
                raise ValueError(f"move: stream {s.name!r} is closed")
            g.frozen = True
            try:
                while g.inflight or any(m.busy for m in g.members):
                    if _perf() > end:
                        raise RuntimeError(f"move: group {g.label} still busy after "
                                           f"{timeout} s")
                    self._cv.wait(0.05)
                members = list(g.members)
                probe = copy.deepcopy(members[0].proc)
                probe.to(d, backend=b)             # refuses here if it cannot: nothing moved
                for m in members:
                    g.remove(m)
                del self._groups[g.key]
                for m in members:
                    m.proc.to(d, backend=b)
                key = g.key[:5] + (b, str(d)) + g.key[7:]
                ng = self._groups.get(key)
                if ng is None:
                    dkey = key[:-1]
                    cost = self._costs.get(dkey)
                    if cost is None:
                        cost = self._costs[dkey] = copy.deepcopy(g.cost)
                    base = g.label.split("/triton:")[0]
                    label = base if b == "numba" else f"{base}/triton:{d}"
                    ng = Group(key, label, probe, g.block, g.fs, cost, g.batchable,
                               self.max_batch, d)
                    ng.homes = g.homes
                    self._groups[key] = ng
                for m in members:
                    ng.add(m)
            finally:
                g.frozen = False
                self._cv.notify_all()
        self._ring()
        return ng.label

    def _between_blocks(self, s: Stream, fn, timeout: float = 10.0):
        """Run ``fn`` in the caller's thread while ``s`` is held between two blocks."""
        end = _perf() + timeout
        with self._cv:
            while s.busy:
                left = end - _perf()
                if left <= 0:
                    raise RuntimeError(f"stream {s.name!r}: no gap between blocks within "
                                       f"{timeout} s")
                self._cv.wait(min(left, 0.05))
            s.busy = True
            s.ready = False
        try:
            s._flush_bumps()
            return fn()
        finally:
            with self._cv:
                s.busy = False
                if not s.closed and not s.closing:
                    s._intake(_perf())
                self._cv.notify_all()
            self._ring()

    def _attach_state(self, s: Stream) -> None:
        """After the stream's processor got a new state (reset / restore): create it if
        missing and put it back into the group's slot."""
        prep = getattr(s.proc, "prepare", None)
        if prep is not None:
            prep(np.zeros((1,) if s.channels == 1 else (s.channels, 1), s.dtype))
        g = s.group
        if g is not None and g.batchable and s.slot >= 0:
            with self._cv:
                g.attach(s)

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
