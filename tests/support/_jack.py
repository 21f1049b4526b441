"""Test helpers for running audio through a real JACK server (dummy backend) with ``sounddevice``.

This is a helper module, not a test file.  Typical use::

    from _jack import skip_unless_jack, jack_server, jack_device, list_ports, new_ports, connect

    def test_something():
        skip_unless_jack()
        import sounddevice as sd
        with jack_server(fs=48000, period=256):      # also re-initialises PortAudio, see below
            dev = jack_device(sd)
            before = list_ports()
            out = sd.OutputStream(device=dev, ...)      # open the writer first (lag 0, below)
            (out_port,) = new_ports(before)             # 'PortAudio:out_0'
            ...                                         # see tests/runtime/test_jack_loopback.py

System requirements (Debian; what CI installs)::

    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libportaudio2 jackd2
    pip install sounddevice

``DEBIAN_FRONTEND=noninteractive`` alone keeps jackd2's debconf question ("enable realtime
process priority?", key ``jackd/tweak_rt_limits``) from prompting; it takes the default, false
(checked with stdin closed).  To make the answer explicit, preseed it first with
``echo 'jackd2 jackd/tweak_rt_limits boolean false' | debconf-set-selections``.

Facts this module relies on (checked with Debian 12: jackd2 1.9.21, libportaudio2 19.6.0,
sounddevice 0.5.6):

* **PortAudio must be re-initialised after the server starts.**  PortAudio enumerates its host
  APIs in ``Pa_Initialize``, which ``import sounddevice`` calls.  If no JACK server is running at
  that moment the "JACK Audio Connection Kit" host API is simply absent (PortAudio opens its JACK
  client with ``JackNoStartServer``, so it never spawns a server either).  :func:`jack_server`
  therefore calls :func:`reinit_portaudio` (``sd._terminate(); sd._initialize()``) once the
  server is up.  PortAudio's initialisation is reference counted, so the helper terminates as
  many times as sounddevice has initialised, otherwise nothing would be re-scanned.
* **PortAudio must be terminated before the server is killed.**  PortAudio's JACK host API
  asserts that ``jack_client_close`` succeeds when it terminates (``pa_jack.c: Terminate:
  Assertion `err == 0' failed``); if the server is gone by then, the Python process aborts at
  exit (sounddevice terminates PortAudio from an ``atexit`` handler).  :func:`jack_server`
  terminates PortAudio before it stops jackd, then initialises it again (without JACK) so
  sounddevice stays usable.  Close your streams inside the ``with`` block.
* **Port naming.**  All PortAudio streams of one process (one ``Pa_Initialize``) share ONE JACK
  client named ``PortAudio``; JACK renames it ``PortAudio-01``, ``PortAudio-02``, ... only if
  the name is taken, e.g. by PortAudio in another process (checked: a second process gets
  ``PortAudio-01:out_0``).  Each stream registers its own ports, ``out_<i>`` / ``in_<i>``,
  numbered by per-direction counters in open order: OutputStream (1 ch) then InputStream (1 ch)
  give ``PortAudio:out_0`` and ``PortAudio:in_0``; a second 1-channel OutputStream gets
  ``PortAudio:out_1``; a 2-channel stream takes two numbers (``out_0``, ``out_1``).  With
  Debian's PortAudio 19.6 the counters are NOT reset when streams close (a stream reopened after
  closing ``out_0`` gets ``out_1``), only when PortAudio is re-initialised - which
  :func:`jack_server` does, so every server starts at ``out_0``/``in_0``.  Ports exist from
  stream *open* until *close*.  Robust code takes the names from :func:`new_ports`.
* **Auto-connect.**  On ``stream.start()`` PortAudio connects every stream port to the ports of
  the device it was opened on (for the dummy backend the device is ``system``):
  ``PortAudio:out_k -> system:playback_<k+1>`` and ``system:capture_<k+1> -> PortAudio:in_k``.
  It never connects one stream to another.  So make your own connections after ``start()``
  (:func:`connect`), and remove the system ones with :func:`disconnect_system`.  (The dummy
  ``system:capture_*`` ports carry exact +0.0 - checked - so a left-over capture connection
  would only add zeros, but the test loop should carry nothing but the test signal.)
* **Callback order.**  The one JACK client runs all streams' callbacks one after another in the
  JACK process thread, once per JACK cycle, in the order the streams were OPENED.  A sample
  written by an output stream's callback in cycle k reaches an input stream connected to it in
  the same cycle k if the output stream was opened first (loop lag 0 samples), in cycle k+1
  otherwise (lag = one period).
* **Realtime scheduling matters; xruns.**  The dummy driver is timer driven.  Without realtime
  scheduling (``jackd -r``) a busy machine delays jackd's driver thread and PortAudio's process
  thread, jackd logs ``JackTimedDriver::Process XRun = N usec`` / ``JackEngine::XRun: client =
  PortAudio was not finished`` and PortAudio passes ``input overflow, output underflow`` to every
  callback.  Measured on a 2-core box (runs with flags inside a 1.5 s loopback window): ``-r``
  idle 1/48, ``-r`` next to two busy loops 6/12, ``-r`` next to other heavy test processes
  10/20; ``-R`` (SCHED_FIFO: jackd's driver thread gets priority 10, PortAudio's process thread
  in the client 5) next to two busy loops 0/37, next to other heavy test processes 3/15.  So
  :func:`jack_server` uses ``-R`` by default (``realtime=False`` gives ``-r``), and a test that
  asserts "no xrun" should allow a retry (tests/runtime/test_jack_loopback.py does).  Where realtime
  scheduling is not permitted (non-root without rtprio limits, some containers) jackd prints
  ``Cannot use real-time scheduling (RR/10) (1: Operation not permitted)`` /
  ``AcquireSelfRealTime error`` / ``Cannot lock down ... memory area`` and carries on without
  realtime (checked).  No limits.conf change is needed (the jackd2 debconf question
  ``jackd/tweak_rt_limits`` stays "false"; root gets SCHED_FIFO anyway).  In every flagged run
  measured the samples were still bit-exact (the dummy backend has no hardware to lose samples
  to); only the flags appear.
* **Use callback streams.**  PortAudio 19.6's JACK host API emulates blocking streams (no
  ``callback``; ``stream.write``/``read``) with a hard-coded 2 channels per frame
  (``BlockingBegin``: ``samplesPerFrame = 2 /* FIXME */``): a 1-channel blocking stream
  overruns its buffers and corrupts the heap (seen here: segfault at the next garbage
  collection, or ``corrupted size vs. prev_size``).  Callback streams are fine.
* ``JACK_NO_AUDIO_RESERVATION=1`` keeps jackd from asking D-Bus to reserve an audio device.
* The server uses JACK's default server name; :func:`jack_server` refuses to start (clear
  error) if a server with that name is already running, rather than testing against a foreign
  server.  A server left over from a SIGKILLed run leaves only stale shm files, which jackd
  cleans up itself.
"""
from __future__ import annotations

