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

``--out DIR`` (only with ``--per-channel``) stores each stream's outputs in ``DIR/ch<c>/``,
with ``rtamt process``'s options and defaults (:mod:`rtamt_apps.outputs`): the model's last
stage (every output of the loudness models; ``--outputs``), pooled to 100 frames per second
(``--frame-rate``, ``--decimate``, ``--pool``), in float32 (``--store-dtype``), modulation
outputs packed (``--padded``).  Each ``DIR/ch<c>/`` is laid out as ``rtamt process --out
DIR`` writes it (``NAME.npy`` time last, the metadata, ``rtamt.json``; the same values as
``rtamt process`` gives for that channel), plus ``block_start`` / ``block_frames`` (int64,
one per processed block: a jump in ``block_start`` is input dropped or skipped before
processing); ``DIR/rtamt.json`` describes the run.  One line on stderr says what is stored,
its estimated size and the memory it takes; another, at the end, what was written.

* Size: estimated before the run (a file: from its length; the demo or a device with
  ``--seconds``: from that) and refused (exit 2) above ``--max-output-gb`` (default 4) or
  the free space unless ``--force``.  A device without ``--seconds`` is told in MB per
  minute; it is refused when the free space holds less than :data:`DEVICE_MIN_MINUTES` of
  output, and it stops (keeping what was written, exit 1) when less than
  :data:`DISK_MARGIN_BYTES` (or a minute of output) remains free, or the output reaches
  ``--max-output-gb``.
* Memory: bounded, whatever the run's length.  A stream's subscriber
  (:class:`rtamt.io.StreamTap`, on the scheduler's delivery thread) only copies each
  block's outputs into a ring of preallocated slots (at most :data:`TAP_MAX_BYTES` per
  stream); one writer thread pools them and appends them to the files.  With ``--fast`` a
  full ring makes the stream wait (backpressure: nothing is dropped); live, a writer that
  cannot keep up ends the run with an error (exit 1) instead of leaving a hole.
* Nothing half-written: everything is written into a hidden directory beside ``DIR``
  (:class:`rtamt.io.OutputSet`) and renamed into place when the run ends normally (at the
  end of the input, after ``--seconds``, on Ctrl-C or ``SIGTERM``, which then exits with
  143).  A write that fails (a full disk, ``EFBIG``, ``MemoryError``), a lost block, or a
  ``--fast`` run that did not process every frame of the input exits with 1 and one line
  saying what had been written; nothing is left under ``DIR``, and an older output there
  is unchanged.  An input that fails (exit 3) leaves no output either.
