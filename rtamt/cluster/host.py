"""The worker side of a cluster: one :class:`StreamHost` per worker process owns an rtamt
:class:`~rtamt.scheduler.Scheduler` and serves the client's batched messages.

The host is plain Python (no Ray): :mod:`rtamt.cluster.transport` runs it inside a Ray
actor, or in the client's own process for tests.  Every call is one message of the client:

* :meth:`StreamHost.step` takes the input of *all* the worker's streams that the client
  gathered in one block period (stacked: one array per group of streams with the same
  frames, channels and dtype, and their ids), pushes each chunk into its local stream
  (``Stream.push(wait=True)``: nothing is dropped), waits until the blocks that input
  completes are processed, and returns every result published since the last step, for
  all streams at once, plus the periodic snapshots that are due: each stream's every
  ``snapshot_every_s`` seconds, the streams' spread over that period (at most
  ``SNAPSHOTS_PER_STEP`` per reply).  Messages are numbered; two may be in flight, the
  next one's input pushed while the last one's blocks are processed, and the host
  pushes their input, and replies, in their order.
* :meth:`StreamHost.serve` carries the steps on a direct TCP connection (a reader thread
  pushes each message's input as it arrives, a replier thread sends the replies):
  :class:`~rtamt.cluster.transport.RayTransport` uses it rather than a Ray call per
  message.
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

import logging
import os
import threading
import time

import numpy as np

from ..scheduler import RtamtCapacityError, Scheduler

__all__ = ["StreamHost", "RESULTS"]

#: what a stream's results carry back to the client
RESULTS = ("all", "none")

_perf = time.perf_counter
_log = logging.getLogger("rtamt.cluster")
_NEVER = 1 << 62

#: at most this many streams' periodic snapshots go with one step's reply (each costs the
#: stream's state copy and its transport; spread, they do not delay one reply much)
SNAPSHOTS_PER_STEP = 2


class _Hosted:
    """One stream on the host: the local :class:`~rtamt.scheduler.Stream`, the results its
    subscriber collected since the last step, and the count of blocks it will have
    published once everything pushed is processed (``due``: the blocks published before
    plus every whole block in the restored partial block and the frames pushed since)."""

    __slots__ = ("stream", "results", "keep", "lock", "got", "frames", "seq0", "block",
                 "host", "wake_at", "snap_due")

    def __init__(self, host, stream, results: str, pending: int = 0):
        self.host = host
        self.stream = stream
        self.keep = results == "all"
        self.results: list = []
        self.lock = threading.Lock()
        self.block = int(stream.block)
        self.seq0 = self.got = int(stream.seq)
        self.frames = int(pending)      # restored partial block + frames pushed here
        self.wake_at = _NEVER           # a step waits for this many blocks
        # its periodic snapshot is due then: the streams' snapshots are spread over the
        # period (golden-ratio offsets), not all taken in one step
        every = host.snapshot_every or 0.0
        self.snap_due = _perf() + every * ((0.6180339887 * (len(host.streams) + 1)) % 1.0)
        stream.subscribe(self.on_result)

    @property
    def due(self) -> int:
        return self.seq0 + self.frames // self.block

    def on_result(self, r) -> None:
        """Delivery thread of the host's scheduler: keep the result (outputs copied out
        of the scheduler's reused arrays) and wake a step waiting for it."""
        outs = {k: (np.array(v) if isinstance(v, np.ndarray) else v)
                for k, v in r.outputs.items()} if self.keep else {}
        item = (r.seq, r.start, r.frames, outs, bool(r.gap), r.latency_s, r.proc_s)
        with self.lock:
            self.results.append(item)
            self.got = r.seq + 1
        if self.got >= self.wake_at:
            self.wake_at = _NEVER
            self.host.wake()

    def take(self) -> list:
        with self.lock:
            out, self.results = self.results, []
        return out


