"""Model options of the apps that run an auditory model on a file or stream (``process``,
``stream``, ``features``): ``--fhigh``, and model errors in the command line's words.

The models' filterbanks reach up to ``fhigh`` (8000 Hz by default), which must stay below
the Nyquist frequency: an input at 12 kHz or 8 kHz (telephone speech) is refused by
the library with "...; pass fhigh=5400 or lower".  ``--fhigh HZ`` passes that keyword, and
:func:`cli_message` rewrites the library's keyword hints (``pass fhigh=5400``) into the
option that exists (``give --fhigh 5400``), so no message names an option the command line
does not have.
"""
from __future__ import annotations

import inspect
import re

from .args import UsageError, positive_float

__all__ = ["add_fhigh_argument", "model_kwargs", "cli_message", "CLI_OPTIONS"]

#: library keyword -> the command-line option that sets it
CLI_OPTIONS = {"fhigh": "--fhigh", "frame_shift": "--frame-shift"}


def add_fhigh_argument(p) -> None:
    """``--fhigh HZ`` (argparse)."""
    p.add_argument("--fhigh", type=positive_float(), default=None, metavar="HZ",
                   help="highest auditory filter centre frequency, Hz, of the models with a "
                        "gammatone or DRNL filterbank (dau1997, king2019, osses2021, "
                        "paulick2024; default: the model's own, 8000); it must lie below the "
                        "Nyquist frequency (e.g. --fhigh 3600 for 8 kHz input)")


def model_kwargs(args, model_cls) -> dict:
    """The model keyword arguments given on the command line (``--fhigh``); a
    :class:`UsageError` when ``model_cls`` does not take one."""
    kw = {}
    if getattr(args, "fhigh", None) is not None:
        if "fhigh" not in inspect.signature(model_cls.__init__).parameters:
            raise UsageError(f"argument --fhigh: {args.model} has no fhigh (its frequency "
                             "range is fixed by the model)")
        kw["fhigh"] = args.fhigh
    return kw


_HINT = re.compile(r"\b(pass|give|use|set) ([a-z_]+)=([^\s,;)]+)")
_NAMED = re.compile(r"(?<![-\w])(" + "|".join(CLI_OPTIONS) + r")(?= [0-9])")


def cli_message(e) -> str:
    """The one-line message of a library error ``e`` (or string) with its keyword hints
    (``pass fhigh=5400``) rewritten as the command-line option that sets the keyword
    (``give --fhigh 5400``, :data:`CLI_OPTIONS`), and a keyword followed by its value
    (``frame_shift 0.013 s``) named by its option (``--frame-shift 0.013 s``)."""
    msg = " ".join(str(e).split())

    def option(m):
        opt = CLI_OPTIONS.get(m.group(2))
        return m.group(0) if opt is None else f"give {opt} {m.group(3)}"

    msg = _HINT.sub(option, msg)
    return _NAMED.sub(lambda m: CLI_OPTIONS[m.group(1)], msg)
