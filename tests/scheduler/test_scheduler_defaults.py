"""The scheduler's defaults lose no audio and change none (issue 29, items 3-6).

* a waiting pusher (``push(wait=True)``) loses nothing under the default options: the
  drop-oldest policy skips only chunks pushed without waiting (8 threads x 8 streams);
* the input ring keeps the stream's dtype, so float64 input is bit-identical to the
  offline run;
* a subscriber that raises is isolated (the stream's other subscribers still run), and
  its error is counted, logged once and shown in ``line()`` and ``Scheduler.errors``;
* a closed scheduler refuses ``open()`` and ``push``;
* (the README's example: tests/docs/test_readme.py runs it as written).
"""
from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

from rtamt.models import MODELS
from rtamt.scheduler import RtamtClosedError, Scheduler

from _streams import tone_in_noise

FS = 48000


def _signal(seed: int, n: int, dtype="float64") -> np.ndarray:
    return tone_in_noise(seed, n, FS, dtype)


def _collect(h) -> list:
    outs = []
    h.subscribe(lambda r: outs.append(np.array(r.outputs["dau1997"])))
    return outs


# ============================================================================ item 3
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_eight_waiting_threads_lose_nothing_with_default_options(dtype):
    """8 threads, each pushing its own stream's signal in random chunks with wait=True,
    default scheduler and stream options: every frame is processed, none skipped or
    dropped, and every stream equals the offline model on its whole signal, to the bit.
    (Before: the default drop-oldest policy skipped 2/3 of the frames.)"""
    n = 2 * FS                     # 2 s per stream (the 96k frames)
    sigs = [_signal(i, n, dtype) for i in range(8)]
    with Scheduler() as s:
        hs = [s.open("dau1997", FS, dtype=dtype) for _ in sigs]     # every option default
        outs = [_collect(h) for h in hs]
        errs = []

        def feed(h, x, seed):
            rng = np.random.default_rng(seed)
            p = 0
            try:
                while p < x.shape[0]:
                    k = int(rng.integers(1, 2000))
                    assert h.push(x[p:p + k], wait=True)
                    p += k
            except BaseException as e:  # noqa: BLE001 - reported below
                errs.append(e)
        th = [threading.Thread(target=feed, args=(h, x, i)) for i, (h, x) in
              enumerate(zip(hs, sigs))]
        for t in th:
            t.start()
        for t in th:
            t.join()
        assert not errs, errs
        for h in hs:
            h.close("drain", timeout=120)
    for i, (h, o, x) in enumerate(zip(hs, outs, sigs)):
        st = h.stats()
        assert (st.frames_processed, st.skipped_frames, st.dropped_frames) == (n, 0, 0), \
            f"stream {i}: {st.line()}"
        y = np.concatenate(o, axis=-1)
        assert y.dtype == np.dtype(dtype)
        assert np.array_equal(y, MODELS["dau1997"](FS)(x)), f"stream {i} ({dtype})"


def test_waiting_push_larger_than_the_ring_is_queued_whole():
    """A waiting push of a chunk longer than the whole ring goes in piece by piece as the
    ring drains: nothing dropped.  (Before: dropped whole.)"""
    x = _signal(3, 30000)
    with Scheduler(threads=2) as s:
        h = s.open("dau1997", FS, 256, admission="best-effort", ring_seconds=0.05)
        assert h.ring.capacity < x.shape[0]
        out = _collect(h)
        assert h.push(x, wait=True)
        h.close("drain", timeout=60)
    assert h.stats().dropped_frames == 0
    assert np.array_equal(np.concatenate(out, axis=-1), MODELS["dau1997"](FS)(x))


