"""``rtamt stream --per-channel --out DIR`` (issue 38, point 1): ``rtamt process``'s output
options and defaults, the size estimated and refused before the run, memory bounded, and a
failed write that leaves nothing under ``DIR`` (an older output there intact).

Real parts: the app runs as a subprocess (``python -m rtamt_apps``) on real WAV files; the
stored arrays are compared with what ``rtamt process`` stores for the same channel (a mono
WAV of it); write failures are real: a file-size limit (``RLIMIT_FSIZE``: ``EFBIG``, as a
full disk gives ``ENOSPC``), a 1 MB tmpfs where mounting is allowed (root, CI), and an
address-space limit (``RLIMIT_AS``) that the old code, which queued every block at full
rate, could not run under.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import pytest
import soundfile as sf

from rtamt.io import read_outputs

from _helpers import file_tree, mounted_tmpfs

pytestmark = pytest.mark.timeout(600)

FS = 48000


def _cli(*args, timeout=300, preexec_fn=None, env=None):
    return subprocess.run([sys.executable, "-m", "rtamt_apps", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          preexec_fn=preexec_fn, env=env)


def _signal(seconds: float) -> np.ndarray:
    """(T, 2) float32: an amplitude-modulated 1 kHz tone on channel 0, seeded noise on 1."""
    n = int(seconds * FS)
    t = np.arange(n) / FS
    x = np.empty((n, 2), np.float32)
    x[:, 0] = 0.05 * np.sin(2 * np.pi * 1000 * t) * (1 + np.sin(2 * np.pi * 8 * t)) / 2
    x[:, 1] = 0.02 * np.random.default_rng(1).standard_normal(n)
    return x


@pytest.fixture(scope="module")
def stereo(tmp_path_factory):
    """A 1 s stereo float WAV and a mono WAV of each channel (the same samples)."""
    d = tmp_path_factory.mktemp("so")
    x = _signal(1.0)
    sf.write(d / "st.wav", x, FS, subtype="FLOAT")
    for c in range(2):
        sf.write(d / f"m{c}.wav", x[:, c], FS, subtype="FLOAT")
    return d, x


def _one_error_line(err: str) -> str:
    """The one stderr line that is neither the run's first line (what --out stores) nor
    the hint about blocks that missed their budget (a loaded machine)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines()
             if ln.strip() and " missed their " not in ln
             and (not ln.startswith("rtamt stream: --out ") or "nothing written" in ln)]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------ the same values as process
