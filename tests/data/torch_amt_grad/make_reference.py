"""Reference forward outputs and input gradients of torch_amt 0.2.0 (float64 autograd) for
the gammatone filterbank, the IHC envelope and the adaptation loops of its Dau1997 model,
stored in ``reference.npz`` beside this script (issue 42 item 5).

Run with torch_amt's interpreter, never rtamt's (torch_amt is not a dependency of rtamt,
its tests or CI)::

    PY=$(../shared/tools/torch_amt_env.sh)        # from the repository root
    $PY tests/data/torch_amt_grad/make_reference.py

It imports only torch_amt, torch and numpy.  Everything is at 48 kHz, 0.1 s (4800
samples), in the models' internal units (RMS 1 = 100 dB SPL: torch_amt's adaptation loops
take ``minspl = 0`` dB as the level 1e-5, as rtamt's do).

Stored arrays (B = 3 signals, T = 4800 samples; every forward output at every 16th sample,
float32; every gradient whole, float32; every input float32, so that both libraries get
exactly the same float64 values):

* ``x`` (B, T): a gated noise burst (RMS 0.05, 74 dB SPL, on from 10 to 70 ms, 2 ms
  raised-cosine ramps), a 1 kHz tone burst (80 dB SPL, on from 5 ms, 5 ms ramps) and a
  logarithmic chirp from 200 Hz to 6 kHz (60 dB SPL, 2 ms ramps).
* ``fc_all`` (31,): the centre frequencies of ``torch_amt.models.Dau1997(fs=48000)``;
  ``gt_index``: the four of them used here (``fc = fc_all[gt_index]``).
* Gammatone: ``GammatoneFilterbank(fc, fs, dtype=float64)`` on ``x``; output ``gt_y``
  (B, 4, T/16), loss ``gt_loss = sum(W * y)``, gradient ``gt_grad`` (B, T) w.r.t. ``x``.
* IHC envelope: ``IHCEnvelope(fs, method='dau1996', dtype=float64)`` on the two channels
  ``stack([x, -x], 1)`` (both halves of the rectifier); output ``ihc_y`` (B, 2, T/16), loss
  ``ihc_loss``, gradient ``ihc_grad`` (B, T) w.r.t. ``x`` (through the stack).
* Adaptation loops: ``AdaptLoop(fs, dtype=float64)`` (Dau1997's: tau = 5, 50, 129, 253,
  500 ms, overshoot limit 10, minspl 0 dB) on ``adapt_in`` (B, 1, T): torch_amt's IHC
  envelope of ``x`` (channel 0 above), rounded to float32 (silence before each onset:
  the loops start at their resting state and meet the onset with the limiter acting);
  output ``adapt_y`` (B, 1, T/16), loss ``adapt_loss``, gradient ``adapt_grad`` (B, 1, T)
  w.r.t. ``adapt_in``.
* The three in a chain, as in Dau1997 (each stage fed torch_amt's own output of the
  one before): ``AdaptLoop(IHCEnvelope(GammatoneFilterbank(x)))``, loss ``chain_loss``
  with the gammatone's weights ``gt_w``, gradient ``chain_grad`` (B, T) w.r.t. ``x``.

``meta`` (JSON) also holds, for the adaptation loops alone on ``adapt_in``, how far
``AdaptLoop(fs)`` with torch_amt's default ``dtype=torch.float32`` (its coefficients held
in float32, the input float64) is from the float64 module: relative RMS of the forward
output and of the input gradient (``adapt_float32_module``).

Each loss is ``sum(W * y)`` with ``W = repeat(<stage>_w / 100, 16, axis=-1)``: stored
random int8 weights in [-100, 100], one per 16 samples of each output channel (so the
weights take little room and every output sample is weighted).
"""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch_amt.common.adaptation import AdaptLoop
from torch_amt.common.filterbanks import GammatoneFilterbank
from torch_amt.common.ihc import IHCEnvelope
from torch_amt.models import Dau1997

FS = 48000
T = 4800
EVERY = 16       # forward outputs stored at every EVERY-th sample
HOLD = 16        # one loss weight per HOLD samples
GT_INDEX = np.array([2, 12, 13, 23])     # 156 Hz, 919 Hz, 1052 Hz, 3597 Hz
OUT = Path(__file__).with_name("reference.npz")


def _ramp(n_on: int, n_off: int, n_ramp: int) -> np.ndarray:
    """A 0/1 gate over T samples, on from ``n_on`` to ``n_off`` with raised-cosine ramps
    of ``n_ramp`` samples."""
    g = np.zeros(T)
    g[n_on:n_off] = 1.0
    r = 0.5 - 0.5 * np.cos(np.pi * np.arange(n_ramp) / n_ramp)
    g[n_on:n_on + n_ramp] = r
    g[n_off - n_ramp:n_off] = r[::-1]
    return g


