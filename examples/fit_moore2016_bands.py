"""Fit band gains so that Moore2016's specific loudness of a signal matches a target.

The signal is the sum of four narrow bands of noise (third-octave wide, centred at 250 Hz,
1, 3 and 6 kHz, each about 60 dB SPL; rtamt's calibration: an RMS of 1 is 100 dB SPL),
presented diotically.  The target pattern is the specific loudness (sone/Cam, per ear,
channel and 1 ms frame: the ``specific_loudness`` output of :class:`rtamt.nn.Moore2016`,
Moore, Glasberg, Varathanathan & Schlittenlacher 2016, Trends in Hearing 20) of the same
bands with gains of +6, -5, +4 and -8 dB.  Starting from 0 dB, the four gains (dB) are
fitted by a quasi-Newton method (L-BFGS, ``torch.optim.LBFGS`` with a strong-Wolfe line
search) on the relative squared error of the pattern, the gradient passing through every
stage of the model (its frame stages' adjoints, docs/nn.md).

The signal is streamed in blocks with the model state carried from block to block (not
detached: the gradient of each pass's loss crosses the block boundaries, as one call on
the whole signal would give).

Prints the loss per evaluation, then on its last line a JSON object: the fitted and target
gains (dB), the pattern's relative RMS error (``pattern_rel_err``; converged below 0.02)
and the run time.

    python examples/fit_moore2016_bands.py [--evals N] [--seed S]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

import rtamt.nn as rn

FS = 32000.0
CENTRES = (250.0, 1000.0, 3000.0, 6000.0)      # Hz
TARGET_DB = (6.0, -5.0, 4.0, -8.0)
SECONDS = 0.15
BLOCK = 1600                                   # samples per block (50 ms)


def bands(seed: int) -> torch.Tensor:
    """The four bands of noise, ``(4, T)`` float64, each third-octave wide and of RMS 0.01
    (60 dB SPL), made by zeroing the FFT of white noise outside each band."""
    rng = np.random.default_rng(seed)
    n = int(SECONDS * FS)
    f = np.fft.rfftfreq(n, 1.0 / FS)
    out = []
    for fc in CENTRES:
        spec = np.fft.rfft(rng.standard_normal(n))
        spec[(f < fc * 2 ** (-1 / 6)) | (f > fc * 2 ** (1 / 6))] = 0.0
        b = np.fft.irfft(spec, n)
        out.append(0.01 * b / np.sqrt(np.mean(b ** 2)))
    return torch.from_numpy(np.array(out))


def pattern(layer, parts: torch.Tensor, gains_db: torch.Tensor) -> torch.Tensor:
    """The specific loudness ``(1, 2, K, F)`` of the bands ``parts`` with ``gains_db``,
    diotic, streamed in blocks of :data:`BLOCK` samples with the state carried."""
    x = (10.0 ** (gains_db[:, None] / 20.0) * parts).sum(0)
    x = torch.stack([x, x])[None]                          # (1, 2, T): both ears
    state, out = None, []
    for a in range(0, x.shape[-1], BLOCK):
        y, state = layer(x[..., a:a + BLOCK], state)
        out.append(y)
    return torch.cat(out, dim=-1)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evals", type=int, default=10,
                    help="loss and gradient evaluations (passes over the stream)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    layer = rn.Moore2016(FS, output="specific_loudness")
    parts = bands(args.seed)
    with torch.no_grad():
        target = pattern(layer, parts, torch.tensor(TARGET_DB, dtype=torch.float64))
    norm = float((target ** 2).mean())
    gains = torch.zeros(len(CENTRES), dtype=torch.float64, requires_grad=True)
    # quasi-Newton (L-BFGS with a strong-Wolfe line search): four smooth parameters
    opt = torch.optim.LBFGS([gains], lr=1.0, max_iter=args.evals, history_size=10,
                            line_search_fn="strong_wolfe", tolerance_grad=1e-12,
                            tolerance_change=1e-14)
    curve = []

    def closure():
        opt.zero_grad()
        loss = ((pattern(layer, parts, gains) - target) ** 2).mean() / norm
        loss.backward()
        curve.append(float(loss.detach()))
        print(f"{len(curve) - 1:4d}  {curve[-1]:.3e}  gains "
              f"{np.round(gains.detach().numpy(), 2)}")
        return loss

    opt.step(closure)
    with torch.no_grad():
        fit = pattern(layer, parts, gains)
    err = float(torch.sqrt(((fit - target) ** 2).mean() / (target ** 2).mean()))
    res = {"gains_db": [round(float(g), 3) for g in gains.detach()],
           "target_db": list(TARGET_DB), "pattern_rel_err": err,
           "loss_first": curve[0], "loss_last": curve[-1], "evals": len(curve),
           "seconds": round(time.perf_counter() - t0, 2)}
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    main()