"""
from __future__ import annotations

import json
import math
import pathlib
import signal
import sys
import threading
import time

import numpy as np

from rtamt.models import MODELS
from rtamt.modulation import to_padded
from rtamt.runtime import Runtime

from .args import FS_LIMITS, UsageError, add_block_arguments, float_range, int_range, positive_float
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
from .outputs import (
    OUTPUT_OPTIONS,
    NoOutput,
    Selected,
    add_output_arguments,
    check_size,
    describe,
    free_bytes,
    gb,
    plan_outputs,
)
from .warm import warm_chains

#: audio a stream's tap holds between its worker and the writer, s (at least
#: :data:`TAP_MIN_SLOTS` blocks, at most :data:`TAP_MAX_BYTES` per stream)
TAP_SECONDS = 0.5
TAP_MIN_SLOTS = 4
TAP_MAX_BYTES = 32e6
#: how often the writer thread looks for new blocks when it has nothing to do, s
WRITER_POLL_S = 0.005
#: an open-ended run stops when less than this is free on the destination's file system
#: (or less than DISK_MARGIN_MINUTES of output, if that is more), bytes
DISK_MARGIN_BYTES = 256e6
DISK_MARGIN_MINUTES = 1.0
#: an open-ended run is refused (unless --force) when the free space holds fewer minutes
#: of output than this beyond the margin
DEVICE_MIN_MINUTES = 10.0
#: exit status when --out could not be kept (a write error, a lost block, an incomplete
#: output) or an open-ended run had to stop for want of space
EXIT_OUTPUT = 1


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
                                       "may vary)",
                        force_help="; with --out, an output larger than --max-output-gb or "
                                   "the free space")
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
                   help="--per-channel only: store each stream's outputs in DIR/ch<c>/ as "
                        "rtamt process --out DIR does (the options below; default: the last "
                        "stage, 100 frames/s RMS, float32); the size is estimated and checked "
                        "first; memory stays bounded; the whole of DIR appears when the run "
                        "ends normally, nothing of it after a failure (exit 1)")
    g = p.add_argument_group("--out options (as rtamt process)")
    add_output_arguments(g, max_help="; a device run without --seconds stops there, "
                                     "keeping what it wrote (exit 1)")


class _Recorder:
    """``--out``: every stream's outputs stored in ``DIR/<stream name>/`` (one
    :class:`rtamt.io.OutputSet`, committed as a whole), in bounded memory.

    Each stream's subscriber is a :class:`rtamt.io.StreamTap`: on the delivery thread it only
    copies the block's outputs into a preallocated slot (no allocation, no lock).  One
    writer thread (this object's) takes the slots in order, pools them to frames
    (:meth:`Plan.reduce <rtamt_apps.outputs.Plan.reduce>`: the same pooling as
    ``rtamt process``), appends them to the stream's files with the block's ``start`` and
    ``frames`` (``block_start``, ``block_frames``) and frees the slot.  With ``--fast`` a
    full tap makes the stream wait (backpressure: nothing lost); live, a full tap loses
    the block, which ends the run with an error (:attr:`failure`).

    ``failure``: why the output cannot be kept (a write error, a lost block), set by the
    writer thread; ``stop``: why an open-ended run (a device without ``--seconds``) has to
    stop (free space below :data:`DISK_MARGIN_BYTES`, the output at ``--max-output-gb``);
    what was written until then is kept.
    """

    def __init__(self, args, plan, layout: dict, streams: list, frames: int | None):
        from rtamt.io import OutputSet, StreamTap

        self.args, self.plan, self.frames = args, plan, frames
        self.dest = pathlib.Path(args.out)
        self.existed = self.dest.exists()
        per_block = sum(math.prod(lead) * cap * np.dtype(dt).itemsize
                        for lead, cap, dt in layout.values())
        period = streams[0].block / streams[0].fs
        slots = max(TAP_MIN_SLOTS, min(math.ceil(TAP_SECONDS / period),
                                       int(TAP_MAX_BYTES // max(per_block, 1))))
        self.names = [s.name for s in streams]
        self.out = OutputSet(self.dest, self.names, lengths=plan.lengths,
                             preallocate=frames is not None)
        try:
            self.taps = [StreamTap(layout, slots, wait=args.fast, name=n) for n in self.names]
        except BaseException:
            self.out.abort()
            raise
        self.decim = [plan.decimators() for _ in streams]
        self.written = [0] * len(streams)       # input frames whose outputs are written
        self.gaps = [0] * len(streams)          # blocks after dropped / skipped input
        self._next: list = [None] * len(streams)  # the start of each stream's next block
        self.failure: str | None = None
        self.stop: str | None = None
        self.open_ended = frames is None
        self.margin = max(DISK_MARGIN_BYTES, DISK_MARGIN_MINUTES * 60 * plan.per_second)
        self.limit = None if args.force else args.max_output_gb * 1e9
        self._done = threading.Event()
        self._quit = False
        self._thread = threading.Thread(target=self._run, name="rtamt-writer", daemon=True)
        for s, t in zip(streams, self.taps):
            s.subscribe(t)

    @property
    def nbytes(self) -> int:
        """Memory of the taps (the blocks between the workers and the writer), bytes."""
        return sum(t.nbytes for t in self.taps)

    def start(self) -> None:
        self._thread.start()

    # ------------------------------------------------------------ the writer thread
    def _run(self) -> None:
        try:
            t_watch = time.monotonic()
            while not self._quit:
                done = self._done.is_set()       # read before the taps are looked at
                busy = False
                for c, tap in enumerate(self.taps):
                    for _ in range(tap.pending()):
                        self._write(c, tap)
                        busy = True
                    if tap.error is not None and self.failure is None:
                        self._fail(tap.error)
                if self.failure is not None:
                    return
                if self.open_ended and time.monotonic() >= t_watch:
                    self._watch()
                    t_watch = time.monotonic() + 1.0
                if not busy:
                    if done:
                        return
                    time.sleep(WRITER_POLL_S)
        except BaseException as e:  # noqa: BLE001 - reported by the app's thread
            self._fail(f"{type(e).__name__}: {' '.join(str(e).split())}"
                       if isinstance(e, MemoryError) or not str(e) else
                       " ".join(str(e).split()))

    def _write(self, c: int, tap) -> None:
        b = tap.oldest()
        block = {k: self.plan.reduce(k, v, self.decim[c][k]) for k, v in b.outputs.items()}
        block["block_start"] = np.array([b.start], np.int64)
        block["block_frames"] = np.array([b.frames], np.int64)
        try:
            self.out[self.names[c]].write(block)
        except OSError as e:
            raise OSError(f"{self.names[c]}: cannot write: {e.strerror or e}") from None
        tap.release()
        if b.gap or (self._next[c] is not None and b.start != self._next[c]):
            self.gaps[c] += 1
        self._next[c] = b.start + b.frames
        self.written[c] += b.frames

    def _fail(self, why: str) -> None:
        self.failure = why
        for t in self.taps:
            t.cancel()                  # a producer waiting for room goes on (and loses)

    def _watch(self) -> None:
        """An open-ended run: stop below the free-space margin or at --max-output-gb."""
        if self.stop is not None:
            return
        if self.limit is not None and self.out.nbytes >= self.limit:
            self.stop = (f"the output reached --max-output-gb {self.args.max_output_gb:g} "
                         f"({gb(self.out.nbytes)})")
            return
        free = free_bytes(self.dest)
        if free is not None and free < self.margin:
            self.stop = (f"only {gb(free)} left free on the file system of {self.dest.parent} "
                         f"(the run stops below {gb(self.margin)})")

    # -------------------------------------------------------------- the app's thread
    def finish(self) -> None:
        """After the streams stopped (no more blocks): write what the taps hold, then
        stop the writer thread."""
        self._done.set()
        self._thread.join()

    def progress(self, fs: float) -> str:
        """``'ch0 1.25 s, ch1 1.25 s'``: audio whose outputs were written, per stream."""
        return ", ".join(f"{n} {w / fs:.3g} s" for n, w in zip(self.names, self.written))

    def incomplete(self, streams: list, expected: int | None) -> str | None:
        """Why the output does not hold every processed block (or, with ``expected``,
        every frame of the input); None when it does."""
        for s, tap, w in zip(streams, self.taps, self.written):
            st = s.stats()
            if tap.lost_frames:
                return tap.error or f"{s.name}: {tap.lost_frames} frames not kept"
            if tap.blocks != st.blocks or w != st.frames_processed:
                return (f"{s.name}: {w} of the {st.frames_processed} frames processed "
                        "reached the output")
            if expected is not None and st.frames_processed != expected:
                return (f"{s.name}: {st.frames_processed} of the input's {expected} frames "
                        f"were processed ({st.dropped_frames} dropped, {st.skipped_frames} "
                        f"skipped, {st.rejected_blocks} blocks rejected)")
        return None

    def commit(self, meta: dict, info: dict, member_info: dict) -> None:
        for n in self.names:
            self.out[n].add_meta(**meta)
        self.out.commit(info, member_info)

    def abort(self) -> None:
        """Drop everything written (the destination is left as it was) and stop the
        writer thread."""
        self._quit = True
        for t in self.taps:
            t.cancel()
        self._done.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5.0)
        if not self.out.done:
            self.out.abort()


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
        return _run_guarded(args)
    try:
        rc = _run_guarded(args)
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


def _run_guarded(args) -> int:
    """:func:`_run`, with a ``MemoryError`` anywhere (opening the streams, the taps, a
    model) one line and exit 1; ``--out`` is removed on the way out (nothing written)."""
    try:
        return _run(args)
    except MemoryError as e:
        what = " ".join(str(e).split()) or "MemoryError"
        print(f"rtamt stream: out of memory ({what})"
              + (f"; nothing written to {args.out}" if args.out else ""), file=sys.stderr)
        return EXIT_OUTPUT


def _source_frames(src) -> int | None:
    """Frames a demo / file source will push (None: until stopped)."""
    total = src.total
    return total if total is None or src.loop else min(total, src.length)


def _plan_out(args, inp, kw: dict):
    """``--out``: what each stream stores and how big it is, from a model made here.

    Returns ``(plan, layout, model, select, frames)``: the :class:`Plan` with the exact
    size (the leading shapes of one block's outputs), the tap layout ``{name: (lead,
    capacity, dtype)}`` of the outputs as the stream computes them, the model (for the
    metadata), whether the stream must run a :class:`Selected` processor (outputs other
    than what the model returns per block), and the input's length in frames (None: a
    device without ``--seconds``).  The size is refused here (:class:`UsageError`) above
    ``--max-output-gb`` or the free space, or, open-ended, when the free space holds less
    than :data:`DEVICE_MIN_MINUTES` of output, unless ``--force``."""
    if inp.source is not None:
        frames = _source_frames(inp.source)
    else:
        frames = None if args.seconds is None else int(round(args.seconds * inp.fs))
    model = MODELS[args.model](inp.fs, **kw)
    plan = plan_outputs(args, model, inp.fs, frames, copies=inp.channels)
    x = np.zeros(args.block)
    every = model.process_all(x)
    leads = {k: (to_padded(every[k], plan.coeffs) if k == "modfb" and plan.padded
                 else every[k]).shape[:-1] for k in plan.names}
    plan = plan_outputs(args, model, inp.fs, frames, leads=leads, copies=inp.channels)
    given = model(x)
    select = not set(plan.names) <= (set(given) if isinstance(given, dict)
                                     else {model.outputs[-1]})
    layout = {k: (every[k].shape[:-1], math.ceil(args.block * plan.rates[k] / inp.fs) + 2,
                  every[k].dtype) for k in plan.names}
    if frames is not None:
        check_size(args, plan.est, args.out)
    elif not args.force:
        dest = pathlib.Path(args.out)
        free = free_bytes(dest)
        margin = max(DISK_MARGIN_BYTES, DISK_MARGIN_MINUTES * 60 * plan.per_second)
        need = margin + DEVICE_MIN_MINUTES * 60 * plan.per_second
        if free is not None and free < need:
            raise UsageError(
                f"--out: a run without --seconds writes about {gb(60 * plan.per_second)} per "
                f"minute; the file system of {dest.parent} has {gb(free)} free, less than "
                f"{DEVICE_MIN_MINUTES:g} minutes of output beyond the {gb(margin)} kept "
                "free; give --seconds, free some space, keep less (--outputs, "
                "--frame-rate), or give --force")
    return plan, layout, model, select, frames


def _out_line(args, plan, rec, channels: int) -> str:
    """The line saying what ``--out`` stores, how big and in how much memory."""
    what = f"{', '.join(plan.names)} of {channels} channel{'s' * (channels > 1)}"
    frames = plan.describe_frames()
    what += f" ({frames}; {plan.store.name})" if frames else f" (every sample; {plan.store.name})"
    if rec.open_ended:
        size = (f"about {gb(60 * plan.per_second)} per minute of input; the run stops, "
                f"keeping what was written, when less than {gb(rec.margin)} is left free"
                + ("" if rec.limit is None else
                   f" or the output reaches --max-output-gb {args.max_output_gb:g}"))
    else:
        size = f"about {gb(plan.est)}"
    return (f"rtamt stream: --out {args.out}: {what}: {size}; {gb(rec.nbytes)} of memory "
            "between the streams and the writer")


def _run(args) -> int:
    check_per_channel(args, "budget_ms", "threads", "admission", "out")
    if args.out is None:
        for opt in OUTPUT_OPTIONS + ("padded",):
            if getattr(args, opt, None) not in (None, False):
                raise UsageError(f"argument --{opt.replace('_', '-')}: only with --out")
    elif args.out.lower().endswith(".npz"):
        raise UsageError("argument --out: a directory (one output per channel, DIR/ch<c>/), "
                         "not a .npz file")
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
    rec = None
    model = MODELS[args.model](inp.fs, **kw)
    # kernels loaded (or compiled) before the first block; one stream per channel takes 1
    warm_chains({args.model: model}, np.float64, 1 if args.per_channel else inp.channels)
    try:
        if args.per_channel:
            select = False
            if args.out is not None:
                try:
                    plan, layout, probe, select, frames = _plan_out(args, inp, kw)
                except NoOutput as e:
                    print(f"rtamt stream: {e}", file=sys.stderr)
                    return 2

            def open_one(sched, c, name, **skw):
                # the first stream runs the warmed model, the others new ones
                proc = model if c == 0 else MODELS[args.model](inp.fs, **kw)
                if select:
                    proc = Selected(proc, plan.names)
                return sched.open(proc, inp.fs, args.block, name=name, policy=policy,
                                  max_backlog_s=args.max_backlog, **skw)

            rt = open_per_channel(args, inp, open_one)
            streams = rt.streams
            if args.out is not None:
                try:
                    rec = _Recorder(args, plan, layout, streams, frames)
                except (OSError, MemoryError) as e:
                    rt.stop("discard")
                    why = f"{e}" if isinstance(e, OSError) else "out of memory for the taps"
                    print(f"rtamt stream: --out {args.out}: {why}", file=sys.stderr)
                    return 2 if isinstance(e, OSError) else EXIT_OUTPUT
                print(_out_line(args, plan, rec, len(streams)), file=sys.stderr, flush=True)
        else:
            rt = Runtime(model, inp.fs, channels=inp.channels, block=args.block, policy=policy,
                         max_backlog_s=args.max_backlog, source_timeout=args.source_timeout)
            streams = [rt]
        return _go(args, inp, rt, streams, rec, probe if rec is not None else None)
    finally:
        if rec is not None and not rec.out.done:
            rec.abort()
        if inp.source is not None:
            inp.source.stop()          # a file source closes its file (also when refused)


def _go(args, inp, rt, streams: list, rec, probe) -> int:
    """Run the input into ``rt`` until it ends (or Ctrl-C, or ``--seconds``), print the
    stats, and with ``--out`` finish the output (:func:`_finish_out`)."""
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

    ended = False                      # the input ran to its end (not Ctrl-C, not a fault)
    try:
        if rec is not None:
            rec.start()
        live.start()
        t0 = time.monotonic()          # count from the stream start (after warm-up)
        t_show = t0 + 1.0              # one stats line per second, input checked every 50 ms
        while True:
            if inp.source is not None:
                if live.join(0.05):
                    ended = True
                    break
            elif args.seconds is None:        # a device: until Ctrl-C
                time.sleep(0.05)
            else:
                left = args.seconds - (time.monotonic() - t0)
                if left <= 0:
                    ended = True
                    break
                time.sleep(min(0.05, left))
            if rec is not None and (rec.failure is not None or rec.stop is not None):
                break
            if live.poll(notify):
                break
            if time.monotonic() >= t_show:
                show()
                t_show += 1.0
        keep = rt.source_error is None and (rec is None or rec.failure is None)
        live.stop("drain" if keep else "discard")
    except KeyboardInterrupt:          # Ctrl-C ends a live run normally (exit 0)
        ended = False
        live.stop("discard")
    except (LookupError, RuntimeError, ValueError) as e:
        live.stop("discard")
        print(f"rtamt stream: {e}" + (f" (nothing written to {args.out})" if rec else ""),
              file=sys.stderr)
        return 2
    except MemoryError:
        live.stop("discard")
        print("rtamt stream: out of memory" + (f" (nothing written to {args.out})" if rec
                                               else ""), file=sys.stderr)
        return EXIT_OUTPUT
    except BaseException:           # e.g. a closed stdout (BrokenPipeError): stop the input
        live.stop("discard")
        raise
    show(final=True)
    if args.per_channel and not args.fast:      # --fast queues on purpose: no deadlines
        _missed_hint(args, [s.stats() for s in streams])
    failure = live.failure()
    rc = 0
    if rec is not None:
        rc = _finish_out(args, inp, streams, rec, probe, failure, ended)
    if failure:
        print(f"rtamt stream: {failure}", file=sys.stderr, flush=True)
        return EXIT_SOURCE_FAULT
    return rc


def _finish_out(args, inp, streams: list, rec, probe, failure, ended: bool) -> int:
    """Write what the taps still hold, then commit ``--out`` when it holds every block
    (with ``--fast`` on a file or the demo run to its end: every frame of the input), or
    remove it and say what was (not) written.  Returns the exit status (0, or
    :data:`EXIT_OUTPUT`)."""
    rec.finish()
    out = args.out
    kept = " (the older output there is unchanged)" if rec.existed else ""
    if failure:
        rec.abort()
        print(f"rtamt stream: --out {out}: nothing written{kept}", file=sys.stderr)
        return 0                      # the input's fault is the exit status
    why = rec.failure
    if why is None:
        expected = rec.frames if args.fast and ended and inp.source is not None else None
        why = rec.incomplete(streams, expected)
    if why is not None:
        done = rec.progress(inp.fs)
        rec.abort()
        print(f"rtamt stream: --out {out}: {why}; outputs of {done} of audio had been "
              f"written; nothing written to {out}{kept}", file=sys.stderr, flush=True)
        return EXIT_OUTPUT
    meta, side = describe(probe, args.model, inp.fs, rec.plan)
    info = {**side, "block": args.block, "input": inp.label, "channels": len(streams),
            "stopped": rec.stop, "input_truncated": inp.note}
    members = {s.name: {**side, "stream": s.name, "channel": c, "input": inp.label,
                        "block": args.block, "gaps": rec.gaps[c], "input_truncated": inp.note}
               for c, s in enumerate(streams)}
    try:
        rec.commit(meta, info, members)
    except OSError as e:
        print(f"rtamt stream: --out {out}: cannot write: {e}; nothing written{kept}",
              file=sys.stderr, flush=True)
        return EXIT_OUTPUT
    print(f"rtamt stream: wrote {out} ({gb(rec.out.nbytes)}: {rec.progress(inp.fs)})",
          file=sys.stderr, flush=True)
    if any(rec.gaps):
        print(f"rtamt stream: --out {out}: the input has gaps (audio dropped or skipped "
              f"before processing: {', '.join(f'{n} {g}' for n, g in zip(rec.names, rec.gaps))}"
              "); block_start says where", file=sys.stderr, flush=True)
    if rec.stop is not None:
        print(f"rtamt stream: stopped early: {rec.stop}; what was recorded until then is in "
              f"{out}", file=sys.stderr, flush=True)
        return EXIT_OUTPUT
    return 0
