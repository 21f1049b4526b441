"""``rtamt devices``: list input devices with their host API (PortAudio via sounddevice)."""
from __future__ import annotations

from .optional import require_portaudio


def add_arguments(p):
    p.add_argument("--hostapi", default=None, help="only this host API (substring, e.g. JACK)")


def run(args) -> int:
    """Without the PortAudio library: :class:`~rtamt_apps.optional.MissingComponent`
    (one line saying to install libportaudio2, exit 1), not a usage error."""
    require_portaudio()
    from rtamt.runtime.stream import list_input_devices

    devs = list_input_devices()
    if args.hostapi:
        devs = [d for d in devs if args.hostapi.lower() in d["hostapi"].lower()]
    if not devs:
        print("no input devices")
    for d in devs:
        print(f"{d['index']:3d}  {d['name']}  [{d['hostapi']}]  {d['channels']} ch  "
              f"{d['default_samplerate']:.0f} Hz")
    return 0
