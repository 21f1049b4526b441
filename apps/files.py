"""Audio files in the apps: one verdict for every app, and the worker-count cap.

Every app that reads audio files (``process``, ``stream``, ``meter``, ``monitor``,
``loudness``, ``features``) opens them through :class:`rtamt.signals.AudioReader`, so a
file gets the same verdict in each:

* accepted, with the length reading gives (a WAV streamed through a pipe, whose header
  holds a placeholder size, and an MP3 without a Xing/Info tag included);
* refused as *truncated* (the header announces more frames than the file holds, or
  decoding fails part way), with the frames that could be read; ``--partial``
  (:func:`add_partial_argument`) processes those frames instead and says so in the output;
* refused as *unreadable* (not audio, a truncated header, no samples).

:func:`read_error` words a refusal for the command line (with the ``--partial`` hint where
it applies), :func:`partial_note` the note of a file processed with ``--partial``.

:func:`cap_jobs`: ``--jobs`` above the number of cores this process may run on
(:func:`usable_cores`) only adds start-up time and memory (``rtamt loudness --jobs 64`` on
2 cores took 30 times longer and 13.8 GB); it is capped there, with a one-line note on
stderr, unless ``--force``.
"""
from __future__ import annotations

import os
import sys

__all__ = ["add_partial_argument", "read_error", "partial_note", "usable_cores", "cap_jobs"]


def add_partial_argument(p) -> None:
    """``--partial`` (argparse): process what a truncated file holds."""
    p.add_argument("--partial", action="store_true",
                   help="a truncated or damaged file (its header announces more than it "
                        "holds, or decoding fails part way): process the frames that could "
                        "be read instead of refusing it (the output says so)")


def read_error(e, partial_option: bool = True, consequence: str | None = None) -> str:
    """The one-line message of an :class:`rtamt.signals.AudioFileError` for the command
    line: the reader's message, ``consequence`` (e.g. ``"nothing processed"``) if given,
    and, for a file that ends early and an app with ``--partial`` (``partial_option``), how
    to process what it holds."""
    msg = " ".join(str(e).split()) + (f"; {consequence}" if consequence else "")
    n = getattr(e, "frames_read", None)
    if partial_option and n:
        msg += f" (--partial processes the {n} frames read)"
    return msg


def partial_note(reader) -> str | None:
    """What a reader opened with ``partial`` left out of a truncated file (one line, for
    stderr and the output's metadata), or None for a complete file."""
    if getattr(reader, "truncated", None) is None:
        return None
    return f"{reader.truncated}; processed the {reader.frames} frames read (--partial)"


def usable_cores() -> int:
    """CPU cores this process may run on: its affinity mask where the system has one
    (``os.sched_getaffinity``: a container's or ``taskset``'s limit), else
    ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cap_jobs(prog: str, jobs: int, force: bool = False, option: str = "--jobs") -> int:
    """``jobs`` worker processes, at most :func:`usable_cores` unless ``force``; a capped
    value is said on stderr (one line, ``prog: ...``)."""
    cores = usable_cores()
    if jobs <= cores or force:
        return jobs
    print(f"{prog}: {option} {jobs} capped at {cores}, the number of usable cores (more "
          f"processes than cores only add start-up time and memory; --force to run {jobs})",
          file=sys.stderr, flush=True)
    return cores
