"""The scheduler's call trace (``Scheduler(trace=CallTrace())``) and latency_bench's
``--trace FILE``, its bare-model probe and its attribution of late calls, and the ideal
capacity that ``--find-capacity`` prints beside the capacity."""
import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from latency_bench.streams import CAUSES, attribute_late_calls, busy_periods, probe_events
from rtamt.scheduler import CallTrace, Scheduler
from rtamt.scheduler.trace import RECORD

FS, B = 48000, 256


def _run(trace, streams=3, blocks=12, threads=2, budget_ms=50.0):
    x = (np.random.default_rng(0).standard_normal(B * blocks) * 0.01).astype(np.float64)
    with Scheduler(threads=threads, trace=trace, realtime=None) as s:
        hs = [s.open("dau1997", FS, B, budget_ms=budget_ms, dtype="float64")
              for _ in range(streams)]
        for h in hs:
            h.push(x)
        for h in hs:
            assert h.wait_idle(timeout=120)
        blocks_done = sum(h.stats().blocks for h in hs)
    return blocks_done


def test_every_call_is_recorded_once():
    tr = CallTrace()
    done = _run(tr)
    r = tr.records()
    assert done == 3 * 12
    assert len(tr) == r.size and tr.overwritten == 0
    assert int(r["batch"].sum()) == done              # every stream-block in one call
    assert np.all(r["start"] <= r["end"]) and np.all(r["end"] <= r["published"])
    assert np.all(np.diff(r["start"]) >= 0)           # ordered by start
    assert set(r["worker"]) <= {0, 1} and set(r["group"]) == {0}
    assert tr.group_labels == ["dau1997@48000Hz/256/float64"]
    # all input was pushed before the calls: the deadlines are capture + budget, and the
    # blocks were captured (pushed) before each call started
    assert np.all(r["deadline"] - 0.05 <= r["start"])


def test_a_full_trace_keeps_the_newest_calls():
    tr = CallTrace(capacity=3)
    _run(tr, streams=1, blocks=10, threads=1)
    r = tr.records()
    assert len(tr) == 3 and tr.overwritten == 7
    assert r.dtype == RECORD and np.all(np.diff(r["start"]) > 0)
    assert tr.records().size == 3


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity"):
        CallTrace(0)


def test_without_a_trace_nothing_is_recorded():
    with Scheduler(threads=1, realtime=None) as s:
        assert s.trace is None
    tr = CallTrace()
    with Scheduler(threads=1, trace=tr, realtime=None) as s:
        assert s.trace is tr


def _calls(rows):
    a = np.zeros(len(rows), RECORD)
    for i, (start, pub, deadline, batch) in enumerate(rows):
        a[i] = (start, pub, pub, deadline, batch, 0, 0)
    return a


def test_each_late_call_gets_its_cause():
    period = 0.005
    # on-time calls of batch 2 take 1 ms (the median); five late ones, one per cause
    ok = [(t, t + 0.001, t + 0.01, 2) for t in np.arange(0.0, 0.2, period)]
    late = [(1.000, 1.010, 1.005, 2),    # a probe call overlapping it stalled
            (2.000, 2.002, 2.0015, 2),   # its input was pushed 3 ms late just before
            (3.000, 3.008, 3.005, 2),    # 8x the median: a slow call
            (4.000, 4.001, 4.0005, 2),   # 1 ms call that started after deadline - 1 ms
            (5.000, 5.0012, 5.0011, 2)]  # none of these
    calls = _calls(ok + late)
    pushes = np.array([[t, t + 1e-5] for t in np.arange(0.0, 6.0, period)]
                      + [[1.996, 1.999]])
    probe = np.array([[t, t + 0.0005] for t in np.arange(0.0, 6.0, period)]
                     + [[1.002, 1.009]])
    r = attribute_late_calls(calls, pushes, probe, period)
    assert {k: r[k] for k in ("calls", "late_calls") + CAUSES} == {
        "calls": len(ok) + 5, "late_calls": 5, "stall": 1, "slowdown": 0, "late_source": 1,
        "slow_call": 1, "backlog": 0, "queued": 1, "other": 1}
    assert r["probe_flagged_s"] == pytest.approx(0.007)     # the one stalled probe call
    # without late calls every count is 0
    r = attribute_late_calls(_calls(ok), pushes, probe, period)
    assert r["late_calls"] == 0 and r["stall"] == 0
    # probe rows with their scheduled time: a probe call that started 6 ms after its time,
    # during the life of the queued call's block (captured 10 ms before its deadline), makes
    # that call a stall; one that started 1 ms late (a busy core, not a stall) does not
    sched = np.array([[t, t, t + 0.0005] for t in np.arange(0.0, 6.0, period)
                      if not 3.99 < t < 4.0001] + [[1.002, 1.002, 1.009]])
    held = np.concatenate([sched, [[3.992, 3.998, 3.9985]]])
    r = attribute_late_calls(calls, pushes, held, period, budget=0.010)
    assert (r["stall"], r["queued"]) == (2, 0)
    busy = np.concatenate([sched, [[3.992, 3.993, 3.9935]]])
    r = attribute_late_calls(calls, pushes, busy, period, budget=0.010)
    assert (r["stall"], r["queued"]) == (1, 1)
    # without the budget only stalls from the call's start count
    r = attribute_late_calls(calls, pushes, held, period)
    assert (r["stall"], r["queued"]) == (1, 1)


