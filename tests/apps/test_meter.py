"""`rtamt meter` and `rtamt calibrate` (apps/meter.py, apps/calibrate.py, rtamt/io/calibration.py).

* the demo through the installed entry point, paced in real time (one test; the rest uses
  ``--fast`` or in-process calls of :func:`rtamt_apps.cli.main` to save time);
* WAV files of a 1 kHz tone at a known level: dB SPL, phon and LUFS of the meter's updates;
* ``rtamt calibrate`` -> calibration file -> meter (``--calibration`` and ``$RTAMT_CALIBRATION``);
* every documented error: exit code 2, one clear line on stderr, no calibration file written;
* unit tests of :mod:`rtamt.io.calibration`.

``RTAMT_CALIBRATION`` is set to a temporary path for every test (autouse fixture, inherited by
the subprocesses), so the user's ``~/.config/rtamt/calibration.json`` is never read or written.
"""
from __future__ import annotations

import json
import math
import subprocess
import time
import types

import numpy as np
import pytest
from scipy.io import wavfile

from rtamt.io import calibration as cal
from rtamt.io.calibration import CalibrationError
from rtamt_apps.cli import main

from _helpers import entry_point

FS = 48000

#: keys of every JSON update; a loudness model (--model) adds MODEL_KEYS, moore2016 also
#: the per-ear values
KEYS = ("t", "spl_db", "peak_db", "max_peak_db", "lufs_momentary", "lufs_short_term",
        "lufs_integrated", "lra_lu", "lra_stable", "true_peak_dbtp", "dropped_frames",
        "skipped_frames", "rejected_blocks", "status", "queue_frames", "proc_p99_us", "rtf")
MODEL_KEYS = ("stl_sone", "ltl_sone", "phon", "stl_phon")
EAR_KEYS = ("stl_left", "stl_right", "ltl_left", "ltl_right")


@pytest.fixture(autouse=True)
def cal_path(tmp_path, monkeypatch):
    """Default calibration path of this test (does not exist until something writes it)."""
    p = tmp_path / "config" / "calibration.json"
    monkeypatch.setenv("RTAMT_CALIBRATION", str(p))
    return p


def _tone(seconds=2.0, fs=FS, dbfs=-20.0, freq=1000.0, channels=1):
    """1 kHz tone whose RMS is ``dbfs`` dB re digital RMS 1.0, (T, channels) float64."""
    t = np.arange(int(round(seconds * fs))) / fs
    x = np.sqrt(2) * 10 ** (dbfs / 20) * np.sin(2 * np.pi * freq * t)
    return np.repeat(x[:, None], channels, axis=1)


def _write_int16(path, x, fs=FS):
    data = np.round(x * 32767).astype(np.int16)
    wavfile.write(path, int(fs), data[:, 0] if data.shape[1] == 1 else data)
    return str(path)


def _write_float32(path, x, fs=FS):
    wavfile.write(path, int(fs), x.astype(np.float32))
    return str(path)


def _json_lines(text):
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return [json.loads(ln) for ln in lines]


def _meter(capsys, *argv):
    """Run ``rtamt meter ARGV`` in-process; (exit code, JSON updates or [], stderr)."""
    capsys.readouterr()
    rc = main(["meter", *argv])
    out, err = capsys.readouterr()
    return rc, (_json_lines(out) if rc == 0 and "--json" in argv else []), err


def _check_record(d, model="none"):
    """Every key of ``--model model`` (``none``: the meter-only default) and no other."""
    for k in KEYS:
        assert k in d, f"missing key {k!r} in {d}"
    for k in MODEL_KEYS:
        assert (k in d) == (model != "none"), (k, model)
    for k in EAR_KEYS:
        assert (k in d) == (model == "moore2016"), (k, model)
    for k in ("t", "proc_p99_us", "rtf") + (MODEL_KEYS if model != "none" else ()):
        assert isinstance(d[k], (int, float)) and math.isfinite(d[k]), (k, d[k])
    for k in ("spl_db", "peak_db", "max_peak_db", "lufs_momentary", "lufs_short_term",
              "lufs_integrated", "lra_lu", "true_peak_dbtp"):
        assert d[k] is None or (isinstance(d[k], (int, float)) and math.isfinite(d[k])), (k, d[k])
    for k in ("dropped_frames", "skipped_frames", "rejected_blocks", "queue_frames"):
        assert isinstance(d[k], int) and d[k] >= 0, (k, d[k])
    assert isinstance(d["status"], dict)
    assert d["rejected_blocks"] == 0


