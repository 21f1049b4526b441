"""Earliest-deadline dispatch: the worker threads, the doorbell, intake, the choice of
the next call, publication, and the closing and between-blocks holds of a stream.

::

    push(x) ─► stream ring ─► notify: the stream joins the dirty queue, doorbell
                                  │
    worker (× threads), under the lock: take in every dirty stream's input
    (Stream.intake: re-block, validate, deadline); every 20 ms the watchdogs
                                  │
    pick: over the groups, the ready blocks' earliest deadline first; a group's first
    ready block waits at most max_queue_delay for its other members, never past what
    the deadline allows; up to max_batch streams, shared among idle workers
                                  │
    outside the lock: Group.run (one call per stage), Stream.publish per stream;
    then the streams are handed back (busy = False) and take in their next block

**One block in flight per stream**: a stream that is in a worker's call (or held by
:meth:`Dispatcher.between_blocks`) is ``busy`` and not picked again until it is back,
so its state is never touched by two threads.
"""
from __future__ import annotations

import collections
import math
import sys
import threading
import time

import numpy as np

from ..engine.contract import RtamtInputError
from ..engine.denormal import ensure_ftz
from ..engine.realtime import request_realtime
from .delivery import Delivery

__all__ = ["Dispatcher", "SWITCH_INTERVAL", "SwitchInterval"]

_perf = time.perf_counter


