"""``rtamt loudness``'s report, totals, compliance, batches, LRA hop and time series
(issue 39, items 2-5), and the R128 fields of ``rtamt meter --json``; every expected
value from tests/support/_r128ref.py (the documents' definitions) or from another tool
(ffmpeg's ebur128 filter, libebur128 through pyebur128), never from rtamt's own output:

* every report field in the table, JSON and CSV, and the reason of an empty I;
* ``--total``: the gated loudness of all the files' blocks (-20 and -26 LUFS files give
  -22.0, a -36 LUFS one is gated out), the LRA over both, the maximum peaks;
* ``--target`` (offset and gain), ``--tolerance``, ``--max-true-peak``, ``compliant`` and
  the exit status 3 (1 wins when a file failed);
* a batch with a missing path, an .m4a and a corrupt file among good ones: a row each,
  exit 1; the .m4a measured through PyAV as ffmpeg's ebur128 filter measures it (or
  listed as skipped, with the reason, without PyAV);
* ``--lra-hop 10`` reproduces libebur128's LRA;
* ``--series``: M, S and the running I every 100 ms (CSV, JSON Lines), written to a
  temporary name and renamed at the end: nothing under the final name before, nothing
  left after an interrupt or SIGTERM, an older file unchanged.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import soundfile as sf

from rtamt_apps import loudness as app
from rtamt_apps.cli import main

from _helpers import entry_point
from _r128ref import FS, integrated, lra, report, tone

#: the CLI rounds to 0.01; the histogram mode's percentiles are 0.01 LU bin means
TOL = 0.016
FFMPEG = shutil.which("ffmpeg")


def _wav(path, x):
    sf.write(str(path), np.asarray(x).T, FS, subtype="FLOAT")
    return str(path)


def _run(capsys, *argv):
    capsys.readouterr()
    rc = main(["loudness", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def _json(capsys, *argv):
    rc, out, err = _run(capsys, "--json", *argv)
    return rc, [json.loads(ln) for ln in out.splitlines()], err


def _table(out):
    """The table's rows as {file name: {header: cell}} (headers of one or two words)."""
    lines = out.splitlines()
    heads = re.findall(r"\s*(\S+(?: (?:LUFS|LU|dBTP|dBFS|lo|hi|max|gate))?)", lines[0])
    rows = {}
    for ln in lines[1:]:
        cells = ln.split()
        name = next(c for c in cells if "/" in c or c == "total")
        rows[name.rsplit("/", 1)[-1]] = dict(zip(heads, cells))
    return heads, rows


def _programme():
    """Three plateaus of 8 s, the right channel 6 dB down: every field defined."""
    return tone([-20.0, -32.0, -26.0], 8.0, gains=[1.0, 0.5])


# ---------------------------------------------------------------- item 2: the report
def test_every_report_field_in_json_csv_and_table(tmp_path, capsys):
    x = _programme()
    f = _wav(tmp_path / "prog.wav", x)
    ref = report(x)
    rc, (rec,), _ = _json(capsys, f)
    assert rc == 0 and rec["status"] == "measured"
    want = {"integrated_lufs": ref["integrated"], "lra_lu": ref["lra"],
            "lra_low_lufs": ref["lra_low"], "lra_high_lufs": ref["lra_high"],
            "max_momentary_lufs": ref["max_momentary"],
            "max_short_term_lufs": ref["max_short_term"],
            "relative_gate_lufs": ref["relative_gate"], "lra_gate_lufs": ref["lra_gate"],
            "sample_peak_dbfs": ref["sample_peak_channels"].max(), "absolute_gate_lufs": -70.0,
            "true_peak_dbtp": -20.0, "duration_s": 24.0}
    for k, v in want.items():
        assert rec[k] == pytest.approx(v, abs=TOL), k
    assert rec["true_peak_channels_dbtp"] == [pytest.approx(-20.0, abs=0.02),
                                              pytest.approx(-26.02, abs=0.02)]
    assert rec["integrated_reason"] is None and rec["fs"] == FS and rec["channels"] == 2
    assert list(rec) == [k for k in app.FIELDS if k != "error"]
    # CSV: the same values, the channels' true peaks joined by ';'
    rc, out, _ = _run(capsys, "--csv", f)
    (row,) = list(csv.DictReader(io.StringIO(out)))
    assert list(row) == list(app.FIELDS)
    for k, v in want.items():
        assert float(row[k]) == pytest.approx(v, abs=TOL), k
    assert [float(v) for v in row["true_peak_channels_dbtp"].split(";")] == \
        rec["true_peak_channels_dbtp"]
    assert row["integrated_reason"] == "" and row["status"] == "measured"
    # the table: one decimal
    rc, out, _ = _run(capsys, f)
    heads, rows = _table(out)
    cells = rows["prog.wav"]
    for head, k in (("I LUFS", "integrated_lufs"), ("LRA LU", "lra_lu"),
                    ("LRA lo", "lra_low_lufs"), ("LRA hi", "lra_high_lufs"),
                    ("M max", "max_momentary_lufs"), ("S max", "max_short_term_lufs"),
                    ("TP dBTP", "true_peak_dbtp"), ("SP dBFS", "sample_peak_dbfs"),
                    ("abs gate", "absolute_gate_lufs"), ("rel gate", "relative_gate_lufs"),
                    ("LRA gate", "lra_gate_lufs"), ("s", "duration_s")):
        assert float(cells[head]) == pytest.approx(want[k], abs=0.051), head
    assert cells["TP/ch dBTP"] == "-20.0,-26.0"


