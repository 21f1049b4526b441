"""``python -m latency_bench --cluster local``: the JSON report's keys and internal
consistency on a small run (never wall-time thresholds)."""
import json
import subprocess
import sys

import pytest

pytest.importorskip("ray", reason="latency_bench --cluster needs Ray: "
                                  "pip install 'rtamt[cluster]'")


@pytest.mark.timeout(240)
def test_cluster_report_beside_the_local_scheduler():
    r = subprocess.run([sys.executable, "-m", "latency_bench", "--cluster", "local",
                        "--workers", "2", "--streams", "2", "--seconds", "0.4",
                        "--warmup-seconds", "0.1", "--fs", "16000", "--find-capacity",
                        "--max-streams", "2", "--json"],
                       capture_output=True, text=True, timeout=230)
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout.strip().splitlines()[-1])   # Ray's raylet prints to stdout too
    blocks = 2 * round(0.4 * 16000 / 256)
    for side in ("local", "cluster"):
        t = rep[side]
        assert t["streams"] == 2 and t["blocks"] + t["missing"] == blocks
        assert 0 < t["p50_ms"] <= t["p99_ms"] <= t["max_ms"]
    assert rep["added_ms"]["p99"] == pytest.approx(rep["cluster"]["p99_ms"]
                                                   - rep["local"]["p99_ms"])
    assert rep["workers"] == 2 and 0 <= rep["capacity_cluster"] <= 2
    assert rep["capacity_per_worker"] == rep["capacity_cluster"] / 2
    rec = rep["recovery"]
    assert rec is not None and rec["seconds"] > 0 and rec["streams"] >= 1
    assert not rec["inexact"] and not rec["unplaced"]
    assert "the cluster adds" in r.stderr and "recovery after SIGKILL" in r.stderr