@pytest.mark.parametrize("opts", [
    (),                                                         # the defaults
    ("--outputs", "adaptloop,modfb", "--decimate", "96", "--pool", "max"),
    ("--model", "moore2016", "--store-dtype", "float64"),       # frames, every output
], ids=["defaults", "stages-decimate-max", "moore2016"])
def test_outputs_equal_what_process_stores_per_channel(stereo, tmp_path, opts):
    """Every channel's DIR/ch<c>/ holds, array for array, what ``rtamt process`` stores for
    a mono file of that channel with the same options: by default the last stage, pooled
    to 100 RMS frames per second, in float32."""
    d, x = stereo
    out = tmp_path / "out"
    p = _cli("stream", "--input", str(d / "st.wav"), "--per-channel", "--fast", "--threads",
             "2", *opts, "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"rtamt stream: --out {out}: " in p.stderr and " about " in p.stderr, p.stderr
    assert f"rtamt stream: wrote {out} " in p.stderr, p.stderr
    top = json.loads((out / "rtamt.json").read_text())
    assert sorted(top["members"]) == ["ch0", "ch1"] and top["channels"] == 2
    nblocks = -(-x.shape[0] // 256)
    stored = []
    for c in range(2):
        ref_dir = tmp_path / f"p{c}"
        r = _cli("process", str(d / f"m{c}.wav"), *opts, "--out", str(ref_dir))
        assert r.returncode == 0, r.stdout + r.stderr
        got, ref = read_outputs(out / f"ch{c}"), read_outputs(ref_dir)
        names = [str(k) for k in ref["outputs"]]
        if not opts:
            assert names == ["modfb"] and got["modfb"].dtype == np.float32
            assert got["modfb"].shape == (275, x.shape[0] // 480)          # 100 frames/s
        for k in names:
            assert got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape, k
            assert np.array_equal(got[k], ref[k], equal_nan=True), (c, k)
        for k in ref:                      # the metadata too (block_sizes: process's own)
            if k not in names and k != "block_sizes":
                nan = np.issubdtype(ref[k].dtype, np.floating)
                assert np.array_equal(got[k], ref[k], equal_nan=nan), k
        assert np.array_equal(got["block_start"], np.arange(nblocks) * 256)
        assert int(got["block_frames"].sum()) == x.shape[0]
        info = json.loads((out / f"ch{c}" / "rtamt.json").read_text())
        assert info["stream"] == f"ch{c}" and info["channel"] == c and info["gaps"] == 0
        stored.append(got[names[0]])
    assert not np.array_equal(stored[0], stored[1], equal_nan=True)   # each its own column


# ------------------------------------------------------------ size: checked first
def test_output_over_the_limit_or_the_free_space_is_refused_before_the_run(stereo, tmp_path,
                                                                           capsys,
                                                                           monkeypatch):
    """Every sample of modfb in float32 for 2 x 1 s at 48 kHz is 2 x 275 x 48000 x 4 bytes
    (106 MB): refused with that figure above --max-output-gb, with the free space where the
    disk holds less, before anything is opened or written; --force goes ahead."""
    d, x = stereo
    est = 2 * 275 * x.shape[0] * 4
    out = tmp_path / "o"
    p = _cli("stream", "--input", str(d / "st.wav"), "--per-channel", "--fast",
             "--frame-rate", "0", "--max-output-gb", "0.05", "--out", str(out))
    assert p.returncode == 2, p.stdout + p.stderr
    line = _one_error_line(p.stderr)
    assert line.startswith("rtamt stream: error: the output would be about "
                           f"{est / 1e9:.3g} GB, more than --max-output-gb 0.05"), line
    assert "--force" in line and "--frame-rate" in line
    assert list(tmp_path.iterdir()) == [] and p.stdout == ""
    # the free space (in-process: the file system is asked through shutil.disk_usage)
    import rtamt_apps.outputs as outputs_mod
    from rtamt_apps.cli import main

    real = outputs_mod.shutil.disk_usage
    monkeypatch.setattr(outputs_mod.shutil, "disk_usage",
                        lambda path: real(path)._replace(free=100_000))
    capsys.readouterr()
    rc = main(["stream", "--input", str(d / "st.wav"), "--per-channel", "--fast",
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "0.1 MB free" in _one_error_line(err), err
    assert list(tmp_path.iterdir()) == []
    p = _cli("stream", "--input", str(d / "st.wav"), "--per-channel", "--fast",
             "--frame-rate", "0", "--max-output-gb", "0.05", "--force", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert read_outputs(out / "ch1")["modfb"].shape == (275, x.shape[0])
    assert sum(f.stat().st_size for f in out.glob("ch*/modfb.npy")) == pytest.approx(est,
                                                                                   rel=1e-3)


def test_output_options_need_out(stereo):
    d, _ = stereo
    for opt in (["--frame-rate", "10"], ["--outputs", "all"], ["--padded"]):
        p = _cli("stream", "--input", str(d / "st.wav"), "--per-channel", "--fast", *opt)
        assert p.returncode == 2, p.stderr
        assert _one_error_line(p.stderr) == (f"rtamt stream: error: argument {opt[0]}: only "
                                             "with --out")


# ------------------------------------------------------------ a failed write
def _limit_file_size(nbytes: int):
    def pre():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return pre


def test_write_failure_exits_non_zero_and_keeps_the_older_output(stereo, tmp_path):
    """Under a 64 kB file-size limit the first block's write fails (EFBIG: the limit, as a
    full disk gives ENOSPC): exit 1, one line saying what had been written, nothing under
    the destination's name and the older output there byte for byte as it was."""
    d, _ = stereo
    out = tmp_path / "o"
    argv = ("stream", "--input", str(d / "st.wav"), "--per-channel", "--fast", "--out",
            str(out))
    p = _cli(*argv)                                  # the older output (~0.2 MB)
    assert p.returncode == 0, p.stderr
    before = file_tree(tmp_path)
    p = _cli(*argv, preexec_fn=_limit_file_size(64 * 1024))
    assert p.returncode == 1, p.stdout + p.stderr
    line = _one_error_line(p.stderr)
    assert "File too large" in line and f"nothing written to {out}" in line, line
    assert "had been written" in line and "older output there is unchanged" in line, line
    assert file_tree(tmp_path) == before                 # nothing new, nothing hidden left


def test_full_disk_exits_non_zero_and_keeps_the_older_output(stereo, tmp_path):
    """A 1 MB tmpfs: the older output fits, every sample at full rate (106 MB, --force past
    the free-space check) does not: ENOSPC, exit 1, the older output intact."""
    d, _ = stereo
    with mounted_tmpfs(tmp_path / "small") as small:     # or a skip (a failure on CI)
        out = small / "o"
        argv = ("stream", "--input", str(d / "st.wav"), "--per-channel", "--fast")
        p = _cli(*argv, "--out", str(out))
        assert p.returncode == 0, p.stderr
        before = file_tree(small)
        p = _cli(*argv, "--frame-rate", "0", "--force", "--out", str(out))
        assert p.returncode == 1, p.stdout + p.stderr
        line = _one_error_line(p.stderr)
        assert "No space left" in line and f"nothing written to {out}" in line, line
        assert file_tree(small) == before


def test_under_a_memory_limit_the_run_is_complete_or_fails_clearly(tmp_path):
    """10 s of stereo under a 1.5 GiB address-space limit: the old code queued every block
    at full rate in float64 (2.2 kB per sample and channel) and exited 0 with a short
    output after a MemoryError; the output is now complete (memory does not grow with the
    run) - or, where the limit cannot hold even the start, the run fails with one line and
    writes nothing.  Never exit 0 with a short output."""
    x = np.tile(_signal(1.0), (10, 1))
    wav = tmp_path / "ten.wav"
    sf.write(wav, x, FS, subtype="PCM_16")
    out = tmp_path / "o"
    lim = int(1.5 * 2**30)

    def pre():
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    p = _cli("stream", "--input", str(wav), "--per-channel", "--fast", "--threads", "2",
             "--out", str(out), preexec_fn=pre, env=env)
    if p.returncode == 0:
        for c in range(2):                 # (the old code: 252160 of 480000 frames)
            got = read_outputs(out / f"ch{c}")
            assert int(got["block_frames"].sum()) == x.shape[0], c
            assert got["modfb"].shape == (275, x.shape[0] // 480), c
    else:
        _one_error_line(p.stderr)
        assert not out.exists()
    assert p.returncode == 0, p.stderr      # here (any machine rtamt runs on) it fits
    assert [q.name for q in tmp_path.iterdir() if q.name.startswith(".")] == []


# ------------------------------------------------------------ an open-ended run
def _endless(monkeypatch, realtime: bool):
    """``--input`` opens an endless source (the demo looped; in real time, or as fast as
    possible): a run with no length known before it starts, as a device without
    --seconds.  Returns the stream app's module."""
    import rtamt_apps.stream as stream_mod
    from rtamt.runtime import DemoSource
    from rtamt_apps.inputs import Input

    def open_input(*a, **k):
        src = DemoSource(16000.0, blocksize=256, realtime=realtime, channels=2)
        return Input("device", "endless test source", 16000.0, 2, source=src)

    monkeypatch.setattr(stream_mod, "open_input", open_input)
    return stream_mod


@pytest.fixture
def endless(monkeypatch):
    return _endless(monkeypatch, realtime=False)


def test_open_ended_run_is_refused_when_the_disk_holds_less_than_minutes(endless, tmp_path,
                                                                        capsys, monkeypatch):
    from rtamt_apps.cli import main

    monkeypatch.setattr(endless, "free_bytes", lambda dest: 300e6)
    capsys.readouterr()
    rc = main(["stream", "--input", "x", "--per-channel", "--fast", "--out",
               str(tmp_path / "o")])
    err = capsys.readouterr().err
    line = _one_error_line(err)
    assert rc == 2 and "per minute" in line and "0.3 GB free" in line, err
    assert "--seconds" in line and "--force" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("why", ["disk", "limit"])
def test_open_ended_run_stops_before_the_disk_fills(endless, tmp_path, capsys, monkeypatch,
                                                    why):
    """The free space falls below the margin (or the output reaches --max-output-gb)
    during an open-ended run: it stops, keeps what it recorded (committed, complete up to
    there) and exits with 1, saying why."""
    from rtamt_apps.cli import main

    state = {"calls": 0}

    def free(dest):
        state["calls"] += 1
        return 1e12 if why == "limit" or state["calls"] < 3 else 1e6

    monkeypatch.setattr(endless, "free_bytes", free)
    out = tmp_path / "o"
    capsys.readouterr()
    opts = ["--max-output-gb", "0.0002"] if why == "limit" else []
    rc = main(["stream", "--input", "x", "--per-channel", "--fast", *opts, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "Traceback" not in err
    stop = [ln for ln in err.splitlines() if ln.startswith("rtamt stream: stopped early: ")]
    word = "left free" if why == "disk" else "reached --max-output-gb 0.0002"
    assert len(stop) == 1 and word in stop[0], err
    info = json.loads((out / "rtamt.json").read_text())
    assert word in info["stopped"]
    for c in range(2):
        got = read_outputs(out / f"ch{c}")
        n = int(got["block_frames"].sum())
        assert n > 0 and got["modfb"].shape[-1] == n // 160        # 100 frames/s at 16 kHz
        assert np.array_equal(got["block_start"], np.arange(got["block_start"].size) * 256)


def test_input_that_fails_part_way_leaves_no_output(tmp_path):
    """A FLAC cut at 60 %: the file fails while it is read (or, with a reader that decodes
    it when opening, before the run): a non-zero exit naming the file, no output."""
    x = np.tile(_signal(1.0), (3, 1))
    flac = tmp_path / "cut.flac"
    sf.write(flac, x, FS, subtype="PCM_16")
    data = flac.read_bytes()
    flac.write_bytes(data[:int(len(data) * 0.6)])
    out = tmp_path / "o"
    p = _cli("stream", "--input", str(flac), "--per-channel", "--fast", "--out", str(out))
    assert p.returncode in (2, 3), p.stdout + p.stderr
    assert "Traceback" not in p.stderr and str(flac) in p.stderr, p.stderr
    assert "truncated" in p.stderr, p.stderr
    assert sorted(q.name for q in tmp_path.iterdir()) == ["cut.flac"]


def test_live_run_whose_writer_falls_behind_fails_and_writes_nothing(tmp_path, capsys,
                                                                     monkeypatch):
    """Live (no --fast), a writer slower than the input (each block's write made to take
    50 ms, three blocks' worth of audio) fills the taps: the run ends with exit 1 and one
    line naming the first block lost, nothing is written - not an output with a hole."""
    stream_mod = _endless(monkeypatch, realtime=True)
    from rtamt_apps.cli import main

    real = stream_mod._Recorder._write

    def slow(self, c, tap):
        time.sleep(0.05)
        real(self, c, tap)

    monkeypatch.setattr(stream_mod._Recorder, "_write", slow)
    out = tmp_path / "o"
    capsys.readouterr()
    t0 = time.monotonic()
    rc = main(["stream", "--input", "x", "--per-channel", "--admission", "best-effort",
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and time.monotonic() - t0 < 60, err
    line = _one_error_line(err)
    assert "the writer fell behind: block " in line and "lost" in line, line
    assert f"nothing written to {out}" in line
    assert list(tmp_path.iterdir()) == []


def test_jack_device_without_seconds_is_sized_per_minute_and_committed_on_sigterm(tmp_path):
    """A real device (the JACK dummy server's two capture ports) without --seconds: the
    size is told per minute before the run; SIGTERM ends it with the output committed
    (exit 143), every block the streams processed in it."""
    import signal

    from _jack import jack_server, skip_unless_jack

    skip_unless_jack()
    out = tmp_path / "o"
    with jack_server(fs=FS, period=256, portaudio=False):
        p = subprocess.Popen([sys.executable, "-m", "rtamt_apps", "stream", "--input", "system",
                              "--hostapi", "JACK", "--channels", "2", "--per-channel",
                              "--blocksize", "0", "--admission", "best-effort", "--json",
                              "--out", str(out)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        try:
            first = p.stdout.readline()               # the first stats line: it runs
            assert first.startswith("{"), first + p.stderr.read()
            time.sleep(1.0)
            p.send_signal(signal.SIGTERM)
            rest, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    assert p.returncode == 143, err
    assert "per minute of input" in err and "Traceback" not in err, err
    finals = {r["name"]: r for r in map(json.loads, rest.splitlines()) if r["final"]}
    for c in range(2):
        got = read_outputs(out / f"ch{c}")
        n = int(got["block_frames"].sum())
        assert n == finals[f"ch{c}"]["frames_processed"] > FS, (n, finals)
        assert got["modfb"].shape == (275, n // 480)
