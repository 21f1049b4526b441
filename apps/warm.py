"""Kernel warm-up for the apps: load the model's compiled kernels before processing, and
say so on stderr when a first run has to compile them (minutes of silence otherwise)."""
from __future__ import annotations

import sys

from rtamt.engine.jit import WarmupReport, warmup


def warm_up(model, dtype, lead, label: str, stream=None) -> WarmupReport:
    """:func:`rtamt.engine.jit.warmup` with progress on ``stream`` (stderr), printed only
    if numba is actually compiling (cold or stale cache)."""
    out = sys.stderr if stream is None else stream
    announced = False

    def progress(step):
        nonlocal announced
        if step.event == "compile":
            if not announced:
                print(f"compiling kernels, once (later runs load them from the cache): {label}",
                      file=out, flush=True)
                announced = True
            print(f"  [{step.index}/{step.total}] {step.stage}: {step.kernel} ...", file=out,
                  flush=True)
        elif announced:
            print(f"  [{step.index}/{step.total}] {step.stage} ready ({step.seconds:.1f} s)",
                  file=out, flush=True)

    return warmup(model, dtype, lead=lead, progress=progress)