class StreamHost:
    """A worker's streams on one local scheduler (see the module docstring).

    threads          : the scheduler's worker threads (the cores this worker owns).
    snapshot_every_s : each stream's snapshot goes with a step's reply this often, the
                       streams' spread over the period (``None``: never).
    scheduler        : further keyword arguments of :class:`~rtamt.scheduler.Scheduler`
                       (``realtime``, ``max_batch``, ``max_load``, ...).
    """

    def __init__(self, threads: int = 1, snapshot_every_s: float | None = 5.0,
                 scheduler: dict | None = None):
        self.sched = Scheduler(threads=threads, **(scheduler or {}))
        self.streams: dict[int, _Hosted] = {}
        self.snapshot_every = None if snapshot_every_s is None else float(snapshot_every_s)
        self._done = threading.Condition()     # a result arrived (steps wait on it)
        self._turns = threading.Condition()    # whose turn it is to push / to reply
        self._turn_in = self._turn_out = 0

    def wake(self) -> None:
        """A result arrived: wake the steps waiting for their blocks."""
        with self._done:
            self._done.notify_all()

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
        pending = 0 if snapshot is None else len(snapshot["pending"])
        self.streams = {**self.streams, sid: _Hosted(self, h, results, pending)}
        return ("ok", {"block": h.block, "budget_ms": 1e3 * h.budget_s, "seq": h.seq,
                       "load": self.sched.load()})

    def step(self, batch: list, timeout: float = 30.0, cycle: int | None = None) -> dict:
        """Push every stream's chunk of ``batch`` (groups ``(sids, chunks)``, ``chunks`` an
        array ``(len(sids), frames, channels)``: row ``j`` is stream ``sids[j]``'s), wait
        until the blocks it completes are processed (at most ``timeout`` s), and return
        ``{'results': {sid: [result, ...]}, 'snapshots': {sid: snapshot} or None}``.
        ``cycle``: the message's number (0, 1, ... per host): its input is pushed after
        message ``cycle - 1``'s, and its reply taken after that one's (``None``: now, for
        a caller that never overlaps two steps)."""
        end = _perf() + timeout
        self._turn(cycle, "_turn_in", end)
        try:
            due = self.push_batch(batch, timeout)
        finally:
            self._next(cycle, "_turn_in")
        self._turn(cycle, "_turn_out", end)
        try:
            return self.finish(due, end)
        finally:
            self._next(cycle, "_turn_out")

    def push_batch(self, batch: list, timeout: float):
        """A step's first half: push ``batch``'s chunks; returns what :meth:`finish` waits
        for (``[(stream, blocks due)]``), or the error that stopped the pushes."""
        due = []
        try:
            streams = self.streams
            for sids, xs in batch:
                n = xs.shape[1]
                for sid, x in zip(sids, xs):
                    h = streams[sid]
                    h.stream.push(x, wait=True, timeout=timeout)
                    h.frames += n
                    due.append((h, h.due))
        except BaseException as e:  # noqa: BLE001 - raised by finish(), in the step's turn
            return e
        return due

    def finish(self, due, end: float) -> dict:
        """A step's second half: wait (until ``end``) for the blocks ``due``, then the
        reply: every result since the last reply, and the snapshots when they are due."""
        if isinstance(due, BaseException):
            raise due
        # due[:i] are done (results come in order).  A block that publishes nothing (bad
        # input: rejected; skipped by a backlog policy) leaves its stream idle short of
        # `due`: taken as done once it is still idle, with no new result, 2 ms after it
        # was first seen so (one look can fall between a block's intake and its being
        # ready: the ring emptied, the block not yet marked ready)
        i, idle = 0, None
        with self._done:
            while i < len(due):
                h, d = due[i]
                if h.got >= d or h.stream.closed:
                    i += 1
                    continue
                if h.stream.idle():
                    if idle is not None and idle[:2] == (h, h.got) and _perf() > idle[2]:
                        i += 1
                        continue
                    if idle is None or idle[:2] != (h, h.got):
                        idle = (h, h.got, _perf() + 0.002)
                if _perf() > end:
                    break
                h.wake_at = min(h.wake_at, d)
                if h.got < d:                  # else it came before wake_at was set
                    self._done.wait(0.002)
        streams = self.streams
        out = {"results": {sid: r for sid, h in streams.items() if (r := h.take())},
               "snapshots": None}
        every = self.snapshot_every
        if every is not None:
            now, snaps = _perf(), {}
            for sid, h in streams.items():
                if now >= h.snap_due and len(snaps) < SNAPSHOTS_PER_STEP:
                    snaps[sid] = h.stream.snapshot()
                    h.snap_due = max(h.snap_due + every, now)
            out["snapshots"] = snaps or None
        return out

    # ------------------------------------------------------------------ direct link
    def serve(self, authkey: bytes, host: str = "127.0.0.1") -> tuple:
        """Listen for the client's data connection (``multiprocessing.connection``, TCP
        with ``authkey``'s challenge) on ``host`` and return its ``(host, port)``; a
        reader thread then takes the step messages ``(timeout, batch)`` in order and
        pushes each at once, a replier thread sends each message's reply, in order, once
        its blocks are processed.  So the next message's input is pushed while the last
        one's blocks are processed, and no message costs a remote call."""
        from multiprocessing.connection import Listener
        lis = Listener((host, 0), authkey=authkey)
        threading.Thread(target=self._serve, args=(lis,), daemon=True,
                         name="rtamt-host-link").start()
        return lis.address

    def _serve(self, lis) -> None:
        import queue
        from multiprocessing import AuthenticationError

        from .transport import no_delay
        try:
            while True:                  # a connection without the key is dropped
                try:
                    conn = no_delay(lis.accept())
                    break
                except (AuthenticationError, EOFError, ConnectionError) as e:
                    _log.warning("rtamt cluster worker: refused a data connection: %s", e)
        finally:
            lis.close()
        todo: queue.SimpleQueue = queue.SimpleQueue()

        def reply():
            while (item := todo.get()) is not None:
                due, end = item
                try:
                    msg = ("ok", self.finish(due, end))
                except BaseException as e:  # noqa: BLE001 - sent to the client
                    msg = ("error", e)
                try:
                    conn.send(msg)
                except (OSError, ValueError):
                    return
        t = threading.Thread(target=reply, daemon=True, name="rtamt-host-reply")
        t.start()
        try:
            while True:
                try:
                    timeout, batch = conn.recv()
                except (EOFError, OSError):
                    break
                todo.put((self.push_batch(batch, timeout), _perf() + timeout))
        finally:
            todo.put(None)
            t.join(5.0)
            conn.close()

    def _turn(self, cycle: int | None, which: str, end: float) -> None:
        """Wait until counter ``which`` reaches ``cycle`` (message ``cycle - 1`` passed)."""
        if cycle is None:
            return
        with self._turns:
            while getattr(self, which) != cycle:
                if not self._turns.wait(max(end - _perf(), 0.0)) and _perf() > end:
                    raise TimeoutError(f"step {cycle}: message {getattr(self, which)} "
                                       f"did not pass within the timeout ({which[6:]})")

    def _next(self, cycle: int | None, which: str) -> None:
        if cycle is None:
            return
        with self._turns:
            setattr(self, which, cycle + 1)
            self._turns.notify_all()

    def snapshot(self, sid: int) -> dict:
        """Stream ``sid``'s snapshot now (between two blocks)."""
        return self.streams[sid].stream.snapshot()

    def detach(self, sid: int, timeout: float = 30.0) -> tuple:
        """Wait until stream ``sid`` processed its input, close it without processing its
        partial block, and return ``(snapshot, results not yet sent)``: the snapshot
        holds the partial block, so a stream restored from it continues exactly."""
        h = self._pop(sid)
        h.stream.wait_idle(timeout)
        snap = h.stream.snapshot()
        h.stream.close("discard", timeout)
        return snap, h.take()

    def close(self, sid: int, policy: str = "drain", timeout: float = 30.0) -> list:
        """Close stream ``sid`` (``policy`` as ``Stream.close``); returns its last
        results."""
        h = self._pop(sid)
        h.stream.close(policy, timeout)
        return h.take()

    def _pop(self, sid: int) -> _Hosted:
        """Remove stream ``sid`` (a new dict: a step running meanwhile iterates the old)."""
        streams = dict(self.streams)
        h = streams.pop(sid)
        self.streams = streams
        return h

    def stats(self, sid: int):
        """Stream ``sid``'s :class:`~rtamt.scheduler.StreamStats` on this worker."""
        return self.streams[sid].stream.stats()

    def shutdown(self) -> None:
        """Close the scheduler (every stream discarded)."""
        self.streams = {}
        self.sched.close("discard", timeout=5.0)