def _probes(t_end, slow=(), period=0.005, dur=0.0005):
    """Two probes (CPUs 0 and 1), one call per period at mid-period; ``slow``: (cpu, time)
    of calls that take 1.6x as long."""
    rows = [[t + period / 2, t + period / 2, t + period / 2 + dur, cpu]
            for t in np.arange(0.0, t_end, period) for cpu in (0, 1)]
    for cpu, t in slow:
        for r in rows:
            if r[3] == cpu and abs(r[0] - t - period / 2) < 1e-9:
                r[2] = r[1] + 1.6 * dur
    return np.array(rows)


def test_probe_events_stall_and_slowdown():
    # two calls in a row of one probe 1.6x its median: a slowdown from the first's start to
    # the second's end; the same two calls on different probes, or one alone, are not
    st, sl = probe_events(_probes(0.1, slow=[(0, 0.050), (0, 0.055)]))
    assert st.size == 0 and sl == pytest.approx(np.array([[0.0525, 0.0583]]))
    for slow in ([(0, 0.050), (1, 0.055)], [(0, 0.050)]):
        st, sl = probe_events(_probes(0.1, slow=slow))
        assert st.size == 0 and sl.size == 0
    # a call 3x its probe's median and 1 ms longer is a stall, not a slowdown
    p = _probes(0.1)
    p[10, 2] = p[10, 1] + 0.002
    st, sl = probe_events(p)
    assert st == pytest.approx(p[10:11, 1:3]) and sl.size == 0


def test_a_miss_in_the_backlog_a_slowdown_left_is_blamed_on_it_unless_overloaded():
    period, budget = 0.005, 0.010

    def run(chain_from):
        # bursts captured at t, done within 2.5 ms; from chain_from the scheduler lags: each
        # call published 6.5 ms after its capture (overlapping the next block's life), up
        # to a call captured at 1.030 published 3 ms after its deadline
        rows = [(t + 0.0005, t + 0.0025, t + budget, 2)
                for t in np.arange(0.0, chain_from - 1e-9, period)]
        rows += [(t + 0.004, t + 0.0065, t + budget, 2)
                 for t in np.arange(chain_from, 1.030 - 1e-9, period)]
        rows += [(1.041, 1.043, 1.040, 2)]
        rows += [(t + 0.0005, t + 0.0025, t + budget, 2) for t in np.arange(1.05, 1.2, period)]
        calls = _calls(rows)
        pushes = np.array([[t, t + 1e-5] for t in np.arange(0.0, 1.2, period)])
        probe = _probes(1.2, slow=[(0, 1.000), (0, 1.005)])   # a slowdown 1.0025-1.0083
        return calls, attribute_late_calls(calls, pushes, probe, period, budget)

    calls, r = run(1.000)         # caught up at 0.9975; the slowdown 2.5 ms into the period
    idx, starts = busy_periods(calls, budget)
    miss = int(np.flatnonzero(calls["deadline"] == 1.040)[0])
    assert starts[idx[miss]] == pytest.approx(1.0)          # its busy period began at 1.0
    assert starts[idx[miss + 1]] == pytest.approx(1.05)     # and ended before 1.05
    assert len(starts) == 200 + 1 + 30      # one per burst, the lagging ones as one
    assert (r["late_calls"], r["backlog"], r["queued"]) == (1, 1, 0)
    assert r["probe_flagged_s"] == pytest.approx(0.0058)
    _, r = run(0.900)             # lagging since 0.9: an overload the slowdown did not start
    assert (r["late_calls"], r["backlog"], r["queued"]) == (1, 0, 1)
    # without the budget there are no lives to chain: queued
    calls, _ = run(1.000)
    r = attribute_late_calls(calls, np.zeros((0, 2)), _probes(1.2, slow=[(0, 1.0), (0, 1.005)]),
                             period)
    assert (r["backlog"], r["queued"]) == (0, 1)


