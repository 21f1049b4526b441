"""Choosing and running a live input: built-in demo, WAV file, or a sound device.

Shared by the live apps (``rtamt meter``, ``rtamt monitor``): :func:`open_input` turns
the user's ``--input`` string into an :class:`Input` (sample rate, channels, and either
a source thread or a device), :class:`Live` connects an input to a :class:`Runtime`
and starts / stops both in the right order.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .runtime import Runtime
from .sources import ArraySource, DemoSource, FileSource

#: sample rate of the built-in demo in the live apps (Hz)
DEMO_FS = 32000.0


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
    """

    kind: str
    label: str
    fs: float
    channels: int
    source: ArraySource | None = None
    device: int | None = None
    hostapi: str | None = None


def open_input(inp: str | None, *, hostapi: str | None = None, fs: float | None = None,
               channels: int | None = None, blocksize=256, realtime: bool = True,
               seconds: float | None = None, spl_ref: float = 100.0, loop: bool = False,
               max_channels: int = 2) -> Input:
    """Resolve ``inp``: ``'demo'`` (looped demo signal at ``fs`` or :data:`DEMO_FS`,
    ``spl_ref`` calibrated), an existing WAV path, ``'default'`` or ``None`` (the
    default input device, or the demo when there is none), or a device name substring /
    index (of ``hostapi`` if given).  ``seconds`` bounds a demo/file source (``None``:
    the file once, the demo forever).  Raises ``ValueError`` / ``OSError`` /
    ``LookupError`` / ``RuntimeError`` with a message for the user."""
    if inp is None:
        inp = "default" if has_default_input() else "demo"
    if inp == "demo":
        rate = float(fs or DEMO_FS)
        src = DemoSource(rate, blocksize=blocksize, realtime=realtime, seconds=seconds,
                         spl_ref=spl_ref)
        res = Input("demo", "demo", rate, 1, source=src)
    elif os.path.isfile(inp):
        src = FileSource(inp, blocksize=blocksize, realtime=realtime, seconds=seconds, fs=fs,
                         loop=loop)
        res = Input("file", str(inp), src.fs, src.channels, source=src)
    else:
        from .stream import _sd, find_input_device

        dev = None if inp == "default" else int(inp) if str(inp).isdigit() else inp
        idx = find_input_device(dev, hostapi)
        info = _sd().query_devices(idx)
        rate = float(fs or info["default_samplerate"])
        ch = int(channels or min(max_channels, int(info["max_input_channels"])))
        res = Input("device", str(info["name"]), rate, ch, device=idx, hostapi=hostapi)
    if res.channels > max_channels:
        n = "1 or 2" if max_channels == 2 else f"1 to {max_channels}"
        raise ValueError(f"{res.label}: this app takes {n} channels, the input has "
                         f"{res.channels} (choose --channels)")
    return res


class Live:
    """An :class:`Input` feeding a :class:`Runtime`.

    ``start()`` warms the chains up and starts the processing thread, then the
    source thread or the PortAudio stream; ``stop(policy)`` stops the input first,
    then the runtime (``'drain'`` processes what is queued, ``'discard'`` drops it).
    ``done`` is True when a finite source has pushed everything.
    """

    def __init__(self, inp: Input, runtime: Runtime, blocksize: int = 256):
        self.input = inp
        self.runtime = runtime
        self.blocksize = int(blocksize)
        self.audio = None

    def start(self) -> "Live":
        if self.input.source is not None:
            self.runtime.start()
            self.input.source.start(self.runtime)
        else:
            from .stream import AudioInput

            self.audio = AudioInput(self.runtime, self.input.device, None,
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

    def stop(self, policy: str = "discard") -> None:
        if self.input.source is not None:
            self.input.source.stop()
            self.runtime.stop(policy)
        elif self.audio is not None:
            self.audio.stop(policy)
            self.audio = None
        else:
            self.runtime.stop(policy)
