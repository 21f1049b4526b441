"""Source faults (issue 19, part 1): an input that stops delivering is detected and
reported, stopping never blocks, and the live apps end (non-zero) instead of hanging.

* Unit tests (no audio hardware): the runtime's watchdog on a stalled source, recovery
  with the state kept and the gap marked, and ``AudioInput.stop()`` with a fake stream
  whose ``stop()`` never returns.
* JACK tests: ``rtamt meter`` / ``rtamt stream`` read a JACK dummy server as their own
  processes; the server is killed (SIGKILL) mid-stream.  The app must report the source
  error and exit with code 3 within 3 s of the kill; SIGINT sent after the kill must end it
  within 2 s; SIGINT while healthy ends it within 2 s with code 0 (Ctrl-C is the normal way
  to end a live run).  They skip without jackd/PortAudio unless ``RTAMT_REQUIRE_JACK=1``.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from rtamt.engine.stage import Stateless
from rtamt.filterbank import Gammatone, GammatoneParams
from rtamt.runtime import ArraySource, Runtime
from rtamt.runtime.stream import AudioInput

from _jack import jack_server, kill_app, skip_unless_jack, start_app, wait_app_exit

pytestmark = pytest.mark.timeout(180)

FS = 16000.0


class Tap(Stateless):
    """Identity chain: publishes the input block."""

    name = "input"

    def __call__(self, x):
        return np.array(x, copy=True)


def _wait(cond, timeout: float, step: float = 0.01) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


# ============================================================================ unit: watchdog


def test_stalled_source_reported_in_stats():
    """A real-time source that stops pushing is reported within the watchdog window
    (1 s here; allowed up to 3 s on a loaded machine) as a source error in stats,
    ``as_dict()`` and ``line()``; a healthy source is never reported."""
    rt = Runtime(Tap(), FS, block=160, source_timeout=1.0)
    src = ArraySource(np.zeros(1600, np.float32), FS, blocksize=160, loop=True)
    rt.start()
    src.start(rt)
    try:
        time.sleep(1.5)                       # healthy, longer than the timeout
        st = rt.stats()
        assert st.source_error is None and st.source_stalls == 0, st.line()
        assert rt.source_error is None
        src.pause()
        t_pause = time.monotonic()
        assert _wait(lambda: rt.source_error is not None, 3.0), "stall not reported"
        delay = time.monotonic() - t_pause
        st = rt.stats()
        assert "stopped delivering audio" in st.source_error
        assert "no callback for 1.0 s" in st.source_error
        assert st.source_stalls == 1
        assert st.as_dict()["source_error"] == st.source_error
        assert "SOURCE ERROR: input stopped delivering audio" in st.line()
        print(f"stall detected after {delay:.2f} s")
        assert delay >= 0.9                   # not before the timeout
    finally:
        src.stop()
        rt.stop("discard")


def test_watchdog_only_while_started_and_not_stopping():
    """No report before a source starts, after a finite source ended, or with the
    watchdog off; the timeout is at least two callback periods (a 1.5 s chunk period is
    not a stall)."""
    rt = Runtime(Tap(), FS, block=160, source_timeout=0.3)
    rt.start()
    time.sleep(0.6)                            # no source yet: nothing to watch
    assert rt.source_error is None
    ArraySource(np.zeros(800, np.float32), FS, blocksize=160, realtime=True).run(rt)
    time.sleep(0.6)                            # the file ended on purpose
    assert rt.source_error is None
    rt.stop("drain")

    off = Runtime(Tap(), FS, block=160, source_timeout=None)
    off.start()
    off.source_started()
    time.sleep(0.3)
    assert off.source_error is None
    off.stop("discard")

    slow = Runtime(Tap(), FS, block=160, source_timeout=0.2)
    src = ArraySource(np.zeros(48000, np.float32), FS, blocksize=int(1.5 * FS), loop=True)
    slow.start()
    src.start(slow)
    try:
        assert slow.source_deadline >= 3.0
        time.sleep(2.0)                        # one 1.5 s chunk arrives after 1.5 s
        assert slow.source_error is None
    finally:
        src.stop()
        slow.stop("discard")


def test_stalled_source_resumes_state_kept_gap_marked():
    """A source that stalls and comes back: the error clears, the fault is counted, the
    first block after the silence has ``gap=True`` and the model state is kept across the
    gap (the streamed output equals the offline output of the frames delivered)."""
    x = (0.1 * np.random.default_rng(3).standard_normal(int(3 * FS))).astype(np.float32)
    gt = Gammatone(GammatoneParams(fs=FS, fhigh=4000.0))
    rt = Runtime({"gt": gt}, FS, block=160, source_timeout=0.4, sample_dtype="float64")
    got = []
    rt.subscribe(got.append)
    src = ArraySource(x.astype(np.float64), FS, blocksize=160)
    rt.start()
    src.start(rt)
    try:
        assert _wait(lambda: len(got) > 20, 10.0)
        src.pause()
        assert _wait(lambda: rt.source_error is not None, 3.0)
        n_before = len(got)
        src.resume()
        assert _wait(lambda: rt.source_error is None, 3.0), "error did not clear on resume"
        assert src.join(10.0)
    finally:
        src.stop()
        rt.stop("drain")
    st = rt.stats()
    assert st.source_stalls == 1 and st.source_error is None
    gaps = [r.seq for r in got if r.gap]
    assert gaps and gaps[0] >= n_before - 1, (gaps, n_before)
    assert len(gaps) == 1
    y = np.concatenate([r.outputs["gt"] for r in got], axis=-1)
    ref = Gammatone(GammatoneParams(fs=FS, fhigh=4000.0))(x.astype(np.float64))
    assert y.shape == ref.shape
    np.testing.assert_array_equal(y, ref)


def test_report_source_error_keeps_first_message():
    rt = Runtime(Tap(), FS, block=160)
    rt.report_source_error("first")
    rt.report_source_error("second")
    assert rt.source_error == "first" and rt.stats().source_stalls == 1


# ============================================================================ unit: stop


class HangingStream:
    """A PortAudio-like stream whose stop() (and abort(), if ``abort_hangs``) never
    returns, as sounddevice's do after the JACK server died."""

    def __init__(self, abort_hangs: bool):
        self.abort_hangs = abort_hangs
        self.calls = []
        self.release = threading.Event()
        self.active = True

    def start(self):
        self.calls.append("start")

    def stop(self):
        self.calls.append("stop")
        self.release.wait(60.0)           # "never" for the test; released in its finally

    def abort(self):
        self.calls.append("abort")
        if self.abort_hangs:
            self.release.wait(60.0)

    def close(self):
        self.calls.append("close")


