"""One scheduled stream: the input side (ring, re-blocking, overload policy, source
watchdog), the output side (latest / history / subscribers) and its accounting.

A :class:`Stream` is the handle :meth:`rtamt.Scheduler.open` returns; the scheduler's side
of it (its group and row there, the block being assembled, whether a block is ready or in
flight) is its :class:`~rtamt.scheduler.slot.StreamSlot` (``stream.slot``), which the
groups batch.  Its processing happens in the scheduler's worker threads; everything here
runs either in the producer's thread (:meth:`Stream.push`, :meth:`Stream.callback`: no
lock, one copy) or under the scheduler's lock (:meth:`Stream.intake`: move queued input
into the next block).

A stream reaches its scheduler only through the
:class:`~rtamt.scheduler.link.SchedulerLink` it was given (``stream.link``), and the
scheduler drives it only through its public methods (the "scheduler side" section:
``intake``, ``publish``, ``watch``, ``reject_block``, ...).  Its policy is one
:class:`~rtamt.scheduler.options.StreamOptions` (``stream.options``).

Terms:

* a **chunk** is what one ``push`` delivered (any size); a **block** is ``block`` frames
  re-cut from the chunks (results do not depend on the chunk sizes: every rtamt stream is
  exact under any partition);
* a block's **deadline** is the capture time of its last sample plus the stream's budget;
  its **latency** is publication time minus that capture time (the capture time is the
  push time minus the input latency the audio API reports, or the chunk's duration).
"""
from __future__ import annotations

import collections
import time
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import numpy as np

from ..engine.backend import host_samples
from ..engine.contract import FLOATS, RtamtInputError, check_float_dtype, reject_nonfinite
from ..engine.parallel import Parallel
from .options import POLICIES, StreamOptions
from .ring import InputRing
from .slot import StreamSlot

__all__ = ["POLICIES", "STATUS_FLAGS", "Result", "Stream", "StreamStats", "as_chunk",
           "callback_latency", "mark_pushed", "push_waiting", "ring_frames"]
_perf = time.perf_counter

#: PortAudio callback status flags (portaudio.h, ``PaStreamCallbackFlags``).
STATUS_FLAGS = {
    "input_underflow": 0x1,
    "input_overflow": 0x2,
    "output_underflow": 0x4,
    "output_overflow": 0x8,
    "priming_output": 0x10,
}

class Result(NamedTuple):
    """One processed block.

    seq       : block number since the stream started (0-based).
    start     : absolute stream index (frames) of the block's first sample; dropped
                and skipped frames count, so ``start`` jumps over a gap.
    frames    : number of samples in the block (``block`` except maybe the last).
    outputs   : ``{name: output}`` (time-last arrays, as the stream's processor returns
                them; one entry named after the processor, or one per chain of a
                :class:`~rtamt.engine.parallel.Parallel`; the R128 meter's
                ``momentary``, ``short_term``, ``integrated``, ``loudness_range`` and
                ``true_peak``, floats or None).
    t_done    : ``time.perf_counter()`` when published.
    latency_s : end-to-end latency of the block's last sample: from its capture (push
                time minus the reported input latency) to publication.
    proc_s    : wall time of the processing call that computed this block (shared by
                every stream of a batched call).
    gap       : input frames were dropped, skipped or rejected before/inside this block.
    batch     : number of streams processed in the same call.

    Immutable (a named tuple: built once per stream and block on the worker's path).
    """

    seq: int
    start: int
    frames: int
    outputs: dict
    t_done: float
    latency_s: float
    proc_s: float
    gap: bool
    batch: int = 1


