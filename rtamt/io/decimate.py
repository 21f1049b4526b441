"""Block-invariant reduction of a stream's rate along its last (time) axis.

:class:`Decimator` turns ``(..., T)`` blocks into ``(..., T')`` blocks with one value per
``factor`` input samples, and gives bit for bit the same values whatever the block
partition (a stream fed in one call, or in blocks of any sizes, down to one sample):

* ``how="mean"`` (default): frame ``j`` is the mean of samples ``j*factor ..
  (j+1)*factor - 1``.  Its sum is accumulated strictly in time order
  (``np.add.accumulate``), and a frame split between blocks continues from the partial sum
  carried over, so the additions are the same ones in the same order for every partition.
  A trailing incomplete frame is not emitted (``T' = T // factor`` over the stream).
  This is a boxcar average followed by keeping every ``factor``-th value: a crude low-pass,
  not an anti-aliasing filter.
* ``how="pick"``: keeps samples ``0, factor, 2*factor, ...`` of the stream (a counter
  across blocks), no filtering at all (``T' = ceil(T / factor)``).

NaN samples (e.g. the padding of ragged outputs) make their frame's mean NaN.
"""
from __future__ import annotations

import numpy as np

__all__ = ["Decimator"]


class Decimator:
    """Stateful rate reduction by an integer ``factor`` (see the module docstring)."""

    def __init__(self, factor: int, how: str = "mean"):
        factor = int(factor)
        if factor < 1:
            raise ValueError(f"decimation factor must be >= 1, got {factor}")
        if how not in ("mean", "pick"):
            raise ValueError(f"how must be 'mean' or 'pick', got {how!r}")
        self.factor, self.how = factor, how
        self.reset()

    def reset(self) -> None:
        """Start a new stream."""
        self._pos = 0          # samples seen
        self._acc = None       # partial sum of the frame in progress (how="mean")

    def output_length(self, n: int) -> int:
        """Output samples for a stream of ``n`` input samples."""
        if self.how == "pick":
            return -(-int(n) // self.factor)
        return int(n) // self.factor

    def __call__(self, x) -> np.ndarray:
        x = np.asarray(x)
        N, T = self.factor, x.shape[-1]
        if N == 1:
            self._pos += T
            return x
        if self.how == "pick":
            y = x[..., (-self._pos) % N::N]
            self._pos += T
            return y
        lead = x.shape[:-1]
        k = self._pos % N                     # samples already in the frame in progress
        out = []
        head = 0
        if k:
            head = min(N - k, T)
            if self._acc is None or self._acc.shape != lead or self._acc.dtype != x.dtype:
                raise ValueError(f"Decimator: block of shape {x.shape} {x.dtype} does not "
                                 f"continue the stream (reset() to start a new one)")
            part = np.concatenate([self._acc[..., None], x[..., :head]], axis=-1)
            s = np.add.accumulate(part, axis=-1)[..., -1]
            if k + head == N:
                out.append(s[..., None])
                self._acc = None
            else:
                self._acc = s
        nf = (T - head) // N
        if nf:
            frames = x[..., head:head + nf * N].reshape(lead + (nf, N))
            out.append(np.add.accumulate(frames, axis=-1)[..., -1])
        tail = x[..., head + nf * N:]
        if tail.shape[-1]:
            self._acc = np.add.accumulate(tail, axis=-1)[..., -1]
        self._pos += T
        if not out:
            return np.empty(lead + (0,), dtype=np.result_type(x.dtype, np.float32))
        s = out[0] if len(out) == 1 else np.concatenate(out, axis=-1)
        return s / s.dtype.type(N)
