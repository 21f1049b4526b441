"""Helpers for the cluster tests: Dau1997 streams fed through a cluster in random
interleaved chunks, checked block by block against one offline run of each signal."""
from __future__ import annotations

import numpy as np

from rtamt.models import MODELS

from _streams import Recorder, tone_in_noise

FS = 16000.0
BLOCK = 256
#: every stream exact: float64 input ring, admitted whatever the machine's load
EXACT = dict(sample_dtype="float64", admission="best-effort", budget_ms=1000.0)


def run_streams(cluster, n: int, frames: int, *, events=None, seed: int = 0,
                prefix: str = "s") -> list:
    """Open ``n`` Dau1997 streams on ``cluster``, push ``frames`` samples into each in
    random chunks (round by round over the streams; ``events[k](handles)`` runs before
    round ``k``), close them (draining) and return ``(handles, recorders, signals)``."""
    xs = [tone_in_noise(seed + i, frames, FS) for i in range(n)]
    hs = [cluster.open("dau1997", FS, BLOCK, name=f"{prefix}{i}", **EXACT) for i in range(n)]
    recs = [Recorder(h, "dau1997") for h in hs]
    rng = np.random.default_rng(seed)
    pos, k = 0, 0
    while pos < frames:
        if events and k in events:
            events[k](hs)
        m = int(rng.integers(100, 700))
        for h, x in zip(hs, xs):
            assert h.push(x[pos:pos + m], wait=True, timeout=60)
        pos, k = pos + m, k + 1
    for h in hs:
        h.close("drain", timeout=60)
    return hs, recs, xs


def assert_exact(recs: list, xs: list) -> None:
    """Every stream's outputs equal its offline run, bit for bit, with every block once
    and in order (``seq`` 0, 1, ...; ``start`` = seq × block)."""
    for rec, x in zip(recs, xs):
        seqs = [r.seq for r in rec.results]
        assert seqs == list(range(len(seqs)))
        assert [r.start for r in rec.results] == [BLOCK * s for s in seqs]
        got = np.concatenate(rec.outs, axis=-1)
        want = MODELS["dau1997"](FS)(x)
        assert got.shape == want.shape and np.array_equal(got, want)
