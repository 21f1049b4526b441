"""Runtime under load: overload policies, denormals after loud input, soak.

These tests drive :class:`rtamt.runtime.Runtime` with the real Dau1997 chain (48 kHz,
256-frame pushes and blocks) from the sources that behave like an audio device, and
check the acceptance criteria of the real-time runtime:

* overload (``simulate_overload``): the queue stays bounded (the callback's duration is
  printed; that it never waits for processing is asserted in ``test_runtime.py``),
  every input frame is accounted for (processed, skipped or dropped - and the gaps in
  ``Result.start`` say exactly where), and the stream is back to real time within 1 s
  after the slowdown ends, for both policies;
* digital silence after loud input does not make blocks slower (the processing thread
  flushes subnormals; the same run without FTZ is measured in a subprocess and printed);
* soak: no memory growth (RSS, and nothing inside the chain object grew), no slowdown
  (the soaked state against a fresh one, each in 5 chain objects so that where their
  arrays landed in memory averages out, measured round-robin after the run) and the
  same outputs (same phase of the looped
  demo signal; equal to 1e-9 of each row's peak, see the test for why not bit-identical)
  between the first and the last minute, no drops.  The soak length is
  ``RTAMT_SOAK_MINUTES`` minutes of audio (default 5, processed as fast as possible;
  the full acceptance run is ``RTAMT_SOAK_MINUTES=60``).

Measured numbers are printed (``pytest -s`` shows them).
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import numpy as np
import pytest

from rtamt.engine.denormal import ensure_ftz
from rtamt.models import Dau1997
from rtamt.runtime import ArraySource, DemoSource, Runtime
from rtamt.signals import demo_signal

FS = 48000.0
B = 256                       # frames per push (chunk) and per processing block
NAME = "dau1997"              # Dau1997's chain name = key of Result.outputs
_perf = time.perf_counter


# ============================================================================ helpers
def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _p99(a) -> float:
    a = np.asarray(a, float)
    return float(np.percentile(a, 99)) if a.size else float("nan")


def _check_accounting(rt: Runtime, offered: int, starts, frames, gaps) -> tuple[int, int]:
    """Every offered frame is processed, skipped, dropped or discarded, and the gaps
    visible in ``Result.start`` are exactly the skipped + dropped frames.  Returns
    (gap frames seen in the results, number of discontinuities)."""
    st = rt.stats()
    starts = np.asarray(starts, np.int64)
    frames = np.asarray(frames, np.int64)
    gaps = np.asarray(gaps, bool)
    lost = st.skipped_frames + st.dropped_frames
    # the ring's counters: accepted + dropped = what the source offered
    assert st.frames_pushed + st.dropped_frames == st.frames_received == offered, st
    assert st.frames_processed + st.skipped_frames + st.dropped_frames \
        + st.discarded_frames == offered, st
    assert st.discarded_frames == 0 and st.rejected_blocks == 0, st
    assert int(frames.sum()) == st.frames_processed, (int(frames.sum()), st)
    assert st.blocks == starts.size
    # gaps seen by a reader: jumps between consecutive blocks (+ before the first and
    # after the last block)
    ends = starts + frames
    jumps = np.diff(starts) - frames[:-1]
    assert (jumps >= 0).all(), "blocks overlap or go backwards"
    seen = int(starts[0]) + int(jumps.sum()) + (offered - int(ends[-1]))
    assert seen == lost, (seen, st.skipped_frames, st.dropped_frames)
    # Result.gap marks exactly the blocks that follow a gap
    assert np.array_equal(gaps[1:], jumps > 0)
    assert bool(gaps[0]) == (starts[0] > 0)
    return seen, int((jumps > 0).sum())


def _overload_run(policy: str, seconds: float = 4.0, t_overload: float = 1.0,
                  factor: float = 2.0, slow_s: float = 1.0, **rt_kw):
    """Real-time demo stream through Dau1997; after ``t_overload`` s every block takes
    ``factor`` x its period for ``slow_s`` s.  Returns (runtime, per-block records,
    push timeline, overload window)."""
    rt = Runtime(Dau1997(FS), FS, block=B, policy=policy, history=4, **rt_kw)
    ring = rt.ring
    rec = {k: [] for k in ("start", "frames", "t_done", "lat", "proc", "gap", "queued")}

    def sub(r):
        rec["start"].append(r.start)
        rec["frames"].append(r.frames)
        rec["t_done"].append(r.t_done)
        rec["lat"].append(r.latency_s)
        rec["proc"].append(r.proc_s)
        rec["gap"].append(r.gap)
        # frames in the ring not yet released, incl. the chunk being processed now
        rec["queued"].append(ring.queued_frames())

    rt.subscribe(sub)
    rt.start()
    src = DemoSource(FS, B, realtime=True, seconds=seconds)
    t_src = _perf()
    src.start(rt)
    try:
        time.sleep(t_overload)
        rt.simulate_overload(factor, slow_s)
        t_ov0 = _perf()
        t_ov1 = rt._slow_until
        assert src.join(seconds + 30.0), "source did not finish"
    finally:
        src.stop()
        rt.stop("drain", timeout=30.0)
    offered = int(round(seconds * FS))
    assert src.pushed == offered
    rec = {k: np.asarray(v) for k, v in rec.items()}
    return rt, rec, t_src, (t_ov0, t_ov1), offered


def _check_overload(policy: str, rt: Runtime, rec, t_src, window, offered, q_bound: int):
    t_ov0, t_ov1 = window
    st = rt.stats()
    # --- callback (push) duration: the whole run, and the pushes during the overload
    ncb = rt._n_cb
    assert ncb == offered // B and ncb <= rt._cb.shape[0]
    cb = rt._cb[:ncb].copy()
    t_push = t_src + (np.arange(ncb) + 1) * B / FS      # when push k was due
    in_ov = (t_push >= t_ov0) & (t_push < t_ov1)
    cb_p99 = _p99(cb) * 1e6
    cb_p99_ov = _p99(cb[in_ov]) * 1e6
    # --- queue
    qmax = int(rec["queued"].max())
    # --- back to real time after the overload ended
    after = rec["t_done"] > t_ov1
    bad = after & ((rec["lat"] >= 0.050) | (rec["queued"] > 2 * B))
    delay = float(rec["t_done"][bad].max() - t_ov1) if bad.any() else 0.0
    late = rec["t_done"] > t_ov1 + 1.0
    seen, ndisc = _check_accounting(rt, offered, rec["start"], rec["frames"], rec["gap"])
    lat_ov = rec["lat"][(rec["t_done"] >= t_ov0) & (rec["t_done"] < t_ov1)]
    print(f"\n[{policy}] blocks {st.blocks}  skipped {st.skipped_frames} fr "
          f"({st.skipped_chunks} chunks)  dropped {st.dropped_frames} fr "
          f"({st.dropped_chunks} chunks)  gap frames seen in Result.start {seen} "
          f"({ndisc} discontinuities)")
    print(f"[{policy}] callback p50/p99/max {np.median(cb) * 1e6:.1f}/{cb_p99:.1f}/"
          f"{cb.max() * 1e6:.1f} us over {ncb} pushes; p99 during the overload "
          f"{cb_p99_ov:.1f} us ({int(in_ov.sum())} pushes)")
    print(f"[{policy}] queue max (subscriber) {qmax} fr, stats.queue_max_frames "
          f"{st.queue_max_frames} fr, bound {q_bound} fr; latency max during overload "
          f"{lat_ov.max() * 1e3 if lat_ov.size else float('nan'):.1f} ms")
    print(f"[{policy}] back to real time {delay * 1e3:.1f} ms after the overload ended; "
          f"{int(late.sum())} blocks checked > 1 s after it: latency max "
          f"{rec['lat'][late].max() * 1e3:.2f} ms, queue max {int(rec['queued'][late].max())} fr")
    # The push's own duration is printed, not asserted: it is wall time on a shared VM
    # (the source thread wakes from a 5 ms sleep for every push, and a freshly woken
    # thread there runs ~10x slower for tens of microseconds), and a bound on it failed
    # on unchanged code (p99 during the overload 33-81 us when this was written, 110-200
    # us in a busy hour).  That a push neither waits for the processing thread nor
    # allocates is asserted structurally, with a chain stuck in processing, by
    # tests/runtime/test_runtime.py::test_callback_neither_waits_for_processing_nor_allocates.
    # queue: the runtime's own maximum (sampled between blocks) and the subscriber's
    # sample (taken while a block is processed: one more chunk, the one in hand)
    assert st.queue_max_frames <= q_bound, (st.queue_max_frames, q_bound)
    assert qmax <= q_bound + B, (qmax, q_bound + B)
    assert late.sum() >= 100                              # the check has material
    assert (rec["lat"][late] < 0.050).all()
    assert (rec["queued"][late] <= 2 * B).all()
    return st


# ============================================================================ overload
@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("policy", ["drop-oldest", "drop-newest"])
def test_overload(policy):
    """drop-oldest: the processing thread caps the backlog at max_backlog (skips, no ring
    drops).  drop-newest with a small ring: the ring fills and drops incoming chunks,
    nothing queued is skipped."""
    t0 = _perf()
    kw = dict(max_backlog_s=0.25) if policy == "drop-oldest" else dict(ring_seconds=0.2)
    rt, rec, t_src, win, offered = _overload_run(policy, **kw)
    # drop-oldest: after skipping, the backlog (incl. the chunk about to be processed)
    # is at most max_backlog; while that block is processed (2 periods at factor 2,
    # plus sleep overshoot) up to 3 chunks arrive and 1 is released: + chunk + block
    bound = rt.max_backlog + B + B if policy == "drop-oldest" else rt.ring.capacity
    st = _check_overload(policy, rt, rec, t_src, win, offered, q_bound=bound)
    lost_here, lost_not = (st.skipped_frames, st.dropped_frames) \
        if policy == "drop-oldest" else (st.dropped_frames, st.skipped_frames)
    assert lost_here > 0      # the overload did overflow the backlog / ring
    assert lost_not == 0      # and only by the policy's own mechanism
    print(f"[{policy}] ring capacity {rt.ring.capacity} fr; wall {_perf() - t0:.1f} s")


# ============================================================================ denormals
def _denormal_measure(loud_s: float = 1.0, silence_s: float = 30.0, skip: int = 50) -> dict:
    """Loud noise (90 dB SPL) then digital zeros, as fast as possible through Dau1997 in
    the runtime; per-block processing times with signal / in the silence."""
    n_loud, n_sil = int(loud_s * FS), int(silence_s * FS)
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(n_loud) * 10 ** ((90 - 100) / 20), np.zeros(n_sil)])
    nb = -(-x.size // B)
    proc = np.full(nb, np.nan)
    start = np.zeros(nb, np.int64)
    finite = [True]

    def sub(r):
        proc[r.seq] = r.proc_s
        start[r.seq] = r.start
        if not np.isfinite(r.outputs[NAME]).all():
            finite[0] = False

    rt = Runtime(Dau1997(FS), FS, block=B, policy="drop-newest", sample_dtype="float64",
                 history=4)
    rt.subscribe(sub)
    rt.start()
    t0 = _perf()
    try:
        ArraySource(x, FS, B, realtime=False).run(rt)
    finally:
        rt.stop("drain", timeout=120.0)
    wall = _perf() - t0
    st = rt.stats()
    tiny = np.finfo(np.float64).tiny
    n_sub = n_state = 0
    for stage in rt.chains[NAME].stages:       # state values left subnormal at the end
        for a in stage.state.values():
            a = np.abs(np.asarray(a))
            n_sub += int(np.count_nonzero((a > 0) & (a < tiny)))
            n_state += a.size
    ok = np.isfinite(proc)
    sig = proc[ok & (start + B <= n_loud)][skip:]
    sil = proc[ok & (start >= n_loud)]
    per_s = [float(np.median(proc[ok & (start >= n_loud + k * FS)
                                  & (start < n_loud + (k + 1) * FS)])) * 1e6
             for k in range(int(silence_s))]
    return dict(p99_signal=_p99(sig), p99_silence=_p99(sil), med_signal=float(np.median(sig)),
                med_silence=float(np.median(sil)), n_signal=int(sig.size),
                n_silence=int(sil.size), finite=finite[0], all_published=bool(ok.all()),
                blocks=st.blocks, lost=st.dropped_frames + st.skipped_frames, wall=wall,
                subnormal_states=n_sub, states=n_state,
                med_per_second_silence_us=[round(v, 1) for v in per_s])


def _denormal_subprocess(keep_denormals: bool) -> dict:
    import json

    here = os.path.dirname(os.path.abspath(__file__))
    code = (f"import json, sys; sys.path.insert(0, {here!r})\n"
            "from test_runtime_load import _denormal_measure\n"
            "print(json.dumps(_denormal_measure()))\n")
    env = dict(os.environ)
    env.pop("RTAMT_KEEP_DENORMALS", None)
    if keep_denormals:
        env["RTAMT_KEEP_DENORMALS"] = "1"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _fmt(m: dict) -> str:
    return (f"p99 signal {m['p99_signal'] * 1e6:.1f} us ({m['n_signal']} blocks), p99 silence "
            f"{m['p99_silence'] * 1e6:.1f} us ({m['n_silence']} blocks), ratio "
            f"{m['p99_silence'] / m['p99_signal']:.3f}; median {m['med_signal'] * 1e6:.1f} / "
            f"{m['med_silence'] * 1e6:.1f} us; subnormal state values at the end "
            f"{m['subnormal_states']}/{m['states']}; run {m['wall']:.1f} s")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_denormals_silence_after_loud(monkeypatch):
    """1 s of 90 dB SPL noise, then 30 s of digital zeros, as fast as possible through the
    runtime: every output is finite and no state value is subnormal (FTZ/DAZ in the
    processing thread).  The block times in signal and silence are printed, not asserted:
    a speed claim belongs to latency_bench (``--signal silence-after-loud`` reports the p99
    ratio, docs/performance.md); asserted here it failed on a VM stall (p99 in silence
    236 µs vs 130 µs with signal, one CI run).

    The same run with ``RTAMT_KEEP_DENORMALS=1`` (subprocess) is measured and printed,
    not asserted: there ~27 % of the state values are subnormal during the silence, but
    on the AMD EPYC this was written on subnormal arithmetic costs little (a dependent
    multiply: 2.1 vs 1.6 ns) and the ratio came out 0.65-1.05 with and without FTZ."""
    monkeypatch.delenv("RTAMT_KEEP_DENORMALS", raising=False)
    t0 = _perf()
    on = _denormal_measure()
    assert on["all_published"] and on["lost"] == 0
    assert on["finite"], "non-finite output"
    assert on["n_signal"] >= 100 and on["n_silence"] >= 5000
    print(f"\n[denormals, FTZ on]  {_fmt(on)}")
    print(f"[denormals, FTZ on]  median per silent second (us): {on['med_per_second_silence_us']}")
    assert on["subnormal_states"] == 0        # FTZ/DAZ is on in the processing thread

    off = _denormal_subprocess(keep_denormals=True)
    assert off["finite"] and off["all_published"] and off["lost"] == 0
    assert off["subnormal_states"] > 0         # control: without FTZ the states do go subnormal
    print(f"[denormals, RTAMT_KEEP_DENORMALS=1]  {_fmt(off)}")
    print(f"[denormals, RTAMT_KEEP_DENORMALS=1]  median per silent second (us): "
          f"{off['med_per_second_silence_us']}")
    print(f"[denormals] wall {_perf() - t0:.1f} s")


# ============================================================================ soak
def _footprint(obj, path="chain", seen=None) -> list:
    """Every array (path, shape, dtype) and every container length (path, len) reachable
    from a chain through its attributes: what could grow inside the chain object."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return [(path, obj.shape, str(obj.dtype))]
    if isinstance(obj, dict):
        out = [(path, len(obj))]
        for k in sorted(obj, key=str):
            out += _footprint(obj[k], f"{path}[{k!r}]", seen)
        return out
    if isinstance(obj, (list, tuple)):
        out = [(path, len(obj))]
        for i, v in enumerate(obj):
            out += _footprint(v, f"{path}[{i}]", seen)
        return out
    if type(obj).__module__.startswith("rtamt") and hasattr(obj, "__dict__"):
        return _footprint(vars(obj), path, seen)
    return []


