"""``rtamt`` command line: one subcommand per app module of :mod:`rtamt_apps`
(each exposes ``add_arguments(parser)`` and ``run(args)``).

One error style for every command:

* a usage error (an option's value refused by :mod:`rtamt_apps.args`, an unknown option,
  a :class:`~rtamt_apps.args.UsageError` found after parsing) prints one line,
  ``rtamt CMD: error: MESSAGE``, and exits with 2 (no usage text, no traceback);
* a ``ValueError`` / ``OSError`` / ``LookupError`` reaching the top (a missing file or
  device, a sample rate a model cannot run at, an input a model refuses:
  :class:`rtamt.RtamtInputError`) prints ``rtamt CMD: MESSAGE`` on one line and exits with
  2.  ``RTAMT_DEBUG=1`` re-raises it with its traceback;
* stdout closed by the reader (``rtamt meter ... | head -1``): the command ends quietly
  with exit status 141 (128 + SIGPIPE, what a shell reports for a program killed by
  SIGPIPE; ``set -o pipefail`` scripts see that the output was cut short);
* Ctrl-C outside an app's own handling: exit status 130, no traceback.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import calibrate, devices, features, meter, models, monitor, process, stream
from .args import UsageError

COMMANDS = {
    "process": (process, "stream a WAV file or the demo through a model, write .npz"),
    "models": (models, "list models with their outputs and parameters"),
    "stream": (stream, "run a model live (demo, WAV or input device) on the real-time runtime"),
    "devices": (devices, "list audio input devices and host APIs"),
    "meter": (meter, "live loudness meter: sone, phon, dB SPL, LUFS (demo, WAV or device)"),
    "monitor": (monitor, "live pyqtgraph monitor: excitation, loudness, modulation "
                "spectrum, health (demo, WAV or device)"),
    "calibrate": (calibrate, "measure a calibrator tone and store spl_ref for the meter"),
    "features": (features, "features of a corpus (WAV files, directories, lhotse manifests) "
                 "as a lhotse CutSet, resumable, on N processes or a Dask cluster"),
}

#: exit status of a usage error / of a run cut short by a closed stdout / by Ctrl-C
EXIT_USAGE, EXIT_PIPE, EXIT_INTERRUPT = 2, 141, 130


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, ``PROG: error: MESSAGE`` (exit 2)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _stdout_closed() -> int:
    # the Python docs' recipe: further writes (and the flush at exit) go to /dev/null
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass                           # stdout has no file descriptor (captured in-process)
    return EXIT_PIPE


def main(argv=None) -> int:
    parser = Parser(prog="rtamt", description="real-time streaming auditory models")
    sub = parser.add_subparsers(dest="cmd", required=True)
    parsers = {}
    for name, (mod, help_) in COMMANDS.items():
        parsers[name] = sub.add_parser(name, help=help_)
        mod.add_arguments(parsers[name])
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:                      # reported by the command's parser: "rtamt CMD: ..."
            parsers[args.cmd].error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as e:            # --help (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE if e.code else 0
    prog = f"rtamt {args.cmd}"
    try:
        rc = COMMANDS[args.cmd][0].run(args)
        sys.stdout.flush()
        return rc
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt:
        return EXIT_INTERRUPT
    except UsageError as e:
        print(f"{prog}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, OSError, LookupError) as e:
        if os.environ.get("RTAMT_DEBUG"):
            raise
        print(f"{prog}: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