class FakeAudioInput(AudioInput):
    """AudioInput on a fake stream (no PortAudio)."""

    def __init__(self, runtime, stream, **kw):
        self._fake = stream
        super().__init__(runtime, 0, None, **kw)

    def _find(self, device, hostapi):
        return 0

    def _device_name(self, index):
        return "fake"

    def _new_stream(self):
        return self._fake


@pytest.mark.parametrize("abort_hangs", [False, True])
def test_stop_returns_when_stream_stop_blocks(abort_hangs):
    """``AudioInput.stop()`` returns within its timeouts although the stream's stop()
    never returns: abort is attempted; if abort hangs too the stream is abandoned (close
    is not called, it would hang as well)."""
    fake = HangingStream(abort_hangs)
    rt = Runtime(Tap(), FS, block=160)
    ai = FakeAudioInput(rt, fake, stop_timeout=0.3).start()
    assert rt.running and fake.calls == ["start"]
    t0 = time.monotonic()
    ai.stop("discard")
    took = time.monotonic() - t0
    try:
        assert not rt.running and ai.stream is None
        assert "abort" in fake.calls
        if abort_hangs:
            assert ai.abandoned == 1 and "close" not in fake.calls
            assert ai.shutdown_log == ["stop timed out", "abort timed out", "abandoned"]
        else:
            assert ai.abandoned == 0 and "close" in fake.calls
            assert ai.shutdown_log == ["stop timed out", "abort", "close"]
        assert took < 5.0            # generous: the bound is 2 x 0.3 s (+ runtime stop)
        print(f"stop returned after {took:.2f} s")
    finally:
        fake.release.set()


def test_inactive_stream_reported_by_check():
    """``AudioInput.check()`` reports a stream PortAudio calls inactive (the JACK server
    died: ``stream.active`` turns False at once) as a source error."""
    fake = HangingStream(False)
    fake.stop = lambda: fake.calls.append("stop")
    rt = Runtime(Tap(), FS, block=160)
    ai = FakeAudioInput(rt, fake).start()
    try:
        assert ai.check() is None
        fake.active = False
        err = ai.check()
        assert err is not None and "inactive" in err and "stopped delivering audio" in err
        assert rt.stats().source_stalls == 1
    finally:
        ai.stop("discard")


def test_reopen_reconnects_same_runtime():
    """``reopen()`` replaces a failed stream by a new one feeding the same runtime: the
    watchdog re-arms and the error clears once the new stream delivers."""
    streams = []

    class Pusher:
        def __init__(self, rt):
            self.rt, self.go, self.active = rt, threading.Event(), True
            self.th = None

        def start(self):
            def run():
                while self.go.is_set():
                    self.rt.push(np.zeros((160, 1), np.float32))
                    time.sleep(0.01)
            self.go.set()
            self.th = threading.Thread(target=run, daemon=True)
            self.th.start()

        def stop(self):
            self.go.clear()

        abort = stop

        def close(self):
            pass

    class Reopening(FakeAudioInput):
        def _new_stream(self):
            streams.append(Pusher(self.runtime))
            return streams[-1]

    rt = Runtime(Tap(), FS, block=160, source_timeout=0.3)
    ai = Reopening(rt, None).start()
    try:
        time.sleep(0.2)
        streams[0].go.clear()                  # the device goes away
        assert _wait(lambda: rt.source_error is not None, 3.0)
        assert ai.reopen()
        assert len(streams) == 2
        assert _wait(lambda: rt.source_error is None, 3.0)
        assert rt.stats().source_stalls == 1
    finally:
        ai.stop("discard")


