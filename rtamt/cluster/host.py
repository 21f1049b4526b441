"""The worker side of a cluster: one :class:`StreamHost` per worker process owns an rtamt
:class:`~rtamt.scheduler.Scheduler` and serves the client's batched messages.

The host is plain Python (no Ray): :mod:`rtamt.cluster.transport` runs it inside a Ray
actor, or in the client's own process for tests.  Every call is one message of the client:

* :meth:`StreamHost.step` takes the input of *all* the worker's streams that the client
  gathered in one block period (``{stream id: array (frames, channels)}``), pushes each
  chunk into its local stream (``Stream.push(wait=True)``: nothing is dropped), waits
  until everything pushed is processed, and returns every result published since the
  last step, for all streams at once, plus, every ``snapshot_every_s`` seconds, a
  snapshot of every stream (taken between two blocks, all input processed).
* :meth:`StreamHost.open` opens a stream (admission by the local scheduler; a refusal is
  returned, not raised, so that it crosses any transport unchanged) and restores a
  snapshot into it before anything is pushed, so its results continue the snapshot's
  ``seq`` and ``start`` (:meth:`rtamt.scheduler.Stream.restore`).
* :meth:`StreamHost.detach` returns a stream's snapshot and closes it (a move's first
  half); :meth:`StreamHost.close`, :meth:`StreamHost.stats`, :meth:`StreamHost.load`.

A result crosses as ``(seq, start, frames, outputs, gap, latency_s, proc_s)`` with the
outputs copied out of the scheduler's reused arrays (``results='all'``), or without them
(``results='none'``: ``outputs`` is ``{}``; the client then learns only that and when the
block was processed).
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from ..scheduler import RtamtCapacityError, Scheduler

__all__ = ["StreamHost", "RESULTS"]

#: what a stream's results carry back to the client
RESULTS = ("all", "none")

_perf = time.perf_counter


class _Hosted:
    """One stream on the host: the local :class:`~rtamt.scheduler.Stream` and the
    results its subscriber collected since the last step."""

    __slots__ = ("stream", "results", "keep", "lock")

    def __init__(self, stream, results: str):
        self.stream = stream
        self.keep = results == "all"
        self.results: list = []
        self.lock = threading.Lock()
        stream.subscribe(self.on_result)

    def on_result(self, r) -> None:
        """Delivery thread of the host's scheduler: keep the result (outputs copied out
        of the scheduler's reused arrays)."""
        outs = {k: (np.array(v) if isinstance(v, np.ndarray) else v)
                for k, v in r.outputs.items()} if self.keep else {}
        item = (r.seq, r.start, r.frames, outs, bool(r.gap), r.latency_s, r.proc_s)
        with self.lock:
            self.results.append(item)

    def take(self) -> list:
        with self.lock:
            out, self.results = self.results, []
        return out


class StreamHost:
    """A worker's streams on one local scheduler (see the module docstring).

    threads          : the scheduler's worker threads (the cores this worker owns).
    snapshot_every_s : a :meth:`step` returns every stream's snapshot when this many
                       seconds passed since the last ones (``None``: never).
    scheduler        : further keyword arguments of :class:`~rtamt.scheduler.Scheduler`
                       (``realtime``, ``max_batch``, ``max_load``, ...).
    """

    def __init__(self, threads: int = 1, snapshot_every_s: float | None = 5.0,
                 scheduler: dict | None = None):
        self.sched = Scheduler(threads=threads, **(scheduler or {}))
        self.streams: dict[int, _Hosted] = {}
        self.snapshot_every = None if snapshot_every_s is None else float(snapshot_every_s)
        self._last_snap = _perf()

    # ------------------------------------------------------------------ control
    def pid(self) -> int:
        """The worker's process id (tests kill it)."""
        return os.getpid()

    def load(self) -> float:
        """The scheduler's predicted busy fraction of its workers."""
        return self.sched.load()

    def open(self, sid: int, spec: dict, snapshot: dict | None = None):
        """Open stream ``sid`` from ``spec`` (the keywords of ``Scheduler.open`` plus
        ``model`` and ``results``) and restore ``snapshot`` into it (a snapshot, or
        ``{'at': frame, 'seq': block}``: the initial state continuing there).  Returns
        ``('ok', {'block', 'budget_ms', 'seq', 'load'})`` or ``('refused', message)``
        when the scheduler's admission refuses it."""
        spec = dict(spec)
        model, results = spec.pop("model"), spec.pop("results", "all")
        try:
            h = self.sched.open(model, **spec)
        except RtamtCapacityError as e:
            return ("refused", str(e))
        try:
            if snapshot is not None and "state" not in snapshot:
                # the initial state, continuing at frame `at` as block `seq` (a recovery
                # whose input before `at` is lost)
                snapshot = {**h.snapshot(), "position": snapshot["at"],
                            "pending_start": snapshot["at"], "seq": snapshot["seq"]}
            if snapshot is not None:
                h.restore(snapshot)
        except BaseException:
            h.close("discard")
            raise
        self.streams[sid] = _Hosted(h, results)
        return ("ok", {"block": h.block, "budget_ms": 1e3 * h.budget_s, "seq": h.seq,
                       "load": self.sched.load()})

    def step(self, batch: dict, timeout: float = 30.0) -> dict:
        """Push every stream's chunk of ``batch`` (``{sid: (frames, channels) array}``),
        wait until all is processed (at most ``timeout`` s), and return ``{'results':
        {sid: [result, ...]}, 'snapshots': {sid: snapshot} or None}``."""
        for sid, x in batch.items():
            self.streams[sid].stream.push(x, wait=True, timeout=timeout)
        end = _perf() + timeout
        for sid in batch:
            self.streams[sid].stream.wait_idle(max(end - _perf(), 0.001))
        out = {"results": {sid: r for sid, h in self.streams.items() if (r := h.take())},
               "snapshots": None}
        now = _perf()
        if self.snapshot_every is not None and now - self._last_snap >= self.snapshot_every:
            self._last_snap = now
            out["snapshots"] = {sid: h.stream.snapshot() for sid, h in self.streams.items()}
        return out

    def snapshot(self, sid: int) -> dict:
        """Stream ``sid``'s snapshot now (between two blocks)."""
        return self.streams[sid].stream.snapshot()

    def detach(self, sid: int, timeout: float = 30.0) -> tuple:
        """Wait until stream ``sid`` processed its input, close it without processing its
        partial block, and return ``(snapshot, results not yet sent)``: the snapshot
        holds the partial block, so a stream restored from it continues exactly."""
        h = self.streams.pop(sid)
        h.stream.wait_idle(timeout)
        snap = h.stream.snapshot()
        h.stream.close("discard", timeout)
        return snap, h.take()

    def close(self, sid: int, policy: str = "drain", timeout: float = 30.0) -> list:
        """Close stream ``sid`` (``policy`` as ``Stream.close``); returns its last
        results."""
        h = self.streams.pop(sid)
        h.stream.close(policy, timeout)
        return h.take()

    def stats(self, sid: int):
        """Stream ``sid``'s :class:`~rtamt.scheduler.StreamStats` on this worker."""
        return self.streams[sid].stream.stats()

    def shutdown(self) -> None:
        """Close the scheduler (every stream discarded)."""
        self.streams.clear()
        self.sched.close("discard", timeout=5.0)
