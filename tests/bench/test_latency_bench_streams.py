"""``python -m latency_bench --streams N`` / ``--find-capacity`` / ``--threads-scaling``:
the JSON report's keys and internal consistency (never wall-time thresholds)."""
import json
import os
import subprocess
import sys

import pytest


def _bench(*args, timeout=120):
    r = subprocess.run([sys.executable, "-m", "latency_bench", *args, "--json"],
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout), r


def _check_run(res, n, seconds):
    block, fs = res["block"], res["fs"]
    k = round(seconds * fs / block)
    assert res["streams"] == n and len(res["per_stream"]) == n
    assert res["budget_us"] == pytest.approx(10000.0)
    assert res["threads"] == (os.cpu_count() or 1)
    # every frame pushed in the measured window is either processed or counted as dropped
    assert res["n_blocks"] * block + res["drops"] == n * k * block
    assert 0 <= res["misses"] <= res["n_blocks"]
    assert 0 < res["latency_p50_us"] <= res["latency_p99_us"] <= res["latency_max_us"]
    assert 0 < res["p50_us"] <= res["p99_us"] <= res["max_us"]
    assert res["cpu_util"] > 0 and res["cpu_util_per_core"] <= res["cpu_util"]
    assert 1.0 <= res["batch_mean"] <= min(n, res["max_batch"])
    names = {p["name"] for p in res["per_stream"]}
    assert len(names) == n and res["worst_stream"] in names
    for p in res["per_stream"]:
        assert p["blocks"] * block + p["drops"] == k * block
        assert p["latency_p99_us"] <= res["latency_p99_us"]
        assert p["latency_max_us"] <= res["latency_max_us"]
    assert sum(p["misses"] for p in res["per_stream"]) == res["misses"]
    assert sum(p["drops"] for p in res["per_stream"]) == res["drops"]


def test_streams_json_report():
    res, r = _bench("--streams", "3", "--seconds", "0.5")
    for key in ("model", "fs", "block", "device", "threads", "n_blocks", "rtf", "p50_us",
                "p99_us", "max_us", "budget_us", "misses", "warmup_s", "streams",
                "latency_p50_us", "latency_p99_us", "latency_max_us", "drops", "cpu_util",
                "capacity", "per_stream", "worst_stream", "batch_mean"):
        assert key in res, key
    assert res["capacity"] is None
    assert res["block"] == 256 and res["source"] == "fanout"
    assert r.returncode == (1 if res["errors"] else 0)
    _check_run(res, 3, 0.5)