@pytest.mark.parametrize("x, reason", [
    (tone([-20.0], 0.3), "too short"),
    (tone([None], 2.0), "below the absolute gate"),
    (tone([-75.0], 4.0), "below the absolute gate"),
], ids=["0.3 s", "silence", "-75 dBFS"])
def test_reason_of_an_empty_integrated_loudness(tmp_path, capsys, x, reason):
    f = _wav(tmp_path / "q.wav", x)
    rc, (rec,), _ = _json(capsys, f)
    assert rc == 0 and rec["integrated_lufs"] is None and rec["integrated_reason"] == reason
    rc, out, _ = _run(capsys, "--csv", f)
    assert next(csv.DictReader(io.StringIO(out)))["integrated_reason"] == reason
    rc, out, _ = _run(capsys, f)
    assert out.splitlines()[1].endswith(f"q.wav  (I: {reason})")


# ---------------------------------------------------------------- item 3: totals
def _pooled(*xs):
    """The total from the definition: every file's gating blocks and short-term values
    gated together (no window across files)."""
    refs = [report(x) for x in xs]
    i, gate = integrated(np.concatenate([r["blocks"] for r in refs]))
    st = np.concatenate([r["short_terms"][~np.isnan(r["short_terms"])] for r in refs])
    rng, lo, hi, lgate = lra(st)
    return {"integrated_lufs": i, "relative_gate_lufs": gate, "lra_lu": rng,
            "lra_low_lufs": lo, "lra_high_lufs": hi, "lra_gate_lufs": lgate,
            "max_momentary_lufs": max(r["max_momentary"] for r in refs),
            "sample_peak_dbfs": max(r["sample_peak_channels"].max() for r in refs)}


@pytest.mark.parametrize("quiet", [-26.0, -36.0])
def test_total_gates_the_blocks_of_all_files(tmp_path, capsys, quiet):
    """-20 and -26 LUFS files of 10 s: -22.04 LUFS (the loudness of the mean power), not
    the mean of the two (-23.0); with -36 instead, that file's blocks fall under the
    relative gate (-32.9) and the total is -20.0."""
    xa, xb = tone([-20.0], 10.0), tone([quiet], 10.0)
    fa, fb = _wav(tmp_path / "a.wav", xa), _wav(tmp_path / "b.wav", xb)
    rc, recs, _ = _json(capsys, "--total", fa, fb, tmp_path / "missing.wav")
    assert rc == app.EXIT_FAILED                 # the missing file; the total has the others
    a, b, missing, total = recs
    assert missing["status"] == "failed" and total["status"] == "total"
    assert total["file"] is None and total["files"] == 2
    want = _pooled(xa, xb)
    for k, v in want.items():
        assert total[k] == pytest.approx(v, abs=TOL), k
    closed = 10 * math.log10((10 ** (a["integrated_lufs"] / 10)
                              + 10 ** (b["integrated_lufs"] / 10)) / 2)
    if quiet == -26.0:
        assert total["integrated_lufs"] == pytest.approx(closed, abs=TOL)
        assert total["integrated_lufs"] == pytest.approx(-22.04, abs=0.02)
        assert total["lra_lu"] == pytest.approx(6.0, abs=0.02)
    else:
        assert total["integrated_lufs"] == pytest.approx(a["integrated_lufs"], abs=TOL)
    assert abs(total["integrated_lufs"] - (a["integrated_lufs"] + b["integrated_lufs"]) / 2) > 0.9
    assert total["true_peak_dbtp"] == max(a["true_peak_dbtp"], b["true_peak_dbtp"])
    assert total["duration_s"] == 20.0
    # CSV: the total's row has an empty file and status 'total'; the table names it
    rc, out, _ = _run(capsys, "--csv", "--total", fa, fb)
    row = list(csv.DictReader(io.StringIO(out)))[-1]
    assert row["status"] == "total" and row["file"] == ""
    assert float(row["integrated_lufs"]) == total["integrated_lufs"]
    rc2, out2, _ = _run(capsys, "--csv", "--total", "--jobs", "2", fa, fb)
    assert (rc2, out2) == (rc, out)        # the workers' statistics merged alike
    rc, out, _ = _run(capsys, "--total", fa, fb)
    assert out.splitlines()[-1].endswith("total (2 files)") and rc == 0
    assert float(out.splitlines()[-1].split()[0]) == round(total["integrated_lufs"], 1)


