"""No numba kernel is compiled or loaded after an app is ready (issue 38 item 6).

Each app runs as a subprocess under ``tests/support/_compiles.py``, which records every
overload numba adds to a dispatcher (a kernel compiled, or loaded from the disk cache:
both go through ``Dispatcher.add_overload``, so the check does not depend on the cache's
state) and the moment the app is ready (its source starts; ``process``: its first block).
Before: ``meter`` loaded the Parallel's input check and the gating statistics
(``hist_integrated``, ``hist_lra``; on a cold cache it compiled ``hist_add_many`` and
``hist_integrated`` there, 12-24 missed blocks, 229 ms), ``stream --per-channel`` the
FanOut's intake ``take_rows`` on the first push.
"""
from __future__ import annotations

import re

import pytest
from _compiles import late_kernels

DEMO = ["--input", "demo", "--seconds", "1", "--fast"]
APPS = {
    "process": ["process", "--demo"],
    "stream": ["stream", *DEMO],
    "stream-channels": ["stream", *DEMO, "--channels", "2"],
    "stream-per-channel": ["stream", *DEMO, "--per-channel", "--channels", "2"],
    # 3.5 s: past the first short-term value (3 s), where the loudness range starts
    "meter": ["meter", "--input", "demo", "--seconds", "3.5", "--fast", "--spl-ref", "100"],
    "meter-per-channel": ["meter", "--input", "demo", "--seconds", "3.5", "--fast",
                          "--spl-ref", "100", "--per-channel", "--channels", "2"],
}


def _check(proc, rec):
    assert proc.returncode == 0, proc.stderr
    assert rec is not None and rec["ready"] is not None, (proc.stdout, proc.stderr)
    # the recorder saw the kernels loaded before (it cannot pass by seeing nothing)
    assert any(".all_" in e for e in rec["early"]), rec["early"]
    assert rec["late"] == [], "kernels compiled or loaded after the app was ready:\n" + \
        "\n".join(rec["late"])


@pytest.mark.parametrize("app", sorted(APPS))
def test_no_kernel_loads_after_the_app_is_ready(app, tmp_path, monkeypatch):
    monkeypatch.setenv("RTAMT_CALIBRATION", str(tmp_path / "none.json"))
    proc, rec = late_kernels(APPS[app], tmp_path)
    _check(proc, rec)


def test_monitor_loads_no_kernel_after_it_is_ready(tmp_path, monkeypatch):
    pytest.importorskip("pyqtgraph")
    pytest.importorskip("PySide6")
    monkeypatch.setenv("RTAMT_CALIBRATION", str(tmp_path / "none.json"))
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    proc, rec = late_kernels(["monitor", "--input", "demo", "--seconds", "1", "--spl-ref",
                              "100", "--screenshot", str(tmp_path / "m.png")], tmp_path)
    _check(proc, rec)


def test_meter_on_an_empty_cache_compiles_everything_before_it_is_ready(tmp_path,
                                                                        monkeypatch):
    """A first run (numba's cache folder empty): every kernel compiles during the warm-up,
    which says so, none after, and no block waits for a compile (one takes 0.1-2 s on
    two cores; the meter's budget is its block period, 16 ms)."""
    monkeypatch.setenv("RTAMT_CALIBRATION", str(tmp_path / "none.json"))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba-cache"))
    proc, rec = late_kernels(["meter", "--input", "demo", "--seconds", "3.5", "--spl-ref",
                              "100"], tmp_path)
    _check(proc, rec)
    assert "compiling kernels for bs1770" in proc.stderr, proc.stderr
    assert any((tmp_path / "numba-cache").rglob("*.nbi"))         # it compiled: cold
    final = [ln for ln in proc.stdout.splitlines() if ln.startswith("final:")]
    assert len(final) == 1, proc.stdout
    worst = float(re.search(r"latency p50/p99/max [\d.]+/[\d.]+/([\d.]+) ms", final[0])[1])
    assert worst < 100.0, final[0]
