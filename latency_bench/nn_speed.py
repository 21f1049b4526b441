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

``rtf`` is compute time / audio duration (batch x seconds).  Prints one JSON object.

torch_amt side-by-side (issue 22 asks for >= 20x): UNVERIFIED.  This branch has never
run: torch_amt is not installable where this script was written, so its API
(``torch_amt.models.Dau1997(fs=...)``, called on a ``(batch, T)`` float32 tensor and
returning a list of output tensors), its loss (the plain sum of those outputs, not the
weighted sum used for rtamt) and the ratio computed from it are assumptions that no one
has checked.  It runs only when ``torch_amt`` imports; otherwise the JSON says why and
gives no ratio.  When it does run, the JSON's ``torch_amt`` entry and the ratio carry
an ``unverified`` note saying the same; check the call against torch_amt before
trusting either number.
"""
from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
import torch


def _timed(fn, repeat: int) -> dict:
    """``fn()`` once (first run) and ``repeat`` times more: seconds of each."""
    t = []
    for _ in range(repeat + 1):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return {"first_s": t[0], "best_s": min(t[1:]), "median_s": float(np.median(t[1:])),
            "runs": len(t) - 1}


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


UNVERIFIED = ("never run in rtamt's development (torch_amt not installable there): the "
              "torch_amt call, its loss and this number are unchecked assumptions")


def _torch_amt(x0: np.ndarray, fs: float, repeat: int) -> dict:
    """torch_amt's Dau1997 forward + backward on the same input, if it can be imported.
    UNVERIFIED: this branch has never run (see the module docstring)."""
    try:
        from torch_amt.models import Dau1997 as AmtDau1997
    except ImportError as e:
        return {"available": False,
                "reason": f"torch_amt cannot be imported ({e}); it is not on this machine's "
                          "package index, so the side-by-side comparison was not run and "
                          "no speed ratio is reported"}
    model = AmtDau1997(fs=fs)

    def run():
        x = torch.from_numpy(x0.astype(np.float32)).requires_grad_(True)
        out = model(x)
        sum(o.sum() for o in out).backward()
    return dict(_timed(run, repeat), available=True, unverified=UNVERIFIED)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fs", type=float, default=48000.0)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    args = ap.parse_args(argv)

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
           "machine": platform.processor() or platform.machine()}
    cases = {}
    for name, learnable, backward in (("forward", False, False),
                                      ("forward_backward_input", False, True),
                                      ("forward_backward_all_params", True, True)):
        layer = rn.Dau1997(args.fs, learnable=learnable)
        w = torch.from_numpy(rng.standard_normal((layer.parts[-1].n_out, 1)).astype(dt))
        r = _timed(_case(layer, x0, w, backward), args.repeat)
        r["rtf"] = r["best_s"] / audio
        r["channels"], r["outputs"] = layer.parts[0].n_out, layer.parts[-1].n_out
        cases[name] = r
    res["rtamt"] = cases
    amt = _torch_amt(x0, args.fs, args.repeat)
    res["torch_amt"] = amt
    if amt.get("available"):
        res["speedup_vs_torch_amt"] = amt["best_s"] / cases["forward_backward_input"]["best_s"]
        res["speedup_vs_torch_amt_unverified"] = UNVERIFIED
    print(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
