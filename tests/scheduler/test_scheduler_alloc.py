"""The scheduler's per-block path allocates nothing once warm: outputs go into arrays
that already exist (``proc(x, out=...)``, rtamt.scheduler.outputs.OutputPool), batched
copies of the processor are built and warmed when a stream opens, and each call's input
is stacked into the copy's own buffer."""
import time
import tracemalloc

import numpy as np
import pytest

import rtamt
from rtamt.scheduler import FanOut, Scheduler
from rtamt.scheduler.outputs import OutputPool

FS, B, N = 48000, 256, 32


def _feed(hs, fan, x, blocks):
    """Push ``blocks`` blocks to every stream (one FanOut push each), each block
    processed before the next is pushed."""
    loop = x.shape[0] // B
    for k in range(blocks):
        j = (k % loop) * B
        fan.push(x[j:j + B])
        for h in hs:
            assert h.wait_idle(timeout=60)


@pytest.mark.slow
def test_no_allocation_per_block_for_32_streams_over_10_s():
    x = (np.random.default_rng(0).standard_normal((50 * B, N)) * 0.01).astype(np.float32)
    seconds = 10.0
    blocks = int(seconds * FS / B)
    with Scheduler(threads=2, realtime=None) as s:
        # the input ring's chunk records are Python lists that hold each push's numbers:
        # filled once in the warm-up (max_chunks pushes), replaced in place after that
        hs = [s.open("dau1997", FS, B, budget_ms=1000, admission="best-effort",
                     policy="drop-newest", max_chunks=256) for _ in range(N)]
        fan = FanOut(hs)
        _feed(hs, fan, x, 600)       # warm-up: output pools and chunk records fill
        tracemalloc.start()
        try:
            _feed(hs, fan, x, 200)
            c0, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            _feed(hs, fan, x, blocks)
            c1, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        done = sum(h.stats().blocks for h in hs)
    assert done == N * (800 + blocks)
    out_bytes = B * 275 * 8                     # one stream-block of Dau1997's output
    # nothing grows: 0 bytes per stream-block (small Python objects come and go)
    assert (c1 - c0) // (N * blocks) == 0, (c1 - c0)
    # and no output, input or work array was made in the window: the peak stays below
    # one stream-block's output
    assert peak - c0 < out_bytes, (peak - c0)


def test_outputs_are_views_of_reused_arrays_and_never_change_under_a_holder():
    """A result's outputs stay valid while it is held (its array is not reused), and the
    arrays come back to the pool when results are let go."""
    x = (np.random.default_rng(1).standard_normal((20 * B, 3)) * 0.01).astype(np.float64)
    kept = []
    with Scheduler(threads=1, realtime=None) as s:
        hs = [s.open("dau1997", FS, B, budget_ms=1000, dtype="float64",
                     policy="drop-newest") for _ in range(3)]
        hs[0].subscribe(kept.append)                 # holds every result of stream 0
        fan = FanOut(hs)
        _feed(hs, fan, x, 20)
        latest = [h.latest().outputs["dau1997"] for h in hs]
    ref = rtamt.Dau1997(FS)
    y = ref(np.ascontiguousarray(x[:, 0]))
    got = np.concatenate([r.outputs["dau1997"] for r in kept], axis=-1)
    np.testing.assert_array_equal(got, y)          # bit-identical, none overwritten
    assert all(not o.flags.owndata for o in latest)   # views of pooled arrays


