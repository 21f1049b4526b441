"""``rtamt meter``: live loudness meter (LUFS, dB SPL; sone and phon with ``--model``) on
the real-time runtime.

Inputs: ``demo`` (built-in signal, looped; the default when there is no input device),
a WAV file (real-time pace, or ``--fast``), or a sound device (name substring or
index, ``--hostapi`` to choose e.g. JACK).  By default two chains run on the stream: an
ITU-R BS.1770 / EBU R128 meter and a sound-level meter (the meter-only mode: about 0.005
of real time on the demo).  ``--model moore2016`` or ``--model glasberg2002`` adds a
loudness model as a third chain (sone and phon; with Moore2016 the run takes 0.08-0.15 of
real time); Moore2016 was the default before issue 39.  About 10 updates per second of
audio: a terminal line, or with ``--json`` one JSON object per update with ``t, spl_db,
peak_db, max_peak_db, lufs_momentary, lufs_short_term, lufs_integrated, lra_lu, lra_stable,
true_peak_dbtp`` (EBU R128: the loudness range after EBU Tech 3342, false in ``lra_stable``
and marked ``~`` on the terminal during the first 60 s as EBU Tech 3341 section 2.4 asks,
and the maximum true peak after ITU-R BS.1770-4 Annex 2, over the channels of the stream)
and the rest of the R128 report, as ``rtamt loudness`` words it (:data:`R128_FIELDS`:
``max_momentary_lufs, max_short_term_lufs, lra_low_lufs, lra_high_lufs,
true_peak_channels_dbtp, sample_peak_dbfs, absolute_gate_lufs, relative_gate_lufs,
lra_gate_lufs, integrated_reason``: ``too short`` or ``below the absolute gate`` when
``lufs_integrated`` is null), with ``--model`` also ``stl_sone, ltl_sone, phon, stl_phon``
(+ per-ear values for moore2016), and the runtime's health
(dropped/skipped frames, rejected blocks, PortAudio status flags, processing p99, rtf).

An input that ends before the first update (a file shorter than ``--interval``) gets one
reading over all of it at the end, with ``note`` in its JSON record (and a line on stderr)
saying so and which figures it is too short for; a run that processed no audio at all gets
a JSON record with ``t``, ``reading: null`` and the ``note`` why (and the line on stderr).

Channel layout (BS.1770 channel weights, :mod:`rtamt_apps.layout_options`): ``--layout
NAME``, ``--channels NAME,...`` (the channels in order; ``--channels N`` is a count) or
``--weights G,...``; else a file's channel mask or its format's order, 1 = mono, 2 =
stereo; a device or the demo with more channels needs one of them (refused with the
choices otherwise).  Any number of channels: the loudness model (``--model``; 1 or 2
channels) is not run on more than 2, and its fields are left out.

``--per-channel``: every input channel gets its own chains on its own stream of an
:class:`rtamt.scheduler.Scheduler` (fed by a :class:`rtamt.scheduler.FanOut`; ``--threads``,
``--budget-ms``, ``--admission``), any number of channels: one line per channel and update
(``ch0 | t ...``; JSON records carry ``stream``), one final line per channel.

Calibration: ``--spl-ref`` (dB SPL of digital RMS 1.0) or the file written by
``rtamt calibrate`` (``--calibration PATH``, default ``$RTAMT_CALIBRATION`` or
``~/.config/rtamt/calibration.json``); 100 dB if neither exists.
"""
from __future__ import annotations

import collections
import json
import math
import os
import sys
import threading
import time

import numpy as np

from rtamt.io.calibration import CalibrationError, resolve_spl_ref
from rtamt.loudness.bs1770 import LoudnessMeter
from rtamt.runtime import Runtime

from .args import (
    FS_LIMITS,
    UsageError,
    add_block_arguments,
    float_range,
    positive_float,
)
from .feed import SoundLevel
from .inputs import (
    EXIT_SOURCE_FAULT,
    Live,
    add_calibration_arguments,
    add_per_channel_arguments,
    add_source_arguments,
    check_per_channel,
    open_input,
    open_per_channel,
)
from .layout_options import add_layout_arguments, channels_or_names
from .layout_options import choose as choose_layout
from .warm import warm_chains

