"""Real-time runtime: audio callbacks in, chain results out.

::

    audio callback / source ──push──► InputRing (bounded, preallocated)
                                          │
                       processing thread ─┘  re-block to ``block`` frames,
                       (FTZ/DAZ on)          run every chain, publish Result
                                          │
    readers ◄── latest() / history() / subscribe(fn) / stats()

* **Callback side** (:meth:`Runtime.callback`, :meth:`Runtime.push`): one copy
  into the ring plus a few scalar writes; no lock, no allocation that scales with
  the block or the chain, never blocks.  It measures its own duration.
* **Processing thread**: pulls chunks in order, re-blocks them to the chains'
  block size (results do not depend on the callback block size, because every
  rtamt chain is exact under any block partition), runs the chains, and publishes
  a :class:`Result` (latest + bounded history + optional subscribers).
* **Overload policy** (never grows without bound):
  ``'drop-oldest'`` (default) - the processing thread keeps the backlog at most
  ``max_backlog_s``; when it is behind by more, it skips the oldest queued chunks
  (counted as ``skipped``), so latency stays bounded and the runtime is back to
  real time as soon as it is fast enough again.
  ``'drop-newest'`` - nothing queued is skipped; when the ring is full the
  incoming chunk is dropped in the callback (counted as ``dropped``).
  In both cases the ring itself drops incoming chunks if it is full.
  Absolute sample indices (``Result.start``) keep counting dropped frames, so
  a gap is visible (``Result.gap``).
* **State under real time**: :meth:`reset`, :meth:`snapshot`, :meth:`restore`
  run between two blocks inside the processing thread (the stream keeps running);
  :meth:`stop` drains (process everything queued, then the partial last block) or
  discards.
* **Source watchdog**: once a source is started (:meth:`source_started`, called by
  :class:`~rtamt.runtime.stream.AudioInput` and the built-in sources), the processing
  thread checks while it waits for input that a push arrived within ``source_timeout``
  (at least two callback periods).  A source that stops delivering (audio server gone,
  device unplugged, stalled reader) becomes :attr:`Runtime.source_error` and
  ``stats().source_error``; when pushes resume the error clears, the state is kept and
  the block spanning the gap has ``Result.gap`` set (``stats().source_stalls`` counts
  such faults).
"""
from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..engine.contract import RtamtInputError, Streaming, reject_nonfinite
from ..engine.denormal import ensure_ftz
from .ring import InputRing

_perf = time.perf_counter

#: PortAudio callback status flags (portaudio.h, ``PaStreamCallbackFlags``).
STATUS_FLAGS = {
    "input_underflow": 0x1,
    "input_overflow": 0x2,
    "output_underflow": 0x4,
    "output_overflow": 0x8,
    "priming_output": 0x10,
}

POLICIES = ("drop-oldest", "drop-newest")


@dataclass(frozen=True)
class Result:
    """One processed block.

    seq       : block number since the stream started (0-based).
    start     : absolute stream index (frames) of the block's first sample; dropped
                and skipped frames count, so ``start`` jumps over a gap.
    frames    : number of samples in the block (``block`` except maybe the last).
    outputs   : ``{chain name: output}`` (time-last arrays, as the chain returns).
    t_done    : ``time.perf_counter()`` when published.
    latency_s : estimated end-to-end latency of the block's last sample: from its
                capture at the converter (callback time minus the input latency the
                audio API reports) to publication.
    proc_s    : wall time of running all chains on this block.
    gap       : input frames were dropped or skipped before/inside this block.
    """

    seq: int
    start: int
    frames: int
    outputs: dict
    t_done: float
    latency_s: float
    proc_s: float
    gap: bool


