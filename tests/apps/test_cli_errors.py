"""One CLI error style (issue 19, points 3, 6, 7 and 8): a usage error exits with 2 and one
line on stderr naming the option or value, never a traceback; limits keep a typo from
exhausting memory; a calibration is validated before it replaces the old file, which
survives any failure of the write; a closed stdout ends a run quietly.

Most cases run in-process (``rtamt_apps.cli.main``); exit codes of the interpreter itself
(closed pipe, no display) run ``python -m rtamt_apps`` as a subprocess."""
import json
import os
import re
import subprocess
import sys
import threading
import types

import numpy as np
import pytest
from scipy.io import wavfile

import rtamt
from rtamt.engine import jit
from rtamt.io import calibration as cal
from rtamt_apps import calibrate as calibrate_app
from rtamt_apps.cli import main

FS = 32000


def _usage_error(capsys, argv, *words):
    """``rtamt ARGV`` exits with 2 and exactly one stderr line containing ``words``."""
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0], out


def _cli(*args, env=None, timeout=120, **kw):
    return subprocess.run([sys.executable, "-m", "rtamt_apps", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, **kw)


def _tone_wav(path, seconds=2.0, dbfs=-20.0):
    t = np.arange(int(seconds * FS)) / FS
    x = np.sqrt(2) * 10 ** (dbfs / 20) * np.sin(2 * np.pi * 1000 * t)
    wavfile.write(path, FS, x.astype(np.float32))
    return str(path)


# ---------------------------------------------------------------- point 3: unbounded --block

def test_huge_block_is_refused_before_any_allocation(capsys):
    """``stream --block 100000000`` once allocated 24 GB and was OOM-killed."""
    _usage_error(capsys, ["stream", "--input", "demo", "--block", "100000000"],
                 "rtamt stream: error: argument --block:", "100000000")


@pytest.mark.parametrize("app", ["stream", "meter"])
def test_block_above_one_second_needs_force(capsys, app):
    line, _ = _usage_error(capsys, [app, "--input", "demo", "--fs", "48000", "--block", "60000",
                                    "--seconds", "0.5"], "--block", "60000", "--force")
    assert "48000 Hz" in line


def test_blocksize_above_one_second_needs_force(capsys):
    _usage_error(capsys, ["meter", "--input", "demo", "--blocksize", "40000", "--seconds", "0.5"],
                 "--blocksize", "40000", "--force")


def test_force_allows_a_long_block():
    from rtamt_apps.args import UsageError
    from rtamt_apps.inputs import open_input

    with pytest.raises(UsageError, match="--force"):
        open_input("demo", fs=8000.0, block=9000)
    inp = open_input("demo", fs=8000.0, block=9000, force=True)
    assert inp.fs == 8000.0


# ---------------------------------------------------------------- point 6: calibration writes

@pytest.fixture
def good_calibration(tmp_path):
    p = tmp_path / "cal" / "calibration.json"
    cal.save(cal.Calibration(spl_ref=114.0), p)
    return p, p.read_bytes()


@pytest.mark.parametrize("value", ["nan", "1000", "inf", "-5"])
def test_calibrate_reference_db_refused_before_measuring(tmp_path, capsys, monkeypatch,
                                                         good_calibration, value):
    """``calibrate --reference-db nan`` (or 1000) exited 0 and overwrote a valid file."""
    path, before = good_calibration
    wav = _tone_wav(tmp_path / "tone.wav")

    def never(*a, **k):
        raise AssertionError("measured although --reference-db is invalid")

    monkeypatch.setattr(calibrate_app, "measure_tone", never)
    _usage_error(capsys, ["calibrate", "--input", wav, "--reference-db", value, "--out",
                          str(path)], "--reference-db", value)
    assert path.read_bytes() == before


def test_save_refuses_what_load_would_refuse(tmp_path, good_calibration):
    path, before = good_calibration
    for bad in (float("nan"), 1009.0, 10.0):
        with pytest.raises(cal.CalibrationError, match="spl_ref"):
            cal.save(cal.Calibration(spl_ref=bad), path)
    assert path.read_bytes() == before
    with pytest.raises(cal.CalibrationError, match="reference level"):
        cal.measure_tone(np.zeros(FS), FS, reference_db=float("nan"))


@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch, good_calibration, where):
    """An OSError at any step of the write (disk full, I/O error) leaves the old file as it
    was and no temporary file beside it."""
    path, before = good_calibration

    def fail(*a, **k):
        raise OSError(28, "No space left on device")

    if where == "write":
        real_fdopen = os.fdopen

        def fdopen(fd, *a, **k):
            return _FailingFile(real_fdopen(fd, *a, **k))

        monkeypatch.setattr(cal.os, "fdopen", fdopen)
    else:
        monkeypatch.setattr(cal.os, where, fail)
    with pytest.raises(OSError, match="No space left"):
        cal.save(cal.Calibration(spl_ref=120.0), path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    assert cal.load(path).spl_ref == 114.0


class _FailingFile:
    """A text file whose write stores half the text, then fails (a disk filling up)."""

    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def write(self, s):
        self.f.write(s[: len(s) // 2])
        raise OSError(28, "No space left on device")

    def flush(self):
        self.f.flush()

    def fileno(self):
        return self.f.fileno()

    def close(self):
        self.f.close()


def test_calibrate_write_failure_is_one_line_and_keeps_the_old_file(tmp_path, capsys,
                                                                   monkeypatch,
                                                                   good_calibration):
    path, before = good_calibration
    wav = _tone_wav(tmp_path / "tone.wav")

    def fail(*a, **k):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(cal.os, "replace", fail)
    _usage_error(capsys, ["calibrate", "--input", wav, "--out", str(path)],
                 "rtamt calibrate:", "Input/output error")
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_calibrate_still_writes_a_valid_file(tmp_path, capsys, good_calibration):
    path, _ = good_calibration
    mode = path.stat().st_mode & 0o777
    wav = _tone_wav(tmp_path / "tone.wav", dbfs=-20.0)
    assert main(["calibrate", "--input", wav, "--reference-db", "94", "--out", str(path)]) == 0
    assert cal.load(path).spl_ref == pytest.approx(114.0, abs=0.01)
    assert path.stat().st_mode & 0o777 == mode
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


# ---------------------------------------------------------------- point 7: one-line errors

@pytest.mark.parametrize("argv, words", [
    (["stream", "--block", "0"], ["argument --block", ">= 1", "got 0"]),
    (["stream", "--block", "-5"], ["argument --block", "got -5"]),
    (["stream", "--blocksize", "-3"], ["argument --blocksize", "got -3"]),
    (["meter", "--block", "0"], ["argument --block", "got 0"]),
    (["monitor", "--blocksize", "0"], ["argument --blocksize", "got 0"]),
    (["meter", "--spl-ref", "1e308"], ["argument --spl-ref", "1e+308"]),
    (["monitor", "--spl-ref", "nan"], ["argument --spl-ref", "finite", "nan"]),
    (["monitor", "--fps", "0"], ["argument --fps", "got 0"]),
    (["monitor", "--fps", "1000"], ["argument --fps", "1000"]),
    (["monitor", "--size", "10x-5"], ["argument --size", "10x-5"]),
    (["monitor", "--size", "big"], ["argument --size", "WxH"]),
    (["monitor", "--history", "-1"], ["argument --history", "got -1"]),
    (["monitor", "--mod-window", "0"], ["argument --mod-window", "got 0"]),
    (["stream", "--seconds", "-1"], ["argument --seconds", "got -1"]),
    (["stream", "--seconds", "0"], ["argument --seconds", "got 0"]),
    (["meter", "--seconds", "0"], ["argument --seconds", "got 0"]),
    (["monitor", "--seconds", "-1"], ["argument --seconds", "got -1"]),
    (["calibrate", "--seconds", "0"], ["argument --seconds", "got 0"]),
    (["stream", "--fs", "nan"], ["argument --fs", "finite"]),
    (["stream", "--no-such-option"], ["unrecognized arguments", "--no-such-option"]),
])
def test_usage_errors_are_one_line_exit_2(capsys, argv, words):
    _usage_error(capsys, argv, f"rtamt {argv[0]}: error: ", *words)


@pytest.mark.parametrize("app", ["meter", "stream", "monitor", "calibrate"])
@pytest.mark.parametrize("name", ["nope.wav", "some/dir/take1", "Take.FLAC"])
def test_mistyped_file_name_is_no_such_file(tmp_path, capsys, monkeypatch, app, name):
    """It used to be taken for a device: ``no input device matching device='nope.wav'``."""
    monkeypatch.chdir(tmp_path)
    argv = [app, "--input", name]
    if app in ("meter", "monitor"):
        argv += ["--spl-ref", "100"]
    line, _ = _usage_error(capsys, argv, f"rtamt {app}: no such file: {name}")
    assert "device" not in line


@pytest.mark.parametrize("app", ["meter", "stream", "calibrate"])
def test_missing_device_is_no_such_device(capsys, monkeypatch, app):
    import rtamt.runtime.stream as rstream

    # PortAudio without any input device (the real one is never initialised here)
    monkeypatch.setattr(rstream, "_sd", lambda: types.SimpleNamespace())
    monkeypatch.setattr(rstream, "list_input_devices", lambda: [])
    argv = [app, "--input", "Scarlett", "--seconds", "1"]
    if app == "meter":
        argv += ["--spl-ref", "100"]
    _usage_error(capsys, argv, f"rtamt {app}: no such device: Scarlett", "input devices: none")


def test_stream_at_8000_hz_is_one_line(capsys):
    """It dumped the 30-element centre-frequency array."""
    line, _ = _usage_error(capsys, ["stream", "--input", "demo", "--fs", "8000", "--seconds",
                                    "0.2"], "rtamt stream: ", "8000 Hz", "Nyquist (4000 Hz)",
                           "fhigh")
    assert "[" not in line and len(line) < 200


def test_dau1997_at_8000_hz_is_a_short_message():
    with pytest.raises(ValueError) as e:
        rtamt.Dau1997(8000)
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 160 and "[" not in msg
    assert "fhigh 8000 Hz" in msg and "Nyquist (4000 Hz)" in msg and "fhigh=3600" in msg
    assert rtamt.Dau1997(8000, fhigh=3600).fc.max() < 4000


def test_monitor_screenshot_to_unwritable_path(tmp_path, capsys):
    """It printed both "could not write" and "wrote ..."; now refused before running."""
    for bad in (tmp_path / "missing" / "x.png", tmp_path):
        line, out = _usage_error(capsys, ["monitor", "--input", "demo", "--seconds", "1",
                                          "--spl-ref", "100", "--screenshot", str(bad)],
                                 "argument --screenshot", str(bad))
        assert "wrote" not in out


def test_monitor_screenshot_failing_at_the_end(tmp_path):
    """A write that fails only when the image is saved: one error, no "wrote", exit 1.
    (A subprocess: a QApplication made and ended in-process upsets the later Qt tests.)"""
    out_png = tmp_path / "x.png"
    code = ("import sys\n"
            "from rtamt_apps import monitor\n"
            "from rtamt_apps.cli import main\n"
            "monitor.window_class().save_screenshot = lambda self, path: False\n"
            f"sys.exit(main(['monitor', '--input', 'demo', '--seconds', '0.5', '--spl-ref', "
            f"'100', '--no-modulation', '--screenshot', {str(out_png)!r}]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "wrote" not in r.stdout + r.stderr
    # a cold numba cache (a fresh machine) adds the first-compile notice and the warm-up's
    # progress (apps/warm.py: "compiling kernels for ...", then "  [k/N] ..." lines)
    lines = [ln for ln in r.stderr.strip().splitlines()
             if ln != jit.FIRST_COMPILE and not ln.startswith("compiling kernels for ")
             and not re.match(r"  \[\d+/\d+\] ", ln)]
    assert lines == [f"rtamt monitor: could not write {out_png}"]


def test_monitor_without_display_is_an_error():
    env = {k: v for k, v in os.environ.items()
           if k not in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    r = _cli("monitor", "--input", "demo", "--seconds", "1", "--spl-ref", "100", env=env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no display" in lines[0] and "--screenshot" in lines[0]
    assert r.stdout == ""


def test_meter_into_a_closed_pipe_ends_quietly():
    """``rtamt meter ... | head -1`` ended in a BrokenPipeError traceback."""
    p = subprocess.Popen([sys.executable, "-m", "rtamt_apps", "meter", "--input", "demo",
                          "--fast", "--seconds", "60", "--json", "--spl-ref", "100"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killer = threading.Timer(120.0, p.kill)      # readline() has no timeout of its own
    killer.start()
    try:
        first = p.stdout.readline()
        p.stdout.close()               # the reader is gone, as after `head -1`
        rc = p.wait(timeout=120)
        err = p.stderr.read()
    finally:
        killer.cancel()
        if p.poll() is None:
            p.kill()
    assert json.loads(first)["t"] > 0
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert rc == 141


def test_ctrl_c_outside_the_apps_handlers_is_exit_130(capsys, monkeypatch):
    from rtamt_apps import models

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "run", interrupted)
    assert main(["models"]) == 130
    assert "Traceback" not in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert main(["stream", "--help"]) == 0
    assert "--force" in capsys.readouterr().out


# ---------------------------------------------------------------- point 8: latency_bench --help

def test_latency_bench_help_explains_every_option_and_lists_models():
    from latency_bench.__main__ import build_parser
    from rtamt.models import MODELS

    r = subprocess.run([sys.executable, "-m", "latency_bench", "--help"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for a in build_parser()._actions:
        assert a.help, f"{a.option_strings} has no help"
        assert a.option_strings[-1] in r.stdout
    assert "models: " + ", ".join(sorted(MODELS)) in " ".join(r.stdout.split())


# ---------------------------------------------------------------- issue 29: defaults

def test_stream_runs_a_file_to_its_end(tmp_path):
    """`rtamt stream --input FILE` processes the whole file (it stopped after 3 s)."""
    path = tmp_path / "long.wav"
    wavfile.write(path, 16000, (0.01 * np.random.default_rng(0).standard_normal(16000 * 5))
                  .astype(np.float32))
    r = _cli("stream", "--input", str(path), "--fast", "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    final = [json.loads(ln) for ln in r.stdout.splitlines() if '"final": true' in ln]
    assert len(final) == 1 and final[0]["frames_processed"] == 16000 * 5, final


def test_stream_demo_runs_once_by_default():
    r = _cli("stream", "--input", "demo", "--fs", "16000", "--fast", "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    final = [json.loads(ln) for ln in r.stdout.splitlines() if '"final": true' in ln]
    assert final[0]["frames_processed"] == 32000          # the 2 s demo, once


@pytest.mark.parametrize("app, exempt", [
    ("process", {"--out", "--decimate"}), ("stream", set())])
def test_help_states_every_default(app, exempt):
    """Every option of `rtamt process` (and stream's --seconds) says its default in --help."""
    import argparse

    from rtamt_apps import process, stream

    p = argparse.ArgumentParser()
    (process if app == "process" else stream).add_arguments(p)
    for a in p._actions:
        if not a.option_strings or a.nargs == 0 or a.option_strings[0] in exempt:
            continue
        if app == "stream" and a.option_strings[0] != "--seconds":
            continue
        assert "default" in (a.help or ""), (a.option_strings, a.help)
    if app == "process":
        h = {a.option_strings[0]: a.help for a in p._actions if a.option_strings}
        assert "nothing is written" in h["--out"]
    else:
        h = {a.option_strings[0]: a.help for a in p._actions if a.option_strings}
        assert "file runs to its end" in h["--seconds"] and "Ctrl-C" in h["--seconds"]


# ------------------------------------- issue 38, point 9: hints name options the CLI has
@pytest.mark.parametrize("argv", [
    ["process", "--demo", "--fs", "12000"],
    ["process", "--demo", "--fs", "12000", "--model", "paulick2024"],
    ["stream", "--input", "demo", "--fs", "12000", "--seconds", "0.1", "--fast"],
    ["stream", "--input", "demo", "--fs", "12000", "--seconds", "0.1", "--fast",
     "--per-channel"],
], ids=["process", "process-paulick2024", "stream", "stream-per-channel"])
def test_low_rate_error_names_the_fhigh_option(capsys, argv):
    """Below ~18 kHz the filterbanks' default 8 kHz top reaches Nyquist; the message said
    "pass fhigh=5400" (a keyword of the library; paulick2024 printed its 50 centre
    frequencies): it names --fhigh, which the apps now have, and that option works."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "give --fhigh 5400 or lower" in lines[0] and "fhigh=" not in lines[0], lines[0]
    assert "[" not in lines[0] and len(lines[0]) < 240
    assert main(argv + ["--fhigh", "5400"]) == 0, capsys.readouterr().err


def test_features_low_rate_error_names_the_fhigh_option(tmp_path, capsys):
    pytest.importorskip("lhotse")
    wav = tmp_path / "a.wav"
    wavfile.write(wav, 12000, (np.random.default_rng(0).standard_normal(3000) * 3000
                               ).astype(np.int16))
    line, _ = _usage_error(capsys, ["features", str(wav), "--out", str(tmp_path / "o")],
                           "rtamt features: error: ", "give --fhigh 5400 or lower")
    assert "fhigh=" not in line and not (tmp_path / "o").exists()
    assert main(["features", str(wav), "--out", str(tmp_path / "o"), "--fhigh", "5400",
                 "--storage", "numpy"]) == 0


def test_fhigh_on_a_model_without_it_is_a_usage_error(capsys):
    _usage_error(capsys, ["process", "--demo", "--model", "moore2016", "--fhigh", "5000"],
                 "rtamt process: error: argument --fhigh: moore2016 has no fhigh")


def test_library_keyword_hints_become_options():
    """cli_message: every ``pass KEY=V`` whose keyword has a CLI option is reworded."""
    from rtamt_apps.modelopts import cli_message

    assert cli_message(ValueError("x; pass fhigh=3600 or lower")) == \
        "x; give --fhigh 3600 or lower"
    assert cli_message("frame_shift 0.013 s is not a whole number of samples") == \
        "--frame-shift 0.013 s is not a whole number of samples"
    assert cli_message("use backend='numba'") == "use backend='numba'"   # no such option
