"""What a stream may ask of its scheduler: :class:`SchedulerLink`.

A :class:`~rtamt.scheduler.Stream` (and a :class:`~rtamt.scheduler.FanOut`) holds the
link its scheduler handed it in :meth:`~rtamt.scheduler.Scheduler.open`, and reaches the
scheduler only through it; the scheduler, in turn, drives the stream only through the
stream's public methods (``intake``, ``publish``, ``watch``, ...).
"""
from __future__ import annotations

__all__ = ["RtamtClosedError", "SchedulerLink"]


class RtamtClosedError(RuntimeError):
    """The scheduler was closed (:meth:`Scheduler.close`): it opens no stream, takes no
    push and does not start again."""


class SchedulerLink:
    """The scheduler as its streams see it (one object per scheduler, shared by its
    streams).

    notify(stream)          : from a producer's thread (``push``), no lock: ``stream`` (or
                              a FanOut) has new input; a queue append and a doorbell.
    deliver(stream)         : from a worker, no lock: ``stream`` queued a result for its
                              subscribers (:mod:`rtamt.scheduler.delivery`).
    attach_state(stream)    : the stream's processor got a new state (``reset`` /
                              ``restore``): put it back into the group's slot store.
    between_blocks(stream, fn, timeout): run ``fn()`` in the caller's thread while the
                              stream is held between two of its blocks; returns its value.
    close_stream(stream, policy, timeout): drain or discard the stream's queue and take
                              it out of its group (``Stream.close``).
    start()                 : start the scheduler's workers (idempotent).
    report(key, message)    : any thread: an error to list once and count
                              (``Scheduler.errors`` / ``error_counts``).
    running                 : the worker threads run (a property).
    closed                  : the scheduler was closed (a plain attribute, read on every
                              push).
    refuse(what)            : raise :class:`RtamtClosedError` for ``what``.
    """

    __slots__ = ("notify", "attach_state", "between_blocks", "close_stream", "start",
                 "report", "closed", "_running", "deliver")

    def __init__(self, *, notify, attach_state, between_blocks, close_stream, start,
                 report, running, deliver):
        self.notify = notify
        self.deliver = deliver
        self.attach_state = attach_state
        self.between_blocks = between_blocks
        self.close_stream = close_stream
        self.start = start
        self.report = report
        self.closed = False
        self._running = running

    @property
    def running(self) -> bool:
        return self._running()

    @staticmethod
    def refuse(what: str):
        raise RtamtClosedError(f"{what}: this Scheduler was closed (Scheduler.close()); "
                               "nothing was queued or opened; make a new Scheduler")
