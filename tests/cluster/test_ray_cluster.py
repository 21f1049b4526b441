"""rtamt.cluster on a real local Ray cluster: two workers, each a separate process with
its own scheduler, started and stopped here (issue 43's acceptance).  Every stream is
checked block by block against one offline run of its signal; no timing is asserted
(the recovery time is printed)."""
from __future__ import annotations

import socket
import time

import pytest

from rtamt.scheduler import RtamtCapacityError

from _clusterrun import FS, assert_exact, run_streams

ray = pytest.importorskip("ray", reason="rtamt.cluster needs Ray: pip install 'rtamt[cluster]'")

from rtamt.cluster import Cluster, RtamtClusterError  # noqa: E402

pytestmark = pytest.mark.timeout(170)


def test_unreachable_address_is_a_clear_error_not_a_hang():
    """Nothing listens at the address: RtamtClusterError naming it, after the connect
    timeout (Ray's own connect would retry for minutes)."""
    with socket.socket() as s:          # a free port on this machine, then closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    with pytest.raises(RtamtClusterError, match=f"127.0.0.1:{port}.*ray start --head"):
        Cluster(f"127.0.0.1:{port}", connect_timeout_s=2.0)
    print(f"unreachable address refused after {time.perf_counter() - t0:.2f} s")


@pytest.fixture(scope="module")
def cluster():
    """Two workers of one thread each on a local Ray instance, shut down at the end
    (also when a test fails)."""
    c = Cluster.local(workers=2, threads=1, snapshot_every_s=0.05,
                      scheduler={"realtime": None})
    yield c
    c.close()
    assert not ray.is_initialized()


def test_no_worker_admits_the_stream(cluster):
    with pytest.raises(RtamtCapacityError, match="worker 0.*worker 1"):
        cluster.open("dau1997", FS, 4096, budget_ms=1.0, name="late")
    assert cluster.streams == []


def test_16_streams_over_2_workers_are_exact(cluster):
    """16 Dau1997 streams placed over both workers, fed in random interleaved chunks,
    carried in one message per worker and period: every stream bit-identical to its
    offline run."""
    placed = {}

    def where(hs):
        placed.update({h.name: h.worker for h in hs})
    hs, recs, xs = run_streams(cluster, 16, 3000, events={0: where}, prefix="p")
    assert set(placed.values()) == {0, 1}
    assert_exact(recs, xs)


def test_move_under_load_is_exact(cluster):
    """Streams moved between the workers while all of them are fed: no block lost or
    repeated, every stream bit-identical to one that never moved."""
    def move(hs):
        for h in hs[:3]:
            cluster.move(h, 1 - h.worker)
    hs, recs, xs = run_streams(cluster, 8, 4000, events={2: move, 6: move, 9: move},
                               prefix="m")
    assert [h.moves for h in hs[:3]] == [3, 3, 3]
    assert_exact(recs, xs)


def test_sigkill_of_a_worker_mid_run_is_recovered_exactly(cluster):
    """One worker's process is killed with SIGKILL mid-run: its streams are restored on
    the other worker from their last snapshots, their input since then replayed, and
    every stream goes on bit-identically (runs last: the cluster keeps one worker)."""
    def kill(hs):
        cluster.kill_worker(0)
    hs, recs, xs = run_streams(cluster, 6, 4000, events={6: kill}, prefix="k")
    rec = cluster.recoveries[-1]
    assert rec.worker == 0 and not rec.inexact and not rec.unplaced
    assert sorted(rec.streams) == sorted(h.name for h in hs if h.recoveries)
    assert rec.streams and all(h.worker == 1 for h in hs)
    assert_exact(recs, xs)
    print(f"recovery of {len(rec.streams)} streams after SIGKILL: {1e3 * rec.seconds:.0f} ms "
          "(from the death's detection: restored and their replay processed)")
