"""``python -m latency_bench.monitor --seconds 20``: the live monitor under load.

Runs ``rtamt monitor`` (offscreen Qt unless a display is set) on the real-time demo source
with the loudness model (``--model``, Moore2016 by default) and the Dau1997 modulation
chain at once, for ``--seconds`` of audio, and prints one JSON object:

* GUI: ``frames`` displayed (a frame = the first paint of the plots after a timer refresh),
  ``fps_mean``, ``fps_min_1s`` (the worst whole second), ``refresh_p50_ms`` /
  ``refresh_p99_ms`` (the timer slot: copying the feed and updating the items; painting
  comes after it);
* runtime: ``dropped_frames``, ``skipped_frames``, ``rtf``, ``proc_p99_us`` against
  ``budget_us``, ``misses`` (blocks whose wall time exceeded the block period, GIL
  sharing with the GUI included);
* ``machine``, ``cpu``, ``threads`` (the processing thread is one thread; the GUI is another).

Unlike ``python -m latency_bench`` this measures a whole app, not one call: the figures
depend on the machine's load and on what the offscreen raster engine paints.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="latency_bench.monitor", description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--model", default="moore2016", choices=["moore2016", "glasberg2002"])
    p.add_argument("--no-modulation", action="store_true")
    p.add_argument("--fs", type=float, default=32000.0)
    p.add_argument("--block", type=int, default=512)
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--size", default="1280x800")
    p.add_argument("--threads", type=int, default=1, help="torch/BLAS threads (default 1)")
    a = p.parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(var, str(a.threads))
    from latency_bench.__main__ import _cpu_name
    from rtamt_apps import monitor
    from rtamt_apps.cli import main as cli

    args = ["monitor", "--input", "demo", "--model", a.model, "--fs", str(a.fs), "--block",
            str(a.block), "--seconds", str(a.seconds), "--fps", str(a.fps), "--size", a.size,
            "--spl-ref", "100", "--json"]
    if a.no_modulation:
        args.append("--no-modulation")
    monitor._qt_platform_for(False)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli(args)
    if rc != 0:
        return rc
    rep = json.loads(buf.getvalue().strip().splitlines()[-1])
    rep.pop("shown", None)
    rep.update(machine=platform.machine(), cpu=_cpu_name(), cores=os.cpu_count(),
               threads=a.threads, qt_platform=os.environ.get("QT_QPA_PLATFORM", ""))
    print(json.dumps(rep), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
