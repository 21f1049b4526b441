"""``rtamt process``: stream an audio file (or the demo) through a model block by block.

The file is read block by block (:class:`rtamt.signals.AudioReader`: WAV of every
subtype, FLAC, OGG, ...), and the outputs go to disk as they are produced, through
:class:`rtamt.io.OutputWriter`, so memory does not grow with the file:

* ``--out DIR``: one ``NAME.npy`` per output, time on the last axis (open with
  ``np.load(path, mmap_mode='r')``), the metadata (``fs``, ``fc``, ``mfc``, ``spl_ref``,
  ``block_sizes``, ``model``, ``config``, ``fs_mod``, ``outputs``, ``decimate``, and for a
  packed modulation output ``modfb_channel`` / ``modfb_mfc``: each row's auditory channel
  and modulation centre frequency) as small ``.npy`` files, and ``rtamt.json`` describing
  it all;
* ``--out FILE.npz``: the same arrays in one ``.npz``, assembled from the ``.npy`` parts at
  the end (the disk holds both meanwhile).

Defaults that fit a disk (a 10-minute 48 kHz file gives about 66 MB with Dau1997, where
every stage at full rate in float64 would take about 100 GB; the options and their
defaults are shared with ``rtamt stream --per-channel --out``: :mod:`rtamt_apps.outputs`):

* only the model's last stage is kept (``modfb`` for the auditory models); models whose
  outputs are all frames (the loudness models, at most 1000 Hz) keep every output;
  ``--outputs NAME,...`` or ``--outputs all`` to choose;
* outputs are stored in float32 (``--store-dtype float64`` to keep the processing
  precision; processing itself runs in ``--dtype``, float64 by default);
* modulation outputs are stored packed, one row per real filter (``(F, T)``, e.g. 275 rows
  for Dau1997 at 48 kHz), ``--padded`` for the ``(C, M, T)`` NaN-padded layout;
* outputs are pooled to 100 frames per second (10 ms frames): ``--pool rms``
  (the root mean square of each frame, the envelope of a band-pass output whose plain mean
  is about 0), ``power``, ``mean`` or ``max``; frame times are always averaged; outputs at
  the audio rate default to ``rms``, framed outputs (loudness, levels) to ``mean``.
  ``--frame-rate 0`` keeps every sample, ``--decimate N`` pools every N samples instead.
  Pooling is computed identically for any block partition (:class:`rtamt.io.Decimator`);
  a trailing incomplete frame is dropped.

The output's size is estimated before processing starts and printed in the summary; it
is refused (exit 2, nothing processed) above ``--max-output-gb`` or the free space of the
destination's file system unless ``--force``.  Without ``--out`` nothing is written, and a
line on stderr says so.

The result is written beside the destination and renamed into place when complete: a
failed or interrupted run (Ctrl-C, ``SIGTERM``: one line, exit 130 / 143) leaves no partial
output and leaves an older one intact; the hidden directory a killed run (``SIGKILL``)
leaves is removed by the next run writing to the same directory.  A truncated or damaged
input file is reported with the number of frames that could be read, and nothing is
processed or written; ``--partial`` processes those frames instead, and the summary and
``rtamt.json`` (``input_truncated``) say what was missing (:mod:`rtamt_apps.files`).  The
file's length comes from reading (:class:`rtamt.signals.AudioReader`: a WAV streamed
through a pipe and an MP3 without a length tag are counted), so the size estimate, the
block plan and the progress bar are exact.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import numpy as np

from rtamt.engine.stage import RtamtInputError
from rtamt.io import OutputWriter
from rtamt.models import MODELS
from rtamt.signals import AudioFileError, AudioReader, demo_signal

from .args import (
    BLOCK_SECONDS,
    MAX_FRAMES,
    UsageError,
    check_block,
    int_range,
    positive_float,
    spl_ref_db,
)
from .files import add_partial_argument, partial_note, read_error
from .modelopts import add_fhigh_argument, cli_message, model_kwargs
from .outputs import (
    NoOutput,
    Summary,
    add_output_arguments,
    check_size,
    describe,
    gb,
    plan_outputs,
    recheck_size,
)
from .warm import warm_up

#: a progress bar (on a terminal's stderr) for inputs at least this long, s
PROGRESS_MIN_SECONDS = 5.0
#: frames read from the file at a time
READ_CHUNK = 1 << 16
#: exit status after SIGTERM / SIGINT (128 + the signal number, what a shell reports)
EXIT_TERM, EXIT_INT = 128 + signal.SIGTERM, 128 + signal.SIGINT


def _block_arg(text: str):
    if text == "random":
        return text
    try:
        return int_range(1)(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{e} (or 'random')") from None


def add_arguments(p):
    p.add_argument("input", nargs="?",
                   help="input audio file: WAV (any sample format), FLAC, OGG or anything "
                        "else libsndfile reads; mono or multi-channel; read block by block")
    p.add_argument("--demo", action="store_true",
                   help="use the built-in demo signal (2 s) instead of a file")
    p.add_argument("--model", default="dau1997", choices=sorted(MODELS),
                   help="model (default dau1997)")
    p.add_argument("--config", default=None,
                   help="model configuration (dau1997: amt0910 | torch_amt; default: the "
                        "model's own)")
    p.add_argument("--block", default="256", type=_block_arg,
                   help="block size in samples (default 256; at most 1 s of audio unless "
                        "--force), or 'random' for a random partition (1..8192)")
    p.add_argument("--force", action="store_true",
                   help=f"allow --block above {BLOCK_SECONDS:g} s of audio (at most "
                        f"{MAX_FRAMES} frames), and an output larger than --max-output-gb or "
                        "the free disk space")
    p.add_argument("--seed", type=int, default=0, help="seed of --block random (default 0)")
    p.add_argument("--dtype", default="float64", choices=["float32", "float64"],
                   help="processing precision (default float64)")
    p.add_argument("--spl-ref", type=spl_ref_db, default=100.0,
                   help="dB SPL of a digital RMS of 1.0 (default 100, the AMT convention)")
    p.add_argument("--fs", type=positive_float(), default=None,
                   help="expected sample rate; a file with another rate is an error "
                        "(demo: its rate, default 48000)")
    p.add_argument("--out", default=None,
                   help="output directory (one NAME.npy per output, written as it is produced) "
                        "or FILE.npz (one file, assembled from those at the end: needs the "
                        "space twice meanwhile); without --out nothing is written (the "
                        "summary only)")
    add_output_arguments(p)
    add_partial_argument(p)
    add_fhigh_argument(p)


def block_sizes(n: int, block, seed: int = 0) -> np.ndarray:
    """Block partition of ``n`` samples: fixed size, or random sizes in [1, 8192]
    (always including 1-sample blocks and, if it fits, one 8192-sample block)."""
    if block == "random":
        rng = np.random.default_rng(seed)
        sizes = [1, 1]
        if n >= 8192 + 2:
            sizes.append(8192)
        while sum(sizes) < n:
            kind = rng.integers(4)
            sizes.append(int(rng.integers(1, 8)) if kind == 0 else int(rng.integers(8, 700))
                         if kind < 3 else int(rng.integers(700, 8193)))
        sizes = np.array(sizes)
        rng.shuffle(sizes)
        cs = np.cumsum(sizes)
        k = int(np.searchsorted(cs, n))
        sizes = sizes[: k + 1]
        sizes[-1] -= cs[k] - n
        return sizes[sizes > 0]
    b = int(block)
    if b < 1:
        raise UsageError(f"argument --block: must be >= 1, got {b}")
    sizes = np.full(n // b, b)
    return np.append(sizes, n % b) if n % b else sizes


class _ArrayReader:
    """The demo signal behind :class:`rtamt.signals.AudioReader`'s ``read``."""

    def __init__(self, x: np.ndarray, fs: float):
        self.x, self.fs, self.pos = x, fs, 0
        self.channels, self.frames = x.shape

    def read(self, n: int) -> np.ndarray:
        y = self.x[:, self.pos:self.pos + n]
        self.pos += y.shape[-1]
        return y

    def close(self) -> None:
        pass


