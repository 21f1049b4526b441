"""Subscribers run where they cannot delay another stream (issue 38, item 5): in the
scheduler's delivery thread, never in a worker.  A slow subscriber backs up only its own
stream, whose stats and ``line()`` name it; every result still reaches every subscriber,
in order."""
from __future__ import annotations

import threading
import time

import numpy as np

from rtamt.scheduler import Scheduler

FS, B, CHUNK = 48000, 256, 480


def _paced(hs, seconds: float) -> None:
    """Push to every stream in ``hs`` as an audio callback would: ``CHUNK`` frames every
    10 ms, never waiting (what does not fit is dropped by the stream's policy)."""
    x = np.full(CHUNK, 0.01)
    t0 = time.perf_counter()
    for k in range(int(seconds * FS) // CHUNK):
        for h in hs:
            h.push(x)
        t_next = t0 + (k + 1) * CHUNK / FS
        time.sleep(max(t_next - time.perf_counter(), 0.0))


def test_a_slow_subscriber_on_one_stream_starves_no_other_stream():
    """The issue's case: one worker, a 20 ms subscriber on stream A, 1 s of audio pushed
    in real time to A and B.  B loses nothing and is not late (at most 5 % of its blocks
    on a loaded CPU; before: 92 of 93, 1 s late); A's stats and line()
    name the slow subscriber; A's subscriber got A's results in order, and none ran on
    a worker.  (Before: the subscriber ran on the only worker and B skipped 23 296 of
    48 000 frames; neither stream's stats named the cause.)"""
    seen, threads = [], set()

    def slow(r):
        threads.add(threading.current_thread().name)
        seen.append(r.seq)
        time.sleep(0.020)

    with Scheduler(threads=1, realtime=None) as s:
        a = s.open("dau1997", FS, B, budget_ms=20, name="A", admission="best-effort")
        b = s.open("dau1997", FS, B, budget_ms=20, name="B", admission="best-effort")
        a.subscribe(slow)
        _paced([a, b], 1.0)
        assert b.wait_idle(10)
        sb = b.stats()
        sa = a.stats()
    assert sb.skipped_frames == 0 and sb.dropped_frames == 0, sb.line()
    assert sb.frames_processed == 48000 - 48000 % B, sb.line()
    assert sb.misses <= sb.blocks // 20, sb.line()   # a loaded shared CPU; before: 92 of 93
    assert not sb.slow_subscriber and "SUBSCRIBER" not in sb.line()
    assert sa.slow_subscriber and sa.subscriber_waits > 0, sa.line()
    assert sa.subscriber_p99_ms >= 19.0 and sa.subscriber_max_ms >= 19.0
    assert "SLOW SUBSCRIBER" in sa.line() and "subscribers p99/max" in sa.line()
    assert seen == sorted(seen) and len(seen) == len(set(seen)) > 0
    assert threads == {"rtamt-delivery"}


def test_subscribers_get_every_result_in_order_and_wait_idle_waits_for_them():
    """Three streams fed with wait=True, each with a subscriber slower than its blocks
    (2 ms per 5.3 ms block with three of them in one delivery thread, then faster than
    its input arrives): nothing is lost, every stream's subscriber gets every block in
    order, and wait_idle / close return only after the subscribers had them."""
    got = {k: [] for k in "xyz"}
    with Scheduler(threads=2, realtime=None) as s:
        hs = {k: s.open("dau1997", FS, B, name=k, admission="best-effort") for k in got}
        for k, h in hs.items():
            h.subscribe(lambda r, k=k: (got[k].append(r.seq), time.sleep(0.002)))
        for _ in range(20):
            for h in hs.values():
                assert h.push(np.full(10 * B, 0.01), wait=True)
        for k, h in hs.items():
            assert h.wait_idle(30)
            assert got[k] == list(range(200)), k
        hs["x"].push(np.full(3 * B, 0.01), wait=True)
        hs["x"].close("drain", 30)
        assert got["x"] == list(range(203))
    for k in got:
        st = hs[k].stats()
        assert st.skipped_frames == st.dropped_frames == 0 and st.subscriber_queue == 0


def test_results_reach_subscribers_when_the_scheduler_does_not_run():
    """Without running workers (a drain in the caller's thread) the subscribers are
    called there, and get the stream's results all the same."""
    got = []
    s = Scheduler(threads=1, start=False, realtime=None)
    h = s.open("dau1997", FS, B, admission="best-effort")
    h.subscribe(lambda r: got.append(r.frames))
    h.push(np.full(2 * B + 10, 0.01))
    s.close("drain")
    assert got == [B, B, 10]
