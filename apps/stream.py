"""``rtamt stream``: run a model live on the real-time runtime and print its accounting.

Input: ``demo`` (built-in signal, once unless ``--seconds``), an audio file (WAV, FLAC, OGG,
...: :class:`rtamt.signals.AudioReader`; the whole file unless ``--seconds``), or a sound
device (until Ctrl-C or ``--seconds``; name substring or index; ``--hostapi JACK`` to
pick the host API).  Prints one stats line per second (``--json``: one JSON object per
line) and a final summary.

``--per-channel``: every input channel is its own stream (named ``ch0``, ``ch1``, ...) on
an :class:`rtamt.scheduler.Scheduler` (``--threads`` workers, ``--budget-ms`` per stream),
fed by a :class:`rtamt.scheduler.FanOut`; one stats line per stream (``ch0: blocks ...``,
at the end ``final ch0: blocks ...``; JSON objects carry the stream's ``name``).
``--out DIR`` (only with ``--per-channel``) writes each stream's output to ``DIR/ch<c>/``
(:class:`rtamt.io.OutputWriter`: ``<model>.npy`` time last, plus ``fs``, ``block_start``
and ``block_frames`` per block, and ``rtamt.json``) when the run ends normally.
"""
from __future__ import annotations

import collections
import json
import os
import signal
import sys
import time

import numpy as np

from rtamt.models import MODELS
from rtamt.runtime import Runtime

from .args import FS_LIMITS, add_block_arguments, float_range, int_range, positive_float
from .files import add_partial_argument
from .inputs import (
    DEMO_SECONDS,
    EXIT_SOURCE_FAULT,
    Live,
    add_per_channel_arguments,
    add_source_arguments,
    check_per_channel,
    open_input,
    open_per_channel,
)
from .modelopts import add_fhigh_argument, model_kwargs


def add_arguments(p):
    p.add_argument("--input", default="demo",
                   help="'demo' (default), an audio file (WAV, FLAC, OGG, ...), 'default' (the "
                        "default input device, of --hostapi if given), or an input device "
                        "(name substring or index)")
    p.add_argument("--hostapi", default=None, help="host API of the device (e.g. JACK, ALSA)")
    p.add_argument("--model", default="dau1997", choices=sorted(MODELS))
    p.add_argument("--config", default=None, help="model configuration")
    p.add_argument("--fs", type=float_range(*FS_LIMITS), default=None,
                   help="sample rate for demo / device (default 48000); a file must have it")
    p.add_argument("--channels", type=int_range(1, 256), default=1, help="demo / device channels")
    add_block_arguments(p, 256, 256, blocksize_min=0,
                        blocksize_help="callback / source block size (0 = device decides, "
                                       "may vary)")
    p.add_argument("--seconds", type=positive_float(), default=None,
                   help="stop after this many seconds of audio (default: a file runs to its "
                        f"end, the demo runs once ({DEMO_SECONDS:g} s), a device until "
                        "Ctrl-C)")
    p.add_argument("--fast", action="store_true",
                   help="file/demo: as fast as possible (backpressure, nothing dropped)")
    p.add_argument("--policy", default=None, choices=["drop-oldest", "drop-newest"],
                   help="overload policy (default drop-oldest live, drop-newest with --fast)")
    p.add_argument("--max-backlog", type=positive_float(10.0), default=0.25,
                   help="seconds (drop-oldest)")
    add_source_arguments(p)
    add_partial_argument(p)
    add_fhigh_argument(p)
    p.add_argument("--json", action="store_true", help="print stats as JSON lines")
    add_per_channel_arguments(p)
    p.add_argument("--out", "--output", dest="out", default=None, metavar="DIR",
                   help="--per-channel only: write each stream's model output to DIR/ch<c>/ "
                        "(one output set per channel: <model>.npy, time last, float64, and "
                        "rtamt.json) at the end of a normal run; without --per-channel this "
                        "is refused (use rtamt process for one file)")


class _Outputs:
    """``--out``: each stream's results queued by a subscriber (worker thread, an append)
    and written by the app's thread to ``DIR/<stream name>/`` (:class:`OutputWriter`)."""

    def __init__(self, out: str, streams: list):
        from rtamt.io import OutputWriter

        os.makedirs(out, exist_ok=True)
        self.q = {s.name: collections.deque() for s in streams}
        self.starts = {s.name: [] for s in streams}
        self.frames = {s.name: [] for s in streams}
        self.w = {}
        try:
            for s in streams:
                self.w[s.name] = OutputWriter(os.path.join(out, s.name))
        except BaseException:
            self.abort()
            raise
        for s in streams:
            s.subscribe(self.q[s.name].append)

    def flush(self) -> None:
        for name, q in self.q.items():
            while q:
                r = q.popleft()
                blk = {}
                for k, v in r.outputs.items():
                    blk.update(v if isinstance(v, dict) else {k: v})
                self.w[name].write(blk)
                self.starts[name].append(r.start)
                self.frames[name].append(r.frames)

    def commit(self, info: dict, fs: float) -> None:
        self.flush()
        for c, (name, w) in enumerate(self.w.items()):
            w.add_meta(fs=np.float64(fs), block_start=np.asarray(self.starts[name], np.int64),
                       block_frames=np.asarray(self.frames[name], np.int64))
            w.commit({**info, "stream": name, "channel": c})

    def abort(self) -> None:
        for w in self.w.values():
            if not w.done:
                w.abort()


