"""``rtamt loudness FILE|DIR ...``: EBU R128 figures of audio files, one row per file.

For every file (:class:`rtamt.loudness.bs1770.LoudnessMeter`, histogram mode by default:
its memory does not depend on the file's length): the integrated loudness ``I`` (LUFS,
ITU-R BS.1770-4) with a reason when it is empty (``too short``: less than one 400 ms
gating block; ``below the absolute gate``: digital silence, or everything at or below
-70 LUFS), the loudness range (LU, EBU Tech 3342, from short-term values every
``--lra-hop`` steps of 100 ms; 10 reproduces libebur128) with its low and high ends (the
10th and 95th percentiles, LUFS), the maximum momentary and short-term loudness (LUFS),
the maximum true peak (dB TP, BS.1770-4 Annex 2) over the channels and per channel, the
sample peak (dBFS), the gates (absolute -70 LUFS; the relative gates of I and of the LRA,
LUFS) and the duration.

A directory stands for the audio files below it, walked recursively, in sorted order:
the formats libsndfile reads (``.wav .flac .ogg .oga .opus .aif .aiff .aifc .au .snd
.caf .w64 .rf64 .mp3``) and media containers it does not (``.m4a .mp4 .mov .mxf .mkv
...``, :data:`MEDIA_SUFFIXES`), which are decoded through FFmpeg's libraries
by PyAV (the ``rtamt[media]`` extra, :class:`rtamt.media.MediaReader`), or, without it,
listed as skipped with the reason.  A file named on the command line with another
suffix that libsndfile cannot open is tried with PyAV too.

Files are read block by block, never whole, and decoded once: the meter needs no length
up front, so the length of a coded file is what reading it gives, and whether it is
truncated is known at its end.  A truncated file is failed with the frames that could be
read, unless ``--partial``: then those frames are measured, ``duration_s`` is theirs, and
the record's ``truncated`` and a line on stderr say what was missing
(:mod:`rtamt_apps.files`).  Channels are weighted by their layout after BS.1770
(:mod:`rtamt.loudness.layouts`: 1.41 beside the listener, LFE left out): ``--layout NAME``,
``--channels NAME,...`` or ``--weights G,...`` for every file, else the file's own: its
WAVE channel mask (WAV, RF64, W64) or FLAC channel-mask tag, else the order its format
defines (FLAC, Ogg Vorbis/Opus; a media container: FFmpeg's channel layout of the stream),
1 = mono, 2 = stereo, and for a WAV without a mask 5 = L R C Ls Rs, 6 = L R C LFE Ls Rs.
A file whose layout is not known that way (an 8-channel WAV without a mask, ...) is failed
with the layouts to choose from (:mod:`rtamt_apps.layout_options`); a mask that disagrees
with the channel count too.  The record's ``layout``, ``layout_from`` and
``channel_weights`` say which layout was used, why, and its weights.

Totals and compliance: ``--total`` adds a row over all the measured files together (a
programme or album loudness: every 400 ms gating block and 3 s short-term value of every
file gated together, their histograms merged, never their LUFS averaged:
:meth:`rtamt.loudness.bs1770.LoudnessStatistics.merge`; the maximum peaks and
loudness; the summed duration).  ``--target LUFS`` gives each row the offset to the
target (``target - I``, LU) and the linear gain that applies it; ``--max-true-peak dBTP``
a true-peak limit; with either, ``compliant`` says whether the row meets them: ``I``
within ``--tolerance`` LU of the target (default :data:`DEFAULT_TOLERANCE_LU`, EBU R 128
v4.0 (2020): +-1.0 LU in production; +-0.2 LU for quality control, +-0.5 LU in R 128
v3.0 (2014)) and the true peak at or below the limit.  A row without an integrated
loudness is not compliant with a target.

Output (stdout): a table (default), ``--json`` (JSON Lines: one object per file with the
keys of :data:`FIELDS`; a file that could not be measured has ``file, status, error``),
or ``--csv`` (a header line, then one row per file; the per-channel true peaks and the
channel weights joined by ``;``).  ``status`` is ``measured``, ``failed`` (with
``error``), ``skipped`` (with ``error``: why) or ``total`` (the ``--total`` row, whose
``file`` is empty / ``null`` and whose JSON has ``files``, the number of files in it).
Values that are not defined are empty / ``null``.  ``--series FILE`` writes momentary,
short-term and running integrated loudness every 100 ms of every file (``.csv``: a header
line; ``.jsonl`` / ``.ndjson``: JSON Lines), streamed to disk in bounded memory under a
temporary name and renamed into place when the run ends (no half file under ``FILE``; an
interrupted run, or one that measured no file, leaves an older ``FILE`` as it was).

A path that does not exist, a directory that cannot be read or holds no audio file, and
a file that cannot be read (not audio, truncated, damaged, a sample rate the meter cannot
run at) are failed rows, with a one-line reason on stderr (``rtamt loudness: FILE:
REASON``); the other files are measured.  Exit status: 0 when every file was measured
(and, with ``--target`` / ``--max-true-peak``, every row is compliant); 1 when at least
one path failed or was skipped; :data:`EXIT_NONCOMPLIANT` (3) when every file was
measured but at least one row (the total included) is not compliant; 2 for a usage error
(an option's value).  A progress bar (tqdm, stderr, on a terminal) shows the files done
when there are at least :data:`PROGRESS_MIN_FILES`; the table's rows and the messages
are printed through it (``tqdm.write``), so no row lands on the bar's line.  ``--jobs N``
measures N files at a time in worker processes (the output keeps the files' order); N is
capped at the number of usable cores, with a note on stderr, unless ``--force``
(:func:`rtamt_apps.files.cap_jobs`).  The workers start once,
as copies of this process made after it has loaded the meter (:func:`_results`), and each
measures file after file: no start-up per file or per worker, and a worker's own memory is
the pages it writes (about 10-15 MB).

Start-up: the command imports the meter, the reader and numba only (not the models, the
scheduler, scipy.signal or torch; ``import rtamt`` imports its parts on first use), and
numba loads the meter's kernels from its cache on their first call (docs/startup.md,
issue 39).  Blocks are decoded into one time-major buffer whose transpose the meter takes
as it is (:meth:`rtamt.signals.AudioReader.read_tm`).
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import sys
from pathlib import Path

from .args import UsageError, float_range, int_range
from .files import add_partial_argument, cap_jobs, partial_note, read_error, usable_cores
from .layout_options import add_layout_arguments

#: file name endings taken from a directory (formats libsndfile reads)
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".aif", ".aiff", ".aifc", ".au",
                  ".snd", ".caf", ".w64", ".rf64", ".mp3")
#: media containers (and coded streams) libsndfile does not read, taken from a directory
#: and decoded through PyAV (:class:`rtamt.media.MediaReader`, the ``rtamt[media]`` extra)
MEDIA_SUFFIXES = (".m4a", ".m4b", ".mp4", ".m4v", ".mov", ".3gp", ".mxf", ".mkv", ".mka",
                  ".webm", ".ts", ".m2ts", ".mts", ".aac", ".ac3", ".eac3", ".ec3", ".dts",
                  ".wma", ".wmv", ".asf", ".avi", ".mpg", ".mpeg", ".mp2", ".vob", ".amr",
                  ".ape", ".wv", ".tta", ".dv")
#: what to install for them
PYAV_HINT = "pip install 'rtamt[media]' (PyAV)"
#: exit status when at least one file could not be measured (or was skipped)
EXIT_FAILED = 1
#: exit status when every file was measured and at least one row is not compliant with
#: ``--target`` / ``--max-true-peak``
EXIT_NONCOMPLIANT = 3
#: ``--tolerance`` default, LU: EBU R 128 v4.0 (2020), the production tolerance
DEFAULT_TOLERANCE_LU = 1.0
#: a progress bar from this many files on (on a terminal)
PROGRESS_MIN_FILES = 5
#: the keys of a measured file's record (JSON) and the CSV columns, in order
FIELDS = ("file", "status", "integrated_lufs", "integrated_reason", "lra_lu", "lra_low_lufs",
          "lra_high_lufs", "max_momentary_lufs", "max_short_term_lufs", "true_peak_dbtp",
          "true_peak_channels_dbtp", "sample_peak_dbfs", "absolute_gate_lufs",
          "relative_gate_lufs", "lra_gate_lufs", "duration_s", "fs", "channels", "layout",
          "layout_from", "channel_weights", "target_offset_lu", "target_gain", "compliant",
          "truncated", "error")
#: ``--series`` columns (CSV) / keys (JSON Lines)
SERIES_FIELDS = ("file", "t_s", "momentary_lufs", "short_term_lufs", "integrated_lufs")
#: ``--series`` formats by the file's suffix
SERIES_FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}


def add_arguments(p):
    p.add_argument("paths", nargs="+", metavar="FILE|DIR",
                   help="audio files, or directories searched recursively for them")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="JSON Lines: one object per file")
    out.add_argument("--csv", action="store_true", help="CSV with a header line")
    add_layout_arguments(p)          # --layout / --channels / --weights -> args.layout
    p.add_argument("--block", type=int_range(1024, 1 << 22), default=65536,
                   help="frames read per block (default 65536)")
    p.add_argument("--mode", choices=("histogram", "exact"), default="histogram",
                   help="gated statistics from 0.01 LU histograms (default) or every value")
    p.add_argument("--lra-hop", type=int_range(1, 10), default=1, metavar="STEPS",
                   help="loudness range from a short-term value every STEPS x 100 ms "
                        "(default 1, EBU Tech 3342's 10 Hz; 10: libebur128's 1 s, as "
                        "loudness-scanner and other libebur128-based tools give it)")
    p.add_argument("--true-peak", dest="truepeak", choices=("sinc", "bs1770"), default="sinc",
                   help="true-peak interpolator: sinc (default: windowed sinc to >= 768 kHz, "
                        "within 0.04 dB of a tone's peak up to 0.4 fs) or bs1770 (BS.1770-4 "
                        "Annex 2's 4x example filter, as libebur128 and ffmpeg; up to 0.7 dB "
                        "low near 0.4 fs)")
    p.add_argument("--total", action="store_true",
                   help="add a row for all measured files together (programme / album "
                        "loudness: their gating blocks gated together)")
    p.add_argument("--target", type=float_range(-70.0, 0.0), default=None, metavar="LUFS",
                   help="target loudness (e.g. -23 EBU R 128, -24 ATSC A/85, -16): each "
                        "row's offset (LU) and gain to it, and compliance")
    p.add_argument("--tolerance", type=float_range(0.0, 10.0), default=None, metavar="LU",
                   help=f"--target tolerance (default {DEFAULT_TOLERANCE_LU:g}: EBU R 128 "
                        "production; 0.2 for its quality control)")
    p.add_argument("--max-true-peak", type=float_range(-70.0, 20.0), default=None,
                   metavar="DBTP", help="true-peak limit of compliance (e.g. -1, EBU "
                                        "R 128's maximum permitted true-peak level)")
    p.add_argument("--series", default=None, metavar="FILE",
                   help="write M, S and running I every 100 ms to FILE (.csv, or .jsonl / "
                        ".ndjson for JSON Lines), replaced atomically at the end")
    p.add_argument("--jobs", type=int_range(1, 256), default=1,
                   help="files measured in parallel by this many processes (default 1; at "
                        "most the number of usable cores unless --force); the output keeps "
                        "the files' order")
    p.add_argument("--force", action="store_true",
                   help="run --jobs processes even when that is more than the usable cores")
    add_partial_argument(p)


# ---------------------------------------------------------------- the paths
def _scan(d: Path, raw: str) -> list[tuple[Path, str | None, str | None]]:
    """The audio and media files below directory ``d`` (sorted), as :func:`_entries`
    rows; a sub-directory that cannot be read is a failed row, and so is ``d`` when it
    holds no audio file."""
    found, problems = [], []

    def unreadable(e: OSError) -> None:
        where = e.filename or d
        problems.append((Path(where), "failed", f"{where}: cannot read the directory "
                                                 f"({e.strerror or type(e).__name__})"))

    for top, dirs, names in os.walk(d, onerror=unreadable):
        dirs.sort()
        for n in names:
            f = Path(top) / n
            if f.suffix.lower() in AUDIO_SUFFIXES + MEDIA_SUFFIXES and f.is_file():
                found.append(f)
    if not found and not problems:
        return [(d, "failed", f"{raw}: a directory without audio files (none named "
                              f"{', '.join(AUDIO_SUFFIXES)} or as a media container)")]
    return sorted([(f, None, None) for f in found] + problems, key=lambda r: str(r[0]))


def _entries(paths) -> list[tuple[Path, str | None, str | None]]:
    """``(path, status, reason)`` for every file named and found below the directories
    named: ``status`` None for a file to measure, ``'failed'`` (no such path, an
    unreadable directory, a directory without audio files) or ``'skipped'`` (a media
    container without PyAV) with the reason (one line naming the path)."""
    out = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out.extend(_scan(p, raw))
        elif p.exists():
            out.append((p, None, None))
        else:
            out.append((p, "failed", f"{raw}: no such file or directory"))
    media = [i for i, (f, st, _) in enumerate(out) if st is None and _is_media(f)]
    if media and not have_pyav():
        for i in media:
            f = out[i][0]
            out[i] = (f, "skipped", f"{f}: a {f.suffix.lower()} file, which libsndfile "
                                    f"does not read; to measure it: {PYAV_HINT}")
    return out


def _is_media(f: Path) -> bool:
    return f.suffix.lower() in MEDIA_SUFFIXES


def have_pyav() -> bool:
    """Whether PyAV (the ``rtamt[media]`` extra) is installed (found, not imported)."""
    import importlib.util

    return importlib.util.find_spec("av") is not None


# ---------------------------------------------------------------- measuring
def _value(v, digits=2):
    return None if v is None or not math.isfinite(v) else round(float(v), digits)


def _open(path, partial: bool):
    """The file opened for block-wise reading: libsndfile (:class:`rtamt.signals.
    AudioReader`), or PyAV (:class:`rtamt.media.MediaReader`) for a media container, or
    for a file of another name that libsndfile cannot open, when PyAV is installed (a
    file named as a libsndfile format keeps libsndfile's verdict, the one every app
    gives it)."""
    from rtamt.media import MediaReader
    from rtamt.signals import AudioFileError, AudioReader

    if _is_media(Path(path)):
        return MediaReader(path, partial=partial)
    try:
        return AudioReader(path, partial=partial, count=False)
    except AudioFileError as e:
        if (e.frames_read is not None or Path(path).suffix.lower() in AUDIO_SUFFIXES
                or not os.path.isfile(path) or not have_pyav()):
            raise
        try:
            return MediaReader(path, partial=partial)
        except AudioFileError:
            raise e from None


def _figures(s, true_peak, sample_peak) -> dict:
    """The report's figures of a meter or a :class:`rtamt.loudness.bs1770.
    LoudnessStatistics` ``s`` (rounded to 0.01; ``None`` where not defined)."""
    from rtamt.loudness.gating import ABSOLUTE_GATE_LUFS

    return {"integrated_lufs": _value(s.integrated), "integrated_reason": s.integrated_reason,
            "lra_lu": _value(s.loudness_range), "lra_low_lufs": _value(s.lra_low),
            "lra_high_lufs": _value(s.lra_high), "max_momentary_lufs": _value(s.max_momentary),
            "max_short_term_lufs": _value(s.max_short_term),
            "true_peak_dbtp": _value(true_peak), "sample_peak_dbfs": _value(sample_peak),
            "absolute_gate_lufs": ABSOLUTE_GATE_LUFS,
            "relative_gate_lufs": _value(s.relative_gate), "lra_gate_lufs": _value(s.lra_gate)}


def _compliance(integrated, true_peak, target=None, tolerance=None, max_true_peak=None):
    """``target_offset_lu`` (``target - I``), ``target_gain`` (linear, ``10^(offset/20)``)
    and ``compliant`` (``I`` within ``tolerance`` LU of ``target`` and ``true_peak`` at
    or below ``max_true_peak``, each when given; ``None`` without either) of unrounded
    figures."""
    tol = DEFAULT_TOLERANCE_LU if tolerance is None else tolerance
    rec = {"target_offset_lu": None, "target_gain": None, "compliant": None}
    if target is None and max_true_peak is None:
        return rec
    ok = True
    if target is not None:
        if integrated is None or not math.isfinite(integrated):
            ok = False
        else:
            off = target - integrated
            rec.update(target_offset_lu=round(off, 2), target_gain=round(10 ** (off / 20), 4))
            ok = abs(off) <= tol + 1e-9
    if max_true_peak is not None:
        ok = ok and true_peak <= max_true_peak
    rec["compliant"] = ok
    return rec


class _SeriesRows:
    """Rows of ``--series`` for one file, appended to ``path`` block by block."""

    def __init__(self, path, fmt: str, name: str):
        self.f = open(path, "w", encoding="utf-8", newline="")
        self.fmt, self.name = fmt, name

    def add(self, r) -> None:
        """The steps of one :class:`rtamt.loudness.bs1770.LoudnessResult` (computed with
        ``step_integrated=True``)."""
        rows = zip(r.step_time.tolist(), r.step_momentary.tolist(),
                   r.step_short_term.tolist(), r.step_integrated.tolist())
        if self.fmt == "csv":
            self.f.writelines(_csv_row([self.name, round(t, 6), *(
                "" if v is None else v for v in map(_value, (m, s, i)))]) + "\n"
                for t, m, s, i in rows)
        else:
            self.f.writelines(json.dumps(dict(zip(SERIES_FIELDS, (
                self.name, round(t, 6), _value(m), _value(s), _value(i))))) + "\n"
                for t, m, s, i in rows)

    def close(self) -> None:
        self.f.close()


def _blocks(r, block: int, ahead: bool):
    """The blocks of reader ``r`` as ``(channels, n)`` arrays, to its end.  libsndfile's
    reader decodes into time-major buffers whose transposes the meter takes uncopied (a
    media container's gives a new block each time); with ``ahead``, into two buffers in
    turn, the next block decoded on a thread of its own while the caller measures this one
    (libsndfile releases the GIL), so a block must be used before the next is asked for."""
    import numpy as np

    tm = getattr(r, "read_tm", None)
    more = lambda: r.frames is None or r.pos < r.frames     # noqa: E731 (None: to its end)
    if tm is None:
        while more():
            x = r.read(block)
            if x.shape[-1] == 0:
                return
            yield x
        return
    n = min(block, r.frames or block)
    bufs = [np.empty((n, r.channels)) for _ in range(1 + ahead)]
    if not ahead:
        while more():
            x = tm(n, out=bufs[0])
            if x.shape[0] == 0:
                return
            yield x.T
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="rtamt-read") as pool:
        i, nxt = 0, pool.submit(tm, n, out=bufs[0]) if more() else None
        while nxt is not None:
            x = nxt.result()
            if x.shape[0] == 0:
                return
            i ^= 1
            nxt = pool.submit(tm, n, out=bufs[i]) if more() else None
            yield x.T


def measure(path, layout=None, block=65536, mode="histogram", partial=False, *, lra_hop=1,
            target=None, tolerance=None, max_true_peak=None, series=None,
            series_format="csv", statistics=False, truepeak="sinc", threads=1) -> dict:
    """EBU R128 figures of one file: a dict of :data:`FIELDS` without ``error``, plus
    ``statistics`` (a :class:`rtamt.loudness.bs1770.LoudnessStatistics`, to merge into a
    total) when asked.  ``series``: a path to write the ``--series`` rows of the file to
    (``series_format`` ``'csv'`` or ``'jsonl'``, without a header).  Raises
    ``ValueError`` / ``OSError`` for a file that cannot be measured
    (:class:`rtamt.signals.AudioFileError` for a truncated one unless ``partial``: then
    ``truncated`` says what was missing; a ``LayoutError`` for a layout that is not known
    or does not fit).  ``layout``: the ``--layout`` / ``--channels`` / ``--weights`` value
    (:mod:`rtamt_apps.layout_options`), None for the file's own.  ``truepeak``: the
    meter's true-peak interpolator (``'sinc'`` or ``'bs1770'``).  ``threads=2``: the next
    block is decoded and each block's true peak measured on threads of their own beside the
    K-weighting and gating (one file on a machine with a core to spare; the same figures)."""
    from rtamt.loudness.bs1770 import LoudnessMeter

    from .layout_options import choose

    rows = None
    with _open(path, partial) as r:
        lay = choose(r.channels, layout, r)      # LayoutError (ValueError) with the choices
        meter = LoudnessMeter(fs=r.fs, channels=r.channels, mode=mode, lra_hop=lra_hop,
                              truepeak=truepeak, threads=threads, **lay.meter_kwargs())
        try:
            if series is not None:
                rows = _SeriesRows(series, series_format, str(path))
            for x in _blocks(r, block, threads > 1):
                res = meter(x, step_integrated=rows is not None)
                if rows is not None:
                    rows.add(res)
        finally:
            if rows is not None:
                rows.close()
        fs, channels, frames = r.fs, r.channels, r.frames
    rec = {"file": str(path), "status": "measured",
           **_figures(meter, meter.true_peak, meter.sample_peak),
           "true_peak_channels_dbtp": [_value(v) for v in meter.true_peak_channels],
           "duration_s": round(frames / fs, 3), "fs": fs, "channels": channels,
           "layout": lay.name, "layout_from": lay.origin,
           "channel_weights": list(lay.weights),
           **_compliance(meter.integrated, meter.true_peak, target, tolerance, max_true_peak),
           "truncated": partial_note(r)}
    rec = {k: rec[k] for k in FIELDS if k in rec}
    if statistics:
        rec["statistics"] = meter.statistics()
    return rec


def _measure_or_error(job) -> dict:
    """:func:`measure` of ``job = (path, keyword arguments)``, or ``{'file', 'status',
    'error'}`` (one line) for a file that cannot be measured; runs in a worker process
    too."""
    f, kw = job
    try:
        return measure(f, **kw)
    except (ValueError, OSError, RuntimeError) as e:
        err = read_error(e) or type(e).__name__
        return {"file": str(f), "status": "failed",
                "error": err if str(f) in err else f"{f}: {err}"}


def _warm_meter(mode: str, truepeak: str = "sinc") -> None:
    """Import the reader (soundfile, libsndfile) and load the meter's kernels for ``mode``
    and ``truepeak`` (numba: from its disk cache, or compiled on a first run): one 0.1 s
    stereo block of noise (its crests reach the true peak's refinement) and
    the gating statistics (:meth:`~rtamt.loudness.bs1770.LoudnessMeter.warm_kernels`), with
    the argument types :func:`measure` passes at every sample rate and channel count."""
    import numpy as np
    import soundfile  # noqa: F401  (what every worker opens files with)

    from rtamt.loudness.bs1770 import LoudnessMeter

    m = LoudnessMeter(fs=48000.0, channels=2, mode=mode, truepeak=truepeak)
    m(np.random.default_rng(0).standard_normal((4800, 2)).T * 0.1)
    m.warm_kernels()


def _pool_context():
    """The multiprocessing context of the ``--jobs`` workers: ``fork`` on Linux, so that a
    worker starts as a copy of this process, its imports and loaded kernels included
    (nothing to import or load per worker; the pages stay shared until written), else the
    platform's default (``spawn``: each worker imports and loads once, in
    :func:`_warm_meter`)."""
    import multiprocessing

    if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _results(jobs, n_jobs: int, mode: str = "histogram", truepeak: str = "sinc"):
    """An iterator over the results of ``jobs`` in their order (``n_jobs`` processes for
    more than one; ``mode`` and ``truepeak``: the meter's, for the workers' warm-up).

    With processes, this process first imports and loads what the meter needs
    (:func:`_warm_meter`), then the pool starts and every job is queued, before the
    iterator is returned: workers are forked (:func:`_pool_context`) while this process
    has no other thread (the progress bar's monitor starts later), paying no start-up of
    their own, and each worker measures file after file.  The pool is shut down when the
    iterator ends or is closed."""
    if n_jobs == 1 or len(jobs) < 2:
        return (_measure_or_error(j) for j in jobs)
    from concurrent.futures import ProcessPoolExecutor

    ctx = _pool_context()
    if ctx.get_start_method() == "fork":
        _warm_meter(mode, truepeak)
        sys.stdout.flush()           # a forked worker must not print this process's buffer
        sys.stderr.flush()
    ex = ProcessPoolExecutor(max_workers=min(n_jobs, len(jobs)), mp_context=ctx,
                             initializer=_warm_meter, initargs=(mode, truepeak))
    try:
        pending = ex.map(_measure_or_error, jobs)        # queues every job now
    except BaseException:
        ex.shutdown(wait=False, cancel_futures=True)
        raise

    def results():
        try:
            yield from pending
        finally:
            ex.shutdown(wait=True, cancel_futures=True)
    return results()


# ---------------------------------------------------------------- --series
class _Series:
    """The ``--series`` file: a header, then each measured file's rows (written by
    :func:`measure` to a part file beside it, appended in the files' order), all under a
    temporary name (:class:`rtamt.io.atomic.AtomicFile`) renamed into place by
    :meth:`commit`; :meth:`discard` leaves nothing behind."""

    def __init__(self, path: str):
        from rtamt.io.atomic import AtomicFile

        self.fmt = SERIES_FORMATS[Path(path).suffix.lower()]
        self.out = AtomicFile(path)
        if self.fmt == "csv":
            self.out.write(_csv_row(SERIES_FIELDS) + "\n")

    def part(self, i: int) -> str:
        return f"{self.out.tmp}.{i}"

    def add(self, i: int, keep: bool) -> None:
        """Append part ``i`` (a measured file's rows; ``keep`` False: a failed file's, which
        are dropped) and remove it."""
        import shutil

        p = self.part(i)
        if keep:
            with open(p, encoding="utf-8", newline="") as f:
                shutil.copyfileobj(f, self.out.file, 1 << 20)
        with contextlib.suppress(FileNotFoundError):    # a file that failed when opened
            os.unlink(p)

    def commit(self) -> None:
        self.out.commit()

    def discard(self, parts: int) -> None:
        self.out.discard()
        for i in range(parts):
            with contextlib.suppress(OSError):
                os.unlink(self.part(i))


def _check_series(path: str | None) -> None:
    """``--series``: a known suffix and an existing directory (a usage error before
    anything is measured)."""
    if path is None:
        return
    p = Path(path)
    if p.suffix.lower() not in SERIES_FORMATS:
        raise UsageError(f"argument --series: {path}: the suffix must be one of "
                         f"{', '.join(SERIES_FORMATS)} (CSV or JSON Lines)")
    if p.is_dir():
        raise UsageError(f"argument --series: {path} is a directory")
    if not p.resolve().parent.is_dir():
        raise UsageError(f"argument --series: {p.parent}: no such directory")


# ---------------------------------------------------------------- output
def _progress(n: int):
    if n < PROGRESS_MIN_FILES or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=n, unit="file", desc="rtamt loudness", file=sys.stderr, leave=False)


def _cell(v, width, fmt):
    return f"{'-':>{width}}" if v is None else format(v, fmt).rjust(width)


def _emit(bar, text: str, file=None) -> None:
    """Print one line (stdout, or ``file``); through the progress bar when there is one,
    which clears the bar, prints, and draws it again below (no row on the bar's line)."""
    file = sys.stdout if file is None else file
    if bar is None:
        print(text, file=file, flush=True)
    else:
        bar.write(text, file=file)
        file.flush()


def _csv_row(values) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(values)
    return buf.getvalue()


#: the table's columns: (header, key, width, format)
_TABLE = (("I LUFS", "integrated_lufs", 8, ".1f"), ("LRA LU", "lra_lu", 7, ".1f"),
          ("LRA lo", "lra_low_lufs", 7, ".1f"), ("LRA hi", "lra_high_lufs", 7, ".1f"),
          ("M max", "max_momentary_lufs", 7, ".1f"), ("S max", "max_short_term_lufs", 7, ".1f"),
          ("TP dBTP", "true_peak_dbtp", 8, ".1f"), ("SP dBFS", "sample_peak_dbfs", 8, ".1f"),
          ("abs gate", "absolute_gate_lufs", 8, ".1f"),
          ("rel gate", "relative_gate_lufs", 8, ".1f"),
          ("LRA gate", "lra_gate_lufs", 8, ".1f"), ("s", "duration_s", 9, ".1f"))
_TARGET = (("offset", "target_offset_lu", 7, "+.1f"), ("gain", "target_gain", 7, ".3f"),
           ("ok", "compliant", 4, ""))
_TP_CH = 14


def _table_header(judged: bool) -> str:
    cols = _TABLE + (_TARGET if judged else ())
    return " ".join(h.rjust(w) for h, _, w, _ in cols) + f"  {'TP/ch dBTP':<{_TP_CH}}  file"


def _table_row(rec: dict, judged: bool) -> str:
    name = rec["file"] if rec["status"] != "total" else f"total ({rec['files']} files)"
    if rec["status"] in ("failed", "skipped"):
        cols = [rec["status"].rjust(_TABLE[0][2])] + [
            "".rjust(w) for _, _, w, _ in (_TABLE + (_TARGET if judged else ()))[1:]]
        why = rec["error"]
        why = why[len(name) + 2:] if why.startswith(f"{name}: ") else why
        return " ".join(cols) + f"  {'':<{_TP_CH}}  {name}  ({why})"
    cols = [_cell(rec[k], w, f) for _, k, w, f in _TABLE]
    if judged:
        cols += [_cell(rec[k], w, f) for _, k, w, f in _TARGET[:2]]
        ok = rec["compliant"]
        cols.append(("-" if ok is None else "yes" if ok else "NO").rjust(_TARGET[2][2]))
    tpc = ",".join("-" if v is None else f"{v:.1f}"
                   for v in rec.get("true_peak_channels_dbtp") or ())
    why = f"  (I: {rec['integrated_reason']})" if rec.get("integrated_reason") else ""
    return " ".join(cols) + f"  {tpc:<{_TP_CH}}  {name}{why}"


def _csv_record(rec: dict) -> str:
    def cell(k):
        v = rec.get(k)
        if k in ("true_peak_channels_dbtp", "channel_weights") and v is not None:
            return ";".join("" if c is None else str(c) for c in v)
        return "" if v is None else v
    return _csv_row([cell(k) for k in FIELDS])


def _total(stats, n: int, opts: dict) -> dict:
    """The ``--total`` record of the merged statistics of ``n`` files."""
    rec = {"file": None, "status": "total", "files": n}
    if stats is not None:
        rec.update(_figures(stats, stats.true_peak_dbtp, stats.sample_peak_dbfs),
                   duration_s=round(stats.seconds, 3),
                   **_compliance(stats.integrated, stats.true_peak_dbtp,
                                 opts.get("target"), opts.get("tolerance"),
                                 opts.get("max_true_peak")))
    return {**{k: rec.get(k) for k in FIELDS}, "files": n}


# ---------------------------------------------------------------- run
def _options(args) -> dict:
    """The keyword arguments of :func:`measure` common to every file."""
    if args.tolerance is not None and args.target is None:
        raise UsageError("argument --tolerance: needs --target")
    _check_series(args.series)
    return {"layout": args.layout, "block": args.block, "mode": args.mode,
            "partial": args.partial, "lra_hop": args.lra_hop, "truepeak": args.truepeak,
            "target": args.target,
            "tolerance": args.tolerance, "max_true_peak": args.max_true_peak,
            "statistics": args.total}


def run(args) -> int:
    opts = _options(args)
    entries = _entries(args.paths)
    n_jobs = cap_jobs("rtamt loudness", args.jobs, args.force)
    judged = args.target is not None or args.max_true_peak is not None
    todo = [f for f, st, _ in entries if st is None]
    # files measured one at a time use a second core for decoding and the true peak
    one = n_jobs == 1 or len(todo) < 2
    opts["threads"] = 2 if one and usable_cores() > 1 else 1
    old_term = _stop_on_sigterm() if args.series is not None else None
    series = bar = results = None
    try:
        if args.series is not None:
            series = _Series(args.series)
            opts["series_format"] = series.fmt
        jobs = [(f, {**opts, **({"series": series.part(i)} if series else {})})
                for i, f in enumerate(todo)]
        # workers start before the bar's thread
        results = _results(jobs, n_jobs, args.mode, args.truepeak)
        bar = _progress(len(entries))
        counts = _rows(entries, results, series, bar, args, judged, opts)
        if series is not None and counts["measured"]:
            series.commit()
            series = None
        elif series is not None:       # nothing to write: an older file stays
            print(f"rtamt loudness: {args.series} not written: no file was measured",
                  file=sys.stderr)
    except SystemExit:
        if series is not None:
            print(f"rtamt loudness: SIGTERM: stopped; {args.series} not written",
                  file=sys.stderr)
        raise
    finally:
        if results is not None:       # the pending files cancelled, the running ones waited
            results.close()
        if bar is not None:
            bar.close()
        if series is not None:
            series.discard(len(todo))
        if old_term is not None:
            import signal

            signal.signal(signal.SIGTERM, old_term)
    if counts["failed"] or counts["skipped"]:
        print(f"rtamt loudness: {counts['failed']} of {len(entries)} file(s) failed"
              + (f", {counts['skipped']} skipped" if counts["skipped"] else ""),
              file=sys.stderr)
        return EXIT_FAILED
    if counts["noncompliant"]:
        print(f"rtamt loudness: {counts['noncompliant']} row(s) not compliant ("
              + ", ".join(w for w in (
                  args.target is not None and f"--target {args.target:g} LUFS +-"
                  f"{DEFAULT_TOLERANCE_LU if args.tolerance is None else args.tolerance:g} LU",
                  args.max_true_peak is not None
                  and f"--max-true-peak {args.max_true_peak:g} dBTP") if w) + ")",
              file=sys.stderr)
        return EXIT_NONCOMPLIANT
    return 0


def _rows(entries, results, series, bar, args, judged: bool, opts: dict) -> dict:
    """Print the header and a row per entry (the measured files' from ``results``, in
    order; their ``--series`` parts appended), then the ``--total`` row; returns the
    counts of measured, failed, skipped and non-compliant rows."""
    if args.csv:
        _emit(bar, _csv_row(FIELDS))
    elif not args.json:
        _emit(bar, _table_header(judged))
    counts = {"measured": 0, "failed": 0, "skipped": 0, "noncompliant": 0}
    total = None
    done = 0
    for f, st, why in entries:
        if st is None:
            rec = next(results)
            if series is not None:
                series.add(done, rec["status"] == "measured")
            done += 1
        else:
            rec = {"file": str(f), "status": st, "error": why}
        stats = rec.pop("statistics", None)
        if stats is not None:
            total = stats if total is None else total.merge(stats)
        counts[rec["status"]] += 1
        if rec["status"] != "measured":
            _emit(bar, f"rtamt loudness: {rec['error']}", sys.stderr)
        elif rec.get("truncated"):
            _emit(bar, f"rtamt loudness: {rec['truncated']}", sys.stderr)
        if rec.get("compliant") is False:
            counts["noncompliant"] += 1
        _output(bar, rec, args, judged)
        if bar is not None:
            bar.update(1)
    if args.total:
        rec = _total(total, counts["measured"], opts)
        if rec["compliant"] is False:
            counts["noncompliant"] += 1
        _output(bar, rec, args, judged)
    return counts


def _stop_on_sigterm():
    """SIGTERM raises ``SystemExit(143)`` (so the temporary ``--series`` file is removed
    on the way out); returns the former handler (``None`` off the main thread)."""
    import signal

    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    try:
        return signal.signal(signal.SIGTERM, on_term)
    except ValueError:            # not the main thread
        return None


def _output(bar, rec: dict, args, judged: bool) -> None:
    if args.json:
        keep = rec if rec["status"] in ("measured", "total") else {
            k: rec[k] for k in ("file", "status", "error")}
        _emit(bar, json.dumps(keep))
    elif args.csv:
        _emit(bar, _csv_record(rec))
    else:
        _emit(bar, _table_row(rec, judged))