# ============================================================================ the demo


def test_demo_json_realtime_viaentry_point():
    """3 s of the built-in demo, paced in real time, with Moore2016 (``--model``; the default
    runs the meter only): ~10 JSON updates per second, every key,
    sensible values during the 60 dB SPL 1 kHz tone and while there is sound at all."""
    t0 = time.monotonic()
    r = subprocess.run([entry_point(), "meter", "--input", "demo", "--seconds", "3", "--json",
                        "--model", "moore2016"], capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    recs = _json_lines(r.stdout)          # every stdout line is a JSON object
    assert 20 <= len(recs) <= 40, len(recs)
    for d in recs:
        _check_record(d, "moore2016")
    ts = [d["t"] for d in recs]
    assert ts == sorted(ts) and ts[0] < 0.2 and abs(ts[-1] - 3.0) < 1e-6
    assert wall >= 2.9, f"real-time pacing: 3 s of audio took {wall:.2f} s"
    # demo (2 s, looped): 1 kHz tone at 60 dB SPL 0-0.5 s, AM tone 0.5-1.2 s, noise 1.2-1.7 s,
    # silence 1.7-2.0 s; no calibration file exists, so spl_ref is 100 (the demo's own)
    sound = [d for d in recs if 0.15 <= d["t"] % 2.0 <= 1.7]
    assert len(sound) >= 12
    for d in sound:
        assert d["stl_sone"] > 0 and d["ltl_sone"] > 0 and d["phon"] > 0 and d["stl_phon"] > 0
        assert d["spl_db"] is not None and 55 < d["spl_db"] < 80
        assert d["stl_left"] > 0 and d["stl_right"] > 0
    tone = [d for d in recs if 0.2 <= d["t"] <= 0.49]
    assert tone
    for d in tone:
        assert abs(d["spl_db"] - 60.0) < 0.5, d
        if d["skipped_frames"] == 0:   # a skipped backlog (busy machine) is a click it hears
            assert abs(d["stl_phon"] - 60.0) < 1.5, d
    assert recs[-1]["lufs_integrated"] is not None and recs[-1]["lufs_momentary"] is not None
    assert recs[-1]["max_peak_db"] >= max(d["peak_db"] or 0 for d in recs) - 1e-9


# ============================================================================ WAV files


@pytest.mark.parametrize("model", ["moore2016", "glasberg2002"])
def test_wav_tone_level_and_loudness(tmp_path, capsys, model):
    """2 s stereo int16 file, identical channels (diotic), 1 kHz at -20 dB re RMS 1.0 and
    --spl-ref 80: 60 dB SPL, so 60 phon; LUFS of two identical -20 dBFS channels ~ -17."""
    wav = _write_int16(tmp_path / "tone.wav", _tone(channels=2))
    rc, recs, err = _meter(capsys, "--input", wav, "--fast", "--json", "--spl-ref", "80",
                           "--model", model)
    assert rc == 0, err
    assert 19 <= len(recs) <= 21, len(recs)
    for d in recs:
        _check_record(d, model)
        assert d["dropped_frames"] == 0 and d["skipped_frames"] == 0
    last = recs[-1]
    assert abs(last["t"] - 2.0) < 1e-6
    assert abs(last["spl_db"] - 60.0) <= 0.5, last
    assert abs(last["phon"] - 60.0) <= 1.5, last
    assert abs(last["stl_phon"] - 60.0) <= 1.5, last
    assert abs(last["peak_db"] - 63.01) < 0.05          # sine: peak 3.01 dB above the RMS
    assert abs(last["lufs_integrated"] - (-20.0 + 3.01)) < 0.2
    # EBU R128: a steady tone has no loudness range; its true peak is the sine's peak
    # (RMS -20 dB re 1.0 -> peak -16.99 dBFS, int16-rounded)
    assert last["lra_lu"] is None or last["lra_lu"] < 0.1   # None: no 3 s window yet
    assert abs(last["true_peak_dbtp"] - (-20.0 + 3.01)) < 0.1
    if model == "moore2016":
        assert last["stl_left"] == pytest.approx(last["stl_right"])   # diotic
        assert last["stl_sone"] == pytest.approx(last["stl_left"] + last["stl_right"], rel=1e-3)
    # every update after the first 0.3 s is the same steady level
    for d in recs[3:]:
        assert abs(d["spl_db"] - 60.0) <= 0.1, d


def test_meter_only_by_default_and_the_model_when_asked(tmp_path):
    """Issue 39: the meter always ran Moore2016 beside the R128 meter (0.146 of real time).
    By default now the R128 meter and the sound-level meter run alone: no loudness model is
    built or imported, the records carry no sone / phon; ``--model moore2016`` adds it."""
    import sys

    wav = _write_int16(tmp_path / "tone.wav", _tone(channels=2))
    code = ("import json, sys\nfrom rtamt_apps.cli import main\nrc = main(sys.argv[1:])\n"
            "print('MODELS', json.dumps('rtamt.models' in sys.modules))\nsys.exit(rc)\n")

    def run(*extra):
        r = subprocess.run([sys.executable, "-c", code, "meter", "--input", wav, "--fast",
                            "--json", "--spl-ref", "80", *extra], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        out, models = r.stdout.rsplit("MODELS", 1)
        return _json_lines(out), json.loads(models)

    recs, models = run()
    assert not models and 19 <= len(recs) <= 21
    for d in recs:
        _check_record(d, "none")
    assert abs(recs[-1]["spl_db"] - 60.0) <= 0.1 and abs(recs[-1]["lufs_integrated"] + 16.99) < 0.2
    recs_m, models = run("--model", "moore2016")
    assert models
    for d in recs_m:
        _check_record(d, "moore2016")
    assert abs(recs_m[-1]["phon"] - 60.0) <= 1.5
    # the meter's own figures do not depend on whether a model runs beside it
    same = [k for k in KEYS if k not in ("proc_p99_us", "rtf", "queue_frames")]
    assert [[d[k] for k in same] for d in recs] == [[d[k] for k in same] for d in recs_m]


def test_meter_only_runs_at_rates_the_models_refuse(tmp_path, capsys):
    """BS.1770 and the level meter run at 16 kHz; the loudness models need 32 kHz, so that
    rate is refused only when one is asked for (test_meter_sample_rate_too_low)."""
    wav = _write_int16(tmp_path / "t16.wav", _tone(seconds=1.0, fs=16000), fs=16000)
    rc, recs, err = _meter(capsys, "--input", wav, "--fast", "--json", "--spl-ref", "100")
    assert rc == 0, err
    assert abs(recs[-1]["spl_db"] - 80.0) <= 0.1 and abs(recs[-1]["lufs_integrated"] + 20) < 0.2


def test_wav_r128_loudness_range_and_true_peak(tmp_path, capsys):
    """EBU R128 figures in the updates: the loudness range (LU) once a 3 s window is full
    (0 for a steady tone), and the maximum true peak of a tone whose samples miss its
    crests (fs/4 at 45 degrees: sample peak 3 dB below the true peak of -6 dBTP)."""
    n = int(3.5 * FS)
    x = 0.5 * np.sin(2 * np.pi * (FS / 4) * np.arange(n) / FS + np.pi / 4)
    wav = _write_float32(tmp_path / "tp.wav", np.repeat(x[:, None], 2, axis=1))
    rc, recs, err = _meter(capsys, "--input", wav, "--fast", "--json", "--model",
                           "glasberg2002")
    assert rc == 0, err
    assert recs[0]["lra_lu"] is None and recs[-1]["lra_lu"] == 0.0
    assert recs[-1]["lra_stable"] is False           # the first 60 s (EBU Tech 3341 2.4)
    assert abs(recs[-1]["true_peak_dbtp"] + 6.02) <= 0.2, recs[-1]
    assert abs(recs[-1]["max_peak_db"] - (100 - 9.03)) <= 0.05   # sample peak, dB SPL


def test_true_peak_option_chooses_the_interpolator(tmp_path, capsys):
    """``--true-peak``: the default windowed sinc reads Tech 3341 case 17's tone (fs/6 at pi/3,
    0.1 s fades) at -6.02 dBTP within 0.04 dB, ``bs1770`` (Annex 2's 4x filter) at the -6.3
    that filter gives."""
    n, f = 2 * FS, FS // 10
    fade = 0.5 - 0.5 * np.cos(np.pi * np.arange(f) / f)
    env = np.concatenate([fade, np.ones(n - 2 * f), fade[::-1]])
    x = 0.5 * np.sin(2 * np.pi * (FS / 6) * np.arange(n) / FS + np.pi / 3) * env
    wav = _write_float32(tmp_path / "c17.wav", np.repeat(x[:, None], 2, axis=1))
    got = {}
    for tp in ("sinc", "bs1770"):
        rc, recs, err = _meter(capsys, "--input", wav, "--fast", "--json", "--true-peak", tp)
        assert rc == 0, err
        got[tp] = recs[-1]["true_peak_dbtp"]
    assert abs(got["sinc"] + 6.02) <= 0.04 and -6.4 <= got["bs1770"] <= -6.2, got


def test_wav_mono_equals_stereo_diotic(tmp_path, capsys):
    """A mono file is presented diotically: the same loudness as the stereo file with two
    identical channels; BS.1770 counts one channel (3 dB less)."""
    x = _tone(dbfs=-30.0)
    mono = _write_int16(tmp_path / "m.wav", x)
    stereo = _write_int16(tmp_path / "s.wav", np.repeat(x, 2, axis=1))
    rc, rm, err = _meter(capsys, "--input", mono, "--fast", "--json", "--spl-ref", "100",
                         "--model", "moore2016")
    assert rc == 0, err
    rc, rs, err = _meter(capsys, "--input", stereo, "--fast", "--json", "--spl-ref", "100",
                         "--model", "moore2016")
    assert rc == 0, err
    a, b = rm[-1], rs[-1]
    assert a["spl_db"] == pytest.approx(70.0, abs=0.1)
    assert b["spl_db"] == pytest.approx(70.0, abs=0.1)
    assert a["phon"] == pytest.approx(b["phon"], abs=0.05)
    assert a["stl_sone"] == pytest.approx(b["stl_sone"], rel=1e-3)
    assert a["lufs_integrated"] == pytest.approx(b["lufs_integrated"] - 3.01, abs=0.05)


def test_wav_terminal_output(tmp_path, capsys):
    """Without --json: a header naming what runs and spl_ref with its source, then the
    final statistics; the loudness model's figures only with --model."""
    wav = _write_int16(tmp_path / "tone.wav", _tone(seconds=1.0))
    capsys.readouterr()
    assert main(["meter", "--input", wav, "--fast", "--spl-ref", "90"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rtamt meter: R128 meter on ") and "spl_ref 90.00 dB (--spl-ref)" in out
    assert "SPL  70.0" in out and "\nfinal: blocks" in out
    assert "sone" not in out and "phon" not in out
    assert main(["meter", "--input", wav, "--fast", "--spl-ref", "90", "--model",
                 "moore2016"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rtamt meter: moore2016 on ") and "SPL  70.0" in out
    assert "| moore2016 STL " in out and " phon | SPL " in out


# ============================================================================ calibrate -> meter


def test_calibrate_then_meter(tmp_path, capsys, cal_path):
    """`rtamt calibrate` on a -20 dB re RMS 1.0 tone with --reference-db 94 writes spl_ref 114
    to $RTAMT_CALIBRATION; the meter then reads 94 dB SPL for that file, from --calibration
    or from the environment's default path; --spl-ref still wins."""
    wav = _write_int16(tmp_path / "cal.wav", _tone(seconds=2.0, dbfs=-20.0))
    r = subprocess.run([entry_point(), "calibrate", "--input", wav, "--reference-db", "94",
                        "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["path"] == str(cal_path) and cal_path.is_file()
    assert abs(res["spl_ref"] - 114.0) <= 0.05
    assert abs(res["measured_dbfs"] + 20.0) <= 0.05
    assert res["reference_db"] == 94.0 and res["frequency"] == 1000.0 and res["fs"] == FS
    stored = json.loads(cal_path.read_text())
    assert stored["spl_ref"] == res["spl_ref"]

    # explicit file, at another place (the default path is moved away)
    other = tmp_path / "elsewhere.json"
    cal_path.rename(other)
    rc, recs, err = _meter(capsys, "--input", wav, "--fast", "--json", "--calibration", str(other),
                           "--model", "moore2016")
    assert rc == 0, err
    assert abs(recs[-1]["spl_db"] - 94.0) <= 0.1, recs[-1]
    assert abs(recs[-1]["phon"] - 94.0) <= 1.5
    assert abs(recs[-1]["lufs_integrated"] + 20.0) <= 0.2      # LUFS do not depend on spl_ref
    # no file anywhere: the uncalibrated default, 100 dB SPL for RMS 1.0
    rc, recs, err = _meter(capsys, "--input", wav, "--fast", "--json")
    assert rc == 0, err
    assert abs(recs[-1]["spl_db"] - 80.0) <= 0.1
    # the default path from $RTAMT_CALIBRATION
    other.rename(cal_path)
    rc, recs, err = _meter(capsys, "--input", wav, "--fast", "--json")
    assert rc == 0, err
    assert abs(recs[-1]["spl_db"] - 94.0) <= 0.1
    # --spl-ref overrides the file
    rc, recs, err = _meter(capsys, "--input", wav, "--fast", "--json", "--spl-ref", "100")
    assert rc == 0, err
    assert abs(recs[-1]["spl_db"] - 80.0) <= 0.1
    # the terminal header says where spl_ref came from
    capsys.readouterr()
    assert main(["meter", "--input", wav, "--fast"]) == 0
    assert f"spl_ref 114.00 dB (calibration {cal_path})" in capsys.readouterr().out


def test_calibrate_text_output_and_out_option(tmp_path, capsys, cal_path):
    wav = _write_float32(tmp_path / "cal.wav", _tone(seconds=1.5, dbfs=-30.0, channels=2))
    out = tmp_path / "sub" / "dir" / "c.json"
    assert main(["calibrate", "--input", wav, "--reference-db", "90", "--channel", "1",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "spl_ref 120.00 dB" in text and str(out) in text
    assert cal.load(out).spl_ref == pytest.approx(120.0, abs=1e-3)
    assert not cal_path.exists()                 # --out given: the default path is untouched


# ============================================================================ errors (exit 2)


def _bad_cal(tmp_path, content):
    p = tmp_path / "bad.json"
    p.write_text(content)
    return p


@pytest.mark.parametrize("content, words", [
    (None, ["does not exist", "rtamt calibrate"]),
    ("{spl_ref: 94", ["not valid JSON"]),
    ('{"spl_ref": 500}', ["outside the plausible range", "500"]),
    ('{"spl_ref": 10}', ["outside the plausible range"]),
    ('{"spl_ref": "loud"}', ["must be a finite number", "'loud'"]),
    ('{"spl_ref": NaN}', ["must be a finite number"]),
    ('{"spl_ref": true}', ["must be a finite number"]),
    ('{"spl_ref": null}', ["must be a finite number"]),
    ('{"reference_db": 94}', ["no 'spl_ref' entry"]),
    ('[114.0]', ["no 'spl_ref' entry"]),
    ('{"spl_ref": 114, "gain": 3}', ["unknown entries", "gain"]),
])
def test_meter_bad_calibration_file(tmp_path, capsys, content, words):
    p = tmp_path / "missing.json" if content is None else _bad_cal(tmp_path, content)
    wav = _write_int16(tmp_path / "t.wav", _tone(seconds=0.5))
    rc, _, err = _meter(capsys, "--input", wav, "--fast", "--json", "--calibration", str(p))
    assert rc == 2
    assert err.startswith("rtamt meter: ") and str(p) in err
    for w in words:
        assert w in err, (w, err)


def test_meter_invalid_default_calibration_file_is_an_error(tmp_path, capsys, cal_path):
    """An unusable file at the default path ($RTAMT_CALIBRATION) is an error, not ignored."""
    cal_path.parent.mkdir(parents=True)
    cal_path.write_text("not json")
    wav = _write_int16(tmp_path / "t.wav", _tone(seconds=0.5))
    rc, _, err = _meter(capsys, "--input", wav, "--fast", "--json")
    assert rc == 2 and "not valid JSON" in err and str(cal_path) in err
    # ... unless --spl-ref is given explicitly
    rc, recs, err = _meter(capsys, "--input", wav, "--fast", "--json", "--spl-ref", "80")
    assert rc == 0, err
    assert recs and abs(recs[-1]["spl_db"] - 60.0) <= 0.1


def test_meter_spl_ref_must_be_finite(tmp_path, capsys):
    wav = _write_int16(tmp_path / "t.wav", _tone(seconds=0.5))
    rc, _, err = _meter(capsys, "--input", wav, "--fast", "--spl-ref", "nan")
    assert rc == 2 and "argument --spl-ref: must be finite" in err


@pytest.mark.parametrize("case", ["clipped", "500Hz", "fs", "silence", "noise", "short",
                                  "channel"])
def test_calibrate_errors(tmp_path, capsys, cal_path, case):
    argv = []
    if case == "clipped":       # full-scale sine: peak 1.0 >= 0.999
        wav = _write_float32(tmp_path / "c.wav", _tone(dbfs=20 * np.log10(1 / np.sqrt(2))))
        words = ["clipped", "lower the input gain"]
    elif case == "500Hz":
        wav = _write_float32(tmp_path / "c.wav", _tone(freq=500.0))
        words = ["dominant frequency 500.0 Hz", "1000 Hz calibrator tone"]
    elif case == "fs":
        wav = _write_int16(tmp_path / "c.wav", _tone(fs=44100), fs=44100)
        argv = ["--fs", "48000"]
        words = ["sample rate mismatch", "44100 Hz", "48000 Hz"]
    elif case == "silence":
        wav = _write_float32(tmp_path / "c.wav", np.zeros((FS * 2, 1)))
        words = ["no calibrator tone"]
    elif case == "noise":
        x = _tone(dbfs=-20.0) + 0.1 * np.random.default_rng(3).standard_normal((FS * 2, 1))
        wav = _write_float32(tmp_path / "c.wav", x)
        words = ["not a clean tone"]
    elif case == "short":
        wav = _write_float32(tmp_path / "c.wav", _tone(seconds=0.8))
        words = ["too short", "0.80 s"]
    else:
        wav = _write_float32(tmp_path / "c.wav", _tone())
        argv = ["--channel", "1"]
        words = ["--channel 1", "1 channels"]
    capsys.readouterr()
    assert main(["calibrate", "--input", wav, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rtamt calibrate: ")
    for w in words:
        assert w in err, (w, err)
    assert not cal_path.exists() and not cal_path.parent.exists()   # nothing written


def test_calibrate_error_via_entry_point_exit_code(tmp_path, cal_path):
    """The exit status of the console script itself is 2 (clipped tone)."""
    wav = _write_int16(tmp_path / "c.wav", np.sign(_tone()) * 0.9999)
    r = subprocess.run([entry_point(), "calibrate", "--input", wav], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "clipped" in r.stderr and r.stdout == ""
    assert not cal_path.exists()


def test_meter_wav_sample_rate_mismatch(tmp_path, capsys):
    wav = _write_int16(tmp_path / "t.wav", _tone(seconds=0.5, fs=44100), fs=44100)
    rc, _, err = _meter(capsys, "--input", wav, "--fast", "--fs", "48000")
    assert rc == 2 and "sample rate 44100" in err and "expected 48000" in err


@pytest.mark.parametrize("model", ["moore2016", "glasberg2002"])
def test_meter_sample_rate_too_low(tmp_path, capsys, model):
    wav = _write_int16(tmp_path / "t16.wav", _tone(seconds=0.5, fs=16000), fs=16000)
    rc, _, err = _meter(capsys, "--input", wav, "--fast", "--json", "--model", model)
    assert rc == 2 and "16000 Hz is too low" in err and "32000" in err


def test_meter_three_channels(tmp_path, capsys):
    """A 3-channel WAV without a channel mask: no layout is the convention (L R C, L R LFE,
    L R Cs): refused naming them; with --layout the BS.1770 meter runs on all three (the
    loudness model, which takes 1 or 2 channels, does not run: its fields are null)."""
    wav = _write_float32(tmp_path / "t3.wav", _tone(seconds=0.5, dbfs=-30, channels=3))
    rc, _, err = _meter(capsys, "--input", wav, "--fast", "--json")
    assert rc == 2 and "3 channels and no channel mask" in err and "3.0 (L R C)" in err \
        and "2.1 (L R LFE)" in err and "--layout" in err
    rc, recs, err = _meter(capsys, "--input", wav, "--fast", "--json", "--layout", "3.0",
                           "--model", "moore2016")
    assert rc == 0, err
    # a 1 kHz tone of RMS -30 dB reads -30 LUFS in one channel; 3 channels weighted 1.0
    assert abs(recs[-1]["lufs_momentary"] - (-30 + 10 * np.log10(3))) < 0.1
    # the loudness models take 1 or 2 channels: asked for on 3, it is left out, said once
    assert not set(MODEL_KEYS) & set(recs[-1]) and "--model moore2016 is not run" in err


class _NoDevices:
    """Stands in for sounddevice: PortAudio without any device (so that this file never
    initialises the real PortAudio, which would join a JACK server running at that moment)."""

    default = types.SimpleNamespace(device=(-1, -1))

    @staticmethod
    def query_hostapis():
        return []

    @staticmethod
    def query_devices(*args, **kwargs):
        return []


def test_meter_missing_input(tmp_path, capsys, monkeypatch):
    """A path that is not a file is "no such file" (not taken for a device name); a name
    that matches no device is "no such device": exit 2."""
    import rtamt.runtime.stream as stream

    monkeypatch.setattr(stream, "_sd", lambda: _NoDevices)
    p = tmp_path / "missing.wav"
    rc, _, err = _meter(capsys, "--input", str(p), "--fast", "--json")
    assert rc == 2 and err.strip() == f"rtamt meter: no such file: {p}"
    rc, _, err = _meter(capsys, "--input", "missing", "--fast", "--json")
    assert rc == 2 and "no such device: missing" in err and "input devices: none" in err


def test_meter_without_portaudio_is_a_clean_error(tmp_path, capsys, monkeypatch):
    """A device input when PortAudio cannot be loaded: exit 2 with the reason, no traceback."""
    import rtamt.runtime.stream as stream

    def no_portaudio():
        raise RuntimeError("sounddevice could not load PortAudio (install libportaudio2 / "
                           "portaudio)")

    monkeypatch.setattr(stream, "_sd", no_portaudio)
    rc, _, err = _meter(capsys, "--input", "some device", "--json", "--seconds", "1")
    assert rc == 2 and "could not load PortAudio" in err


# ============================================================================ rtamt.calibration


def test_measure_tone_values():
    x = _tone(seconds=1.5, dbfs=-26.0)[:, 0]
    c = cal.measure_tone(x, FS, 94.0, 1000.0, device="dev")
    assert c.spl_ref == pytest.approx(120.0, abs=1e-3)
    assert c.measured_dbfs == pytest.approx(-26.0, abs=1e-3)
    assert (c.reference_db, c.frequency, c.fs, c.device) == (94.0, 1000.0, FS, "dev")
    assert c.date and "T" in c.date
    # (channels, T): the first channel is measured; a settling transient is skipped
    y = np.stack([x, np.zeros_like(x)])
    y[0, :2000] *= 0.2
    c2 = cal.measure_tone(y, FS, 114.0, expected_fs=FS)
    assert c2.spl_ref == pytest.approx(140.0, abs=1e-3)
    # other calibrator frequencies (e.g. 250 Hz pistonphone)
    z = _tone(seconds=1.5, dbfs=-10.0, freq=250.0)[:, 0]
    assert cal.measure_tone(z, FS, 124.0, 250.0).spl_ref == pytest.approx(134.0, abs=1e-3)


@pytest.mark.parametrize("kind, kwargs, words", [
    ("clipped", {}, "clipped"),
    ("wrong_freq", {}, "dominant frequency"),
    ("fs", {"expected_fs": 44100.0}, "sample rate mismatch"),
    ("short", {}, "too short"),
    ("silence", {}, "no calibrator tone"),
    ("unsteady", {}, "not steady"),
    ("noisy", {}, "not a clean tone"),
    ("nan", {}, "must be finite"),
])
def test_measure_tone_errors(kind, kwargs, words):
    x = _tone(seconds=1.5, dbfs=-20.0)[:, 0]
    if kind == "clipped":
        x = x.copy()
        x[100] = 0.9995
    elif kind == "wrong_freq":
        x = _tone(seconds=1.5, dbfs=-20.0, freq=1100.0)[:, 0]
    elif kind == "short":
        x = x[: int(0.9 * FS)]
    elif kind == "silence":
        x = np.zeros_like(x)
    elif kind == "unsteady":
        x = x.copy()
        x[int(1.0 * FS):] *= 10 ** (2 / 20)           # 2 dB step after settling
    elif kind == "noisy":
        x = x + 0.1 * np.random.default_rng(1).standard_normal(x.size)
    elif kind == "nan":
        x = x.copy()
        x[5] = np.nan
    with pytest.raises(CalibrationError, match=words):
        cal.measure_tone(x, FS, 94.0, 1000.0, **kwargs)


def test_calibration_error_is_a_value_error():
    assert issubclass(CalibrationError, ValueError)


def test_save_load_roundtrip(tmp_path, cal_path):
    c = cal.Calibration(spl_ref=111.5, measured_dbfs=-17.5, fs=44100.0, device="x")
    p = cal.save(c)                                   # default: $RTAMT_CALIBRATION
    assert p == cal_path and cal.default_path() == cal_path
    assert not list(cal_path.parent.glob("*.tmp"))     # written atomically, no leftovers
    assert cal.load() == c and cal.load(p) == c
    p2 = cal.save(c, tmp_path / "x" / "y.json")
    assert cal.load(p2) == c
    # an integer spl_ref is fine
    p3 = _bad_cal(tmp_path, '{"spl_ref": 100}')
    assert cal.load(p3).spl_ref == 100


def test_default_path_without_env(monkeypatch):
    monkeypatch.delenv("RTAMT_CALIBRATION")
    p = cal.default_path()
    assert p.parts[-3:] == (".config", "rtamt", "calibration.json")


@pytest.mark.parametrize("content, words", [
    (None, "does not exist"),
    ("", "not valid JSON"),
    ('{"spl_ref": 200.5}', "plausible range"),
    ('{"spl_ref": "94"}', "finite number"),
    ('{"spl_ref": Infinity}', "finite number"),
    ("{}", "no 'spl_ref'"),
    ('{"spl_ref": 94, "x": 1}', "unknown entries"),
])
def test_load_errors(tmp_path, content, words):
    p = tmp_path / "nope.json" if content is None else _bad_cal(tmp_path, content)
    with pytest.raises(CalibrationError, match=words):
        cal.load(p)


def test_resolve_spl_ref(tmp_path, cal_path):
    # nothing anywhere: the AMT default
    v, src = cal.resolve_spl_ref(None)
    assert v == 100.0 and "default" in src
    # explicit value wins, even over an explicit (missing or valid) file
    assert cal.resolve_spl_ref(87.5, tmp_path / "missing.json") == (87.5, "--spl-ref")
    good = cal.save(cal.Calibration(spl_ref=120.0), tmp_path / "good.json")
    assert cal.resolve_spl_ref(90, good)[0] == 90.0
    # an explicit file
    v, src = cal.resolve_spl_ref(None, good)
    assert v == 120.0 and str(good) in src
    # an explicit file that is missing is an error (no fall-back to the default)
    with pytest.raises(CalibrationError, match="does not exist"):
        cal.resolve_spl_ref(None, tmp_path / "missing.json")
    # the default file, once it exists
    cal.save(cal.Calibration(spl_ref=105.25))
    v, src = cal.resolve_spl_ref(None)
    assert v == 105.25 and str(cal_path) in src
    # an invalid default file is an error
    cal_path.write_text('{"spl_ref": 1e6}')
    with pytest.raises(CalibrationError, match="plausible range"):
        cal.resolve_spl_ref(None)
    # explicit non-finite values are refused
    for bad in (float("nan"), float("inf")):
        with pytest.raises(CalibrationError, match="finite"):
            cal.resolve_spl_ref(bad)


def test_meter_into_a_pipe_writes_lines_not_carriage_returns():
    """stdout is a pipe here: one line per update, no '\\r' line rewriting (issue 19)."""
    r = subprocess.run([entry_point(), "meter", "--input", "demo", "--seconds", "1", "--fast"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stdout
    updates = [ln for ln in r.stdout.splitlines() if "LUFS" in ln]
    assert len(updates) >= 3, r.stdout


# ============================================================ issue 38: an input under 100 ms
def test_short_file_gets_one_reading_saying_why():
    """A 50 ms file, shorter than one --interval (0.1 s): the meter printed no reading and
    empty JSON.  Now one reading over all of it, with a note (JSON ``note``, a stderr
    line) saying so and which figures it is too short for; exit 0."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        wav = _write_int16(f"{d}/click.wav", _tone(seconds=0.05))
        r = subprocess.run([entry_point(), "meter", "--input", wav, "--fast", "--json",
                            "--spl-ref", "100"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        (rec,) = _json_lines(r.stdout)
        _check_record(rec)
        assert rec["t"] == 0.05 and rec["spl_db"] == pytest.approx(80.0, abs=0.2)
        assert rec["lufs_momentary"] is None and rec["lufs_integrated"] is None
        assert rec["note"] == ("the input ended after 0.05 s, before the first --interval 0.1 "
                               "s update: one reading over all of it (too short for "
                               "momentary LUFS and short-term LUFS: null)")
        assert f"rtamt meter: {rec['note']}" in r.stderr.splitlines()
        r = subprocess.run([entry_point(), "meter", "--input", wav, "--fast", "--spl-ref",
                            "100"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "t    0.05 s | SPL  80.0" in r.stdout, r.stdout
        assert "before the first --interval 0.1 s update" in r.stderr


def test_no_audio_processed_is_a_record_saying_so(capsys):
    """The run ended before any block (e.g. stopped at once): a JSON record ``reading:
    null`` with the reason, and the line on stderr."""
    from rtamt_apps import meter

    args = types.SimpleNamespace(json=True, interval=0.1)
    upd = meter._Updates(None, FS, 0.1, 100.0, "moore2016")
    meter._too_short(args, [upd])
    out, err = capsys.readouterr()
    (rec,) = _json_lines(out)
    assert rec == {"t": 0.0, "reading": None,
                   "note": "no reading: the run ended before any audio was processed (0 s)"}
    assert err == f"rtamt meter: {rec['note']}\n"