def test_target_offset_gain_and_tolerance(tmp_path, capsys):
    xa, xb = tone([-20.0], 5.0), tone([-23.4], 5.0)
    fa, fb = _wav(tmp_path / "a.wav", xa), _wav(tmp_path / "b.wav", xb)
    ia, ib = report(xa)["integrated"], report(xb)["integrated"]
    rc, (a, b), err = _json(capsys, "--target", "-23", fa, fb)
    assert rc == app.EXIT_NONCOMPLIANT == 3
    assert a["target_offset_lu"] == pytest.approx(-23 - ia, abs=TOL)
    assert a["target_gain"] == pytest.approx(10 ** ((-23 - ia) / 20), abs=5e-4)
    assert b["target_offset_lu"] == pytest.approx(-23 - ib, abs=TOL)
    # EBU R 128's production tolerance, +-1 LU: -20 fails, -23.4 passes
    assert (a["compliant"], b["compliant"]) == (False, True)
    assert "1 row(s) not compliant (--target -23 LUFS +-1 LU)" in err
    rc, (a, b), _ = _json(capsys, "--target", "-23", "--tolerance", "0.2", fa, fb)
    assert rc == 3 and (a["compliant"], b["compliant"]) == (False, False)
    rc, (a, b), _ = _json(capsys, "--target", "-21.8", "--tolerance", "2", fa, fb)
    assert rc == 0 and a["compliant"] and b["compliant"]
    # a file without an integrated loudness cannot meet a target
    fq = _wav(tmp_path / "q.wav", tone([None], 1.0))
    rc, (q,), _ = _json(capsys, "--target", "-23", fq)
    assert rc == 3 and q["compliant"] is False and q["target_offset_lu"] is None
    # without --target / --max-true-peak: no judgement
    rc, (a,), _ = _json(capsys, fa)
    assert rc == 0 and a["compliant"] is a["target_offset_lu"] is a["target_gain"] is None