def test_live_pushes_never_block_and_count_their_drops():
    """Pushes without wait (an audio callback) stay bounded: with nothing consuming, a full
    ring drops the incoming chunk whole, push returns False at once and the drop counts."""
    s = Scheduler(threads=1, start=False)
    try:
        h = s.open("dau1997", FS, 256, admission="best-effort", ring_seconds=0.01)
        cap = h.ring.capacity
        blk = np.zeros(256)
        ok = [h.push(blk) for _ in range(cap // 256 + 3)]
        assert ok[0] and not ok[-1]
        st = h.stats()
        assert st.dropped_frames == 256 * ok.count(False) > 0
        assert st.frames_pushed + st.dropped_frames == 256 * len(ok)
    finally:
        s.close("discard", timeout=30)


def test_waiting_push_on_a_stopped_scheduler_says_so_instead_of_hanging():
    s = Scheduler(threads=1, start=False)
    try:
        h = s.open("dau1997", FS, 256, admission="best-effort", ring_seconds=0.01)
        with pytest.raises(RuntimeError, match="not running"):
            h.push(np.zeros(4 * h.ring.capacity), wait=True)
    finally:
        s.close("discard", timeout=30)


# ============================================================================ item 4
def test_the_ring_keeps_float64_input_exact():
    """The input ring follows the stream's dtype by default (float64 stream: float64
    ring), so a float64 signal is processed bit-identically to the offline run.
    (Before: a float32 ring, 1.9e-7 relative error.)"""
    x = _signal(5, 6000)
    with Scheduler(threads=2) as s:
        h = s.open("dau1997", FS, 256, admission="best-effort")
        h32 = s.open("dau1997", FS, 256, admission="best-effort", sample_dtype="float32")
        assert h.ring.dtype == np.float64 and h32.ring.dtype == np.float32
        out = _collect(h)
        h.push(x, wait=True)
        h.close("drain", timeout=60)
    assert np.array_equal(np.concatenate(out, axis=-1), MODELS["dau1997"](FS)(x))


# ============================================================================ item 5
def test_a_raising_subscriber_is_isolated_counted_logged_once_and_shown(caplog):
    """The first subscriber raises on every block: the second still gets every block; the
    error is counted per block, logged once, listed once in Scheduler.errors and shown in
    line().  (Before: the second subscriber was never called, nothing logged or shown.)"""
    got = []

    def bad(r):
        raise ValueError("plot window gone")
    with caplog.at_level(logging.WARNING, logger="rtamt.scheduler"):
        with Scheduler(threads=2) as s:
            h = s.open("dau1997", FS, 256, admission="best-effort")
            h.subscribe(bad)
            h.subscribe(got.append)
            h.push(np.zeros(256 * 10), wait=True)
            assert h.wait_idle(30)
            st = h.stats()
            errors = list(s.errors)
    assert len(got) == st.blocks == 10
    assert st.subscriber_errors == 10
    assert "plot window gone" in st.last_error
    assert "subscriber" in st.line() and "plot window gone" in st.line()
    assert len(errors) == 1 and "plot window gone" in errors[0]
    logged = [r for r in caplog.records if "plot window gone" in r.getMessage()]
    assert len(logged) == 1


def test_a_closed_scheduler_refuses_open_and_push():
    """After close(), open() and push raise RtamtClosedError (a RuntimeError) saying what
    happened.  (Before: open() succeeded and push returned True; nothing ever ran.)"""
    s = Scheduler(threads=1)
    h = s.open("dau1997", FS, 256, admission="best-effort")
    s.close()
    with pytest.raises(RtamtClosedError, match="closed"):
        s.open("dau1997", FS, 256, admission="best-effort")
    with pytest.raises(RtamtClosedError, match="closed"):
        h.push(np.zeros(256))
    with pytest.raises(RtamtClosedError):
        s.start()
    assert issubclass(RtamtClosedError, RuntimeError)


# ============================================================================ item 6
def test_queue_max_is_never_below_the_current_queue():
    """Pushed but not yet taken in: the queue is reported, and its maximum with it.
    (Before: 'queue 960 fr (max 0)'.)"""
    s = Scheduler(threads=1, start=False)
    try:
        h = s.open("dau1997", FS, 256, admission="best-effort")
        h.push(np.zeros(960))
        st = h.stats()
        assert st.queue_frames == 960 and st.queue_max_frames >= 960
    finally:
        s.close("discard", timeout=30)


# ============================================================================ batched intake
def _chunks(total: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    cuts = np.cumsum(rng.integers(1, 1500, total // 200))
    return [0] + [int(c) for c in cuts[cuts < total]] + [total]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fanout_batched_intake_equals_per_stream_pushes(dtype):
    """16 streams fed by one FanOut (one ring bank, one copy per push), 16 by another
    FanOut's stream-major push_streams and 16 by their own push(), with the same chunks,
    default options, wait=True: every stream equals the offline run, to the bit, each way."""
    from rtamt.scheduler import FanOut

    N, T = 16, 20000
    x = np.stack([_signal(50 + c, T, dtype) for c in range(N)], axis=1)
    cuts = _chunks(T, 9)
    with Scheduler(threads=2) as s:
        fan_h = [s.open("dau1997", FS, 256, dtype=dtype, admission="best-effort")
                 for _ in range(N)]
        own_h = [s.open("dau1997", FS, 256, dtype=dtype, admission="best-effort")
                 for _ in range(N)]
        row_h = [s.open("dau1997", FS, 256, dtype=dtype, admission="best-effort")
                 for _ in range(N)]
        outs = [_collect(h) for h in fan_h + own_h + row_h]
        fan, rows = FanOut(fan_h), FanOut(row_h)
        xr = np.ascontiguousarray(x.T)
        for a, b in zip(cuts[:-1], cuts[1:]):
            assert fan.push(x[a:b], wait=True)
            assert rows.push_streams(xr[:, a:b], wait=True)
            for c, h in enumerate(own_h):
                assert h.push(x[a:b, c], wait=True)
        fan.stop("drain", timeout=120)
        rows.stop("drain", timeout=120)
        for h in own_h:
            h.close("drain", timeout=120)
    for c in range(N):
        want = MODELS["dau1997"](FS)(x[:, c])
        st = fan_h[c].stats()
        assert (st.frames_processed, st.frames_pushed, st.chunks_pushed) == \
            (T, T, len(cuts) - 1), st.line()
        assert np.array_equal(np.concatenate(outs[c], axis=-1), want), f"fanout stream {c}"
        assert np.array_equal(np.concatenate(outs[N + c], axis=-1), want), f"own stream {c}"
        assert np.array_equal(np.concatenate(outs[2 * N + c], axis=-1), want), f"row {c}"


def test_fanout_feeds_multichannel_streams():
    """Streams of 2 channels: stream c gets columns 2c and 2c+1 of the source's chunk."""
    from rtamt.scheduler import FanOut

    fs = 32000
    x = np.stack([_signal(70 + c, 6000) for c in range(6)], axis=1)
    with Scheduler(threads=2) as s:
        hs = [s.open("moore2016", fs, 256, channels=2, admission="best-effort",
                     budget_ms=1000) for _ in range(3)]
        outs = [[] for _ in hs]
        for h, o in zip(hs, outs):
            h.subscribe(lambda r, o=o: o.append({k: np.array(v) for k, v in
                                                 r.outputs["moore2016"].items()}))
        fan = FanOut(hs)
        for a, b in zip(*(lambda c: (c[:-1], c[1:]))(_chunks(6000, 4))):
            fan.push(x[a:b], wait=True)
        fan.stop("drain", timeout=120)
    for c in range(3):
        want = MODELS["moore2016"](fs)(np.ascontiguousarray(x[:, 2 * c:2 * c + 2].T))
        for k in ("stl", "ltl", "specific_loudness"):
            got = np.concatenate([o[k] for o in outs[c]], axis=-1)
            assert np.array_equal(got, want[k]), (c, k)


def test_fanout_refuses_bad_input_and_leaves_every_ring_untouched():
    from rtamt import RtamtInputError
    from rtamt.scheduler import FanOut

    s = Scheduler(threads=1, start=False)
    try:
        hs = [s.open("dau1997", FS, 256, admission="best-effort") for _ in range(4)]
        fan = FanOut(hs)
        with pytest.raises(RtamtInputError, match=r"expected shape \(frames, 4\).*got \(10, 3\)"):
            fan.push(np.zeros((10, 3)))
        with pytest.raises(RtamtInputError, match="complex128"):
            fan.push(np.zeros((10, 4), complex))
        with pytest.raises(RtamtInputError, match=r"expected shape \(4, frames\)"):
            fan.push_streams(np.zeros((10, 4)))
        assert fan.bank.w_chunk == 0 and not fan.bank.data.any()
        assert all(h.stats().frames_received == 0 for h in hs)
        with pytest.raises(RuntimeError, match="push the FanOut"):
            hs[0].push(np.zeros(10))
        with pytest.raises(ValueError, match="another FanOut"):
            FanOut(hs[:2])
    finally:
        s.close("discard", timeout=30)
    with pytest.raises(RtamtClosedError):
        fan.push(np.zeros((10, 4)))


def test_ring_bank_drops_for_the_full_stream_only():
    """A stream whose consumer stalls loses the chunks its ring cannot hold (counted, and
    its next chunk starts after the gap); the other streams of the bank take every chunk,
    and bytes of the stalled stream's unread chunks are never overwritten."""
    from rtamt.scheduler.ring import RingBank

    bank = RingBank(3, 1, capacity=100, max_chunks=8, dtype=np.float64)
    got = [[] for _ in range(3)]

    def drain(c):
        r = bank.members[c]
        while r.available():
            start, n, pos, *_ = r.chunk()
            out = np.empty((n, 1))
            r.copy_frames(pos, 0, n, out)
            got[c].append((start, out[:, 0].copy()))
            r.release(n)
    x = np.arange(40 * 3 * 6, dtype=np.float64).reshape(6, 40, 3).transpose(0, 1, 2)
    oks = []
    for k in range(6):                       # stream 1 is not consumed until the end
        oks.append(bank.push(x[k].T[:, :, None]))
        drain(0)
        drain(2)
    drain(1)
    assert oks == [True, True, False, False, False, False]
    assert [len(g) for g in got] == [6, 2, 6]
    assert bank.members[1].dropped_frames == 160 and bank.members[1].dropped_chunks == 4
    assert bank.members[0].dropped_frames == 0
    for c in range(3):
        for start, v in got[c]:
            assert np.array_equal(v, x[start // 40][:, c])
    bank.push(x[0].T[:, :, None])              # the stalled stream resumes after the gap
    drain(1)
    assert got[1][-1][0] == 240 and bank.members[1].queued_frames() == 0


def test_intake_cost_bench_times_every_path():
    """latency_bench.streams.intake_cost (the producer-side measurement in
    docs/scheduler.md) runs every path and reports positive costs."""
    from latency_bench.streams import intake_cost

    (r,) = intake_cost(counts=(3,), pushes=4, rounds=1, log=lambda *a: None)
    assert r["streams"] == 3 and r["block"] == 256
    assert min(r["per_stream_us"], r["fanout_us"], r["fanout_rows_us"]) > 0
    assert r["ratio"] == r["per_stream_us"] / r["fanout_us"]


# ============================================================================ issue 38, item 9
def test_fanout_is_exported_at_the_top_level_as_the_readme_writes_it():
    """``rtamt.FanOut(streams)`` (README) is the scheduler's FanOut.  (Before: an
    AttributeError; it lived only in rtamt.scheduler.)"""
    import rtamt
    from rtamt.scheduler import FanOut

    assert rtamt.FanOut is FanOut and "FanOut" in rtamt.__all__


def test_closing_one_of_two_schedulers_keeps_the_others_switch_interval():
    """The thread switch interval is the process's: a scheduler that stops while another
    runs leaves it lowered; the last one to stop restores what the first one found.
    (Before: closing the first restored 5 ms under the second.)"""
    import sys

    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    try:
        a = Scheduler(threads=1, realtime=None, gil_switch_ms=0.5)
        b = Scheduler(threads=1, realtime=None, gil_switch_ms=0.5)
        assert sys.getswitchinterval() == pytest.approx(0.0005)
        a.close()
        assert sys.getswitchinterval() == pytest.approx(0.0005)     # b still runs
        c = Scheduler(threads=1, realtime=None, gil_switch_ms=0.2)   # the smallest wins
        assert sys.getswitchinterval() == pytest.approx(0.0002)
        c.close()
        assert sys.getswitchinterval() == pytest.approx(0.0005)
        b.close()
        assert sys.getswitchinterval() == pytest.approx(0.005)      # the last one out
        with Scheduler(threads=1, realtime=None, gil_switch_ms=None):
            assert sys.getswitchinterval() == pytest.approx(0.005)  # None leaves it
    finally:
        sys.setswitchinterval(before)