#: ``--model`` choices: no loudness model (the meter-only default) or the model's class name
#: in :mod:`rtamt.models` (imported only when chosen)
LOUDNESS_MODELS = {"none": None, "moore2016": "Moore2016", "glasberg2002": "Glasberg2002"}


def _model_class(name: str):
    """The loudness model class of ``--model name`` (None for ``none``)."""
    if LOUDNESS_MODELS[name] is None:
        return None
    import rtamt.models

    return getattr(rtamt.models, LOUDNESS_MODELS[name])


def add_arguments(p):
    p.add_argument("--input", default=None,
                   help="'demo', a WAV file, 'default', or an input device (name substring or "
                        "index); default: the default input device, or demo if there is none")
    p.add_argument("--hostapi", default=None, help="host API of the device (e.g. JACK, ALSA)")
    p.add_argument("--model", default="none", choices=sorted(LOUDNESS_MODELS),
                   help="loudness model run beside the R128 meter and the sound-level meter "
                        "(sone, phon; default none: the meter only)")
    p.add_argument("--fs", type=float_range(*FS_LIMITS), default=None,
                   help="sample rate for demo / device (default 32000 demo, device default)")
    p.add_argument("--channels", type=channels_or_names, default=None, metavar="N|NAME,...",
                   help="device / demo channels: a count, or the channel names in order "
                        "(L,R,C,LFE,Ls,Rs: the layout too)")
    add_layout_arguments(p, names=False)   # --layout / --weights -> args.layout
    p.add_argument("--true-peak", dest="truepeak", choices=("sinc", "bs1770"), default="sinc",
                   help="true-peak interpolator: sinc (default, windowed sinc to >= 768 kHz) "
                        "or bs1770 (BS.1770-4 Annex 2's 4x example filter)")
    add_block_arguments(p, 512, 256)
    p.add_argument("--seconds", type=positive_float(), default=None,
                   help="stop after this many seconds")
    p.add_argument("--fast", action="store_true", help="file/demo: as fast as possible")
    add_calibration_arguments(p)
    add_source_arguments(p)
    p.add_argument("--interval", type=positive_float(3600.0), default=0.1,
                   help="seconds of audio per update")
    p.add_argument("--json", action="store_true", help="one JSON object per update")
    add_per_channel_arguments(p)


def _db(v, ref):
    return None if v <= 0 else round(10 * math.log10(v) + ref, 2)


class _Updates:
    """Collects per-block results (called in the processing thread, cheap) into one
    record per ``interval`` seconds of stream time."""

    def __init__(self, rt, fs, interval, spl_ref, model_name):
        self.rt, self.fs, self.interval, self.spl_ref = rt, fs, interval, spl_ref
        self.model_name = model_name
        self.q = collections.deque(maxlen=10000)
        self.acc_ms = 0.0
        self.acc_n = 0
        self.acc_peak = 0.0
        self.max_peak = 0.0
        self.next_t = interval
        self.t_end = 0.0          # stream time processed, s
        self.last = {}
        self.lock = threading.Lock()

    def __call__(self, r):
        ms, peak = r.outputs["level"]
        self.acc_ms += ms * r.frames
        self.acc_n += r.frames
        self.acc_peak = max(self.acc_peak, peak)
        self.max_peak = max(self.max_peak, peak)
        lo = r.outputs.get("loudness")
        if lo is not None and lo["stl"].shape[-1]:
            d = {k: float(np.asarray(v)[..., -1].sum()) for k, v in lo.items()
                 if k in ("stl", "ltl", "stl_left", "stl_right", "ltl_left", "ltl_right")}
            self.last.update(d)
        b = r.outputs["bs1770"]
        self.last["lufs"] = (b.momentary, b.short_term, b.integrated)
        self.last["r128"] = (b.loudness_range, b.true_peak, b.lra_stable)
        self.last["report"] = b          # the rest of the R128 report (_r128_report)
        t = self.t_end = (r.start + r.frames) / self.fs
        if t + 1e-9 >= self.next_t:
            self._emit(t)
            while self.next_t <= t + 1e-9:
                self.next_t += self.interval

    def _emit(self, t: float) -> None:
        rec = dict(t=round(t, 4), ms=self.acc_ms / max(self.acc_n, 1), peak=self.acc_peak,
                   max_peak=self.max_peak, **{k: v for k, v in self.last.items()})
        self.acc_ms, self.acc_n, self.acc_peak = 0.0, 0, 0.0
        self.q.append(rec)

    def flush(self) -> bool:
        """Queue a reading over the frames since the last one (the stream has ended);
        False when there are none."""
        if not self.acc_n:
            return False
        self._emit(self.t_end)
        return True