def _placement_block_times(chain, pos: int, copies: int = 4, n_blocks: int = int(10 * FS) // B):
    """Per-block times of the soaked ``chain`` and of fresh Dau1997 chains, each over several
    memory placements, processing the same blocks round-robin in this thread.

    One chain object's speed depends on where its buffers and states landed: on this VM
    two chains with bit-identical states differ by up to ~7 % (and rarely ~15 %) for as
    long as they live, while moving a soaked state into a new chain and a fresh state
    into another shows no difference (median -0.1 to -0.4 %).  So the soaked group is
    ``chain`` plus ``copies`` new chains loaded with its state, the fresh group is a fresh
    chain (warmed up 2 s) plus ``copies`` chains loaded with that state, created
    alternately.  Continues the looped demo signal at sample ``pos``.  Returns the
    undisturbed per-block time (smallest median over 2 s sub-windows, s) of every chain
    of each group."""
    x = demo_signal(FS, 2.0, 100.0).astype(np.float32).astype(np.float64)  # as via the ring
    loop = x.size
    fresh = Dau1997(FS)
    for i in range(int(2 * FS) // B):                  # warm the fresh chain up (2 s)
        fresh(x[i * B:(i + 1) * B])
    sd_soaked, sd_fresh = chain.state_dict(), fresh.state_dict()
    soaked_group, fresh_group = [chain], [fresh]
    for _ in range(copies):
        for group, sd in ((soaked_group, sd_soaked), (fresh_group, sd_fresh)):
            c = Dau1997(FS)
            c.load_state_dict(sd)
            group.append(c)
    chains = [c for pair in zip(soaked_group, fresh_group) for c in pair]
    ensure_ftz()
    t = np.empty((len(chains), n_blocks))
    for i in range(n_blocks):
        s = (pos + i * B) % loop
        blk = x[s:s + B]
        for j, c in enumerate(chains):
            t0 = _perf()
            c(blk)
            t[j, i] = _perf() - t0
    sw = int(2 * FS) // B

    def undisturbed(p):
        return min(float(np.median(p[i:i + sw])) for i in range(0, p.size - sw + 1, sw))

    und = [undisturbed(p) for p in t]
    return und[0::2], und[1::2]


@pytest.mark.slow
@pytest.mark.timeout(3 * 3600)
def test_soak():
    """``RTAMT_SOAK_MINUTES`` (default 5) minutes of the looped 2 s demo signal, as fast
    as possible: RSS after minute 1 vs at the end, per-block time in the first vs the
    last minute, outputs at the same loop phase in minute 1 vs the last 2 s, no drops."""
    minutes = float(os.environ.get("RTAMT_SOAK_MINUTES", "5"))
    assert minutes >= 2, "the soak compares the first and the last minute"
    t_wall0 = _perf()
    total = int(round(minutes * 60 * FS))
    total -= total % int(2 * FS)              # whole 2 s loops of the demo signal
    nb = total // B
    per_min = int(60 * FS) // B
    loop = int(2 * FS)                        # demo signal period (frames)
    warm = int(5 * FS) // B                   # warm-up blocks left out of the timing
    ref_lo, ref_hi = int(56 * FS), int(58 * FS)          # 2 s window inside minute 1
    cmp_lo, cmp_hi = total - loop, total                 # same phase, last 2 s
    assert ref_lo % loop == cmp_lo % loop
    t_rss1 = int(60 * FS)

    # Everything the subscriber keeps is allocated here, before the stream starts: the
    # per-block records (touched now, so they do not grow the RSS later) and the
    # capture buffers.  Retaining hundreds of output copies allocated in the processing
    # thread (y.copy()) changed its heap so that every later block page-faulted
    # (3.3 minor faults/block) and ran ~20 % slower for the rest of the run.
    proc = np.full(nb, np.nan)
    shape = Dau1997(FS)(np.zeros(B)).shape               # one block's output (rows, B)
    nref = loop // B
    ref = np.empty((nref,) + shape)                      # one mmap; touched in the window
    have = np.zeros(nref, bool)
    scale = np.zeros(shape[0])                           # peak |output| per row
    scratch = np.empty(shape)
    tiny = np.finfo(np.float64).tiny
    box = dict(next=0, disc=0, gaps=0, rss1=None, cmp=0, neq_blocks=0, neq_elems=0,
               maxrel=0.0, maxabs=0.0, finite=True, frames=0)

    def sub(r):
        proc[r.seq] = r.proc_s
        if r.start != box["next"]:
            box["disc"] += 1
        box["next"] = r.start + r.frames
        box["frames"] += r.frames
        box["gaps"] += r.gap
        s = r.start
        if ref_lo <= s < ref_hi or cmp_lo <= s < cmp_hi:
            y = r.outputs[NAME]
            k = (s % loop) // B
            peak = np.abs(y, out=scratch).max(axis=-1)  # NaN propagates
            box["finite"] &= bool(np.isfinite(peak).all())
            if s < ref_hi:
                np.copyto(ref[k], y)
                np.maximum(scale, peak, out=scale)
                have[k] = True
            else:
                box["cmp"] += 1
                if not np.array_equal(ref[k], y, equal_nan=True):
                    d = np.abs(np.subtract(y, ref[k], out=scratch), out=scratch)
                    box["neq_blocks"] += 1
                    box["neq_elems"] += int(np.count_nonzero(d))
                    box["maxabs"] = max(box["maxabs"], float(d.max()))
                    rel = (d.max(axis=-1) / np.maximum(scale, tiny)).max()
                    box["maxrel"] = max(box["maxrel"], float(rel))
        elif box["rss1"] is None and s >= t_rss1:
            box["rss1"] = _rss_bytes()
            box["flt1"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    chain = Dau1997(FS)
    rt = Runtime(chain, FS, block=B, policy="drop-newest", history=4)
    rt.subscribe(sub)
    rt.start()
    src = DemoSource(FS, B, realtime=False, seconds=total / FS)
    t_run = _perf()
    try:
        src.run(rt)
    finally:
        rt.stop("drain", timeout=120.0)
    run_s = _perf() - t_run
    rss_end = _rss_bytes()
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - box["flt1"]) / (nb - per_min)
    st = rt.stats()

    # --- no drops, no skips, nothing lost
    assert src.pushed == total
    assert st.dropped_frames == 0 and st.skipped_frames == 0 and st.rejected_blocks == 0, st
    assert st.frames_processed == total and st.blocks == nb and box["frames"] == total
    assert box["disc"] == 0 and box["gaps"] == 0
    assert np.isfinite(proc).all()
    # --- memory
    assert box["rss1"] is not None
    growth = rss_end - box["rss1"]
    # --- per-block time, first vs last minute.  Plain medians, and the "undisturbed"
    # per-block time: the smallest median over 5 s (of audio) sub-windows of the minute,
    # which is what is asserted.  A minute of audio is only ~3 s of wall time here; on
    # the shared 2-core VM this was written on, 5 s medians jumped by 15-60 % for a
    # second or two of wall time whenever another process was busy, while on a quiet
    # machine the two statistics agree within 1 %.  A slowdown of the model itself
    # moves every sub-window.
    med1 = float(np.median(proc[warm:per_min]))
    medN = float(np.median(proc[nb - per_min:]))
    sw = int(5 * FS) // B

    def undisturbed(p):
        return min(float(np.median(p[i:i + sw])) for i in range(0, p.size - sw + 1, sw))

    und1 = undisturbed(proc[per_min - 11 * sw:per_min])     # 11 sub-windows after warm-up
    undN = undisturbed(proc[nb - 11 * sw:])
    # --- identical outputs at the same phase
    assert have.all() and box["cmp"] == nref
    assert box["finite"]
    print(f"\n[soak] {minutes:g} min of audio in {run_s:.1f} s ({total / FS / run_s:.1f}x real "
          f"time), {nb} blocks; RSS after minute 1 {box['rss1'] / 2**20:.1f} MiB, at the end "
          f"{rss_end / 2**20:.1f} MiB, growth {growth / 2**20:+.2f} MiB")
    print(f"[soak] median proc per block: minute 1 (after {warm * B / FS:.0f} s warm-up) "
          f"{med1 * 1e6:.1f} us, last minute {medN * 1e6:.1f} us, change "
          f"{(medN / med1 - 1) * 100:+.1f} %; undisturbed (min of 5 s medians) "
          f"{und1 * 1e6:.1f} / {undN * 1e6:.1f} us, change {(undN / und1 - 1) * 100:+.1f} %  "
          f"(p99 {_p99(proc[warm:per_min]) * 1e6:.0f} / {_p99(proc[nb - per_min:]) * 1e6:.0f} us)")
    print(f"[soak] median proc per minute (us): "
          f"{[round(float(np.median(proc[i:i + per_min])) * 1e6) for i in range(0, nb, per_min)]}; "
          f"minor page faults per block after minute 1: {faults:.3f}")
    print(f"[soak] outputs at the same phase, [{ref_lo / FS:.0f}, {ref_hi / FS:.0f}) s vs "
          f"[{cmp_lo / FS:.0f}, {cmp_hi / FS:.0f}) s: {box['cmp']} blocks compared, "
          f"{box['neq_blocks']} not bit-identical ({box['neq_elems']} elements), max |diff| "
          f"{box['maxabs']:.3g}, max |diff| / row peak {box['maxrel']:.3g}")
    assert growth < 10 * 2**20, f"RSS grew by {growth / 2**20:.1f} MiB"
    # --- nothing inside the chain object grew: the same arrays (shapes, dtypes) and the
    # same container lengths as a chain that ran 2 s.  Deterministic, unlike a timing.
    short = Dau1997(FS)
    rt2 = Runtime(short, FS, block=B, policy="drop-newest", history=4)
    rt2.start()
    try:
        DemoSource(FS, B, realtime=False, seconds=2.0).run(rt2)
    finally:
        rt2.stop("drain", timeout=60.0)
    assert rt2.stats().blocks == int(2 * FS) // B
    assert _footprint(chain) == _footprint(short)
    # --- no slowdown.  First vs last minute are ~10 s of wall time apart, and on a shared
    # VM the machine's own speed can drift by more than 10 % in that time (seen once in
    # CI: +11 % for a chain whose code had not changed).  So the asserted comparison is
    # made at one time: the soaked chain and fresh chains process the same looped demo
    # blocks round-robin after the run.  One pair of chain objects is not enough: where
    # a chain's arrays landed in memory moved one pair by +15 % in CI with equal code and
    # state-independent speed (see _placement_block_times), so each side is the median
    # over 5 placements.  A state that makes blocks slower (denormals) shows here;
    # machine drift hits both alike; growth inside the chain is checked above.
    soaked, fresh = _placement_block_times(chain, total)
    ms, mf = float(np.median(soaked)), float(np.median(fresh))
    print(f"[soak] round-robin now, per block (5 placements each): soaked state "
          f"{[round(v * 1e6, 1) for v in soaked]} us (the soaked chain object first), fresh "
          f"{[round(v * 1e6, 1) for v in fresh]} us; medians {ms * 1e6:.1f} / {mf * 1e6:.1f} us, "
          f"change {(ms / mf - 1) * 100:+.1f} %")
    assert ms <= 1.10 * mf, (soaked, fresh, und1, undN, med1, medN)
    # Not bit-identical with Dau1997: the modulation filterbank's 2.5 Hz Butterworth
    # low-pass (poles ~2e-4 from z=1 at 48 kHz) never settles to an exactly periodic
    # state; its outputs differ between loops by rounding noise of ~4e-11 of the
    # row's peak from the 6th loop on, without growing.  Everything upstream of it is
    # exactly periodic.  So: a tight, scale-relative tolerance.
    assert box["maxrel"] <= 1e-9, box["maxrel"]
    print(f"[soak] wall {_perf() - t_wall0:.1f} s")
