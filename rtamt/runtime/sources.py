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
        self._init(fs, a.shape[1], a.shape[0], blocksize, realtime, loop, seconds)

    def _init(self, fs, channels: int, length: int, blocksize, realtime, loop, seconds) -> None:
        """The source's settings for ``length`` frames of ``channels`` channels."""
        self.fs = float(fs)
        self.channels = int(channels)
        self.length = int(length)          # frames of the signal (one pass)
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
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._thread: threading.Thread | None = None

    def _frames(self, start: int, n: int) -> np.ndarray:
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
        finally:
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
    subtype, FLAC, OGG, ...), all channels; ``loop`` to repeat it.  A truncated or damaged
    file raises :class:`rtamt.signals.AudioFileError` (a ``ValueError``) here, before
    anything is pushed.

    The file is read while it is pushed, :data:`CHUNK` frames at a time (float64), so the
    memory does not depend on its length (a 10-minute stereo file would be 460 MB whole).
    A read that fails part way (a damaged coded file) is reported as the input's fault
    (``runtime.report_source_error``; the apps exit with 3), and the source stops."""

    #: frames read from the file at a time
    CHUNK = 1 << 16

    def __init__(self, path, blocksize=256, realtime: bool = True, loop: bool = False,
                 seconds: float | None = None, fs: float | None = None):
        self.path = str(path)
        self._reader = AudioReader(self.path)
        rate = self._reader.fs
        if fs is not None and abs(float(fs) - rate) > 1e-9:
            self._reader.close()
            raise ValueError(f"{path}: sample rate {rate} Hz, expected {fs} Hz")
        self.frames = int(self._reader.frames)
        self._init(rate, self._reader.channels, self.frames, blocksize, realtime, loop,
                   seconds)
        self._buf = np.zeros((0, self.channels))    # file frames _at .. _at + len, (n, ch)
        self._at = 0
        self.error: str | None = None

    def _frames(self, start: int, n: int) -> np.ndarray:
        parts = []
        while n > 0:
            s = start % self.length
            if not self._at <= s < self._at + self._buf.shape[0]:
                self._fill(s)
            k = min(n, self._at + self._buf.shape[0] - s)
            parts.append(self._buf[s - self._at:s - self._at + k])
            start, n = start + k, n - k
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _fill(self, s: int) -> None:
        """Read the chunk starting at file frame ``s`` (reading goes forward; a loop
        starts again from an opened-again file)."""
        r = self._reader
        if r is None or s != r.pos:
            if s != 0:
                raise RuntimeError(f"{self.path}: cannot read frame {s} out of order")
            if r is not None:
                r.close()
            r = self._reader = AudioReader(self.path)
        self._buf = r.read(self.CHUNK).T
        self._at = s

    def run(self, runtime) -> None:
        try:
            super().run(runtime)
        except AudioFileError as e:            # the file failed part way
            self.error = str(e)
            runtime.report_source_error(self.error)
        finally:
            self._close()

    def _close(self) -> None:
        r, self._reader = self._reader, None
        if r is not None:
            r.close()
        self._buf, self._at = np.zeros((0, self.channels)), 0

    def stop(self) -> None:
        super().stop()
        if self._thread is None:          # never started: nothing else reads it
            self._close()