@dataclass
class StreamStats:
    """Accounting snapshot of one stream (see :meth:`Stream.stats`).  Times in µs unless
    the name says ms."""

    name: str
    running: bool
    fs: float
    block: int
    budget_us: float           # the stream's latency budget (deadline - last sample)
    blocks: int
    frames_processed: int
    chunks_pushed: int         # accepted into the ring
    frames_pushed: int
    frames_received: int       # offered by the callback/source: pushed + dropped
    dropped_chunks: int        # dropped by the ring (full) in the callback
    dropped_frames: int
    skipped_chunks: int        # skipped before processing (drop-oldest policy)
    skipped_frames: int
    discarded_frames: int      # thrown away by close(policy='discard')
    rejected_blocks: int       # blocks refused (bad input); state unchanged
    queue_chunks: int
    queue_frames: int
    queue_max_frames: int
    proc_p50_us: float
    proc_p99_us: float
    proc_max_us: float
    rtf: float                 # processing time (own share of each call) / audio time
    misses: int                # blocks published after their deadline
    callback_p50_us: float
    callback_p99_us: float
    callback_max_us: float
    latency_p50_ms: float
    latency_p99_ms: float
    latency_max_ms: float = 0.0
    batch_mean: float = 0.0    # mean number of streams per call
    status: dict = field(default_factory=dict)   # flag name -> number of chunks
    dropped_status: list = field(default_factory=list)  # flags seen on dropped chunks
    last_error: str | None = None
    subscriber_errors: int = 0       # subscriber calls that raised (isolated, counted)
    source_error: str | None = None  # the input stopped delivering (None: healthy)
    source_stalls: int = 0           # input faults seen (stalls, stream errors)
    group: str = ""
    state: str = "open"              # 'open', 'closing', 'closed', 'aged-out'
    subscribers: int = 0             # functions subscribed
    subscriber_p99_ms: float = 0.0   # their time per result (all of them), delivery thread
    subscriber_max_ms: float = 0.0
    subscriber_waits: int = 0        # blocks the stream waited for its subscribers
    subscriber_queue: int = 0        # results published and not yet delivered
    slow_subscriber: bool = False    # they waited for, or p99 above the block period

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """One-line human summary (used by the CLI)."""
        st = ",".join(f"{k}={v}" for k, v in self.status.items() if v) or "none"
        return (f"blocks {self.blocks}  "
                f"latency p50/p99/max {self.latency_p50_ms:.2f}/{self.latency_p99_ms:.2f}/"
                f"{self.latency_max_ms:.2f} ms (budget {self.budget_us / 1e3:.1f})  misses "
                f"{self.misses}  proc p99 {self.proc_p99_us:.0f} us  rtf {self.rtf:.3f}  "
                f"queue {self.queue_frames} fr (max {self.queue_max_frames})  dropped "
                f"{self.dropped_frames}  skipped {self.skipped_frames}  rejected "
                f"{self.rejected_blocks}  cb p99 {self.callback_p99_us:.1f} us  status {st}"
                + (f"  SOURCE ERROR: {self.source_error}" if self.source_error else
                   f"  source stalls {self.source_stalls}" if self.source_stalls else "")
                + (f"  subscriber errors {self.subscriber_errors}" if self.subscriber_errors
                   else "")
                + (f"  subscribers p99/max {self.subscriber_p99_ms:.2f}/"
                   f"{self.subscriber_max_ms:.2f} ms" if self.subscribers else "")
                + (f"  SLOW SUBSCRIBER: {self.subscriber_p99_ms:.1f} ms p99 per "
                   f"{1e3 * self.block / self.fs:.2f} ms block; the stream waited "
                   f"{self.subscriber_waits} times for it (its input queues)"
                   if self.slow_subscriber else "")
                + (f"  last error: {self.last_error}" if self.last_error else ""))


def callback_latency(time_info, frames: int, fs: float) -> float:
    """Seconds from capture of a callback's first frame to now: PortAudio's
    ``currentTime - inputBufferAdcTime``, or the chunk's duration when the host API
    reports none."""
    try:
        lat = time_info.currentTime - time_info.inputBufferAdcTime
    except AttributeError:
        lat = 0.0
    return lat if 0.0 < lat < 1.0 else frames / fs


def mark_pushed(fed, t0: float, n: int) -> None:
    """After a push into ``fed`` (a Stream or a FanOut): the watchdog's clock (push time
    ``t0``, ``n`` frames) and, once until the scheduler takes the input in, its doorbell."""
    fed.t_push = t0
    fed.push_n = n
    if not fed.notified:
        fed.notified = True
        fed.link.notify(fed)


