"""Recover perturbed Dau1997 parameters by gradient descent through the stream.

The reference is :class:`rtamt.nn.Dau1997` with its designed parameters (Dau, Kollmeier &
Kohlrausch 1997a, JASA 102, 2892).  A copy starts with one adaptation time constant
(``tau_2``, 50 ms) and the modulation filters' quality factor ``Q`` (2) deliberately
wrong, and learns them back from the reference's modulation-filterbank output.

The signal is streamed in blocks with the model state carried from block to block, as a
recurrent network would run it; back-propagation is truncated every ``--window`` blocks
(``rtamt.nn.detach_state``), with one optimiser step per window (truncated BPTT).  The
parameters are the layer's log parametrisation (``theta = log(tau / tau0)``,
``log(Q / Q0)``), optimised with Adam; all other parameters are held at their design.

Prints the loss curve (normalised squared error per epoch), then the recovered values,
and on its last line a JSON object with the relative errors of the recovered parameters.

    python examples/fit_dau1997.py [--epochs N] [--seed S]
"""
from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch

import rtamt.nn as rn

FS = 8000.0
FC = (1000.0,)              # one auditory channel: small and fast
BLOCK = 250                 # samples per block (31.25 ms)
LOOP = 1                    # the adaptation loop to recover (0-based: tau_2 = 50 ms)
TAU_FACTOR, Q_FACTOR = 1.25, 1.3   # the perturbations


def stimulus(seed: int, seconds: float = 0.5) -> torch.Tensor:
    """A 1 kHz tone, amplitude-modulated at 4, 20, 50 and 120 Hz, with 20 dB level steps
    (so that the adaptation loops and the modulation filters both act), at about 60 dB
    SPL (rtamt's calibration: an RMS of 1 is 100 dB SPL); ``(1, T)`` float64."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * FS)) / FS
    env = 1.0 + sum(0.2 * np.sin(2 * np.pi * fm * t + rng.uniform(0, 2 * np.pi))
                    for fm in (4.0, 20.0, 50.0, 120.0))
    steps = np.where((t * 4).astype(int) % 2 == 0, 1.0, 0.1)
    x = 0.01 * np.sqrt(2) * steps * env * np.sin(2 * np.pi * 1000.0 * t)
    return torch.from_numpy(x[None])


def blocks(x: torch.Tensor):
    return [x[:, a:a + BLOCK] for a in range(0, x.shape[1], BLOCK)]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=25)
    ap.add_argument("--window", type=int, default=4, help="blocks per truncated-BPTT window")
    ap.add_argument("--lr", type=float, default=0.04)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    torch.manual_seed(args.seed)

    x = stimulus(args.seed)
    reference = rn.Dau1997(FS, fc=FC)
    with torch.no_grad():                       # the targets, streamed the same way
        targets, state = [], None
        for xb in blocks(x):
            y, state = reference(xb, state)
            targets.append(y)

    model = rn.Dau1997(FS, fc=FC, learnable=["adaptloop", "modfb"])
    th_tau, th_mf = model.theta["adaptloop"], model.theta["modfb"]
    with torch.no_grad():                       # the deliberate perturbations
        th_tau[LOOP] = math.log(TAU_FACTOR)
        th_mf[-1] = math.log(Q_FACTOR)
    # only tau_LOOP and Q are fitted: the other entries' gradients are masked to 0
    # (Adam then never moves them)
    masks = {th_tau: torch.zeros_like(th_tau), th_mf: torch.zeros_like(th_mf)}
    masks[th_tau][LOOP] = 1.0
    masks[th_mf][-1] = 1.0
    opt = torch.optim.Adam([th_tau, th_mf], lr=args.lr)
    n_windows = math.ceil(len(targets) / args.window)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.epochs * n_windows,
                                                       eta_min=args.lr * 0.02)
    tau0 = reference["adaptloop"].coeffs.tau[LOOP]
    q0 = reference["modfb"].stage.params.Q

    print(f"fitting tau_{LOOP + 1} (true {tau0 * 1e3:.1f} ms, start x{TAU_FACTOR}) and Q "
          f"(true {q0:g}, start x{Q_FACTOR}); {len(targets)} blocks of {BLOCK} samples, "
          f"truncated BPTT over {args.window} blocks")
    print("epoch  loss (normalised squared error)")
    curve = []
    for epoch in range(args.epochs):
        state, total, norm = None, 0.0, 0.0
        for w0 in range(0, len(targets), args.window):
            opt.zero_grad()
            err, ref = 0.0, 0.0
            for xb, yt in zip(blocks(x)[w0:w0 + args.window], targets[w0:w0 + args.window]):
                y, state = model(xb, state)
                err = err + (y - yt).square().sum()
                ref = ref + yt.square().sum()
            (err / ref).backward()
            for p, m in masks.items():
                p.grad.mul_(m)
            opt.step()
            sched.step()
            state = rn.detach_state(state)        # truncate: the next window starts here
            total, norm = total + err.item(), norm + ref.item()
        curve.append(total / norm)
        bar = "#" * max(0, min(60, int(60 + 6 * math.log10(max(curve[-1], 1e-12)))))
        print(f"{epoch + 1:5d}  {curve[-1]:.3e}  {bar}")

    tau = float(model.learned("adaptloop")["tau"][LOOP])
    q = float(model.learned("modfb")["Q"])
    result = {"tau_true": float(tau0), "tau_fit": tau, "q_true": float(q0), "q_fit": q,
              "tau_rel_err": abs(tau / tau0 - 1), "q_rel_err": abs(q / q0 - 1),
              "loss_first": curve[0], "loss_last": curve[-1],
              "seconds": round(time.perf_counter() - t_start, 2)}
    print(f"tau_{LOOP + 1}: {tau * 1e3:.3f} ms (true {tau0 * 1e3:.3f}), Q: {q:.4f} "
          f"(true {q0:g})")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
