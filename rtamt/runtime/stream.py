"""sounddevice (PortAudio) input stream wrapper for a :class:`~rtamt.runtime.Runtime`.

``sounddevice`` is imported lazily: it needs the PortAudio shared library
(Debian: ``libportaudio2``), which only the device paths require.

Stopping never blocks for long.  When the audio server dies (e.g. jackd is killed)
PortAudio's ``Pa_StopStream``, ``Pa_AbortStream`` and ``Pa_CloseStream`` wait for a
server that will never answer (PortAudio 19.6: up to its 10-minute internal timeout).
:meth:`AudioInput.stop` therefore runs each call in a daemon thread with a timeout:
stop, else abort, then close; a stream that still does not answer is *abandoned* (left
to PortAudio, referenced forever so its callback stays valid) and sounddevice is told
not to terminate PortAudio at exit, which with a dead JACK server would abort the
process (``pa_jack.c: Terminate: Assertion `err == 0' failed``) or block.
"""
from __future__ import annotations

import sys
import threading

from .runtime import Runtime

#: streams that did not stop/close in time: kept referenced so that PortAudio never
#: calls into a freed callback
_ABANDONED: list = []


def _bounded(fn, timeout: float) -> bool:
    """Run ``fn()`` in a daemon thread; True if it returned (or raised) within ``timeout``
    seconds.  A call that does not return is left running in its daemon thread."""
    done = threading.Event()

    def call():
        try:
            fn()
        except Exception:  # noqa: BLE001 - a failing stop/close still counts as returned
            pass
        finally:
            done.set()

    threading.Thread(target=call, name="rtamt-stream-shutdown", daemon=True).start()
    return done.wait(timeout)


def _sd():
    try:
        import sounddevice as sd
    except OSError as e:  # PortAudio library missing
        raise RuntimeError(
            "sounddevice could not load PortAudio (install libportaudio2 / portaudio)") from e
    return sd


def list_input_devices() -> list[dict]:
    """Input-capable devices: ``[{index, name, hostapi, channels, default_samplerate}]``."""
    sd = _sd()
    apis = sd.query_hostapis()
    out = []
    for i, d in enumerate(sd.query_devices()):
        if d["max_input_channels"] > 0:
            out.append(dict(index=i, name=d["name"], hostapi=apis[d["hostapi"]]["name"],
                            channels=d["max_input_channels"],
                            default_samplerate=d["default_samplerate"]))
    return out


def find_input_device(device=None, hostapi: str | None = None) -> int:
    """Index of an input device.

    device  : index, or a case-insensitive substring of the device name, or None
              (the host API's default input device, or PortAudio's default).
    hostapi : case-insensitive substring of the host-API name (e.g. ``'JACK'``,
              ``'ALSA'``); restricts the search.
    Raises ``LookupError`` listing what exists.
    """
    sd = _sd()
    devs = list_input_devices()
    if hostapi is not None:
        devs = [d for d in devs if hostapi.lower() in d["hostapi"].lower()]
    if isinstance(device, int) or (isinstance(device, str) and device.isdigit()):
        idx = int(device)
        if any(d["index"] == idx for d in devs):
            return idx
    elif device is None:
        if hostapi is None:
            idx = sd.default.device[0]
            if idx is not None and idx >= 0:
                return int(idx)
        if devs:
            if hostapi is not None:
                apis = sd.query_hostapis()
                for a in apis:
                    if hostapi.lower() in a["name"].lower() and a["default_input_device"] >= 0:
                        return int(a["default_input_device"])
            return devs[0]["index"]
    else:
        hits = [d for d in devs if device.lower() in d["name"].lower()]
        if hits:
            return hits[0]["index"]
    have = "; ".join(f"{d['index']}: {d['name']} [{d['hostapi']}]" for d in list_input_devices())
    raise LookupError(f"no input device matching device={device!r} hostapi={hostapi!r}; "
                      f"input devices: {have or 'none'}")