def _blocks(reader, sizes, chunk: int = READ_CHUNK):
    """The blocks of ``sizes`` from ``reader``, read ``chunk`` frames (or one block) at a
    time: memory holds at most one chunk plus one block."""
    buf, off = np.zeros((reader.channels, 0)), 0
    for n in sizes:
        n = int(n)
        if buf.shape[-1] - off < n:
            rest = buf[:, off:]
            buf = np.concatenate([rest, reader.read(max(chunk, n - rest.shape[-1]))], axis=-1)
            off = 0
        yield buf[:, off:off + n]
        off += n


class _Interrupted(Exception):
    """SIGTERM (or SIGINT) during processing: ``code`` is the exit status."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.code = 128 + int(signum)


def _error(msg: str, usage: bool = True) -> int:
    print(f"rtamt process: {'error: ' if usage else ''}{msg}", file=sys.stderr)
    return 2


def run(args) -> int:
    """Run ``rtamt process``; SIGTERM and SIGINT end it with one line (exit 143 / 130),
    the temporary output removed."""
    def on_signal(signum, frame):
        raise _Interrupted(signum)

    old = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, on_signal)
    except ValueError:           # not the main thread: the default handling stays
        pass
    try:
        return _run(args)
    except UsageError as e:
        return _error(" ".join(str(e).split()))
    except (_Interrupted, KeyboardInterrupt) as e:
        code = getattr(e, "code", EXIT_INT)
        name = "SIGTERM" if code == EXIT_TERM else "interrupted (SIGINT)"
        print(f"rtamt process: {name}: stopped"
              + (f", nothing written to {args.out}" if args.out else ""), file=sys.stderr)
        return code
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _open_input(args):
    """(reader, fs, src): the demo or the file opened for block-wise reading."""
    if args.demo:
        fs = args.fs or 48000.0
        x = demo_signal(fs, spl_ref=args.spl_ref)[None, :]
        src = f"demo signal ({x.shape[-1] / fs:.2f} s: tone 60 dB, AM 65 dB, noise 70 dB, silence)"
        return _ArrayReader(x, fs), fs, src
    try:
        reader = AudioReader(args.input, partial=args.partial)
    except AudioFileError as e:
        nothing = "nothing processed" + (", nothing written" if args.out else "")
        raise _InputError(f"cannot read {read_error(e, consequence=nothing)}") from None
    except OSError as e:
        raise _InputError(f"cannot read {args.input}: {e}") from None
    fs = reader.fs
    if args.fs is not None and fs != args.fs:
        reader.close()
        raise _InputError(f"sample rate mismatch: {args.input} is {fs:g} Hz but --fs is "
                          f"{args.fs:g} Hz (resample the file or drop --fs)")
    src = f"{args.input} ({reader.channels} ch, {reader.frames / fs:.2f} s, {reader.format})"
    note = partial_note(reader)
    if note:
        print(f"rtamt process: {note}", file=sys.stderr, flush=True)
        src += f" [{note}]"
    return reader, fs, src


class _InputError(Exception):
    """The input cannot be used (one line, exit 2)."""


def _run(args) -> int:
    if args.demo == bool(args.input):
        return _error("give an input file or --demo (not both)")
    try:
        reader, fs, src = _open_input(args)
    except _InputError as e:
        return _error(str(e), usage=False)
    try:
        return _run_open(args, reader, fs, src)
    finally:
        reader.close()


def _run_open(args, reader, fs, src) -> int:
    if args.block != "random":
        check_block("--block", args.block, fs, args.force)
    cls = MODELS[args.model]
    kw = {} if args.config is None else {"config": args.config}
    kw.update(model_kwargs(args, cls))
    try:
        model = cls(fs, spl_ref=args.spl_ref, **kw)
    except ValueError as e:
        return _error(cli_message(e), usage=False)
    n_total = reader.frames

    # -- what is kept, at which rate, how long, how big --------------------------------
    try:
        plan = plan_outputs(args, model, fs, n_total, reader.channels)
    except NoOutput as e:
        return _error(str(e), usage=False)
    copies = 2 if args.out and args.out.lower().endswith(".npz") else 1
    check_size(args, plan.est, args.out, copies)
    sizes = block_sizes(n_total, args.block, args.seed)
    if not args.out:
        print("rtamt process: no --out given: nothing is written (summary only); add "
              "--out DIR or --out FILE.npz to keep the outputs", file=sys.stderr)

    # -- the destination is checked (and its temporary directory made) before processing
    writer = None
    if args.out:
        try:
            writer = OutputWriter(args.out, lengths=plan.lengths)
        except OSError as e:
            return _error(f"cannot write {args.out}: {e}", usage=False)
    try:
        return _process(args, model, reader, fs, sizes, plan, writer, src)
    finally:
        if writer is not None and not writer.done:
            writer.abort()


def _progress(total: int, fs: float):
    """A tqdm bar on stderr for long inputs on a terminal (None otherwise)."""
    if total / fs < PROGRESS_MIN_SECONDS or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        size = os.terminal_size((0, 0))
    # a terminal that reports no size (0 x 0, e.g. a bare pty) would hide the bar: 80 x 24
    known = size.columns > 0 and size.lines > 0
    return tqdm(total=round(total / fs, 2), unit="s", desc="rtamt process", leave=False,
                file=sys.stderr, dynamic_ncols=known, ncols=None if known else 80,
                nrows=None if known else 24,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s audio "
                           "[{elapsed}<{remaining}]")


def _process(args, model, reader, fs, sizes, plan, writer, src) -> int:
    names, decim = plan.names, plan.decimators()
    summary = {k: Summary() for k in names}
    adapt_sum = adapt_n = None
    lead = () if reader.channels == 1 else (reader.channels,)
    warm = warm_up(model, args.dtype, lead, args.model)  # kernels: cache or compile
    n_total = reader.frames
    bar = _progress(n_total, fs)
    t0 = t1 = time.perf_counter()
    pos = 0
    try:
        for blk in _blocks(reader, sizes):
            n = blk.shape[-1]
            xb = blk.astype(args.dtype)    # the model applies its own spl_ref
            o = model.process_all(xb[0] if reader.channels == 1 else xb)
            pos += n
            t1 = time.perf_counter() if pos == sizes[0] else t1   # end of the first block
            block = {}
            for k in names:
                v = o[k]
                if k == "adaptloop" and v.shape[-1]:
                    a = v.reshape(-1, *v.shape[-2:])
                    s = a.sum(axis=(0, 2), dtype=np.float64)
                    adapt_sum = s if adapt_sum is None else adapt_sum + s
                    adapt_n = (adapt_n or 0) + a.shape[0] * a.shape[2]
                v = plan.reduce(k, v, decim[k])
                summary[k].add(v)
                block[k] = v
            if pos == sizes[0]:
                recheck_size(args, plan, block, args.out, 2 if writer and writer.kind == "npz"
                             else 1)
            if writer is not None:
                writer.write(block)
            if bar is not None:
                bar.update(round(pos / fs, 2) - bar.n)
    except (RtamtInputError, AudioFileError) as e:
        what = "" if writer is None else f" (nothing written to {args.out})"
        return _error(f"{e}{what}", usage=False)
    except OSError as e:
        print(f"rtamt process: cannot write {args.out}: {e} (nothing written)", file=sys.stderr)
        return 1
    finally:
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - t0
    empty = [k for k in names if summary[k].n == 0]
    if empty:
        return _error(f"no output from {args.model} for {', '.join(empty)} (the input is "
                      f"{n_total} samples, too short)", usage=False)
    nbytes = sum(np.prod(summary[k].shape) * plan.store.itemsize for k in names)
    if writer is not None and _commit(args, model, fs, sizes, plan, writer, src,
                                      partial_note(reader)):
        return 1
    _print_summary(args, model, fs, sizes, plan, src, warm, summary, (t0, t1, elapsed),
                   nbytes, adapt_sum, adapt_n, writer)
    return 0


def _commit(args, model, fs, sizes, plan, writer, src, note=None) -> bool:
    """Metadata and the atomic rename; True (and one line on stderr) on failure.  ``note``:
    what ``--partial`` left out of a truncated input (``input_truncated``), or None."""
    meta, side = describe(model, args.model, fs, plan)
    meta["block_sizes"] = sizes
    side.update(dtype=args.dtype, source=src)
    side["input_truncated"] = note
    try:
        writer.add_meta(**meta)
        writer.commit(side)
    except OSError as e:
        print(f"rtamt process: cannot write {args.out}: {e} (nothing written)", file=sys.stderr)
        return True
    return False


def _pace(rtf: float) -> str:
    return (f"{1 / rtf:.0f}x faster" if rtf < 1 else f"{rtf:.1f}x slower") + " than real time"


def _print_summary(args, model, fs, sizes, plan, src, warm, summary, times, nbytes,
                   adapt_sum, adapt_n, writer) -> None:
    names = plan.names
    t0, t1, elapsed = times
    n_total = int(np.sum(sizes))
    dur = n_total / fs
    print(f"rtamt process: {args.model} ({model.config}) on {src}")
    blk = "random 1..8192" if args.block == "random" else f"{args.block} samples"
    print(f"  fs {fs:g} Hz, {n_total} samples, {len(sizes)} blocks ({blk}), {args.dtype}, "
          f"stored as {args.store_dtype}")
    print(f"  {len(model.fc)} auditory channels {model.fc[0]:.1f}-{model.fc[-1]:.1f} Hz")
    print(f"  {warm.describe()}")
    # reading, the model, pooling and writing; the kernel warm-up above is not included
    rtf = elapsed / dur
    print(f"  processed {dur:.2f} s of signal in {elapsed:.3f} s: {rtf:.3g} of real time, "
          f"{_pace(rtf)} (reading, model, pooling, writing; warm-up excluded)")
    if len(sizes) > 1:   # the first block also allocates the stream's state
        st, sn = t0 + elapsed - t1, (n_total - int(sizes[0])) / fs
        print(f"  steady state: {st / sn:.3g} of real time, {_pace(st / sn)} ({sn:.2f} s of "
              f"signal in {st:.3f} s, the first block excluded)")
    frames = plan.describe_frames()
    if frames:
        print("  frames: " + frames)
    for k in names:
        s = summary[k]
        print(f"  {k:10s} {str(s.shape):18s} min {s.lo:+.4g}  max {s.hi:+.4g}")
    if adapt_sum is not None:
        lvl = adapt_sum / adapt_n
        print(f"  adaptloop mean per channel (model units): strongest "
              f"{model.fc[int(np.argmax(lvl))]:.0f} Hz ({lvl.max():.1f} MU)")
    print(f"  output size {gb(nbytes)} (estimated before writing: {gb(plan.est)})")
    if writer is not None:
        print(f"  wrote {args.out}")
    else:
        print("  nothing written (no --out)")
