"""The client of a cluster: :class:`Cluster` places streams on workers, carries their
blocks in batches, moves them and recovers them when a worker dies.

::

    h.push(x) ─► the stream's client ring (preallocated; no lock; no remote call)
                        │  doorbell; the pump thread, gather_ms later:
                        ▼
    one message per worker: its streams' input since the last message, stacked
                        │  step(): push, process, reply
                        ▼
    one reply per worker: {stream: its results}, every K s {stream: snapshot}
                        │  the collector thread, in order (the pump's next message
                        │  may go out before: MAX_INFLIGHT cycles)
                        │
    h.latest() / h.history() / h.subscribe(fn) / h.stats()

**Replay buffer.**  A stream's client ring keeps its input from the position of its last
snapshot (the worker's periodic one, or the stream's start) to the newest push; the
oldest frames are overwritten only once the ring is full, which is then recorded.  When a
worker dies, each of its streams opens on a surviving worker from its last snapshot and
the ring's input since that snapshot is sent again: every model is a deterministic
function of its state and input, so the stream continues with the same bits.  Results of
blocks the client already had (recomputed by the replay) are not delivered again.  A
stream whose ring lost input since its snapshot is restored, continues at its oldest
kept frame, and is reported by name with the lost span (:class:`Recovery`).

**Move.**  :meth:`Cluster.move` runs between two messages: the source worker processes
what it was sent, returns the stream's snapshot (with its partial block) and closes it;
the target restores it before anything is pushed; the input pushed meanwhile waits in
the client ring and goes to the target with the next message.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..scheduler import Result, RtamtCapacityError
from .host import RESULTS
from .transport import (
    MAX_INFLIGHT,
    InProcessTransport,
    RtamtClusterError,
    WorkerLost,
    check_reachable,
)

__all__ = ["Cluster", "RemoteStream", "Recovery", "ClusterStreamStats", "Worker"]

_log = logging.getLogger("rtamt.cluster")
_perf = time.perf_counter


#: chunk records a stream keeps for the client-side latency (push times of recent chunks)
_CHUNKS = 1024


@dataclass
class Worker:
    """One worker: index, the transport's handle, its threads, whether it is alive and
    takes new streams."""
    index: int
    ref: object
    threads: int
    node: str | None = None
    alive: bool = True
    accepting: bool = True
    cycle: int = 0          # number of the next step message (the host keeps their order)

    def __repr__(self):
        state = "alive" if self.alive else "dead"
        return f"<rtamt cluster worker {self.index} ({self.threads} threads, {state})>"


@dataclass
class Recovery:
    """What one worker's death did: ``worker`` (index), ``streams`` (names restored on
    survivors, exactly), ``inexact`` ({name: (first lost frame, first kept frame)}:
    restored, but input between those frames was no longer in the replay buffer),
    ``unplaced`` (names no survivor admitted: they stop), ``seconds`` (from the
    detection of the death until every restored stream had processed its replayed
    input)."""
    worker: int
    streams: list = field(default_factory=list)
    inexact: dict = field(default_factory=dict)
    unplaced: list = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class ClusterStreamStats:
    """A remote stream's figures: the client's (frames pushed, dropped because the
    client ring was full, sent, blocks received; latency in ms from a block's last
    sample's push to its result at the client, p50/p99/max; moves and recoveries, lost
    spans) and ``remote``, the worker's own :class:`~rtamt.scheduler.StreamStats`."""
    name: str
    worker: int
    frames_pushed: int
    dropped_frames: int
    frames_sent: int
    blocks: int
    latency_p50_ms: float
    latency_p99_ms: float
    latency_max_ms: float
    moves: int
    recoveries: int
    lost: list
    remote: object = None

    def line(self) -> str:
        s = (f"{self.name} on worker {self.worker}: blocks {self.blocks}  latency p50/p99/"
             f"max {self.latency_p50_ms:.2f}/{self.latency_p99_ms:.2f}/"
             f"{self.latency_max_ms:.2f} ms  pushed {self.frames_pushed} fr  dropped "
             f"{self.dropped_frames}  moves {self.moves}  recoveries {self.recoveries}")
        if self.lost:
            s += f"  LOST {self.lost}"
        return s