def signals(rng) -> np.ndarray:
    """The three test signals (B, T), float32 (see the module docstring)."""
    t = np.arange(T) / FS
    noise = 0.05 * rng.standard_normal(T) * _ramp(480, 3360, 96)
    tone = 0.1 * np.sqrt(2) * np.sin(2 * np.pi * 1000 * t) * _ramp(240, T, 240)
    f0, f1, dur = 200.0, 6000.0, T / FS
    k = np.log(f1 / f0) / dur
    chirp = 0.01 * np.sqrt(2) * np.sin(2 * np.pi * f0 * (np.exp(k * t) - 1) / k) \
        * _ramp(0, T, 96)
    return np.stack([noise, tone, chirp]).astype(np.float32)


def weights(rng, shape) -> np.ndarray:
    """Random int8 loss weights, one per HOLD samples of each output row."""
    return rng.integers(-100, 101, size=shape[:-1] + (shape[-1] // HOLD,)).astype(np.int8)


def weighted_loss(y: torch.Tensor, w: np.ndarray) -> torch.Tensor:
    """``sum(repeat(w / 100, HOLD) * y)``."""
    W = torch.from_numpy(np.repeat(w.astype(np.float64) / 100.0, HOLD, axis=-1))
    return (W * y).sum()


def run(stage, x_in: np.ndarray, make_input, w: np.ndarray):
    """Forward ``stage(make_input(x))`` in float64 from float32 ``x_in``, the weighted loss
    and its gradient w.r.t. ``x``: (output every EVERY-th sample float32, loss, grad
    float32)."""
    x = torch.from_numpy(x_in.astype(np.float64)).requires_grad_(True)
    y = stage(make_input(x))
    loss = weighted_loss(y, w)
    loss.backward()
    return (y.detach().numpy()[..., ::EVERY].astype(np.float32), float(loss.detach()),
            x.grad.numpy().astype(np.float32))


def main() -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(20261129)
    x = signals(rng)
    B = x.shape[0]
    fc_all = Dau1997(fs=FS, dtype=torch.float64).fc.numpy().astype(np.float64)
    fc = torch.from_numpy(fc_all[GT_INDEX])
    out = dict(x=x, fc_all=fc_all, gt_index=GT_INDEX, fs=np.float64(FS),
               every=np.int64(EVERY), hold=np.int64(HOLD))

    gt = GammatoneFilterbank(fc=fc, fs=FS, dtype=torch.float64)
    out["gt_w"] = weights(rng, (B, len(GT_INDEX), T))
    out["gt_y"], out["gt_loss"], out["gt_grad"] = run(gt, x, lambda v: v, out["gt_w"])

    ihc = IHCEnvelope(fs=FS, method="dau1996", dtype=torch.float64)
    out["ihc_w"] = weights(rng, (B, 2, T))
    out["ihc_y"], out["ihc_loss"], out["ihc_grad"] = run(
        ihc, x, lambda v: torch.stack([v, -v], 1), out["ihc_w"])

    with torch.no_grad():
        env = ihc(torch.from_numpy(x.astype(np.float64))[:, None, :])
    out["adapt_in"] = env.numpy().astype(np.float32)
    adapt = AdaptLoop(fs=FS, dtype=torch.float64)
    out["adapt_w"] = weights(rng, (B, 1, T))
    out["adapt_y"], out["adapt_loss"], out["adapt_grad"] = run(
        adapt, out["adapt_in"], lambda v: v, out["adapt_w"])

    def chain(v):
        return adapt(ihc(gt(v)))

    _, out["chain_loss"], out["chain_grad"] = run(chain, x, lambda v: v, out["gt_w"])

    f32 = AdaptLoop(fs=FS)                        # torch_amt's default dtype
    y32, _, g32 = run(f32, out["adapt_in"], lambda v: v, out["adapt_w"])

    def rel(a, b):
        return float(np.linalg.norm(a - b) / np.linalg.norm(b))

    meta = {"torch_amt": importlib.metadata.version("torch_amt"), "torch": torch.__version__,
            "numpy": np.__version__, "python": sys.version.split()[0],
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "adapt_float32_module": {"forward": rel(y32, out["adapt_y"]),
                                     "grad": rel(g32, out["adapt_grad"])}}
    out["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(OUT, **out)
    print(json.dumps(dict(meta, file=str(OUT), bytes=OUT.stat().st_size)))


if __name__ == "__main__":
    main()