import contextlib
import ctypes.util
import faulthandler
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from _helpers import restore_sigint

#: Timeout (s) for every JACK command-line tool call.
TOOL_TIMEOUT = 10.0

_TOOLS = ("jackd", "jack_wait", "jack_lsp", "jack_connect", "jack_disconnect")


# --------------------------------------------------------------------------------------------
# availability / skipping
# --------------------------------------------------------------------------------------------

def missing_jack_requirements() -> list[str]:
    """What is missing to run the JACK tests (empty list: everything is there)."""
    missing = []
    tools = [t for t in _TOOLS if shutil.which(t) is None]
    if tools:
        missing.append(f"{', '.join(tools)} (apt-get install jackd2)")
    if ctypes.util.find_library("portaudio") is None:
        missing.append("libportaudio (apt-get install libportaudio2)")
    else:
        try:
            import sounddevice  # noqa: F401
        except (ImportError, OSError) as e:  # OSError: "PortAudio library not found"
            missing.append(f"python package sounddevice (pip install sounddevice): {e}")
    return missing


def skip_unless_jack() -> None:
    """Skip the calling test (or module, at module level) unless jackd and PortAudio are installed.

    The skip only exists for developer machines; CI installs both.  Set ``RTAMT_REQUIRE_JACK=1``
    (CI should) to turn the skip into a failure, so that a broken install cannot pass silently.
    """
    import pytest

    missing = missing_jack_requirements()
    if not missing:
        return
    reason = "JACK loopback tests need " + ", ".join(missing)
    if os.environ.get("RTAMT_REQUIRE_JACK", "") not in ("", "0"):
        pytest.fail(reason + " (RTAMT_REQUIRE_JACK is set)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


# --------------------------------------------------------------------------------------------
# JACK command-line tools
# --------------------------------------------------------------------------------------------

def _tool(*args: str, timeout: float = TOOL_TIMEOUT,
          check: bool = True) -> subprocess.CompletedProcess:
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{' '.join(args)} did not finish within {timeout} s") from e
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed (exit {r.returncode}):\n"
                           f"{r.stdout}{r.stderr}")
    return r