def test_full_calls_find_their_output_arrays_mapped_from_the_first_block():
    """Opening a stream fills the output pool of the group's full calls to its depth, with
    arrays written once: the first blocks' calls take them instead of making new ones
    (whose first write would map memory on the worker's path)."""
    x = (np.random.default_rng(2).standard_normal((12 * B, 16)) * 0.01).astype(np.float32)
    with Scheduler(threads=1, realtime=None, max_batch=8) as s:
        hs = [s.open("dau1997", FS, B, budget_ms=1000, policy="drop-newest",
                     dtype="float32") for _ in range(16)]
        g = hs[0].group
        depth = g.out_depth(8)
        pool = g.out_pools[8].arrays
        # addresses, not references: a reference held here would make the pool think
        # the array is still in use
        where = [a.ctypes.data for a in pool]
        assert depth == (g.history + 1) * 2 + 1 and len(where) == depth
        assert len(set(where)) == depth                         # distinct memory
        assert all(a.shape == pool[0].shape and a.dtype == np.float32 for a in pool)
        span = pool[0].nbytes
        pooled = []                    # per result: its output lies in one of those arrays
        for h in hs:
            h.subscribe(lambda r: pooled.append(any(
                w <= r.outputs["dau1997"].ctypes.data < w + span for w in where)))
        del pool
        fan = FanOut(hs)
        _feed(hs, fan, x, 12)
        assert [a.ctypes.data for a in g.out_pools[8].arrays] == where   # none added
    assert len(pooled) == 16 * 12 and all(pooled)


def test_pool_fill_writes_arrays_like_the_first():
    pool = OutputPool()
    pool.fill(3)
    assert pool.arrays == []                       # nothing to copy the shape from
    pool.keep(np.ones((2, 4, 3)), depth=3)
    pool.fill(3)
    assert len(pool.arrays) == 3 and pool.take() is pool.arrays[0]
    assert all(a.shape == (2, 4, 3) and not a.any() for a in pool.arrays[1:])
    pool.fill(2)                                   # never shrinks
    assert len(pool.arrays) == 3


def test_pool_hands_out_only_arrays_nobody_holds():
    pool = OutputPool()
    assert pool.take() is None
    pool.keep(np.zeros((2, 4, 3))[1], depth=2)   # the owner adopted; the view is gone
    assert len(pool.arrays) == 1
    arr = pool.take()
    assert arr is pool.arrays[0]
    view = arr[0]
    del arr
    assert pool.take() is None                    # ``view`` still holds it
    del view
    assert pool.take() is pool.arrays[0]
    pool.keep(np.zeros(3), depth=1)               # full: not adopted
    assert len(pool.arrays) == 1
    pool.keep(pool.arrays[0][0], depth=5)         # already in the pool
    assert len(pool.arrays) == 1
    pool.keep(np.zeros(3), depth=5)
    assert len(pool.arrays) == 2


@pytest.mark.parametrize("model", ["dau1997", "king2019"])
def test_chain_writes_into_out(model):
    m1, m2 = rtamt.models.MODELS[model](FS), rtamt.models.MODELS[model](FS)
    x = np.random.default_rng(2).standard_normal((2, 3 * B)) * 0.01
    for k in range(3):
        blk = x[:, k * B:(k + 1) * B]
        ref = m1(blk)
        out = np.empty((2, B, ref.shape[-2]), ref.dtype)
        y = m2(blk, out=out)
        np.testing.assert_array_equal(y, ref)
        assert y.base is out or y.base is out.base
    # an ``out`` that does not fit is not used
    y = m2(x[:, :B], out=np.empty((1, 1, 1)))
    assert y.shape == ref.shape


def test_runners_are_built_when_the_stream_opens():
    """Batched copies of every size a call can have, as many as can run at once (2
    workers; 3 streams: one call of 2 or 3 at a time), before any block is pushed."""
    with Scheduler(threads=2, realtime=None) as s:
        hs = [s.open("dau1997", FS, B, budget_ms=1000) for _ in range(3)]
        g = hs[0].group
        assert {n: g.built[n] for n in sorted(g.built)} == {1: 2, 2: 1, 3: 1}
        t0 = time.perf_counter()
        hs[0].push(np.zeros(B, np.float32))
        assert hs[0].wait_idle(timeout=30)
        assert time.perf_counter() - t0 < 30
        assert {n: g.built[n] for n in sorted(g.built)} == {1: 2, 2: 1, 3: 1}
