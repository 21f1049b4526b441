"""``rtamt loudness FILE|DIR ...``: EBU R128 figures of audio files, one line per file.

For every file: the integrated loudness (LUFS, ITU-R BS.1770-4), the loudness range
(LU, EBU Tech 3342), the maximum true peak (dB TP, BS.1770-4 Annex 2) and sample peak
(dBFS) over the channels, measured by :class:`rtamt.loudness.bs1770.LoudnessMeter` (the
histogram mode: its memory does not depend on the file's length).  A directory stands for
the audio files below it (``.wav .flac .ogg .oga .opus .aif .aiff .aifc .au .snd .caf
.w64 .rf64 .mp3``), walked recursively, in sorted order.

Files are read block by block through soundfile (:class:`rtamt.signals.AudioReader`),
never whole, and decoded once: the meter needs no length up front, so the length of a
coded file (MP3, FLAC, OGG) is what reading it gives, and whether it is truncated is
known at its end (``count=False``).  A WAV streamed through a pipe (a placeholder size in
its header) and an MP3 without a length tag are measured; a truncated file is failed with
the frames that could be read, unless ``--partial``: then those frames are measured,
``duration_s`` is theirs, and the record's ``truncated`` (JSON, CSV) and a line on stderr
say what was missing (:mod:`rtamt_apps.files`).  Channels are weighted by their layout
after BS.1770 (:mod:`rtamt.loudness.layouts`: 1.41 beside the listener, LFE left out):
``--layout NAME``, ``--channels NAME,...`` or ``--weights G,...`` for every file, else the
file's own: its WAVE channel mask (WAV, RF64, W64) or FLAC channel-mask tag, else the order
its format defines (FLAC, Ogg Vorbis/Opus), 1 = mono, 2 = stereo, and for a WAV without a
mask 5 = L R C Ls Rs, 6 = L R C LFE Ls Rs.  A file whose layout is not known that way (an
8-channel WAV without a mask, ...) is failed with the layouts to choose from
(:mod:`rtamt_apps.layout_options`); a mask that disagrees with the channel count too.
The record's ``layout`` and ``layout_from`` say which layout was used and why.

Output (stdout): a table (default), ``--json`` (JSON Lines: one object per file with
``file, integrated_lufs, lra_lu, true_peak_dbtp, sample_peak_dbfs, true_peak_channels_dbtp,
duration_s, fs, channels, layout, layout_from, channel_weights, truncated`` or ``file,
error``), or ``--csv`` (a header line, then
one row per file; ``error`` is empty for a measured file).  Values that are not defined (a file of
digital silence has no integrated loudness) are empty / ``null``.

A file that cannot be read (not audio, truncated, damaged, a sample rate the meter cannot
run at) is listed as failed, with a one-line reason on stderr (``rtamt loudness: FILE:
REASON``), and the other files are measured.  Exit status: 0 when every file was
measured, 1 when at least one failed, 2 for a usage error (no such path, a directory
without audio files, an option's value).  A progress bar (tqdm, stderr, on a terminal)
shows the files done when there are at least :data:`PROGRESS_MIN_FILES`; the table's rows
and the messages are printed through it (``tqdm.write``), so no row lands on the bar's
line.  ``--jobs N`` measures N files at a time in worker processes (the output keeps the
files' order); N is capped at the number of usable cores, with a note on stderr, unless
``--force`` (:func:`rtamt_apps.files.cap_jobs`).  The workers start once, as copies of this
process made after it has loaded the meter (:func:`_results`), and each measures file after
file: no start-up per file or per worker, and a worker's own memory is the pages it
writes (about 10-15 MB).

Start-up: the command imports the meter, the reader and numba only (not the models, the
scheduler, scipy.signal or torch; ``import rtamt`` imports its parts on first use), and
numba loads the meter's kernels from its cache on their first call (docs/startup.md,
issue 39).  Blocks are decoded into one time-major buffer whose transpose the meter takes
as it is (:meth:`rtamt.signals.AudioReader.read_tm`).
"""
from __future__ import annotations

import csv
import io
import json
import math
import sys
from pathlib import Path

from .args import UsageError, int_range
from .files import add_partial_argument, cap_jobs, partial_note, read_error
from .layout_options import add_layout_arguments

#: file name endings taken from a directory (formats libsndfile reads)
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".aif", ".aiff", ".aifc", ".au",
                  ".snd", ".caf", ".w64", ".rf64", ".mp3")
#: exit status when at least one file could not be measured
EXIT_FAILED = 1
#: a progress bar from this many files on (on a terminal)
PROGRESS_MIN_FILES = 5
FIELDS = ("file", "integrated_lufs", "lra_lu", "true_peak_dbtp", "sample_peak_dbfs",
          "duration_s", "fs", "channels", "layout", "layout_from", "truncated", "error")


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
    p.add_argument("--jobs", type=int_range(1, 256), default=1,
                   help="files measured in parallel by this many processes (default 1; at "
                        "most the number of usable cores unless --force); the output keeps "
                        "the files' order")
    p.add_argument("--force", action="store_true",
                   help="run --jobs processes even when that is more than the usable cores")
    add_partial_argument(p)


def _files(paths) -> list[Path]:
    """The files named and the audio files below the directories named (sorted)."""
    out = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*")
                           if f.is_file() and f.suffix.lower() in AUDIO_SUFFIXES)
            if not found:
                raise UsageError(f"{raw}: a directory without audio files "
                                 f"({', '.join(AUDIO_SUFFIXES)})")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise UsageError(f"{raw}: no such file or directory")
    return out


def _value(v, digits=2):
    return None if v is None or not math.isfinite(v) else round(float(v), digits)


