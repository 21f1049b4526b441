"""Many streams on :class:`rtamt.scheduler.Scheduler` (``python -m latency_bench --streams N``).

Three measurements, all with a fresh scheduler each:

* :func:`run_trial` (``--streams N``): ``N`` streams of one design at real-time pace for
  ``--seconds`` after ``--warmup-seconds``.  One source thread pushes one ``(block, N ×
  channels)`` float32 chunk per block period through one :class:`~rtamt.scheduler.FanOut`
  (``--source fanout``: the batched intake, one copy into the streams' ring bank per
  push; stream ``c`` gets its columns), or one thread per stream paces its own ``(block,
  channels)`` chunks (``--source per-stream``, phases spread over the period).  Every
  stream gets its own 70 dB SPL noise (a loop of at most :data:`LOOP_SECONDS` and
  :data:`NOISE_VALUES` values in all); each stream's input ring holds
  :data:`RING_SECONDS`.  A chunk's capture time is its *scheduled*
  time (like an audio device's ADC clock): a source thread that wakes late (GIL, load)
  pushes with a larger input latency, so its lateness counts in the latency.  Only blocks
  whose first frame lies after the warm-up are measured (``Result.start``, which counts
  dropped frames, so a drop cannot shift the window); the warm-up is reported apart.
* :func:`find_capacity` (``--find-capacity``): ramps ``N`` by doubling from ``--streams``
  (default 1) until a trial misses or drops, then bisects; a trial passes with 0 misses and
  0 drops.  ``--max-streams`` caps the search.
* :func:`threads_scaling` (``--threads-scaling``): throughput, not pacing: ``N`` streams
  × ``K`` blocks (``--seconds`` of audio each) are queued before the workers start, then
  timed until the last block is published, on 1 worker thread and on ``--threads``
  (default: every core, at least 2); the ratio of stream-blocks per second.  The same
  work is also timed on the models alone (``model(batch)`` in one plain thread per core,
  no scheduler) as the ceiling the scheduler's threads could reach.

Per stream, from ``Result`` (subscribed): latency p50 / p99 / max (capture of the block's
last sample to publication), misses (latency over ``--budget-ms``), drops (frames pushed in
the measured window that were never processed: dropped by a full ring, skipped by the
drop-oldest policy, or in a rejected block), mean batch size.  CPU: process CPU time
(``time.process_time``) over the measured wall time, in cores and per core.
"""
from __future__ import annotations

import itertools
import math
import os
import sys
import threading
import time

import numpy as np

_perf = time.perf_counter
#: noise loop per stream, seconds (the source cycles through it) ...
LOOP_SECONDS = 1.0
#: ... and at most this many values for all streams together (at least one block each)
NOISE_VALUES = 1 << 26
#: input ring of every stream in a paced trial, seconds (a backlog that long misses anyway)
RING_SECONDS = 0.5
LEVEL_DB = 70.0


# ---------------------------------------------------------------------------- helpers
def _noise(n_frames: int, cols: int, seed: int) -> np.ndarray:
    from rtamt.signals import rms_for_spl

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_frames, cols), dtype=np.float32)
    x *= np.float32(rms_for_spl(LEVEL_DB))
    return x


def _placement(args) -> dict:
    """The scheduler's ``backend`` / ``device`` for ``--device`` / ``--backend``: numba on
    the cpu by default, Triton on cuda (or on the cpu, in Triton's interpreter)."""
    device = getattr(args, "device", "cpu")
    backend = getattr(args, "backend", None) or ("triton" if device == "cuda" else "numba")
    return {} if backend == "numba" else {"backend": backend, "device": device}


def _open(sched, args, n: int, **kw) -> tuple[list, float, float]:
    """Open ``n`` streams; returns (streams, seconds for all, seconds for the first)."""
    model_kw = {} if args.config is None else {"config": args.config}
    if getattr(args, "history", None) is not None:
        kw.setdefault("history", args.history)
    if getattr(args, "backend", None) == "triton" and getattr(args, "device", "cpu") == "cpu":
        kw.setdefault("measure", False)     # Triton's interpreter: a check, not a timing
    streams, first = [], 0.0
    t0 = _perf()
    for i in range(n):
        streams.append(sched.open(args.model, args.fs, args.block, budget_ms=args.budget_ms,
                                  dtype=args.dtype, channels=args.channels,
                                  admission="best-effort", model_kwargs=model_kw,
                                  name=f"{args.model}-{i}", **kw))
        if i == 0:
            first = _perf() - t0
    return streams, _perf() - t0, first


def _pusher(streams: list, ch: int):
    """``push(chunk, in_latency)`` feeding column group ``c`` (``ch`` columns) of a
    ``(block, n × ch)`` chunk to ``streams[c]``: one :class:`~rtamt.scheduler.FanOut` push
    (the batched intake: one copy for all streams)."""
    from rtamt.scheduler import FanOut

    fan = FanOut(streams)
    return lambda chunk, lat: fan.push(chunk, 0, lat)


class _Source(threading.Thread):
    """Pushes ``n_blocks`` chunks of ``buf`` (cycled), chunk ``k`` at ``t0 + (k+1) · period``
    (the capture time of its last frame), with the input latency measured from that
    schedule.  ``late[k]``: how late the push started (s)."""

    def __init__(self, push, buf: np.ndarray, block: int, period: float, n_blocks: int,
                 t0: float, name: str, realtime: int | None = None):
        super().__init__(name=name, daemon=True)
        self.push, self.buf, self.block, self.period = push, buf, block, period
        self.n_blocks, self.t0, self.realtime = n_blocks, t0, realtime
        self.late = np.zeros(n_blocks)
        self.error: BaseException | None = None

    def run(self):
        if self.realtime is not None:      # an audio device's thread: SCHED_FIFO
            from rtamt.engine.realtime import request_realtime
            request_realtime(self.realtime)
        buf, B, P, t0 = self.buf, self.block, self.period, self.t0
        loop = buf.shape[0] // B
        late = self.late
        try:
            for k in range(self.n_blocks):
                tk = t0 + (k + 1) * P
                d = tk - _perf()
                if d > 0:
                    time.sleep(d)
                now = _perf()
                late[k] = now - tk
                j = (k % loop) * B
                self.push(buf[j:j + B], now - tk + P)
        except BaseException as e:  # noqa: BLE001 - reported by the trial
            self.error = e


