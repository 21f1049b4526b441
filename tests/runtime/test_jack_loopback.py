"""End-to-end audio loop through a real JACK server (dummy backend) with plain sounddevice.

An OutputStream plays a known 1 s signal (300 ms of digital silence, then seeded float32 noise)
into JACK; an InputStream records 1.5 s; the two are connected with ``jack_connect``
(``PortAudio:out_0 -> PortAudio:in_0``) after PortAudio's auto-connections to ``system`` were
removed.  The test finds the integer loop lag by cross-correlation and requires the recording to
be the played signal, bit for bit, at that lag (zeros everywhere else), with no xrun status flags
(input overflow / output underflow) during the measurement.  The samples must be exact in every
attempt; only when xrun flags (a busy machine: see tests/support/_jack.py) spoil an attempt is
it repeated with a fresh server, at most MAX_ATTEMPTS times.

Clock: both streams live in ONE JACK client and their callbacks run one after the other in the
JACK process thread, once per cycle, in the order the streams were opened (see
tests/support/_jack.py).
The output stream is opened first, so its callback runs first in each cycle and counts the
cycles; the input callback reads that count, so both sides share one sample clock without races:
playback starts at the first output callback after the main thread sets ``go``, recording starts
in that same cycle.  The loop lag reported is recorder-clock index minus player-clock index of
the same sample; measured on Debian 12 (jackd2 1.9.21, PortAudio 19.6.0): 0 samples, i.e. a
block written in cycle k is read back in cycle k (it is one period if the InputStream is opened
first).
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from _jack import (
    connect,
    connections,
    disconnect_system,
    jack_device,
    jack_server,
    list_ports,
    new_ports,
    skip_unless_jack,
)

FS = 48000
PERIOD = 256          # JACK period (frames per cycle)
BLOCK = 256           # PortAudio blocksize == JACK period: one callback per cycle, no re-blocking
N_PLAY = FS           # 1 s played
N_SILENCE = 14400     # first 300 ms of it digital silence
N_REC = 72000         # 1.5 s recorded
RUN_TIMEOUT = 15.0    # s to wait for the recording to complete


def _signal(seed: int = 20240) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros(N_PLAY, dtype=np.float32)
    x[N_SILENCE:] = (0.25 * rng.standard_normal(N_PLAY - N_SILENCE)).astype(np.float32)
    return x


class _Loop:
    """Player/recorder state shared by the two callbacks (all buffers preallocated)."""

    def __init__(self, sig: np.ndarray, n_rec: int):
        self.sig = sig
        self.rec = np.full(n_rec, np.nan, dtype=np.float32)  # NaN: "never written"
        self.go = False            # set by the main thread; read ONLY by the output callback
        self.cycle = 0             # JACK cycle counter, advanced by the output callback
        self.play_cycle = -1       # cycle in which sig[0] was written
        self.play_pos = 0
        self.rec_cycle = -1        # cycle in which rec[0] was read
        self.rec_pos = 0
        self.done = False
        self.flags: list[tuple[str, int, bool, str]] = []   # (stream, cycle, in window, flags)
        self.bad_frames: list[tuple[str, int]] = []

    def _in_window(self) -> bool:
        return self.play_cycle >= 0 and not self.done

    def out_cb(self, outdata, frames, time_info, status):
        self.cycle += 1
        if status:
            self.flags.append(("out", self.cycle, self._in_window(), str(status)))
        if frames != BLOCK:
            self.bad_frames.append(("out", frames))
        out = outdata[:, 0]
        if self.play_cycle < 0:
            if not self.go:
                out.fill(0.0)
                return
            self.play_cycle = self.cycle
        a = self.play_pos
        n = min(frames, max(0, N_PLAY - a))
        out[:n] = self.sig[a:a + n]
        out[n:] = 0.0
        self.play_pos = a + frames

    def in_cb(self, indata, frames, time_info, status):
        if status:
            self.flags.append(("in", self.cycle, self._in_window(), str(status)))
        if frames != BLOCK:
            self.bad_frames.append(("in", frames))
        if self.play_cycle < 0 or self.done:
            return
        if self.rec_cycle < 0:
            self.rec_cycle = self.cycle
        a = self.rec_pos
        n = min(frames, len(self.rec) - a)
        self.rec[a:a + n] = indata[:n, 0]
        self.rec_pos = a + n
        if self.rec_pos >= len(self.rec):
            self.done = True


def _xcorr_lag(rec: np.ndarray, sig: np.ndarray) -> int:
    """Lag L maximising sum_j rec[j + L] * sig[j], over 0 <= L <= len(rec) - len(sig)."""
    n = len(rec) + len(sig)
    nfft = 1 << (n - 1).bit_length()
    c = np.fft.irfft(np.fft.rfft(rec.astype(np.float64), nfft)
                     * np.conj(np.fft.rfft(sig.astype(np.float64), nfft)), nfft)
    return int(np.argmax(c[: len(rec) - len(sig) + 1]))


def _run_loop(sd, server) -> tuple[_Loop, dict]:
    dev = jack_device(sd)
    loop = _Loop(_signal(), N_REC)
    kw = dict(samplerate=FS, blocksize=BLOCK, device=dev, channels=1, dtype="float32")
    # Output FIRST: its callback then runs first in every JACK cycle (it is the clock).
    before = list_ports()
    out = sd.OutputStream(callback=loop.out_cb, **kw)
    try:
        out_ports = new_ports(before)
        inp = sd.InputStream(callback=loop.in_cb, **kw)
    except BaseException:
        out.close()
        raise
    try:
        in_ports = new_ports(before + out_ports)
        # one JACK client "PortAudio" for the whole process, ports numbered in open order
        assert (out_ports, in_ports) == (["PortAudio:out_0"], ["PortAudio:in_0"]), list_ports()
        (src,), (dst,) = out_ports, in_ports
        out.start()
        inp.start()
        auto = connections()
        # PortAudio auto-connects to the device's (system) ports on start(); remove that.
        disconnect_system([src, dst])
        connect(src, dst)
        conns = connections()
        assert conns[src] == [dst] and conns[dst] == [src], conns
        loop.go = True
        deadline = time.monotonic() + RUN_TIMEOUT
        while not loop.done:
            if time.monotonic() > deadline:
                raise AssertionError(f"recording incomplete after {RUN_TIMEOUT} s: "
                                     f"{loop.rec_pos}/{N_REC} samples, cycle {loop.cycle}, "
                                     f"flags {loop.flags}\njackd log:\n{server.log()}")
            if not server.alive():
                raise AssertionError(f"jackd died during the test:\n{server.log()}")
            time.sleep(0.02)
    finally:
        # stop()/close() block (up to 10 min) if jackd is gone: then leave them to jack_server
        if server.alive():
            for s in (inp, out):
                s.stop()
                s.close()
    return loop, auto


def _check_recording(loop: _Loop) -> int:
    """Assert the recording is the played signal, bit for bit, at the cross-correlation lag
    (zeros elsewhere); return the loop lag in samples."""
    assert not loop.bad_frames, f"callbacks got frames != {BLOCK}: {loop.bad_frames[:10]}"
    assert loop.rec_pos == N_REC and not np.isnan(loop.rec).any()
    assert loop.rec_cycle == loop.play_cycle, (loop.play_cycle, loop.rec_cycle)
    sig, rec = loop.sig, loop.rec
    lag = _xcorr_lag(rec, sig)
    assert 0 <= lag <= N_REC - N_PLAY
    # bit-exact: the dummy backend and PortAudio's float32 path pass samples unchanged
    seg = rec[lag:lag + N_PLAY]
    mism = np.flatnonzero(seg.view(np.uint32) != sig.view(np.uint32))
    assert mism.size == 0, (f"lag {lag}: {mism.size} samples differ, first at {mism[:5]}: "
                            f"got {seg[mism[:5]]}, want {sig[mism[:5]]}")
    # only silence before and after the played second (nothing else leaks into the loop)
    assert not rec[:lag].any() and not rec[lag + N_PLAY:].any()
    return lag


MAX_ATTEMPTS = 3      # a fresh server + loop again if (only) xrun flags spoiled an attempt


@pytest.mark.parametrize("run", [1, 2, 3])
def test_jack_loopback_bit_exact(run, record_property):
    skip_unless_jack()
    import sounddevice as sd

    spoiled = []
    for attempt in range(1, MAX_ATTEMPTS + 1):
        with jack_server(fs=FS, period=PERIOD) as server:
            loop, auto = _run_loop(sd, server)
            jack_log = server.log()

        # PortAudio's auto-connection on start(): out_0 -> system:playback_1, capture_1 -> in_0
        assert auto["PortAudio:out_0"] == ["system:playback_1"], auto
        assert auto["PortAudio:in_0"] == ["system:capture_1"], auto
        # the data must be exact in every attempt, xruns or not
        lag = _check_recording(loop)
        assert lag == 0, f"loop lag {lag} samples (expected 0: output stream opened first)"

        window_flags = [f[:2] + f[3:] for f in loop.flags if f[2]]
        print(f"\nrun {run} attempt {attempt}: loop lag {lag} samples, bit-exact; play cycle "
              f"{loop.play_cycle}; status flags in window {window_flags}, before/after "
              f"{[f[:2] + f[3:] for f in loop.flags if not f[2]]}")
        if not window_flags:
            break
        xrun_log = [ln for ln in jack_log.splitlines() if "XRun" in ln or "not finished" in ln]
        spoiled.append((window_flags, xrun_log))
    else:
        pytest.fail(f"xrun status flags during the measurement in all {MAX_ATTEMPTS} attempts "
                    "(samples were bit-exact each time; the machine is too busy for the "
                    "timer-driven JACK dummy backend?):\n"
                    + "\n".join(f"  attempt {i}: flags {fl}; jackd: {lg}"
                                 for i, (fl, lg) in enumerate(spoiled, 1)))
    record_property("loop_lag_samples", lag)
    record_property("attempts", attempt)