def test_per_stream_sources_and_text_report():
    r = subprocess.run([sys.executable, "-m", "latency_bench", "--streams", "2", "--seconds",
                        "0.3", "--warmup-seconds", "0.1", "--source", "per-stream"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    assert "per-stream source" in r.stdout and "worst stream" in r.stdout
    assert "dau1997-0" in r.stdout and "dau1997-1" in r.stdout


def test_find_capacity_small():
    res, r = _bench("--find-capacity", "--max-streams", "4", "--seconds", "0.3",
                    "--warmup-seconds", "0.2")
    trials = res["trials"]
    assert trials and all(1 <= t["streams"] <= 4 for t in trials)
    assert 0 <= res["capacity"] <= 4
    assert "trial" in r.stderr              # every trial is logged (stderr under --json)
    passing = [t["streams"] for t in trials if t["pass"]]
    assert res["capacity"] == max(passing, default=0)
    if res["capacity"]:
        assert res["streams"] == res["capacity"]
        assert res["misses"] == 0 and res["drops"] == 0
        _check_run(res, res["capacity"], 0.3)


def test_threads_scaling_small():
    res, r = _bench("--threads-scaling", "--streams", "2", "--seconds", "0.1",
                    "--warmup-seconds", "0.05")
    assert res["threads_compared"] == [1, max(2, os.cpu_count() or 1)]
    for kind in ("scheduler", "models_only"):
        runs = res[kind]["runs"]
        assert [x["threads"] for x in runs] == res["threads_compared"]
        assert all(x["blocks"] == 2 * res["blocks_per_stream"] for x in runs)
        assert res[kind]["ratio"] > 0
    assert res["ratio"] == res["scheduler"]["ratio"] and res["repeats"] == 3
    assert all(len(x["all_blocks_per_s"]) == 3 for x in res["scheduler"]["runs"])
    assert res["scheduler_overhead_us"] >= 0 and res["serial_bound_ratio"] > 0
    # efficiency: bare models' core time / the scheduler's, per stream-block, one worker
    one = [res[k]["runs"][0] for k in ("scheduler", "models_only")]
    per = [x["cpu_util"] * x["wall_s"] / x["blocks"] for x in one]
    assert res["efficiency"] == pytest.approx(per[1] / per[0], rel=1e-9)


@pytest.mark.parametrize("args", [["--budget-ms", "5"], ["--source", "per-stream"],
                                  ["--streams", "2", "--signal", "demo"],
                                  ["--find-capacity", "--threads-scaling"]])
def test_usage_errors(args):
    r = subprocess.run([sys.executable, "-m", "latency_bench", *args], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "error: argument" in r.stderr


def test_probe_stream_is_reported_apart():
    """--probe-budget-ms opens one more stream with its own budget: reported apart, with
    every block measured and its misses counted against its own budget."""
    res, _ = _bench("--streams", "2", "--seconds", "0.5", "--probe-budget-ms", "5")
    k = round(0.5 * res["fs"] / res["block"])
    pr = res["probe"]
    assert res["streams"] == 2 and res["streams_total"] == 3 and len(res["per_stream"]) == 3
    assert pr["name"].endswith("-probe") and pr["budget_us"] == 5000.0
    assert [p["budget_us"] for p in res["per_stream"]].count(10000.0) == 2
    assert pr["blocks"] == k and res["n_blocks"] == 3 * k
    assert 0 <= pr["misses"] <= pr["blocks"]
    assert (pr["misses"] > 0) == (pr["latency_max_us"] > 5000.0)
    assert sum(p["misses"] for p in res["per_stream"]) == res["misses"]


def test_realtime_option_is_reported():
    """--realtime PRIO sets the workers' SCHED_FIFO priority (0: normal priority); the
    report says what the OS granted."""
    res, _ = _bench("--streams", "2", "--seconds", "0.3", "--realtime", "0")
    assert res["realtime"] == {"priority": None, "workers": 0, "refused": None}
    res, _ = _bench("--streams", "2", "--seconds", "0.3", "--realtime", "3")
    rt = res["realtime"]
    assert rt["priority"] == 3
    assert rt["workers"] == res["threads"] or rt["refused"]
    r = subprocess.run([sys.executable, "-m", "latency_bench", "--realtime", "3"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--realtime" in r.stderr


def test_pass_criterion_with_a_miss_rate():
    """A trial passes with 0 misses by default; --max-miss-rate allows misses up to that
    fraction of the measured stream-blocks; drops and errors never pass."""
    from latency_bench.streams import passed
    r = {"misses": 0, "drops": 0, "errors": [], "n_blocks": 2000, "streams": 2,
         "seconds": 1000 * 256 / 48000, "fs": 48000, "block": 256}
    assert passed(r)
    assert not passed(dict(r, misses=1))
    assert passed(dict(r, misses=2), 1e-3) and not passed(dict(r, misses=3), 1e-3)
    assert not passed(dict(r, drops=256), 1.0)
    assert not passed(dict(r, errors=["x"]), 1.0)
    assert not passed(dict(r, n_blocks=1999), 1.0)     # a block not measured
    res, _ = _bench("--find-capacity", "--max-streams", "2", "--seconds", "0.2",
                    "--warmup-seconds", "0.1", "--max-miss-rate", "0.5")
    assert res["max_miss_rate"] == 0.5
    for t in res["trials"]:
        n_blocks = t["streams"] * round(0.2 * res["fs"] / res["block"])
        assert t["pass"] == (t["misses"] <= 0.5 * n_blocks and t["drops"] == 0)


def test_r128_meter_capacity_beside_the_bare_meter():
    """``--model r128 --find-capacity``: the R128 meter's streams (stereo by default, one
    call per stream: it does not batch) and the ideal of the bare meter, one per stream."""
    res, r = _bench("--model", "r128", "--find-capacity", "--max-streams", "3", "--seconds",
                    "0.3", "--warmup-seconds", "0.2", "--block", "4800", "--budget-ms", "200")
    assert res["model"] == "r128" and res["channels"] == 2
    assert 0 <= res["capacity"] <= 3
    assert res["ideal"] > 0 and res["ideal_of"] == "bare meter, one per stream"
    assert res["capacity_fraction"] == pytest.approx(res["capacity"] / res["ideal"])
    assert "bare meter, one per stream" in r.stderr
    if res["capacity"]:
        assert res["batch_mean"] == 1.0          # a meter is one programme: calls of one
        assert all(p["name"].startswith("r128-") for p in res["per_stream"])


def test_r128_single_stream_and_refusals():
    res, _ = _bench("--model", "r128", "--seconds", "0.5", "--block", "480")
    assert res["model"] == "r128" and res["channels"] == 2 and res["n_blocks"] == 50
    assert 0 < res["rtf"] < 1
    r = subprocess.run([sys.executable, "-m", "latency_bench", "--model", "r128", "--batch",
                        "2", "--seconds", "0.1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "does not batch" in r.stderr