class _Recorder:
    """Subscriber: each block's (start, frames, latency, proc, batch) into a preallocated
    float32 array (no Python object kept per block: a list of tuples would grow the
    collector's work, and its full collections pause every thread; float32 holds a start
    below 2**24 frames exactly and halves the memory of many streams' records)."""

    def __init__(self, rows: int):
        self.a = np.zeros((rows, 5), np.float32)
        self.n = 0

    def __call__(self, r):      # worker thread, after each block
        i = self.n
        if i < self.a.shape[0]:
            self.a[i] = (r.start, r.frames, r.latency_s, r.proc_s, r.batch)
            self.n = i + 1

    def rows(self) -> np.ndarray:
        return self.a[:self.n].astype(np.float64)


def _pcts(a: np.ndarray) -> tuple[float, float, float]:
    if a.size == 0:
        return 0.0, 0.0, 0.0
    p50, p99 = np.percentile(a, [50, 99])
    return float(p50), float(p99), float(a.max())


class _BareProbe(threading.Thread):
    """A bare model (one stream, no scheduler) called once per block period on its own
    thread, in the same process, on a block of the streams' size, writing its output into
    one array (a stream-block's memory traffic: a slowdown of memory shows in it as in the
    workers' calls, where a short block's work in cache would hide it): each call's start
    and end.  A call much slower than the probe's median, or one that starts well after
    its time, marks a moment when the whole process (or the core it was on) stalled, and
    calls a little slower than the median in a row mark a slowdown (:func:`probe_events`):
    a memory-reclaim burst, the hypervisor taking the virtual CPU, a neighbour on the host,
    another task; whatever the scheduler did.  ``realtime``: a SCHED_FIFO
    priority above the workers' (the source thread's), so that the probe starts on time
    unless something outside the scheduler holds it (at normal priority the workers
    themselves would starve it and every busy moment would look like a stall).  ``cpu``:
    the one CPU the probe runs on (a trial runs one probe per CPU: a virtual CPU that the
    hypervisor takes away stalls the threads on it and not the others).
    ``calls[k]``: scheduled time, start and end of call ``k``."""

    def __init__(self, args, t0: float, period: float, n_blocks: int,
                 realtime: int | None = None, cpu: int | None = None):
        super().__init__(name=f"bench-bare-probe{'' if cpu is None else f'-cpu{cpu}'}",
                         daemon=True)
        self.realtime, self.cpu = realtime, cpu
        from rtamt.models import processor_by_name
        from rtamt.scheduler.outputs import output_owner, takes_out

        kw = {} if args.config is None else {"config": args.config}
        self.model = processor_by_name(args.model, args.fs, args.channels, kw)
        shape = (args.channels, args.block) if args.channels > 1 else (args.block,)
        self.x = np.ascontiguousarray(_noise(args.block, args.channels, seed=99).T.reshape(
            shape), dtype=args.dtype)
        y = self.model(self.x)                   # compiled and warm before the trial
        # its output written into one array, like the scheduler's output pools: no
        # allocation per call (a fresh output array is memory mapped and unmapped again,
        # and each unmapping interrupts the threads on the other CPUs)
        self.out = output_owner(y) if takes_out(self.model) else None
        self.t0, self.period, self.n = t0, period, n_blocks
        self.calls = np.zeros((n_blocks, 3))
        self.error: BaseException | None = None

    def run(self):
        from rtamt.engine.denormal import ensure_ftz
        ensure_ftz()
        if self.cpu is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {self.cpu})      # this thread only (Linux)
        if self.realtime is not None:
            from rtamt.engine.realtime import request_realtime
            request_realtime(self.realtime)
        m, x, c = self.model, self.x, self.calls
        kw = {} if self.out is None else {"out": self.out}
        try:
            for k in range(self.n):
                tk = self.t0 + (k + 0.5) * self.period
                d = tk - _perf()
                if d > 0:
                    time.sleep(d)
                a = _perf()
                m(x, **kw)
                c[k] = tk, a, _perf()
        except BaseException as e:  # noqa: BLE001 - reported by the trial
            self.error = e


#: a probe call this many times its median, and at least STALL_MIN_S longer, is a stall
STALL_FACTOR = 3.0
STALL_MIN_S = 1e-3
#: so is a probe call that starts this much after its time (s)
PROBE_LATE_S = 2e-3
#: two consecutive calls of one probe, each over this many times its median: the machine
#: ran slow between them (a neighbour on the host, a reclaim burst), not stalled
SLOW_FACTOR = 1.25
#: a push at least this late (s) is a late source
LATE_PUSH_S = 1e-3
#: the causes :func:`attribute_late_calls` counts, in the order it tries them
CAUSES = ("stall", "slowdown", "late_source", "slow_call", "backlog", "queued", "other")