@dataclass
class RuntimeStats:
    """Accounting snapshot (see :meth:`Runtime.stats`).  Times in µs unless noted."""

    running: bool
    fs: float
    block: int
    budget_us: float
    blocks: int
    frames_processed: int
    chunks_pushed: int         # accepted into the ring
    frames_pushed: int
    frames_received: int       # offered by the callback/source: pushed + dropped
    dropped_chunks: int        # dropped by the ring (full) in the callback
    dropped_frames: int
    skipped_chunks: int        # skipped by the processing thread (drop-oldest policy)
    skipped_frames: int
    discarded_frames: int      # thrown away by stop(policy='discard')
    rejected_blocks: int       # blocks a chain refused (bad input); state unchanged
    queue_chunks: int
    queue_frames: int
    queue_max_frames: int
    proc_p50_us: float
    proc_p99_us: float
    proc_max_us: float
    rtf: float                 # processing time / audio time over the recent window
    misses: int                # blocks whose processing exceeded the block period
    callback_p50_us: float
    callback_p99_us: float
    callback_max_us: float
    latency_p50_ms: float
    latency_p99_ms: float
    status: dict = field(default_factory=dict)   # flag name -> number of chunks
    dropped_status: list = field(default_factory=list)  # flags seen on dropped chunks
    last_error: str | None = None
    source_error: str | None = None  # the input stopped delivering (None: healthy)
    source_stalls: int = 0           # input faults seen (stalls, stream errors)

    def as_dict(self) -> dict:
        from dataclasses import asdict
        return asdict(self)

    def line(self) -> str:
        """One-line human summary (used by the CLI)."""
        st = ",".join(f"{k}={v}" for k, v in self.status.items() if v) or "none"
        return (f"blocks {self.blocks}  "
                f"proc p50/p99 {self.proc_p50_us:.0f}/{self.proc_p99_us:.0f} us "
                f"(budget {self.budget_us:.0f})  rtf {self.rtf:.3f}  queue {self.queue_frames} fr "
                f"(max {self.queue_max_frames})  dropped {self.dropped_frames}  skipped "
                f"{self.skipped_frames}  cb p99 {self.callback_p99_us:.1f} us  latency p50 "
                f"{self.latency_p50_ms:.1f} ms  status {st}"
                + (f"  SOURCE ERROR: {self.source_error}" if self.source_error else
                   f"  source stalls {self.source_stalls}" if self.source_stalls else ""))


def _pct(a: np.ndarray, n: int, q: float) -> float:
    k = min(n, a.shape[0])
    if k == 0:
        return 0.0
    return float(np.percentile(a[:k], q))


