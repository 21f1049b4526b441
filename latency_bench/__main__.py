"""``python -m latency_bench --model dau1997 --fs 48000 --block 64 --seconds 5 --json``

Measures the wall time of each processing call (``model(block)``) with
``time.perf_counter_ns`` on pre-generated blocks, after a warm-up that is timed
and reported separately (numba JIT compile or cache load, first-block state
allocation).  Nothing else is inside the timed region.  Python's garbage
collector stays enabled (a real stream has it too).

Reported: ``rtf`` = total processing time / audio duration; ``p50_us``, ``p99_us``,
``max_us`` per block; ``budget_us`` = block period; ``misses`` = blocks over budget.

``--signal silence-after-loud`` feeds 90 dB SPL noise for the first half and exact
digital zeros for the second, and reports both halves' p99 and their ratio
(denormal check).

Many streams on the scheduler (:mod:`latency_bench.streams`; block 256, budget 10 ms,
every core and the scheduler's default batch limit unless given)::

    python -m latency_bench --streams 20 --seconds 3              # paced, real time
    python -m latency_bench --find-capacity --max-streams 256     # largest N with 0 misses
    python -m latency_bench --threads-scaling --streams 32        # throughput, 1 vs 2 threads

``--cluster local|ADDRESS`` runs paced streams through an ``rtamt.cluster.Cluster`` beside
the local scheduler in the same run (added latency, capacity per worker, recovery time:
:mod:`latency_bench.cluster`; its own options, ``--cluster local --help``).

``--streams N`` runs ``N`` streams through ``rtamt.scheduler.Scheduler(threads=--threads)``
at real-time pace (one paced multichannel source thread, or ``--source per-stream``) and
reports per stream latency p50 / p99 / max (capture of a block's last sample to its
publication), misses (latency over ``--budget-ms``), drops (frames pushed but never
processed) and mean batch size, the worst stream, and process CPU use.  The JSON keeps
the single-stream keys (``p50_us`` ... are then the wall time of the call that computed
each block; ``n_blocks`` counts stream-blocks; ``misses`` and ``budget_us`` are the
latency budget's) and adds ``streams``, ``latency_p50_us`` (all blocks),
``latency_p99_us`` (the worst stream's p99), ``latency_max_us``, ``drops``, ``cpu_util``
(process CPU seconds per wall second, in cores; ``cpu_util_per_core`` divides by the
cores), ``capacity`` (``--find-capacity`` only, else null), ``per_stream`` and more.
In these modes ``--threads`` is the scheduler's worker threads (numba / BLAS use one
thread each) and ``--batch`` its ``max_batch``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _device_name(device: str) -> str:
    """``cpu (<model name>)`` or ``cuda (<GPU name>)``."""
    if device == "cuda":
        import torch
        return f"cuda ({torch.cuda.get_device_name()})"
    return f"cpu ({_cpu_name()})"


class _Parser(argparse.ArgumentParser):
    """Lists the models in ``--help`` (importing them only then: the thread-count variables
    must be set before numpy is imported by a run)."""

    def format_help(self):
        from rtamt.loudness.r128stream import METERS
        from rtamt.models import MODELS

        self.epilog = (f"models: {', '.join(sorted(MODELS))} (rtamt models shows their "
                       f"configurations and parameters); meters: {', '.join(sorted(METERS))} "
                       "(the EBU R128 meter, --channels 2 by default)")
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m latency_bench``."""
    from rtamt_apps.args import FS_LIMITS, MAX_FRAMES, float_range, int_range, positive_float

    p = _Parser(prog="latency_bench", description=(
        "Time one model's processing call per block (time.perf_counter_ns) on pre-generated "
        "blocks, after a warm-up timed and reported apart; report the real-time factor and "
        "the p50 / p99 / max time per block against the block period."))
    p.add_argument("--model", default="dau1997", help="model to time (default dau1997; see "
                   "the list below)")
    p.add_argument("--config", default=None,
                   help="model configuration (default: the model's own; see rtamt models)")
    p.add_argument("--fs", type=float_range(*FS_LIMITS), default=48000.0,
                   help="sample rate, Hz (default 48000)")
    p.add_argument("--block", type=int_range(1, MAX_FRAMES), default=None,
                   help="frames per processing call; its period is the budget (default 64; "
                        "256 with --streams)")
    p.add_argument("--seconds", type=positive_float(3600.0), default=5.0,
                   help="seconds of audio timed, after the warm-up (default 5)")
    p.add_argument("--batch", type=int_range(1, 1_000_000), default=None,
                   help="streams processed together in one call (default 1; with --streams: "
                        "the scheduler's max_batch default)")
    p.add_argument("--channels", type=int_range(1, 64), default=None,
                   help="independent input channels per stream (2 = stereo for moore2016; "
                        "default 1, 2 for the r128 meter)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="cpu (numba kernels, default) or cuda (the Triton kernels on the GPU: "
                        "reports kernel time, host-device copies and end-to-end block "
                        "latency apart; needs a CUDA device and pip install 'rtamt[gpu]')")
    p.add_argument("--backend", default=None, choices=["numba", "triton"],
                   help="with --streams / --find-capacity: the scheduler's kernels (default "
                        "numba on cpu, triton on cuda; triton on cpu runs Triton's "
                        "interpreter, which needs TRITON_INTERPRET=1: a check, not a timing)")
    p.add_argument("--dtype", default="float64", choices=["float32", "float64"],
                   help="sample and state precision (default float64)")
    p.add_argument("--threads", type=int_range(1, 1024), default=None,
                   help="torch / BLAS / numba threads (default 1); with --streams: the "
                        "scheduler's worker threads (default: every core; --threads-scaling "
                        "compares 1 with this, at least 2)")
    p.add_argument("--signal", default="noise", choices=["noise", "demo", "silence-after-loud"],
                   help="input: 70 dB SPL noise (default), the demo signal, or 90 dB SPL noise "
                        "then digital silence (denormal check: reports both halves' p99)")
    p.add_argument("--warmup-seconds", type=float_range(0.0, 600.0), default=0.5,
                   help="seconds of noise processed before timing, reported apart "
                        "(default 0.5)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    g = p.add_argument_group("many streams (rtamt.scheduler)")
    g.add_argument("--streams", type=int_range(1, 1_000_000), default=None, metavar="N",
                   help="run N streams at real-time pace through one Scheduler and report "
                        "per-stream latency, misses, drops, CPU and batch size (with "
                        "--find-capacity: the first N tried; --threads-scaling: default 16)")
    g.add_argument("--budget-ms", type=positive_float(10000.0), default=None,
                   help="latency budget of a block's last sample (capture to publication), "
                        "ms (default 10); a block over it is a miss")
    g.add_argument("--source", choices=["fanout", "per-stream"], default=None,
                   help="fanout (default): one paced thread pushes a (block, N) chunk per "
                        "period, column c to stream c; per-stream: one paced thread per "
                        "stream")
    g.add_argument("--history", type=int_range(0, 1024), default=None,
                   help="results each stream keeps (the scheduler's history; default: the "
                        "scheduler's, 1).  0 = subscribers only: the benchmark's own "
                        "subscriber records each block's latency and drops the outputs")
    g.add_argument("--probe-budget-ms", type=positive_float(10000.0), default=None,
                   help="open one more stream of the same model with this budget (e.g. 5 "
                        "next to N streams of 10 ms) and report its latency apart")
    g.add_argument("--realtime", type=int_range(0, 99), default=None, metavar="PRIO",
                   help="SCHED_FIFO priority of the scheduler's workers (default: the "
                        "scheduler's, 1; 0 = normal priority).  The source thread, like an "
                        "audio device's, runs one above them when they got it")
    g.add_argument("--find-capacity", action="store_true",
                   help="find the largest N with 0 misses and 0 drops: trials of --seconds "
                        "each on a fresh scheduler, doubling N, then bisection")
    g.add_argument("--max-miss-rate", type=float_range(0.0, 1.0), default=None,
                   metavar="RATE",
                   help="--find-capacity: a trial passes with misses up to RATE of its "
                        "stream-blocks (default 0: none; drops never pass)")
    g.add_argument("--max-streams", type=int_range(1, 1_000_000), default=None,
                   help="largest N --find-capacity tries (default 256)")
    g.add_argument("--trace", default=None, metavar="FILE",
                   help="write every processing call (start, end, deadline, batch, worker), "
                        "every source push and every call of a bare-model probe thread to "
                        "FILE (CSV; --find-capacity: one file per trial, FILE's stem + "
                        "'.trialNN'), and attribute each late call to its cause")
    g.add_argument("--threads-scaling", action="store_true",
                   help="throughput (not paced): N streams x --seconds of audio queued, "
                        "timed to the last result, on 1 worker thread and on --threads; "
                        "prints stream-blocks per second and their ratio, also for the "
                        "models alone in plain threads")
    return p


def _model_names():
    """The models and the meters (:data:`rtamt.loudness.r128stream.METERS`) by name."""
    from rtamt.loudness.r128stream import METERS
    from rtamt.models import MODELS  # (numpy: after the thread-count variables are set)

    return {**MODELS, **METERS}


def _is_meter(name: str) -> bool:
    """Is ``name`` a meter (one programme per object: it does not batch)?"""
    from rtamt.loudness.r128stream import METERS
    return name in METERS


STREAM_ONLY = ("budget_ms", "source", "max_streams", "realtime", "max_miss_rate", "trace")


def _defaults(p, args) -> bool:
    """Fill the mode-dependent defaults; True for a many-stream run."""
    multi = args.streams is not None or args.find_capacity or args.threads_scaling
    if args.channels is None:
        args.channels = 2 if _is_meter(args.model) else 1
    if not multi:
        for k in STREAM_ONLY:
            if getattr(args, k) is not None:
                p.error(f"argument --{k.replace('_', '-')}: needs --streams, --find-capacity "
                        "or --threads-scaling")
        args.block = 64 if args.block is None else args.block
        args.batch = 1 if args.batch is None else args.batch
        args.threads = 1 if args.threads is None else args.threads
        return False
    if args.find_capacity and args.threads_scaling:
        p.error("argument --threads-scaling: not allowed with --find-capacity")
    if args.trace is not None and args.threads_scaling:
        p.error("argument --trace: not allowed with --threads-scaling (nothing is paced)")
    if args.trace is not None:
        d = os.path.dirname(os.path.abspath(args.trace))
        if not os.path.isdir(d) or not os.access(d, os.W_OK):
            p.error(f"argument --trace: cannot write into {d}")
    if args.signal != "noise":
        p.error("argument --signal: only noise with --streams (every stream gets its own)")
    args.block = 256 if args.block is None else args.block
    if args.batch is None:
        import inspect

        from rtamt.scheduler import Scheduler
        args.batch = inspect.signature(Scheduler).parameters["max_batch"].default
    args.budget_ms = 10.0 if args.budget_ms is None else args.budget_ms
    args.source = args.source or "fanout"
    args.max_streams = 256 if args.max_streams is None else args.max_streams
    if args.realtime is None:
        from rtamt.engine.realtime import DEFAULT_PRIORITY
        args.realtime = DEFAULT_PRIORITY
    args.realtime = args.realtime or None          # 0: normal priority
    if args.threads_scaling:
        args.threads = max(2, args.threads or os.cpu_count() or 1)
    elif args.threads is None:
        args.threads = os.cpu_count() or 1
    return True


def _main_streams(args) -> int:
    """--streams / --find-capacity / --threads-scaling (see :mod:`latency_bench.streams`)."""
    import torch

    torch.set_num_threads(1)
    from rtamt.engine.denormal import ensure_ftz

    from . import streams as ms

    ensure_ftz()
    head = {"model": args.model, "config": args.config, "fs": args.fs, "block": args.block,
            "batch": args.batch, "channels": args.channels, "dtype": args.dtype,
            "signal": args.signal, "device": _device_name(args.device),
            "backend": args.backend or ("triton" if args.device == "cuda" else "numba"),
            "threads": args.threads, "python": platform.python_version()}
    log = (lambda m: print(m, file=sys.stderr, flush=True)) if args.json else \
        (lambda m: print(m, flush=True))
    if args.threads_scaling:
        res = dict(head, **ms.threads_scaling(args, log))
    elif args.find_capacity:
        res = dict(head, **ms.find_capacity(args, log))
    else:
        res = dict(head, **ms.run_trial(args, args.streams, args.trace), capacity=None)
    if args.json:
        print(json.dumps(res))
    elif not args.threads_scaling:
        ms.print_report(res)
    return 1 if res.get("errors") else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a == "--cluster" or a.startswith("--cluster=") for a in argv):
        from . import cluster  # streams through rtamt.cluster (Ray)
        return cluster.main(argv)
    p = build_parser()
    args = p.parse_args(argv)
    multi = _defaults(p, args)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = "1" if multi else str(args.threads)
    if args.model not in _model_names():
        p.error(f"argument --model: unknown model {args.model!r}; choose from "
                f"{', '.join(sorted(_model_names()))}")
    if args.backend is not None and not multi:
        p.error("argument --backend: only with --streams / --find-capacity (one model: "
                "--device cpu is numba, --device cuda is triton)")
    if args.device == "cuda" or args.backend == "triton":
        if args.threads_scaling:
            p.error("argument --threads-scaling: measures CPU worker threads (numba); "
                    "not with --device cuda or --backend triton")
        if args.device == "cuda" and args.backend == "numba":
            p.error("argument --backend: numba kernels run on the cpu only")
        from rtamt.engine.backend import RtamtBackendError, resolve
        try:
            resolve("triton", args.device)
        except RtamtBackendError as e:       # one line, not the usage: the option is fine
            print(f"latency_bench: error: --device {args.device} --backend triton: {e}",
                  file=sys.stderr)
            return 2
    if multi:
        return _main_streams(args)

    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from rtamt.engine.denormal import ensure_ftz
    from rtamt.models import MODELS, processor_by_name
    from rtamt.signals import demo_signal, rms_for_spl

    fs = args.fs
    n = int(round(args.seconds * fs)) // args.block * args.block
    if n == 0:
        p.error(f"argument --seconds: {args.seconds:g} s is shorter than one --block "
                f"({args.block} frames at {fs:g} Hz)")
    rng = np.random.default_rng(0)
    if args.signal == "demo":
        x = np.resize(demo_signal(fs), n)
    elif args.signal == "noise":
        x = rng.standard_normal(n) * rms_for_spl(70)
    else:
        x = np.zeros(n)
        x[: n // 2] = rng.standard_normal(n // 2) * rms_for_spl(90)
    x = np.broadcast_to(x, (args.batch, n)) if args.batch > 1 else x
    x = np.ascontiguousarray(x).astype(args.dtype)
    if args.channels > 1:
        # independent signals per channel (a stereo stream is not two copies of one)
        extra = [np.roll(x, (c * n) // (args.channels + 1), axis=-1) * (1.0 - 0.1 * c)
                 for c in range(1, args.channels)]
        x = np.ascontiguousarray(np.stack([x] + extra, axis=-2))
    blocks = [np.ascontiguousarray(x[..., i:i + args.block]) for i in range(0, n, args.block)]

    kw = {} if args.config is None else {"config": args.config}
    if args.device == "cuda":
        if args.model not in MODELS:
            print(f"latency_bench: error: --device cuda: {args.model}: no Triton path yet",
                  file=sys.stderr)
            return 2
        return _main_cuda(args, MODELS[args.model], kw, blocks, fs)
    if args.batch > 1 and _is_meter(args.model):
        p.error(f"argument --batch: the {args.model} meter measures one programme per "
                "call (it does not batch)")
    t0 = time.perf_counter()
    model = processor_by_name(args.model, fs, args.channels, kw)
    ensure_ftz()
    t1 = time.perf_counter()
    model(blocks[0])  # JIT compile / cache load + state allocation
    t2 = time.perf_counter()
    nw = max(1, int(args.warmup_seconds * fs / args.block))
    wx = (rng.standard_normal(x.shape[:-1] + (args.block,)) * rms_for_spl(70)).astype(args.dtype)
    for _ in range(nw):
        model(wx)
    t3 = time.perf_counter()
    model.reset()

    times = np.empty(len(blocks), dtype=np.int64)
    clock = time.perf_counter_ns
    for i, b in enumerate(blocks):
        s = clock()
        model(b)
        times[i] = clock() - s
    us = times / 1e3
    budget = args.block / fs * 1e6
    res = {
        "model": args.model,
        "config": getattr(model, "config", None),
        "fs": fs,
        "block": args.block,
        "batch": args.batch,
        "channels": args.channels,
        "dtype": args.dtype,
        "signal": args.signal,
        "device": f"cpu ({_cpu_name()})",
        "threads": args.threads,
        "n_blocks": len(blocks),
        "seconds": n / fs,
        "rtf": float(times.sum() / 1e9 / (n / fs)),
        "mean_us": float(us.mean()),
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "max_us": float(us.max()),
        "budget_us": budget,
        "p99_budget_fraction": float(np.percentile(us, 99) / budget),
        "misses": int((us > budget).sum()),
        "build_s": t1 - t0,
        "warmup_first_call_s": t2 - t1,
        "warmup_s": t3 - t1,
        "python": platform.python_version(),
    }
    if args.signal == "silence-after-loud":
        h = len(us) // 2
        res["p99_signal_us"] = float(np.percentile(us[:h], 99))
        res["p99_silence_us"] = float(np.percentile(us[h:], 99))
        res["median_signal_us"] = float(np.median(us[:h]))
        res["median_silence_us"] = float(np.median(us[h:]))
        res["silence_p99_ratio"] = res["p99_silence_us"] / res["p99_signal_us"]
    return _print_single(res, args.json)


def _print_single(res: dict, as_json: bool) -> int:
    """Print a single-stream report (one JSON object, or one line per key)."""
    if as_json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:22s} {v:.4g}" if isinstance(v, float) else f"{k:22s} {v}")
    return 0


def _main_cuda(args, model_cls, kw, blocks, fs) -> int:
    """``--device cuda``: the model on the Triton backend on the GPU; per block, timed with
    CUDA events on one stream: the host-to-device copy of the input (from pinned memory),
    the model call (kernels), the device-to-host copy of the output, and the end-to-end
    latency from the start of the input copy to the output on the host."""
    import numpy as np
    import torch

    from rtamt.engine.backend import RtamtBackendError

    dev = torch.device("cuda")
    try:
        model = model_cls(fs, **kw, device="cuda")
    except (TypeError, RtamtBackendError) as e:    # a model without the GPU path yet
        print(f"latency_bench: error: --device cuda: {args.model}: {e}", file=sys.stderr)
        return 2
    pinned = torch.empty(blocks[0].shape, dtype=getattr(torch, args.dtype)).pin_memory()
    dev_in = torch.empty(pinned.shape, dtype=pinned.dtype, device=dev)
    model(dev_in.copy_(pinned.copy_(torch.from_numpy(blocks[0]))))      # compile, state
    torch.cuda.synchronize()
    model.reset()
    ev = [[torch.cuda.Event(enable_timing=True) for _ in range(4)] for _ in blocks]
    out_host = None
    wall = np.empty(len(blocks))
    for i, b in enumerate(blocks):
        t = time.perf_counter()
        e = ev[i]
        pinned.copy_(torch.from_numpy(b))
        e[0].record()
        dev_in.copy_(pinned, non_blocking=True)
        e[1].record()
        y = model(dev_in)
        e[2].record()
        if out_host is None:
            out_host = torch.empty(y.shape, dtype=y.dtype).pin_memory()
        out_host.copy_(y, non_blocking=True)
        e[3].record()
        e[3].synchronize()
        wall[i] = time.perf_counter() - t
    h2d = np.array([e[0].elapsed_time(e[1]) for e in ev]) * 1e3      # µs
    ker = np.array([e[1].elapsed_time(e[2]) for e in ev]) * 1e3
    d2h = np.array([e[2].elapsed_time(e[3]) for e in ev]) * 1e3
    e2e = wall * 1e6
    budget = args.block / fs * 1e6

    def pct(a):
        return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)),
                "max": float(a.max())}
    res = {"model": args.model, "fs": fs, "block": args.block, "batch": args.batch,
           "channels": args.channels, "dtype": args.dtype, "device": torch.cuda.get_device_name(),
           "backend": "triton", "n_blocks": len(blocks),
           "rtf": float(wall.sum() / (len(blocks) * args.block / fs)),
           "h2d_us": pct(h2d), "kernel_us": pct(ker), "d2h_us": pct(d2h),
           "end_to_end_us": pct(e2e), "budget_us": budget,
           "misses": int((e2e > budget).sum()), "python": platform.python_version()}
    return _print_single(res, args.json)


if __name__ == "__main__":
    sys.exit(main())