def test_max_true_peak_and_exit_status(tmp_path, capsys):
    fa = _wav(tmp_path / "a.wav", tone([-20.0], 5.0))        # true peak -20 dBTP
    rc, (a,), err = _json(capsys, "--max-true-peak", "-21", fa)
    assert rc == 3 and a["compliant"] is False and "--max-true-peak -21 dBTP" in err
    rc, (a,), _ = _json(capsys, "--max-true-peak", "-19.9", fa)
    assert rc == 0 and a["compliant"] is True and a["target_offset_lu"] is None
    # both: the true peak passes, the loudness does not
    rc, (a,), _ = _json(capsys, "--max-true-peak", "-19.9", "--target", "-16", fa)
    assert rc == 3 and a["compliant"] is False
    # a file that failed wins over a row that is not compliant: 1
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF0000WAVEjunk" * 8)
    rc, recs, _ = _json(capsys, "--max-true-peak", "-21", fa, bad)
    assert rc == 1 and recs[0]["compliant"] is False and recs[1]["status"] == "failed"
    # the table: offset, gain and ok columns
    rc, out, _ = _run(capsys, "--target", "-23", "--max-true-peak", "-1", fa)
    heads, rows = _table(out)
    off = -23 - report(tone([-20.0], 5.0))["integrated"]
    assert rows["a.wav"]["offset"] == f"{off:+.1f}" and rows["a.wav"]["ok"] == "NO"
    assert rows["a.wav"]["gain"] == f"{10 ** (off / 20):.3f}"


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_true_peak_option_chooses_the_interpolator(tmp_path, capsys, jobs):
    """EBU Tech 3341 case 17's tone (fs/6 at phase pi/3, peak -6.02 dBFS between samples,
    sample peak -7.27 dBFS; 0.1 s raised-cosine fades, so that no edge overshoots):
    ``--true-peak sinc`` (the default) reads -6.02 dBTP within 0.04 dB, ``--true-peak
    bs1770`` (Annex 2's 4x filter) the -6.3 dBTP that filter gives, the same in one process
    and with two workers (whose warm-up follows the option)."""
    t = np.arange(3 * FS) / FS
    fade = 0.5 - 0.5 * np.cos(np.pi * np.arange(FS // 10) / (FS // 10))
    env = np.concatenate([fade, np.ones(t.size - 2 * fade.size), fade[::-1]])
    x = 0.5 * np.sin(2 * np.pi * (FS / 6) * t + np.pi / 3) * env
    files = [_wav(tmp_path / f"{i}.wav", np.stack([x, x])) for i in range(2)]
    rc, recs, err = _json(capsys, "--jobs", jobs, *files)
    assert rc == 0, err
    assert all(abs(r["true_peak_dbtp"] - 20 * np.log10(0.5)) <= 0.04 for r in recs), recs
    rc, recs, err = _json(capsys, "--jobs", jobs, "--true-peak", "bs1770", *files)
    assert rc == 0, err
    assert all(-6.4 <= r["true_peak_dbtp"] <= -6.2 for r in recs), recs


@pytest.mark.parametrize("argv, words", [
    (["--tolerance", "1", "x.wav"], "--tolerance: needs --target"),
    (["--target", "5", "x.wav"], "argument --target"),
    (["--lra-hop", "11", "x.wav"], "argument --lra-hop"),
    (["--series", "s.txt", "x.wav"], "argument --series"),
    (["--series", "/no/such/dir/s.csv", "x.wav"], "no such directory"),
])
def test_new_options_usage_errors(capsys, argv, words):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == "" and words in err and err.count("\n") == 1


# ---------------------------------------------------------------- item 4: batches
def _m4a(path, x):
    """AAC in MP4 (ffmpeg's native encoder) from the float WAV of ``x``."""
    src = _wav(path.with_suffix(".src.wav"), x)
    subprocess.run([FFMPEG, "-hide_banner", "-loglevel", "error", "-y", "-i", src, "-c:a",
                    "aac", "-b:a", "256k", str(path)], check=True, timeout=120)
    os.unlink(src)
    return str(path)


def _ffmpeg_ebur128(path) -> dict:
    """I and the relative gates of I and LRA ("Threshold") of ffmpeg's ebur128 filter
    (its summary: 0.1 LU resolution)."""
    r = subprocess.run([FFMPEG, "-hide_banner", "-nostats", "-i", str(path), "-af",
                        "ebur128=peak=true", "-f", "null", "-"], capture_output=True,
                       text=True, timeout=120)
    summary = r.stderr.rsplit("Summary:", 1)[1]
    i, lra = summary.split("Loudness range:")
    num = r"(-?[\d.]+)"
    return {"I": float(re.search(rf"I:\s+{num} LUFS", i).group(1)),
            "gate": float(re.search(rf"Threshold:\s+{num} LUFS", i).group(1)),
            "lra_gate": float(re.search(rf"Threshold:\s+{num} LUFS", lra).group(1))}


@pytest.fixture
def batch(tmp_path):
    """good.wav, prog.m4a, corrupt.wav and notes.txt in a folder."""
    if FFMPEG is None:
        pytest.skip("ffmpeg is not installed (.ci/system-deps installs it)")
    d = tmp_path / "batch"
    d.mkdir()
    _wav(d / "good.wav", tone([-23.0], 4.0))
    rng = np.random.default_rng(7)
    env = np.repeat(10 ** (np.array([-6.0, -18.0, -10.0, -2.0]) / 20), 3 * FS)
    noise = rng.standard_normal((2, env.size)) * env * 0.05
    _m4a(d / "prog.m4a", noise)
    (d / "corrupt.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk" * 20)
    (d / "notes.txt").write_text("not audio")
    return d


def test_batch_missing_m4a_corrupt_every_file_a_row(batch, capsys):
    """Issue 39 acceptance: a missing path, an .m4a and a corrupt file among good ones:
    every file gets a row, exit status 1; the .m4a is measured (PyAV) within 0.06 LU of
    ffmpeg's ebur128 filter on the same file (its summary is rounded to 0.1 LU: +-0.05;
    both decode with FFmpeg's AAC decoder and gate exactly or in 0.01 LU bins: +-0.01)."""
    pytest.importorskip("av")
    missing = batch / "gone.wav"
    rc, recs, err = _json(capsys, batch, missing, batch / "good.wav")
    assert rc == 1
    got = {r["file"].rsplit("/", 1)[-1]: r for r in recs}
    assert [r["file"].rsplit("/", 1)[-1] for r in recs] == [
        "corrupt.wav", "good.wav", "prog.m4a", "gone.wav", "good.wav"]
    assert got["corrupt.wav"]["status"] == "failed" and "not a readable" in \
        got["corrupt.wav"]["error"]
    assert got["gone.wav"] == {"file": str(missing), "status": "failed",
                               "error": f"{missing}: no such file or directory"}
    m4a = got["prog.m4a"]
    assert m4a["status"] == "measured" and m4a["channels"] == 2 and m4a["fs"] == FS
    ff = _ffmpeg_ebur128(batch / "prog.m4a")
    assert abs(m4a["integrated_lufs"] - ff["I"]) <= 0.06, (m4a, ff)
    # the gates ffmpeg prints as thresholds
    assert abs(m4a["relative_gate_lufs"] - ff["gate"]) <= 0.06, (m4a, ff)
    assert abs(m4a["lra_gate_lufs"] - ff["lra_gate"]) <= 0.06, (m4a, ff)
    # the samples are FFmpeg's decoder output: as ffmpeg decodes the file to a WAV
    dec = batch.parent / "dec.wav"
    subprocess.run([FFMPEG, "-hide_banner", "-loglevel", "error", "-y", "-i",
                    str(batch / "prog.m4a"), "-c:a", "pcm_f64le", str(dec)], check=True)
    rc2, (d,), _ = _json(capsys, dec)
    assert d["integrated_lufs"] == m4a["integrated_lufs"] and \
        d["duration_s"] == m4a["duration_s"]
    assert "2 of 5 file(s) failed" in err
    # table and CSV: a row each, the reasons in the table's rows
    rc, out, _ = _run(capsys, batch, missing)
    lines = out.splitlines()[1:]
    assert len(lines) == 4 and rc == 1
    assert lines[0].split()[0] == "failed" and "(not a readable audio file" in lines[0]
    assert lines[3].split()[0] == "failed" and lines[3].endswith(
        "gone.wav  (no such file or directory)")
    rc, out, _ = _run(capsys, "--csv", batch, missing)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["status"] for r in rows] == ["failed", "measured", "measured", "failed"]


def test_batch_without_pyav_lists_the_m4a_as_skipped(batch, capsys, monkeypatch):
    monkeypatch.setattr(app, "have_pyav", lambda: False)
    rc, recs, err = _json(capsys, batch)
    assert rc == 1
    m4a = next(r for r in recs if r["file"].endswith("prog.m4a"))
    assert m4a["status"] == "skipped" and "pip install 'rtamt[media]'" in m4a["error"]
    assert "libsndfile does not read" in m4a["error"]
    assert f"rtamt loudness: {m4a['error']}" in err and "1 of 3 file(s) failed, 1 skipped" in err


def test_other_names_fall_back_to_pyav(batch, tmp_path, capsys):
    """A file named on the command line whose suffix is no libsndfile format, which
    libsndfile cannot open, is decoded through PyAV; one named as a libsndfile format
    keeps libsndfile's verdict (the one every app gives it)."""
    pytest.importorskip("av")
    odd = tmp_path / "prog.bin"
    shutil.copy(batch / "prog.m4a", odd)
    as_wav = tmp_path / "prog.wav"
    shutil.copy(batch / "prog.m4a", as_wav)
    rc, (a, b, c), _ = _json(capsys, odd, batch / "prog.m4a", as_wav)
    assert rc == 1 and a["status"] == b["status"] == "measured"
    assert a["integrated_lufs"] == b["integrated_lufs"]
    assert c["status"] == "failed" and "not a readable audio file" in c["error"]


def test_media_files_take_ffmpegs_channel_layout(tmp_path, capsys):
    """A 5.1 AAC file is weighted by the layout FFmpeg reports (FL FR FC LFE BL BR: the
    back pair at +-110 deg, 1.41, LFE left out); 8 channels without a layout are refused
    naming the choices, and measured with --layout."""
    pytest.importorskip("av")
    if FFMPEG is None:
        pytest.skip("ffmpeg is not installed")
    six = tmp_path / "six.m4a"
    subprocess.run([FFMPEG, "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i",
                    "anoisesrc=d=4:a=0.1:seed=3", "-af", "aformat=channel_layouts=5.1",
                    "-c:a", "aac", "-b:a", "384k", str(six)], check=True, timeout=120)
    eight = tmp_path / "eight.mka"
    subprocess.run([FFMPEG, "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i",
                    "anoisesrc=d=2:a=0.1", "-ac", "8", "-c:a", "pcm_s16le", "-f", "matroska",
                    str(eight)], check=True, timeout=120)
    rc, (a, b), _ = _json(capsys, six, eight)
    assert rc == 1 and a["status"] == "measured"
    assert a["layout"] == "5.1" and a["channel_weights"] == [1.0, 1.0, 1.0, 0.0, 1.41, 1.41]
    assert "FFmpeg's channel layout '5.1'" in a["layout_from"]
    assert b["status"] == "failed" and "7.1" in b["error"] and "--layout" in b["error"]
    rc, (b,), _ = _json(capsys, "--layout", "7.1", eight)
    assert rc == 0 and b["layout"] == "7.1" and b["layout_from"] == "given: --layout"


def test_directory_problems_are_rows(tmp_path, capsys, monkeypatch):
    """An empty directory and one that cannot be read are failed rows; the rest is
    measured."""
    (tmp_path / "empty").mkdir()
    good = _wav(tmp_path / "good.wav", tone([-23.0], 1.0))
    rc, recs, _ = _json(capsys, tmp_path / "empty", good)
    assert rc == 1 and recs[0]["status"] == "failed"
    assert "a directory without audio files" in recs[0]["error"]
    assert recs[1]["status"] == "measured"
    real = os.walk

    def walk(top, onerror=None, **kw):
        onerror(PermissionError(13, "Permission denied", str(top)))
        return real(top, onerror=onerror, **kw)

    monkeypatch.setattr(app.os, "walk", walk)
    rc, recs, _ = _json(capsys, tmp_path)
    assert rc == 1 and recs[0]["status"] == "failed"
    assert recs[0]["error"] == f"{tmp_path}: cannot read the directory (Permission denied)"
    assert recs[1]["file"] == good and recs[1]["status"] == "measured"


# ---------------------------------------------------------------- item 5: LRA hop, series
def test_lra_hop_10_reproduces_libebur128(tmp_path, capsys):
    """libebur128 takes a short-term value every second: ``--lra-hop 10`` gives its LRA
    (within the 0.01 LU rounding and bins); the default (every 100 ms, Tech 3342) differs
    on material whose level changes between those seconds."""
    pe = pytest.importorskip("pyebur128")
    rng = np.random.default_rng(11)
    seg = int(0.7 * FS)
    levels = rng.uniform(-40, -10, 60)
    x = np.repeat(10 ** (levels / 20), seg) * np.sin(2 * np.pi * 440 * np.arange(60 * seg) / FS)
    x = np.stack([x, x])
    f = _wav(tmp_path / "steps.wav", x)
    st = pe.R128State(2, FS, pe.MeasurementMode.MODE_I | pe.MeasurementMode.MODE_LRA)
    st.add_frames(np.ascontiguousarray(x.T).ravel(), x.shape[1])
    want = pe.get_loudness_range(st)
    rc, (hop10,), _ = _json(capsys, "--lra-hop", "10", f)
    rc1, (hop1,), _ = _json(capsys, f)
    assert rc == rc1 == 0
    assert hop10["lra_lu"] == pytest.approx(want, abs=0.02)
    assert abs(hop1["lra_lu"] - want) > 0.1
    assert hop1["integrated_lufs"] == hop10["integrated_lufs"] == \
        pytest.approx(pe.get_loudness_global(st), abs=0.01)


def _series_ref(x):
    """(t, M, S, running I) every 100 ms from the definitions."""
    ref = report(x)
    k = ref["blocks"].size
    run = [integrated(ref["blocks"][:j + 1])[0] for j in range(k)]
    return (np.arange(1, k + 1) / 10, ref["momentary"], ref["short_term"],
            np.array([np.nan if v is None else v for v in run]))


def _close(got, want):
    got = np.array([np.nan if v in (None, "") else float(v) for v in got])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(got)], want[~np.isnan(want)], atol=TOL)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_series_csv_and_json_lines(tmp_path, capsys, jobs):
    xa = tone([-20.0, -30.0], 2.5)
    xb = tone([-26.0], 3.3, channels=1)
    fa, fb = _wav(tmp_path / "a.wav", xa), _wav(tmp_path / "b.wav", xb)
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF0000WAVEjunk" * 8)
    out = tmp_path / "s.csv"
    rc, _, _ = _run(capsys, "--jobs", jobs, "--series", out, fa, bad, fb)
    assert rc == 1
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == list(app.SERIES_FIELDS)
    assert [r["file"] for r in rows] == [fa] * 50 + [fb] * 33      # none for bad.wav
    for x, part in ((xa, rows[:50]), (xb, rows[50:])):
        t, m, s, i = _series_ref(x)
        np.testing.assert_allclose([float(r["t_s"]) for r in part], t, atol=1e-9)
        _close([r["momentary_lufs"] for r in part], m)
        _close([r["short_term_lufs"] for r in part], s)
        _close([r["integrated_lufs"] for r in part], i)
    jl = tmp_path / "s.jsonl"
    rc, _, _ = _run(capsys, "--jobs", jobs, "--series", jl, fa, bad, fb)
    recs = [json.loads(ln) for ln in jl.read_text().splitlines()]
    assert [list(r) for r in recs] == [list(app.SERIES_FIELDS)] * 83
    assert [r["momentary_lufs"] for r in recs] == [
        None if r["momentary_lufs"] == "" else float(r["momentary_lufs"]) for r in rows]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]    # no leftovers


