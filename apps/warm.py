"""Kernel warm-up for the apps: load every compiled kernel a run will use before its first
block (before the app is ready), and say so on stderr when a first run has to compile them
(minutes of silence otherwise).  Every app calls :func:`warm_up` (one model) or
:func:`warm_chains` (the named chains of a runtime) with the dtype and the channels of one
stream; what the runtime or scheduler adds (their input checks, the scheduler's batched
intake) they load themselves when they are built or started."""
from __future__ import annotations

import sys

from rtamt.engine.jit import JIT, WarmupReport, mark_first_run_announced, warmup


def warm_up(model, dtype, lead, label: str, stream=None) -> WarmupReport:
    """:func:`rtamt.engine.jit.warmup` with progress on ``stream`` (stderr), printed only
    if numba is actually compiling (cold or stale cache): one line ``compiling kernels
    for LABEL (first run, ...)``, then ``[k/N] stage: kernel ...`` per kernel."""
    out = sys.stderr if stream is None else stream
    announced = False

    def progress(step):
        nonlocal announced
        if step.event == "compile":
            if not announced:
                later = "cached afterwards" if JIT["cache"] else "not cached"
                print(f"compiling kernels for {label} (first run, ~15-60 s; {later})",
                      file=out, flush=True)
                announced = True
                mark_first_run_announced()   # what the runtime compiles later says no more
            print(f"  [{step.index}/{step.total}] {step.stage}: {step.kernel} ...", file=out,
                  flush=True)
        elif announced:
            print(f"  [{step.index}/{step.total}] {step.stage} ready ({step.seconds:.1f} s)",
                  file=out, flush=True)

    return warmup(model, dtype, lead=lead, progress=progress)


def warm_chains(chains: dict, dtype, channels: int, stream=None) -> list:
    """:func:`warm_up` for each of ``chains`` (``{name: streaming object}``, as given to a
    :class:`rtamt.runtime.Runtime` or ``Scheduler.open``), labelled by its name, for
    blocks of ``channels`` channels; returns the reports."""
    lead = () if channels == 1 else (channels,)
    return [warm_up(c, dtype, lead, name, stream) for name, c in chains.items()]
