"""Block-invariant reduction of a stream's rate along its last (time) axis.

:class:`Decimator` turns ``(..., T)`` blocks into ``(..., T')`` blocks with one value per
``factor`` input samples (a frame), and gives bit for bit the same values whatever the block
partition (a stream fed in one call, or in blocks of any sizes, down to one sample).  The
value of frame ``j`` pools samples ``j*factor .. (j+1)*factor - 1``:

* ``how="rms"``: root mean square, ``sqrt(mean(x^2))``: the frame's RMS amplitude, the
  usual envelope of a band-pass (carrier) signal such as a gammatone or modulation-filter
  output, whose plain mean is close to 0 (a short-time RMS as in the spectrogram-like
  "cochleagram" representations);
* ``how="power"``: mean square, ``mean(x^2)`` (the RMS squared);
* ``how="mean"``: arithmetic mean, a boxcar average followed by keeping every
  ``factor``-th value (a crude low-pass, not an anti-aliasing filter; right for
  non-negative, slowly varying outputs such as an envelope, not for a carrier);
* ``how="max"``: the largest value of the frame;
* ``how="pick"``: keeps samples ``0, factor, 2*factor, ...`` of the stream (a counter
  across blocks), no pooling at all (``T' = ceil(T / factor)``).

For the pooled kinds a frame's sum (or maximum) is accumulated strictly in time order
(``ufunc.accumulate``), and a frame split between blocks continues from the partial value
carried over, so the operations are the same ones in the same order for every partition.
A trailing incomplete frame is not emitted (``T' = T // factor`` over the stream).
NaN samples (e.g. the padding of ragged outputs) make their frame NaN.
"""
from __future__ import annotations

import numpy as np

__all__ = ["Decimator", "POOLS"]

#: the pooled kinds of :class:`Decimator` (``'pick'`` keeps samples instead)
POOLS = ("rms", "power", "mean", "max")


class Decimator:
    """Stateful rate reduction by an integer ``factor`` (see the module docstring)."""

    def __init__(self, factor: int, how: str = "mean"):
        factor = int(factor)
        if factor < 1:
            raise ValueError(f"decimation factor must be >= 1, got {factor}")
        if how not in POOLS + ("pick",):
            raise ValueError(f"how must be one of {', '.join(POOLS + ('pick',))}, got {how!r}")
        self.factor, self.how = factor, how
        self._ufunc = np.maximum if how == "max" else np.add
        self.reset()

    def reset(self) -> None:
        """Start a new stream."""
        self._pos = 0          # samples seen
        self._acc = None       # partial sum / maximum of the frame in progress

    def output_length(self, n: int) -> int:
        """Output samples for a stream of ``n`` input samples."""
        if self.how == "pick":
            return -(-int(n) // self.factor)
        return int(n) // self.factor

    def _finish(self, s: np.ndarray) -> np.ndarray:
        """Frame sums (or maxima) to the pooled values."""
        if self.how == "max":
            return s
        s = s / s.dtype.type(self.factor)
        return np.sqrt(s, out=s) if self.how == "rms" else s

    def __call__(self, x) -> np.ndarray:
        x = np.asarray(x)
        N, T = self.factor, x.shape[-1]
        if self.how == "pick":
            y = x[..., (-self._pos) % N::N]
            self._pos += T
            return y
        if N == 1 and self.how in ("mean", "max"):
            self._pos += T
            return x
        if not np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.result_type(x.dtype, np.float32))
        if self.how in ("rms", "power"):
            x = x * x
        acc = self._ufunc.accumulate
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
            s = acc(part, axis=-1)[..., -1]
            if k + head == N:
                out.append(s[..., None])
                self._acc = None
            else:
                self._acc = s
        nf = (T - head) // N
        if nf:
            frames = x[..., head:head + nf * N].reshape(lead + (nf, N))
            out.append(acc(frames, axis=-1)[..., -1])
        tail = x[..., head + nf * N:]
        if tail.shape[-1]:
            self._acc = acc(tail, axis=-1)[..., -1]
        self._pos += T
        if not out:
            return np.empty(lead + (0,), dtype=x.dtype)
        s = out[0] if len(out) == 1 else np.concatenate(out, axis=-1)
        return self._finish(s)
