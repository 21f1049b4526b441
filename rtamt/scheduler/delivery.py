"""Delivery: the streams' subscribers run in one thread of the scheduler, never in a worker.

::

    worker: publish ─► the stream's delivery queue (preallocated, bounded; a list store,
                       two counters) ─► notify: the stream joins the pending queue, doorbell
                                               │
    delivery thread ◄──────────────────────────┘  each pending stream in turn: its
                   queued results to its subscribers, at most ``SLICE_S`` of subscriber
                   time per turn, then the next stream

A subscriber's time then delays neither the workers nor another stream's processing
(with one worker, a 20 ms subscriber on one stream made another skip 23 296 of 48 000
frames).  A stream's subscribers run in order, one result after another, every result
once; a slow subscriber backs up only its own stream: when its queue is full the worker
that published into it does not hand the stream back (:meth:`Dispatcher.release_held
<rtamt.scheduler.dispatch.Dispatcher.release_held>` does, once there is room), so its
input queues in its ring (and overflows there by its overload policy), and its stats name
the cause (``subscriber_p99_ms``, ``subscriber_waits``, ``line()``: "SLOW SUBSCRIBER").
Turns are sliced by time so that a slow subscriber's stream gets one result per turn while
the others' queues are emptied.

The worker's side allocates nothing and takes no lock: a list item store, a counter, and
the pending queue's append (as a push's doorbell does) with a doorbell.
"""
from __future__ import annotations

import collections
import threading
import time

__all__ = ["Delivery", "SLICE_S"]

_perf = time.perf_counter

#: subscriber time one stream may take per turn of the delivery thread, seconds
SLICE_S = 0.002


class Delivery:
    """The delivery thread of a scheduler.

    release : ``release(stream)``, called when a stream whose queue was full has room
              again (the dispatcher hands it back to the workers under its lock)."""

    def __init__(self, release):
        self.release = release
        self._pending: collections.deque = collections.deque()
        self._bell = threading.Lock()
        self._bell.acquire()
        self._thread: threading.Thread | None = None
        self._stopping = False
        #: the thread runs: results are queued for it (else delivered where published)
        self.running = False

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping = False
        self.running = True
        self._thread = threading.Thread(target=self._loop, name="rtamt-delivery",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Deliver what is queued and stop the thread (waiting at most ``timeout`` s);
        False when it is still alive (a subscriber that does not return)."""
        th = self._thread
        if th is None:
            return True
        self._stopping = True
        self._ring()
        th.join(timeout)
        if th.is_alive():
            return False
        self._thread = None
        self.running = False
        self._drain()                  # anything pushed between its last look and now
        return True

    def notify(self, s) -> None:
        """Worker, after a result was queued on ``s``: the delivery thread takes it (no
        lock, nothing allocated but the pending queue's append); without the thread the
        result is delivered here and now (a drain on a scheduler that is not running)."""
        if not self.running:
            s.deliver(float("inf"))
            return
        if not s.delivery_notified:
            s.delivery_notified = True
            self._pending.append(s)
        self._ring()

    def _ring(self) -> None:
        try:
            self._bell.release()
        except RuntimeError:  # already rung, not yet answered
            pass

    def _drain(self) -> None:
        """Give every pending stream a turn until none has anything queued."""
        pending = self._pending
        while pending:
            s = pending.popleft()
            s.delivery_notified = False
            more, freed = s.deliver(SLICE_S)
            if freed:
                self.release(s)
            if more and not s.delivery_notified:
                s.delivery_notified = True
                pending.append(s)

    def _loop(self) -> None:
        while True:
            self._bell.acquire(True, 0.05)
            self._drain()
            if self._stopping and not self._pending:
                return
