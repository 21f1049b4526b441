"""``rtamt process``: stream a WAV file (or the demo) through a model block by block.

The outputs (time on the last axis, ragged outputs NaN-padded) go to disk as they are
produced, through :class:`rtamt.io.OutputWriter`, so memory does not grow with the file:

* ``--out DIR``: one ``NAME.npy`` per output (open with ``np.load(path, mmap_mode='r')``),
  the metadata (``fs``, ``fc``, ``mfc``, ``spl_ref``, ``block_sizes``, ``model``,
  ``config``, ``fs_mod``) as small ``.npy`` files, and ``rtamt.json`` describing it all;
* ``--out FILE.npz``: the same arrays in one ``.npz`` (the keys of earlier versions),
  assembled from the ``.npy`` parts at the end (the disk holds both meanwhile).

The result is written beside the destination and renamed into place when complete: a
failed run leaves no partial output and leaves an older one intact.  The destination is
checked before processing starts.

``--outputs`` keeps some stages only.  ``--decimate N`` (or ``--frame-rate HZ``) reduces
every kept output to one value per ``N`` samples: the mean of each run of ``N`` consecutive
samples of the model's output (a boxcar average, not an anti-aliasing filter; a trailing
incomplete run is dropped), computed identically for any block partition
(:class:`rtamt.io.Decimator`).  The summary (min/max per output) is accumulated block by
block as well.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from rtamt.engine.stage import RtamtInputError
from rtamt.io import Decimator, OutputWriter
from rtamt.models import MODELS
from rtamt.modulation import to_padded
from rtamt.signals import demo_signal, read_wav

from .args import UsageError, add_force_argument, check_block, int_range, positive_float, spl_ref_db
from .warm import warm_up

#: a progress bar (on a terminal's stderr) for inputs at least this long, s
PROGRESS_MIN_SECONDS = 5.0


def _block_arg(text: str):
    if text == "random":
        return text
    try:
        return int_range(1)(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{e} (or 'random')") from None


def _names_arg(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give one or more output names, comma separated")
    return list(dict.fromkeys(names))


def add_arguments(p):
    p.add_argument("input", nargs="?",
                   help="input WAV (int16/int32/float32, mono or multi-channel)")
    p.add_argument("--demo", action="store_true",
                   help="use the built-in demo signal instead of a file")
    p.add_argument("--model", default="dau1997", choices=sorted(MODELS))
    p.add_argument("--config", default=None,
                   help="model configuration (dau1997: amt0910 | torch_amt)")
    p.add_argument("--block", default="256", type=_block_arg,
                   help="block size in samples (at most 1 s of audio unless --force), or "
                        "'random' for a random partition (1..8192)")
    add_force_argument(p)
    p.add_argument("--seed", type=int, default=0, help="seed of --block random")
    p.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    p.add_argument("--spl-ref", type=spl_ref_db, default=100.0,
                   help="dB SPL of a digital RMS of 1.0 (default 100, the AMT convention)")
    p.add_argument("--fs", type=positive_float(), default=None,
                   help="expected sample rate; a file with another rate is an error "
                        "(demo: its rate)")
    p.add_argument("--out", default=None,
                   help="output directory (one NAME.npy per output, written as it is produced) "
                        "or FILE.npz (one file, assembled from those at the end: needs the "
                        "space twice meanwhile); optional")
    p.add_argument("--outputs", type=_names_arg, default=None, metavar="NAME,...",
                   help="outputs to keep (default: all; `rtamt models` lists them)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--decimate", type=int_range(1), default=1, metavar="N",
                   help="keep one value per N samples of every kept output: the mean of each "
                        "run of N samples (a boxcar average, not an anti-aliasing filter; the "
                        "same for any block partition)")
    g.add_argument("--frame-rate", type=positive_float(), default=None, metavar="HZ",
                   help="like --decimate, with N = round(output rate / HZ) per output (N >= 1)")


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


class _Summary:
    """Running shape, nanmin and nanmax of one output (no full array kept)."""

    def __init__(self):
        self.lead, self.n, self.lo, self.hi = None, 0, np.nan, np.nan

    def add(self, v: np.ndarray) -> None:
        self.lead = v.shape[:-1]
        self.n += v.shape[-1]
        if v.size:
            # fmin/fmax ignore NaN (all-NaN gives NaN), without nanmin's warning
            self.lo = np.fmin(self.lo, np.fmin.reduce(v, axis=None))
            self.hi = np.fmax(self.hi, np.fmax.reduce(v, axis=None))

    @property
    def shape(self) -> tuple:
        return tuple(self.lead or ()) + (self.n,)


def _error(msg: str, usage: bool = True) -> int:
    print(f"rtamt process: {'error: ' if usage else ''}{msg}", file=sys.stderr)
    return 2


def run(args) -> int:
    try:
        return _run(args)
    except UsageError as e:
        return _error(" ".join(str(e).split()))


def _run(args) -> int:
    if args.demo == bool(args.input):
        return _error("give an input WAV or --demo (not both)")
    if args.demo:
        fs = args.fs or 48000.0
        x = demo_signal(fs, spl_ref=args.spl_ref)[None, :]
        src = f"demo signal ({x.shape[-1] / fs:.2f} s: tone 60 dB, AM 65 dB, noise 70 dB, silence)"
    else:
        try:
            fs, x = read_wav(args.input)
        except (OSError, ValueError) as e:
            return _error(f"cannot read {args.input}: {e}", usage=False)
        if args.fs is not None and fs != args.fs:
            return _error(f"sample rate mismatch: {args.input} is {fs:g} Hz but --fs is "
                          f"{args.fs:g} Hz (resample the file or drop --fs)", usage=False)
        src = f"{args.input} ({x.shape[0]} ch, {x.shape[-1] / fs:.2f} s)"
    if args.block != "random":
        check_block("--block", args.block, fs, args.force)
    cls = MODELS[args.model]
    kw = {} if args.config is None else {"config": args.config}
    try:
        model = cls(fs, spl_ref=args.spl_ref, **kw)
    except ValueError as e:
        return _error(str(e), usage=False)
    n_total = x.shape[-1]
    dur = n_total / fs

    # -- what is kept, at which rate, how long -------------------------------------------
    names = list(model.outputs)
    if args.outputs is not None:
        unknown = [k for k in args.outputs if k not in names]
        if unknown:
            raise UsageError(f"argument --outputs: {args.model} has no output "
                             f"{', '.join(map(repr, unknown))} (it has {', '.join(names)})")
        names = [k for k in names if k in args.outputs]
    info = model.output_info()
    rates = {k: float(info[k]["rate"] or fs) for k in names}
    factors = {k: (max(1, round(rates[k] / args.frame_rate)) if args.frame_rate
                   else args.decimate) for k in names}
    decim = {k: Decimator(factors[k]) for k in names}
    lengths = {k: decim[k].output_length(int(n_total * rates[k] // fs)) for k in names}
    short = [k for k in names if int(n_total * rates[k] // fs) == 0]
    if short:
        return _error(f"the input is {n_total} samples ({dur * 1e3:.3g} ms), shorter than one "
                      f"{1e3 / rates[short[0]]:.3g} ms frame of {args.model}"
                      + (f" ({', '.join(short)})" if short != names else "")
                      + ": no output", usage=False)
    empty = [k for k in names if lengths[k] == 0]
    if empty:
        return _error(f"--decimate/--frame-rate leaves no sample of {', '.join(empty)} "
                      f"(the input is {dur:.3g} s)")

    x = x.astype(args.dtype)   # the model applies its own spl_ref
    if x.shape[0] == 1:
        x = x[0]
    sizes = block_sizes(n_total, args.block, args.seed)

    # -- the destination is checked (and its temporary directory made) before processing
    writer = None
    if args.out:
        try:
            writer = OutputWriter(args.out, lengths=lengths)
        except OSError as e:
            return _error(f"cannot write {args.out}: {e}", usage=False)
    try:
        return _process(args, model, x, fs, sizes, names, rates, factors, decim, writer, src)
    finally:
        if writer is not None and not writer.done:
            writer.abort()


def _progress(total: int, fs: float):
    """A tqdm bar on stderr for long inputs on a terminal (None otherwise)."""
    if total / fs < PROGRESS_MIN_SECONDS or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=round(total / fs, 2), unit="s", desc="rtamt process", leave=False,
                file=sys.stderr, dynamic_ncols=True,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s audio "
                           "[{elapsed}<{remaining}]")


def _process(args, model, x, fs, sizes, names, rates, factors, decim, writer, src) -> int:
    keep = set(names)
    padded = "modfb" in keep and getattr(model, "mfc", None) is not None
    summary = {k: _Summary() for k in names}
    adapt_sum = adapt_n = None
    warm = warm_up(model, args.dtype, x.shape[:-1], args.model)  # kernels: cache or compile
    bar = _progress(x.shape[-1], fs)
    t0 = t1 = time.perf_counter()
    pos = 0
    try:
        for n in sizes:
            o = model.process_all(x[..., pos:pos + n])
            pos += n
            t1 = time.perf_counter() if pos == sizes[0] else t1   # end of the first block
            block = {}
            for k in names:
                v = o[k]
                if k == "modfb" and padded:
                    v = to_padded(v, model["modfb"].coeffs)
                if k == "adaptloop" and v.shape[-1]:
                    a = v.reshape(-1, *v.shape[-2:])
                    s = a.sum(axis=(0, 2), dtype=np.float64)
                    adapt_sum = s if adapt_sum is None else adapt_sum + s
                    adapt_n = (adapt_n or 0) + a.shape[0] * a.shape[2]
                v = decim[k](v)
                summary[k].add(v)
                block[k] = v
            if writer is not None:
                writer.write(block)
            if bar is not None:
                bar.update(round(pos / fs, 2) - bar.n)
    except RtamtInputError as e:
        return _error(str(e), usage=False)
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
                      f"{x.shape[-1]} samples, too short)", usage=False)

    meta = dict(fs=np.float64(fs), fc=np.asarray(model.fc), spl_ref=np.float64(args.spl_ref),
                block_sizes=sizes, model=np.str_(args.model), config=np.str_(model.config))
    if model.mfc is not None:
        meta["mfc"] = model.mfc
    rate = model.output_info()[model.outputs[-1]]["rate"]
    if rate is not None and rate != fs:
        meta["fs_mod"] = np.float64(rate)   # rate of the outputs after resampling
    if any(f > 1 for f in factors.values()):
        meta["outputs"] = np.array(names)
        meta["decimate"] = np.array([factors[k] for k in names], dtype=np.int64)
    if writer is not None:
        side = {"model": args.model, "config": str(model.config), "fs": float(fs),
                "spl_ref": float(args.spl_ref), "dtype": args.dtype,
                "source": src, "decimation": "mean over N samples (boxcar), trailing partial "
                "run dropped",
                "outputs": {k: {"rate": rates[k] / factors[k], "model_rate": rates[k],
                                "decimate": factors[k]} for k in names}}
        try:
            writer.add_meta(**meta)
            writer.commit(side)
        except OSError as e:
            print(f"rtamt process: cannot write {args.out}: {e} (nothing written)",
                  file=sys.stderr)
            return 1

    n_total = x.shape[-1]
    print(f"rtamt process: {args.model} ({model.config}) on {src}")
    blk = "random 1..8192" if args.block == "random" else f"{args.block} samples"
    print(f"  fs {fs:g} Hz, {n_total} samples, {len(sizes)} blocks ({blk}), {args.dtype}")
    print(f"  {len(model.fc)} auditory channels {model.fc[0]:.1f}-{model.fc[-1]:.1f} Hz")
    print(f"  {warm.describe()}")
    # the first block also allocates the stream's state: left out when there are others
    steady_t, steady_n = ((elapsed, n_total) if len(sizes) < 2
                          else (t0 + elapsed - t1, n_total - sizes[0]))
    rtf = steady_t / (steady_n / fs)
    pace = f"{1 / rtf:.0f}x faster" if rtf < 1 else f"{rtf:.1f}x slower"
    print(f"  steady state: {rtf:.3g} of real time ({pace} than real time; "
          f"{n_total / fs:.2f} s of signal in {elapsed:.3f} s, the first block excluded)")
    if any(f > 1 for f in factors.values()):
        print("  decimated: " + ", ".join(f"{k} /{factors[k]} ({rates[k] / factors[k]:g} Hz)"
                                          for k in names if factors[k] > 1))
    for k in names:
        s = summary[k]
        print(f"  {k:10s} {str(s.shape):18s} min {s.lo:+.4g}  max {s.hi:+.4g}")
    if adapt_sum is not None:
        lvl = adapt_sum / adapt_n
        print(f"  adaptloop mean per channel (model units): strongest "
              f"{model.fc[int(np.argmax(lvl))]:.0f} Hz ({lvl.max():.1f} MU)")
    if writer is not None:
        print(f"  wrote {args.out}")
    return 0