class SwitchInterval:
    """The interpreter's thread switch interval (``sys.setswitchinterval``, one value per
    process) shared by every running scheduler: each :meth:`hold` of a value lowers it to
    the smallest value held (never above the interval found when the first hold began),
    each :meth:`release` gives one back, and the last release restores the interval found
    at the first hold, unless someone else changed it meanwhile.  So closing one of two
    schedulers leaves the other's interval in place."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held: list[float] = []
        self._saved = 0.0               # the interval before the first hold
        self._set = None                # the interval this object set last

    def hold(self, seconds: float) -> None:
        with self._lock:
            if not self._held:
                self._saved = sys.getswitchinterval()
            self._held.append(float(seconds))
            self._apply(min(min(self._held), self._saved))

    def release(self, seconds: float) -> None:
        with self._lock:
            self._held.remove(float(seconds))
            self._apply(min(min(self._held), self._saved) if self._held else self._saved)
            if not self._held:
                self._set = None

    def _apply(self, want: float) -> None:
        now = sys.getswitchinterval()
        if self._set is not None and now != self._set:
            self._saved = now            # changed by someone else: theirs is the original
        if now != want:
            sys.setswitchinterval(want)
        self._set = sys.getswitchinterval()


#: the process's one :class:`SwitchInterval`
SWITCH_INTERVAL = SwitchInterval()


class Dispatcher:
    """The scheduler's worker pool and its earliest-deadline-first dispatch.

    groups         : the scheduler's ``{group key: Group}`` (shared; changed under ``cv``).
    streams        : the scheduler's streams (shared; a closed stream is removed here).
    max_queue_delay: seconds a group's first ready block may wait for its other members.
    realtime       : SCHED_FIFO priority the workers ask for (None: normal priority);
                     each worker writes its outcome into ``realtime_status`` (its name:
                     None when granted, else why not).
    report         : ``report(key, message)``, the scheduler's error log.

    ``cv`` is the scheduler's lock (a condition: ``close``, ``move`` and the between-
    blocks holds wait on it for calls to come back)."""

    def __init__(self, groups: dict, streams: list, max_queue_delay: float, realtime,
                 realtime_status: dict, report, trace=None):
        self.cv = threading.Condition(threading.Lock())
        self.groups = groups
        self.streams = streams
        self.max_queue_delay = float(max_queue_delay)
        self.realtime = realtime
        self.realtime_status = realtime_status
        self.report = report
        self._dirty: collections.deque = collections.deque()
        self._bell = threading.Lock()
        self._bell.acquire()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self._switch = None            # the switch interval held while running
        self._idle = 0
        self._t_watch = 0.0
        #: a :class:`rtamt.scheduler.trace.CallTrace` every call is recorded in, or None
        self.trace = trace
        #: the subscribers' thread (:mod:`rtamt.scheduler.delivery`), started and stopped
        #: with the workers
        self.delivery = Delivery(self.release_held)

    # ================================================================ lifecycle
    @property
    def running(self) -> bool:
        return bool(self._threads) and not self._stopping

    @property
    def started(self) -> bool:
        """Worker threads exist (started and not yet stopped)."""
        return bool(self._threads)

    def start(self, threads: int, switch_s: float | None = None) -> None:
        """Start ``threads`` workers (and the delivery thread); wait (at most 1 s) until
        each reported its SCHED_FIFO request.  ``switch_s``: the thread switch interval
        to hold while they run (:data:`SWITCH_INTERVAL`; None: leave it)."""
        self._stopping = False
        if switch_s is not None:
            SWITCH_INTERVAL.hold(switch_s)
            self._switch = switch_s
        if self.trace is not None:
            self.trace.bind(threads)
        th = [threading.Thread(target=self._worker, args=(i,), name=f"rtamt-worker-{i}",
                               daemon=True)
              for i in range(threads)]
        self._threads = th
        self.delivery.start()
        for t in th:
            t.start()
        if self.realtime is not None:      # each worker reports its SCHED_FIFO request
            end = _perf() + 1.0
            while len(self.realtime_status) < len(th) and _perf() < end:
                time.sleep(0.0005)

    def stop(self, timeout: float) -> list:
        """Stop the workers (waiting at most ``timeout`` s); returns the names of those
        still alive."""
        th = self._threads
        with self.cv:
            self._stopping = True
            self.cv.notify_all()
        for _ in th:
            self.ring()
        end = _perf() + timeout
        for t in th:
            t.join(max(end - _perf(), 0.0))
        self._threads = []
        alive = [t.name for t in th if t.is_alive()]
        if not self.delivery.stop(max(end - _perf(), 0.0)):    # delivers what is queued
            alive.append("rtamt-delivery (a subscriber did not return)")
        if self._switch is not None:
            SWITCH_INTERVAL.release(self._switch)
            self._switch = None
        return alive

    # ================================================================ producer notification
    def notify(self, s) -> None:
        """From push(): the stream has new input (no lock; a deque append and a doorbell)."""
        self._dirty.append(s)
        self.ring()

    def deliver(self, s) -> None:
        """From a worker's publication: ``s`` has a result for its subscribers (see
        :meth:`rtamt.scheduler.delivery.Delivery.notify`)."""
        self.delivery.notify(s)

    def release_held(self, s) -> None:
        """Delivery thread: hand back stream ``s`` if it was held for its subscribers and
        their queue has room now (as a call's hand-back does)."""
        with self.cv:
            if not s.slot.held_by_subscribers or s.subscribers_full():
                return
            s.slot.held_by_subscribers = False
            self._hand_back(s, _perf())
            self.cv.notify_all()
        self.ring()

    def _hand_back(self, s, now: float) -> None:
        """Under the lock, after a call: the stream is free for its next block (or its
        close goes on)."""
        s.slot.busy = False
        if s.closing:
            self.progress_close(s, now)
        else:
            s.intake(now)

    def ring(self) -> None:
        """Ring the doorbell: wake one sleeping worker (no lock; never blocks)."""
        try:
            self._bell.release()
        except RuntimeError:  # already rung, not yet answered
            pass

    # ================================================================ workers
    def pick(self, now: float):
        """Under the lock: the next call to run (EDF over groups), or ``(None, wake)``."""
        best, best_d, wake = None, math.inf, now + 0.05
        for g in self.groups.values():
            if g.frozen or not g.members:
                continue
            # one pass over the members: the ready ones, their earliest deadline, whether
            # one is a partial block, and how many members are expected to be ready soon
            # (ready, or pushed to within two periods)
            ready, d, partial, expected = [], math.inf, False, 0
            recent, B = now - 2.0 * g.period, g.block
            for s in g.members:
                sl = s.slot
                if sl.busy:
                    continue
                if sl.ready:
                    ready.append(s)
                    expected += 1
                    if sl.deadline < d:
                        d = sl.deadline
                    if sl.fill != B:
                        partial = True
                elif s.t_push > recent and not s.closed:
                    expected += 1
            if not ready or d >= best_d:
                continue
            if not partial and len(ready) < min(expected, g.max_batch):
                n_exp = min(expected, g.max_batch)
                t0 = min(s.slot.t_ready for s in ready)
                until = min(t0 + self.max_queue_delay, d - 2.0 * g.cost.cost(n_exp, g.block))
                if now < until:
                    wake = min(wake, until)
                    continue
            best, best_d = (g, ready), d
        if best is None:
            return None, wake
        g, ready = best
        ready.sort(key=lambda s: s.slot.deadline)
        first = ready[0]
        if first.slot.fill != g.block:
            job = [first]
        else:
            ready = [s for s in ready if s.slot.fill == g.block]
            if g.has_shared:
                k0 = g.shared_key(first.slot)
                ready = [s for s in ready if g.shared_key(s.slot) == k0]
            share = max(1, self._idle + 1)
            size = min(g.max_batch, max(1, math.ceil(len(ready) / share)))
            job = ready[:size]
            job.sort(key=lambda s: s.slot.index)
        for s in job:
            s.slot.busy = True
            s.slot.ready = False
        g.inflight += 1
        if self.trace is not None:
            g.trace_index = self.trace.group_index(g.key, g.label)
        return (g, job, g.take_out(len(job))), wake

    def _service(self, now: float) -> None:
        """Under the lock: take in the input of every stream that was pushed to (a FanOut
        push: of every stream it feeds), and every 20 ms run the watchdogs (silent
        sources, idle streams, closes in progress)."""
        dirty = self._dirty
        while dirty:
            s = dirty.popleft()
            s.notified = False
            fan = getattr(s, "streams", None)
            if fan is None:
                self._take(s, now)
                continue
            t, k = s.t_push, s.push_n
            for m in fan:
                m.t_push, m.push_n = t, k
            try:
                rest = s.take_in(now)         # the compiled intake, then the others
            except Exception as e:  # noqa: BLE001 - the worker lives; one by one instead
                self.report(("take_in", type(e)), f"FanOut: the compiled intake failed "
                            f"({e!r}); its streams take their input one by one")
                rest = fan
            for m in rest:
                self._take(m, now)
        if now - self._t_watch > 0.02:
            self._t_watch = now
            for s in self.streams:
                if s.closed:
                    continue
                s.watch(now)
                if s.closing and not s.busy:
                    self.progress_close(s, now)

    def _take(self, s, now: float) -> None:
        """Under the lock: take in a stream's new input, or advance its close."""
        if s.closed or s.busy:
            return
        if s.closing:
            self.progress_close(s, now)
        else:
            s.intake(now)

    def _worker(self, wid: int) -> None:
        """A worker: take in new input, pick the earliest-deadline call, run it; when there
        is nothing to run, sleep on the doorbell that every push (and every worker that
        leaves work behind) rings."""
        ensure_ftz()
        if self.realtime is not None:
            self.realtime_status[threading.current_thread().name] = \
                request_realtime(self.realtime)
        cv = self.cv
        while not self._stopping:
            with cv:
                now = _perf()
                self._service(now)
                job, wake = self.pick(now)
                if job is not None and self._idle and self._more_work(now):
                    self.ring()               # wake an idle worker for the rest
                if job is None:
                    self._idle += 1
            if job is None:
                self._bell.acquire(True, min(max(wake - _perf(), 0.0002), 0.02))
                with cv:
                    self._idle -= 1
                continue
            self._run(*job, wid=wid)

    def _more_work(self, now: float) -> bool:
        """Under the lock: is any stream's block ready and not taken?"""
        return any(s.slot.ready and not s.slot.busy
                   for g in self.groups.values() for s in g.members)

    def _run(self, g, job: list, out=None, wid: int = 0) -> None:
        """Run one call (outside the lock), publish, then hand the streams back (and
        record the call in :attr:`trace`, if any)."""
        tr = self.trace
        dl = min(s.slot.deadline for s in job) if tr is not None else 0.0
        t0 = _perf()
        err = None
        try:
            outs = g.run([s.slot for s in job], out)
        except RtamtInputError as e:      # a block slipped past intake's checks
            outs, err = None, e
        except Exception as e:  # noqa: BLE001 - reported on the streams, the worker lives
            outs, err = None, e
        t1 = _perf()
        n = len(job)
        if outs is not None:
            g.cost.observe(n, job[0].slot.fill, t1 - t0)
            share = (t1 - t0) / n
            for s, o in zip(job, outs):
                key = s.out_key
                try:
                    s.publish(o if key is None else {key: o}, t0, t1, share, n)
                except Exception as e:  # noqa: BLE001 - the worker and the others live
                    self.report((g.key, "publish", type(e)), s.publish_failed(e))
        else:
            msg = str(err) if isinstance(err, RtamtInputError) else repr(err)
            self.report((g.key, type(err)),
                          f"{g.label}: a call of {len(job)} stream(s) ("
                          f"{', '.join(s.name for s in job[:4])}{', ...' if n > 4 else ''}) "
                          f"failed: {msg}")
            stop = not isinstance(err, RtamtInputError)
            for s in job:
                s.reject_block(err, msg, stop or s.on_error == "stop")
        now = _perf()
        if tr is not None:
            tr.record(wid, t0, t1, now, dl, n, g.trace_index)
        with self.cv:
            g.inflight -= 1
            for s in job:
                if not s.wait_for_subscribers():  # else held until they catch up
                    self._hand_back(s, now)
            self.cv.notify_all()          # close() / between-blocks waiters

    # ================================================================ closing
    def progress_close(self, s, now: float) -> None:
        """Under the lock, the stream not in flight: advance its close."""
        s.ring.retire()                # a FanOut offers it nothing more
        if s.closed or s.busy:
            return
        if s.closing == "discard":
            s.discard_queue()
        else:
            s.intake(now)
            if s.ready or s.ready_partial(now):
                return
        if s.group is not None:
            s.group.remove(s)
        s.closed = True
        if s in self.streams:
            self.streams.remove(s)
        self.cv.notify_all()

    def close_stream(self, s, policy: str, timeout: float) -> None:
        """``Stream.close``: drain or discard ``s`` (see :meth:`progress_close`), waiting
        at most ``timeout`` s; without running workers a drain runs in this thread."""
        if policy not in ("drain", "discard"):
            raise ValueError("close policy must be 'drain' or 'discard'")
        s.source_ended()
        end = _perf() + timeout
        with self.cv:
            if s.closed:
                return
            if s.closing != "discard":
                s.closing = policy
            if not self.running and not s.busy:
                if s.closing == "drain":
                    self._drain_inline(s, end)
                if not s.closed:
                    s.closing = "discard"
            self.progress_close(s, _perf())
            self.cv.notify_all()
            self.ring()
            while not s.closed:
                left = end - _perf()
                if left <= 0:
                    raise RuntimeError(f"stream {s.name!r} did not close within {timeout} s")
                self.cv.wait(min(left, 0.05))
                if not s.busy:
                    self.progress_close(s, _perf())
                    self.ring()

    def _drain_inline(self, s, end: float) -> None:
        """Scheduler not running: process the stream's queue in the caller's thread."""
        while _perf() < end and not s.closed:
            s.intake(_perf())
            sl = s.slot
            if not sl.ready:
                if not sl.fill:
                    return
                sl.ready, sl.t_capture = True, None
            g = sl.group
            sl.busy, sl.ready = True, False
            g.inflight += 1
            self.cv.release()
            try:
                self._run(g, [s])
            finally:
                self.cv.acquire()

    # ================================================================ between blocks
    def between_blocks(self, s, fn, timeout: float = 10.0):
        """Run ``fn`` in the caller's thread while ``s`` is held between two blocks."""
        end = _perf() + timeout
        with self.cv:
            while s.busy:
                left = end - _perf()
                if left <= 0:
                    raise RuntimeError(f"stream {s.name!r}: no gap between blocks within "
                                       f"{timeout} s")
                self.cv.wait(min(left, 0.05))
            s.slot.busy = True
            s.slot.ready = False
        try:
            s.slot.flush_bumps()
            return fn()
        finally:
            with self.cv:
                s.slot.busy = False
                if not s.closed and not s.closing:
                    s.intake(_perf())
                self.cv.notify_all()
            self.ring()

    def attach_state(self, s) -> None:
        """After the stream's processor got a new state (reset / restore): create it if
        missing and put it back into the group's slot."""
        prep = getattr(s.proc, "prepare", None)
        if prep is not None:
            prep(np.zeros((1,) if s.channels == 1 else (s.channels, 1), s.dtype))
        g = s.group
        if g is not None and g.batchable and s.slot.index >= 0:
            with self.cv:
                g.attach(s.slot)

    def quiesce(self, g, timeout: float = 5.0) -> None:
        """Under the lock: wait until no call of ``g`` is in flight (its store may move)."""
        g.frozen = True
        end = _perf() + timeout
        try:
            while g.inflight:
                if _perf() > end:
                    raise RuntimeError(f"group {g.label}: calls still in flight after "
                                       f"{timeout} s")
                self.cv.wait(0.05)
        finally:
            g.frozen = False

