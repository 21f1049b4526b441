"""``rtamt`` command line: one subcommand per app module of :mod:`rtamt_apps`
(each exposes ``add_arguments(parser)`` and ``run(args)``)."""
from __future__ import annotations

import argparse
import sys

from . import calibrate, devices, meter, models, monitor, process, stream

COMMANDS = {
    "process": (process, "stream a WAV file or the demo through a model, write .npz"),
    "models": (models, "list models with their outputs and parameters"),
    "stream": (stream, "run a model live (demo, WAV or input device) on the real-time runtime"),
    "devices": (devices, "list audio input devices and host APIs"),
    "meter": (meter, "live loudness meter: sone, phon, dB SPL, LUFS (demo, WAV or device)"),
    "monitor": (monitor, "live pyqtgraph monitor: excitation, loudness, modulation "
                "spectrum, health (demo, WAV or device)"),
    "calibrate": (calibrate, "measure a calibrator tone and store spl_ref for the meter"),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rtamt", description="real-time streaming auditory models")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name, (mod, help_) in COMMANDS.items():
        mod.add_arguments(sub.add_parser(name, help=help_))
    args = parser.parse_args(argv)
    return COMMANDS[args.cmd][0].run(args)


if __name__ == "__main__":
    sys.exit(main())