def server_running() -> bool:
    """True if a JACK server with the default name answers (``jack_wait -c``)."""
    return _tool("jack_wait", "-c", check=False).stdout.strip() == "running"


def list_ports() -> list[str]:
    """All JACK port names (``jack_lsp``), e.g. ``['system:capture_1', ..., 'PortAudio:out_0',
    'PortAudio:in_0']``.

    PortAudio port naming (details in the module docstring): one JACK client ``PortAudio`` per
    process (``PortAudio-01``, ... if that name is already taken, e.g. by another process); ports
    ``out_<i>`` / ``in_<i>`` numbered per direction in stream-open order over the life of the
    PortAudio initialisation (closing a stream does not free its number in PortAudio 19.6).
    An OutputStream then an InputStream of 1 channel each: ``PortAudio:out_0``, ``PortAudio:in_0``.
    """
    return [ln.strip() for ln in _tool("jack_lsp").stdout.splitlines() if ln.strip()]


def new_ports(before: list[str] | set[str]) -> list[str]:
    """Ports that exist now but not in ``before`` (a :func:`list_ports` result taken before
    opening a stream), in ``jack_lsp`` order: the ports that stream registered."""
    old = set(before)
    return [p for p in list_ports() if p not in old]


def connections() -> dict[str, list[str]]:
    """``{port: [ports it is connected to]}`` for every port (``jack_lsp -c``)."""
    result: dict[str, list[str]] = {}
    current = None
    for ln in _tool("jack_lsp", "-c").stdout.splitlines():
        if not ln.strip():
            continue
        if ln[:1].isspace():
            if current is not None:
                result[current].append(ln.strip())
        else:
            current = ln.strip()
            result[current] = []
    return result


def connect(src_port: str, dst_port: str) -> None:
    """Connect output port ``src_port`` to input port ``dst_port`` (``jack_connect``)."""
    _tool("jack_connect", src_port, dst_port)


def disconnect(src_port: str, dst_port: str) -> None:
    """Remove the connection ``src_port -> dst_port`` (``jack_disconnect``)."""
    _tool("jack_disconnect", src_port, dst_port)


def disconnect_system(ports: list[str] | None = None) -> list[tuple[str, str]]:
    """Remove every connection between ``system:*`` ports and ``ports`` (default: all non-system
    ports), i.e. undo PortAudio's auto-connection made at ``stream.start()``.  Returns the
    removed ``(src, dst)`` pairs."""
    conns = connections()
    wanted = set(ports) if ports is not None else {p for p in conns if not p.startswith("system:")}
    removed = []
    for port in sorted(wanted):
        for other in conns.get(port, []):
            if other.startswith("system:"):
                # jack_lsp lists connections from both ends; "system:capture_*" are outputs
                src, dst = (other, port) if "capture" in other else (port, other)
                disconnect(src, dst)
                removed.append((src, dst))
    return removed


# --------------------------------------------------------------------------------------------
# PortAudio (sounddevice)
# --------------------------------------------------------------------------------------------

