"""One reader, one verdict (issue 38, point 3): a WAV streamed by ``ffmpeg ... -f wav -``
(placeholder sizes 0xFFFFFFFF in its header), an MP3 without a Xing/Info tag
(``-write_xing 0``: libsndfile estimates its length from the file size), a truncated WAV
(its header announces more than it holds) and a corrupt file go through ``rtamt process``,
``stream``, ``loudness`` and ``features`` with the same verdict in each: the first two
accepted with the length reading gives (what soundfile reads), the truncated one refused
with the frames read (or, with ``--partial``, processed from them, the output saying so),
the corrupt one refused as unreadable.  Each app runs as a subprocess (exit status, stderr).

Before this, ``process``, ``stream`` and ``loudness`` refused the streamed WAV ("its header
announces 2147483647 frames") and the MP3, and ``features`` computed the truncated WAV
silently.  The files (0.25 s, 16 kHz mono) are made with ffmpeg at test time; without
ffmpeg the tests skip, unless ``RTAMT_REQUIRE_FFMPEG=1`` (CI installs it:
.ci/system-deps)."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

FS = 16000
SECONDS = 0.25
APPS = ("process", "stream", "loudness", "features")
KINDS = ("streamed_wav", "mp3_no_xing", "truncated_wav", "truncated_wav_partial", "corrupt")


def _ffmpeg() -> str:
    exe = shutil.which("ffmpeg")
    if exe is None:
        reason = "ffmpeg is not installed (.ci/system-deps installs it)"
        if os.environ.get("RTAMT_REQUIRE_FFMPEG", "") not in ("", "0"):
            pytest.fail(reason + " (RTAMT_REQUIRE_FFMPEG is set)", pytrace=False)
        pytest.skip(reason)
    return exe


def _tone_args(exe):
    return [exe, "-v", "error", "-nostdin", "-f", "lavfi", "-i",
            f"sine=frequency=1000:sample_rate={FS}:duration={SECONDS}", "-ac", "1"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """{kind: (path, expected)}: ``expected`` is ``("ok", frames)``, ``("truncated",
    announced, frames read)`` or ``("unreadable",)``."""
    exe = _ffmpeg()
    d = tmp_path_factory.mktemp("verdicts")
    out = {}
    streamed = d / "streamed.wav"                 # ffmpeg writing to a pipe
    streamed.write_bytes(subprocess.run(_tone_args(exe) + ["-f", "wav", "-"],
                                        capture_output=True, check=True).stdout)
    assert streamed.read_bytes()[4:8] == b"\xff\xff\xff\xff"       # RIFF size: placeholder
    out["streamed_wav"] = (streamed, ("ok", sf.info(str(streamed)).frames))
    mp3 = d / "noxing.mp3"
    subprocess.run(_tone_args(exe) + ["-write_xing", "0", str(mp3)], check=True)
    data = mp3.read_bytes()
    assert not any(t in data for t in (b"Xing", b"Info", b"VBRI"))
    n_mp3 = sf.read(str(mp3))[0].shape[0]                          # what decoding gives
    assert sf.info(str(mp3)).frames != n_mp3                        # libsndfile's estimate
    out["mp3_no_xing"] = (mp3, ("ok", n_mp3))
    full = d / "full.wav"
    subprocess.run(_tone_args(exe) + [str(full)], check=True)
    n = sf.info(str(full)).frames
    cut = d / "truncated.wav"
    data = full.read_bytes()
    cut.write_bytes(data[:len(data) - 2 * (n // 2)])               # half the samples gone
    have = sf.info(str(cut)).frames
    assert 0 < have < n
    out["truncated_wav"] = (cut, ("truncated", n, have))
    out["truncated_wav_partial"] = (cut, ("ok", have))
    bad = d / "corrupt.wav"
    bad.write_bytes(np.random.default_rng(0).bytes(3000))
    out["corrupt"] = (bad, ("unreadable",))
    return out


def _run(argv, cwd):
    r = subprocess.run([sys.executable, "-m", "rtamt_apps", *argv], capture_output=True,
                       text=True, timeout=300, cwd=cwd)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def _app(app, path, partial, tmp):
    """Run ``app`` on ``path``: (exit status, stderr, frames processed (loudness: seconds)
    or None, the
    "processed from a truncated file" note the output carries or None, failure text)."""
    extra = ["--partial"] if partial else []
    if app == "process":
        r = _run(["process", str(path), "--out", str(tmp / "o"), *extra], tmp)
        frames = note = None
        if r.returncode == 0:
            frames = int(r.stdout.split(" samples, ")[0].rsplit(" ", 1)[-1])
            note = json.loads((tmp / "o" / "rtamt.json").read_text())["input_truncated"]
        return r.returncode, r.stderr, frames, note, r.stderr
    if app == "stream":
        r = _run(["stream", "--input", str(path), "--fast", "--json", "--per-channel",
                  "--out", str(tmp / "s"), *extra], tmp)
        frames = None
        note = next((s for s in r.stderr.splitlines() if "(--partial)" in s), None)
        if r.returncode == 0:
            final = [json.loads(s) for s in r.stdout.splitlines() if s.startswith("{")][-1]
            assert final["final"] and final["dropped_frames"] == 0
            frames = final["frames_processed"]
            kept = json.loads((tmp / "s" / "rtamt.json").read_text())["input_truncated"]
            assert (kept is None) == (note is None) and (note is None or kept in note)
        return r.returncode, r.stderr, frames, note, r.stderr
    if app == "loudness":
        r = _run(["loudness", "--json", str(path), *extra], tmp)
        rec = json.loads(r.stdout.strip().splitlines()[-1])
        if "error" in rec:
            return r.returncode, r.stderr, None, None, rec["error"]
        return r.returncode, r.stderr, rec["duration_s"], rec["truncated"], r.stderr
    r = _run(["features", str(path), "--out", str(tmp / "f"), "--storage", "numpy", *extra],
             tmp)
    failures = (tmp / "f" / "failures.jsonl").read_text().splitlines()
    if failures:
        assert len(failures) == 1
        return r.returncode, r.stderr, None, None, json.loads(failures[0])["error"]
    with gzip.open(tmp / "f" / "cuts.jsonl.gz", "rt") as f:
        (cut,) = [json.loads(s) for s in f]
    note = (cut.get("custom") or {}).get("rtamt_truncated")
    feats = np.load(tmp / "f" / "feats" / cut["features"]["storage_key"])
    assert feats.shape[0] == cut["features"]["num_frames"] == (
        cut["recording"]["num_samples"] + 80) // 160          # lhotse's count, 10 ms frames
    return r.returncode, r.stderr, cut["recording"]["num_samples"], note, r.stdout


@pytest.mark.parametrize("app", APPS)
@pytest.mark.parametrize("kind", KINDS)
def test_same_verdict_in_every_app(files, kind, app, tmp_path):
    path, expected = files[kind]
    rc, err, frames, note, failure = _app(app, path, kind.endswith("_partial"), tmp_path)
    if expected[0] == "ok":
        assert rc == 0, err
        if app == "loudness":                    # duration_s: 3 decimals
            assert frames == pytest.approx(expected[1] / FS, abs=5e-4)
        else:
            assert frames == expected[1]
        if kind == "truncated_wav_partial":      # the output says what was left out
            n, have = files["truncated_wav"][1][1:]
            assert note and f"announces {n} frames, only {have} could be read" in note
            assert f"processed the {have} frames read (--partial)" in note
        else:
            assert note is None
        return
    assert rc != 0, failure
    assert frames is None
    if expected[0] == "truncated":
        n, have = expected[1:]
        assert "truncated" in failure and f"announces {n} frames" in failure
        assert f"only {have} could be read" in failure
        assert f"--partial processes the {have} frames read" in failure
    else:
        assert "not a readable audio file" in failure
    if app != "features":                    # features lists its failures on stdout
        assert str(path.name) in err
