"""The EBU R128 meter in the scheduler (``Scheduler.open('r128', fs, channels=2)``).

Every stream's published M, S, I, LRA and TP must equal, to the bit, those of its own
offline :class:`~rtamt.loudness.bs1770.LoudnessMeter` fed the same blocks; snapshots are
the meter's own (an offline meter continues them, and another stream restores them); the
meter's options reach it through ``model_kwargs``.  Nothing here asserts wall time.
"""
from __future__ import annotations

import numpy as np
import pytest

from rtamt.loudness.bs1770 import LoudnessMeter
from rtamt.loudness.r128stream import OUTPUTS, R128Stream
from rtamt.models import processor_by_name
from rtamt.scheduler import Scheduler

from _streams import feed

FS = 48000.0
EXACT = dict(sample_dtype="float64", policy="drop-newest", admission="best-effort",
             budget_ms=2000.0, history=0)


def _programme(seed: int, n: int, channels: int = 2) -> np.ndarray:
    """A stereo programme of its own level and spectrum: a tone in noise whose level
    steps every 0.7 s (so that the loudness range is not 0), ``(channels, n)``."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / FS
    f = rng.uniform(100, 8000, (channels, 1))
    step = 10 ** (rng.uniform(-40, 0, n // int(0.7 * FS) + 1) / 20)
    env = step[(np.arange(n) // int(0.7 * FS))]
    x = env * (0.3 * np.sin(2 * np.pi * f * t) + 0.05 * rng.standard_normal((channels, n)))
    return x * 10 ** (rng.uniform(-30, 0) / 20)


class _Keep:
    """Subscriber: every result's frames and outputs."""

    def __init__(self, h):
        self.rows = []
        h.subscribe(self)

    def __call__(self, r):
        self.rows.append((r.start, r.frames, dict(r.outputs)))


def _offline_rows(meter: LoudnessMeter, x: np.ndarray, rows: list) -> list:
    """The offline meter's outputs for the same blocks as the stream's results."""
    return [meter.process_all(x[:, a:a + n]) for a, n, _ in rows]


def _same(a: dict, b: dict) -> bool:
    """Every output equal to the bit (None for None, -inf for -inf)."""
    return set(a) == set(b) == set(OUTPUTS) and all(
        (a[k] is None and b[k] is None) or (a[k] is not None and b[k] is not None
                                            and np.float64(a[k]).tobytes()
                                            == np.float64(b[k]).tobytes())
        for k in OUTPUTS)


def test_64_stereo_streams_equal_their_offline_meters():
    n, secs = 64, 4.5
    rng = np.random.default_rng(40)
    xs = [_programme(i, int(secs * FS)) for i in range(n)]
    with Scheduler(threads=2, realtime=None) as s:
        hs = [s.open("r128", FS, block=4096, channels=2, name=f"prog{i}", **EXACT)
              for i in range(n)]
        keeps = [_Keep(h) for h in hs]
        feed(hs, xs, rng, lo=500, hi=20000)
        for h in hs:
            h.close("drain", timeout=60)
        assert {g: v["streams"] for g, v in s.stats()["_groups"].items()} == {}
    seen = set()
    for x, k in zip(xs, keeps):
        assert sum(f for _, f, _ in k.rows) == x.shape[1]
        assert [a for a, _, _ in k.rows] == list(np.cumsum([0] + [f for _, f, _ in k.rows])[:-1])
        want = _offline_rows(LoudnessMeter(fs=FS, channels=2), x, k.rows)
        assert all(_same(got, w) for (_, _, got), w in zip(k.rows, want))
        last = k.rows[-1][2]
        assert all(last[q] is not None for q in OUTPUTS)      # 4.5 s: every output defined
        seen.add(last["integrated"])
    assert len(seen) == n                                     # different programmes


def test_options_reach_the_meter_and_snapshots_are_the_meters():
    x = _programme(7, int(5.2 * FS), channels=6)
    kw = {"layout": "5.1", "truepeak": "bs1770", "mode": "exact", "lra_hop": 10}
    with Scheduler(threads=2, realtime=None) as s:
        h = s.open("r128", FS, block=1000, channels=6, model_kwargs=kw, **EXACT)
        g = s.open("bs1770", FS, block=1000, channels=6, model_kwargs=kw, **EXACT)
        assert isinstance(h.proc, R128Stream)
        assert h.proc.params == LoudnessMeter(fs=FS, channels=6, **kw).params
        half = 3 * 48000
        feed([h], [x[:, :half]], np.random.default_rng(1), lo=100, hi=3000)
        h.wait_idle(30)
        snap = h.snapshot()
        off = LoudnessMeter(fs=FS, channels=6, **kw)
        off.load_state_dict(snap["state"])       # an offline meter continues the stream
        g.restore(snap)                          # and so does another stream
        keep_h, keep_g = _Keep(h), _Keep(g)
        for k in (h, g):
            feed([k], [x[:, half:]], np.random.default_rng(2), lo=100, hi=3000)
            k.close("drain", timeout=30)
    tail = x[:, half - snap["pending"].shape[0]:]
    want = _offline_rows(off, tail, [(a - keep_h.rows[0][0], f, o) for a, f, o in keep_h.rows])
    assert all(_same(o, w) for (_, _, o), w in zip(keep_h.rows, want))
    assert [o for _, _, o in keep_g.rows] == [o for _, _, o in keep_h.rows]
    assert keep_h.rows[-1][2]["loudness_range"] is not None


def test_stats_and_reset_like_other_streams():
    x = _programme(3, int(1.0 * FS))
    with Scheduler(threads=1, realtime=None) as s:
        h = s.open("r128", FS, block=2400, channels=2, **EXACT)
        feed([h], [x], np.random.default_rng(3), lo=1000, hi=5000)
        h.wait_idle(30)
        st = h.stats()
        assert st.blocks == 20 and st.rejected_blocks == 0
        assert h.snapshot()["state"]["kind"] == "LoudnessMeter"
        h.reset()
        assert h.proc.meter.samples_processed == 0
        h.close("drain", timeout=30)


def test_open_by_name_errors_name_the_meters():
    with pytest.raises(ValueError, match="r128"):
        processor_by_name("bs1771", FS)
    with pytest.raises(ValueError, match="layout"):
        processor_by_name("r128", FS, channels=3)          # no default 3-channel layout
    m = processor_by_name("r128", FS, channels=2, kwargs={"mode": "exact"})
    assert m.params.mode == "exact" and m.design_identity()["name"] == "r128"


def test_admission_measures_the_meter_once_per_design():
    """The meter's cost model is measured (not the nominal guess), once per design: a
    second stream of the same design starts from the same model; admission refuses a
    meter stream the workers cannot carry, naming its cost."""
    from rtamt.scheduler import RtamtCapacityError

    with Scheduler(threads=1, realtime=None, start=False) as s:
        a = s.open("r128", FS, block=4800, channels=2, budget_ms=200)
        b = s.open("r128", FS, block=4800, channels=2, budget_ms=200)
        ca, cb = a.group.cost, b.group.cost
        assert a.group is not b.group                       # one programme per call
        assert (ca.fixed_s, ca.per_sample_s) == (cb.fixed_s, cb.per_sample_s)
        assert ca is not cb and ca.per_sample_s > 0
        assert (ca.fixed_s, ca.per_sample_s) != (1e-4, 0.0)  # measured, not nominal
        assert 0 < a.predicted_load < 1
    with Scheduler(threads=1, realtime=None, start=False, max_load=0.001) as s:
        with pytest.raises(RtamtCapacityError, match="r128"):
            s.open("r128", FS, block=256, channels=2, budget_ms=10)