class Runtime:
    """Connects an input stream to one or more chains (see module docstring).

    chains        : a streaming object (:class:`rtamt.Streaming`: a model, chain, stage
                    or meter), a list of them, or a dict ``{name: chain}``.  Each
                    receives the same input: ``(T,)`` for one channel, ``(channels, T)``
                    otherwise (channels as batch).
    fs            : sample rate, Hz.
    channels      : input channels.
    block         : frames per processing block (re-blocking target).
    dtype         : dtype the chains run in (``float64`` for AMT-exact results).
    sample_dtype  : dtype of the input ring (``float32`` as delivered by devices;
                    ``float64`` keeps float64 pushes exact).
    ring_seconds  : ring capacity in seconds (bounded; preallocated).
    policy        : ``'drop-oldest'`` or ``'drop-newest'``.
    max_backlog_s : drop-oldest only: largest tolerated backlog (seconds).
    history       : number of recent results kept.
    on_error      : ``'skip'`` (count the block as rejected, keep streaming) or
                    ``'stop'`` (stop the processing thread; :meth:`stop` re-raises).
    source_timeout: seconds without a push (at least two callback periods) after which a
                    started source counts as failed (:attr:`source_error`); ``None`` or 0
                    turns the watchdog off.
    """

    def __init__(self, chains, fs: float, channels: int = 1, block: int = 256, *,
                 dtype="float64", sample_dtype="float32", ring_seconds: float = 2.0,
                 max_chunks: int | None = None, policy: str = "drop-oldest",
                 max_backlog_s: float = 0.25, history: int = 16, on_error: str = "skip",
                 stats_window: int = 4096, source_timeout: float | None = 1.0):
        if isinstance(chains, dict):
            self.chains = dict(chains)
        else:
            lst = list(chains) if isinstance(chains, (list, tuple)) else [chains]
            self.chains = {}
            for c in lst:
                nm = getattr(c, "name", type(c).__name__)
                k, i = nm, 1
                while k in self.chains:
                    i += 1
                    k = f"{nm}{i}"
                self.chains[k] = c
        if not self.chains:
            raise ValueError("Runtime needs at least one chain")
        for k, c in self.chains.items():
            if not isinstance(c, Streaming):
                raise TypeError(f"Runtime: chain {k!r} ({type(c).__name__}) does not follow "
                                "the streaming contract (rtamt.Streaming)")
        # a block is checked once, against every chain's limit, before any chain runs
        self._limit = min(float(c.input_limit) for c in self.chains.values())
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if on_error not in ("skip", "stop"):
            raise ValueError("on_error must be 'skip' or 'stop'")
        if block < 1 or channels < 1 or fs <= 0:
            raise ValueError("block, channels must be >= 1 and fs > 0")
        self.fs = float(fs)
        self.channels = int(channels)
        self.block = int(block)
        self.dtype = np.dtype(dtype)
        self.policy = policy
        self.on_error = on_error
        cap = max(int(round(ring_seconds * self.fs)), 4 * self.block)
        self.max_backlog = max(int(round(max_backlog_s * self.fs)), self.block)
        if policy == "drop-oldest" and self.max_backlog > cap:
            cap = 2 * self.max_backlog
        self.ring = InputRing(self.channels, cap, max_chunks or max(64, cap // 16), sample_dtype)
        # processing-thread state
        self._acc = np.zeros((self.block, self.channels), self.dtype)
        self._fill = 0
        self._blk_start = 0
        self._blk_gap = False
        self._next = 0                 # absolute index expected next from the ring
        self._seq = 0
        self._latest: Result | None = None
        self._hist: collections.deque = collections.deque(maxlen=max(1, int(history)))
        self._subs: list = []
        self._cmds: collections.deque = collections.deque()
        # doorbell: a plain lock used as a binary semaphore.  The processing thread
        # holds it and waits by acquiring it again; the producer rings by releasing
        # it - one C call, no Python-level Condition (cheap in a callback).
        self._bell = threading.Lock()
        self._bell.acquire()
        self._sleeping = False
        self._thread: threading.Thread | None = None
        self._stop_mode: str | None = None
        self._error: BaseException | None = None
        self._last_error: str | None = None
        self._slow_until = 0.0
        self._slow_factor = 1.0
        # accounting (preallocated rolling windows)
        n = int(stats_window)
        self._proc = np.zeros(n)
        self._lat = np.zeros(n)
        self._audio = np.zeros(n)
        self._n_proc = 0
        self._cb = np.zeros(n)
        self._n_cb = 0
        self._status_counts = {k: 0 for k in STATUS_FLAGS}
        self._skipped_chunks = 0
        self._skipped_frames = 0
        self._discarded = 0
        self._rejected = 0
        self._misses = 0
        self._frames_done = 0
        self._queue_max = 0
        # source watchdog (see source_started); _t_push/_push_n are written by push()
        self.source_timeout = float(source_timeout or 0.0)
        if not self.source_timeout >= 0.0:
            raise ValueError(f"source_timeout must be >= 0 or None, got {source_timeout!r}")
        self._src_armed = False
        self._t_push = 0.0
        self._push_n = 0
        self._source_error: str | None = None
        self._src_err_t: float | None = None
        self._source_stalls = 0

    # ================================================================ producer side
    def push(self, block, status=0, in_latency: float | None = None, *, wait: bool = False,
             timeout: float | None = None) -> bool:
        """Queue one input block ``(frames, channels)`` (or ``(frames,)`` for one channel).

        For use inside the user's own audio callback: never blocks (unless
        ``wait=True``, meant for file/demo sources that want backpressure instead of
        drops), copies once, returns False if the block was dropped because the ring
        is full.  ``status`` is a PortAudio flag word or a ``sounddevice.CallbackFlags``;
        ``in_latency`` the seconds between capture of the block's first frame and now
        (default: the block's duration, as for a device that calls back when a buffer
        is full).
        """
        t0 = _perf()
        if not isinstance(status, int):
            status = getattr(status, "_flags", 0) or 0
        n = block.shape[0]
        if wait:
            ring = self.ring
            deadline = None if timeout is None else t0 + timeout
            while (ring.w_frame + n - ring.r_frame > ring.capacity
                   or ring.w_chunk - ring.r_chunk >= ring.max_chunks) and n <= ring.capacity:
                if self._thread is None or not self._thread.is_alive():
                    break
                if deadline is not None and _perf() > deadline:
                    break
                time.sleep(0.0005)
            t0 = _perf()        # the callback-duration statistic excludes the wait
        ok = self.ring.push(block, status, n / self.fs if in_latency is None else in_latency, t0)
        self._t_push = t0
        self._push_n = n
        if self._sleeping:
            self._ring_bell()
        i = self._n_cb % self._cb.shape[0]
        self._cb[i] = _perf() - t0
        self._n_cb += 1
        return ok

    def _ring_bell(self) -> None:
        try:
            self._bell.release()
        except RuntimeError:  # already rung, not yet answered
            pass

    def callback(self, indata, frames, time_info, status) -> None:
        """A ``sounddevice.InputStream`` callback: ``callback=runtime.callback``.

        Uses PortAudio's timestamps for the latency estimate
        (``currentTime - inputBufferAdcTime``); falls back to the block duration
        when the host API reports none.
        """
        try:
            lat = time_info.currentTime - time_info.inputBufferAdcTime
        except AttributeError:
            lat = 0.0
        if not 0.0 < lat < 1.0:
            lat = frames / self.fs
        self.push(indata, status, lat)

    # ================================================================ source health
    def source_started(self, period_s: float = 0.0) -> None:
        """Arm the watchdog: a source now delivers (call after the stream or source thread
        started).  ``period_s``: its expected callback period, if known (the timeout is at
        least twice the period, and twice the last pushed chunk's duration)."""
        self._push_n = max(self._push_n, int(round(float(period_s) * self.fs)))
        self._t_push = _perf()
        self._src_armed = True

    def source_ended(self) -> None:
        """Disarm the watchdog: the source stopped on purpose (end of a file, stop())."""
        self._src_armed = False

    def report_source_error(self, message: str) -> None:
        """Report an input fault seen outside the runtime (e.g. the audio API says the
        stream died).  The first message of a fault is kept; it clears when pushes resume."""
        if self._source_error is None:
            self._src_err_t = _perf()
            self._source_error = str(message)
            self._source_stalls += 1

    @property
    def source_error(self) -> str | None:
        """Why the input stopped delivering, or None while it is healthy."""
        return self._source_error

    @property
    def source_deadline(self) -> float:
        """Seconds without a push after which the watchdog reports the source."""
        return max(self.source_timeout, 2.0 * self._push_n / self.fs)

    def _watch_source(self) -> None:
        """Processing thread, while waiting for input: report a silent source."""
        if self._source_error is not None or not self.source_timeout:
            return
        limit = self.source_deadline
        if _perf() - self._t_push > limit:
            self.report_source_error(f"input stopped delivering audio (no callback for "
                                     f"{limit:.1f} s)")

    # ================================================================ lifecycle
    def warmup(self) -> None:
        """Compile / load every chain's kernels before the stream starts (numba JIT
        would otherwise stall the first block for up to seconds).  Runs each chain on
        one block of zeros and restores its exact state afterwards."""
        z = np.zeros((self.block, self.channels), self.dtype)
        xin = z[:, 0] if self.channels == 1 else z.T
        for c in self.chains.values():
            sd = c.state_dict()
            c(xin)
            c.load_state_dict(sd)

    def start(self, warmup: bool = True) -> Runtime:
        """Start the processing thread (idempotent); warms the chains up first."""
        if self._thread is not None and self._thread.is_alive():
            return self
        if warmup:
            self.warmup()
        self._stop_mode = None
        self._error = None
        self._thread = threading.Thread(target=self._loop, name="rtamt-processing", daemon=True)
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, policy: str = "drain", timeout: float = 30.0) -> None:
        """Stop the processing thread.

        ``'drain'``: process everything queued, then the partial last block;
        ``'discard'``: throw the queue and the partial block away (counted).
        Re-raises an error that stopped the processing thread (``on_error='stop'``).
        """
        if policy not in ("drain", "discard"):
            raise ValueError("stop policy must be 'drain' or 'discard'")
        self._src_armed = False
        th = self._thread
        if th is not None:
            self._stop_mode = policy
            self._ring_bell()
            th.join(timeout)
            if th.is_alive():
                raise RuntimeError(f"rtamt processing thread did not stop within {timeout} s")
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise RuntimeError(f"rtamt processing thread failed: {err!r}") from err

    def __enter__(self):
        return self.start()

    def __exit__(self, et, ev, tb):
        self.stop("discard" if et is not None else "drain")

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until everything pushed so far has been processed (or skipped)."""
        end = _perf() + timeout
        while self.ring.available() > 0 or self._cmds:
            if not self.running or _perf() > end:
                return self.ring.available() == 0
            time.sleep(0.0005)
        return True

    # ================================================================ readers
    def latest(self) -> Result | None:
        """Most recent result (an immutable object; safe to read from any thread)."""
        return self._latest

    def history(self) -> list[Result]:
        """Recent results, oldest first (bounded by ``history``)."""
        return list(self._hist)

    def subscribe(self, fn) -> None:
        """Call ``fn(result)`` in the processing thread after each block (keep it quick)."""
        self._subs.append(fn)

    def stats(self) -> RuntimeStats:
        r = self.ring
        n = self._n_proc
        k = min(n, self._proc.shape[0])
        audio = float(self._audio[:k].sum()) if k else 0.0
        return RuntimeStats(
            running=self.running, fs=self.fs, block=self.block,
            budget_us=1e6 * self.block / self.fs, blocks=self._seq,
            frames_processed=self._frames_done, chunks_pushed=r.pushed_chunks,
            frames_pushed=r.pushed_frames, frames_received=r.pushed_frames + r.dropped_frames,
            dropped_chunks=r.dropped_chunks,
            dropped_frames=r.dropped_frames, skipped_chunks=self._skipped_chunks,
            skipped_frames=self._skipped_frames, discarded_frames=self._discarded,
            rejected_blocks=self._rejected, queue_chunks=r.available(),
            queue_frames=r.queued_frames() + self._fill, queue_max_frames=self._queue_max,
            proc_p50_us=1e6 * _pct(self._proc, n, 50), proc_p99_us=1e6 * _pct(self._proc, n, 99),
            proc_max_us=1e6 * (float(self._proc[:k].max()) if k else 0.0),
            rtf=float(self._proc[:k].sum()) / audio if audio > 0 else 0.0,
            misses=self._misses,
            callback_p50_us=1e6 * _pct(self._cb, self._n_cb, 50),
            callback_p99_us=1e6 * _pct(self._cb, self._n_cb, 99),
            callback_max_us=1e6 * (float(self._cb[:min(self._n_cb, self._cb.shape[0])].max())
                                   if self._n_cb else 0.0),
            latency_p50_ms=1e3 * _pct(self._lat, n, 50),
            latency_p99_ms=1e3 * _pct(self._lat, n, 99),
            status=dict(self._status_counts),
            dropped_status=[k2 for k2, bit in STATUS_FLAGS.items() if r.dropped_status & bit],
            last_error=self._last_error,
            source_error=self._source_error, source_stalls=self._source_stalls,
        )

    # ================================================================ state
    def _call(self, fn, timeout: float = 10.0):
        """Run ``fn`` in the processing thread between two blocks (or here if stopped)."""
        if not self.running:
            return fn()
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._cmds.append((fn, fut))
        self._ring_bell()
        return fut.result(timeout)

    def reset(self) -> int:
        """Reset every chain to its initial state between two blocks, while streaming
        (input already queued is kept).  Returns the ``seq`` of the first block
        processed from the reset state."""
        def _do():
            for c in self.chains.values():
                c.reset()
            return self._seq
        return self._call(_do)

    def snapshot(self) -> dict:
        """Consistent copy of all chain states plus the re-blocking buffer and stream
        position, taken between two blocks while the stream keeps running."""
        def _do():
            return {
                "version": 1, "fs": self.fs, "channels": self.channels, "block": self.block,
                "dtype": str(self.dtype), "position": int(self._next), "seq": int(self._seq),
                "pending": self._acc[:self._fill].copy(),
                "pending_start": int(self._blk_start if self._fill else self._next),
                "chains": {k: c.state_dict() for k, c in self.chains.items()},
            }
        return self._call(_do)

    def restore(self, snap: dict) -> None:
        """Load a :meth:`snapshot`.  Before :meth:`start` this also sets the stream
        position (the next pushed frame continues the snapshot's stream); while
        running it replaces the model state and the stream continues.  Every chain's
        state is checked by its own ``load_state_dict`` (the contract's checks); nothing
        changes unless all of them load."""
        if not isinstance(snap, dict) or not isinstance(snap.get("chains"), dict):
            raise RtamtInputError(
                f"restore: expected a snapshot() dict, got {type(snap).__name__}")
        for key, want in (("fs", self.fs), ("channels", self.channels), ("block", self.block),
                          ("dtype", str(self.dtype))):
            if snap.get(key) != want:
                raise RtamtInputError(
                    f"restore: snapshot {key}={snap.get(key)!r}, runtime has {want!r}")
        if set(snap["chains"]) != set(self.chains):
            raise RtamtInputError(f"restore: snapshot chains {sorted(snap['chains'])} != "
                                  f"{sorted(self.chains)}")
        pend = np.asarray(snap["pending"])
        if pend.ndim != 2 or pend.shape[1] != self.channels or pend.shape[0] >= self.block:
            raise RtamtInputError(f"restore: pending block has shape {pend.shape}")
        reject_nonfinite(np.ascontiguousarray(pend, dtype=np.float64), "restore: pending block",
                         lambda b: f"frame {b[0]}, channel {b[1]}")
        was_running = self.running

        def _do():
            backup = {k: c.state_dict() for k, c in self.chains.items()}
            try:
                for k, c in self.chains.items():
                    c.load_state_dict(snap["chains"][k])
            except Exception:
                for k, c in self.chains.items():
                    c.load_state_dict(backup[k])
                raise
            self._fill = pend.shape[0]
            self._acc[:self._fill] = pend
            self._blk_start = int(snap["pending_start"])
            if not was_running:
                self._seq = int(snap["seq"])
                self._next = int(snap["position"])
                self.ring.stream_pos = self._next
        self._call(_do)

    def simulate_overload(self, factor: float, seconds: float) -> None:
        """Test hook: for the next ``seconds``, every block takes ``factor`` × its
        real-time period in the processing thread (the chain is padded with sleep)."""
        self._slow_factor = float(factor)
        self._slow_until = _perf() + float(seconds)

    # ================================================================ processing thread
    def _loop(self) -> None:
        ensure_ftz()
        ring = self.ring
        try:
            while True:
                while self._cmds:
                    fn, fut = self._cmds.popleft()
                    try:
                        fut.set_result(fn())
                    except BaseException as e:  # noqa: BLE001 - handed to the caller
                        fut.set_exception(e)
                mode = self._stop_mode
                if mode == "discard":
                    break
                if ring.available() == 0:
                    if mode == "drain":
                        break
                    self._sleeping = True
                    if ring.available() == 0 and not self._cmds and self._stop_mode is None:
                        self._bell.acquire(True, 0.05)
                    self._sleeping = False
                    if self._src_armed and self._stop_mode is None:
                        self._watch_source()
                    continue
                q = ring.queued_frames() + self._fill
                if q > self._queue_max:
                    self._queue_max = q
                if self.policy == "drop-oldest" and mode is None:
                    self._skip_backlog()
                self._consume_chunk()
            if self._stop_mode == "drain" and self._fill:
                self._process(self._fill, None)
            elif self._stop_mode == "discard":
                self._discarded += ring.queued_frames() + self._fill
                while ring.available():
                    ring.release(ring.chunk()[1])
                self._fill = 0
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self._error = e
            self._last_error = repr(e)
        finally:
            while self._cmds:   # nobody will run these any more
                fn, fut = self._cmds.popleft()
                fut.set_exception(RuntimeError("rtamt processing thread stopped"))

    def _skip_backlog(self) -> None:
        ring = self.ring
        while ring.available() > 1 and ring.queued_frames() > self.max_backlog:
            _, n, _, _, _, st = ring.chunk()
            self._count_status(st)
            ring.release(n)
            self._skipped_chunks += 1
            self._skipped_frames += n

    def _count_status(self, st: int) -> None:
        if st:
            for k, bit in STATUS_FLAGS.items():
                if st & bit:
                    self._status_counts[k] += 1

    def _consume_chunk(self) -> None:
        ring = self.ring
        start, n, pos, tpush, inlat, st = ring.chunk()
        self._count_status(st)
        if start != self._next:
            self._blk_gap = True
        if self._src_err_t is not None and tpush > self._src_err_t:
            # pushed after the fault was seen: the source is back (state kept, gap marked)
            self._source_error = self._src_err_t = None
            self._blk_gap = True
        B = self.block
        off = 0
        while off < n:
            if self._fill == 0:
                self._blk_start = start + off
            m = min(n - off, B - self._fill)
            ring.copy_frames(pos, off, m, self._acc[self._fill:self._fill + m])
            self._fill += m
            off += m
            if self._fill == B:
                # capture time of the block's last sample (frame off-1 of this chunk)
                self._process(B, tpush - inlat + (off - 1) / self.fs)
        self._next = start + n
        ring.release(n)

    def _process(self, frames: int, t_capture: float | None) -> None:
        x = self._acc[:frames]
        xin = x[:, 0] if self.channels == 1 else x.T
        t0 = _perf()
        outs = {}
        try:
            # validated once here, before any chain runs, so that a bad block leaves
            # every chain's state unchanged (not only the chains after the first one)
            reject_nonfinite(
                x, lambda: f"runtime: block {self._seq}",
                lambda b: f"channel {b[1]}, sample {b[0]} (stream sample "
                          f"{self._blk_start + b[0]}); every chain's state unchanged",
                limit=self._limit, limit_text="the smallest input_limit of the chains")
            for name, ch in self.chains.items():
                outs[name] = ch(xin)
        except RtamtInputError as e:
            self._rejected += 1
            self._last_error = str(e)
            self._fill = 0
            self._blk_gap = True
            if self.on_error == "stop":
                raise
            return
        period = frames / self.fs
        if self._slow_until and t0 < self._slow_until:
            end = min(t0 + self._slow_factor * period, self._slow_until)
            while self._stop_mode is None:
                rest = end - _perf()          # one clock read: never a negative sleep
                if rest <= 0:
                    break
                time.sleep(min(rest, 0.01))
        t1 = _perf()
        r = Result(self._seq, self._blk_start, frames, outs, t1,
                   0.0 if t_capture is None else max(t1 - t_capture, 0.0), t1 - t0, self._blk_gap)
        i = self._n_proc % self._proc.shape[0]
        self._proc[i] = r.proc_s
        self._lat[i] = r.latency_s
        self._audio[i] = period
        self._n_proc += 1
        if r.proc_s > period:
            self._misses += 1
        self._seq += 1
        self._frames_done += frames
        self._fill = 0
        self._blk_gap = False
        self._latest = r
        self._hist.append(r)
        for fn in self._subs:
            fn(r)