class RemoteStream:
    """A stream on a cluster worker, with a local stream's API: :meth:`push` (a copy into
    the client ring: no lock, no remote call), :meth:`latest`, :meth:`history`,
    :meth:`subscribe`, :meth:`snapshot`, :meth:`restore`, :meth:`stats`, :meth:`close`.

    ``worker``: index of the worker it runs on now; ``lost``: the input spans
    ``(first frame, end frame)`` a recovery could not replay."""

    def __init__(self, cluster, sid: int, name: str, spec: dict, block: int,
                 budget_ms: float, buffer_s: float, history: int):
        self.cluster, self.sid, self.name, self.spec = cluster, sid, name, spec
        self.fs = float(spec["fs"])
        self.channels = int(spec.get("channels", 1))
        self.dtype = np.dtype(spec.get("dtype", "float64"))
        self.block = int(block)
        self.budget_ms = float(budget_ms)
        cap = max(int(buffer_s * self.fs), 4 * self.block)
        self._ring = np.zeros((cap, self.channels), self.dtype)
        self.capacity = cap
        # absolute frame counters (the stream's own positions, as on its worker)
        self.w = 0                # pushed (producer)
        self.floor = 0            # oldest frame still in the ring (producer)
        self.sent = 0             # sent to the worker (pump)
        self.snap_pos = 0         # position of `snap` (pump)
        self.snap: dict | None = None     # last snapshot (None: the stream's start)
        self.dropped = 0
        self.worker: int = -1
        self.closed = False
        self.error: str | None = None
        self.lost: list = []
        self.moves = self.recoveries = 0
        self._next_seq = 0        # results before this seq were delivered already
        self._gap = False
        self._hist: list = []
        self._keep = max(1, int(history))
        self._latest: Result | None = None
        self._subs: list = []
        self._ct = np.zeros(_CHUNKS)                 # push time of chunk i % _CHUNKS
        self._ce = np.zeros(_CHUNKS, np.int64)       # its end frame
        self._nc = 0
        self._busy = 0            # push count × 2, odd while a push runs
        self._cur = 0
        self._lat = np.zeros(4096)
        self._n_lat = 0

    def __repr__(self):
        return (f"<rtamt RemoteStream {self.name!r} on worker {self.worker} block "
                f"{self.block} budget {self.budget_ms:g} ms{' closed' if self.closed else ''}>")

    # ------------------------------------------------------------------ producer
    def push(self, x, *, wait: bool = False, timeout: float | None = None) -> bool:
        """Queue a chunk ``(frames, channels)`` (or ``(frames,)``) for the worker: one copy
        into the client ring.  ``wait=False`` never blocks: a chunk that does not fit in
        the part of the ring not yet sent is dropped whole (counted) and False returned;
        ``wait=True`` waits for the pump to send (only ``timeout`` ends the wait)."""
        if self.closed or self.error is not None:
            return False
        x = np.asarray(x)
        if x.dtype not in (np.float32, np.float64):
            from ..engine.backend import host_samples
            x = host_samples(x, f"stream {self.name!r}")
        if x.ndim == 1:
            x = x[:, None]
        if x.ndim != 2 or x.shape[1] != self.channels:
            from ..engine.contract import RtamtInputError
            raise RtamtInputError(f"stream {self.name!r}: chunk of shape {x.shape}, expected "
                                  f"(frames, {self.channels})")
        return self._put(x, wait, timeout)

    def _put(self, x: np.ndarray, wait: bool, timeout: float | None) -> bool:
        n, cap = x.shape[0], self.capacity
        if n > cap // 2:
            if not wait:
                self.dropped += n
                return False
            return all(self._put(x[i:i + cap // 2], True, timeout)
                       for i in range(0, n, cap // 2))
        end = None if timeout is None else _perf() + timeout
        while True:
            self._busy += 1           # odd from the room check to the write (_replay_from)
            if self.w + n - self.sent <= cap:
                break
            self._busy += 1
            if not wait or self.closed or not self.cluster.running \
                    or (end is not None and _perf() > end):
                self.dropped += n
                return False
            time.sleep(0.0005)
        w = self.w
        if w + n - self.floor > cap:
            self.floor = w + n - cap
        i = w % cap
        k = min(n, cap - i)
        self._ring[i:i + k] = x[:k]
        self._ring[:n - k] = x[k:]
        c = self._nc % _CHUNKS
        self._ct[c] = _perf()
        self._ce[c] = w + n
        self._nc += 1
        self.w = w + n
        self._busy += 1
        self.cluster.ring()
        return True

    def _frames(self, a: int, b: int) -> np.ndarray:
        """Frames ``[a, b)`` of the ring (a copy)."""
        cap = self.capacity
        i, n = a % cap, b - a
        k = min(n, cap - i)
        return np.concatenate([self._ring[i:i + k], self._ring[:n - k]]) if k < n \
            else self._ring[i:i + n].copy()

    def _replay_from(self) -> int:
        """Pump, after a worker died: set the next frame to send to the oldest frame
        since the last snapshot that the ring still holds, and return it.  Once ``sent``
        is lowered no new push can overwrite frames from there; a push already past its
        room check finishes first (``_busy`` odd) and may move ``floor`` on."""
        while True:
            f = self.sent = max(self.snap_pos, self.floor)
            b = self._busy
            while b % 2 and self._busy == b:
                time.sleep(0.0001)
            if max(self.snap_pos, self.floor) == f:
                return f

    def _take_into(self, out: np.ndarray, w: int) -> None:
        """Pump: frames ``[sent, w)`` into ``out`` (``(w - sent, channels)``); mark them
        sent."""
        cap = self.capacity
        i, n = self.sent % cap, w - self.sent
        k = min(n, cap - i)
        out[:k] = self._ring[i:i + k]
        out[k:] = self._ring[:n - k]
        self.sent = w

    # ------------------------------------------------------------------ results
    def _deliver(self, items: list, t_recv: float) -> None:
        """Pump: results from the worker (duplicates of delivered blocks dropped)."""
        for seq, start, frames, outs, gap, _lat, proc_s in items:
            if seq < self._next_seq:
                continue
            self._next_seq = seq + 1
            end = start + frames
            lat = self._latency(end, t_recv)
            r = Result(seq, start, frames, outs, t_recv, lat, proc_s, gap or self._gap, 1)
            self._gap = False
            self._latest = r
            self._hist.append(r)
            if len(self._hist) > self._keep:
                del self._hist[0]
            for fn in self._subs:
                try:
                    fn(r)
                except Exception as e:  # noqa: BLE001 - reported, the others go on
                    self.cluster._report(f"stream {self.name!r}: subscriber failed: {e!r}")

    def _latency(self, end: int, t_recv: float) -> float:
        """Seconds from the capture of frame ``end - 1`` (its chunk's push time less the
        frames after it in the chunk) to ``t_recv``; NaN when the chunk's record is gone."""
        nc = self._nc
        while self._cur < nc and self._ce[self._cur % _CHUNKS] < end:
            self._cur += 1
        if self._cur >= nc or nc - self._cur > _CHUNKS:
            return float("nan")
        c = self._cur % _CHUNKS
        lat = t_recv - self._ct[c] + (self._ce[c] - end) / self.fs
        self._lat[self._n_lat % self._lat.shape[0]] = lat
        self._n_lat += 1
        return lat

    def latest(self) -> Result | None:
        """The most recent result (``outputs`` empty with ``results='none'``)."""
        return self._latest

    def history(self) -> list[Result]:
        """Recent results, oldest first (``history`` of them)."""
        return list(self._hist)

    def subscribe(self, fn) -> None:
        """Call ``fn(result)`` for each block, in order, in the client's collector thread
        (a slow subscriber delays every stream's results: hand long work off; a
        subscriber must not call the cluster's methods)."""
        self._subs.append(fn)

    # ------------------------------------------------------------------ state
    def snapshot(self) -> dict:
        """The stream's snapshot after everything pushed so far was processed (the local
        stream's format: an offline model or a local stream restores it)."""
        return self.cluster._snapshot(self)

    def restore(self, snap: dict) -> None:
        """Load a snapshot (after everything pushed so far was processed); before the
        first push the stream continues the snapshot's stream (its ``seq`` and frames)."""
        self.cluster._restore(self, snap)

    def stats(self) -> ClusterStreamStats:
        """The client's figures and the worker's :class:`~rtamt.scheduler.StreamStats`."""
        k = min(self._n_lat, self._lat.shape[0])
        lat = self._lat[:k]
        lat = lat[np.isfinite(lat)]

        def pct(q):
            return 1e3 * float(np.percentile(lat, q)) if lat.size else 0.0
        remote = None if self.closed else self.cluster._remote_stats(self)
        return ClusterStreamStats(self.name, self.worker, self.w, self.dropped, self.sent,
                                  self._next_seq, pct(50), pct(99),
                                  1e3 * float(lat.max()) if lat.size else 0.0,
                                  self.moves, self.recoveries, list(self.lost), remote)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Send what was pushed and wait for its results (see :meth:`Cluster.flush`)."""
        return self.cluster.flush(timeout)

    def close(self, policy: str = "drain", timeout: float = 30.0) -> None:
        """Send what was pushed, close the stream on its worker (``'drain'`` processes
        the partial last block too) and deliver its last results."""
        self.cluster._close(self, policy, timeout)


class Cluster:
    """Live streams on a Ray cluster (see the module docstring).

    address          : the head's address (``'host:port'``, as ``ray start --head``
                       prints; ``'auto'``: the cluster this machine joined).  An address
                       where nothing answers raises :class:`RtamtClusterError` within
                       ``connect_timeout_s``.  Use :meth:`local` for a cluster on this
                       machine.
    threads          : worker threads per worker (default: the node's CPUs); one worker
                       per node.
    snapshot_every_s : every worker returns its streams' snapshots this often (K).
    buffer_s         : each stream's client ring, seconds of input: what was pushed and
                       not yet sent, and the replay since the last snapshot (a recovery
                       is exact while ``buffer_s`` > K + the time of one message).
    gather_ms        : the pump sends once a push rang its doorbell and this long passed
                       (the other streams' pushes of the same period join the message;
                       default 1 ms).
    call_timeout_s   : longest wait for a live worker's reply.
    open_timeout_s   : longest wait for a worker to open a stream (a design's first stream
                       there loads or compiles its kernels: 3 s from numba's disk cache,
                       30-60 s compiling on a loaded 2-core machine).
    start_timeout_s  : longest wait for the workers' processes to start.
    scheduler        : keyword arguments of every worker's
                       :class:`~rtamt.scheduler.Scheduler` (``realtime``, ``max_load``...).
    """

    def __init__(self, address: str | None = "auto", *, threads: int | None = None,
                 snapshot_every_s: float = 5.0, buffer_s: float | None = None,
                 gather_ms: float = 1.0, connect_timeout_s: float = 10.0,
                 call_timeout_s: float = 60.0, open_timeout_s: float = 300.0,
                 start_timeout_s: float = 180.0,
                 scheduler: dict | None = None, transport=None, _workers=None,
                 _owns_ray: bool = False):
        self.snapshot_every = float(snapshot_every_s)
        self.buffer_s = float(buffer_s) if buffer_s else 2 * self.snapshot_every + 2.0
        self.gather = float(gather_ms) / 1e3
        self._bell = threading.BoundedSemaphore(1)
        self._bell.acquire()
        self.call_timeout = float(call_timeout_s)
        self.open_timeout = float(open_timeout_s)
        self._owns_ray = _owns_ray
        host_kw = {"snapshot_every_s": self.snapshot_every, "scheduler": scheduler or {}}
        if transport is None:
            transport, nodes = _connect(address, connect_timeout_s, threads)
        else:
            nodes = _workers or [(None, threads or 1)]
        self.transport = transport
        self.workers = [Worker(i, transport.start_worker(t, host_kw, node), t, node)
                        for i, (node, t) in enumerate(nodes)]
        self._lock = threading.RLock()
        self._rx = threading.Condition()     # the cycles in flight and dead workers
        self._inflight: collections.deque = collections.deque()
        self._lost_pending: set = set()
        self._streams: dict[int, RemoteStream] = {}
        self._sid = 0
        self.recoveries: list[Recovery] = []
        self.errors: list[str] = []
        self.running = True
        try:
            self._call_all("pid", timeout=start_timeout_s)
        except BaseException:
            self.close()
            raise
        self._pump = threading.Thread(target=self._run, name="rtamt-cluster-pump",
                                      daemon=True)
        self._collector = threading.Thread(target=self._collect, daemon=True,
                                           name="rtamt-cluster-collector")
        self._pump.start()
        self._collector.start()

    @classmethod
    def local(cls, workers: int = 2, threads: int = 1, *, ray_init: dict | None = None,
              **kw) -> Cluster:
        """A cluster on this machine: starts a local Ray instance (one node) with
        ``workers × threads`` CPUs and ``workers`` workers, each a separate process with
        ``threads`` scheduler threads; :meth:`close` shuts the instance down."""
        ray = _ray()
        if ray.is_initialized():
            raise RtamtClusterError("Cluster.local: Ray is already initialized in this "
                                    "process; use Cluster(address=...) or ray.shutdown()")
        # address='local': a new instance even where `ray start` left its address behind
        opts = dict(address="local", num_cpus=workers * threads, include_dashboard=False,
                    log_to_driver=False, object_store_memory=256 * 2**20)
        opts.update(ray_init or {})
        ray.init(**opts)
        try:
            from .transport import RayTransport
            return cls(None, transport=RayTransport(), _workers=[(None, threads)] * workers,
                       _owns_ray=True, **kw)
        except BaseException:
            ray.shutdown()
            raise

    @classmethod
    def in_process(cls, workers: int = 2, threads: int = 1, **kw) -> Cluster:
        """The cluster's logic with every worker in this process (no Ray): for tests and
        trials of placement, moves and recovery on one machine."""
        return cls(None, transport=InProcessTransport(), _workers=[(None, threads)] * workers,
                   **kw)

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        self.close()

    def __repr__(self):
        alive = sum(w.alive for w in self.workers)
        return (f"<rtamt Cluster: {alive}/{len(self.workers)} workers alive, "
                f"{len(self._streams)} streams>")

    # ------------------------------------------------------------------ helpers
    def _report(self, msg: str) -> None:
        if msg not in self.errors:
            self.errors.append(msg)
            _log.warning("rtamt cluster: %s", msg)

    def _call(self, w: Worker, method: str, *args, timeout: float | None = None):
        """One message to worker ``w`` and its reply; :class:`WorkerLost` if it died."""
        vals, lost = self.transport.get(
            {w.index: self.transport.call(w.ref, method, *args)},
            self.call_timeout if timeout is None else timeout)
        if lost:
            raise WorkerLost(f"worker {w.index} died")
        return vals[w.index]

    def _call_all(self, method: str, timeout: float) -> dict:
        live = [w for w in self.workers if w.alive]
        vals, lost = self.transport.get(
            {w.index: self.transport.call(w.ref, method) for w in live}, timeout)
        if lost:
            raise RtamtClusterError(f"workers {sorted(lost)} died while starting")
        return vals

    def load(self) -> dict:
        """``{worker index: predicted busy fraction}`` of the live workers."""
        with self._lock:
            return self._call_all("load", self.call_timeout)

    @property
    def streams(self) -> list[RemoteStream]:
        return list(self._streams.values())

    # ------------------------------------------------------------------ opening
    def open(self, model, fs: float, block: int | None = None, *,
             budget_ms: float | None = None, name: str | None = None, dtype="float64",
             channels: int = 1, model_kwargs: dict | None = None, worker: int | None = None,
             results: str = "all", history: int = 1, **options) -> RemoteStream:
        """Open a stream on a worker whose scheduler admits it (the least loaded first;
        ``worker=`` forces one); arguments as :meth:`rtamt.Scheduler.open` (options as
        keywords).  ``results='none'``: results carry no outputs (only which block was
        processed and when).  Raises :class:`~rtamt.scheduler.RtamtCapacityError` naming
        each worker's refusal when none admits it."""
        if results not in RESULTS:
            raise ValueError(f"results must be one of {RESULTS}, got {results!r}")
        with self._lock:
            self._sid += 1
            sid = self._sid
            nm = name or f"{model if isinstance(model, str) else 'stream'}-{sid}"
            if any(s.name == nm for s in self._streams.values()):
                raise ValueError(f"a stream named {nm!r} is open on this cluster")
            spec = dict(model=model, fs=float(fs), block=block, budget_ms=budget_ms, name=nm,
                        dtype=str(np.dtype(dtype)), channels=int(channels),
                        model_kwargs=model_kwargs, results=results, **options)
            cands = [self.workers[worker]] if worker is not None else self._by_load()
            w, info = self._place(sid, spec, None, cands)
            spec["block"] = info["block"]
            s = RemoteStream(self, sid, nm, spec, info["block"], info["budget_ms"],
                             self.buffer_s, history)
            s.worker = w.index
            self._streams[sid] = s
            return s

    def _by_load(self, exclude: int | None = None) -> list[Worker]:
        live = [w for w in self.workers if w.alive and w.accepting and w.index != exclude]
        vals, lost = self.transport.get(
            {w.index: self.transport.call(w.ref, "load") for w in live}, self.call_timeout)
        for i in lost:
            self._recover(self.workers[i])
        return sorted((w for w in live if w.index in vals), key=lambda w: vals[w.index])

    def _place(self, sid: int, spec: dict, snap, cands: list) -> tuple:
        """Open stream ``sid`` on the first of ``cands`` that admits it."""
        refusals = []
        for w in cands:
            try:
                verdict, info = self._call(w, "open", sid, spec, snap,
                                           timeout=self.open_timeout)
            except WorkerLost:
                self._recover(w)
                continue
            if verdict == "ok":
                return w, info
            refusals.append(f"worker {w.index}: {info}")
        raise RtamtCapacityError(
            f"no worker admits stream {spec['name']!r} ({spec['model']}, {spec['fs']:g} Hz, "
            f"block {spec['block']}, budget {spec['budget_ms']} ms): "
            + ("; ".join(refusals) if refusals else "no live worker takes new streams"))

    # ------------------------------------------------------------------ transport
    def _run(self) -> None:
        """The pump thread: woken by a push's doorbell, it waits ``gather_ms`` for the
        other streams' pushes of the same period, then sends one message per worker."""
        while self.running:
            self._bell.acquire(timeout=0.05)
            if self.gather > 0:
                time.sleep(self.gather)
            with self._rx:               # at most MAX_INFLIGHT cycles on their way
                while len(self._inflight) >= MAX_INFLIGHT and self.running:
                    self._rx.wait(0.05)
            with self._lock:
                if not self.running:
                    break
                try:
                    self._cycle()
                except Exception as e:  # noqa: BLE001 - kept, the pump goes on
                    self._report(f"transport cycle failed: {e!r}")

    def ring(self) -> None:
        """A push's doorbell: wake the pump (no lock; never blocks)."""
        try:
            self._bell.release()
        except ValueError:  # already rung, not yet answered
            pass

    def _cycle(self) -> bool:
        """Under the lock: one message to each worker with input for it (the input of all
        its streams), not waiting for the replies (the collector thread takes them, in
        order: a cycle may start while the last one's replies are on their way); the
        streams of a worker the collector found dead are recovered first.  Returns
        whether anything was sent."""
        if self._lost_pending:
            self._quiesce()
        # {worker: {(frames, channels, dtype): [streams]}}: one stacked array per group
        groups: dict[int, dict] = {}
        for s in self._streams.values():
            if s.error is None and s.w > s.sent:
                w = s.w                      # a push may move it on: take up to here
                groups.setdefault(s.worker, {}).setdefault(
                    (w - s.sent, s.channels, s.dtype), []).append((s, w))
        if not groups:
            return False
        batches = {}
        for i, g in groups.items():
            batches[i] = msg = []
            for (n, ch, dt), members in g.items():
                xs = np.empty((len(members), n, ch), dt)
                for j, (s, w) in enumerate(members):
                    s._take_into(xs[j], w)
                msg.append(([s.sid for s, _ in members], xs))
        futs = {}
        for i, b in batches.items():
            w = self.workers[i]
            futs[i] = self.transport.call(w.ref, "step", b, self.call_timeout, w.cycle)
            w.cycle += 1
        with self._rx:
            self._inflight.append(futs)
            self._rx.notify_all()
        return True

    def _sync(self) -> bool:
        """Under the lock: :meth:`_cycle`, then wait until every reply is in
        (:meth:`_quiesce`).  Returns whether anything was sent."""
        sent = self._cycle()
        self._quiesce()
        return sent

    def _collect(self) -> None:
        """The collector thread: the replies of each cycle in order, absorbed (results
        to the streams, snapshots kept); a dead worker is noted for the pump."""
        while True:
            with self._rx:
                while not self._inflight:
                    if not self.running:
                        return
                    self._rx.wait(0.05)
                futs = self._inflight[0]
            lost: set = set()
            try:
                vals, lost = self.transport.get(futs, self.call_timeout)
                t = _perf()
                for reply in vals.values():
                    self._absorb(reply, t)
            except Exception as e:  # noqa: BLE001 - kept, the collector goes on
                self._report(f"transport reply failed: {e!r}")
            with self._rx:
                self._inflight.popleft()
                self._lost_pending |= lost
                self._rx.notify_all()
            if lost:
                self.ring()

    def _drain_replies(self) -> None:
        """Wait until every message sent has its reply absorbed."""
        with self._rx:
            while self._inflight:
                self._rx.wait(0.05)

    def _quiesce(self) -> None:
        """Under the lock: wait for every reply, then recover the workers found dead."""
        self._drain_replies()
        with self._rx:
            lost, self._lost_pending = self._lost_pending, set()
        for i in sorted(lost):
            if self.workers[i].alive:
                self._recover(self.workers[i])

    def _absorb(self, reply: dict, t: float) -> None:
        for sid, items in reply["results"].items():
            s = self._streams.get(sid)
            if s is not None:
                s._deliver(items, t)
        for sid, snap in (reply["snapshots"] or {}).items():
            s = self._streams.get(sid)
            if s is not None:
                s.snap, s.snap_pos = snap, int(snap["position"])

    def flush(self, timeout: float = 30.0) -> bool:
        """Send everything pushed so far and wait until its results are in (the partial
        last block of each stream stays pending).  False if pushes kept coming for
        ``timeout`` seconds."""
        end = _perf() + timeout
        while _perf() < end:
            with self._lock:
                if not self._sync():
                    return True
        return False

    # ------------------------------------------------------------------ state, moves
    def _snapshot(self, s: RemoteStream) -> dict:
        with self._lock:
            self._sync()
            return self._call(self.workers[s.worker], "snapshot", s.sid)

    def _restore(self, s: RemoteStream, snap: dict) -> None:
        with self._lock:
            self._sync()
            w = self.workers[s.worker]
            fresh = s.w == 0
            s._deliver(self._call(w, "detach", s.sid)[1], _perf())
            self._open_on(s, w, snap)
            if fresh:                # the stream continues the snapshot's stream
                s.w = s.sent = s.floor = int(snap["position"])
                s._next_seq = int(snap["seq"])
                s._ce[:] = s.w
            s.snap, s.snap_pos = snap, int(snap["position"])

    def _open_on(self, s: RemoteStream, w: Worker, snap) -> None:
        verdict, info = self._call(w, "open", s.sid, s.spec, snap, timeout=self.open_timeout)
        if verdict != "ok":
            raise RtamtCapacityError(f"worker {w.index}: {info}")
        s.worker = w.index

    def move(self, s: RemoteStream, worker: int) -> None:
        """Move stream ``s`` to worker ``worker`` between two messages: the source
        processes what it was sent and hands over a snapshot with the partial block; the
        target restores it; what was pushed meanwhile goes to the target.  No block is
        lost or repeated; the results are those of a stream that never moved.  Raises
        :class:`~rtamt.scheduler.RtamtCapacityError` (the stream stays where it was) when
        the target does not admit it."""
        with self._lock:
            self._move(s, self.workers[worker])

    def _move(self, s: RemoteStream, target: Worker) -> None:
        src = self.workers[s.worker]
        if target is src:
            return
        self._sync()
        snap, rest = self._call(src, "detach", s.sid)
        s._deliver(rest, _perf())
        try:
            self._open_on(s, target, snap)
        except RtamtCapacityError:
            self._open_on(s, src, snap)          # back where it was
            raise
        s.snap, s.snap_pos = snap, int(snap["position"])
        s.moves += 1

    def drain(self, worker: int) -> dict:
        """Move every stream off worker ``worker`` (each to the least loaded worker that
        admits it) and take no new streams there.  Returns ``{stream name: new worker}``."""
        with self._lock:
            w = self.workers[worker]
            w.accepting = False
            moved = {}
            for s in [s for s in self._streams.values() if s.worker == worker]:
                for t in self._by_load(exclude=worker):
                    try:
                        self._move(s, t)
                    except RtamtCapacityError:
                        continue
                    moved[s.name] = t.index
                    break
                else:
                    raise RtamtCapacityError(f"drain: no worker admits stream {s.name!r}")
            return moved

    # ------------------------------------------------------------------ recovery
    def kill_worker(self, worker: int) -> None:
        """Test hook: kill worker ``worker``'s process (SIGKILL; in process: its host is
        closed).  The next message to it finds it dead and its streams are recovered."""
        self.transport.kill(self.workers[worker].ref)

    def _recover(self, dead: Worker) -> Recovery:
        """Under the lock: worker ``dead`` died: open each of its streams on a survivor
        from its last snapshot and replay its input since then."""
        t0 = _perf()
        self._drain_replies()
        dead.alive = False
        rec = Recovery(dead.index)
        victims = [s for s in self._streams.values() if s.worker == dead.index]
        for s in victims:
            snap, start = s.snap, s.snap_pos
            floor = s._replay_from()
            if floor > start:                     # the ring no longer holds [start, floor)
                rec.inexact[s.name] = (start, floor)
                s.lost.append((start, floor))
                _log.warning("rtamt cluster: stream %r lost frames %d-%d in recovery",
                             s.name, start, floor)
                snap = _continue_at(snap, floor, s._next_seq)
                start = floor
                s._gap = True
            placed = False
            for w in [w for w in self.workers if w.alive and w.accepting]:
                try:
                    self._open_on(s, w, snap)
                except (RtamtCapacityError, WorkerLost):
                    continue
                placed = True
                break
            if not placed:
                s.error = f"worker {dead.index} died and no surviving worker admits it"
                rec.unplaced.append(s.name)
                self._report(f"stream {s.name!r}: {s.error}")
                continue
            s.sent = start                        # the next message replays from here
            s.recoveries += 1
            if s.name not in rec.inexact:
                rec.streams.append(s.name)
        self.recoveries.append(rec)
        self._sync()                              # the replay
        rec.seconds = _perf() - t0
        return rec

    # ------------------------------------------------------------------ stats, closing
    def _remote_stats(self, s: RemoteStream):
        with self._lock:
            try:
                return self._call(self.workers[s.worker], "stats", s.sid)
            except (WorkerLost, KeyError):
                return None

    def _close(self, s: RemoteStream, policy: str, timeout: float) -> None:
        with self._lock:
            if s.closed:
                return
            if s.error is None:
                self._sync()
                try:
                    s._deliver(self._call(self.workers[s.worker], "close", s.sid, policy,
                                          timeout), _perf())
                except WorkerLost:
                    self._recover(self.workers[s.worker])
                    s._deliver(self._call(self.workers[s.worker], "close", s.sid, policy,
                                          timeout), _perf())
            s.closed = True
            self._streams.pop(s.sid, None)

    def close(self) -> None:
        """Close every stream (discarding their partial blocks), stop the workers and,
        for :meth:`local`, the Ray instance."""
        self.running = False
        for t in (getattr(self, "_pump", None), getattr(self, "_collector", None)):
            if t is not None:
                t.join(10)
        with self._lock:
            for s in list(self._streams.values()):
                s.closed = True
            self._streams.clear()
            for w in self.workers:
                if w.alive:
                    try:
                        self.transport.stop_worker(w.ref)
                    except Exception:  # noqa: BLE001 - stopping anyway
                        pass
                    w.alive = False
            self.transport.shutdown()
        if self._owns_ray:
            self._owns_ray = False
            _ray().shutdown()


def _continue_at(snap: dict | None, pos: int, seq: int) -> dict:
    """A snapshot whose stream continues at frame ``pos`` as block ``seq`` (its partial
    block dropped): for a recovery whose input before ``pos`` is lost.  ``None`` (the
    stream's start) gives the initial state there (:meth:`StreamHost.open` makes it)."""
    if snap is None:
        return {"at": int(pos), "seq": int(seq)}
    out = dict(snap, seq=int(seq))
    out["pending"] = np.zeros((0,) + np.asarray(snap["pending"]).shape[1:],
                              np.asarray(snap["pending"]).dtype)
    out["position"] = out["pending_start"] = int(pos)
    return out


def _ray():
    try:
        import ray
    except ImportError:
        raise ImportError("rtamt.cluster needs Ray: pip install 'rtamt[cluster]'") from None
    return ray


def _connect(address, timeout: float, threads: int | None):
    """Connect to the cluster at ``address``: ``(RayTransport, [(node id, threads)])``,
    one worker per alive node with CPUs."""
    ray = _ray()
    from .transport import RayTransport
    if address not in (None, "auto"):
        check_reachable(address, timeout)
    if not ray.is_initialized():
        ray.init(address=address or "auto", log_to_driver=False)
    nodes = [(n["NodeID"], int(threads or n["Resources"].get("CPU", 0)))
             for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU", 0) >= 1]
    if not nodes:
        raise RtamtClusterError("the Ray cluster has no alive node with a CPU")
    return RayTransport(), nodes