def test_series_is_written_atomically(tmp_path, capsys, monkeypatch):
    """Until the run ends, nothing is under the final name (the rows go to a hidden
    temporary file beside it); an interrupted run leaves an older file unchanged and no
    temporary file."""
    fa = _wav(tmp_path / "a.wav", tone([-20.0], 2.0))
    out = tmp_path / "s.csv"
    out.write_text("old\n")
    seen = []
    real = app.measure

    def spy(path, **kw):
        seen.append((out.read_text(), sorted(p for p in os.listdir(tmp_path)
                                             if p.startswith(".s.csv."))))
        if len(seen) == 2:
            raise KeyboardInterrupt
        return real(path, **kw)

    monkeypatch.setattr(app, "measure", spy)
    rc, _, _ = _run(capsys, "--series", out, fa, fa)
    assert rc == 130 and out.read_text() == "old\n"
    assert seen[0][0] == "old\n" and seen[0][1] and seen[0][1][0].endswith(".tmp")
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]
    monkeypatch.setattr(app, "measure", real)
    rc, _, _ = _run(capsys, "--series", out, fa)
    assert rc == 0 and out.read_text().startswith("file,t_s,") and len(
        out.read_text().splitlines()) == 21
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    # no file measured: the older file stays, said on stderr
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF0000WAVEjunk" * 8)
    before = out.read_text()
    rc, _, err = _run(capsys, "--series", out, bad)
    assert rc == 1 and out.read_text() == before and f"{out} not written" in err
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]