def reinit_portaudio(sd) -> None:
    """Make PortAudio re-enumerate its host APIs/devices (``sd._terminate(); sd._initialize()``).

    PortAudio's init is reference counted: terminate as often as sounddevice initialised it,
    otherwise ``Pa_Terminate`` would only decrement the count and nothing would be re-scanned.
    sounddevice silences stderr during ``_initialize`` (libjack's "Cannot connect to server"
    chatter when no server runs)."""
    n = sd._initialized
    for _ in range(n):
        sd._terminate()
    for _ in range(max(n, 1)):
        sd._initialize()


def jack_device(sd) -> int:
    """Index of the device ``system`` (else the first device) of PortAudio's JACK host API
    ('JACK Audio Connection Kit'); with the dummy backend ``system`` has 2 in, 2 out.

    Raises a RuntimeError listing the host APIs if JACK is absent (server not running, or
    PortAudio not re-initialised after the server started, see :func:`reinit_portaudio`)."""
    apis = sd.query_hostapis()
    for api in apis:
        if "JACK" in api["name"]:
            if not api["devices"]:
                raise RuntimeError(f"PortAudio's JACK host API has no devices: {api}")
            # PortAudio lists every JACK client with audio ports as a device; prefer "system"
            for dev in api["devices"]:
                if sd.query_devices(dev)["name"] == "system":
                    return dev
            return api["devices"][0]
    names = [a["name"] for a in apis]
    raise RuntimeError(
        f"PortAudio has no JACK host API (host APIs: {names}); is a JACK server running, and was "
        "PortAudio re-initialised after it started (reinit_portaudio / jack_server)?")


# --------------------------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------------------------

@dataclass
class JackServer:
    pid: int
    fs: int
    period: int
    log_path: str
    _proc: subprocess.Popen
    killed: bool = False

    def kill(self) -> float:
        """SIGKILL jackd on purpose (a test of the server dying under a client) and reap it;
        returns ``time.monotonic()`` just before the signal.  :func:`jack_server` then does
        not report the death as a failure (PortAudio of this process is abandoned as for any
        death: do not use sounddevice with JACK after this in the same process)."""
        self.killed = True
        t = time.monotonic()
        self._proc.kill()
        self._proc.wait(timeout=TOOL_TIMEOUT)
        return t

    def alive(self) -> bool:
        """True while jackd is running.  If it is not, do NOT stop/close PortAudio streams:
        ``stream.stop()``/``abort()`` then block for PortAudio's internal 10-minute timeout."""
        return self._proc.poll() is None

    def log(self) -> str:
        """jackd's stdout+stderr so far (xrun messages etc.)."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError as e:
            return f"<jackd log unavailable: {e}>"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    """Have the kernel send jackd SIGTERM when the process that started it dies, so that a test
    process that crashes (segfault, os._exit) cannot leave jackd running (Linux prctl)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except Exception:
        pass


