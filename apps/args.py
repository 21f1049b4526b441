"""Argument checks shared by the ``rtamt`` apps: argparse ``type=`` functions and the
checks that need more than one option.

Every ``type=`` function raises :class:`argparse.ArgumentTypeError`, so argparse reports
``rtamt stream: error: argument --block: must be >= 1, got 0`` and exits with 2 (the
``rtamt`` parser prints that one line, without the usage text; see :mod:`rtamt_apps.cli`).
A check made after parsing (e.g. ``--block`` against the stream's sample rate, known once
the input is opened) raises :class:`UsageError`, which the command line reports the same
way.

The limits keep a typo from exhausting the machine (``--block 100000000`` once asked for
24 GB): a processing or callback block holds at most :data:`BLOCK_SECONDS` of audio unless
``--force`` is given, and never more than :data:`MAX_FRAMES` frames.
"""
from __future__ import annotations

import argparse
import math
import os

__all__ = ["UsageError", "int_range", "float_range", "positive_float", "spl_ref_db",
           "window_size", "looks_like_path", "no_such_device", "check_block",
           "add_force_argument", "add_block_arguments",
           "MAX_FRAMES", "BLOCK_SECONDS", "SPL_REF_LIMITS", "FS_LIMITS", "FPS_LIMITS",
           "HISTORY_LIMITS", "SIZE_LIMITS", "AUDIO_EXTENSIONS"]

#: hard limit of a processing / callback block, frames (even with ``--force``)
MAX_FRAMES = 1 << 21
#: a block may hold at most this much audio without ``--force``, s
BLOCK_SECONDS = 1.0
#: accepted ``--spl-ref`` (dB SPL of a digital RMS of 1.0)
SPL_REF_LIMITS = (-50.0, 200.0)
#: accepted ``--fs``, Hz
FS_LIMITS = (1.0, 768000.0)
#: accepted monitor ``--fps``
FPS_LIMITS = (0.0, 240.0)
#: accepted monitor ``--history``, s
HISTORY_LIMITS = (0.0, 300.0)
#: accepted width and height of ``--size``, pixels
SIZE_LIMITS = (1, 8192)
#: file-name endings that make an ``--input`` a file name, never a device name
AUDIO_EXTENSIONS = (".wav", ".wave", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".m4a",
                    ".aif", ".aiff", ".aifc", ".au", ".snd", ".caf", ".w64", ".rf64", ".raw",
                    ".npy", ".npz")


class UsageError(ValueError):
    """A command-line value that parsing alone could not refuse (message names the option);
    ``rtamt`` prints ``rtamt CMD: error: MESSAGE`` and exits with 2."""


def _fmt(v) -> str:
    return format(v, "g") if isinstance(v, float) else str(v)


def int_range(lo: int | None = None, hi: int | None = None):
    """``type=`` for an integer in ``[lo, hi]`` (``None``: unbounded on that side)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if lo is not None and v < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {v}")
        if hi is not None and v > hi:
            raise argparse.ArgumentTypeError(f"must be <= {hi}, got {v}")
        return v

    parse.__name__ = "integer"
    return parse


def float_range(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
                hi_open: bool = False):
    """``type=`` for a finite float in the range ``lo .. hi`` (bounds included unless
    ``lo_open`` / ``hi_open``; ``None``: unbounded).  NaN and infinities are refused."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be finite, got {text}")
        if lo is not None and (v <= lo if lo_open else v < lo):
            raise argparse.ArgumentTypeError(f"must be {'>' if lo_open else '>='} {_fmt(lo)}, "
                                             f"got {_fmt(v)}")
        if hi is not None and (v >= hi if hi_open else v > hi):
            raise argparse.ArgumentTypeError(f"must be {'<' if hi_open else '<='} {_fmt(hi)}, "
                                             f"got {_fmt(v)}")
        return v

    parse.__name__ = "number"
    return parse


def positive_float(hi: float | None = None):
    """``type=`` for a finite float > 0 (and <= ``hi`` if given)."""
    return float_range(0.0, hi, lo_open=True)


#: ``--spl-ref``: finite, within :data:`SPL_REF_LIMITS`
spl_ref_db = float_range(*SPL_REF_LIMITS)


def window_size(text: str) -> tuple[int, int]:
    """``type=`` for ``WxH`` (pixels, each within :data:`SIZE_LIMITS`)."""
    parts = text.lower().split("x")
    try:
        w, h = (int(v) for v in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be WxH (e.g. 1280x800), got {text!r}") from None
    lo, hi = SIZE_LIMITS
    if not (lo <= w <= hi and lo <= h <= hi):
        raise argparse.ArgumentTypeError(
            f"width and height must be {lo} to {hi} pixels, got {text!r}")
    return w, h


def looks_like_path(inp: str) -> bool:
    """True when ``inp`` can only mean a file: it has a path separator or ends in an audio
    file extension (a device name has neither)."""
    s = str(inp)
    seps = {os.sep} | ({os.altsep} if os.altsep else set())
    return any(c in s for c in seps) or s.lower().endswith(AUDIO_EXTENSIONS)


def no_such_device(inp, hostapi: str | None, err: LookupError) -> LookupError:
    """The error for a device name or index that matches no input device: ``no such device:
    NAME``, the host API if one was asked for, and the list of devices that
    :func:`rtamt.runtime.stream.find_input_device`'s message ``err`` ends with."""
    have = str(err).partition("; ")[2]
    return LookupError(f"no such device: {inp}" + (f" (host API {hostapi})" if hostapi else "")
                       + (f"; {have}" if have else ""))


def check_block(option: str, frames: int, fs: float, force: bool = False) -> None:
    """Refuse ``frames`` (the value of ``option``) above :data:`BLOCK_SECONDS` of audio at
    ``fs`` unless ``force``, and above :data:`MAX_FRAMES` always (:class:`UsageError`)."""
    frames = int(frames)
    if frames > MAX_FRAMES:
        raise UsageError(f"argument {option}: must be <= {MAX_FRAMES}, got {frames}")
    limit = int(BLOCK_SECONDS * float(fs))
    if not force and frames > limit:
        raise UsageError(
            f"argument {option}: {frames} frames is more than {BLOCK_SECONDS:g} s of audio at "
            f"{float(fs):g} Hz (at most {limit}; --force to allow)")


def add_force_argument(p, more: str = "") -> None:
    """``--force``: allow blocks longer than :data:`BLOCK_SECONDS` (up to :data:`MAX_FRAMES`)
    (``more``: what else it allows in this app, appended to the help)."""
    p.add_argument("--force", action="store_true",
                   help=f"allow --block / --blocksize above {BLOCK_SECONDS:g} s of audio "
                        f"(at most {MAX_FRAMES} frames){more}")


def add_block_arguments(p, block: int = 512, blocksize: int = 256, *, blocksize_min: int = 1,
                        blocksize_help: str = "callback / source block size",
                        force_help: str = "") -> None:
    """The live apps' ``--block`` and ``--blocksize`` (frames, >= 1, ``--blocksize`` >=
    ``blocksize_min``) and ``--force`` (``force_help``: see :func:`add_force_argument`).
    The 1 s limit is checked once the input's rate is known (:func:`check_block`, called
    by :func:`rtamt_apps.inputs.open_input`)."""
    p.add_argument("--block", type=int_range(1, MAX_FRAMES), default=block,
                   help=f"processing block (frames; at most {BLOCK_SECONDS:g} s of audio "
                        "unless --force)")
    p.add_argument("--blocksize", type=int_range(blocksize_min, MAX_FRAMES), default=blocksize,
                   help=blocksize_help)
    add_force_argument(p, force_help)
