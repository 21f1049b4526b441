"""torch_amt's side of ``python -m latency_bench.nn_speed --torch-amt-python PY``: run as a
script by torch_amt's own interpreter (``PY latency_bench/nn_speed_torch_amt.py ...``), in
a subprocess of the same run as rtamt's timings.  It imports only torch, numpy and
torch_amt (never rtamt: torch_amt's venv is a measuring instrument, not a dependency).

``--input X.npy``: the ``(batch, T)`` signal rtamt's cases timed (the same values).
``torch_amt.models.Dau1997(fs=fs, dtype=dtype)`` (its default configuration, 80 Hz to
8 kHz) runs on it with ``torch.set_num_threads(1)``; each run: a fresh float tensor of
the input requiring a gradient, ``out = model(x)`` (a list, one ``(batch, M_i, T)``
tensor per auditory channel), the loss ``sum_i (out_i * w_i).sum()`` with fixed random
weights ``w_i`` of the outputs' shapes, ``loss.backward()``; timed with
``time.perf_counter`` (and ``time.process_time``) around the whole of it.  Two warm-up
calls on the first 10 ms go first (TorchScript, which torch_amt's adaptation loops use,
profiles its first two calls and optimises from the third), then ``--repeat`` timed runs
on the whole input.

Prints one JSON object: ``available``, versions, ``runs_s`` (each timed run),
``best_s``, ``median_s``, ``cpu_s`` (the best run's process CPU time), ``channels`` and
``outputs`` (the modulation outputs summed over channels), ``fs``, ``dtype``, ``batch``,
``samples``.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import time

import numpy as np
import torch


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", required=True, help="(batch, T) .npy file")
    ap.add_argument("--fs", type=float, required=True)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    args = ap.parse_args(argv)
    from torch_amt.models import Dau1997

    torch.set_num_threads(1)
    dt = getattr(torch, args.dtype)
    x0 = np.load(args.input)
    model = Dau1997(fs=args.fs, dtype=dt)
    rng = np.random.default_rng(0)
    with torch.no_grad():
        shapes = [o.shape for o in model(torch.zeros(x0.shape[0], 16, dtype=dt))]
    w = [torch.from_numpy(rng.standard_normal((s[0], s[1], 1))).to(dt) for s in shapes]

    def run(sig):
        x = torch.from_numpy(sig).to(dt).requires_grad_(True)
        out = model(x)
        sum((o * wi).sum() for o, wi in zip(out, w)).backward()

    warm = x0[:, :max(1, int(round(0.01 * args.fs)))]
    for _ in range(2):
        run(warm)
    runs, cpu = [], []
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        run(x0)
        runs.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    res = {"available": True, "model": "torch_amt.models.Dau1997",
           "torch_amt": importlib.metadata.version("torch_amt"), "torch": torch.__version__,
           "fs": args.fs, "dtype": args.dtype, "batch": int(x0.shape[0]),
           "samples": int(x0.shape[1]), "threads": torch.get_num_threads(),
           "channels": int(model.num_channels), "outputs": int(sum(s[1] for s in shapes)),
           "runs_s": runs, "best_s": min(runs), "median_s": float(np.median(runs)),
           "cpu_s": cpu[runs.index(min(runs))]}
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    main()