class AudioInput:
    """Opens a ``sounddevice.InputStream`` whose callback feeds ``runtime``.

    ``blocksize=0`` lets the host API choose (possibly varying) sizes; the runtime
    re-blocks.  ``start()`` starts the runtime's processing thread first and arms its
    source watchdog once the stream runs; ``stop()`` stops the stream (each PortAudio
    call bounded by ``stop_timeout`` seconds, see the module docstring), then the runtime
    (``policy`` as in :meth:`Runtime.stop`).

    Faults: :meth:`check` asks PortAudio whether the stream is still active and reports
    a dead stream to the runtime (:attr:`Runtime.source_error`); the runtime's watchdog
    reports a stream that stops calling back.  :meth:`reopen` closes the failed stream
    and opens the same device again, found by name.  ``abandoned`` counts streams that
    did not stop within the timeouts; ``shutdown_log`` says what the last stop did.
    """

    def __init__(self, runtime: Runtime, device=None, hostapi: str | None = None,
                 blocksize: int = 0, latency="low", *, stop_timeout: float = 0.5,
                 **stream_kwargs):
        self.runtime = runtime
        self.hostapi = hostapi
        self.device = self._find(device, hostapi)
        self.device_name = self._device_name(self.device)
        self.blocksize = int(blocksize)
        self.latency = latency
        self.stop_timeout = float(stop_timeout)
        self._user_finished = stream_kwargs.pop("finished_callback", None)
        self.stream_kwargs = stream_kwargs
        self.stream = None
        self.abandoned = 0
        self.shutdown_log: list[str] = []
        self.reopen_error: str | None = None
        self._stopping = False

    # -- device access (overridden by tests to run without PortAudio)
    def _find(self, device, hostapi) -> int:
        return find_input_device(device, hostapi)

    def _device_name(self, index) -> str:
        return str(_sd().query_devices(index)["name"])

    def _new_stream(self):
        return _sd().InputStream(device=self.device, channels=self.runtime.channels,
                                 samplerate=self.runtime.fs, dtype="float32",
                                 blocksize=self.blocksize, latency=self.latency,
                                 callback=self.runtime.callback,
                                 finished_callback=self._finished, **self.stream_kwargs)

    def describe(self) -> str:
        return f"input device {self.device} {self.device_name!r}"

    # -- lifecycle
    def start(self) -> AudioInput:
        self.runtime.start()
        try:
            self._open()
        except Exception as e:
            # e.g. more channels than the device has, or an unsupported rate: leave nothing
            # running, and say which device and settings were refused
            self._shutdown()
            self.runtime.stop("discard")
            raise RuntimeError(
                f"could not open input device {self.device} with {self.runtime.channels} ch at "
                f"{self.runtime.fs:g} Hz (blocksize {self.blocksize}): {e}") from e
        return self

    def _open(self) -> None:
        self._stopping = False
        self.stream = self._new_stream()
        self.stream.start()
        self.runtime.source_started(self.blocksize / self.runtime.fs)

    def _finished(self) -> None:
        """PortAudio's ``finished_callback``: the stream became inactive (its thread)."""
        if not self._stopping:
            self.runtime.report_source_error(
                f"input stopped delivering audio: the stream of {self.describe()} ended "
                "(callback error or audio API failure)")
        if self._user_finished is not None:
            self._user_finished()

    def stream_active(self) -> bool:
        """PortAudio's view: the stream exists and is active (it may still be stalled)."""
        s = self.stream
        try:
            return s is not None and bool(s.active)
        except Exception:  # noqa: BLE001 - a stream the API cannot query is not active
            return False

    def check(self) -> str | None:
        """Ask the audio API whether the stream still runs (cheap; call it every 50-100 ms
        from a control loop): a stream PortAudio reports inactive is reported to the
        runtime.  Returns :attr:`Runtime.source_error`."""
        if (self.stream is not None and not self._stopping
                and self.runtime.source_error is None):
            if not self.stream_active() and not self._stopping:
                self.runtime.report_source_error(
                    f"input stopped delivering audio: PortAudio reports the stream of "
                    f"{self.describe()} inactive (audio server gone or device lost)")
        return self.runtime.source_error

    def _shutdown(self, timeout: float | None = None) -> None:
        """Stop and close the stream, each call bounded by ``timeout``; abandon it if
        neither stop nor abort returns (then close is not tried: it would block too)."""
        s, self.stream = self.stream, None
        if s is None:
            return
        t = self.stop_timeout if timeout is None else float(timeout)
        self._stopping = True
        self.runtime.source_ended()
        log = self.shutdown_log = []
        closed = False
        try:
            ok = _bounded(s.stop, t)
            log.append("stop" if ok else "stop timed out")
            if not ok:
                ok = _bounded(s.abort, t)
                log.append("abort" if ok else "abort timed out")
            if ok:
                closed = _bounded(s.close, t)
                log.append("close" if closed else "close timed out")
        finally:   # also when interrupted (Ctrl-C while waiting): never leave it half-known
            if not closed:
                self._abandon(s)

    def _abandon(self, s) -> None:
        """Leave a stream that did not stop/close in time to PortAudio."""
        self.abandoned += 1
        self.shutdown_log.append("abandoned")
        _ABANDONED.append(s)
        if type(s).__module__.partition(".")[0] == "sounddevice":
            # Pa_Terminate (sounddevice's atexit handler) would block on this stream or,
            # with a dead JACK server, abort the process: never terminate PortAudio here
            sd = sys.modules.get("sounddevice")
            if sd is not None:
                sd._initialized = 0

    def stop(self, policy: str = "drain", timeout: float | None = None) -> None:
        """Stop the stream (bounded, see :meth:`_shutdown`), then the runtime."""
        self._shutdown(timeout)
        self.runtime.stop(policy)

    def reopen(self) -> bool:
        """After a fault: close the failed stream (bounded), find the device again by its
        name (its index may have changed) and start a new stream feeding the same runtime
        (model state kept).  True when the new stream runs; else ``reopen_error`` says why.

        A stream that had to be abandoned is not followed by a new one: PortAudio still
        waits on it, and opening another stream then blocks (seen with JACK).  With
        PortAudio 19.6 a *restarted* JACK server cannot be reached either: PortAudio's JACK
        client died with the old server and is only replaced by re-initialising PortAudio,
        which aborts the process once the server has died (see docs/runtime.md)."""
        before = self.abandoned
        self._shutdown()
        if self.abandoned > before:
            self.reopen_error = ("the failed stream did not stop or close in time, so "
                                 "PortAudio is stuck on it in this process (restart the app)")
            return False
        try:
            self.device = self._find(self.device_name, self.hostapi)
            self._open()
        except Exception as e:  # noqa: BLE001 - reported, retried by the caller
            self._shutdown()
            self.reopen_error = str(e)
            return False
        self.reopen_error = None
        return True

    def __enter__(self):
        return self.start()

    def __exit__(self, et, ev, tb):
        self.stop("discard" if et is not None else "drain")