def _missed_hint(args, stats: list) -> None:
    """``--per-channel``: one line on stderr when blocks missed their latency budget, with
    the options that change it (a live run's misses are late outputs, not lost audio)."""
    missed = sum(st.misses for st in stats)
    if not missed:
        return
    blocks = sum(st.blocks for st in stats)
    budget = max(st.budget_us for st in stats) / 1e3
    p99 = max(st.latency_p99_ms for st in stats)
    worst = max(st.latency_max_ms for st in stats)
    print(f"rtamt stream: {missed} of {blocks} blocks missed their {budget:.3g} ms budget "
          f"(latency p99 {p99:.3g} ms, max {worst:.3g} ms); raise --budget-ms (e.g. "
          f"{max(2 * budget, 1.5 * worst):.2g}) or --block, or give more --threads",
          file=sys.stderr, flush=True)


def run(args) -> int:
    """Run ``rtamt stream``.  SIGTERM ends the run as Ctrl-C does (the input stopped, the
    final stats printed, ``--out`` committed), then one line on stderr and exit 143."""
    got = []

    def on_term(signum, frame):
        got.append(signum)
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, on_term)
    except ValueError:             # not the main thread: the default handling stays
        return _run(args)
    try:
        rc = _run(args)
    except KeyboardInterrupt:      # before the run's own handling (e.g. opening the input)
        if not got:
            raise
        rc = 0
    finally:
        signal.signal(signal.SIGTERM, old)
    if got:
        print("rtamt stream: SIGTERM: stopped", file=sys.stderr, flush=True)
        return 128 + signal.SIGTERM if rc == 0 else rc
    return rc


def _run(args) -> int:
    check_per_channel(args, "budget_ms", "threads", "admission", "out")
    policy = args.policy or ("drop-newest" if args.fast else "drop-oldest")
    kw = {} if args.config is None else {"config": args.config}
    kw.update(model_kwargs(args, MODELS[args.model]))
    seconds = args.seconds
    if seconds is None and args.input == "demo":
        seconds = DEMO_SECONDS              # the demo once
    try:
        inp = open_input(args.input, hostapi=args.hostapi, fs=args.fs, channels=args.channels,
                         blocksize=args.blocksize or 256, realtime=not args.fast,
                         seconds=seconds, max_channels=None, default_fs=48000.0,
                         block=args.block, force=args.force, partial=args.partial)
    except (LookupError, OSError, RuntimeError, ValueError) as e:
        print(f"rtamt stream: {e}", file=sys.stderr)
        return 2
    if inp.note:
        print(f"rtamt stream: {inp.note}", file=sys.stderr, flush=True)
    outputs = None
    if args.per_channel:
        def open_one(sched, c, name, **skw):
            return sched.open(args.model, inp.fs, args.block, model_kwargs=kw or None,
                              name=name, policy=policy, max_backlog_s=args.max_backlog, **skw)

        rt = open_per_channel(args, inp, open_one)
        streams = rt.streams
        if args.out is not None:
            try:
                outputs = _Outputs(args.out, streams)
            except OSError as e:
                rt.stop("discard")
                print(f"rtamt stream: --out {args.out}: {e}", file=sys.stderr)
                return 2
    else:
        model = MODELS[args.model](inp.fs, **kw)
        rt = Runtime(model, inp.fs, channels=inp.channels, block=args.block, policy=policy,
                     max_backlog_s=args.max_backlog, source_timeout=args.source_timeout)
        streams = [rt]
    live = Live(inp, rt, blocksize=args.blocksize, reconnect=args.reconnect)

    def show(final=False):
        for s in streams:
            st = s.stats()
            if args.json:
                d = st.as_dict()
                d["final"] = final
                print(json.dumps(d), flush=True)
            else:
                tag = f"{st.name}: " if args.per_channel else ""
                print(("final " if tag else "final: ") * final + tag + st.line(), flush=True)

    def notify(msg):
        print(f"rtamt stream: {msg}", file=sys.stderr, flush=True)

    try:
        live.start()
        t0 = time.monotonic()          # count from the stream start (after warm-up)
        t_show = t0 + 1.0              # one stats line per second, input checked every 50 ms
        while True:
            if inp.source is not None:
                if live.join(0.05):
                    break
            elif args.seconds is None:        # a device: until Ctrl-C
                time.sleep(0.05)
            else:
                left = args.seconds - (time.monotonic() - t0)
                if left <= 0:
                    break
                time.sleep(min(0.05, left))
            if outputs is not None:
                outputs.flush()
            if live.poll(notify):
                break
            if time.monotonic() >= t_show:
                show()
                t_show += 1.0
        live.stop("drain" if rt.source_error is None else "discard")
    except KeyboardInterrupt:          # Ctrl-C ends a live run normally (exit 0)
        live.stop("discard")
    except (LookupError, RuntimeError, ValueError) as e:
        live.stop("discard")
        if outputs is not None:
            outputs.abort()
        print(f"rtamt stream: {e}", file=sys.stderr)
        return 2
    except BaseException:           # e.g. a closed stdout (BrokenPipeError): stop the input
        live.stop("discard")
        if outputs is not None:
            outputs.abort()
        raise
    show(final=True)
    if args.per_channel and not args.fast:      # --fast queues on purpose: no deadlines
        _missed_hint(args, [s.stats() for s in streams])
    failure = live.failure()
    if outputs is not None:
        if failure:
            outputs.abort()
        else:
            outputs.commit({"model": args.model, "config": args.config, "block": args.block,
                            "input": inp.label, "input_truncated": inp.note}, inp.fs)
    if failure:
        print(f"rtamt stream: {failure}", file=sys.stderr, flush=True)
        return EXIT_SOURCE_FAULT
    return 0