def _r2(v):
    """A loudness / level rounded to 0.01; ``None`` for ``None``, ``-inf`` and NaN."""
    return None if v is None or not math.isfinite(v) else round(float(v), 2)


def _r128_report(b) -> dict:
    """The EBU R128 report fields of the meter's latest
    :class:`rtamt.loudness.bs1770.LoudnessResult` ``b`` beyond M, S, I, LRA and the true
    peak: the maxima of M and S, the LRA's low and high ends (10th / 95th percentiles), the
    true peak per channel, the sample peak, the gates, and why I is empty."""
    if b is None:
        return dict.fromkeys(R128_FIELDS)
    return {"max_momentary_lufs": _r2(b.max_momentary),
            "max_short_term_lufs": _r2(b.max_short_term),
            "lra_low_lufs": _r2(b.lra_low), "lra_high_lufs": _r2(b.lra_high),
            "true_peak_channels_dbtp": [_r2(v) for v in b.true_peak_channels],
            "sample_peak_dbfs": _r2(b.sample_peak),
            "absolute_gate_lufs": _r2(b.absolute_gate),
            "relative_gate_lufs": _r2(b.relative_gate), "lra_gate_lufs": _r2(b.lra_gate),
            "integrated_reason": b.integrated_reason}


#: the keys :func:`_r128_report` adds to a ``--json`` record
R128_FIELDS = ("max_momentary_lufs", "max_short_term_lufs", "lra_low_lufs", "lra_high_lufs",
               "true_peak_channels_dbtp", "sample_peak_dbfs", "absolute_gate_lufs",
               "relative_gate_lufs", "lra_gate_lufs", "integrated_reason")


def _record(rec, model, spl_ref, st):
    """One JSON update; ``model`` is the loudness model or None (no sone/phon keys)."""
    m, s, i = rec.get("lufs", (None, None, None))
    lra, tp, lra_stable = rec.get("r128", (None, None, False))
    out = dict(t=rec["t"])
    if model is not None:
        stl, ltl = rec.get("stl", 0.0), rec.get("ltl", 0.0)
        out.update(stl_sone=round(stl, 5), ltl_sone=round(ltl, 5),
                   phon=round(float(model.phon(ltl)), 2),
                   stl_phon=round(float(model.phon(stl)), 2))
    out.update(spl_db=_db(rec["ms"], spl_ref), peak_db=_db(rec["peak"] ** 2, spl_ref),
               max_peak_db=_db(rec["max_peak"] ** 2, spl_ref),
               lufs_momentary=None if m is None or not math.isfinite(m) else round(m, 2),
               lufs_short_term=None if s is None or not math.isfinite(s) else round(s, 2),
               lufs_integrated=None if i is None or not math.isfinite(i) else round(i, 2),
               lra_lu=None if lra is None or not math.isfinite(lra) else round(lra, 2),
               true_peak_dbtp=None if tp is None or not math.isfinite(tp) else round(tp, 2),
               lra_stable=bool(lra_stable), **_r128_report(rec.get("report")))
    for k in ("stl_left", "stl_right", "ltl_left", "ltl_right"):
        if k in rec:
            out[k] = round(rec[k], 5)
    out.update(dropped_frames=st.dropped_frames, skipped_frames=st.skipped_frames,
               rejected_blocks=st.rejected_blocks, status={k: v for k, v in st.status.items() if v},
               queue_frames=st.queue_frames, proc_p99_us=round(st.proc_p99_us, 1),
               rtf=round(st.rtf, 4), source_error=st.source_error,
               source_stalls=st.source_stalls)
    return out


