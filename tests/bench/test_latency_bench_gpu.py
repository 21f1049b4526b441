"""The plumbing of ``python -m latency_bench.gpu`` (issue 28), so that the prepared GPU check
cannot rot between GPU runs: without CUDA it is one line and exit 2; ``--device cpu`` runs
every step with tiny sizes in Triton's interpreter and writes gpu.json / gpu.md with every
section filled; a step that hangs is killed at its limit and the other steps still report; the
tests step finds every test marked ``cuda`` or ``triton`` wherever it lives under tests/."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def _run(*args, timeout=900):
    env = dict(os.environ)
    env.pop("RTAMT_TEST_DEVICE", None)
    return subprocess.run([sys.executable, "-m", "latency_bench.gpu", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_without_cuda_it_is_one_line_and_exit_2(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    r = _run("--out", str(tmp_path / "o"))
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "CUDA" in lines[0] and "--device cpu" in lines[0]


def test_plumbing_in_the_interpreter_fills_every_section(tmp_path):
    out = tmp_path / "gpu"
    r = _run("--out", str(out), "--device", "cpu")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((out / "gpu.json").read_text())
    assert {k: v["status"] for k, v in res["steps"].items()} == {
        "env": "ok", "tests": "ok", "gpu_timing": "ok", "capacity_king2019": "ok",
        "cpu_timing": "ok", "cpu_capacity": "ok"}
    assert res["env"]["torch"] == torch.__version__ and res["env"]["numba"]
    # the tests ran through the recording plugin and pytest's junit report
    assert res["tests"]["counts"].get("passed", 0) >= 2 and not res["tests"]["failures"]
    assert (out / "junit.xml").stat().st_size > 0
    # every model x dtype x batch timed on the device and on the CPU, plus the largest batch
    cfg = res["config"]
    want = {(m[0], d, b) for m in cfg["models"] for d in cfg["dtypes"] for b in cfg["batches"]}
    gpu = res["gpu_timing"]["rows"]
    assert {(r["model"], r["dtype"], r["batch"]) for r in gpu if not r.get("largest")} == want
    assert {(r["model"], r["dtype"], r["batch"]) for r in res["cpu_timing"]["rows"]} == want
    assert sum(bool(r.get("largest")) for r in gpu) == len(cfg["models"]) * len(cfg["dtypes"])
    assert all(r["stream_s_per_s"] > 0 and r["e2e_us_p50"] > 0 for r in gpu)
    cap = res["capacity"]["king2019"]
    assert cap["trials"] and cap["confirm"]["pass"] and cap["capacity"] == 2
    # the CPU scheduler's capacity beside them: search, ideal and fraction from one run,
    # the confirming trial and the traced trial at 0.8 of the ideal
    cc = res["cpu_capacity"]
    (row,) = cc["rows"]
    assert row["model"] == "king2019" and row["capacity"] == 2 and row["ideal"] > 0
    assert row["fraction"] == pytest.approx(2 / row["ideal"])
    assert row["trials"] and row["confirmed"] and row["confirm"]["misses"] == 0
    assert row["trace_trial"]["trace"]["calls"] > 0 and not row["trace_trial"]["error"]
    assert (out / "cpu_capacity_king2019.trace.npz").stat().st_size > 0
    # nothing on this path imported the packages the GPU machine does not have
    assert res["forbidden_modules"] == []
    md = (out / "gpu.md").read_text()
    assert "**Throughput**" in md and "**Capacity, king2019**" in md and "2 passed" in md
    assert "**CPU scheduler capacity**" in md and "| king2019 | 2 | yes |" in md
    assert md.count("| dau1997 |") == len(cfg["dtypes"]) * (len(cfg["batches"]) + 1)


def test_a_step_past_its_limit_is_killed_and_the_rest_still_report(tmp_path):
    out = tmp_path / "gpu"
    r = _run("--out", str(out), "--device", "cpu", "--limit", "tests=2", "--skip",
             "cpu_timing", "--skip", "capacity_king2019", "--skip", "cpu_capacity",
             timeout=600)
    assert r.returncode == 1
    res = json.loads((out / "gpu.json").read_text())
    st = res["steps"]
    assert st["tests"]["status"].startswith("timed out") and st["tests"]["wall_s"] < 15
    assert st["gpu_timing"]["status"] == "ok" and res["gpu_timing"]["rows"]
    assert st["cpu_timing"]["status"].startswith("skipped")
    assert "timed out" in (out / "gpu.md").read_text()
    assert "not clean" in r.stdout


def test_rtamt_apps_is_linked_when_it_is_not_installed(tmp_path, monkeypatch):
    import importlib.util

    from latency_bench import gpu
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "rtamt_apps" else real(name, *a))
    env = gpu._child_env({"device": "cuda"}, tmp_path)
    link = tmp_path / "pyshim" / "rtamt_apps"
    assert link.resolve() == ROOT / "apps"
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(ROOT), str(tmp_path / "pyshim")]
    assert env["TRITON_INTERPRET"] == "0" and env["RTAMT_TEST_DEVICE"] == "cuda"


def _collected(*args):
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                        "no:cacheprovider", *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return {line for line in r.stdout.splitlines() if "::" in line}


def test_the_tests_step_finds_every_marked_test_wherever_it_lives():
    """The step reads the test files' text (``device_test_files``) instead of importing every
    test module, then selects by marker: every test that pytest marks ``cuda`` or ``triton``
    anywhere under tests/ is in those files, and every test of a module that imports the
    Triton test helpers is marked."""
    from latency_bench import gpu
    files = gpu.device_test_files()
    marked = _collected("-m", gpu.DEVICE_MARKERS, "tests")
    assert {t.split("::")[0] for t in marked} <= set(files)
    assert marked == _collected("-m", gpu.DEVICE_MARKERS, *files)
    helper_users = [f for f in files if any(line.startswith("from _triton import") for line in
                                            (ROOT / f).read_text().splitlines())]
    assert len(helper_users) >= 8
    assert _collected(*helper_users) <= marked
    # a test marked by hand in a module that does not import the helpers, and the toy
    # stage's case of the Triton sweep (it enters the sweep from its own files)
    assert any("test_loudness_stages.py::test_frame_stage_triton_path" in t for t in marked)
    assert any("test_stages_triton.py::" in t and "onepole" in t for t in marked)