def push_waiting(link, who: str, n: int, capacity: int, fits, gone, put, status: int,
                 lat: float, fs: float, t0: float, timeout: float | None,
                 alive=None) -> bool:
    """A waiting push of ``n`` frames (``Stream.push`` / ``FanOut.push`` with
    ``wait=True``): in pieces of at most half the ring (``capacity`` frames), each put with
    ``put(first, end, status, in_latency)`` as soon as ``fits(frames)``.  Returns False
    when ``gone()`` (the stream closes), or what ``put`` of the rest returns once
    ``timeout`` seconds (from ``t0``) have passed; raises when the scheduler is closed or
    not running (nothing would ever make room).  While it waits, ``alive()`` is called
    every 50 ms: a source held back by a slow consumer is not a source that stopped
    delivering (the watchdog's clock)."""
    piece = max(1, min(n, capacity // 2))
    deadline = None if timeout is None else t0 + timeout
    off = 0
    t_alive = _perf()
    while off < n:
        m = min(piece, n - off)
        st, la = (status if off == 0 else 0), lat - off / fs
        while not fits(m):
            if alive is not None and _perf() - t_alive > 0.05:
                alive()
                t_alive = _perf()
            if gone():
                return False
            if link.closed:
                link.refuse(f"push: {who}")
            if not link.running:
                raise RuntimeError(
                    f"push(wait=True): {who}: the ring is full ({capacity} frames) and the "
                    f"scheduler is not running (start() it); frames {off}..{n - 1} of this "
                    "chunk not queued")
            if deadline is not None and _perf() > deadline:
                return put(off, n, st, la)
            time.sleep(0.0005)
        put(off, off + m, st, la)
        off += m
    return True


def ring_frames(options: StreamOptions, fs: float, block: int) -> int:
    """Frames of a stream's input ring: ``ring_seconds`` of input, at least 4 blocks, and
    with the drop-oldest policy at least twice the backlog it keeps."""
    cap = max(int(round(options.ring_seconds * fs)), 4 * block)
    backlog = max(int(round(options.max_backlog_s * fs)), block)
    if options.policy == "drop-oldest" and backlog > cap:
        cap = 2 * backlog
    return cap


def as_chunk(block, label) -> np.ndarray:
    """``block`` as a numpy array of float32 or float64 samples, or
    :class:`~rtamt.RtamtInputError` refusing what the models refuse (a list, a scalar, an
    integer, complex or float16 dtype, a tensor of such a dtype), with the models' hint
    for integer PCM.  ``label()`` names the stream and the block (called only to refuse).
    The shape is the ring's to check (:meth:`~rtamt.scheduler.ring.InputRing.shaped`; a
    numpy scalar of a float type is refused there, as a chunk of shape ``()``).  Not the
    hot path: a push calls it only for what has no float32 / float64 ``dtype``; what is
    an array and what a tensor is :func:`rtamt.engine.backend.host_samples`'s to tell."""
    try:                          # an array, a tensor, or refused as the models refuse it
        arr = host_samples(block)
    except ValueError as e:
        raise RtamtInputError(f"{label()}: {e}; nothing queued") from None
    if arr.dtype not in FLOATS:
        try:
            check_float_dtype(arr, label())
        except RtamtInputError as e:
            raise RtamtInputError(f"{e}; nothing queued") from None
    return arr


def _pct(a: np.ndarray, n: int, q: float) -> float:
    k = min(n, a.shape[0])
    if k == 0:
        return 0.0
    return float(np.percentile(a[:k], q))


class Stream:
    """A stream scheduled by a :class:`~rtamt.scheduler.Scheduler` (made by
    :meth:`~rtamt.scheduler.Scheduler.open`; see the module docstring).

    Producer side: :meth:`push` / :meth:`callback` (inside an audio callback: one copy into
    a preallocated ring, a few scalar writes, no lock, never blocks).  Reader side:
    :meth:`latest`, :meth:`history`, :meth:`subscribe`, :meth:`stats`.  State:
    :meth:`snapshot`, :meth:`restore`, :meth:`reset` (between two blocks, while the other
    streams keep running).  :meth:`close` drains or discards what is queued and leaves.
    """

    #: what admission predicted when the stream opened (:class:`~rtamt.scheduler.
    #: placement.Admission`): the workers' busy fraction, the worst latency of a block
    #: (s), one block's call over the block period, and the bytes the stream keeps
    predicted_load = predicted_latency_s = predicted_serial = predicted_memory = 0.0

    def __init__(self, link, proc, name: str, fs: float, channels: int, block: int,
                 budget_s: float, dtype, options: StreamOptions | None = None):
        o = StreamOptions() if options is None else options
        if block < 1 or channels < 1 or fs <= 0:
            raise ValueError("block, channels must be >= 1 and fs > 0")
        #: the scheduler, as this stream sees it (:class:`~rtamt.scheduler.link.SchedulerLink`)
        self.link = link
        self.options = o
        self.proc = proc
        self.name = name
        self.fs = float(fs)
        self.channels = int(channels)
        self.block = int(block)
        self.budget_s = float(budget_s)
        self.dtype = np.dtype(dtype)
        self.policy = o.policy
        self.on_error = o.on_error
        self.admission = o.admission
        self.limit = float(proc.input_limit)
        #: the name a result's single output is published under (None: the processor
        #: returns its outputs by name already: a :class:`~rtamt.engine.parallel.Parallel`,
        #: or a processor with ``named_outputs = True``, the R128 meter)
        self.out_key = None if isinstance(proc, Parallel) or getattr(
            proc, "named_outputs", False) else getattr(proc, "name", "out")
        cap = ring_frames(o, self.fs, self.block)
        self.max_backlog = max(int(round(o.max_backlog_s * self.fs)), self.block)
        self.ring = InputRing(self.channels, cap, o.max_chunks or max(64, cap // 16),
                              self.dtype if o.sample_dtype is None else o.sample_dtype,
                              owner=f"stream {name!r}")
        #: the scheduler's side of the stream (:class:`~rtamt.scheduler.slot.StreamSlot`):
        #: its group and row there, the block being assembled, the in-flight bookkeeping
        self.slot = StreamSlot(name, proc, self.block, self.channels, self.dtype)
        # re-blocking (scheduler lock / the worker that owns the in-flight block)
        self._coff = 0                 # frames of the ring's head chunk already consumed
        self._blk_start = 0
        self._blk_gap = False
        self._next = 0                 # absolute index expected next from the ring
        self._seq = 0
        # scheduling (scheduler lock)
        self.closing: str | None = None    # 'drain' / 'discard' once close() was called
        self.closed = False
        self.aged_out = False
        self.idle_timeout = float(o.idle_timeout) if o.idle_timeout else 0.0
        self.error: BaseException | None = None
        #: True from a push's doorbell until the scheduler takes the input in
        self.notified = False
        self.fan = None               # the FanOut that feeds this stream, if any
        # results
        self._latest: Result | None = None
        self._keep = int(o.history) > 0          # 0: results go to subscribers only
        self._hist: collections.deque = collections.deque(maxlen=max(1, int(o.history)))
        self._subs: list = []
        # results for the subscribers (rtamt.scheduler.delivery): written by the worker
        # that publishes (_dq_w), read by the delivery thread (_dq_r, after the
        # subscribers returned)
        self._dq: list = [None] * max(2, -(-int(o.subscriber_backlog_s * self.fs)
                                           // self.block))
        self._dq_w = self._dq_r = 0
        #: in the delivery thread's pending queue
        self.delivery_notified = False
        self._sub_waits = 0
        # accounting (preallocated rolling windows)
        n = int(o.stats_window)
        self._proc = np.zeros(n)
        self._lat = np.zeros(n)
        self._audio = np.zeros(n)
        self._n_proc = 0
        self._batch_sum = 0
        self._cb = np.zeros(n)
        self._n_cb = 0
        self._sub_t = np.zeros(n)
        self._n_sub = 0
        self._status_counts = {k: 0 for k in STATUS_FLAGS}
        self._skipped_chunks = 0
        self._skipped_frames = 0
        self._discarded = 0
        self._rejected = 0
        self._sub_errors = 0
        self._misses = 0
        self._frames_done = 0
        self._queue_max = 0
        self._last_error: str | None = None
        self._slow_until = 0.0
        self._slow_factor = 1.0
        # source watchdog; t_push (perf_counter of the last push) and push_n (its frames)
        # are written by push()
        self.source_timeout = float(o.source_timeout or 0.0)
        self._src_armed = False
        self.t_push = _perf()
        self.push_n = 0
        self._source_error: str | None = None
        self._src_err_t: float | None = None
        self._source_stalls = 0

    def __repr__(self):
        return (f"<rtamt Stream {self.name!r} {self.fs:g} Hz block {self.block} budget "
                f"{1e3 * self.budget_s:g} ms{' closed' if self.closed else ''}>")

    # the scheduler's view of the stream, read-only on the handle (the scheduler writes
    # them on :attr:`slot`)
    @property
    def group(self):
        """The :class:`~rtamt.scheduler.groups.Group` the stream runs in (None before it
        is added and after it closed)."""
        return self.slot.group

    @property
    def busy(self) -> bool:
        """A block (or a between-blocks command) of the stream is in flight."""
        return self.slot.busy

    @property
    def ready(self) -> bool:
        """A full block waits for a worker."""
        return self.slot.ready

    @property
    def fill(self) -> int:
        """Frames of the next block already taken in from the input."""
        return self.slot.fill

    # ================================================================ producer side
    def push(self, block, status=0, in_latency: float | None = None, *, wait: bool = False,
             timeout: float | None = None) -> bool:
        """Queue one input chunk ``(frames, channels)`` (or ``(frames,)`` for one channel).

        ``wait=False`` (an audio callback): never blocks; copies once into the
        preallocated ring; a chunk that does not fit (ring full) is dropped whole and
        counted (``stats().dropped_frames``), and False returned.

        ``wait=True`` (a file or any source that can wait): waits until the ring has room
        and loses nothing: a chunk longer than the ring goes in piece by piece as the
        ring drains, and the drop-oldest policy never skips what a waiting push queued.
        Only ``timeout`` (seconds, default: none) ends the wait early: the rest of the
        chunk is then dropped (counted) and False returned.  A waiting push on a
        scheduler that is not running raises ``RuntimeError`` instead of waiting forever.

        Returns False without queueing when the stream is closed or closing; raises
        :class:`~rtamt.scheduler.RtamtClosedError` when its scheduler was closed.
        ``status`` is a PortAudio flag word or a ``sounddevice.CallbackFlags``;
        ``in_latency`` the seconds between capture of the chunk's first frame and now
        (default: the chunk's duration).  A chunk the models would refuse raises
        :class:`~rtamt.RtamtInputError` naming the stream and the block, and nothing is
        queued or counted: another channel count or rank, integer samples (scale them:
        ``x / 2**(bits-1)``), complex or float16 samples, a list or a scalar
        (:func:`as_chunk`).  A float32 / float64 numpy array (or CPU tensor) is what it
        takes; its values are checked per block by the workers (NaN, Inf, input limit).
        """
        t0 = _perf()
        if self.link.closed:
            self.link.refuse(f"push: stream {self.name!r}")
        if self.closed or self.closing:
            return False
        if getattr(block, "dtype", ()) not in FLOATS:   # () equals no dtype (None: float64)
            block = as_chunk(block, self._chunk_label)     # refused, or a float array
        block = self.ring.shaped(block)
        if not isinstance(status, int):
            status = getattr(status, "_flags", 0) or 0
        n = block.shape[0]
        lat = n / self.fs if in_latency is None else in_latency
        if wait:
            return self._push_waiting(block, status, lat, t0, timeout)
        ok = self.ring.put(block, status, lat, t0)
        self._pushed(t0, n)
        return ok

    def _chunk_label(self) -> str:
        """``"push: stream 'name', block k"`` (the chunk a push would queue next), for the
        message that refuses it."""
        r = self.ring
        return f"push: stream {self.name!r}, block {r.pushed_chunks + r.dropped_chunks}"

    def _push_waiting(self, block, status: int, lat: float, t0: float,
                      timeout: float | None) -> bool:
        """``push(wait=True)`` of ``block`` (frames, channels) (see :meth:`push`)."""
        ring = self.ring

        def put(a: int, b: int, st: int, la: float) -> bool:
            t = _perf()        # the callback-duration statistic excludes the wait
            ok = ring.put(block[a:b], st, la, t, True)
            self._pushed(t, b - a)
            return ok
        return push_waiting(self.link, f"stream {self.name!r}", block.shape[0],
                            ring.capacity, ring.room, lambda: bool(self.closed or self.closing),
                            put, status, lat, self.fs, t0, timeout,
                            alive=lambda: mark_pushed(self, _perf(), self.push_n))

    def _pushed(self, t0: float, n: int) -> None:
        """After a push: the watchdog's clock, the doorbell, the callback statistic."""
        mark_pushed(self, t0, n)
        i = self._n_cb % self._cb.shape[0]
        self._cb[i] = _perf() - t0
        self._n_cb += 1

    def callback(self, indata, frames, time_info, status) -> None:
        """A ``sounddevice.InputStream`` callback: ``callback=stream.callback``.

        Uses PortAudio's timestamps for the latency estimate
        (``currentTime - inputBufferAdcTime``); falls back to the chunk duration
        when the host API reports none.
        """
        self.push(indata, status, callback_latency(time_info, frames, self.fs))

    # ================================================================ source health
    def source_started(self, period_s: float = 0.0) -> None:
        """Arm the watchdog: a source now delivers (call after the stream or source thread
        started).  ``period_s``: its expected callback period, if known (the timeout is at
        least twice the period, and twice the last pushed chunk's duration)."""
        self.push_n = max(self.push_n, int(round(float(period_s) * self.fs)))
        self.t_push = _perf()
        self._src_armed = True

    def source_ended(self) -> None:
        """Disarm the watchdog: the source stopped on purpose (end of a file, stop())."""
        self._src_armed = False

    def report_source_error(self, message: str) -> None:
        """Report an input fault seen outside the scheduler (e.g. the audio API says the
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
        return max(self.source_timeout, 2.0 * self.push_n / self.fs)

    def watch(self, now: float) -> None:
        """Scheduler thread, periodically: report a silent source; age out an idle stream."""
        if self._src_armed and self.source_timeout and self._source_error is None:
            if now - self.t_push > self.source_deadline:
                self.report_source_error(f"input stopped delivering audio (no callback for "
                                         f"{self.source_deadline:.1f} s)")
        if (self.idle_timeout and self.closing is None and not self.closed
                and now - self.t_push > self.idle_timeout):
            self.aged_out = True
            self.closing = "drain"

    # ================================================================ readers
    def latest(self) -> Result | None:
        """Most recent result (an immutable object; safe to read from any thread); always
        ``None`` for a stream opened with ``history=0`` (results go to subscribers only)."""
        return self._latest

    def history(self) -> list[Result]:
        """Recent results, oldest first (bounded by ``history``)."""
        return list(self._hist)

    def subscribe(self, fn) -> None:
        """Call ``fn(result)`` after each block, in the scheduler's delivery thread
        (:mod:`~rtamt.scheduler.delivery`), never in a worker: the stream's subscribers
        run in order, one result after another.  A subscriber slower than the blocks
        backs up this stream only (it waits for them when ``subscriber_backlog_s`` of
        results are queued; ``stats()`` names it); copy what you keep: a result held
        keeps its output array from being reused."""
        self._subs.append(fn)
        g = self.slot.group
        if g is not None:            # the output arrays a queued result may hold
            g.history = max(g.history, int(self.options.history) + len(self._dq))

    @property
    def state(self) -> str:
        return ("aged-out" if self.aged_out and self.closed else "closed" if self.closed
                else "closing" if self.closing else "open")

    def stats(self) -> StreamStats:
        r = self.ring
        n = self._n_proc
        k = min(n, self._proc.shape[0])
        audio = float(self._audio[:k].sum()) if k else 0.0
        queue = r.queued_frames() - self._coff + self.slot.fill
        return StreamStats(
            name=self.name, running=self.link.running and not self.closed, fs=self.fs,
            block=self.block, budget_us=1e6 * self.budget_s, blocks=self._seq,
            frames_processed=self._frames_done, chunks_pushed=r.pushed_chunks,
            frames_pushed=r.pushed_frames, frames_received=r.pushed_frames + r.dropped_frames,
            dropped_chunks=r.dropped_chunks,
            dropped_frames=r.dropped_frames, skipped_chunks=self._skipped_chunks,
            skipped_frames=self._skipped_frames, discarded_frames=self._discarded,
            rejected_blocks=self._rejected, queue_chunks=r.available(),
            queue_frames=queue, queue_max_frames=max(self._queue_max, queue),
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
            latency_max_ms=1e3 * (float(self._lat[:k].max()) if k else 0.0),
            batch_mean=self._batch_sum / n if n else 0.0,
            status=dict(self._status_counts),
            dropped_status=[k2 for k2, bit in STATUS_FLAGS.items() if r.dropped_status & bit],
            last_error=self._last_error, subscriber_errors=self._sub_errors,
            source_error=self._source_error, source_stalls=self._source_stalls,
            group=self.slot.group.label if self.slot.group is not None else "", state=self.state,
            **self._subscriber_stats(),
        )

    def _subscriber_stats(self) -> dict:
        """The subscriber fields of :class:`StreamStats`."""
        n, k = self._n_sub, min(self._n_sub, self._sub_t.shape[0])
        p99 = 1e3 * _pct(self._sub_t, n, 99)
        return dict(subscribers=len(self._subs), subscriber_p99_ms=p99,
                    subscriber_max_ms=1e3 * (float(self._sub_t[:k].max()) if k else 0.0),
                    subscriber_waits=self._sub_waits,
                    subscriber_queue=self._dq_w - self._dq_r,
                    slow_subscriber=bool(self._sub_waits or p99 > 1e3 * self.block / self.fs))

    # ================================================================ state (between blocks)
    def reset(self) -> int:
        """Reset the stream's state between two blocks while streaming (input already
        queued is kept).  Returns the ``seq`` of the first block processed from the reset
        state."""
        def _do():
            self.proc.reset()
            self.link.attach_state(self)
            return self._seq
        return self.link.between_blocks(self, _do)

    def snapshot(self) -> dict:
        """Consistent copy of the stream's state (the processor's :meth:`state_dict`, which
        an offline model of the same design loads) plus the re-blocking buffer and stream
        position, taken between two blocks while the stream keeps running."""
        def _do():
            return {
                "version": 1, "fs": self.fs, "channels": self.channels, "block": self.block,
                "dtype": str(self.dtype), "position": int(self._next), "seq": int(self._seq),
                "pending": self.slot.block_buf[:self.slot.fill].copy(),
                "pending_start": int(self._blk_start if self.slot.fill else self._next),
                "state": self.proc.state_dict(),
            }
        return self.link.between_blocks(self, _do)

    def _check_snapshot(self, snap: dict) -> np.ndarray:
        if not isinstance(snap, dict) or "state" not in snap:
            raise RtamtInputError(
                f"restore: expected a snapshot() dict, got {type(snap).__name__}")
        for key, want in (("fs", self.fs), ("channels", self.channels), ("block", self.block),
                          ("dtype", str(self.dtype))):
            if snap.get(key) != want:
                raise RtamtInputError(
                    f"restore: snapshot {key}={snap.get(key)!r}, stream has {want!r}")
        pend = np.asarray(snap["pending"])
        if pend.ndim != 2 or pend.shape[1] != self.channels or pend.shape[0] > self.block:
            raise RtamtInputError(f"restore: pending block has shape {pend.shape}")
        reject_nonfinite(np.ascontiguousarray(pend, dtype=np.float64), "restore: pending block",
                         lambda b: f"frame {b[0]}, channel {b[1]}")
        return pend

    def restore(self, snap: dict) -> None:
        """Load a :meth:`snapshot`.  Before the scheduler runs, or before anything was
        pushed to this stream, this also sets the stream position and block count (the
        next pushed frame continues the snapshot's stream: results carry its ``seq`` and
        ``start``, as on a stream that never stopped); later it replaces the state and
        the stream continues.  The state is checked by the processor's own
        ``load_state_dict``; nothing changes unless it loads."""
        pend = self._check_snapshot(snap)
        fresh = self._seq == 0 and self.ring.stream_pos == 0 and not self.slot.fill
        started = (self._seq > 0 or self.link.running) and not fresh

        def _do():
            self.proc.load_state_dict(snap["state"])
            self.link.attach_state(self)
            sl = self.slot
            sl.fill = pend.shape[0]
            sl.block_buf[:sl.fill] = pend
            self._blk_start = int(snap["pending_start"])
            if not started:
                self._seq = int(snap["seq"])
                self._next = int(snap["position"])
                self.ring.stream_pos = self._next
        self.link.between_blocks(self, _do)

    def simulate_overload(self, factor: float, seconds: float) -> None:
        """Test hook: for the next ``seconds``, every block of this stream takes ``factor``
        × its real-time period in the worker (padded with sleep)."""
        self._slow_factor = float(factor)
        self._slow_until = _perf() + float(seconds)

    def close(self, policy: str = "drain", timeout: float = 30.0) -> None:
        """Leave the scheduler: ``'drain'`` processes what is queued (then the partial last
        block), ``'discard'`` throws it away (counted).  Waits at most ``timeout`` s, also
        for the subscribers to have every result; the state stays readable
        (:meth:`snapshot`) after closing.  Idempotent."""
        end = _perf() + timeout
        self.link.close_stream(self, policy, timeout)
        if not self._delivered(end):
            raise RuntimeError(f"stream {self.name!r}: its subscribers did not take the "
                               f"last results within {timeout} s")

    def idle(self) -> bool:
        """Whether everything pushed so far has been processed (or skipped) and its results
        delivered to the subscribers, now (never waits)."""
        return not (self.ring.available() > 0 or self.slot.ready or self.slot.busy
                    or self._dq_r < self._dq_w)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until everything pushed so far has been processed (or skipped)."""
        end = _perf() + timeout
        while self.ring.available() > 0 or self.slot.ready or self.slot.busy:
            if self.closed or not self.link.running or _perf() > end:
                return self.ring.available() == 0 and not self.slot.ready and \
                    self._delivered(end)
            time.sleep(0.0005)
        return self._delivered(end)

    def _delivered(self, end: float) -> bool:
        """Wait (until ``end``) for the subscribers to have every published result."""
        while self._dq_r < self._dq_w:
            if _perf() > end:
                return False
            time.sleep(0.0005)
        return True

    # ================================================================ scheduler side
    # Called by the scheduler: under its lock, or from the worker that holds this
    # stream's block (``busy``), or inside :meth:`between_blocks`.
    @property
    def seq(self) -> int:
        """Number of the next block to publish (blocks published so far)."""
        return self._seq

    def between_blocks(self, fn, timeout: float = 10.0):
        """Run ``fn()`` in the caller's thread while this stream is held between two of
        its blocks (the other streams go on); returns what ``fn`` returns.  Raises
        ``RuntimeError`` when no gap comes within ``timeout`` seconds."""
        return self.link.between_blocks(self, fn, timeout)

    def state_replaced(self) -> None:
        """Inside :meth:`between_blocks`, after the processor got a new state (reset,
        load_state_dict, a warm-up that reloads it): hand it back to the scheduler's
        batched calls (the group's slot store)."""
        self.link.attach_state(self)

    def reject_block(self, err: BaseException, message: str, stop: bool) -> None:
        """The block in the buffer is refused (bad input, or its call failed): counted
        (``rejected_blocks``), ``message`` kept as the last error, the buffer emptied, the
        next result marked as after a gap; ``stop``: the stream stops with ``err``
        (closing, its queue discarded)."""
        self._rejected += 1
        self._last_error = message
        self.slot.fill = 0
        self._blk_gap = True
        if stop:
            self.error = err
            self.closing = "discard"

    def publish_failed(self, e: BaseException) -> str:
        """Publishing the block just processed raised ``e``: kept as the last error;
        returns the message."""
        self._last_error = f"{self.name}: publishing block {self._seq} failed: {e!r}"
        return self._last_error

    def discard_queue(self) -> None:
        """Throw away the queued input and the partial block (``discarded_frames``)."""
        ring = self.ring
        self._discarded += ring.queued_frames() - self._coff + self.slot.fill
        while ring.available():
            ring.release(ring.chunk()[1])
        self._coff = self.slot.fill = 0
        self.slot.ready = False

    def ready_partial(self, now: float) -> bool:
        """Draining: mark a partial block (the last frames) ready, deadline ``now`` plus
        the budget; False when the buffer is empty."""
        if not self.slot.fill:
            return False
        self.slot.ready = True
        self.slot.t_capture = None
        self.slot.deadline = now + self.budget_s
        self.slot.t_ready = now
        return True

    def _count_status(self, st: int) -> None:
        if st:
            for k, bit in STATUS_FLAGS.items():
                if st & bit:
                    self._status_counts[k] += 1

    def intake(self, now: float) -> None:
        """Under the scheduler lock, with the stream not busy and not ready: apply the
        overload policy, then move queued frames into the block buffer until it is full
        (the block becomes ready, validated) or the ring is empty."""
        ring, sl = self.ring, self.slot
        B = self.block
        if sl.fill == B and not sl.ready:      # a full block restored by restore()
            self._make_ready(None, now)
        while not sl.ready and ring.available():
            q = ring.queued_frames() - self._coff + sl.fill
            if q > self._queue_max:
                self._queue_max = q
            if self.policy == "drop-oldest" and self.closing is None:
                while (ring.available() > 1 and not ring.kept()
                       and ring.queued_frames() - self._coff > self.max_backlog):
                    _, n, _, _, _, st = ring.chunk()
                    if self._coff == 0:
                        self._count_status(st)
                    ring.release(n)
                    self._skipped_chunks += 1
                    self._skipped_frames += n - self._coff
                    self._coff = 0
                    self._blk_gap = True
            start, n, pos, tpush, inlat, st = ring.chunk()
            if self._coff == 0:
                self._count_status(st)
                if start != self._next:
                    self._blk_gap = True
                if self._src_err_t is not None and tpush > self._src_err_t:
                    # pushed after the fault was seen: the source is back (gap marked)
                    self._source_error = self._src_err_t = None
                    self._blk_gap = True
            off = self._coff
            if sl.fill == 0:
                self._blk_start = start + off
            m = min(n - off, B - sl.fill)
            ring.copy_frames(pos, off, m, sl.block_buf[sl.fill:sl.fill + m])
            sl.fill += m
            off += m
            if off == n:
                self._next = start + n
                ring.release(n)
                self._coff = 0
            else:
                self._coff = off
            if sl.fill == B:
                # capture time of the block's last sample (frame off-1 of this chunk)
                self._make_ready(tpush - inlat + (off - 1) / self.fs, now)

    def takes_whole_block(self, r_chunk: int) -> bool:
        """Under the scheduler lock: can this stream's next block be the ring bank's chunk
        ``r_chunk`` whole, written by its FanOut's compiled intake
        (:meth:`~rtamt.scheduler.FanOut.take_in`)?  True when that chunk is the only one
        queued for it, nothing of a block is pending, the stream is idle and open with a
        healthy source, and its block buffer lies in its group's input rows."""
        sl = self.slot
        g = sl.group
        return (sl.fill == 0 and not sl.ready and not sl.busy and self._coff == 0
                and self.closing is None and not self.closed and self._src_err_t is None
                and self.ring.r_chunk == r_chunk and g is not None and g.shares_input(sl))

    def took_block(self, ok: bool, t_capture: float, now: float) -> None:
        """Under the scheduler lock, after the compiled intake wrote the ring's head chunk
        (one whole block, status 0) into the slot's ``block_buf``: account for it as
        :meth:`intake` would, release the chunk and make the block ready; ``ok``: its
        values passed the check (else the block is checked here again and rejected with
        the message that names the sample); ``t_capture``: capture time of its last
        sample."""
        ring = self.ring
        start = ring.chunk()[0]
        B = self.block
        if start != self._next:
            self._blk_gap = True
        self._blk_start = start
        self._next = start + B
        self.slot.fill = B
        ring.release(B)
        if B > self._queue_max:
            self._queue_max = B
        self._make_ready(t_capture, now, checked=ok)

    def _make_ready(self, t_capture: float | None, now: float, checked: bool = False) -> None:
        """The block buffer is complete: validate it unless ``checked`` (a bad block is
        rejected here, alone) and mark it ready with its deadline."""
        if not checked and not self._block_ok():
            return
        self.slot.ready = True
        self.slot.t_capture = t_capture
        self.slot.t_ready = now
        self.slot.deadline = (now if t_capture is None else t_capture) + self.budget_s

    def _block_ok(self) -> bool:
        """Check the block buffer (finite, within the input limit); a bad block is
        rejected (:meth:`reject_block`) and False returned."""
        x = self.slot.block_buf[:self.slot.fill]
        ts, ch = 0, 1                   # the index of a sample, of a channel in x
        if not x.flags.c_contiguous:    # a view of the group's input rows: check (C, T)
            x, ts, ch = x.T, 1, 0
        try:
            reject_nonfinite(
                x, lambda: f"{self.name}: block {self._seq}",
                lambda b: f"channel {b[ch]}, sample {b[ts]} (stream sample "
                          f"{self._blk_start + b[ts]}); the stream's state unchanged",
                limit=self.limit, limit_text="the processor's input_limit")
        except RtamtInputError as e:
            self.reject_block(e, str(e), self.on_error == "stop")
            return False
        return True

    def publish(self, outputs, t_start: float, t_done: float, share: float, batch: int) -> None:
        """Worker thread, after the call: publish the block's result and account for it."""
        frames = self.slot.fill
        period = frames / self.fs
        if self._slow_until and t_start < self._slow_until:
            end = min(t_start + self._slow_factor * period, self._slow_until)
            while self.closing != "discard":
                rest = end - _perf()
                if rest <= 0:
                    break
                time.sleep(min(rest, 0.01))
            t_done = _perf()
        tc = self.slot.t_capture
        lat = 0.0 if tc is None else max(t_done - tc, 0.0)
        r = Result(self._seq, self._blk_start, frames, outputs, t_done, lat, t_done - t_start,
                   self._blk_gap, batch)
        i = self._n_proc % self._proc.shape[0]
        self._proc[i] = share
        self._lat[i] = lat
        self._audio[i] = period
        self._n_proc += 1
        self._batch_sum += batch
        if tc is not None and t_done > tc + self.budget_s:
            self._misses += 1
        self._seq += 1
        self._frames_done += frames
        self.slot.fill = 0
        self._blk_gap = False
        if self._keep:
            self._latest = r
            self._hist.append(r)
        if self._subs:             # for the delivery thread: never run in the worker
            q = self._dq
            q[self._dq_w % len(q)] = r
            self._dq_w += 1
            self.link.deliver(self)

    def deliver(self, slice_s: float) -> tuple:
        """Delivery thread: run the subscribers on the queued results, oldest first, until
        none is left or ``slice_s`` seconds have passed (a result is always delivered
        whole).  Returns ``(more queued, the queue was full)``: a full queue means the
        stream may be held (:meth:`wait_for_subscribers`) and must be released."""
        q = self._dq
        Q, end, freed = len(q), _perf() + slice_s, False
        while self._dq_r < self._dq_w:
            i = self._dq_r % Q
            r = q[i]
            t0 = _perf()
            for fn in self._subs:
                try:
                    fn(r)
                except Exception as e:  # noqa: BLE001 - isolated: the other subscribers run
                    self._subscriber_failed(fn, e, r.seq)
            t1 = _perf()
            self._sub_t[self._n_sub % self._sub_t.shape[0]] = t1 - t0
            self._n_sub += 1
            q[i] = r = None            # its output array may be reused
            freed |= self._dq_w - self._dq_r >= Q
            self._dq_r += 1
            if t1 > end:
                break
        return self._dq_r < self._dq_w, freed

    def wait_for_subscribers(self) -> bool:
        """Under the scheduler's lock, after the stream's call: True (the stream stays
        busy, held for its subscribers, counted) when its subscribers' queue is full."""
        if not self.subscribers_full():
            return False
        self.slot.held_by_subscribers = True
        self._sub_waits += 1
        return True

    def subscribers_full(self) -> bool:
        """Its subscribers' queue is full (the stream waits for them)."""
        return self._dq_w - self._dq_r >= len(self._dq)

    def _subscriber_failed(self, fn, e: Exception, seq: int) -> None:
        """Worker thread: subscriber ``fn`` raised ``e`` on the block just published:
        counted and kept as the stream's last error; the scheduler logs it once per
        (subscriber, exception type) and lists it in ``Scheduler.errors``."""
        self._sub_errors += 1
        who = getattr(fn, "__qualname__", None) or type(fn).__qualname__
        msg = (f"{self.name}: subscriber {who} raised {e!r} at block {seq}; the "
               "stream's other subscribers still run")
        self._last_error = msg
        self.link.report((self, id(fn), type(e)), msg)
