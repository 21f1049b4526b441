"""What ``rtamt process --out`` and ``rtamt stream --per-channel --out`` store, and how big
it is: the options they share, the choice of outputs, their pooling to frames, the size
estimate and its refusal, and the metadata written beside the outputs.

Defaults that fit a disk (a 10-minute 48 kHz channel gives about 66 MB with Dau1997, where
its last stage at full rate in float64 would take 63 GB):

* only the model's last stage is kept (``modfb`` for the auditory models); models whose
  outputs are all frames (the loudness models, at most :data:`FRAMED_RATE` Hz) keep every
  output (``--outputs NAME,...`` or ``all`` to choose);
* stored in float32 (``--store-dtype float64`` keeps the processing precision);
* modulation outputs packed, one row per real filter (``--padded``: ``(C, M, T)``);
* pooled to :data:`FRAME_RATE` frames per second by :class:`rtamt.io.Decimator`
  (``--frame-rate``, ``--decimate``, ``--pool``).

:func:`plan_outputs` turns the options into a :class:`Plan` (names, rates, factors, pools,
expected lengths and the estimated size in bytes), :func:`check_size` refuses an estimate
above ``--max-output-gb`` or the destination's free space (unless ``--force``), and
:func:`describe` gives the metadata arrays and the ``rtamt.json`` fields of an output.
"""
from __future__ import annotations

import argparse
import math
import pathlib
import shutil
from dataclasses import dataclass, field

import numpy as np

from rtamt.io import Decimator
from rtamt.io.decimate import POOLS

from .args import UsageError, float_range, int_range, positive_float

__all__ = ["FRAME_RATE", "FRAMED_RATE", "MAX_OUTPUT_GB", "NoOutput", "Plan", "Summary",
           "add_output_arguments", "plan_outputs", "check_size", "recheck_size", "describe",
           "gb", "free_bytes", "Selected", "OUTPUT_OPTIONS"]

#: default frames per second of the stored outputs (10 ms frames)
FRAME_RATE = 100.0
#: outputs at this rate or below are frames already (loudness models): pooled with 'mean'
FRAMED_RATE = 1000.0
#: default limit of the estimated output size, GB (``--max-output-gb``)
MAX_OUTPUT_GB = 4.0
#: attribute names of the options :func:`add_output_arguments` adds (not ``store_dtype`` /
#: ``max_output_gb``, whose defaults are values)
OUTPUT_OPTIONS = ("outputs", "frame_rate", "decimate", "pool")


class NoOutput(ValueError):
    """The input is too short for any output (one line, exit 2, not a usage error)."""


