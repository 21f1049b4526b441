"""``rtamt meter``: live loudness meter (sone, phon, dB SPL, LUFS) on the real-time runtime.

Inputs: ``demo`` (built-in signal, looped; the default when there is no input device),
a WAV file (real-time pace, or ``--fast``), or a sound device (name substring or
index, ``--hostapi`` to choose e.g. JACK).  Three chains run on the same stream:
the loudness model (``moore2016`` default, or ``glasberg2002``), an ITU-R BS.1770 meter
and a sound-level meter.  About 10 updates per second of audio: a terminal line, or
with ``--json`` one JSON object per update with ``t, stl_sone, ltl_sone, phon,
stl_phon, spl_db, peak_db, max_peak_db, lufs_momentary, lufs_short_term,
lufs_integrated`` (+ per-ear values for moore2016) and the runtime's health
(dropped/skipped frames, rejected blocks, PortAudio status flags, processing p99, rtf).

Calibration: ``--spl-ref`` (dB SPL of digital RMS 1.0) or the file written by
``rtamt calibrate`` (``--calibration PATH``, default ``$RTAMT_CALIBRATION`` or
``~/.config/rtamt/calibration.json``); 100 dB if neither exists.
"""
from __future__ import annotations

import collections
import json
import math
import sys
import threading
import time

import numpy as np

from rtamt.calibration import CalibrationError, resolve_spl_ref
from rtamt.loudness.bs1770 import LoudnessMeter
from rtamt.models import Glasberg2002, Moore2016
from rtamt.runtime import Runtime

from .args import FS_LIMITS, add_block_arguments, float_range, int_range, positive_float
from .feed import SoundLevel
from .inputs import (
    EXIT_SOURCE_FAULT,
    Live,
    add_calibration_arguments,
    add_source_arguments,
    open_input,
)
from .warm import warm_up

LOUDNESS_MODELS = {"moore2016": Moore2016, "glasberg2002": Glasberg2002}


def add_arguments(p):
    p.add_argument("--input", default=None,
                   help="'demo', a WAV file, 'default', or an input device (name substring or "
                        "index); default: the default input device, or demo if there is none")
    p.add_argument("--hostapi", default=None, help="host API of the device (e.g. JACK, ALSA)")
    p.add_argument("--model", default="moore2016", choices=sorted(LOUDNESS_MODELS))
    p.add_argument("--fs", type=float_range(*FS_LIMITS), default=None,
                   help="sample rate for demo / device (default 32000 demo, device default)")
    p.add_argument("--channels", type=int_range(1, 2), default=None,
                   help="device channels (1 or 2)")
    add_block_arguments(p, 512, 256)
    p.add_argument("--seconds", type=positive_float(), default=None,
                   help="stop after this many seconds")
    p.add_argument("--fast", action="store_true", help="file/demo: as fast as possible")
    add_calibration_arguments(p)
    add_source_arguments(p)
    p.add_argument("--interval", type=positive_float(3600.0), default=0.1,
                   help="seconds of audio per update")
    p.add_argument("--json", action="store_true", help="one JSON object per update")


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
        self.last = {}
        self.lock = threading.Lock()

    def __call__(self, r):
        ms, peak = r.outputs["level"]
        self.acc_ms += ms * r.frames
        self.acc_n += r.frames
        self.acc_peak = max(self.acc_peak, peak)
        self.max_peak = max(self.max_peak, peak)
        lo = r.outputs["loudness"]
        if lo["stl"].shape[-1]:
            d = {k: float(np.asarray(v)[..., -1].sum()) for k, v in lo.items()
                 if k in ("stl", "ltl", "stl_left", "stl_right", "ltl_left", "ltl_right")}
            self.last.update(d)
        b = r.outputs["bs1770"]
        self.last["lufs"] = (b.momentary, b.short_term, b.integrated)
        t = (r.start + r.frames) / self.fs
        if t + 1e-9 >= self.next_t:
            rec = dict(t=round(t, 4), ms=self.acc_ms / max(self.acc_n, 1), peak=self.acc_peak,
                       max_peak=self.max_peak, **{k: v for k, v in self.last.items()})
            self.acc_ms, self.acc_n, self.acc_peak = 0.0, 0, 0.0
            while self.next_t <= t + 1e-9:
                self.next_t += self.interval
            self.q.append(rec)


