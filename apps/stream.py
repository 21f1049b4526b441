"""``rtamt stream``: run a model live on the real-time runtime and print its accounting.

Input: ``demo`` (built-in signal, looped), a WAV file, or a sound device (name
substring or index; ``--hostapi JACK`` to pick the host API).  Prints one stats line
per second (``--json``: one JSON object per line) and a final summary.
"""
from __future__ import annotations

import json
import sys
import time

from rtamt.models import MODELS
from rtamt.runtime import Runtime

from .args import FS_LIMITS, add_block_arguments, float_range, int_range, positive_float
from .inputs import EXIT_SOURCE_FAULT, Live, add_source_arguments, open_input


def add_arguments(p):
    p.add_argument("--input", default="demo",
                   help="'demo' (default), a WAV file, 'default' (the default input device, "
                        "of --hostapi if given), or an input device (name substring or index)")
    p.add_argument("--hostapi", default=None, help="host API of the device (e.g. JACK, ALSA)")
    p.add_argument("--model", default="dau1997", choices=sorted(MODELS))
    p.add_argument("--config", default=None, help="model configuration")
    p.add_argument("--fs", type=float_range(*FS_LIMITS), default=None,
                   help="sample rate for demo / device (default 48000); a WAV file must have it")
    p.add_argument("--channels", type=int_range(1, 256), default=1, help="demo / device channels")
    add_block_arguments(p, 256, 256, blocksize_min=0,
                        blocksize_help="callback / source block size (0 = device decides, "
                                       "may vary)")
    p.add_argument("--seconds", type=positive_float(), default=3.0,
                   help="stop after this many seconds")
    p.add_argument("--fast", action="store_true",
                   help="file/demo: as fast as possible (backpressure, nothing dropped)")
    p.add_argument("--policy", default=None, choices=["drop-oldest", "drop-newest"],
                   help="overload policy (default drop-oldest live, drop-newest with --fast)")
    p.add_argument("--max-backlog", type=positive_float(10.0), default=0.25,
                   help="seconds (drop-oldest)")
    add_source_arguments(p)
    p.add_argument("--json", action="store_true", help="print stats as JSON lines")


def run(args) -> int:
    policy = args.policy or ("drop-newest" if args.fast else "drop-oldest")
    kw = {} if args.config is None else {"config": args.config}
    try:
        inp = open_input(args.input, hostapi=args.hostapi, fs=args.fs, channels=args.channels,
                         blocksize=args.blocksize or 256, realtime=not args.fast,
                         seconds=args.seconds, max_channels=None, default_fs=48000.0,
                         block=args.block, force=args.force)
    except (LookupError, OSError, RuntimeError, ValueError) as e:
        print(f"rtamt stream: {e}", file=sys.stderr)
        return 2
    model = MODELS[args.model](inp.fs, **kw)
    rt = Runtime(model, inp.fs, channels=inp.channels, block=args.block, policy=policy,
                 max_backlog_s=args.max_backlog, source_timeout=args.source_timeout)
    live = Live(inp, rt, blocksize=args.blocksize, reconnect=args.reconnect)

    def show(final=False):
        st = rt.stats()
        if args.json:
            d = st.as_dict()
            d["final"] = final
            print(json.dumps(d), flush=True)
        else:
            print(("final: " if final else "") + st.line(), flush=True)

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
            else:
                left = args.seconds - (time.monotonic() - t0)
                if left <= 0:
                    break
                time.sleep(min(0.05, left))
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
        print(f"rtamt stream: {e}", file=sys.stderr)
        return 2
    except BaseException:           # e.g. a closed stdout (BrokenPipeError): stop the input
        live.stop("discard")
        raise
    show(final=True)
    failure = live.failure()
    if failure:
        print(f"rtamt stream: {failure}", file=sys.stderr, flush=True)
        return EXIT_SOURCE_FAULT
    return 0