def _line(d, model_name):
    def f(v, fmt):
        return "  -  " if v is None else format(v, fmt)
    st = ",".join(f"{k}={v}" for k, v in d["status"].items()) or "ok"
    lo = (f"{model_name} STL {d['stl_sone']:7.2f} LTL {d['ltl_sone']:7.2f} sone "
          f"{d['phon']:6.1f} phon | " if "phon" in d else "")
    return (f"t {d['t']:7.2f} s | {lo}SPL {f(d['spl_db'], '5.1f')} peak "
            f"{f(d['peak_db'], '5.1f')} dB | M {f(d['lufs_momentary'], '6.1f')} S "
            f"{f(d['lufs_short_term'], '6.1f')} I {f(d['lufs_integrated'], '6.1f')} LUFS "
            f"LRA {f(d['lra_lu'], '4.1f')}{' ' if d['lra_stable'] else '~'}LU TP "
            f"{f(d['true_peak_dbtp'], '5.1f')} dBTP | "
            f"drop {d['dropped_frames'] + d['skipped_frames']} {st}"
            + (f" | input stalls {d['source_stalls']}" if d.get("source_stalls") else ""))


def _too_short(args, upds) -> None:
    """The run ended before its first update (an input shorter than ``--interval``): one
    reading over what was processed, noted as such, or a record saying nothing was."""
    t = max(upd.t_end for upd in upds)
    if not any([upd.flush() for upd in upds]):
        note = (f"no reading: the run ended before any audio was processed "
                f"({t:.3g} s)")
        print(f"rtamt meter: {note}", file=sys.stderr, flush=True)
        if args.json:
            print(json.dumps({"t": round(t, 4), "reading": None, "note": note}), flush=True)
        return
    lacks = [what for what, need in (("momentary LUFS", 0.4), ("short-term LUFS", 3.0))
             if t < need]
    note = (f"the input ended after {t:.3g} s, before the first --interval {args.interval:g} "
            f"s update: one reading over all of it"
            + (f" (too short for {' and '.join(lacks)}: null)" if lacks else ""))
    for upd in upds:
        if upd.q:
            upd.q[-1]["note"] = note
    print(f"rtamt meter: {note}", file=sys.stderr, flush=True)


class _LayoutUsage(UsageError):
    """The input's channel layout is not known, or the option's does not fit it."""


def _is_file(inp) -> bool:
    return inp not in (None, "demo", "default") and os.path.isfile(inp)


def _layout_option(args):
    """``(layout, count)``: the layout option (``--layout`` / ``--weights`` in
    ``args.layout``, or ``--channels NAME,...``) and the channel count it or ``--channels
    N`` asks the device / demo for (None: not given)."""
    layout, names = args.layout, args.channels if isinstance(args.channels, tuple) else None
    if names is not None and layout is not None:
        raise UsageError("argument --channels: channel names and --layout / --weights "
                         "both give the layout; give one")
    layout = names if names is not None else layout
    if args.per_channel and layout is not None:
        raise UsageError("--layout, --weights and --channels NAME,... weigh the channels of "
                         "one programme; --per-channel meters each channel alone")
    if isinstance(args.channels, int):
        return layout, args.channels
    if layout is None:
        return None, None
    from rtamt.loudness.layouts import layout_names
    return layout, len(layout if isinstance(layout, tuple) else layout_names(layout))