# ============================================================================ JACK: the apps

JFS = 48000
PERIOD = 256
APPS = ["meter", "stream"]


def _scenario(app, tmp_path, *, kill: bool, sigint: bool):
    """Start APP on a dummy server, let it stream 1 s, then SIGKILL jackd (``kill``) and/or
    (0.2 s later) send the app SIGINT (``sigint``).  Returns ``(exit code or None if it
    hung, seconds from the last event to the exit, stdout, stderr)``."""
    skip_unless_jack()
    with jack_server(fs=JFS, period=PERIOD, portaudio=False) as server:
        proc, out, err = start_app(app, server, tmp_path, app)
        try:
            time.sleep(1.0)                                    # streaming
            t = server.kill() if kill else time.monotonic()
            if sigint:
                if kill:
                    time.sleep(0.2)
                t = time.monotonic()
                proc.send_signal(signal.SIGINT)
            rc, took = wait_app_exit(proc, t)
        finally:
            kill_app(proc)
    print(f"{app}: exit {rc} {took:.2f} s after the {'SIGINT' if sigint else 'kill'}")
    return rc, took, out.read_text(), err.read_text()


@pytest.mark.parametrize("app", APPS)
def test_app_reports_and_exits_when_jack_dies(app, tmp_path, record_property):
    """jackd is SIGKILLed mid-stream: the app reports the source error and exits with
    code 3 within 3 s of the kill (before: it showed its last values forever)."""
    rc, took, out, err = _scenario(app, tmp_path, kill=True, sigint=False)
    record_property("exit_after_kill_s", round(took, 3))
    assert rc == 3, f"exit code {rc} ({took:.1f} s after the kill):\n{out}\n{err}"
    assert f"rtamt {app}: input stopped delivering audio" in err, err
    assert "Traceback" not in err, err
    assert took <= 3.0, f"exited {took:.2f} s after the kill (acceptance: 3 s)"


@pytest.mark.parametrize("app", APPS)
def test_sigint_after_jack_death_ends_app(app, tmp_path, record_property):
    """Ctrl-C right after jackd died (stream.stop() used to block forever in sounddevice)
    ends the app within 2 s, reporting the dead input (exit 3)."""
    rc, took, out, err = _scenario(app, tmp_path, kill=True, sigint=True)
    record_property("exit_after_sigint_s", round(took, 3))
    assert rc == 3, f"exit code {rc}:\n{out}\n{err}"
    assert "Traceback" not in err, err
    assert took <= 2.0, f"ended {took:.2f} s after SIGINT (acceptance: 2 s)"


@pytest.mark.parametrize("app", APPS)
def test_sigint_while_healthy_ends_app_with_0(app, tmp_path, record_property):
    """Ctrl-C is the normal end of a live run: exit 0 within 2 s, with the final line."""
    rc, took, out, err = _scenario(app, tmp_path, kill=False, sigint=True)
    record_property("exit_after_sigint_s", round(took, 3))
    assert rc == 0, f"exit code {rc}:\n{out}\n{err}"
    assert "final: blocks" in out
    assert took <= 2.0, f"ended {took:.2f} s after SIGINT (acceptance: 2 s)"


@pytest.mark.slow
def test_stream_reconnect_rides_out_a_stalled_server(tmp_path):
    """``--reconnect``: jackd frozen for 2 s (SIGSTOP, then SIGCONT) makes the input stall;
    the app says so, keeps running, notices when audio is back and ends normally with the
    stall counted (the stream PortAudio still runs is waited for, not reopened).  Without
    ``--reconnect`` the same stall ends the app with code 3."""
    skip_unless_jack()
    for reconnect in (True, False):
        tag = f"stall-{reconnect}"
        with jack_server(fs=JFS, period=PERIOD, portaudio=False) as server:
            extra = ("--json", "--seconds", "6") + (("--reconnect",) if reconnect else ())
            proc, out, err = start_app("stream", server, tmp_path, tag, *extra)
            try:
                time.sleep(1.0)
                os.kill(server.pid, signal.SIGSTOP)
                try:
                    time.sleep(2.0)
                finally:
                    os.kill(server.pid, signal.SIGCONT)
                rc, _ = wait_app_exit(proc, time.monotonic())
            finally:
                kill_app(proc)
        text = err.read_text()
        if reconnect:
            import json

            assert rc == 0, f"exit code {rc}:\n{text}"
            assert "reconnecting" in text and "input is back" in text, text
            final = json.loads(out.read_text().strip().splitlines()[-1])
            assert final["final"] and final["source_stalls"] == 1, final
            assert final["source_error"] is None
        else:
            assert rc == 3, f"exit code {rc}:\n{text}"
            assert "no callback for 1.0 s" in text, text