def test_bench_trace_file(tmp_path):
    path = tmp_path / "t.csv"
    r = subprocess.run([sys.executable, "-m", "latency_bench", "--streams", "2", "--seconds",
                        "0.4", "--warmup-seconds", "0.2", "--trace", str(path), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), r.stderr
    res = json.loads(r.stdout)
    tr = res["trace"]
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    kinds = [row["kind"] for row in rows]
    k = round(0.4 * FS / B)
    assert kinds.count("push") == k                 # one FanOut source, measured window
    cpus = sorted(os.sched_getaffinity(0))
    assert kinds.count("probe") == k * len(cpus)    # a bare probe per CPU, once per period
    assert sorted({int(row["worker"]) for row in rows if row["kind"] == "probe"}) == cpus
    for cpu in cpus:      # each probe's scheduled times: one per period, never after its start
        pr = [row for row in rows if row["kind"] == "probe" and int(row["worker"]) == cpu]
        due = np.array([float(row["deadline_s"]) for row in pr])
        assert np.allclose(np.diff(due), B / FS, atol=2e-6)
        assert all(float(row["start_s"]) >= float(row["deadline_s"]) - 2e-6 for row in pr)
    assert kinds.count("call") == tr["calls"] > 0
    calls = [row for row in rows if row["kind"] == "call"]
    assert sum(int(c["batch"]) for c in calls) >= res["n_blocks"] - 2 * 2
    assert tr["late_calls"] == sum(int(c["late"]) for c in calls)
    assert tr["late_calls"] == sum(tr[c] for c in CAUSES)
    assert 0 <= tr["probe_flagged_s"] <= tr["probe_span_s"] <= 0.4 + 2 * B / FS
    assert all(float(c["start_s"]) <= float(c["end_s"]) <= float(c["published_s"])
               for c in calls)


@pytest.mark.parametrize("args, msg", [
    (["--threads-scaling", "--trace", "x.csv"], "not allowed with --threads-scaling"),
    (["--streams", "2", "--trace", "/nonexistent/dir/x.csv"], "cannot write into"),
    (["--trace", "x.csv"], "needs --streams"),
])
def test_bench_trace_usage_errors(args, msg):
    r = subprocess.run([sys.executable, "-m", "latency_bench", *args], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr


def test_find_capacity_prints_the_ideal(tmp_path):
    path = tmp_path / "cap.csv"
    r = subprocess.run([sys.executable, "-m", "latency_bench", "--find-capacity",
                        "--max-streams", "1", "--seconds", "0.3", "--warmup-seconds", "0.1",
                        "--trace", str(path), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), r.stderr
    res = json.loads(r.stdout)
    assert res["ideal"] > 0 and res["bare_core_s_per_stream_s"] > 0
    assert res["ideal"] == pytest.approx(res["threads"] / res["bare_core_s_per_stream_s"])
    assert res["capacity_fraction"] == pytest.approx(res["capacity"] / res["ideal"])
    # timed before and after the trials; the capacity is a fraction of the larger
    assert res["ideal"] == pytest.approx(max(res["ideal_before"], res["ideal_after"]))
    assert min(res["ideal_before"], res["ideal_after"]) > 0
    assert "before the trials" in r.stderr
    assert (tmp_path / "cap.trial01.csv").exists()
    assert "of ideal" in r.stderr