def _stop(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """Stop jackd by PID: SIGTERM, then SIGKILL if it has not exited after ``timeout`` s; reap."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


class _Watchdog:
    """Last-resort guard against a hung PortAudio/JACK call inside ``with jack_server()``.

    If the block is still running after ``seconds``: write all threads' tracebacks to stderr and
    to ``<tmpdir>/rtamt-jack-watchdog-<pid>.txt`` (pytest's fd capture swallows stderr if the
    process ends this way), SIGKILL jackd by PID - which wakes a PortAudio call blocked on the
    server - and give the block 10 s to get out (``jack_server`` then raises a RuntimeError).
    If it does not, end the whole process with exit code 3.
    """

    def __init__(self, proc: subprocess.Popen, seconds: float):
        self.proc, self.seconds = proc, seconds
        self.fired = False
        self._lock = threading.Lock()
        self._left = threading.Event()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def block_left(self) -> bool:
        """Call when the block is left; returns whether the watchdog had fired."""
        with self._lock:
            self._left.set()
            self._timer.cancel()
            return self.fired

    def _fire(self) -> None:
        with self._lock:
            if self._left.is_set():
                return
            self.fired = True
        msg = (f"\n*** tests/support/_jack.py jack_server: block still running after "
               f"{self.seconds} s; killing jackd (pid {self.proc.pid}) ***\n")
        path = os.path.join(tempfile.gettempdir(), f"rtamt-jack-watchdog-{os.getpid()}.txt")
        with contextlib.suppress(Exception):
            with open(path, "w") as f:
                f.write(msg)
                f.flush()
                faulthandler.dump_traceback(file=f, all_threads=True)
        with contextlib.suppress(Exception):
            sys.stderr.write(msg + f"(tracebacks also in {path})\n")
            sys.stderr.flush()
            faulthandler.dump_traceback(all_threads=True)
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(timeout=5)
        if not self._left.wait(10.0):
            with contextlib.suppress(Exception):
                sys.stderr.write("*** still blocked 10 s after killing jackd: exiting with code 3 "
                                 "***\n")
                sys.stderr.flush()
            os._exit(3)


@contextlib.contextmanager
def jack_server(fs: int = 48000, period: int = 256, *, realtime: bool = True,
                portaudio: bool = True, timeout: float = 10.0,
                hard_timeout: float | None = 120.0) -> Iterator[JackServer]:
    """Run ``jackd -R -d dummy -r <fs> -p <period>`` (``-r`` instead of ``-R`` with
    ``realtime=False``) for the duration of the ``with`` block.

    * ``-R`` asks for realtime (SCHED_FIFO) scheduling, which keeps the timer-driven dummy backend
      free of xruns on a loaded machine; jackd falls back to normal scheduling (with a warning in
      its log) where that is not permitted.  See the module docstring.
    * Waits (at most ``timeout`` s) until the server answers (``jack_wait -w``); raises a
      RuntimeError including jackd's output if it exits or does not come up in time.
    * Yields a :class:`JackServer` (``pid``, ``alive()``, ``log()``).
    * With ``portaudio`` (default) sounddevice is imported and PortAudio re-initialised once the
      server is up, and terminated again before the server is stopped (then initialised again,
      now without JACK); see the module docstring for why both are needed.  Pa_Terminate also
      closes streams left open, but close your streams inside the block.
    * On exit jackd is stopped by PID (SIGTERM, SIGKILL after 5 s) and reaped, also when the
      block raises.  Should the test process itself die (segfault, abort), the kernel sends jackd
      SIGTERM (``PR_SET_PDEATHSIG``), so no server outlives the test session.
    * If jackd died during the block, a RuntimeError with its log is raised and PortAudio is
      abandoned rather than terminated (terminating it with a dead server aborts the process);
      sounddevice is then unusable for JACK for the rest of that process.
    * ``hard_timeout`` (s, None to disable): if the block has not finished by then, a watchdog
      dumps all tracebacks and kills jackd, which makes this raise a RuntimeError once the block
      gets out; if it is still stuck 10 s later the process is ended (exit code 3), so CI cannot
      hang in a blocked PortAudio call (``Pa_StopStream`` can wait up to 10 minutes).
    """
    if server_running():
        raise RuntimeError("a JACK server with the default name is already running (not started "
                           "by this test); stop it first (`jack_wait -c` says 'running')")
    sd = None
    if portaudio:
        import sounddevice as sd

    log = tempfile.NamedTemporaryFile(prefix="jackd-", suffix=".log", delete=False)
    env = dict(os.environ, JACK_NO_AUDIO_RESERVATION="1")
    cmd = ["jackd", "-R" if realtime else "-r",
           "-d", "dummy", "-r", str(int(fs)), "-p", str(int(period))]
    # output goes to a file, not a pipe: a pipe nobody reads would block jackd once full
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT,
                            preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    log.close()
    server = JackServer(pid=proc.pid, fs=int(fs), period=int(period), log_path=log.name,
                        _proc=proc)
    watchdog = _Watchdog(proc, hard_timeout) if hard_timeout else None
    pa_up = entered = False
    try:
        waiter = subprocess.Popen(["jack_wait", "-w", "-t", str(max(1, int(timeout)))],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        deadline = time.monotonic() + timeout + 2.0
        try:
            while waiter.poll() is None:
                if proc.poll() is not None:
                    raise RuntimeError(f"jackd exited with code {proc.returncode} while starting "
                                       f"({' '.join(cmd)}):\n{server.log()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"JACK server not ready after {timeout} s "
                                       f"({' '.join(cmd)}):\n{server.log()}")
                time.sleep(0.02)
        finally:
            if waiter.poll() is None:
                waiter.kill()
            out = waiter.communicate(timeout=TOOL_TIMEOUT)[0]
        if proc.poll() is not None or waiter.returncode != 0 or "available" not in out:
            raise RuntimeError(f"JACK server did not come up ({' '.join(cmd)}; jack_wait said "
                               f"{out.strip()!r}, jackd exit code {proc.poll()}):\n{server.log()}")
        if sd is not None:
            pa_up = True
            reinit_portaudio(sd)
            jack_device(sd)  # raises a clear error if PortAudio still does not see JACK
        entered = True
        yield server
    finally:
        fired = watchdog.block_left() if watchdog is not None else False
        # jackd died under us (startup failures were raised above).  When the watchdog fired it
        # killed jackd; poll() may still say None then (the watchdog thread may hold the wait
        # lock), and Pa_Terminate on a dead server aborts the process.
        died = fired or proc.poll() is not None
        died_log = server.log() if died else ""
        try:
            if sd is not None and pa_up:
                if died:
                    # Pa_Terminate would abort the process (assert in pa_jack.c Terminate), also
                    # from sounddevice's atexit handler: make sounddevice forget it initialised.
                    sd._initialized = 0
                else:
                    # PortAudio's JACK client must close while the server is alive.
                    for _ in range(sd._initialized):
                        sd._terminate()
        finally:
            try:
                _stop(proc)
            finally:
                if sd is not None and pa_up and not died and sd._initialized == 0:
                    sd._initialize()  # back to the state `import sounddevice` leaves (no JACK)
                with contextlib.suppress(OSError):
                    os.unlink(log.name)
        if fired:
            raise RuntimeError(f"the `with jack_server()` block exceeded hard_timeout="
                               f"{hard_timeout} s; the watchdog killed jackd (tracebacks on "
                               f"stderr)")
        if died and entered and not server.killed:
            raise RuntimeError(f"jackd (pid {proc.pid}) died during the test with exit code "
                               f"{proc.returncode}:\n{died_log}")


class TonePlayer:
    """``sounddevice.OutputStream`` callback playing a continuous 1 kHz sine of RMS ``dbfs`` dB
    re digital RMS 1.0 (``fs`` must be a multiple of 1000 Hz: one period is a whole table)."""

    def __init__(self, dbfs: float, fs: int):
        n = int(fs) // 1000
        self.table = (np.sqrt(2) * 10 ** (dbfs / 20)
                      * np.sin(2 * np.pi * np.arange(n) / n)).astype(np.float32)
        self.pos = 0
        self.flags: list[str] = []

    def cb(self, outdata, frames, time_info, status):
        if status:
            self.flags.append(str(status))
        n = self.table.size
        outdata[:, 0] = self.table[(self.pos + np.arange(frames)) % n]
        self.pos = (self.pos + frames) % n


def play_through(player, server, frames: int, timeout: float) -> None:
    """Start ``player`` (an object whose callback advances ``pos`` once ``go`` is set) and
    wait until it has played ``frames`` frames, then 0.1 s more for the last periods to
    arrive; fails if the server died or ``timeout`` seconds passed."""
    time.sleep(0.1)
    player.go = True
    deadline = time.monotonic() + timeout
    while player.pos < frames:
        assert time.monotonic() < deadline, "playback did not finish"
        assert server.alive(), server.log()
        time.sleep(0.02)
    time.sleep(0.1)


def wait_for_input_port(proc, before, server, deadline: float, what: str = "client"):
    """The single new JACK input port of the process ``proc`` (an app reading from JACK), once
    its stream has started (PortAudio auto-connects it to ``system:capture_*``); None if the
    process exited first.  Fails when the server died or ``deadline`` (monotonic s) passed."""
    while True:
        assert server.alive(), server.log()
        if proc.poll() is not None:
            return None
        ins = [p for p in new_ports(before) if p.rsplit(":", 1)[-1].startswith("in_")]
        if ins:
            assert len(ins) == 1, ins
            if any(c.startswith("system:") for c in connections().get(ins[0], [])):
                return ins[0]
        assert time.monotonic() < deadline, f"the {what}'s JACK input port did not appear"
        time.sleep(0.02)


def run_app_on_tone(sd, server, args: list[str], tmp_path, tag: str, *, dbfs: float,
                    period: int, port_timeout: float, run_timeout: float,
                    env: dict | None = None) -> tuple[str, str, TonePlayer]:
    """Play a 1 kHz tone of RMS ``dbfs`` into JACK and run ``python -m rtamt_apps ARGS`` (an app
    reading one JACK input channel) as its own process; once the app's input port exists
    (auto-connected to ``system:capture_*``) the tone is connected to it instead.  The app's
    output goes to files (a pipe nobody reads could block it).  Returns ``(stdout, stderr,
    player)`` after the app exited with code 0; fails with its output otherwise."""
    player = TonePlayer(dbfs, server.fs)
    before = list_ports()
    out = sd.OutputStream(samplerate=server.fs, blocksize=period, device=jack_device(sd),
                          channels=1, dtype="float32", callback=player.cb)
    proc = dst = rc = None
    out_path, err_path = tmp_path / f"{tag}.out", tmp_path / f"{tag}.err"
    try:
        (src,) = new_ports(before)
        out.start()
        disconnect_system([src])          # the tone goes to the app only
        before_app = list_ports()
        with open(out_path, "w") as fo, open(err_path, "w") as fe:
            proc = subprocess.Popen([sys.executable, "-m", "rtamt_apps", *args],
                                    stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
                                    env=env if env is not None else dict(os.environ))
        dst = wait_for_input_port(proc, before_app, server, time.monotonic() + port_timeout,
                                  args[0])
        if dst is not None:
            disconnect_system([dst])
            connect(src, dst)
            assert connections()[dst] == [src]
        rc = proc.wait(timeout=run_timeout)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()                   # by PID (Popen), only the process we started
            proc.wait(timeout=10)
        if server.alive():
            out.stop()
            out.close()
    stdout, stderr = out_path.read_text(), err_path.read_text()
    assert dst is not None, f"rtamt {args[0]} exited (code {proc.returncode}) before its " \
                            f"port appeared:\n{stdout}\n{stderr}"
    assert rc == 0, f"rtamt {args[0]} exit code {rc}:\n{stderr}"
    return stdout, stderr, player


APP_START_TIMEOUT = 90.0    # s for an app to import, warm up and open its JACK port
APP_GRACE = 30.0            # s we wait at most before killing a hung app (no test hangs)


def start_app(app, server, tmp_path, tag, *extra, period: int = 256):
    """Run ``python -m rtamt_apps APP --input system --hostapi JACK --channels 1`` on the
    dummy server until its JACK input port is up; output goes to ``tmp_path/TAG.out`` and
    ``.err``.  The app starts with SIGINT at its default action (:func:`restore_sigint`:
    the tests interrupt it, also when the suite runs with SIGINT ignored).  Returns
    ``(process, out path, err path)``."""
    before = list_ports()
    out, err = tmp_path / f"{tag}.out", tmp_path / f"{tag}.err"
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rtamt_apps", app, "--input", "system", "--hostapi", "JACK",
             "--channels", "1", "--blocksize", str(period), "--seconds", "120", *extra],
            stdin=subprocess.DEVNULL, stdout=fo, stderr=fe, preexec_fn=restore_sigint,
            env=dict(os.environ, RTAMT_CALIBRATION=str(tmp_path / "none.json")))
    port = wait_for_input_port(proc, before, server, time.monotonic() + APP_START_TIMEOUT, app)
    assert port is not None, f"{app} exited early:\n{out.read_text()}\n{err.read_text()}"
    return proc, out, err


def wait_app_exit(proc, t0: float) -> tuple[int | None, float]:
    """(exit code, seconds since ``t0``); code None if still running after APP_GRACE s."""
    try:
        rc = proc.wait(timeout=APP_GRACE)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - t0
    return rc, time.monotonic() - t0


def kill_app(proc) -> None:
    """Kill ``proc`` (by its PID: only the process the test started) if it still runs."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