def measure(path, layout=None, block=65536, mode="histogram", partial=False) -> dict:
    """EBU R128 figures of one file (a dict of :data:`FIELDS` without ``error``, plus
    ``true_peak_channels_dbtp`` and ``channel_weights``); raises ``ValueError`` /
    ``OSError`` for a file that cannot be measured (:class:`rtamt.signals.AudioFileError`
    for a truncated one unless ``partial``: then ``truncated`` says what was missing; a
    ``LayoutError`` for a layout that is not known or does not fit).  ``layout``: the
    ``--layout`` / ``--channels`` / ``--weights`` value (:mod:`rtamt_apps.layout_options`),
    None for the file's own."""
    import numpy as np

    from rtamt.loudness.bs1770 import LoudnessMeter
    from rtamt.signals import AudioReader

    from .layout_options import choose

    with AudioReader(path, partial=partial, count=False) as r:
        lay = choose(r.channels, layout, r)      # LayoutError (ValueError) with the choices
        meter = LoudnessMeter(fs=r.fs, channels=r.channels, mode=mode, **lay.meter_kwargs())
        # one time-major buffer for every block; the meter takes its transpose uncopied
        buf = np.empty((min(block, r.frames or block), r.channels))
        while r.frames is None or r.pos < r.frames:    # None: a coded file, to its end
            x = r.read_tm(buf.shape[0], out=buf)
            if x.shape[0] == 0:
                break
            meter(x.T)
        fs, channels, frames = r.fs, r.channels, r.frames
    return {"file": str(path), "integrated_lufs": _value(meter.integrated),
            "lra_lu": _value(meter.loudness_range),
            "true_peak_dbtp": _value(meter.true_peak),
            "sample_peak_dbfs": _value(meter.sample_peak),
            "true_peak_channels_dbtp": [_value(v) for v in meter.true_peak_channels],
            "duration_s": round(frames / fs, 3), "fs": fs, "channels": channels,
            "layout": lay.name, "layout_from": lay.origin,
            "channel_weights": list(lay.weights), "truncated": partial_note(r)}


def _measure_or_error(job) -> dict:
    """:func:`measure` of ``job = (path, layout, block, mode, partial)``, or ``{'file',
    'error'}`` (one line) for a file that cannot be measured; runs in a worker process
    too."""
    f = job[0]
    try:
        return measure(*job)
    except (ValueError, OSError, RuntimeError) as e:
        err = read_error(e) or type(e).__name__
        return {"file": str(f), "error": err if str(f) in err else f"{f}: {err}"}


def _warm_meter(mode: str) -> None:
    """Import the reader (soundfile, libsndfile) and load the meter's kernels for ``mode``
    (numba: from its disk cache, or compiled on a first run): one 0.1 s stereo block and
    the gating statistics (:meth:`~rtamt.loudness.bs1770.LoudnessMeter.warm_kernels`), with
    the argument types :func:`measure` passes at every sample rate and channel count."""
    import numpy as np
    import soundfile  # noqa: F401  (what every worker opens files with)

    from rtamt.loudness.bs1770 import LoudnessMeter

    m = LoudnessMeter(fs=48000.0, channels=2, mode=mode)
    m(np.zeros((4800, 2)).T)
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


def _results(jobs, n_jobs: int, mode: str = "histogram"):
    """An iterator over the results of ``jobs`` in their order (``n_jobs`` processes for
    more than one).

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
        _warm_meter(mode)
        sys.stdout.flush()           # a forked worker must not print this process's buffer
        sys.stderr.flush()
    ex = ProcessPoolExecutor(max_workers=min(n_jobs, len(jobs)), mp_context=ctx,
                             initializer=_warm_meter, initargs=(mode,))
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


def run(args) -> int:
    files = _files(args.paths)
    n_jobs = cap_jobs("rtamt loudness", args.jobs, args.force)
    jobs = [(f, args.layout, args.block, args.mode, args.partial) for f in files]
    results = _results(jobs, n_jobs, args.mode)      # workers start before the bar's thread
    bar = _progress(len(files))
    if args.csv:
        _emit(bar, _csv_row(FIELDS))
    elif not args.json:
        _emit(bar, f"{'I LUFS':>8} {'LRA LU':>7} {'TP dBTP':>8} {'SP dBFS':>8} {'s':>9}  file")
    failed = 0
    try:
        for f, rec in zip(files, results):
            err = rec.get("error")
            if err is not None:
                failed += 1
                _emit(bar, f"rtamt loudness: {err}", sys.stderr)
            elif rec.get("truncated"):
                _emit(bar, f"rtamt loudness: {rec['truncated']}", sys.stderr)
            if args.json:
                _emit(bar, json.dumps(rec))
            elif args.csv:
                _emit(bar, _csv_row([rec.get(k, "") if rec.get(k) is not None else ""
                                     for k in FIELDS[:-1]] + [err or ""]))
            elif err is not None:
                _emit(bar, f"{'failed':>8} {'':>7} {'':>8} {'':>8} {'':>9}  {f}")
            else:
                _emit(bar, f"{_cell(rec['integrated_lufs'], 8, '.1f')} "
                           f"{_cell(rec['lra_lu'], 7, '.1f')} "
                           f"{_cell(rec['true_peak_dbtp'], 8, '.1f')} "
                           f"{_cell(rec['sample_peak_dbfs'], 8, '.1f')} "
                           f"{rec['duration_s']:9.1f}  {f}")
            if bar is not None:
                bar.update(1)
    finally:
        results.close()
        if bar is not None:
            bar.close()
    if failed:
        print(f"rtamt loudness: {failed} of {len(files)} file(s) failed", file=sys.stderr)
    return EXIT_FAILED if failed else 0
