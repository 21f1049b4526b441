"""``rtamt`` command line: dispatches to the thin apps in ``apps/``."""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "process": ("apps.process", "stream a WAV file or the demo through a model, write .npz"),
    "models": ("apps.models", "list models with their outputs and parameters"),
    "stream": ("apps.stream", "run a model live (demo, WAV or input device) on the real-time runtime"),
    "devices": ("apps.devices", "list audio input devices and host APIs"),
    "meter": ("apps.meter", "live loudness meter: sone, phon, dB SPL, LUFS (demo, WAV or device)"),
    "monitor": ("apps.monitor", "live pyqtgraph monitor: excitation, loudness, modulation "
                "spectrum, health (demo, WAV or device)"),
    "calibrate": ("apps.calibrate", "measure a calibrator tone and store spl_ref for the meter"),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rtamt", description="real-time streaming auditory models")
    sub = parser.add_subparsers(dest="cmd", required=True)
    mods = {}
    for name, (modname, help_) in COMMANDS.items():
        mod = importlib.import_module(modname)
        mods[name] = mod
        mod.add_arguments(sub.add_parser(name, help=help_))
    args = parser.parse_args(argv)
    return mods[args.cmd].run(args)


if __name__ == "__main__":
    sys.exit(main())