def probe_events(probe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The moments the bare probes saw the machine held up, from their calls ``probe``
    (Q, 3: scheduled time, start, end; (Q, 4): and the probe's CPU, each probe judged
    against its own median; (Q, 2): start and end, never late).  Returns ``(stalls,
    slowdowns)``, each (K, 2) start and end (s):

    * a stall: a call over ``STALL_FACTOR`` × its probe's median (and ``STALL_MIN_S``
      longer), from its start to its end; or a call that started over ``PROBE_LATE_S``
      after its time, from its time to its start;
    * a slowdown: two consecutive calls of one probe each over ``SLOW_FACTOR`` × its median,
      from the first's start to the second's end."""
    empty = np.zeros((0, 2))
    if not probe.size:
        return empty, empty
    probe = _probe_rows(probe)
    ids = probe[:, 3] if probe.shape[1] > 3 else np.zeros(len(probe))
    stalls, slows = [empty], [empty]
    for i in np.unique(ids):
        p = probe[ids == i][:, :3]
        p = p[np.argsort(p[:, 1], kind="stable")]
        d = p[:, 2] - p[:, 1]
        med = float(np.median(d))
        stall = d > max(STALL_FACTOR * med, med + STALL_MIN_S)
        held = p[:, 1] - p[:, 0] > PROBE_LATE_S
        stalls += [p[stall][:, 1:], p[held][:, :2]]
        slow = d > SLOW_FACTOR * med
        pair = slow[:-1] & slow[1:]
        slows.append(np.column_stack([p[:-1][pair, 1], p[1:][pair, 2]]))
    return np.concatenate(stalls), np.concatenate(slows)


def _probe_rows(probe: np.ndarray) -> np.ndarray:
    """Probe calls as (Q, 3 or more) rows: scheduled time, start, end[, CPU]; (Q, 2) rows
    (start, end) are taken as scheduled at their start."""
    return np.concatenate([probe[:, :1], probe], axis=1) if probe.shape[1] == 2 else probe


def busy_periods(calls: np.ndarray, budget: float) -> tuple[np.ndarray, np.ndarray]:
    """Each call's busy period: the calls whose lives, from the capture of their oldest
    block's last sample (``deadline - budget``) to publication, overlap in a chain, so that
    the scheduler had blocks waiting or in work throughout.  Returns ``(period index per
    call, start of each period)`` (s)."""
    born = calls["deadline"] - budget
    order = np.argsort(born, kind="stable")
    b = born[order]
    reach = np.maximum.accumulate(calls["published"][order])
    new = np.ones(b.size, bool)             # a call born after all before it published
    new[1:] = b[1:] > reach[:-1]
    idx = np.empty(calls.size, np.int64)
    idx[order] = np.cumsum(new) - 1
    return idx, b[new]


def _overlaps(ev: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return (ev[:, 0] < hi) & (ev[:, 1] > lo) if ev.size else np.zeros(0, bool)


def attribute_late_calls(calls: np.ndarray, pushes: np.ndarray, probe: np.ndarray,
                         period: float, budget: float | None = None) -> dict:
    """Why each late call (published after its deadline) was late, the first cause of
    :data:`CAUSES` that applies, with the probes' events of :func:`probe_events`:

    * ``stall``: a probe stall overlaps the life of the call's blocks (from the capture of
      the oldest block's last sample, ``deadline - budget``, to publication; without
      ``budget`` from the call's start);
    * ``slowdown``: a probe slowdown overlaps it;
    * ``late_source``: a push within one period before the call started was at least
      ``LATE_PUSH_S`` late (the input itself arrived late);
    * ``slow_call``: the call took over ``STALL_FACTOR`` × the median of calls of its batch
      size;
    * ``backlog`` (with ``budget``): a stall or slowdown happened earlier in the call's busy
      period (:func:`busy_periods`), at most one period plus the budget after that period
      began: the scheduler had caught up before the machine was held up, and the call
      queued behind the work that piled up then.  In an overload the busy period began long
      before any such event, and its late calls stay ``queued``;
    * ``queued``: it started after its deadline less that median (it waited behind other
      calls);
    * ``other``.

    Also returns ``probe_flagged_s``, the time covered by stalls and slowdowns, beside
    ``probe_span_s``, the time the probes ran: a cause that covers much of the run explains
    little.  ``calls``: :data:`rtamt.scheduler.trace.RECORD` rows; ``pushes`` (P, 2)
    scheduled and actual push times; ``probe``: see :func:`probe_events`."""
    late_mask = calls["published"] > calls["deadline"]
    late = calls[late_mask]
    out = {"calls": int(calls.size), "late_calls": int(late.size)}
    out.update({c: 0 for c in CAUSES})
    stalls, slows = probe_events(probe)
    events = np.concatenate([stalls, slows])
    se = _probe_rows(probe)[:, 1:3] if probe.size else None
    out["probe_span_s"] = float(se[:, 1].max() - se[:, 0].min()) if probe.size else 0.0
    out["probe_flagged_s"] = _union_length(events)
    if not late.size:
        return out
    dur = calls["end"] - calls["start"]
    med = {int(b): float(np.median(dur[calls["batch"] == b])) for b in np.unique(late["batch"])}
    lp = pushes[pushes[:, 1] - pushes[:, 0] >= LATE_PUSH_S] if pushes.size else pushes
    if budget is not None:
        bp, bstart = busy_periods(calls, budget)
        bp = bp[late_mask]
    for i, c in enumerate(late):
        m = med[int(c["batch"])]
        since = c["start"] if budget is None else c["deadline"] - budget
        if _overlaps(stalls, since, c["published"]).any():
            cause = "stall"
        elif _overlaps(slows, since, c["published"]).any():
            cause = "slowdown"
        elif lp.size and np.any((lp[:, 1] <= c["start"]) & (lp[:, 1] > c["start"] - period)):
            cause = "late_source"
        elif c["published"] - c["start"] > STALL_FACTOR * m:
            cause = "slow_call"
        elif budget is not None and _began_backlog(events, bstart[bp[i]], c["published"],
                                                   period + budget):
            cause = "backlog"
        elif c["start"] > c["deadline"] - m:
            cause = "queued"
        else:
            cause = "other"
        out[cause] += 1
    return out


def _began_backlog(events: np.ndarray, begun: float, published: float,
                   within: float) -> bool:
    """An event overlaps ``[begun, published]`` and started at most ``within`` after ``begun``
    (the busy period's start)."""
    if not events.size:
        return False
    return bool(np.any(_overlaps(events, begun, published) & (events[:, 0] <= begun + within)))


def _union_length(iv: np.ndarray) -> float:
    """Total length of the union of intervals ``iv`` (K, 2)."""
    if not iv.size:
        return 0.0
    iv = iv[np.argsort(iv[:, 0])]
    total, lo, hi = 0.0, iv[0, 0], iv[0, 1]
    for a, b in iv[1:]:
        if a > hi:
            total += hi - lo
            lo, hi = a, b
        else:
            hi = max(hi, b)
    return float(total + hi - lo)


def write_trace(path: str, calls: np.ndarray, labels: list, pushes: np.ndarray,
                probe: np.ndarray, origin: float) -> None:
    """One CSV of every event (times in s after ``origin``): ``kind`` ``call`` (start,
    end of processing, publication, deadline, batch, group label, worker), ``push``
    (scheduled, actual) and ``probe`` (start, end of a bare-model call, its scheduled
    time in the deadline column and the probe's CPU in the worker column)."""
    import csv

    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["kind", "start_s", "end_s", "published_s", "deadline_s", "batch", "group",
                    "worker", "late"])
        for c in calls:
            w.writerow(["call", f"{c['start'] - origin:.6f}", f"{c['end'] - origin:.6f}",
                        f"{c['published'] - origin:.6f}", f"{c['deadline'] - origin:.6f}",
                        int(c["batch"]),
                        labels[c["group"]] if c["group"] < len(labels) else c["group"],
                        int(c["worker"]), int(c["published"] > c["deadline"])])
        for a, b in pushes:
            w.writerow(["push", f"{a - origin:.6f}", f"{b - origin:.6f}", "", "", "", "", "",
                        int(b - a >= LATE_PUSH_S)])
        for t, a, b, cpu in probe:
            w.writerow(["probe", f"{a - origin:.6f}", f"{b - origin:.6f}", "",
                        f"{t - origin:.6f}", 1, "", int(cpu), ""])


