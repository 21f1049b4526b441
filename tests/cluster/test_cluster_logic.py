"""rtamt.cluster's client logic with its workers in this process (no Ray): placement,
batched transport, move, drain, recovery from snapshots and the report of a recovery
that lost input.  The same logic on a real Ray cluster: test_ray_cluster.py."""
from __future__ import annotations

import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

import numpy as np
import pytest

from rtamt.cluster import Cluster
from rtamt.models import MODELS
from rtamt.scheduler import RtamtCapacityError

from _clusterrun import BLOCK, EXACT, FS, assert_exact, run_streams
from _streams import Recorder, tone_in_noise

ROOT = Path(__file__).resolve().parents[2]


def test_core_install_and_import_leave_ray_out():
    """ray is the extra's alone, and neither ``import rtamt`` nor ``import rtamt.cluster``
    imports it."""
    ray = [r for r in requires("rtamt") if r.lower().startswith("ray")]
    assert ray and all('extra == "cluster"' in r or 'extra == "test"' in r for r in ray)
    assert any('extra == "cluster"' in r for r in ray)
    code = ("import sys, rtamt, rtamt.cluster, rtamt.scheduler; "
            "print('ray' in sys.modules, 'ray.actor' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    assert out == ["False", "False"]


@pytest.fixture
def cluster():
    c = Cluster.in_process(workers=2, threads=1, snapshot_every_s=0.05,
                           scheduler={"realtime": None})
    yield c
    c.close()


def test_batched_transport_move_drain_and_recovery_are_exact(cluster):
    """Four streams over two workers: one message per worker and period carries every
    stream's input; a move, a drain and a worker's death mid-run leave every stream's
    results those of its offline run, every block once."""
    calls = []
    real = cluster.transport.call

    def counting(worker, method, *args):
        if method == "step":            # groups (stream ids, stacked chunks)
            assert all(xs.ndim == 3 and xs.shape[0] == len(sids) for sids, xs in args[0])
            calls.append(sorted(sid for sids, _ in args[0] for sid in sids))
        return real(worker, method, *args)
    cluster.transport.call = counting

    def move(hs):
        cluster.move(hs[0], 1 - hs[0].worker)

    def drain(hs):
        src = hs[1].worker
        assert set(cluster.drain(src).values()) == {1 - src}
        assert len({h.worker for h in hs}) == 1

    def kill(hs):
        for w in cluster.workers:
            w.accepting = True
        cluster.move(hs[2], 1 - hs[2].worker)
        cluster.kill_worker(hs[2].worker)

    hs, recs, xs = run_streams(cluster, 4, 5000, events={3: move, 8: drain, 12: kill})
    assert_exact(recs, xs)
    assert [h.moves for h in hs][0] >= 1 and sum(h.recoveries for h in hs) >= 1
    rec = cluster.recoveries[-1]
    assert rec.streams and not rec.inexact and not rec.unplaced
    # batched: one step message per worker carries several streams' input
    assert max(len(c) for c in calls) > 1
    assert sum(len(c) for c in calls) > len(calls)


def test_lost_replay_is_reported_by_name_with_its_span():
    """A replay buffer shorter than the input since the last snapshot: the recovery names
    the stream and the frames it lost; the stream goes on from its oldest kept frame (its
    next result marked as after a gap), exactly as a fresh model fed from there."""
    with Cluster.in_process(workers=2, threads=1, snapshot_every_s=1e6, buffer_s=0.1,
                            scheduler={"realtime": None}) as c:
        a = c.open("dau1997", FS, BLOCK, name="lossy", worker=0, **EXACT)
        rec = Recorder(a, "dau1997")
        x = tone_in_noise(3, 6000, FS)
        for i in range(0, 4000, 200):
            assert a.push(x[i:i + 200], wait=True, timeout=30)
        assert c.flush()
        c.kill_worker(0)
        for i in range(4000, 6000, 200):
            assert a.push(x[i:i + 200], wait=True, timeout=30)
        assert c.flush()
        r = c.recoveries[-1]
        assert r.streams == [] and list(r.inexact) == ["lossy"]
        lost0, kept = r.inexact["lossy"]
        assert lost0 == 0 and 0 < kept < 6000 and a.lost == [(0, kept)]
        k = next(i for i, res in enumerate(rec.results) if res.gap)
        assert rec.results[k].start == kept and a.worker == 1
        a.close("drain")
        got = np.concatenate(rec.outs[k:], axis=-1)
        assert np.array_equal(got, MODELS["dau1997"](FS)(x[kept:]))


def test_no_worker_admits(cluster):
    """A block longer than its budget: every worker refuses, the error names each."""
    with pytest.raises(RtamtCapacityError, match="worker 0.*worker 1"):
        cluster.open("dau1997", FS, 4096, budget_ms=1.0, name="late")
    assert cluster.streams == []


def test_snapshot_and_restore_through_the_handle(cluster):
    """A handle's snapshot is the local stream's (an offline model continues it); a fresh
    handle restored from it continues the stream's blocks and bits."""
    x = tone_in_noise(5, 6000, FS)
    a = cluster.open("dau1997", FS, BLOCK, name="a", **EXACT)
    a.push(x[:3000], wait=True)
    snap = a.snapshot()
    assert snap["position"] == 3000 and snap["seq"] == 3000 // BLOCK
    b = cluster.open("dau1997", FS, BLOCK, name="b", **EXACT)
    b.restore(snap)
    rec = Recorder(b, "dau1997")
    b.push(x[3000:], wait=True)
    b.close("drain")
    off = MODELS["dau1997"](FS)
    off.load_state_dict(snap["state"])
    want = off(np.concatenate([snap["pending"][:, 0], x[3000:]]))
    assert np.array_equal(np.concatenate(rec.outs, axis=-1), want)
    assert rec.results[0].seq == snap["seq"] and rec.results[0].start == snap["pending_start"]
    a.close("discard")
