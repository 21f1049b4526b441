"""sounddevice (PortAudio) input stream wrapper for a :class:`~rtamt.runtime.Runtime`.

``sounddevice`` is imported lazily: it needs the PortAudio shared library
(Debian: ``libportaudio2``), which only the device paths require.
"""
from __future__ import annotations

from .runtime import Runtime


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
    re-blocks.  ``start()`` starts the runtime's processing thread first; ``stop()``
    stops the stream, then the runtime (``policy`` as in :meth:`Runtime.stop`).
    """

    def __init__(self, runtime: Runtime, device=None, hostapi: str | None = None,
                 blocksize: int = 0, latency="low", **stream_kwargs):
        self.runtime = runtime
        self.device = find_input_device(device, hostapi)
        self.blocksize = int(blocksize)
        self.latency = latency
        self.stream_kwargs = stream_kwargs
        self.stream = None

    def start(self) -> "AudioInput":
        sd = _sd()
        self.runtime.start()
        try:
            self.stream = sd.InputStream(device=self.device, channels=self.runtime.channels,
                                         samplerate=self.runtime.fs, dtype="float32",
                                         blocksize=self.blocksize, latency=self.latency,
                                         callback=self.runtime.callback, **self.stream_kwargs)
            self.stream.start()
        except Exception as e:
            # e.g. more channels than the device has, or an unsupported rate: leave nothing
            # running, and say which device and settings were refused
            if self.stream is not None:
                self.stream.close()
                self.stream = None
            self.runtime.stop("discard")
            raise RuntimeError(
                f"could not open input device {self.device} with {self.runtime.channels} ch at "
                f"{self.runtime.fs:g} Hz (blocksize {self.blocksize}): {e}") from e
        return self

    def stop(self, policy: str = "drain") -> None:
        if self.stream is not None:
            try:
                self.stream.stop()
            finally:
                self.stream.close()
                self.stream = None
        self.runtime.stop(policy)

    def __enter__(self):
        return self.start()

    def __exit__(self, et, ev, tb):
        self.stop("discard" if et is not None else "drain")
