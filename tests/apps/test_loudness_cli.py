"""``rtamt loudness FILE|DIR ...`` (apps/loudness.py): EBU R128 figures per file.

* a directory of WAV/FLAC files with one corrupt and one truncated file: the two are
  listed as failed (one line each on stderr), the rest are measured, exit status 1;
* table, ``--json`` (JSON Lines) and ``--csv`` carry I, LRA, true peak, sample peak;
* the values of Tech 3341-like tones (stereo -23 dBFS: -23 LUFS; 5.1 with a loud LFE);
* files are read in blocks of ``--block`` frames, never whole;
* usage errors (option values): one line, exit 2; a missing path or a directory
  without audio files is a failed row (exit 1);
* the progress bar appears on a terminal for long lists only;
* start-up (issue 39 item 7): the command imports only what the meter needs (no model, no
  scheduler, no scipy.signal, no torch), and ``--jobs`` workers are forked from a process
  that has loaded the meter's kernels: no worker imports or loads anything per file, and
  each keeps little memory of its own.
"""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from rtamt_apps import loudness as app
from rtamt_apps.cli import main

from _helpers import entry_point, run_on_pty, spy_reads

FS = 48000


def _tone(path, dbfs=-23.0, seconds=5.0, channels=2, fs=FS, subtype="PCM_24"):
    t = np.arange(int(seconds * fs)) / fs
    x = 10 ** (dbfs / 20) * np.sin(2 * np.pi * 1000 * t)
    sf.write(str(path), np.repeat(x[:, None], channels, axis=1), fs, subtype=subtype)
    return path


