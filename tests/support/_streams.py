"""Helpers for tests that run streams through the scheduler: a subscriber that records
every output, and a feeder that pushes signals in random interleaved chunks."""
from __future__ import annotations

import numpy as np


class Recorder:
    """Subscribes to a stream: keeps every output (copied) and every Result."""

    def __init__(self, h, key):
        self.key, self.outs, self.results = key, [], []
        h.subscribe(self)

    def __call__(self, r):
        o = r.outputs[self.key]
        self.outs.append({k: np.array(v) for k, v in o.items()} if isinstance(o, dict)
                         else np.array(o))
        self.results.append(r)


def feed(handles: list, signals: list, rng, lo: int = 1, hi: int = 700) -> None:
    """Push every signal into its stream in random chunks, interleaved across streams."""
    pos = [0] * len(handles)
    lens = [x.shape[-1] for x in signals]
    while any(p < n for p, n in zip(pos, lens)):
        for i, h in enumerate(handles):
            if pos[i] < lens[i]:
                n = int(rng.integers(lo, hi))
                x = signals[i][..., pos[i]:pos[i] + n]
                assert h.push(x.T if x.ndim == 2 else x, wait=True, timeout=30)
                pos[i] += n


def tone_in_noise(seed: int, n: int, fs: float = 48000.0, dtype="float64") -> np.ndarray:
    """A tone of random frequency (300-3000 Hz, amplitude 0.1) in noise (RMS 0.02), (n,)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / fs
    x = 0.1 * np.sin(2 * np.pi * rng.uniform(300, 3000) * t) + 0.02 * rng.standard_normal(n)
    return x.astype(dtype)