# ---------------------------------------------------------------------------- paced run
def run_trial(args, n: int, trace_path: str | None = None) -> dict:
    """``n`` paced streams (see the module docstring); returns the report dict."""
    from rtamt.scheduler import Scheduler

    fs, B, ch = args.fs, args.block, args.channels
    period = B / fs
    k_warm = int(round(args.warmup_seconds / period))
    k_meas = max(1, int(round(args.seconds / period)))
    n_blocks = k_warm + k_meas
    loop = max(1, min(n_blocks, int(round(LOOP_SECONDS / period)),
                      NOISE_VALUES // (B * (n + 1) * ch))) * B
    buf = _noise(loop, n * ch, seed=n)
    budget = args.budget_ms / 1e3

    trace = None
    if trace_path is not None:
        from rtamt.scheduler import CallTrace
        trace = CallTrace(capacity=max(1024, 2 * n * n_blocks))
    sched = Scheduler(threads=args.threads, max_batch=args.batch, trace=trace,
                      realtime=getattr(args, "realtime", None), **_placement(args))
    rt = sched.realtime_info()
    src_rt = min(rt["priority"] + 1, 99) if rt["workers"] else None
    try:
        streams, t_open, t_first = _open(sched, args, n, ring_seconds=RING_SECONDS)
        probe = getattr(args, "probe_budget_ms", None)
        if probe:                   # one more stream of the same design, its own budget
            streams.append(sched.open(
                args.model, args.fs, args.block, budget_ms=probe, dtype=args.dtype,
                channels=args.channels, admission="best-effort", name=f"{args.model}-probe",
                model_kwargs={} if args.config is None else {"config": args.config},
                ring_seconds=RING_SECONDS,
                **({} if args.history is None else {"history": args.history})))
            buf = np.concatenate([buf, _noise(loop, ch, seed=n + 7)], axis=1)
        recs = [_Recorder(n_blocks + 2) for _ in streams]
        for s, rec in zip(streams, recs):
            s.subscribe(rec)
        t0 = _perf() + 0.05
        if args.source == "fanout":
            srcs = [_Source(_pusher(streams, ch), buf, B, period, n_blocks, t0, "bench-source",
                            src_rt)]
        else:
            srcs = [_Source(_pusher([s], ch), buf[:, c * ch:(c + 1) * ch], B, period, n_blocks,
                            t0 + c * period / n, f"bench-source-{c}", src_rt)
                    for c, s in enumerate(streams)]
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [None]
        probes = [] if trace is None else [
            _BareProbe(args, t0, period, n_blocks, src_rt, cpu) for cpu in cpus]
        for src in srcs + probes:
            src.start()
        t_warm = t0 + k_warm * period
        time.sleep(max(t_warm - _perf(), 0.0))
        w0, c0 = _perf(), time.process_time()
        for src in srcs:
            src.join()
        w1, c1 = _perf(), time.process_time()
        for p in probes:
            p.join()
        closed = True
        try:
            sched.close("drain", timeout=max(10.0, 2.0 * args.seconds))
        except RuntimeError:
            closed = False
        final = [s.stats() for s in streams]
    finally:
        if sched.running:
            sched.close("discard", timeout=10.0)
    errors = [f"{src.name}: {src.error!r}" for src in srcs if src.error is not None]
    errors += list(sched.errors)
    traced = None
    if trace is not None:
        errors += [f"{p.name}: {p.error!r}" for p in probes if p.error is not None]
        calls = trace.records()
        calls = calls[calls["start"] >= t_warm]
        pushes = np.concatenate([np.stack([t0 + (np.arange(k_warm, n_blocks) + 1) * period
                                           + (c * period / n if args.source != "fanout"
                                              else 0.0)] * 2, axis=1)
                                 + np.stack([np.zeros(n_blocks - k_warm), src.late[k_warm:]],
                                            axis=1)
                                 for c, src in enumerate(srcs)])
        probe_calls = np.concatenate([np.column_stack([p.calls[k_warm:], np.full(
            n_blocks - k_warm, -1 if p.cpu is None else p.cpu)]) for p in probes])
        write_trace(trace_path, calls, trace.group_labels, pushes, probe_calls, t_warm)
        traced = dict(attribute_late_calls(calls, pushes, probe_calls, period, budget),
                      file=trace_path, overwritten=trace.overwritten)
    if not closed:
        errors.append("the streams did not drain within the close timeout")

    start_warm = k_warm * B
    per, all_lat, all_proc, warm_lat = [], [], [], []
    n_calls = batch_sum = share_sum = 0.0
    for s, rec, st in zip(streams, recs, final):
        a = rec.rows()
        meas = a[a[:, 0] >= start_warm]
        warm_lat.append(a[a[:, 0] < start_warm, 2])
        lat, proc, bat = meas[:, 2], meas[:, 3], meas[:, 4]
        p50, p99, mx = _pcts(lat)
        drops = int(k_meas * B - meas[:, 1].sum())
        per.append({"name": s.name, "blocks": int(meas.shape[0]), "latency_p50_us": 1e6 * p50,
                    "latency_p99_us": 1e6 * p99, "latency_max_us": 1e6 * mx,
                    "budget_us": 1e6 * s.budget_s,
                    "misses": int((lat > s.budget_s).sum()), "drops": drops,
                    "batch_mean": float(bat.mean()) if bat.size else 0.0,
                    "dropped_frames": st.dropped_frames, "skipped_frames": st.skipped_frames,
                    "rejected_blocks": st.rejected_blocks})
        all_lat.append(lat)
        all_proc.append(proc)
        n_calls += float((1.0 / bat).sum())
        share_sum += float((proc / bat).sum())
        batch_sum += float(bat.sum())
    lat = np.concatenate(all_lat)
    proc = np.concatenate(all_proc)
    wlat = np.concatenate(warm_lat)
    worst = max(per, key=lambda r: (r["latency_p99_us"], r["misses"], r["drops"]))
    p50, p99, mx = _pcts(proc)
    late = np.concatenate([src.late[k_warm:] for src in srcs])
    wall = w1 - w0
    cores = os.cpu_count() or 1
    cpu = (c1 - c0) / wall if wall > 0 else 0.0
    n_meas = int(lat.size)
    return {
        # the single-stream keys, with their meaning for many streams
        "n_blocks": n_meas,                          # stream-blocks measured
        "seconds": k_meas * period,
        "rtf": share_sum / (len(streams) * k_meas * period),   # own share of each call
        "mean_us": 1e6 * float(proc.mean()) if proc.size else 0.0,
        "p50_us": 1e6 * p50, "p99_us": 1e6 * p99, "max_us": 1e6 * mx,
        "budget_us": 1e6 * budget,
        "p99_budget_fraction": worst["latency_p99_us"] / (1e6 * budget),
        "misses": sum(r["misses"] for r in per),
        "build_s": t_open,
        "warmup_first_call_s": t_first,
        "warmup_s": k_warm * period,
        # many streams
        "config": getattr(streams[0].proc, "config", args.config),
        "streams": n,
        "streams_total": len(streams),               # with the probe stream, if any
        "source": args.source,
        "threads": sched.threads,
        "max_batch": sched.max_batch,
        "realtime": rt,                              # workers' SCHED_FIFO (source: +1)
        "history": int(streams[0].options.history),
        "latency_p50_us": 1e6 * float(np.percentile(lat, 50)) if n_meas else 0.0,
        "latency_p99_us": worst["latency_p99_us"],
        "latency_max_us": max(r["latency_max_us"] for r in per),
        "drops": sum(r["drops"] for r in per),
        "cpu_util": cpu,
        "cpu_util_per_core": cpu / cores,
        "cores": cores,
        "batch_mean": batch_sum / n_meas if n_meas else 0.0,
        "calls": int(round(n_calls)),
        "worst_stream": worst["name"],
        "source_late_p99_us": 1e6 * float(np.percentile(late, 99)) if late.size else 0.0,
        "source_late_max_us": 1e6 * float(late.max()) if late.size else 0.0,
        "warmup_latency_p99_us": 1e6 * float(np.percentile(wlat, 99)) if wlat.size else 0.0,
        "warmup_misses": int((wlat > budget).sum()),
        "errors": errors,
        "probe": next((r for r in per if r["name"].endswith("-probe")), None),
        "trace": traced,
        "per_stream": per,
    }


def passed(r: dict, max_miss_rate: float = 0.0) -> bool:
    """A trial holds the budget: misses at most ``max_miss_rate`` of the measured
    stream-blocks (default 0: none), no drop, no error, every block measured."""
    return (r["misses"] <= max_miss_rate * r["n_blocks"] and r["drops"] == 0
            and not r["errors"]
            and r["n_blocks"] == r.get("streams_total", r["streams"])
            * int(round(r["seconds"] * r["fs"] / r["block"])))


def find_capacity(args, log=print) -> dict:
    """Largest ``N`` that :func:`passed` (doubling from ``args.streams``, or halving if it
    fails, then bisection), at most ``args.max_streams``.  Returns the report of the
    largest passing trial (of ``N = 1`` if none passed) with ``capacity`` and ``trials``,
    and the ideal capacity (:func:`ideal_capacity`) timed before and after the trials
    (``ideal_before``, ``ideal_after``; ``ideal`` is the larger, and ``capacity_fraction``
    the capacity over it)."""
    results: dict[int, dict] = {}
    trials = []

    tpath = getattr(args, "trace", None)

    def ok(n: int) -> bool:
        r = run_trial(args, n, None if tpath is None else
                      "{0}.trial{2:02d}{1}".format(*os.path.splitext(tpath), len(trials) + 1))
        r.update(fs=args.fs, block=args.block)
        results[n] = r
        good = passed(r, getattr(args, "max_miss_rate", 0.0) or 0.0)
        trials.append({"streams": n, "pass": good, "misses": r["misses"], "drops": r["drops"],
                       "latency_p99_us": r["latency_p99_us"], "cpu_util": r["cpu_util"],
                       "batch_mean": r["batch_mean"], "trace": r.get("trace")})
        log(f"trial {len(trials):2d}: {n:4d} streams  misses {r['misses']:5d}  drops "
            f"{r['drops']:7d}  p99 {r['latency_p99_us'] / 1e3:7.2f} ms  max "
            f"{r['latency_max_us'] / 1e3:7.2f} ms  cpu {r['cpu_util']:.2f} cores  batch "
            f"{r['batch_mean']:.1f}  {'ok' if good else 'FAIL'}"
            + (f"  errors: {r['errors'][0]}" if r["errors"] else ""))
        tr = r.get("trace")
        if tr and tr["late_calls"]:
            log(f"          {tr['late_calls']} late calls: "
                + ", ".join(f"{c.replace('_', ' ')} {tr[c]}" for c in CAUSES if tr[c])
                + f" (probes flagged {tr['probe_flagged_s']:.2f} of {tr['probe_span_s']:.1f} s)")
        return good

    before = ideal_capacity(args, 1)["bare_core_s_per_stream_s"]
    cap = args.max_streams
    n = min(args.streams or 1, cap)
    good, bad = 0, None
    if ok(n):
        good = n
        while n < cap:
            n = min(2 * n, cap)
            if not ok(n):
                bad = n
                break
            good = n
    else:
        bad = n
        while n > 1:
            n //= 2
            if ok(n):
                good = n
                break
            bad = n
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    rep = dict(results[good] if good else results[min(results)])
    rep["capacity"] = good
    rep["max_miss_rate"] = getattr(args, "max_miss_rate", 0.0) or 0.0
    rep["capacity_limited_by_max"] = good == cap
    rep["trials"] = trials
    # the machine's speed drifts: the bare model is timed before and after the trials, and
    # the capacity is given as a fraction of the larger ideal (the kernels at their best)
    after = ideal_capacity(args, rep["threads"])
    ideal_before = rep["threads"] / before if before > 0 else 0.0
    rep.update(after)
    if ideal_before > after["ideal"]:
        rep.update(ideal=ideal_before, bare_core_s_per_stream_s=before)
    rep["ideal_before"], rep["ideal_after"] = ideal_before, after["ideal"]
    rep["capacity_fraction"] = good / rep["ideal"] if rep["ideal"] else None
    rep["ideal_of"] = bare = _bare_name(args)
    log(f"ideal {rep['ideal']:.1f} streams ({rep['threads']} workers / "
        f"{rep['bare_core_s_per_stream_s']:.4f} core-s per stream-s of the {bare}; "
        f"{ideal_before:.1f} before the trials, "
        f"{after['ideal']:.1f} after); capacity {good} = {rep['capacity_fraction']:.2f} of ideal")
    return rep


def _bare_name(args) -> str:
    """What the ideal capacity is measured on: the bare batched model, or the bare meter
    (one object per stream: it does not batch)."""
    from rtamt.loudness.r128stream import METERS
    if args.model in METERS:
        return "bare meter, one per stream"
    return f"bare batched model, batch {args.batch}"


def ideal_capacity(args, threads: int, seconds: float = 2.0) -> dict:
    """The streams ``threads`` cores could run if they did nothing but the bare batched
    model: ``threads`` ÷ its cost per stream (core-seconds per stream-second), measured
    now on one thread with batches of ``args.batch`` streams (:func:`_model_rate`)."""
    k = max(4, int(round(seconds * args.fs / args.block)))
    _model_rate(args, 1, args.batch, max(2, k // 8))          # compiled, caches warm
    r = _model_rate(args, 1, args.batch, k)
    cost = r["cpu_util"] * args.fs / (args.block * r["blocks_per_s"])
    return {"ideal": threads / cost if cost > 0 else 0.0, "bare_core_s_per_stream_s": cost}


# ---------------------------------------------------------------------------- throughput
def _scheduler_rate(args, threads: int, n: int, k: int, warm: int) -> dict:
    """Stream-blocks per second of ``threads`` workers on ``n`` streams × ``k`` blocks
    queued before the workers start (after ``warm`` blocks per stream that build the
    batched runners and fill the cost model)."""
    from rtamt.scheduler import Scheduler

    B, ch = args.block, args.channels
    buf = _noise(k * B, n * ch, seed=1)
    sched = Scheduler(threads=threads, max_batch=args.batch, start=False,
                      realtime=getattr(args, "realtime", None))
    try:
        streams, _, _ = _open(sched, args, n, policy="drop-newest",
                              ring_seconds=(k + warm) * B / args.fs + 1.0)
        last = [[0.0, 0] for _ in streams]
        # the main thread sleeps on one event until the last block is published (a
        # polling wait would take the GIL from the workers thousands of times a second
        # and count its own CPU time against the scheduler's).  Workers publish at once:
        # blocks are counted with next() of an itertools.count (one C call, atomic), not
        # a read-modify-write of a Python int, which two workers could interleave
        count, todo = [itertools.count(1)], [0]
        done = threading.Event()

        def mark(slot):
            def sub(r):
                slot[0] = r.t_done
                slot[1] += 1
                if next(count[0]) == todo[0]:
                    done.set()
            return sub
        for s, slot in zip(streams, last):
            s.subscribe(mark(slot))
        push = _pusher(streams, ch)

        def run(blocks: int) -> tuple[float, float]:
            for j in range(blocks):
                push(buf[j * B:(j + 1) * B], None)
            count[0], todo[0] = itertools.count(1), n * blocks
            done.clear()
            c0, t0 = time.process_time(), _perf()
            sched.start()
            if not done.wait(timeout=600.0):
                raise RuntimeError(f"threads={threads}: not all of {n * blocks} blocks "
                                   "published within 600 s")
            t1 = max(v[0] for v in last)
            c1 = time.process_time()
            sched.stop()
            return t1 - t0, c1 - c0
        run(warm)
        done0 = sum(v[1] for v in last)
        wall, cpu = run(k)
        blocks = sum(v[1] for v in last) - done0
        st = [s.stats() for s in streams]
    finally:
        sched.start()
        sched.close("discard", timeout=30.0)
    if blocks != n * k:
        raise RuntimeError(f"threads={threads}: {blocks} of {n * k} blocks processed "
                           f"(dropped {sum(x.dropped_frames for x in st)} frames)")
    return {"threads": threads, "blocks": blocks, "wall_s": wall,
            "blocks_per_s": blocks / wall, "cpu_util": cpu / wall,
            "batch_mean": float(np.mean([x.batch_mean for x in st]))}


def _model_rate(args, threads: int, n: int, k: int) -> dict:
    """The same work on the models alone: ``threads`` plain threads, each running
    ``model(batch)`` on its share of the ``n`` streams (batches of at most ``args.batch``),
    ``k`` blocks each, from the same noise as the scheduler run; no scheduler, no rings,
    no publication.  A processor that does not batch (the R128 meter: one programme per
    object) runs one object per stream, called with that stream's ``(ch, B)`` block."""
    from rtamt.models import processor_by_name

    kw = {} if args.config is None else {"config": args.config}
    B, ch = args.block, args.channels
    alone = not processor_by_name(args.model, args.fs, ch, kw).batchable
    most = 1 if alone else args.batch
    loop = min(k, max(1, int(round(LOOP_SECONDS * args.fs / B))))
    buf = _noise(loop * B, n * ch, seed=1)
    jobs, c0 = [], 0                # per thread: [(model, first column, streams)]
    for m in (len(a) for a in np.array_split(np.arange(n), threads)):
        calls = []
        for b in (len(a) for a in np.array_split(np.arange(m), math.ceil(m / most))):
            calls.append((processor_by_name(args.model, args.fs, ch, kw), c0, b))
            c0 += b
        jobs.append(calls)

    def block(j, c, b):             # (b, B) or (b, ch, B), as the scheduler stacks it
        x = buf[(j % loop) * B:(j % loop + 1) * B, c * ch:(c + b) * ch].T
        x = x.reshape((b, ch, B)) if ch > 1 else x
        return np.ascontiguousarray(x[0] if alone else x, dtype=args.dtype)
    for calls in jobs:
        for model, c, b in calls:
            model(block(0, c, b))
    go = threading.Barrier(threads + 1)

    def work(calls):
        from rtamt.engine.denormal import ensure_ftz
        ensure_ftz()
        go.wait()
        for j in range(k):
            for model, c, b in calls:
                model(block(j, c, b))
    th = [threading.Thread(target=work, args=(c,), daemon=True) for c in jobs]
    for t in th:
        t.start()
    go.wait()
    c0, t0 = time.process_time(), _perf()
    for t in th:
        t.join()
    wall, cpu = _perf() - t0, time.process_time() - c0
    return {"threads": threads, "blocks": n * k, "wall_s": wall, "blocks_per_s": n * k / wall,
            "cpu_util": cpu / wall}


def threads_scaling(args, log=print, repeats: int = 3) -> dict:
    """Throughput on 1 worker thread and on ``args.threads`` (see the module docstring).
    Every configuration runs ``repeats`` times, interleaved; the best run of each counts
    (other load on the machine only ever slows a run down)."""
    n = args.streams or 16
    k = max(1, int(round(args.seconds * args.fs / args.block)))
    warm = max(2, int(round(args.warmup_seconds * args.fs / args.block)))
    tt = (1, args.threads)
    out = {"streams": n, "blocks_per_stream": k, "threads_compared": list(tt),
           "repeats": repeats}
    log(f"{args.model} @ {args.fs:g} Hz, block {args.block}, {args.dtype}: {n} streams x {k} "
        f"blocks, max batch {args.batch}, not paced; best of {repeats} interleaved runs")
    runs = {(kind, t): [] for kind in ("scheduler", "models_only") for t in tt}
    for _ in range(repeats):
        for t in tt:
            runs["scheduler", t].append(_scheduler_rate(args, t, n, k, warm))
            runs["models_only", t].append(_model_rate(args, t, n, k))
    for kind in ("scheduler", "models_only"):
        rs = [max(runs[kind, t], key=lambda r: r["blocks_per_s"]) for t in tt]
        for r, t in zip(rs, tt):
            r["all_blocks_per_s"] = [x["blocks_per_s"] for x in runs[kind, t]]
        ratio = rs[1]["blocks_per_s"] / rs[0]["blocks_per_s"]
        out[kind] = {"runs": rs, "ratio": ratio}
        for r in rs:
            log(f"{kind:11s} threads={r['threads']}: {r['blocks_per_s']:8.0f} stream-blocks/s "
                f"({r['blocks']} in {r['wall_s']:.2f} s; cpu {r['cpu_util']:.2f} cores"
                + (f"; mean batch {r['batch_mean']:.1f}" if "batch_mean" in r else "")
                + "; all runs " + ", ".join(f"{v:.0f}" for v in r["all_blocks_per_s"]) + ")")
        log(f"{kind:11s} ratio {ratio:.2f}")
    # what the scheduler adds per stream-block on one thread; if all of it held the GIL
    # (serial) and the models' part ran fully in parallel, T threads would give about this
    per_s = 1e6 / out["scheduler"]["runs"][0]["blocks_per_s"]
    per_m = 1e6 / out["models_only"]["runs"][0]["blocks_per_s"]
    over = max(per_s - per_m, 0.0)
    out["scheduler_overhead_us"] = over
    # efficiency: the bare batched models' core time over the scheduler's for the same
    # stream-blocks, one worker (process CPU time per stream-block, µs)
    cpu_s = out["scheduler"]["runs"][0]["cpu_util"] * per_s
    cpu_m = out["models_only"]["runs"][0]["cpu_util"] * per_m
    out["efficiency"] = cpu_m / cpu_s if cpu_s > 0 else 0.0
    out["serial_bound_ratio"] = per_s / (over + per_m / tt[1])
    log(f"one thread: {per_s:.1f} us per stream-block with the scheduler, {per_m:.1f} us for "
        f"the models alone: the scheduler adds {over:.1f} us; were all of it serial (GIL), "
        f"{tt[1]} threads could reach at most a ratio of {out['serial_bound_ratio']:.2f}")
    log(f"efficiency (one worker): {out['efficiency']:.2f} (bare batched models' core time "
        f"/ the scheduler's, {cpu_m:.1f} / {cpu_s:.1f} core-us per stream-block)")
    out["ratio"] = out["scheduler"]["ratio"]
    return out


# ---------------------------------------------------------------------------- text report
def print_report(r: dict, file=sys.stdout) -> None:
    """Human summary of a :func:`run_trial` / :func:`find_capacity` report."""
    def w(line=""):
        print(line, file=file)
    per = r["per_stream"]
    ms = 1e-3
    w(f"{r['model']} @ {r['fs']:g} Hz, block {r['block']} ({1e3 * r['block'] / r['fs']:.2f} "
      f"ms), {r['dtype']}, budget {r['budget_us'] * ms:.2f} ms: {r['streams']} streams on "
      f"{r['threads']} threads ({r['source']} source), {r['seconds']:.2f} s measured after "
      f"{r['warmup_s']:.2f} s warm-up")
    rt = r.get("realtime") or {}
    if rt.get("priority") is None:
        w("workers at normal priority (--realtime 0)")
    elif rt.get("refused"):
        w(f"workers at normal priority: SCHED_FIFO {rt['priority']} refused ({rt['refused']})")
    else:
        w(f"workers SCHED_FIFO {rt['priority']}, source thread {rt['priority'] + 1}")
    shown = per if len(per) <= 32 else sorted(
        per, key=lambda p: -p["latency_p99_us"])[:10]
    if len(per) > 32:
        w(f"(the 10 worst of {len(per)} streams; --json lists all)")
    w(f"{'stream':16s} {'blocks':>6s} {'p50 ms':>7s} {'p99 ms':>7s} {'max ms':>7s} "
      f"{'misses':>6s} {'drops':>6s} {'batch':>5s}")
    for p in shown:
        w(f"{p['name']:16s} {p['blocks']:6d} {p['latency_p50_us'] * ms:7.2f} "
          f"{p['latency_p99_us'] * ms:7.2f} {p['latency_max_us'] * ms:7.2f} {p['misses']:6d} "
          f"{p['drops']:6d} {p['batch_mean']:5.1f}")
    w(f"worst stream {r['worst_stream']}: p99 {r['latency_p99_us'] * ms:.2f} ms")
    pr = r.get("probe")
    if pr:
        w(f"probe stream (budget {pr['budget_us'] * ms:.2f} ms): latency p50/p99/max "
          f"{pr['latency_p50_us'] * ms:.2f}/{pr['latency_p99_us'] * ms:.2f}/"
          f"{pr['latency_max_us'] * ms:.2f} ms, misses {pr['misses']}")
    w(f"all streams: latency p50 {r['latency_p50_us'] * ms:.2f} ms, p99 (worst stream) "
      f"{r['latency_p99_us'] * ms:.2f} ms, max {r['latency_max_us'] * ms:.2f} ms; misses "
      f"{r['misses']}, drops {r['drops']} frames")
    w(f"cpu {r['cpu_util']:.2f} cores ({100 * r['cpu_util_per_core']:.0f}% of "
      f"{r['cores']}); rtf per stream {r['rtf']:.3f}; {r['calls']} calls, mean batch "
      f"{r['batch_mean']:.1f}; call p50/p99/max {r['p50_us'] * ms:.2f}/{r['p99_us'] * ms:.2f}/"
      f"{r['max_us'] * ms:.2f} ms; source late p99/max {r['source_late_p99_us'] * ms:.2f}/"
      f"{r['source_late_max_us'] * ms:.2f} ms")
    w(f"warm-up: {r['warmup_s']:.2f} s, latency p99 {r['warmup_latency_p99_us'] * ms:.2f} ms, "
      f"misses {r['warmup_misses']}; opening {r['streams']} streams {r['build_s']:.2f} s (the "
      f"first {r['warmup_first_call_s']:.2f} s: kernel load and cost model)")
    for e in r["errors"]:
        w(f"error: {e}")
    tr = r.get("trace")
    if tr:
        w(f"trace {tr['file']}: {tr['calls']} calls, {tr['late_calls']} late: "
          + ", ".join(f"{c.replace('_', ' ')} {tr[c]}" for c in CAUSES)
          + f"; probes saw a stall or slowdown during {tr['probe_flagged_s']:.2f} s of "
          f"{tr['probe_span_s']:.2f} s"
          + (f" ({tr['overwritten']} calls overwritten)" if tr["overwritten"] else ""))
    if r.get("capacity") is not None:
        w(f"capacity: {r['capacity']} streams"
          + (" (the --max-streams cap)" if r.get("capacity_limited_by_max") else "")
          + (f" (misses up to {r['max_miss_rate']:g} of the blocks allowed)"
             if r.get("max_miss_rate") else " (0 misses)")
          + (f"; ideal {r['ideal']:.1f} ({r.get('ideal_of', 'bare batched model')}, "
             f"{r['threads']} workers): "
             f"{r['capacity_fraction']:.2f} of ideal" if r.get("ideal") else ""))


# ---------------------------------------------------------------------------- intake cost
def intake_cost(counts=(64, 1024), block: int = 256, pushes: int = 100, rounds: int = 3,
                model: str = "dau1997", fs: float = 48000.0, dtype: str = "float32",
                log=print) -> list[dict]:
    """Producer-side cost of feeding ``N`` streams one ``block`` each, in microseconds per
    stream-block, for every ``N`` in ``counts``: ``per_stream`` pushes column ``c`` of a
    ``(block, N)`` chunk to stream ``c`` with its own :meth:`Stream.push` (what a
    multichannel source did before the batched intake), ``fanout`` pushes the chunk once
    through a :class:`~rtamt.scheduler.FanOut` (one ring bank), ``fanout_rows`` pushes the
    same samples stream-major, ``(N, block)``, with :meth:`FanOut.push_streams`.
    ``pushes`` chunks per round, best of ``rounds``; the scheduler is not started (nothing
    consumes, the rings are sized to hold every push and written once beforehand, as a
    running ring's memory is), so only the producer's side is timed."""
    from rtamt.scheduler import FanOut, Scheduler

    out = []
    for n in counts:
        x = _noise(block, n, seed=n).astype(dtype)
        xr = np.ascontiguousarray(x.T)
        ring_s = (rounds * pushes + 2) * block / fs
        res = {"streams": n, "block": block}
        for kind in ("per_stream", "fanout", "fanout_rows"):
            sched = Scheduler(threads=1, start=False, realtime=None, freeze_gc=False)
            try:
                hs = [sched.open(model, fs, block, dtype=dtype, admission="best-effort",
                                 measure=False, ring_seconds=ring_s) for _ in range(n)]
                if kind != "per_stream":
                    fan = FanOut(hs)
                    fan.bank.data.fill(0.0)
                    push = (lambda fan=fan, x=x: fan.push(x)) if kind == "fanout" else \
                        (lambda fan=fan, xr=xr: fan.push_streams(xr))
                else:
                    for h in hs:
                        h.ring.data.fill(0.0)
                    cols = [(h, x[:, c]) for c, h in enumerate(hs)]

                    def push(cols=cols):
                        for h, col in cols:
                            h.push(col)
                best = math.inf
                for _ in range(rounds):
                    t0 = _perf()
                    for _ in range(pushes):
                        push()
                    best = min(best, _perf() - t0)
                assert all(h.stats().dropped_frames == 0 for h in hs)
            finally:
                sched.close("discard", timeout=60)
            res[f"{kind}_us"] = 1e6 * best / (pushes * n)
        res["ratio"] = res["per_stream_us"] / res["fanout_us"]
        res["ratio_rows"] = res["per_stream_us"] / res["fanout_rows_us"]
        log(f"{n:6d} streams, block {block}: per-stream push {res['per_stream_us']:.3f} us, "
            f"FanOut.push {res['fanout_us']:.3f} us (x{res['ratio']:.1f}), "
            f"FanOut.push_streams {res['fanout_rows_us']:.3f} us (x{res['ratio_rows']:.1f}) "
            "per stream-block")
        out.append(res)
    return out