@pytest.fixture
def library(tmp_path):
    d = tmp_path / "lib"
    (d / "sub").mkdir(parents=True)
    _tone(d / "a.wav", -23.0)
    _tone(d / "sub" / "b.flac", -33.0, subtype="PCM_16")
    (d / "c_corrupt.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk" * 20)
    good = (d / "a.wav").read_bytes()
    (d / "d_truncated.wav").write_bytes(good[: len(good) // 3])
    (d / "notes.txt").write_text("not audio, not listed")
    return d


def _run(capsys, *argv):
    capsys.readouterr()
    rc = main(["loudness", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_directory_with_corrupt_files_table(library, capsys):
    rc, out, err = _run(capsys, str(library))
    assert rc == app.EXIT_FAILED == 1
    lines = out.strip().splitlines()
    assert lines[0].split()[:4] == ["I", "LUFS", "LRA", "LU"]
    rows = {next(c for c in ln.split() if str(library) in c).split("/")[-1]: ln.split()
            for ln in lines[1:]}
    assert set(rows) == {"a.wav", "b.flac", "c_corrupt.wav", "d_truncated.wav"}
    assert rows["a.wav"][:2] == ["-23.0", "0.0"] and rows["a.wav"][6] == "-23.0"   # TP
    assert rows["b.flac"][0] == "-33.0"
    assert rows["c_corrupt.wav"][0] == "failed" and rows["d_truncated.wav"][0] == "failed"
    errs = err.strip().splitlines()
    assert len(errs) == 3 and all(e.startswith("rtamt loudness: ") for e in errs)
    assert "c_corrupt.wav: not a readable audio file" in errs[0]
    assert "d_truncated.wav: truncated" in errs[1]
    assert errs[2] == "rtamt loudness: 2 of 4 file(s) failed"
    assert "Traceback" not in err


def test_jobs_give_the_same_output(library, capsys):
    """--jobs 2: the same lines in the same order, the same failures and exit status."""
    rc1, out1, err1 = _run(capsys, "--csv", str(library))
    rc2, out2, err2 = _run(capsys, "--csv", "--jobs", "2", str(library))
    assert rc1 == rc2 == 1 and out1 == out2 and err1 == err2


def test_json_and_csv(library, capsys):
    rc, out, _ = _run(capsys, "--json", str(library / "a.wav"), str(library / "c_corrupt.wav"))
    assert rc == 1
    a, c = [json.loads(ln) for ln in out.strip().splitlines()]
    assert abs(a["integrated_lufs"] + 23.0) <= 0.1 and a["lra_lu"] == 0.0
    assert abs(a["true_peak_dbtp"] + 23.0) <= 0.1 and abs(a["sample_peak_dbfs"] + 23.0) <= 0.1
    assert a["channels"] == 2 and a["fs"] == FS and a["duration_s"] == 5.0
    assert len(a["true_peak_channels_dbtp"]) == 2
    assert set(c) == {"file", "status", "error"} and "not a readable audio file" in c["error"]
    assert (a["status"], c["status"]) == ("measured", "failed")
    rc, out, _ = _run(capsys, "--csv", str(library))
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["file"].split("/")[-1] for r in rows] == ["a.wav", "c_corrupt.wav",
                                                        "d_truncated.wav", "b.flac"]
    assert float(rows[0]["integrated_lufs"]) == pytest.approx(-23.0, abs=0.1)
    assert rows[0]["error"] == "" and rows[1]["error"] and rows[1]["integrated_lufs"] == ""


def test_all_good_exit_zero_and_layouts(tmp_path, capsys):
    """5.1 (L R C LFE Ls Rs): the LFE does not count; silence has no integrated value."""
    t = np.arange(5 * FS) / FS
    s = 10 ** (-30 / 20) * np.sin(2 * np.pi * 1000 * t)
    x = np.stack([s, s, s, 30 * s, s, s], axis=1)
    sf.write(str(tmp_path / "six.wav"), x, FS, subtype="FLOAT")
    sf.write(str(tmp_path / "quiet.wav"), np.zeros((FS, 1)), FS)
    rc, out, err = _run(capsys, "--json", str(tmp_path / "six.wav"), str(tmp_path / "quiet.wav"))
    assert rc == 0, err
    six, quiet = [json.loads(ln) for ln in out.strip().splitlines()]
    # L R C at 1.0, Ls Rs at 1.41, no LFE; a sine at X dBFS in two channels reads X LUFS
    expect = -30 + 10 * np.log10((3 + 2 * 1.41) / 2)
    assert abs(six["integrated_lufs"] - expect) <= 0.05
    assert abs(six["true_peak_dbtp"] - (-30 + 20 * np.log10(30))) <= 0.05   # the LFE's peak
    assert quiet["integrated_lufs"] is None and quiet["true_peak_dbtp"] is None
    rc, out, err = _run(capsys, "--layout", "stereo", str(tmp_path / "six.wav"))
    assert rc == 1 and "6 channels, --layout stereo has 2" in err


def test_reads_in_blocks(tmp_path, capsys, monkeypatch):
    sizes = spy_reads(monkeypatch)
    _tone(tmp_path / "long.wav", seconds=20.0)
    rc, out, _ = _run(capsys, "--block", "8192", str(tmp_path / "long.wav"))
    assert rc == 0 and max(sizes) == 8192 and len(sizes) == -(-20 * FS // 8192)


@pytest.mark.parametrize("argv, words", [
    (["--block", "5", "x.wav"], "argument --block"),
    (["--json", "--csv", "x.wav"], "not allowed with"),
    ([], "required"),
])
def test_usage_errors_one_line_exit_2(capsys, argv, words):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("rtamt loudness: error: ") and words in err


def test_missing_path_and_empty_directory_are_failed_rows(tmp_path, capsys):
    """Issue 39: a missing path aborted the batch with exit 2 before anything was
    measured; now it is a failed row (so is a directory without audio files), exit 1."""
    (tmp_path / "readme.txt").write_text("x")
    rc, out, err = _run(capsys, str(tmp_path), "/no/such/file.wav")
    assert rc == 1 and "a directory without audio files" in err
    assert "/no/such/file.wav: no such file or directory" in err
    assert [ln.split()[0] for ln in out.splitlines()[1:]] == ["failed", "failed"]


def test_progress_bar_only_for_long_lists_on_a_terminal(monkeypatch):
    monkeypatch.setattr(app.sys.stderr, "isatty", lambda: True, raising=False)
    assert app._progress(app.PROGRESS_MIN_FILES - 1) is None
    bar = app._progress(app.PROGRESS_MIN_FILES)
    assert bar is not None and bar.total == app.PROGRESS_MIN_FILES
    bar.close()
    monkeypatch.setattr(app.sys.stderr, "isatty", lambda: False, raising=False)
    assert app._progress(100) is None


def test_entry_point_exit_status(library):
    r = subprocess.run([entry_point(), "loudness", str(library)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1 and "a.wav" in r.stdout and "2 of 4 file(s) failed" in r.stderr


def test_rows_never_land_on_the_progress_bar_line(tmp_path):
    """On a terminal the bar (stderr) and the rows (stdout) share the screen: a row printed
    after the bar was drawn ended up on the bar's line.  Each line as a terminal shows it
    (the text after its last carriage return) is a row or the header, never bar + row."""
    files = [str(_tone(tmp_path / f"t{i}.wav", seconds=0.5)) for i in
             range(app.PROGRESS_MIN_FILES + 1)]
    rc, text = run_on_pty(["loudness", *files])
    assert rc == 0, text
    assert "rtamt loudness:" in text and "%|" in text             # the bar was drawn
    shown = [ln.rstrip("\r").rsplit("\r", 1)[-1] for ln in text.split("\n")]
    rows = [ln for ln in shown if ".wav" in ln]
    assert len(rows) == len(files), shown
    for ln in rows:
        assert "rtamt loudness" not in ln and "%|" not in ln, repr(ln)
        assert ln.split()[0] == "-23.0", repr(ln)


def test_jobs_are_capped_at_the_usable_cores(library):
    """--jobs 64 on 2 cores started 64 worker processes (77 s instead of 2.6 s, 13.8 GB):
    capped at the cores this process may use (here: 1, set by its affinity mask), with a
    note; --force runs them all.  The output is the same."""
    import sys

    def run(*argv):
        code = ("import os, sys; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
                "from rtamt_apps.cli import main; sys.exit(main(sys.argv[1:]))")
        return subprocess.run([sys.executable, "-c", code, "loudness", "--csv", *argv,
                               str(library)], capture_output=True, text=True, timeout=300)

    one, capped = run(), run("--jobs", "64")
    assert one.returncode == capped.returncode == 1 and capped.stdout == one.stdout
    note = [ln for ln in capped.stderr.splitlines() if "--jobs 64 capped" in ln]
    assert note == ["rtamt loudness: --jobs 64 capped at 1, the number of usable cores "
                    "(more processes than cores only add start-up time and memory; --force "
                    "to run 64)"]
    assert capped.stderr.replace(note[0] + "\n", "") == one.stderr
    forced = run("--jobs", "3", "--force")
    assert forced.stdout == one.stdout and "capped at" not in forced.stderr


def test_jobs_cap_sizes_the_pool(library, capsys, monkeypatch):
    """The pool gets the capped number of workers."""
    import concurrent.futures

    from rtamt_apps import files

    sizes = []
    real = concurrent.futures.ProcessPoolExecutor

    def pool(max_workers=None, **kw):
        sizes.append(max_workers)
        return real(max_workers=max_workers, **kw)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", pool)
    monkeypatch.setattr(files, "usable_cores", lambda: 2)
    rc, out, err = _run(capsys, "--csv", "--jobs", "64", str(library))
    assert rc == 1 and sizes == [2] and "--jobs 64 capped at 2" in err


def test_partial_measures_what_a_truncated_file_holds(library, capsys):
    rc, out, err = _run(capsys, "--json", "--partial", str(library / "d_truncated.wav"))
    rec = json.loads(out)
    assert rc == 0 and "error" not in rec and rec["truncated"]
    assert "d_truncated.wav: truncated: its header announces 240000 frames" in rec["truncated"]
    n = int(rec["truncated"].split("only ")[1].split()[0])
    assert rec["duration_s"] == round(n / FS, 3)
    assert err.strip() == f"rtamt loudness: {rec['truncated']}"


# ------------------------------------------------ issue 39 item 7: start-up and --jobs
#: modules `rtamt loudness` must not import: the models (and the scipy.signal /
#: scipy.interpolate they need), the scheduler and runtime, torch, the audio devices
NOT_FOR_THE_METER = ("torch", "scipy.signal", "scipy.stats", "scipy.interpolate", "scipy.io",
                     "rtamt.models", "rtamt.scheduler", "rtamt.runtime", "rtamt.ear",
                     "rtamt.filterbank", "rtamt.nn", "sounddevice")
_LOADED = """
import json, sys
from rtamt_apps.cli import main
rc = main(sys.argv[1:])
print("LOADED", json.dumps(sorted(m for m in sys.modules
                                  if m in NOT or m in ("rtamt.loudness.bs1770", "soundfile"))))
sys.exit(rc)
"""


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_loudness_imports_only_what_the_meter_needs(tmp_path, jobs):
    """`import rtamt` imported every model (scipy.signal, scipy.stats: 1-1.5 s of a
    2.0-3.2 s run on a 0.3 s file, and 50 MB): `rtamt loudness` now loads the meter, its
    kernels and the reader only (also the parent of --jobs workers)."""
    files = [str(_tone(tmp_path / f"t{i}.wav", seconds=0.3)) for i in range(2)]
    code = f"NOT = {NOT_FOR_THE_METER!r}\n" + _LOADED
    r = subprocess.run([sys.executable, "-c", code, "loudness", "--json", "--jobs", jobs,
                        "--force", *files], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    loaded = json.loads(r.stdout.rsplit("LOADED", 1)[1])
    assert loaded == ["rtamt.loudness.bs1770", "soundfile"], loaded     # it did measure
    assert len(r.stdout.strip().splitlines()) == 3


_JOBS_SPY = """
import json, os, sys
from numba.core.dispatcher import Dispatcher
from rtamt_apps import loudness

added = [0]
add_overload = Dispatcher.add_overload


def counting(self, cres):           # a kernel compiled or loaded from numba's cache
    added[0] += 1
    return add_overload(self, cres)


Dispatcher.add_overload = counting
real = loudness._measure_or_error


def private_kb():
    try:
        with open("/proc/self/smaps_rollup") as f:
            return sum(int(ln.split()[1]) for ln in f if ln.startswith("Private_"))
    except OSError:
        return None


def spy(job):
    imported, before = "rtamt.loudness.bs1770" in sys.modules, added[0]
    rec = real(job)
    rec.update(pid=os.getpid(), imported=imported, kernels=added[0] - before,
               private_kb=private_kb())
    return rec


spy.__module__, spy.__qualname__ = loudness.__name__, "_measure_or_error"
loudness._measure_or_error = spy
print("PARENT", os.getpid(), file=sys.stderr)
sys.exit(__import__("rtamt_apps.cli").cli.main(sys.argv[1:]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and /proc: Linux")
def test_jobs_workers_start_once_not_per_file(tmp_path):
    """--jobs 2 on many small files: every file is measured in one of two worker processes
    that had the meter imported and its kernels loaded before their first file (each
    worker imported rtamt and loaded the kernels itself: 1.5-2 s and 220 MB a worker), and
    a worker's own memory (pages not shared with the parent) stays small."""
    files = [str(_tone(tmp_path / f"t{i:02d}.wav", seconds=0.5)) for i in range(12)]
    r = subprocess.run([sys.executable, "-c", _JOBS_SPY, "loudness", "--json", "--jobs", "2",
                        "--force", *files], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    parent = int(r.stderr.split("PARENT", 1)[1].split()[0])
    recs = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert [x["file"] for x in recs] == files and not any("error" in x for x in recs)
    pids = {x["pid"] for x in recs}
    assert len(pids) <= 2 and parent not in pids, (pids, parent)
    assert [(x["imported"], x["kernels"]) for x in recs] == [(True, 0)] * len(files)
    assert max(x["private_kb"] for x in recs) < 60_000, [x["private_kb"] for x in recs]
