"""``rtamt stream --per-channel`` / ``rtamt meter --per-channel``: every channel of a
multichannel input is its own stream on an :class:`rtamt.scheduler.Scheduler`, fed by a
:class:`rtamt.scheduler.FanOut`.

Real parts: the apps run as subprocesses on real multichannel WAV files.  A stream's
output (``--out DIR``: ``DIR/ch<c>/``; at full rate in float64, ``--frame-rate 0
--store-dtype float64``) is bit-identical to the model run offline on that channel; the
meter's records per channel equal the meter's on a mono file of that
channel.  Usage errors exit with 2 and one line, no traceback."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy.io import wavfile
from test_cli_errors import _usage_error

from rtamt.io import read_outputs
from rtamt.models import Dau1997
from rtamt_apps.cli import main

pytestmark = pytest.mark.timeout(300)

FS = 48000
N_CH = 4
#: every sample of the last stage, in float64: what the model computes
FULL = ("--frame-rate", "0", "--store-dtype", "float64")


def _signal(seconds=0.5) -> np.ndarray:
    """(T, 4) float32: a different tone and level per channel, then seeded noise."""
    n = int(seconds * FS)
    t = np.arange(n) / FS
    k = np.arange(N_CH)
    x = np.sqrt(2) * 10 ** (-(20 + 6 * k) / 20) * np.sin(2 * np.pi * 500 * (k + 1) * t[:, None])
    x[n // 2:] = 0.03 * np.random.default_rng(3).standard_normal((n - n // 2, N_CH))
    return x.astype(np.float32)


def _cli(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "rtamt_apps", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def wav4(tmp_path_factory):
    x = _signal()
    path = tmp_path_factory.mktemp("pc") / "four.wav"
    wavfile.write(path, FS, x)
    return str(path), x


def test_stream_per_channel_outputs_equal_offline(wav4, tmp_path):
    path, x = wav4
    out = tmp_path / "out"
    p = _cli("stream", "--input", path, "--per-channel", "--fast", "--threads", "2",
             "--out", str(out), *FULL)
    assert p.returncode == 0, p.stdout + p.stderr
    finals = [ln for ln in p.stdout.splitlines() if ln.startswith("final ")]
    assert [ln.split(":")[0] for ln in finals] == [f"final ch{c}" for c in range(N_CH)]
    nblocks = -(-x.shape[0] // 256)
    for ln in finals:
        assert f": blocks {nblocks} " in ln and " dropped 0 " in ln and "skipped 0 " in ln, ln
    for c in range(N_CH):
        got = read_outputs(out / f"ch{c}")
        info = json.loads((out / f"ch{c}" / "rtamt.json").read_text())
        assert info["stream"] == f"ch{c}" and info["channel"] == c and info["model"] == "dau1997"
        offline = Dau1997(FS)(x[:, c].astype(np.float64))
        assert got["modfb"].dtype == np.float64
        assert np.array_equal(got["modfb"], offline, equal_nan=True), f"channel {c}"
        assert np.array_equal(got["block_start"], np.arange(nblocks) * 256)
        assert float(got["fs"]) == FS
    # the channels differ (each stream got its own column)
    a, b = (np.load(out / f"ch{c}" / "modfb.npy") for c in (0, 3))
    assert not np.array_equal(a, b, equal_nan=True)


def test_stream_per_channel_mono_and_demo_channels(tmp_path):
    """A mono input is one stream (ch0); the demo on ``--channels 3`` is three identical
    streams, each equal to the model offline on the demo."""
    mono = tmp_path / "mono.wav"
    x = _signal(0.25)[:, 1]
    wavfile.write(mono, FS, x)
    p = _cli("stream", "--input", str(mono), "--per-channel", "--fast", "--out",
             str(tmp_path / "m"), *FULL)
    assert p.returncode == 0, p.stdout + p.stderr
    assert [ln.split(":")[0] for ln in p.stdout.splitlines()] == ["final ch0"]
    assert np.array_equal(np.load(tmp_path / "m" / "ch0" / "modfb.npy"),
                          Dau1997(FS)(x.astype(np.float64)), equal_nan=True)
    p = _cli("stream", "--input", "demo", "--fs", "16000", "--channels", "3", "--per-channel",
             "--fast", "--seconds", "0.25", "--json", "--out", str(tmp_path / "d"), *FULL)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert [r["name"] for r in recs if r["final"]] == ["ch0", "ch1", "ch2"]
    outs = [np.load(tmp_path / "d" / f"ch{c}" / "modfb.npy") for c in range(3)]
    assert outs[0].shape[-1] == 4000
    assert all(np.array_equal(o, outs[0], equal_nan=True) for o in outs[1:])


def _meter_json(*args):
    p = _cli("meter", *args, "--fast", "--json", "--spl-ref", "100", "--interval", "0.25")
    assert p.returncode == 0, p.stdout + p.stderr
    return [json.loads(ln) for ln in p.stdout.splitlines()]


HEALTH = ("dropped_frames", "skipped_frames", "rejected_blocks", "status", "queue_frames",
          "proc_p99_us", "rtf", "source_error", "source_stalls", "stream")


def test_meter_per_channel_lines_and_values(wav4, tmp_path):
    path, x = wav4
    # text: one line per channel per update, then one final line per channel
    p = _cli("meter", "--input", path, "--per-channel", "--fast", "--spl-ref", "100",
             "--interval", "0.5")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("rtamt meter: moore2016 on ") and "4 ch" in lines[0]
    assert [ln.split(" | ")[0] for ln in lines[1:5]] == [f"ch{c}" for c in range(N_CH)]
    assert [ln.split(":")[0] for ln in lines[5:]] == [f"final ch{c}" for c in range(N_CH)]
    # JSON: each channel's records equal the meter's on a mono file of that channel
    recs = _meter_json("--input", path, "--per-channel")
    assert sorted({r["stream"] for r in recs}) == [f"ch{c}" for c in range(N_CH)]
    for c in (0, 3):
        mono = tmp_path / f"ch{c}.wav"
        wavfile.write(mono, FS, np.ascontiguousarray(x[:, c]))
        want = [{k: v for k, v in r.items() if k not in HEALTH}
                for r in _meter_json("--input", str(mono))]
        got = [{k: v for k, v in r.items() if k not in HEALTH}
               for r in recs if r["stream"] == f"ch{c}"]
        assert got == want and len(got) == 2, c
    spl = [next(r["spl_db"] for r in recs if r["stream"] == f"ch{c}") for c in range(N_CH)]
    assert spl == sorted(spl, reverse=True) and spl[0] - spl[3] > 15     # the levels differ


@pytest.mark.parametrize("argv, words", [
    (["stream", "--input", "demo", "--out", "x"], ["argument --out: only with --per-channel"]),
    (["stream", "--input", "demo", "--threads", "2"],
     ["argument --threads: only with --per-channel"]),
    (["stream", "--input", "demo", "--budget-ms", "10"],
     ["argument --budget-ms: only with --per-channel"]),
    (["meter", "--input", "demo", "--admission", "strict"],
     ["argument --admission: only with --per-channel"]),
    (["meter", "--input", "demo", "--channels", "3"],
     ["3 channels and no channel layout", "3.0 (L R C)", "--layout"]),
    (["meter", "--input", "demo", "--channels", "3", "--per-channel", "--layout", "3.0"],
     ["--per-channel meters each channel alone"]),
    (["stream", "--input", "demo", "--per-channel", "--threads", "0"],
     ["argument --threads: must be >= 1"]),
    (["stream", "--input", "demo", "--per-channel", "--budget-ms", "-1"],
     ["argument --budget-ms: must be > 0"]),
])
def test_usage_errors(capsys, argv, words):
    _usage_error(capsys, argv, "error:", *words)


def test_budget_that_cannot_be_met_is_a_usage_error(capsys):
    """Strict admission refuses a budget shorter than a block: exit 2, one line naming the
    options that change it; nothing keeps running."""
    _usage_error(capsys, ["stream", "--input", "demo", "--channels", "2",
                                 "--per-channel", "--budget-ms", "0.01", "--seconds", "0.5"],
                        "rtamt stream: error: --per-channel: 2 streams cannot run in real time",
                        "--budget-ms", "--admission best-effort")


def test_out_refused_when_not_a_directory(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    capsys.readouterr()
    rc = main(["stream", "--input", "demo", "--per-channel", "--fast", "--seconds", "0.1",
               "--out", str(f)])
    out, err = capsys.readouterr()
    assert rc == 2 and f"--out {f}" in err and "Traceback" not in err, err


def test_stream_per_channel_says_when_blocks_miss_their_budget():
    """Missed budgets are named on stderr with the options that change them (issue 29,
    item 15: half the blocks missed at the default budget, without a word)."""
    p = _cli("stream", "--input", "demo", "--fs", "16000", "--channels", "2", "--per-channel",
             "--seconds", "0.5", "--budget-ms", "0.001", "--admission", "best-effort")
    assert p.returncode == 0, p.stdout + p.stderr
    finals = [ln for ln in p.stdout.splitlines() if ln.startswith("final ch")]
    misses = sum(int(ln.split(" misses ")[1].split()[0]) for ln in finals)
    blocks = sum(int(ln.split(" blocks ")[1].split()[0]) for ln in finals)
    assert blocks > 0 and misses > blocks // 2     # a 1 us budget: (nearly) all late
    hint = [ln for ln in p.stderr.splitlines() if "missed" in ln]
    assert len(hint) == 1 and hint[0].startswith(f"rtamt stream: {misses} of {blocks} blocks "
                                                 "missed their 0.001 ms budget"), p.stderr
    assert "--budget-ms" in hint[0] and "--block" in hint[0] and "--threads" in hint[0]


def test_stream_sigterm_ends_like_ctrl_c_with_exit_143(tmp_path):
    """SIGTERM: the run ends as on Ctrl-C (final stats, --out committed), one line, 143;
    no hidden temporary directory is left."""
    import signal
    import time

    out = tmp_path / "o"
    p = subprocess.Popen([sys.executable, "-m", "rtamt_apps", "stream", "--input", "demo",
                          "--fs", "16000", "--channels", "2", "--per-channel", "--seconds",
                          "60", "--out", str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        line = p.stdout.readline()          # the first stats line: the run is going
        assert line.startswith("ch0: blocks"), line + p.stderr.read()
        time.sleep(0.3)
        p.send_signal(signal.SIGTERM)
        rest, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 143, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("rtamt stream: "
                                                                               "--out ")]
    assert lines[-1] == "rtamt stream: SIGTERM: stopped", err
    assert [ln for ln in lines[:-1] if not ln.startswith(f"rtamt stream: wrote {out} ")] == []
    assert "final ch1: blocks" in rest
    assert sorted(x.name for x in out.iterdir()) == ["ch0", "ch1", "rtamt.json"]
    assert read_outputs(out / "ch0")["modfb"].shape[-1] > 0
    assert [x.name for x in tmp_path.iterdir()] == ["o"]          # nothing hidden left
