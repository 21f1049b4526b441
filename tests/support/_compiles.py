"""Which numba kernels an app compiles or loads after it is ready (issue 38 item 6).

:func:`late_kernels` runs ``python -m rtamt_apps ARGS`` in a subprocess through this file,
which records every overload added to any numba dispatcher (``Dispatcher.add_overload``:
numba calls it for a kernel compiled *and* for one loaded from its disk cache, so what is
recorded does not depend on the cache's state) and the moment the app is ready:

* a live app (``stream``, ``meter``, ``monitor``: :class:`rtamt_apps.inputs.Live`): when
  its source is started, after the runtime or scheduler has been built and started, i.e.
  just before the first block of audio is pushed;
* ``process``: when the first block of the file is taken for processing.

Every overload added after that moment would be compiled (seconds) or loaded (10-20 ms)
on the real-time path, where a block's budget is a few milliseconds.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time


def late_kernels(args, tmp_path, *, env=None, timeout=600):
    """Run ``rtamt ARGS`` as a subprocess (``env``: its environment).  Returns ``(proc,
    record)``: the ``subprocess.CompletedProcess`` and ``{'ready': seconds or None,
    'late': [...], 'early': [...]}`` with one ``'module.function signature (thread)'``
    string per overload added after / before the app was ready."""
    out = tmp_path / "overloads.json"
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), str(out), *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ) if env is None else env)
    record = json.loads(out.read_text()) if out.exists() else None
    return proc, record


def _main(out: str, args: list) -> int:
    from numba.core.dispatcher import Dispatcher

    events, ready = [], []
    add_overload = Dispatcher.add_overload

    def recording(self, cres):
        fn = self.py_func
        events.append((time.perf_counter(), f"{fn.__module__}.{fn.__qualname__} "
                       f"{cres.signature} ({threading.current_thread().name})"))
        return add_overload(self, cres)

    Dispatcher.add_overload = recording

    def mark():
        if not ready:
            ready.append(time.perf_counter())

    from rtamt_apps import inputs, process

    live_start = inputs.Live.start

    def start(self):
        src = self.input.source
        if src is not None:                # a file or the demo: ready when it starts
            src_start = src.start

            def started(runtime):
                mark()
                return src_start(runtime)
            src.start = started
        else:                              # a device: ready when its stream opens
            mark()
        return live_start(self)

    inputs.Live.start = start
    blocks = process._blocks

    def first_block(*a, **kw):
        for i, b in enumerate(blocks(*a, **kw)):
            if i == 0:
                mark()
            yield b

    process._blocks = first_block
    from rtamt_apps.cli import main

    try:
        return main(args)
    finally:
        t = ready[0] if ready else None
        with open(out, "w") as f:
            json.dump({"ready": t,
                       "late": [e for s, e in events if t is not None and s >= t],
                       "early": [e for s, e in events if t is None or s < t]}, f)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1], sys.argv[2:]))
