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
* a part of the installation a command needs is missing (``rtamt monitor`` without the
  ``rtamt[monitor]`` extra, ``rtamt devices`` without the PortAudio library:
  :class:`~rtamt_apps.optional.MissingComponent`): one line ``rtamt CMD: MESSAGE`` saying
  what to install, exit status 1 (not a usage error);
* a live input that stops delivering audio: exit status 3 (:mod:`rtamt_apps.inputs`);
* Ctrl-C outside an app's own handling: exit status 130, no traceback.

Only the module of the command given is imported (``rtamt --help`` and ``rtamt models``
load no numba, scipy or torch).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from .args import UsageError
from .modelopts import cli_message
from .optional import EXIT_MISSING, MissingComponent

#: command -> (module of rtamt_apps, one-line help)
COMMANDS = {
    "process": ("process", "stream a WAV file or the demo through a model, write .npz"),
    "models": ("models", "list models with their outputs and parameters"),
    "stream": ("stream", "run a model live (demo, WAV or input device) on the real-time "
               "runtime"),
    "devices": ("devices", "list audio input devices and host APIs"),
    "meter": ("meter", "live EBU R128 meter: LUFS, true peak, dB SPL; sone and phon with "
              "--model (demo, WAV or device)"),
    "monitor": ("monitor", "live pyqtgraph monitor: excitation, loudness, modulation "
                "spectrum, health (demo, WAV or device; needs the rtamt[monitor] extra)"),
    "calibrate": ("calibrate", "measure a calibrator tone and store spl_ref for the meter"),
    "loudness": ("loudness", "EBU R128 figures of audio files: integrated loudness, loudness "
                 "range, true peak (table, JSON or CSV)"),
    "features": ("features", "features of a corpus (WAV files, directories, lhotse "
                 "manifests) as a lhotse CutSet, resumable, on N processes or a Dask cluster"),
}


def command_module(name: str):
    """The app module of command ``name`` (imported on first use)."""
    return importlib.import_module(f"{__package__}.{COMMANDS[name][0]}")


def _command_in(argv) -> str | None:
    """The command named on the command line (the first word that is not an option), if
    it is one; the top-level parser has no option taking a value."""
    for a in argv:
        if not a.startswith("-"):
            return a if a in COMMANDS else None
    return None

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
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = Parser(prog="rtamt", description="real-time streaming auditory models")
    sub = parser.add_subparsers(dest="cmd", required=True)
    parsers = {name: sub.add_parser(name, help=help_) for name, (_, help_) in COMMANDS.items()}
    cmd = _command_in(argv)
    if cmd is not None:                # only that command's options (and imports)
        command_module(cmd).add_arguments(parsers[cmd])
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:                      # reported by the command's parser: "rtamt CMD: ..."
            parsers[args.cmd].error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as e:            # --help (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE if e.code else 0
    prog = f"rtamt {args.cmd}"
    try:
        rc = command_module(args.cmd).run(args)
        sys.stdout.flush()
        return rc
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt:
        return EXIT_INTERRUPT
    except UsageError as e:
        print(f"{prog}: error: {cli_message(e)}", file=sys.stderr)
        return EXIT_USAGE
    except MissingComponent as e:
        print(f"{prog}: {_one_line(e)}", file=sys.stderr)
        return EXIT_MISSING
    except (ValueError, OSError, LookupError) as e:
        if os.environ.get("RTAMT_DEBUG"):
            raise
        print(f"{prog}: {cli_message(e)}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
