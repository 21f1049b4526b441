"""One multichannel source, one scheduled stream per channel."""
from __future__ import annotations

import time

from .stream import callback_latency

_perf = time.perf_counter


class FanOut:
    """Looks like a single runtime to a source (``push`` / ``callback`` / the watchdog
    calls) and feeds column ``c`` of every ``(frames, channels)`` chunk to ``streams[c]``
    (a strided view: each stream's ring copies it once; nothing is allocated per chunk).

    ``fs`` and ``channels`` are the source's; every stream must have ``fs`` and one
    channel.  ``start()`` / ``stop()`` start and close the streams' scheduler side:
    ``stop`` closes every stream (drain or discard).
    """

    def __init__(self, streams: list):
        if not streams:
            raise ValueError("FanOut needs at least one stream")
        fs = {s.fs for s in streams}
        if len(fs) != 1 or any(s.channels != 1 for s in streams):
            raise ValueError("FanOut: every stream needs the same fs and one channel")
        self.streams = list(streams)
        self.fs = fs.pop()
        self.channels = len(self.streams)
        self.policy = self.streams[0].policy
        self.block = self.streams[0].block

    def push(self, block, status=0, in_latency: float | None = None, *, wait: bool = False,
             timeout: float | None = None) -> bool:
        """Push column ``c`` of ``block`` (frames, channels) to stream ``c``; True if every
        stream queued it."""
        ok = True
        if block.ndim == 1:
            block = block.reshape(-1, 1)
        if block.shape[1] != self.channels:
            from ..engine.contract import RtamtInputError
            raise RtamtInputError(f"push: expected shape (frames, {self.channels}), got "
                                  f"{tuple(block.shape)}")
        for c, s in enumerate(self.streams):
            ok = s.push(block[:, c], status, in_latency, wait=wait, timeout=timeout) and ok
        return ok

    def callback(self, indata, frames, time_info, status) -> None:
        """A ``sounddevice.InputStream`` callback (see :meth:`Stream.callback`)."""
        self.push(indata, status, callback_latency(time_info, frames, self.fs))

    def source_started(self, period_s: float = 0.0) -> None:
        for s in self.streams:
            s.source_started(period_s)

    def source_ended(self) -> None:
        for s in self.streams:
            s.source_ended()

    def report_source_error(self, message: str) -> None:
        for s in self.streams:
            s.report_source_error(message)

    @property
    def source_error(self) -> str | None:
        for s in self.streams:
            if s.source_error:
                return s.source_error
        return None

    @property
    def source_deadline(self) -> float:
        """Seconds without a push after which the watchdog reports the source (the
        largest of the streams')."""
        return max(s.source_deadline for s in self.streams)

    @property
    def running(self) -> bool:
        return any(not s.closed for s in self.streams) and self.streams[0]._sched.running

    def start(self, warmup: bool = True):
        self.streams[0]._sched.start()
        return self

    def stop(self, policy: str = "drain", timeout: float = 30.0) -> None:
        end = _perf() + timeout
        for s in self.streams:
            s.close(policy, max(end - _perf(), 0.01))

    def wait_idle(self, timeout: float = 10.0) -> bool:
        end = _perf() + timeout
        return all(s.wait_idle(max(end - _perf(), 0.0)) for s in self.streams)