def run(args) -> int:
    check_per_channel(args, "budget_ms", "threads", "admission")
    layout, count = _layout_option(args)
    try:
        spl_ref, spl_src = resolve_spl_ref(args.spl_ref, args.calibration)
    except CalibrationError as e:
        print(f"rtamt meter: {e}", file=sys.stderr)
        return 2
    try:
        inp = open_input(args.input, hostapi=args.hostapi, fs=args.fs, channels=count,
                         blocksize=args.blocksize, realtime=not args.fast,
                         seconds=(args.seconds if args.seconds is not None else 10.0)
                         if args.input in (None, "demo") else args.seconds, spl_ref=spl_ref,
                         block=args.block, force=args.force,
                         max_channels=None if args.per_channel or count is not None
                         or _is_file(args.input) else 2)
        fs, channels = inp.fs, inp.channels
        ch = 1 if args.per_channel else channels      # channels of one stream
        try:
            lay = choose_layout(ch, layout, getattr(inp.source, "reader", None)) \
                if not args.per_channel else None
        except ValueError as e:             # no layout known, or one that does not fit
            raise _LayoutUsage(str(e)) from None
        kw = {"presentation": "monaural"} if args.model == "glasberg2002" and ch == 2 else {}
        model_cls = _model_class(args.model)

        def chains_of():
            lo = {} if model_cls is None or ch > 2 else {     # the models take 1 or 2
                "loudness": model_cls(fs, spl_ref=spl_ref, field=args.field, **kw)}
            return {**lo, "bs1770": LoudnessMeter(fs=fs, channels=ch, truepeak=args.truepeak,
                                                  **(lay.meter_kwargs() if lay else {})),
                    "level": SoundLevel()}
        chains = chains_of()
        model = chains.get("loudness")
    except _LayoutUsage:
        raise
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        print(f"rtamt meter: {e}", file=sys.stderr)
        return 2
    if model is not None:
        model.phon(1.0)  # build the phon table before streaming
    policy = "drop-newest" if args.fast else "drop-oldest"
    skipped = model_cls is not None and model is None
    if skipped:          # asked for, on more than 2 channels: said on stderr, JSON or not
        print(f"rtamt meter: --model {args.model} is not run: the loudness models take 1 or 2 "
              f"channels, the input has {ch}; the R128 meter runs alone", file=sys.stderr,
              flush=True)
    if not args.json:
        what = args.model if model is not None else "R128 meter"
        print(f"rtamt meter: {what} on {inp.label} ({fs:g} Hz, {channels} ch"
              f"{', one stream per channel' if args.per_channel else ''}"
              f"{f', layout {lay.name} ({lay.origin})' if lay else ''}), spl_ref "
              f"{spl_ref:.2f} dB ({spl_src})", flush=True)
    warm_chains(chains, np.float64, ch)     # kernels loaded (or compiled) before streaming
    if args.per_channel:
        def open_one(sched, c, name, **skw):
            return sched.open(chains if c == 0 else chains_of(), fs, args.block, name=name,
                              policy=policy, **skw)

        rt = open_per_channel(args, inp, open_one)
        streams = rt.streams
    else:
        rt = Runtime(chains, fs, channels=channels, block=args.block, policy=policy,
                     source_timeout=args.source_timeout)
        streams = [rt]
    upds = [_Updates(s, fs, args.interval, spl_ref, args.model) for s in streams]
    for s, upd in zip(streams, upds):
        s.subscribe(upd)
    n_out = 0
    # a pipe or file gets one line per update, no \r; so does --per-channel (several lines)
    tty = sys.stdout.isatty() and not args.per_channel

    def drain(final=False):
        nonlocal n_out
        for s, upd in zip(streams, upds):
            st = s.stats()
            tag = f"{st.name} | " if args.per_channel else ""
            while upd.q:
                rec = upd.q.popleft()
                d = _record(rec, model, spl_ref, st)
                if "note" in rec:
                    d["note"] = rec["note"]
                n_out += 1
                if args.json:
                    print(json.dumps({"stream": st.name, **d} if tag else d), flush=True)
                elif tty:
                    print("\r" + _line(d, args.model), end="", flush=True)
                else:
                    print(tag + _line(d, args.model), flush=True)
        if final and not args.json:
            for s in streams:
                st = s.stats()
                print(("\n" if tty else "") + (f"final {st.name}: " if args.per_channel
                                                else "final: ") + st.line(), flush=True)

    live = Live(inp, rt, blocksize=args.blocksize, reconnect=args.reconnect)

    def watch():
        """The error that ends the run (None: go on); --reconnect notices on stderr."""
        return live.poll(lambda msg: print(("\n" if tty and not args.json else "")
                                           + f"rtamt meter: {msg}", file=sys.stderr,
                                           flush=True))

    try:
        live.start()
        if inp.source is not None:
            while not live.join(0.05):
                drain()
                if watch():
                    break
        else:
            t0 = time.monotonic()
            limit = math.inf if args.seconds is None else args.seconds
            while time.monotonic() - t0 < limit:
                time.sleep(0.05)
                drain()
                if watch():
                    break
        live.stop("drain" if rt.source_error is None else "discard")
    except KeyboardInterrupt:       # Ctrl-C ends a live run normally (exit 0)
        live.stop("discard")
    except (LookupError, RuntimeError, ValueError) as e:
        live.stop("discard")
        print(f"rtamt meter: {e}", file=sys.stderr)
        return 2
    except BaseException:           # e.g. a closed stdout (BrokenPipeError): stop the input
        live.stop("discard")
        raise
    if n_out == 0 and not any(upd.q for upd in upds):
        _too_short(args, upds)
    drain(final=True)
    failure = live.failure()
    if failure:
        print(f"rtamt meter: {failure}", file=sys.stderr, flush=True)
        return EXIT_SOURCE_FAULT
    return 0