def _record(rec, model, spl_ref, st):
    stl, ltl = rec.get("stl", 0.0), rec.get("ltl", 0.0)
    m, s, i = rec.get("lufs", (None, None, None))
    out = dict(t=rec["t"], stl_sone=round(stl, 5), ltl_sone=round(ltl, 5),
               phon=round(float(model.phon(ltl)), 2), stl_phon=round(float(model.phon(stl)), 2),
               spl_db=_db(rec["ms"], spl_ref), peak_db=_db(rec["peak"] ** 2, spl_ref),
               max_peak_db=_db(rec["max_peak"] ** 2, spl_ref),
               lufs_momentary=None if m is None or not math.isfinite(m) else round(m, 2),
               lufs_short_term=None if s is None or not math.isfinite(s) else round(s, 2),
               lufs_integrated=None if i is None or not math.isfinite(i) else round(i, 2))
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
    return (f"t {d['t']:7.1f} s | {model_name} STL {d['stl_sone']:7.2f} LTL {d['ltl_sone']:7.2f} "
            f"sone {d['phon']:6.1f} phon | SPL {f(d['spl_db'], '5.1f')} peak "
            f"{f(d['peak_db'], '5.1f')} dB | M {f(d['lufs_momentary'], '6.1f')} S "
            f"{f(d['lufs_short_term'], '6.1f')} I {f(d['lufs_integrated'], '6.1f')} LUFS | "
            f"drop {d['dropped_frames'] + d['skipped_frames']} {st}"
            + (f" | input stalls {d['source_stalls']}" if d.get("source_stalls") else ""))


def run(args) -> int:
    try:
        spl_ref, spl_src = resolve_spl_ref(args.spl_ref, args.calibration)
    except CalibrationError as e:
        print(f"rtamt meter: {e}", file=sys.stderr)
        return 2
    try:
        inp = open_input(args.input, hostapi=args.hostapi, fs=args.fs, channels=args.channels,
                         blocksize=args.blocksize, realtime=not args.fast,
                         seconds=(args.seconds if args.seconds is not None else 10.0)
                         if args.input in (None, "demo") else args.seconds, spl_ref=spl_ref,
                         block=args.block, force=args.force)
        fs, channels = inp.fs, inp.channels
        kw = {"presentation": "monaural"} if args.model == "glasberg2002" and channels == 2 else {}
        model = LOUDNESS_MODELS[args.model](fs, spl_ref=spl_ref, field=args.field, **kw)
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        print(f"rtamt meter: {e}", file=sys.stderr)
        return 2
    model.phon(1.0)  # build the phon table before streaming
    chains = {"loudness": model, "bs1770": LoudnessMeter(fs=fs, channels=channels),
              "level": SoundLevel()}
    policy = "drop-newest" if args.fast else "drop-oldest"
    rt = Runtime(chains, fs, channels=channels, block=args.block, policy=policy,
                 source_timeout=args.source_timeout)
    upd = _Updates(rt, fs, args.interval, spl_ref, args.model)
    rt.subscribe(upd)
    if not args.json:
        print(f"rtamt meter: {args.model} on {inp.label} ({fs:g} Hz, {channels} ch), spl_ref "
              f"{spl_ref:.2f} dB ({spl_src})", flush=True)
    for name in ("loudness", "bs1770"):   # kernels loaded (or compiled) before streaming
        warm_up(chains[name], rt.dtype, () if channels == 1 else (channels,), name)
    n_out = 0
    tty = sys.stdout.isatty()       # a pipe or file gets one line per update, no \r

    def drain(final=False):
        nonlocal n_out
        st = rt.stats()
        while upd.q:
            d = _record(upd.q.popleft(), model, spl_ref, st)
            n_out += 1
            if args.json:
                print(json.dumps(d), flush=True)
            elif tty:
                print("\r" + _line(d, args.model), end="", flush=True)
            else:
                print(_line(d, args.model), flush=True)
        if final and not args.json:
            print(("\n" if tty else "") + "final: " + st.line(), flush=True)

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
    drain(final=True)
    failure = live.failure()
    if failure:
        print(f"rtamt meter: {failure}", file=sys.stderr, flush=True)
        return EXIT_SOURCE_FAULT
    return 0
