"""``rtamt process``: stream a WAV file (or the demo) through a model block by block.

Writes every model output as a named array in an ``.npz`` (time on the last axis,
ragged outputs NaN-padded) plus metadata (``fs``, ``fc``, ``mfc``, ``spl_ref``,
``block_sizes``), and prints a short summary.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from rtamt.engine.stage import RtamtInputError
from rtamt.models import MODELS
from rtamt.modulation import to_padded
from rtamt.signals import demo_signal, read_wav

from .warm import warm_up


def add_arguments(p):
    p.add_argument("input", nargs="?", help="input WAV (int16/int32/float32, mono or multi-channel)")
    p.add_argument("--demo", action="store_true", help="use the built-in demo signal instead of a file")
    p.add_argument("--model", default="dau1997", choices=sorted(MODELS))
    p.add_argument("--config", default=None, help="model configuration (dau1997: amt0910 | seed)")
    p.add_argument("--block", default="256",
                   help="block size in samples, or 'random' for a random partition (1..8192)")
    p.add_argument("--seed", type=int, default=0, help="seed of --block random")
    p.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    p.add_argument("--spl-ref", type=float, default=100.0,
                   help="dB SPL of a digital RMS of 1.0 (default 100, the AMT convention)")
    p.add_argument("--fs", type=float, default=None,
                   help="expected sample rate; a file with another rate is an error (demo: its rate)")
    p.add_argument("--out", default=None, help="output .npz (optional with --demo)")


def block_sizes(n: int, block: str, seed: int = 0) -> np.ndarray:
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
    try:
        b = int(block)
    except ValueError:
        raise SystemExit(f"rtamt process: --block must be an integer or 'random', got {block!r}")
    if b < 1:
        raise SystemExit(f"rtamt process: --block must be >= 1, got {b}")
    sizes = np.full(n // b, b)
    return np.append(sizes, n % b) if n % b else sizes


def run(args) -> int:
    if args.demo == bool(args.input):
        print("rtamt process: give an input WAV or --demo (not both)", file=sys.stderr)
        return 2
    if args.demo:
        fs = args.fs or 48000.0
        x = demo_signal(fs, spl_ref=args.spl_ref)[None, :]
        src = f"demo signal ({x.shape[-1] / fs:.2f} s: tone 60 dB, AM 65 dB, noise 70 dB, silence)"
    else:
        try:
            fs, x = read_wav(args.input)
        except (OSError, ValueError) as e:
            print(f"rtamt process: cannot read {args.input}: {e}", file=sys.stderr)
            return 2
        if args.fs is not None and fs != args.fs:
            print(f"rtamt process: sample rate mismatch: {args.input} is {fs:g} Hz but --fs is "
                  f"{args.fs:g} Hz (resample the file or drop --fs)", file=sys.stderr)
            return 2
        src = f"{args.input} ({x.shape[0]} ch, {x.shape[-1] / fs:.2f} s)"
    cls = MODELS[args.model]
    kw = {} if args.config is None else {"config": args.config}
    try:
        model = cls(fs, spl_ref=args.spl_ref, **kw)
    except ValueError as e:
        print(f"rtamt process: {e}", file=sys.stderr)
        return 2
    x = x.astype(args.dtype)   # the model applies its own spl_ref
    mono = x.shape[0] == 1
    if mono:
        x = x[0]
    sizes = block_sizes(x.shape[-1], args.block, args.seed)
    outs = {name: [] for name in model.outputs}
    warm = warm_up(model, args.dtype, x.shape[:-1], args.model)  # kernels: cache or compile
    t0 = t1 = time.perf_counter()
    pos = 0
    try:
        for n in sizes:
            o = model.process_all(x[..., pos:pos + n])
            for k, v in o.items():
                outs[k].append(v)
            pos += n
            t1 = time.perf_counter() if pos == sizes[0] else t1   # end of the first block
    except RtamtInputError as e:
        print(f"rtamt process: {e}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - t0
    result = {k: np.concatenate(v, axis=-1) for k, v in outs.items()}
    if "modfb" in result:
        result["modfb"] = to_padded(result["modfb"], model["modfb"].coeffs)
    dur = x.shape[-1] / fs
    meta = dict(fs=np.float64(fs), fc=model.fc, spl_ref=np.float64(args.spl_ref),
                block_sizes=sizes, model=np.str_(args.model), config=np.str_(model.config))
    if model.mfc is not None:
        meta["mfc"] = model.mfc
    rate = model.output_info()[model.outputs[-1]]["rate"]
    if rate is not None and rate != fs:
        meta["fs_mod"] = np.float64(rate)   # rate of the outputs after resampling
    if args.out:
        np.savez(args.out, **result, **meta)
    print(f"rtamt process: {args.model} ({model.config}) on {src}")
    print(f"  fs {fs:g} Hz, {x.shape[-1]} samples, {len(sizes)} blocks "
          f"({'random 1..8192' if args.block == 'random' else args.block + ' samples'}), {args.dtype}")
    print(f"  {len(model.fc)} auditory channels {model.fc[0]:.1f}-{model.fc[-1]:.1f} Hz")
    print(f"  {warm.describe()}")
    # the first block also allocates the stream's state: left out when there are others
    steady_t, steady_n = ((elapsed, x.shape[-1]) if len(sizes) < 2
                          else (t0 + elapsed - t1, x.shape[-1] - sizes[0]))
    rtf = steady_t / (steady_n / fs)
    pace = f"{1 / rtf:.0f}x faster" if rtf < 1 else f"{rtf:.1f}x slower"
    print(f"  steady state: {rtf:.3g} of real time ({pace} than real time; "
          f"{dur:.2f} s of signal in {elapsed:.3f} s, the first block excluded)")
    for k, v in result.items():
        print(f"  {k:10s} {str(v.shape):18s} min {np.nanmin(v):+.4g}  max {np.nanmax(v):+.4g}")
    if "adaptloop" in result:
        a = result["adaptloop"]
        lvl = a.reshape(-1, *a.shape[-2:]).mean(axis=(0, 2))
        print(f"  adaptloop mean per channel (model units): strongest "
              f"{model.fc[int(np.argmax(lvl))]:.0f} Hz ({lvl.max():.1f} MU)")
    if args.out:
        print(f"  wrote {args.out}")
    return 0