def _names_arg(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give one or more output names, comma separated")
    return list(dict.fromkeys(names))


def add_output_arguments(p, max_help: str = "") -> None:
    """The output options (argparse): ``--store-dtype``, ``--outputs``, ``--padded``,
    ``--frame-rate`` / ``--decimate``, ``--pool``, ``--max-output-gb`` (``max_help``:
    appended to its help)."""
    p.add_argument("--store-dtype", default="float32", choices=["float32", "float64"],
                   help="precision of the stored outputs (default float32: half the disk; "
                        "float64 keeps what float64 processing computed)")
    p.add_argument("--outputs", type=_names_arg, default=None, metavar="NAME,...",
                   help="outputs to keep, or 'all' (default: the model's last stage, e.g. "
                        "modfb; every output of the loudness models; `rtamt models` lists "
                        "them)")
    p.add_argument("--padded", action="store_true",
                   help="store modulation outputs NaN-padded as (C, M, T) (default: packed, "
                        "(F, T), one row per real filter; modfb_channel and modfb_mfc name "
                        "each row)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--frame-rate", type=float_range(0.0), default=None, metavar="HZ",
                   help=f"frames per second of the stored outputs (default {FRAME_RATE:g}: "
                        "10 ms frames; outputs at a lower rate are kept as they are): each "
                        "frame pools N = round(output rate / HZ) samples (see --pool); 0 "
                        "keeps every sample (full rate: Dau1997's modfb then stores 275 values, "
                        "1.1 kB in float32, per input sample at 48 kHz)")
    g.add_argument("--decimate", type=int_range(1), default=None, metavar="N",
                   help="like --frame-rate, one frame per N samples of every kept output")
    p.add_argument("--pool", default=None, choices=POOLS,
                   help="how a frame's samples are reduced: rms (root mean square, the "
                        "envelope of a band-pass output), power (mean square), mean (a boxcar "
                        "average: about 0 for a carrier), max; default rms for outputs at the "
                        f"audio rate, mean for framed ones (at most {FRAMED_RATE:g} Hz); "
                        "frame_time is always averaged; the same for any block partition")
    p.add_argument("--max-output-gb", type=positive_float(), default=MAX_OUTPUT_GB,
                   metavar="GB",
                   help=f"refuse (before processing) an output estimated above this size "
                        f"(default {MAX_OUTPUT_GB:g} GB) unless --force{max_help}")


def gb(nbytes: float) -> str:
    """``nbytes`` as ``'1.23 GB'`` (from 0.1 GB) or ``'45.6 MB'``."""
    return f"{nbytes / 1e9:.3g} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.3g} MB"


def _select(args, model, fs) -> tuple[list, dict]:
    """The outputs kept (``--outputs``, or the default) and their rates (Hz)."""
    names = list(model.outputs)
    info = model.output_info()
    rates = {k: float(info[k]["rate"] or fs) for k in names}
    if args.outputs is None:
        if any(r > FRAMED_RATE for r in rates.values()):
            names = names[-1:]                 # the last stage of an auditory model
    elif args.outputs != ["all"]:
        unknown = [k for k in args.outputs if k not in names]
        if unknown:
            raise UsageError(f"argument --outputs: {args.model} has no output "
                             f"{', '.join(map(repr, unknown))} (it has {', '.join(names)}, "
                             "or give 'all')")
        names = [k for k in names if k in args.outputs]
    return names, {k: rates[k] for k in names}


def _pooling(args, names, rates) -> tuple[dict, dict]:
    """Per output: the decimation factor and the pooling (``--frame-rate``, ``--decimate``,
    ``--pool``, or the defaults)."""
    factors, pools = {}, {}
    for k in names:
        if args.decimate is not None:
            f = args.decimate
        else:
            hz = FRAME_RATE if args.frame_rate is None else args.frame_rate
            f = max(1, round(rates[k] / hz)) if hz > 0 else 1
        framed = rates[k] <= FRAMED_RATE
        pool = "mean" if k == "frame_time" else args.pool or ("mean" if framed else "rms")
        factors[k], pools[k] = f, pool if f > 1 else "mean"
    return factors, pools


def _rows(model, info, k, channels: int, padded: bool) -> int:
    """Estimated values per time sample of output ``k`` for ``channels`` input channels."""
    if k == "modfb" and padded:
        n = int(np.size(model.mfc))
    else:
        n = int(info[k].get("channels") or 1)
    return n * max(1, channels)


@dataclass
class Plan:
    """What is stored of one model's outputs (see :func:`plan_outputs`).

    names   : outputs kept, in the model's order.
    rates   : their rates at the model's output, Hz.
    factors : samples per stored frame (1: every sample).
    pools   : pooling of each output's frames (:data:`rtamt.io.decimate.POOLS`).
    padded  : ``modfb`` stored NaN-padded ``(C, M, T)``.
    store   : the stored dtype.
    lengths : expected stored samples per output (None: an open-ended input).
    est     : estimated bytes of the stored outputs (the whole run; an open-ended input:
              per second of input, see ``per_second``).
    per_second : stored bytes per second of input.
    """

    names: list
    rates: dict
    factors: dict
    pools: dict
    padded: bool
    store: np.dtype
    lengths: dict | None
    est: float
    per_second: float
    coeffs: object = field(default=None, repr=False)

    def decimators(self) -> dict:
        """A new :class:`rtamt.io.Decimator` per output (one set per stream)."""
        return {k: Decimator(self.factors[k], self.pools[k]) for k in self.names}

    def reduce(self, k: str, v: np.ndarray, decim: Decimator) -> np.ndarray:
        """One block of output ``k`` (``(..., n)``, time last) as stored: NaN-padded if
        :attr:`padded`, pooled by ``decim``, in :attr:`store`."""
        if k == "modfb" and self.padded:
            from rtamt.modulation import to_padded

            v = to_padded(v, self.coeffs)
        return decim(v).astype(self.store, copy=False)

    def describe_frames(self) -> str:
        """``'modfb rms /480 (100 Hz)'`` per pooled output, comma separated ('' if none)."""
        return ", ".join(f"{k} {self.pools[k]} /{self.factors[k]} "
                         f"({self.rates[k] / self.factors[k]:g} Hz)"
                         for k in self.names if self.factors[k] > 1)


def plan_outputs(args, model, fs: float, frames: int | None, channels: int = 1,
                 leads: dict | None = None, copies: int = 1) -> Plan:
    """The :class:`Plan` of ``args`` (``outputs``, ``frame_rate``, ``decimate``, ``pool``,
    ``padded``, ``store_dtype``) for ``model`` at ``fs`` Hz on ``frames`` input samples
    (None: open-ended) of ``channels`` channels, stored ``copies`` times (one stream per
    channel: ``channels=1, copies=N``).  ``leads``: ``{name: leading shape}`` of each output
    as it will be stored (exact; else estimated from ``model.output_info()``).  Raises
    :class:`UsageError` for an unknown output or a ``--decimate`` that leaves nothing, and
    :class:`NoOutput` for an input shorter than one of the model's frames."""
    names, rates = _select(args, model, fs)
    factors, pools = _pooling(args, names, rates)
    padded = bool(args.padded and "modfb" in names and getattr(model, "mfc", None) is not None)
    info = model.output_info()
    store = np.dtype(args.store_dtype)

    def rows(k):
        if leads is not None and k in leads:
            return math.prod(leads[k]) * max(1, channels)
        return _rows(model, info, k, channels, padded)

    lengths = None
    if frames is not None:
        n_total = int(frames)
        decim = {k: Decimator(factors[k], pools[k]) for k in names}
        lengths = {k: decim[k].output_length(int(n_total * rates[k] // fs)) for k in names}
        short = [k for k in names if int(n_total * rates[k] // fs) == 0]
        if short:
            raise NoOutput(f"the input is {n_total} samples ({n_total / fs * 1e3:.3g} ms), "
                           f"shorter than one {1e3 / rates[short[0]]:.3g} ms frame of "
                           f"{args.model}" + (f" ({', '.join(short)})" if short != names else "")
                           + ": no output")
        empty = [k for k in names if lengths[k] == 0]
        if empty:
            raise UsageError(f"--decimate/--frame-rate leaves no sample of {', '.join(empty)} "
                             f"(the input is {n_total / fs:.3g} s)")
    per_second = copies * sum(rows(k) * rates[k] / factors[k] * store.itemsize for k in names)
    est = per_second if lengths is None else \
        copies * sum(rows(k) * lengths[k] * store.itemsize for k in names)
    coeffs = model["modfb"].coeffs if padded else None
    return Plan(names, rates, factors, pools, padded, store, lengths, float(est),
                float(per_second), coeffs)


def free_bytes(dest: pathlib.Path) -> float | None:
    """Free bytes of the file system ``dest`` will be written to (None: unknown)."""
    try:
        return shutil.disk_usage(dest.parent if str(dest.parent) else ".").free
    except OSError:
        return None                  # the writer reports a missing directory


def check_size(args, est: float, dest=None, copies: int = 1) -> None:
    """Refuse (:class:`UsageError`) an estimated output of ``est`` bytes above
    ``--max-output-gb``, or, ``copies`` times over (a ``.npz`` assembled from its parts: 2),
    above the free space of ``dest``'s file system, unless ``--force``."""
    if args.force:
        return
    limit = args.max_output_gb * 1e9
    if est > limit:
        less = "" if args.store_dtype == "float32" else " or --store-dtype float32"
        raise UsageError(f"the output would be about {gb(est)}, more than --max-output-gb "
                         f"{args.max_output_gb:g}; keep fewer outputs (--outputs), a lower "
                         f"--frame-rate{less}, or give --force")
    if dest:
        dest = pathlib.Path(dest)
        free = free_bytes(dest)
        need = est * copies
        if free is not None and need > free:
            raise UsageError(f"the output would need about {gb(need)}, the file system of "
                             f"{dest.parent} has {gb(free)} free; free some space, keep less "
                             "(--outputs, --frame-rate), or give --force")


def recheck_size(args, plan: Plan, block: dict, dest=None, copies: int = 1) -> None:
    """After the first block: the size from the outputs' actual leading shapes (the
    estimate from ``output_info`` misses e.g. Moore2016's two ears); a larger figure is
    checked again (:func:`check_size`) and kept in ``plan.est`` for the summary."""
    exact = sum(math.prod(v.shape[:-1]) * plan.lengths[k] * v.dtype.itemsize
                for k, v in block.items())
    if exact > plan.est:
        plan.est = exact
        check_size(args, exact, dest, copies)


def describe(model, name: str, fs: float, plan: Plan) -> tuple[dict, dict]:
    """The metadata of a stored output: ``(arrays, info)``.  ``arrays`` (small ``.npy``
    files): ``fs``, ``fc``, ``mfc``, ``spl_ref``, ``model``, ``config``, ``outputs``,
    ``decimate``, ``fs_mod`` (the outputs' rate after resampling), and for a packed
    modulation output ``modfb_channel`` / ``modfb_mfc`` (each row's auditory channel and
    modulation centre frequency); ``info`` (``rtamt.json`` fields): the model, its
    configuration, ``store_dtype``, the pooling and, per output, its rate, decimation and
    pooling.  ``name``: the model's name on the command line."""
    names, rates, factors, pools = plan.names, plan.rates, plan.factors, plan.pools
    meta = dict(fs=np.float64(fs), fc=np.asarray(model.fc),
                model=np.str_(name), config=np.str_(model.config),
                outputs=np.array(names),
                decimate=np.array([factors[k] for k in names], dtype=np.int64))
    spl_ref = getattr(model, "spl_ref", None)
    if spl_ref is not None:
        meta["spl_ref"] = np.float64(spl_ref)
    if model.mfc is not None:
        meta["mfc"] = model.mfc
    if "modfb" in names and not plan.padded and model.mfc is not None:
        c = model["modfb"].coeffs
        meta["modfb_channel"] = np.asarray(c.filter_channel, dtype=np.int64)
        meta["modfb_mfc"] = np.asarray(c.filter_mfc, dtype=np.float64)
    rate = model.output_info()[model.outputs[-1]]["rate"]
    if rate is not None and rate != fs:
        meta["fs_mod"] = np.float64(rate)   # rate of the outputs after resampling
    info = {"model": name, "config": str(model.config), "fs": float(fs),
            "store_dtype": plan.store.name,
            "decimation": "one frame per N samples, pooled (rms: sqrt of the mean square, "
                          "power: mean square, mean, max); trailing partial frame dropped",
            "modfb_layout": ("padded (C, M, T)" if plan.padded else
                             "packed (F, T): rows named by modfb_channel, modfb_mfc"),
            "outputs": {k: {"rate": rates[k] / factors[k], "model_rate": rates[k],
                            "decimate": factors[k],
                            "pool": pools[k] if factors[k] > 1 else None} for k in names}}
    if spl_ref is not None:
        info["spl_ref"] = float(spl_ref)
    return meta, info


class Selected:
    """A streaming object whose output is ``{name: output}`` of the outputs ``names`` of
    ``model.process_all`` (time last): what a scheduled stream runs when stages other than
    its model's last are stored (``rtamt stream --outputs``).  It runs alone (not batched
    with other streams); the state, the checks and the design are ``model``'s."""

    batchable = False

    def __init__(self, model, names):
        self.model, self.names = model, tuple(names)
        self.name = model.name
        self.input_limit = model.input_limit

    @property
    def outputs(self) -> tuple:
        return self.names

    def __call__(self, x) -> dict:
        o = self.model.process_all(x)
        return {k: o[k] for k in self.names}

    def process_all(self, x) -> dict:
        return self(x)

    def prepare(self, x) -> None:
        prep = getattr(self.model, "prepare", None)
        if prep is not None:
            prep(x)

    def reset(self) -> None:
        self.model.reset()

    def state_dict(self) -> dict:
        return self.model.state_dict()

    def load_state_dict(self, sd: dict) -> None:
        self.model.load_state_dict(sd)

    def design_identity(self) -> dict:
        return {**self.model.design_identity(), "outputs": list(self.names)}

    def output_info(self) -> dict:
        info = self.model.output_info()
        return {k: info[k] for k in self.names}


class Summary:
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