def test_series_rows_go_to_disk_while_measuring(tmp_path, monkeypatch):
    """The rows of each block are written as it is measured (bounded memory): the file
    grows on disk before the end of a 2-minute file."""
    f = _wav(tmp_path / "long.wav", tone([-20.0], 120.0, channels=1))
    part = tmp_path / "rows"
    sizes = []
    real = app._SeriesRows.add

    def add(self, r):
        real(self, r)
        sizes.append(os.path.getsize(part))

    monkeypatch.setattr(app._SeriesRows, "add", add)
    app.measure(f, series=str(part))
    assert len(sizes) == -(-120 * FS // 65536) and 0 < sizes[len(sizes) // 2] < sizes[-1]
    assert len(part.read_text().splitlines()) == 1200


def test_series_sigterm_leaves_nothing(tmp_path):
    """SIGTERM while the rows are being written: exit 143, one line, no file under the
    final name and no temporary file."""
    files = [_wav(tmp_path / f"t{i}.wav", tone([-20.0], 60.0, channels=1)) for i in range(6)]
    out = tmp_path / "s.csv"
    p = subprocess.Popen([entry_point(), "loudness", "--block", "1024", "--series", str(out),
                          *files], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not [q for q in os.listdir(tmp_path) if q.startswith(".s.csv.")]:
            assert p.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + signal.SIGTERM
    assert f"SIGTERM: stopped; {out} not written" in err and "Traceback" not in err
    assert not out.exists() and not [q for q in os.listdir(tmp_path) if q.startswith(".")]


# ---------------------------------------------------------------- the live meter's JSON
def test_meter_json_has_the_report_fields(tmp_path, capsys):
    x = _programme()[:, :int(12 * FS)]
    f = _wav(tmp_path / "prog.wav", x)
    ref = report(x)
    capsys.readouterr()
    rc = main(["meter", "--input", f, "--fast", "--json", "--model", "glasberg2002",
               "--spl-ref", "100"])
    out = capsys.readouterr().out
    assert rc == 0
    last = json.loads(out.splitlines()[-1])          # the last update, over all 12 s
    assert last["t"] == 12.0
    assert last["sample_peak_dbfs"] == pytest.approx(ref["sample_peak_channels"].max(), abs=0.01)
    assert last["true_peak_channels_dbtp"] == [pytest.approx(-20.0, abs=0.02),
                                               pytest.approx(-26.02, abs=0.02)]
    for k, v in (("max_momentary_lufs", ref["max_momentary"]),
                 ("max_short_term_lufs", ref["max_short_term"]),
                 ("lra_low_lufs", ref["lra_low"]), ("lra_high_lufs", ref["lra_high"]),
                 ("relative_gate_lufs", ref["relative_gate"]),
                 ("lra_gate_lufs", ref["lra_gate"])):
        assert last[k] == pytest.approx(v, abs=TOL), k
    assert last["absolute_gate_lufs"] == -70.0 and last["integrated_reason"] is None
    first = json.loads(out.splitlines()[0])           # 0.1 s: no gating block yet
    assert first["integrated_reason"] == "too short" and first["lufs_integrated"] is None
    assert first["sample_peak_dbfs"] is not None


def test_media_reader_reads_what_ffmpeg_decodes(tmp_path):
    """rtamt.media.MediaReader: block-wise reads give FFmpeg's decoded samples (as
    ``ffmpeg -i x.m4a x.wav``), the length known at the end; a file FFmpeg cannot open is
    refused with the reason."""
    pytest.importorskip("av")
    if FFMPEG is None:
        pytest.skip("ffmpeg is not installed")
    from rtamt.media import MediaReader
    from rtamt.signals import AudioFileError

    f = _m4a(tmp_path / "x.m4a", tone([-20.0], 1.0, channels=2, gains=[1.0, 0.25]))
    dec = tmp_path / "x.wav"
    subprocess.run([FFMPEG, "-hide_banner", "-loglevel", "error", "-i", f, "-c:a",
                    "pcm_f64le", str(dec)], check=True)
    want, fs = sf.read(str(dec), always_2d=True)
    with MediaReader(f) as r:
        assert (r.fs, r.channels, r.frames) == (FS, 2, None) and r.format.endswith("/aac")
        parts = []
        while (b := r.read(1000)).shape[1]:
            parts.append(b)
        assert r.frames == r.pos == want.shape[0]
    np.testing.assert_allclose(np.concatenate(parts, axis=1), want.T, atol=1e-7)
    bad = tmp_path / "bad.m4a"
    bad.write_bytes(b"\x00\x00\x00\x20ftypM4A " + b"junk" * 50)
    with pytest.raises(AudioFileError, match="bad.m4a: not a readable media file"):
        MediaReader(bad)
    assert sys.modules["av"]
    # cut in half (its index first, '+faststart'): damaged part way, as AudioReader says it
    whole = tmp_path / "whole.m4a"
    subprocess.run([FFMPEG, "-hide_banner", "-loglevel", "error", "-i", str(dec), "-c:a",
                    "aac", "-movflags", "+faststart", str(whole)], check=True)
    cut = tmp_path / "cut.m4a"
    cut.write_bytes(whole.read_bytes()[:whole.stat().st_size // 2])
    with pytest.raises(AudioFileError, match="cut.m4a: damaged or truncated: decoding "
                                             "failed after") as e:
        with MediaReader(cut) as r:
            while r.read(4096).shape[1]:
                pass
    assert 0 < e.value.frames_read < want.shape[0]
    with MediaReader(cut, partial=True) as r:
        while r.read(4096).shape[1]:
            pass
        assert r.frames == r.pos == e.value.frames_read and "decoding failed" in r.truncated
