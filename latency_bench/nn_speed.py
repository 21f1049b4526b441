"""``python -m latency_bench.nn_speed [--repeat 5] [--batch 8] [--seconds 1] [--fs 48000]``

Forward + backward of :class:`rtamt.nn.Dau1997` (default configuration) on a batch of
``--batch`` signals of ``--seconds`` s at ``--fs`` Hz, on one thread
(``torch.set_num_threads(1)``, ``numba.set_num_threads(1)``).  Each run: a fresh input
that requires a gradient, ``y, _ = layer(x)``, the loss ``(y * w).sum()`` with a fixed
random ``w``, ``loss.backward()``; timed with ``time.perf_counter`` around the whole of
it.  The first run (numba compile or cache load) is reported apart; ``best_s`` is the
best of the ``--repeat`` runs after it.  Three cases: the forward pass alone under
``torch.no_grad()``, forward + backward to the input, and forward + backward to the
input and every learnable parameter (``learnable=True``).

``rtf`` is compute time / audio duration (batch x seconds); ``rtf_cpu`` the same with the
best run's process CPU time.  Prints one JSON object.

``--torch-amt-python PY`` (issue 42): the same run also times torch_amt's Dau1997
forward + backward to the input, in torch_amt's own interpreter ``PY`` (the one
``../shared/tools/torch_amt_env.sh`` prints), as a subprocess running
``latency_bench/nn_speed_torch_amt.py`` on the very input rtamt's cases got (passed as a
``.npy`` file), one thread, ``--torch-amt-repeat`` timed runs (default 1: one run of
torch_amt on 8 x 1 s takes many minutes) after two warm-up calls.  torch_amt is never
imported here.  ``--torch-amt-seconds S`` times torch_amt on the first ``S`` seconds of
the input only (its cost is linear in the length: per-sample Python and TorchScript
loops).  ``speedup_vs_torch_amt`` compares compute time per second of audio (batch x
seconds) of torch_amt's best run with rtamt's ``forward_backward_input``;
``speedup_vs_torch_amt_cpu`` compares their process CPU times (both run on one thread).  Without
``--torch-amt-python`` the JSON's ``torch_amt`` entry says that it was not measured, and
gives no ratio.  A ``PY`` that is not an executable file, or a run that fails or prints no
JSON, stops the script with an error naming ``PY`` and the subprocess's last output.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from .__main__ import _cpu_name


def _timed(fn, repeat: int) -> dict:
    """``fn()`` once (first run) and ``repeat`` times more: wall seconds of each, and the
    best run's process CPU seconds (``cpu_s``: on a machine shared with other work, the
    compute time without the waits)."""
    t, c = [], []
    for _ in range(repeat + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        t.append(time.perf_counter() - t0)
        c.append(time.process_time() - c0)
    return {"first_s": t[0], "best_s": min(t[1:]), "median_s": float(np.median(t[1:])),
            "cpu_s": min(c[1:]), "runs": len(t) - 1}


def _case(layer, x0: np.ndarray, w, backward: bool):
    """A closure running one forward (+ backward) pass of ``layer`` on ``x0``."""
    def run():
        x = torch.from_numpy(x0.copy()).requires_grad_(backward)
        if not backward:
            with torch.no_grad():
                layer(x)
            return
        y, _ = layer(x)
        (y * w).sum().backward()
        layer.zero_grad(set_to_none=True)
    return run


TORCH_AMT_SCRIPT = Path(__file__).with_name("nn_speed_torch_amt.py")


def check_torch_amt_python(py: str) -> str:
    """``py`` as an absolute path, or SystemExit naming it when it is not an executable
    file (checked before any timing, so a bad path fails at once)."""
    p = Path(py).expanduser()
    if not p.is_file() or not os.access(p, os.X_OK):
        raise SystemExit(f"--torch-amt-python {py!r}: not an executable file; give the "
                         "interpreter ../shared/tools/torch_amt_env.sh prints")
    return str(p.absolute())


def torch_amt_side(py: str, x0: np.ndarray, fs: float, repeat: int, dtype: str,
                   timeout: float) -> dict:
    """torch_amt's Dau1997 forward + backward on ``x0`` (batch, T), timed by
    ``nn_speed_torch_amt.py`` in interpreter ``py`` (one thread): its JSON.  SystemExit
    naming ``py`` with the end of its output if it fails, times out or prints no JSON."""
    with tempfile.TemporaryDirectory() as d:
        inp = Path(d) / "x.npy"
        np.save(inp, x0)
        cmd = [py, str(TORCH_AMT_SCRIPT), "--input", str(inp), "--fs", repr(float(fs)),
               "--repeat", str(repeat), "--dtype", dtype]
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        env.pop("PYTHONPATH", None)
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                 env=env, cwd=d)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"torch_amt run by {py} did not finish in {timeout:g} s "
                             "(--torch-amt-timeout)") from None
    tail = (run.stdout + run.stderr)[-2000:]
    if run.returncode != 0:
        raise SystemExit(f"torch_amt run by {py} failed (exit {run.returncode}):\n{tail}")
    try:
        res = json.loads(run.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise SystemExit(f"torch_amt run by {py} printed no JSON result:\n{tail}") from None
    if not isinstance(res, dict) or not (res.get("best_s", 0) > 0 and res.get("cpu_s", 0) > 0):
        raise SystemExit(f"torch_amt run by {py} gave no positive best_s and cpu_s:\n{tail}")
    return dict(res, python=py)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fs", type=float, default=48000.0)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--torch-amt-python", metavar="PY",
                    help="torch_amt's interpreter: time its Dau1997 in the same run")
    ap.add_argument("--torch-amt-repeat", type=int, default=1)
    ap.add_argument("--torch-amt-seconds", type=float, default=None,
                    help="time torch_amt on the first S seconds only (default: all)")
    ap.add_argument("--torch-amt-timeout", type=float, default=7200.0)
    args = ap.parse_args(argv)
    py = check_torch_amt_python(args.torch_amt_python) if args.torch_amt_python else None

    import numba

    import rtamt.nn as rn

    torch.set_num_threads(1)
    numba.set_num_threads(1)
    dt = np.float64 if args.dtype == "float64" else np.float32
    rng = np.random.default_rng(0)
    T = int(round(args.seconds * args.fs))
    x0 = (0.02 * rng.standard_normal((args.batch, T))).astype(dt)   # ~ 66 dB SPL noise
    audio = args.batch * args.seconds
    res = {"model": "rtamt.nn.Dau1997", "fs": args.fs, "seconds": args.seconds,
           "batch": args.batch, "dtype": args.dtype, "threads": 1,
           "torch": torch.__version__, "numba": numba.__version__,
           "machine": _cpu_name()}
    cases = {}
    for name, learnable, backward in (("forward", False, False),
                                      ("forward_backward_input", False, True),
                                      ("forward_backward_all_params", True, True)):
        layer = rn.Dau1997(args.fs, learnable=learnable)
        w = torch.from_numpy(rng.standard_normal((layer.parts[-1].n_out, 1)).astype(dt))
        r = _timed(_case(layer, x0, w, backward), args.repeat)
        r["rtf"], r["rtf_cpu"] = r["best_s"] / audio, r["cpu_s"] / audio
        r["channels"], r["outputs"] = layer.parts[0].n_out, layer.parts[-1].n_out
        cases[name] = r
    res["rtamt"] = cases
    if py is None:
        res["torch_amt"] = {"available": False,
                            "reason": "not measured: give --torch-amt-python PY"}
    else:
        n = T if args.torch_amt_seconds is None else int(round(args.torch_amt_seconds
                                                               * args.fs))
        amt = torch_amt_side(py, np.ascontiguousarray(x0[:, :n]), args.fs,
                             args.torch_amt_repeat, args.dtype, args.torch_amt_timeout)
        amt_audio = args.batch * n / args.fs
        amt["rtf"], amt["rtf_cpu"] = amt["best_s"] / amt_audio, amt["cpu_s"] / amt_audio
        res["torch_amt"] = amt
        ours = cases["forward_backward_input"]
        res["speedup_vs_torch_amt"] = amt["rtf"] / ours["rtf"]
        res["speedup_vs_torch_amt_cpu"] = amt["rtf_cpu"] / ours["rtf_cpu"]
    print(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
