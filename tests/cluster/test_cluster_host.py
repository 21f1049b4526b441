"""A cluster worker's side (:class:`rtamt.cluster.host.StreamHost`) without Ray: numbered
steps keep their order whatever thread runs them first, a rejected block does not hold a
step until its timeout, the direct TCP link (authenticated, ``TCP_NODELAY``) carries steps
and replies, and the periodic snapshots are spread over the period."""
from __future__ import annotations

import os
import socket
import threading
from multiprocessing.connection import AuthenticationError, Client

import numpy as np
import pytest

from rtamt.cluster.host import SNAPSHOTS_PER_STEP, StreamHost
from rtamt.cluster.transport import no_delay
from rtamt.models import MODELS

from _clusterrun import BLOCK, EXACT, FS
from _streams import tone_in_noise


def _host(n: int, snapshot_every_s=None) -> StreamHost:
    h = StreamHost(threads=1, snapshot_every_s=snapshot_every_s,
                   scheduler={"realtime": None})
    for sid in range(n):
        verdict, info = h.open(sid, dict(model="dau1997", fs=FS, block=BLOCK,
                                          name=f"s{sid}", results="all", **EXACT))
        assert verdict == "ok", info
    return h


def _batch(sids: list, x: np.ndarray) -> list:
    """One group: every stream in ``sids`` gets ``x`` (frames,)."""
    return [(list(sids), np.repeat(x[None, :, None], len(sids), axis=0))]


def _outputs(replies: list, sid: int) -> np.ndarray:
    items = [r for rep in replies for r in rep["results"].get(sid, [])]
    assert [r[0] for r in items] == list(range(len(items)))      # every block once, in order
    return np.concatenate([r[3]["dau1997"] for r in items], axis=-1)


def test_numbered_steps_push_and_reply_in_their_order():
    """Step 1 started first waits for step 0's push; the stream sees step 0's input first
    and its outputs are the offline run's, bit for bit; the replies come in order."""
    h = _host(1)
    try:
        x = tone_in_noise(1, 4 * BLOCK, FS)
        out: dict = {}
        t = threading.Thread(target=lambda: out.update(
            r1=h.step(_batch([0], x[2 * BLOCK:]), 30.0, 1)))
        t.start()
        t.join(0.3)
        assert t.is_alive()                     # waiting for message 0
        r0 = h.step(_batch([0], x[:2 * BLOCK]), 30.0, 0)
        t.join(30)
        got = _outputs([r0, out["r1"]], 0)
        assert np.array_equal(got, MODELS["dau1997"](FS)(x))
    finally:
        h.shutdown()


def test_a_rejected_block_does_not_hold_the_step():
    """A block with a NaN publishes no result: the step sees the stream idle and returns
    (rather than waiting out its 60 s timeout); the next block goes on."""
    h = _host(1)
    try:
        x = tone_in_noise(2, 2 * BLOCK, FS)
        bad = x.copy()
        bad[BLOCK // 2] = np.nan
        done = threading.Event()
        t = threading.Thread(target=lambda: (h.step(_batch([0], bad[:BLOCK]), 60.0, 0),
                                             done.set()))
        t.start()
        assert done.wait(20), "the step waited for a block that was rejected"
        rep = h.step(_batch([0], x[BLOCK:]), 60.0, 1)
        assert [r[0] for r in rep["results"][0]] == [0]
        assert h.stats(0).rejected_blocks == 1
    finally:
        h.shutdown()


def test_direct_link_carries_steps_with_nodelay_and_refuses_a_wrong_key():
    """serve(): the client's connection, authenticated with the key, gets each message's
    reply in order; both ends run with TCP_NODELAY; another key is refused."""
    h = _host(2)
    key = os.urandom(32)
    try:
        addr = h.serve(key)
        conn = no_delay(Client(addr, authkey=key))
        s = socket.socket(fileno=os.dup(conn.fileno()))
        assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        s.close()
        x = tone_in_noise(3, 3 * BLOCK, FS)
        for k in range(3):                       # two in flight, then one more
            conn.send((30.0, _batch([0, 1], x[k * BLOCK:(k + 1) * BLOCK])))
        replies = []
        for _ in range(3):
            assert conn.poll(30)
            tag, rep = conn.recv()
            assert tag == "ok"
            replies.append(rep)
        want = MODELS["dau1997"](FS)(x)
        for sid in (0, 1):
            assert np.array_equal(_outputs(replies, sid), want)
        conn.close()
        addr = h.serve(key)                      # a wrong key is refused, the right one
        with pytest.raises(AuthenticationError):  # still gets in
            Client(addr, authkey=os.urandom(32))
        conn = Client(addr, authkey=key)
        conn.send((30.0, _batch([0], x[:BLOCK])))
        assert conn.poll(30) and conn.recv()[0] == "ok"
        conn.close()
    finally:
        h.shutdown()


def test_periodic_snapshots_are_spread_over_the_period():
    """Eight streams, K = 0.2 s: no reply carries more than SNAPSHOTS_PER_STEP snapshots,
    every stream's comes again within about K, and each is the stream's state at a block
    boundary that its input continues exactly."""
    h = _host(8, snapshot_every_s=0.2)
    try:
        x = tone_in_noise(4, 240 * BLOCK, FS)
        seen: dict = {sid: [] for sid in range(8)}
        n_snaps = []
        for k in range(240):
            rep = h.step(_batch(range(8), x[k * BLOCK:(k + 1) * BLOCK]), 30.0, k)
            snaps = rep["snapshots"] or {}
            n_snaps.append(len(snaps))
            for sid, snap in snaps.items():
                seen[sid].append(snap)
            threading.Event().wait(BLOCK / FS / 4)   # paced: 240 blocks over ~1 s
        assert max(n_snaps) <= SNAPSHOTS_PER_STEP
        assert all(len(v) >= 3 for v in seen.values()), {k: len(v) for k, v in seen.items()}
        snap = seen[5][1]
        off = MODELS["dau1997"](FS)
        off.load_state_dict(snap["state"])
        pos = snap["position"]
        assert len(snap["pending"]) == 0
        want = MODELS["dau1997"](FS)(x[:240 * BLOCK])[..., pos:]
        assert np.array_equal(off(x[pos:240 * BLOCK]), want)
    finally:
        h.shutdown()
