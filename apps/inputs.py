"""Choosing and running a live input: built-in demo, audio file, or a sound device.

Shared by the live apps (``rtamt stream``, ``rtamt meter``, ``rtamt monitor``):
:func:`open_input` turns the user's ``--input`` string into an :class:`Input` (sample
rate, channels, and either a source thread or a device), :class:`Live` connects an input
to a :class:`~rtamt.runtime.Runtime` and starts / stops both in the right order, and
:func:`add_calibration_arguments` adds the level options (``--spl-ref``,
``--calibration``, ``--field``) of the apps that report absolute levels.
:func:`open_per_channel` opens one scheduled stream per input channel (``--per-channel``)
behind a :class:`PerChannel`, which :class:`Live` drives like a runtime.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .args import (
    SPL_REF_LIMITS,
    UsageError,
    check_block,
    int_range,
    looks_like_path,
    no_such_device,
    positive_float,
    spl_ref_db,
)

if TYPE_CHECKING:  # the runtime is imported when an input is opened, not with the CLI
    from rtamt.runtime import ArraySource, Runtime

#: sample rate of the built-in demo in the live apps (Hz)
DEMO_FS = 32000.0
#: length of the built-in demo signal (one pass), s
DEMO_SECONDS = 2.0


def has_default_input() -> bool:
    """True when PortAudio reports a default input device."""
    try:
        import sounddevice as sd

        sd.query_devices(kind="input")
        return True
    except Exception:
        return False


@dataclass
class Input:
    """A resolved input.

    kind     : ``'demo'``, ``'file'`` or ``'device'``.
    label    : what to show the user (``'demo'``, the file path, the device name).
    fs       : sample rate, Hz.
    channels : channels delivered.
    source   : the source thread (demo / file), else None.
    device   : PortAudio device index (device), else None.
    hostapi  : host API name asked for (device), else None.
    note     : a file opened with ``partial`` that is truncated: what was left out (one
               line, :func:`rtamt_apps.files.partial_note`), else None.
    """

    kind: str
    label: str
    fs: float
    channels: int
    source: ArraySource | None = None
    device: int | None = None
    hostapi: str | None = None
    note: str | None = None


def open_input(inp: str | None, *, hostapi: str | None = None, fs: float | None = None,
               channels: int | None = None, blocksize=256, realtime: bool = True,
               seconds: float | None = None, spl_ref: float = 100.0, loop: bool = False,
               max_channels: int | None = 2, default_fs: float | None = None,
               block: int | None = None, force: bool = False,
               partial: bool | None = None) -> Input:
    """Resolve ``inp``: ``'demo'`` (looped demo signal, ``spl_ref`` calibrated, on
    ``channels`` identical channels, 1 if not given), an existing audio file (WAV, FLAC,
    OGG, ...: :class:`rtamt.signals.AudioReader`), ``'default'`` or ``None`` (the default
    input device, or the demo when there is none), or a device
    name substring / index (of ``hostapi`` if given).

    ``fs``: the demo's or device's sample rate; for a file, the rate it must have (else
    ``ValueError``).  Without ``fs`` the demo runs at ``default_fs`` or :data:`DEMO_FS`,
    a device at ``default_fs`` or its own default rate.  ``seconds`` bounds a demo/file
    source (``None``: the file once, the demo forever).  ``max_channels``: the most
    channels the app takes (``None``: no limit).  ``block`` (the app's processing block)
    and ``blocksize`` may hold at most 1 s of audio at the input's rate unless ``force``
    (:func:`rtamt_apps.args.check_block`).  An ``inp`` that looks like a path (a path
    separator or an audio file extension) and is not a file is "no such file", a device
    name that matches nothing "no such device".  A truncated file is refused
    (:class:`rtamt.signals.AudioFileError`, with the ``--partial`` hint when ``partial`` is
    not None, i.e. the app has that option) unless ``partial``: then the frames read are
    played and :attr:`Input.note` says what was missing.  Raises ``ValueError`` / ``OSError`` /
    ``LookupError`` / ``RuntimeError`` with a message for the user."""
    from rtamt.runtime import DemoSource, FileSource

    if inp is None:
        inp = "default" if has_default_input() else "demo"
    if inp == "demo":
        rate = float(fs or default_fs or DEMO_FS)
        ch = int(channels or 1)
        src = DemoSource(rate, blocksize=blocksize, realtime=realtime, seconds=seconds,
                         channels=ch, spl_ref=spl_ref)
        res = Input("demo", "demo", rate, ch, source=src)
    elif os.path.isfile(inp):
        from rtamt.signals import AudioFileError

        from .files import partial_note, read_error
        try:
            src = FileSource(inp, blocksize=blocksize, realtime=realtime, seconds=seconds,
                             fs=fs, loop=loop, partial=bool(partial))
        except AudioFileError as e:
            raise AudioFileError(read_error(e, partial is not None), e.frames_read) from None
        res = Input("file", str(inp), src.fs, src.channels, source=src,
                    note=partial_note(src.reader))
    elif looks_like_path(inp):
        raise FileNotFoundError(f"{'not a file' if os.path.isdir(inp) else 'no such file'}: {inp}")
    else:
        from rtamt.runtime.stream import _sd, find_input_device

        from .optional import require_portaudio
        require_portaudio()            # a missing PortAudio is exit 1 with what to install
        dev = None if inp == "default" else int(inp) if str(inp).isdigit() else inp
        try:
            idx = find_input_device(dev, hostapi)
        except LookupError as e:
            raise no_such_device(inp, hostapi, e) from None
        info = _sd().query_devices(idx)
        rate = float(fs or default_fs or info["default_samplerate"])
        have = int(info["max_input_channels"])
        ch = int(channels or (have if max_channels is None else min(max_channels, have)))
        res = Input("device", str(info["name"]), rate, ch, device=idx, hostapi=hostapi)
    if max_channels is not None and res.channels > max_channels:
        n = "1 or 2" if max_channels == 2 else f"1 to {max_channels}"
        raise ValueError(f"{res.label}: this app takes {n} channels, the input has "
                         f"{res.channels} (choose --channels)")
    check_block("--blocksize", blocksize, res.fs, force)
    if block is not None:
        check_block("--block", block, res.fs, force)
    return res


def add_calibration_arguments(p) -> None:
    """The level options every live app shares (argparse): ``--spl-ref``,
    ``--calibration`` (resolved by :func:`rtamt.io.calibration.resolve_spl_ref`) and
    ``--field`` (the loudness models' outer-ear transfer)."""
    p.add_argument("--spl-ref", type=spl_ref_db, default=None,
                   help="dB SPL of a digital RMS of 1.0 (overrides the calibration file; "
                        f"{SPL_REF_LIMITS[0]:g} to {SPL_REF_LIMITS[1]:g})")
    p.add_argument("--calibration", default=None, help="calibration file (rtamt calibrate)")
    p.add_argument("--field", default="free", choices=["free", "diffuse", "eardrum"],
                   help="sound field of the loudness model's outer-ear transfer")


#: exit code of a live app whose input stopped delivering audio
EXIT_SOURCE_FAULT = 3


def add_source_arguments(p) -> None:
    """The input-fault options every live app shares (argparse): ``--source-timeout``
    (the runtime's watchdog) and ``--reconnect`` (see :class:`Live`)."""
    p.add_argument("--source-timeout", type=positive_float(60.0), default=1.0,
                   help="seconds without audio from the input (at least two callback periods) "
                        "after which it counts as failed: the app exits with code 3 "
                        "(default 1)")
    p.add_argument("--reconnect", action="store_true",
                   help="when the input fails, keep running and reopen the device (by name) "
                        "every 0.5 s; the model state is kept across the gap")


class Live:
    """An :class:`Input` feeding a :class:`Runtime`.

    ``start()`` warms the chains up and starts the processing thread, then the
    source thread or the PortAudio stream; ``stop(policy)`` stops the input first,
    then the runtime (``'drain'`` processes what is queued, ``'discard'`` drops it).
    ``done`` is True when a finite source has pushed everything.

    Faults: the app's loop calls :meth:`poll` every 50-100 ms.  It returns the source
    error once the input stopped delivering (the runtime's watchdog, or PortAudio saying
    the stream died), and then the app stops and exits non-zero.  With ``reconnect`` it
    returns None instead and reopens the device (by name) every ``retry_s`` seconds until
    it delivers again; a stalled source thread is simply waited for.  The runtime and its
    model state are kept across the gap (``Result.gap``; ``stats().source_stalls``).
    Stopping a PortAudio stream is bounded (:class:`rtamt.runtime.stream.AudioInput`):
    ``stop()`` returns within about a second even when the audio server is gone.
    """

    def __init__(self, inp: Input, runtime: Runtime, blocksize: int = 256, *,
                 reconnect: bool = False, retry_s: float = 0.5):
        self.input = inp
        self.runtime = runtime
        self.blocksize = int(blocksize)
        self.audio = None
        self.reconnect = bool(reconnect)
        self.retry_s = float(retry_s)
        self.retries = 0          # reopen attempts
        self.reconnects = 0       # successful reopens
        self.abandoned = 0        # streams that did not stop in time
        self._next_try = 0.0
        self._lost = False
        self._gave_up: str | None = None

    def start(self) -> Live:
        if self.input.source is not None:
            self.runtime.start()
            self.input.source.start(self.runtime)
        else:
            from rtamt.runtime.stream import AudioInput

            self.audio = AudioInput(self.runtime, self.input.device, self.input.hostapi,
                                    blocksize=self.blocksize).start()
        return self

    @property
    def done(self) -> bool:
        return self.input.source is not None and self.input.source.done

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a finite source; True when it is done."""
        if self.input.source is None:
            return False
        return self.input.source.join(timeout)

    def poll(self, notify=None) -> str | None:
        """Check the input; the source error when it failed and the app should end, else
        None (also while reconnecting: see :attr:`reconnecting`).  ``notify(message)`` is
        called when reconnecting starts and when the input is back."""
        import time

        if self.audio is not None and self.audio.stream is not None:
            self.audio.check()
        err = self.runtime.source_error
        if self.reconnecting != self._lost:
            self._lost = self.reconnecting
            if notify is not None:
                notify(f"{err}; reconnecting every {self.retry_s:g} s" if self._lost else
                       "input is back (the gap is marked; model state kept)")
        if err is None or not self.reconnect:
            return err
        if self._gave_up is not None:
            return self._gave_up
        a = self.audio
        if a is None or a.stream_active():
            # a stalled source thread, or a stream PortAudio still runs (e.g. a stalled
            # server): wait for its callbacks to resume
            return None
        now = time.monotonic()
        if now >= self._next_try:
            self.retries += 1
            if a.reopen():
                self.reconnects += 1
                # give the new stream the watchdog's time to deliver before trying again
                self._next_try = now + max(self.retry_s, self.runtime.source_deadline)
            elif a.abandoned:
                self._gave_up = f"{err}; cannot reconnect: {a.reopen_error}"
                return self._gave_up
            else:
                self._next_try = now + self.retry_s
        return None

    @property
    def reconnecting(self) -> bool:
        return self.reconnect and self.runtime.source_error is not None

    def failure(self) -> str | None:
        """What went wrong with the input, for the app's exit message (None: nothing):
        the source error, or a stream that had to be abandoned at stop."""
        err = self._gave_up or self.runtime.source_error
        if err is None and self.abandoned:
            err = ("input stopped responding: the audio stream did not stop within its "
                   "timeout and was abandoned (audio server gone?)")
        return None if err is None else f"{err} [input: {self.input.label}]"

    def stop(self, policy: str = "discard") -> None:
        if self.input.source is not None:
            self.input.source.stop()
            self.runtime.stop(policy)
        elif self.audio is not None:
            audio, self.audio = self.audio, None
            try:
                audio.stop(policy)
            finally:
                self.abandoned += audio.abandoned
        else:
            self.runtime.stop(policy)


def add_per_channel_arguments(p) -> None:
    """The options of ``--per-channel`` (argparse): ``--per-channel``, ``--budget-ms``,
    ``--threads`` (see :func:`open_per_channel`)."""
    p.add_argument("--per-channel", action="store_true",
                   help="run every input channel (device ports, WAV channels, the demo on "
                        "--channels N) as its own stream on an rtamt.Scheduler; stats per "
                        "stream, named ch0, ch1, ...")
    p.add_argument("--budget-ms", type=positive_float(10000.0), default=None,
                   help="--per-channel: latency budget of every stream, ms (default: the "
                        "block period)")
    p.add_argument("--threads", type=int_range(1, 256), default=None,
                   help="--per-channel: scheduler worker threads (default: every core)")
    p.add_argument("--admission", choices=["strict", "best-effort"], default=None,
                   help="--per-channel: 'strict' refuses to start when the streams' budgets "
                        "cannot be met (exit 2), 'best-effort' runs anyway and counts misses "
                        "(default: strict live, best-effort with --fast)")


def check_per_channel(args, *options: str) -> None:
    """Refuse (:class:`UsageError`) any of ``options`` (attribute names of ``args``, e.g.
    ``'threads'``) given without ``--per-channel``."""
    if args.per_channel:
        return
    for opt in options:
        if getattr(args, opt, None) is not None:
            raise UsageError(f"argument --{opt.replace('_', '-')}: only with --per-channel")


class PerChannel:
    """One scheduled stream per input channel: a :class:`rtamt.scheduler.FanOut` over the
    streams of its own :class:`rtamt.scheduler.Scheduler`, with what :class:`Live`
    expects of a runtime (``stop`` also stops the scheduler's threads, bounded;
    ``source_deadline`` for ``--reconnect``).  Everything else is the FanOut's."""

    def __init__(self, scheduler, streams: list):
        from rtamt.scheduler import FanOut

        self.scheduler = scheduler
        self.fan = FanOut(streams)
        self.streams = self.fan.streams

    def __getattr__(self, name):
        if name == "fan":
            raise AttributeError(name)
        return getattr(self.fan, name)

    @property
    def source_deadline(self) -> float:
        return max(s.source_deadline for s in self.streams)

    def stop(self, policy: str = "drain", timeout: float = 30.0) -> None:
        """Close every stream (``policy``), then stop the scheduler's threads."""
        try:
            self.fan.stop(policy, timeout)
        finally:
            self.scheduler.stop(5.0)


def open_per_channel(args, inp: Input, open_one) -> PerChannel:
    """A :class:`PerChannel` over ``inp.channels`` streams: ``open_one(scheduler, c,
    name, **kw)`` opens channel ``c``'s stream (``Scheduler.open`` keywords ``kw``: the
    budget, the admission and ``source_timeout`` from ``args``).  A budget that cannot be
    met raises :class:`UsageError` naming the options that change it."""
    from rtamt.scheduler import RtamtCapacityError, Scheduler

    sched = Scheduler(threads=args.threads, start=False)
    admission = args.admission or ("best-effort" if args.fast else "strict")
    kw = dict(budget_ms=args.budget_ms, admission=admission,
              source_timeout=args.source_timeout)
    try:
        streams = [open_one(sched, c, f"ch{c}", **kw) for c in range(inp.channels)]
    except RtamtCapacityError as e:
        sched.close("discard", 5.0)
        raise UsageError(f"--per-channel: {inp.channels} streams cannot run in real time "
                         f"here ({e}); try a longer --budget-ms or --block, more --threads, "
                         "or --admission best-effort") from None
    return PerChannel(sched, streams)
