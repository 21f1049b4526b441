"""The cost model: the predicted wall time of one call of a design, measured once per
design and corrected by every call.

A design's model is ``t(call) = scale * (fixed_s + per_sample_s * n * T)`` for a call of
``n`` streams of ``T`` samples.  :meth:`CostTable.measure` times copies of the design's
processor when its first stream opens (which also compiles or loads its kernels);
:meth:`CostModel.observe` folds every call's measured time into ``scale``.  Admission and
placement (:mod:`rtamt.scheduler.placement`) predict with it.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np

from .groups import make_runner

__all__ = ["CostModel", "CostTable"]

_perf = time.perf_counter


@dataclass
class CostModel:
    """Predicted wall time of one call: ``scale * (fixed_s + per_sample_s * n * T)`` for
    ``n`` streams of ``T`` samples.  ``fixed_s`` and ``per_sample_s`` are measured once per
    design; ``scale`` follows the measured time of every call (exponential average of
    measured / predicted, weight ``alpha``)."""

    fixed_s: float
    per_sample_s: float
    scale: float = 1.0
    alpha: float = 0.02
    calls: int = 0

    def cost(self, n: int, T: int) -> float:
        return self.scale * (self.fixed_s + self.per_sample_s * n * T)

    def observe(self, n: int, T: int, seconds: float) -> None:
        pred = self.fixed_s + self.per_sample_s * n * T
        if pred > 0:
            r = min(max(seconds / pred, 0.25), 8.0)
            self.scale += self.alpha * (r - self.scale)
            self.calls += 1

    def describe(self) -> str:
        return (f"{1e6 * self.scale * self.fixed_s:.1f} us per call + "
                f"{1e9 * self.scale * self.per_sample_s:.1f} ns per stream-sample")



class CostTable(dict):
    """The cost models of a scheduler, ``{design key: CostModel}``: one per design and
    device (a design's key names its backend and device).  ``max_batch`` is the
    scheduler's largest call."""

    def __init__(self, max_batch: int):
        super().__init__()
        self.max_batch = int(max_batch)

    def measure(self, proto, example_T, dkey) -> CostModel:
        """The cost model of design ``dkey``: measured once per design on copies of
        ``proto`` (this also compiles or loads the design's kernels; ``example_T`` is an
        input of the design's shape and dtype), or nominal (``1e-4`` s per call) when
        ``proto`` is None, corrected by every call."""
        c = self.get(dkey)
        if c is not None:
            return c
        if proto is None:     # not measured: a nominal model, corrected by every call
            c = self[dkey] = CostModel(1e-4, 0.0)
            return c
        T = 256
        x1 = np.zeros(example_T.shape[:-1] + (T,), example_T.dtype)

        def best(obj, x, reps):
            obj(x)                       # first call: compile / load, state creation
            ts = []
            for _ in range(reps):
                t0 = _perf()
                obj(x)
                ts.append(_perf() - t0)
            return min(ts)

        t1 = best(copy.deepcopy(proto), x1, 5)
        leaves = proto._state_leaves() if getattr(proto, "batchable", False) else None
        if leaves is not None:
            k = min(8, self.max_batch) if self.max_batch > 1 else 1
        else:
            k = 1
        if k > 1:
            b = proto.state_dict()["stream"].get("batch")

            def batch(n):
                x = np.stack([x1] * n)
                return x if b is None else x.reshape((n * b,) + x.shape[2:])
            tk = best(make_runner(proto, k)[0], batch(k), 3)
            per = max((tk - t1) / ((k - 1) * T), 0.0)
            fixed = max(t1 - per * T, 0.1 * t1)
            # other batch sizes once: kernels that a batch size selects are loaded (or
            # compiled) here, not in the first call of a running stream.  2..17 covers
            # every specialisation a size selects (numba: layout; Triton: 1 and multiples
            # of 16), max_batch the largest call; not every size up to a max_batch of
            # thousands (a GPU group), which would take minutes
            for n in sorted(set(range(2, min(self.max_batch, 17) + 1)) | {self.max_batch}):
                if n != k:
                    make_runner(proto, n)[0](batch(n))
        else:
            fixed, per = 0.3 * t1, 0.7 * t1 / T
        c = self[dkey] = CostModel(fixed, per)
        return c

