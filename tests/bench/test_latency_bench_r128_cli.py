"""``python -m latency_bench.r128_cli``: ``rtamt loudness`` against ffmpeg's ebur128 filter,
the report's plumbing on small inputs (fields, units, both tools measuring the same
files), not the speed: that is measured on a quiet machine (docs/performance.md)."""
from __future__ import annotations

import json
import shutil

import pytest

from latency_bench import r128_cli

TIMED = ("wall_s", "best_s", "median_s", "cpu_s", "max_rss_mb", "x_real_time", "rtf")


def _timed(s, rounds):
    assert set(TIMED) <= set(s), s
    assert len(s["wall_s"]) == rounds and all(w > 0 for w in s["wall_s"])
    assert s["best_s"] == min(s["wall_s"]) <= s["median_s"]
    assert len(s["cpu_s"]) == rounds and all(c > 0 for c in s["cpu_s"])
    assert s["max_rss_mb"] > 1 and s["x_real_time"] > 0 and s["rtf"] > 0


def test_report_fields_on_small_inputs(tmp_path, capsys):
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed")
    assert r128_cli.main(["--seconds", "4", "--files", "3", "--file-seconds", "1",
                          "--repeat", "2", "--dir", str(tmp_path), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["machine"] and rep["ffmpeg"].startswith("ffmpeg version") and rep["repeat"] == 2
    lo, ma, st = rep["long"], rep["many"], rep["startup"]
    assert lo["seconds"] == 4
    for k in ("rtamt", "ffmpeg"):
        _timed(lo[k], 2)
        _timed(st[k], 2)
    assert lo["ratio"] == round(lo["ffmpeg"]["best_s"] / lo["rtamt"]["best_s"], 3)
    # both tools measured the same audio (ffmpeg prints one decimal)
    a, b = lo["figures"]["rtamt"], lo["figures"]["ffmpeg"]
    assert abs(a["I"] - b["I"]) <= 0.1 and abs(a["TP"] - b["TP"]) <= 0.3, (a, b)
    assert (ma["files"], ma["file_seconds"], ma["jobs"]) == (3, 1.0, 2)
    for k in ("rtamt_jobs2", "rtamt_jobs1", "ffmpeg_per_file", "ffmpeg_per_file_2_at_a_time"):
        _timed(ma[k], 2)
    assert ma["ratio"] == round(ma["ffmpeg_per_file"]["best_s"] / ma["rtamt_jobs2"]["best_s"], 3)
    assert ma["ratio_parallel"] > 0 and st["ratio"] > 0
    assert len(list((tmp_path / "many_3x1s").glob("*.wav"))) == 3     # --dir keeps them
    tp = rep["true_peak"]
    assert 0 < tp["true_peak_rtf"] < tp["meter_rtf"] and 0 < tp["share_of_meter"] < 1
    assert 0 < tp["share_of_long_run"] < 1
    text = r128_cli.describe(rep)
    assert "ratio ffmpeg/rtamt" in text and "true peak" in text


def test_ffmpeg_summary_is_parsed():
    err = ("[Parsed_ebur128_0 @ 0x1] Summary:\n\n  Integrated loudness:\n"
           "    I:         -23.0 LUFS\n    Threshold: -33.0 LUFS\n\n  Loudness range:\n"
           "    LRA:         4.5 LU\n"
           "    Threshold: -43.0 LUFS\n\n  True peak:\n    Peak:       -1.2 dBFS\n")
    assert r128_cli.ffmpeg_figures(err) == {"I": -23.0, "LRA": 4.5, "TP": -1.2}
