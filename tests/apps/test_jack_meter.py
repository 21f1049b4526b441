"""`rtamt meter` on a live stream through a real JACK server (dummy backend).

A plain sounddevice OutputStream in the test process plays a steady 1 kHz tone (float32, RMS
-26 dB re digital RMS 1.0) into JACK.  The meter runs as its own process, exactly as a user
starts it (``python -m rtamt_apps meter --input system --hostapi JACK --channels 1 --model
moore2016 --json --spl-ref 100``); its PortAudio client is a second JACK client
(``PortAudio-01``, see tests/_jack.py).  Once the meter's input port exists and PortAudio has
auto-connected it to ``system:capture_1`` (on ``stream.start()``), the test removes that
connection and connects the tone instead (``jack_connect PortAudio:out_0 PortAudio-01:in_0``).

The meter must print >= 10 JSON updates carrying the tone whose dB SPL equals the played
level (74 dB SPL) within 1 dB once settled, a loudness level near 74 phon, and no dropped,
skipped or rejected input.  On a busy machine JACK xruns (PortAudio status flags) or a
starved processing thread (the meter skips backlog) spoil an attempt: the discontinuities are
clicks or gaps that the loudness model rightly hears (seen here with two busy loops on 2 cores:
STL up to 3.5 phon high after an xrun, LTL 7 phon high after skips) while the 100 ms level
stayed within 0.05 dB.  Such an attempt is repeated with a fresh server, at most
MAX_ATTEMPTS times; the last one may have a few flags or a short skip, and then only the levels
are checked (the loudness needs a clean attempt).  Measured here (2 cores, otherwise idle):
clean at the first attempt, 0 flags, no skips, ~7.5 s per attempt.
"""
from __future__ import annotations

import json
import os

import pytest

from _jack import jack_server, run_app_on_tone, skip_unless_jack

pytestmark = pytest.mark.timeout(300)

FS = 48000
PERIOD = 256
TONE_DBFS = -26.0            # RMS of the played tone, dB re digital RMS 1.0
SPL_REF = 100.0
LEVEL = SPL_REF + TONE_DBFS  # 74 dB SPL
METER_SECONDS = 3.0
MAX_ATTEMPTS = 3
MAX_FLAGGED = 3              # last attempt: PortAudio callbacks with status flags tolerated
MAX_SKIPPED = FS // 4        # last attempt: frames the meter may skip (drop-oldest backlog)
PORT_TIMEOUT = 60.0          # s for the meter to start (import, JIT warm-up) and open its port
METER_TIMEOUT = 120.0        # s for the meter process as a whole


def _attempt(sd, server, tmp_path, attempt):
    env = dict(os.environ, RTAMT_CALIBRATION=str(tmp_path / "calibration.json"))
    stdout, stderr, player = run_app_on_tone(
        sd, server, ["meter", "--input", "system", "--hostapi", "JACK", "--channels", "1",
                     "--model", "moore2016", "--blocksize", str(PERIOD), "--seconds",
                     str(METER_SECONDS), "--spl-ref", str(SPL_REF), "--json"],
        tmp_path, f"meter-{attempt}", dbfs=TONE_DBFS, period=PERIOD,
        port_timeout=PORT_TIMEOUT, run_timeout=METER_TIMEOUT, env=env)
    recs = [json.loads(ln) for ln in stdout.splitlines() if ln.strip()]
    return recs, player, stderr


def _check_levels(recs):
    """The tone's level (dB SPL, peak, LUFS): robust to the odd xrun (one disturbed JACK
    period hardly changes a 100 ms level)."""
    # before the connection the meter hears the dummy capture port (exact zeros): no level
    tone = [d for d in recs if d["spl_db"] is not None]
    assert len(tone) >= 10, recs
    assert all(d["spl_db"] is None for d in recs[:len(recs) - len(tone)]), \
        "the tone must be heard from the connection on, without gaps"
    # settled (the first update with the tone may be partly silence): the played level
    settled = tone[2:]
    assert len(settled) >= 10
    for d in settled:
        assert abs(d["spl_db"] - LEVEL) <= 1.0, d
        assert abs(d["peak_db"] - (LEVEL + 3.01)) <= 1.0, d
    last = recs[-1]
    assert last["lufs_momentary"] is not None
    assert abs(last["lufs_momentary"] - TONE_DBFS) <= 0.5, last   # K-weighting ~0 at 1 kHz
    return settled


def _check_loudness(settled):
    """Loudness of the steady tone (only for an attempt without xruns: a glitch is a click
    or a gap, which the loudness model rightly hears)."""
    for d in settled:
        assert d["stl_sone"] > 0 and abs(d["stl_phon"] - LEVEL) <= 1.5, d
        assert d["stl_left"] == pytest.approx(d["stl_right"])    # 1 channel = diotic
    assert abs(settled[-1]["phon"] - LEVEL) <= 1.5, settled[-1]   # long-term loudness caught up


@pytest.mark.slow
def test_meter_on_live_jack_stream(tmp_path, record_property):
    skip_unless_jack()
    import sounddevice as sd

    for attempt in range(1, MAX_ATTEMPTS + 1):
        with jack_server(fs=FS, period=PERIOD) as server:
            recs, player, stderr = _attempt(sd, server, tmp_path, attempt)
        # ~10 updates per second of the stream, in stream-time order
        assert len(recs) >= 20, (len(recs), stderr)
        ts = [d["t"] for d in recs]
        assert ts == sorted(ts) and len(set(ts)) == len(ts)
        assert ts[-1] >= METER_SECONDS - 0.5
        last = recs[-1]
        assert last["rejected_blocks"] == 0
        # callbacks with status flags (one xrun sets both input_overflow and output_underflow,
        # each counted per flag)
        flagged = max(last["status"].values(), default=0)
        clean = (last["dropped_frames"] == 0 and last["skipped_frames"] == 0 and flagged == 0
                 and not player.flags)
        healthy = (last["dropped_frames"] == 0 and last["skipped_frames"] <= MAX_SKIPPED
                   and flagged <= MAX_FLAGGED and len(player.flags) <= MAX_FLAGGED)
        print(f"\nattempt {attempt}: {len(recs)} updates, last {last['spl_db']} dB SPL / "
              f"{last['phon']} phon; dropped {last['dropped_frames']} skipped "
              f"{last['skipped_frames']} status {last['status']}, proc p99 "
              f"{last['proc_p99_us']} us; player flags {player.flags}")
        # retry a flagged attempt; the last one may have a few flags or skips (a busy machine
        # starves the meter's processing thread; the levels are still checked)
        if clean or (healthy and attempt == MAX_ATTEMPTS):
            break
    else:
        pytest.fail(f"drops or PortAudio status flags in all {MAX_ATTEMPTS} attempts: dropped "
                    f"{last['dropped_frames']}, skipped {last['skipped_frames']}, status "
                    f"{last['status']}, player flags {player.flags}")
    settled = _check_levels(recs)
    if clean:
        _check_loudness(settled)
    record_property("meter_updates", len(recs))
    record_property("meter_clean", clean)
    record_property("meter_proc_p99_us", last["proc_p99_us"])
