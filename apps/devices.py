"""``rtamt devices``: list input devices with their host API (PortAudio via sounddevice)."""
from __future__ import annotations

import sys


def add_arguments(p):
    p.add_argument("--hostapi", default=None, help="only this host API (substring, e.g. JACK)")


def run(args) -> int:
    from rtamt.runtime.stream import list_input_devices
    try:
        devs = list_input_devices()
    except RuntimeError as e:
        print(f"rtamt devices: {e}", file=sys.stderr)
        return 2
    if args.hostapi:
        devs = [d for d in devs if args.hostapi.lower() in d["hostapi"].lower()]
    if not devs:
        print("no input devices")
    for d in devs:
        print(f"{d['index']:3d}  {d['name']}  [{d['hostapi']}]  {d['channels']} ch  "
              f"{d['default_samplerate']:.0f} Hz")
    return 0
