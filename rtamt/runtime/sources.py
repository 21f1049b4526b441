"""Sources that behave like an audio device: they push blocks into a :class:`Runtime`
from their own thread, exactly as a PortAudio callback would, so the same code
path (ring, re-blocking, accounting) is exercised without hardware.

* ``realtime=True``: chunk ``k`` is pushed when its last frame would have been
  captured, ``t0 + (frames so far) / fs`` on the monotonic clock (no drift: the
  deadline is computed from the start, not accumulated), with the chunk's
  duration as its input latency - what a device delivering full buffers does.
* ``realtime=False``: as fast as possible, with backpressure (the source waits
  for ring space instead of dropping; a file is processed completely).

``blocksize`` may be an int, or a sequence of sizes used cyclically (to emulate
``blocksize=0`` devices that deliver varying sizes).

A source arms the runtime's watchdog (:meth:`Runtime.source_started`) when it starts and
disarms it at its natural end; :meth:`ArraySource.pause` / :meth:`ArraySource.resume`
emulate a stalled reader or an unplugged device (nothing is pushed while paused, and a
real-time source does not make up the paused time afterwards).
"""
from __future__ import annotations

import itertools
import threading
import time

import numpy as np

from ..signals import AudioFileError, AudioReader, demo_signal


class ArraySource:
    """Plays a ``(frames, channels)`` (or ``(frames,)``) array into a runtime.

    loop    : repeat the array forever (until ``seconds`` or :meth:`stop`).
    seconds : stop after this much audio (default: the array once, or forever
              if ``loop``).
    """

    def __init__(self, data: np.ndarray, fs: float, blocksize=256, realtime: bool = True,
                 loop: bool = False, seconds: float | None = None):
        a = np.asarray(data)
        if a.ndim == 1:
            a = a[:, None]
        if a.ndim != 2 or a.shape[0] == 0:
            raise ValueError(f"source data must be (frames, channels), got {np.shape(data)}")
        self.data = a
        self._setup(a.shape[0], a.shape[1], fs, blocksize, realtime, loop, seconds)

    def _setup(self, length: int, channels: int, fs: float, blocksize, realtime: bool,
               loop: bool, seconds: float | None) -> None:
        """The source's settings for ``length`` frames of ``channels`` channels."""
        self.length = int(length)
        self.fs = float(fs)
        self.channels = int(channels)
        sizes = [blocksize] if np.isscalar(blocksize) else list(blocksize)
        if not sizes or any(int(s) < 1 for s in sizes):
            raise ValueError("block sizes must be >= 1")
        self.sizes = [int(s) for s in sizes]
        self.realtime = bool(realtime)
        self.loop = bool(loop)
        total = None if seconds is None else int(round(seconds * self.fs))
        if total is None and not loop:
            total = self.length
        self.total = total
        self.pushed = 0
        self.dropped = 0
        self.error: str | None = None      # why a file source stopped early
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._thread: threading.Thread | None = None

    def _frames(self, start: int, n: int) -> np.ndarray:
        """Frames ``start .. start + n`` of the (looped) signal, ``(n, channels)``; called
        with consecutive ranges."""
        a = self.data
        L = a.shape[0]
        s = start % L
        if not self.loop or s + n <= L:
            return a[s:s + n]
        idx = (np.arange(start, start + n)) % L
        return a[idx]

    def run(self, runtime) -> None:
        """Push everything (blocking the calling thread)."""
        if not self.realtime and runtime.policy != "drop-newest":
            raise ValueError("an as-fast-as-possible source needs a Runtime with "
                             "policy='drop-newest' (backpressure, nothing lost); drop-oldest "
                             "would skip the backlog the source builds up on purpose")
        runtime.source_started(max(self.sizes) / self.fs if self.realtime else 0.0)
        try:
            self._push_all(runtime)
        except AudioFileError as e:    # a file that changed while it was read: an input fault
            self.error = str(e)
            runtime.report_source_error(self.error)
            return                     # the watchdog stays armed: the fault is reported
        runtime.source_ended()

    def _push_all(self, runtime) -> None:
        t0 = time.monotonic()
        pos = 0
        for size in itertools.cycle(self.sizes):
            if self._paused.is_set():
                tp = time.monotonic()
                while self._paused.is_set() and not self._stop.is_set():
                    time.sleep(0.005)
                t0 += time.monotonic() - tp    # the paused time is lost, not made up
            if self._stop.is_set():
                break
            n = size
            if self.total is not None:
                n = min(n, self.total - pos)
            if not self.loop:
                n = min(n, self.length - pos)
            if n <= 0:
                break
            blk = self._frames(pos, n)
            pos += n
            if self.realtime:
                due = t0 + pos / self.fs
                while True:
                    d = due - time.monotonic()
                    if d <= 0 or self._stop.is_set():
                        break
                    time.sleep(min(d, 0.05))
                ok = runtime.push(blk)
            else:
                ok = runtime.push(blk, wait=True)
            self.pushed += n
            if not ok:
                self.dropped += n

    def start(self, runtime) -> ArraySource:
        """Run in a background thread (like a device's callback thread)."""
        self._thread = threading.Thread(target=self.run, args=(runtime,), name="rtamt-source",
                                        daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    @property
    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def pause(self) -> None:
        """Stop pushing (a stalled reader / a device that went away) until :meth:`resume`."""
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def stop(self) -> None:
        self._stop.set()
        self.join(5.0)


class DemoSource(ArraySource):
    """The built-in demo signal (:func:`rtamt.signals.demo_signal`, 2 s) looped,
    on ``channels`` identical channels."""

    def __init__(self, fs: float = 48000.0, blocksize=256, realtime: bool = True,
                 seconds: float | None = None, channels: int = 1, spl_ref: float = 100.0):
        x = demo_signal(fs, 2.0, spl_ref)
        super().__init__(np.repeat(x[:, None], channels, axis=1), fs, blocksize, realtime,
                         loop=True, seconds=seconds)


class FileSource(ArraySource):
    """An audio file (every format :class:`rtamt.signals.AudioReader` reads: WAV of any
    subtype, FLAC, OGG, MP3, ...), all channels; ``loop`` to repeat it.

    The file is read block by block as it is pushed (:data:`READ_CHUNK` frames at a time,
    from the source's thread), so memory does not depend on its length.  Its length comes
    from reading (a WAV streamed through a pipe, an MP3 without a length tag:
    :class:`rtamt.signals.AudioReader`).  A truncated, damaged or unreadable file raises
    :class:`rtamt.signals.AudioFileError` (a ``ValueError``) here, before anything is
    pushed, unless ``partial``: then the frames that could be read are the file, and
    :attr:`truncated` says what was missing.  A read that fails later (the file changed
    while it was played) stops the source and is reported as an input fault
    (``runtime.report_source_error``; :attr:`error`)."""

    #: frames read from the file at a time
    READ_CHUNK = 1 << 15

    def __init__(self, path, blocksize=256, realtime: bool = True, loop: bool = False,
                 seconds: float | None = None, fs: float | None = None,
                 partial: bool = False):
        self.reader = AudioReader(path, partial=partial)
        self.path = str(path)
        #: what a truncated file read with ``partial`` left out (None: complete)
        self.truncated = self.reader.truncated
        rate = self.reader.fs
        try:
            if fs is not None and abs(float(fs) - rate) > 1e-9:
                raise ValueError(f"{path}: sample rate {rate:g} Hz, expected {float(fs):g} Hz")
            self._setup(self.reader.frames, self.reader.channels, rate, blocksize, realtime,
                        loop, seconds)
        except BaseException:
            self.reader.close()
            raise
        self._buf = np.zeros((0, self.channels))
        self._off = 0

    def _frames(self, start: int, n: int) -> np.ndarray:
        parts = []
        while n > 0:
            if self._off == self._buf.shape[0]:
                if self.reader.pos == self.length:        # loop: from the start again
                    self.reader.seek(0)
                self._buf = self.reader.read(self.READ_CHUNK).T
                self._off = 0
            take = min(n, self._buf.shape[0] - self._off)
            parts.append(self._buf[self._off:self._off + take])
            self._off += take
            n -= take
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def run(self, runtime) -> None:
        try:
            super().run(runtime)
        finally:
            self.reader.close()

    def stop(self) -> None:
        super().stop()
        if self._thread is None:          # never started: nothing else reads it
            self.reader.close()
