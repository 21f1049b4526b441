"""The FanOut's compiled intake: a chunk of one whole block goes into every idle stream's
input row in one nogil call (copy and value check for all of them), with the same results,
accounting and rejections as the per-stream intake."""
from __future__ import annotations

import numpy as np
import pytest

from rtamt.models import MODELS
from rtamt.scheduler import FanOut, Scheduler
from rtamt.scheduler.ring import take_rows
from rtamt.scheduler.stream import Stream

from _streams import tone_in_noise

FS = 48000
B = 256


def _signal(seed: int, n: int, dtype="float64") -> np.ndarray:
    return tone_in_noise(seed, n, FS, dtype)


@pytest.fixture
def took(monkeypatch):
    """Counts the blocks the compiled intake made ready (Stream.took_block calls)."""
    n = [0]
    orig = Stream.took_block

    def counted(self, ok, t_capture, now):
        n[0] += 1
        return orig(self, ok, t_capture, now)
    monkeypatch.setattr(Stream, "took_block", counted)
    return n


def _paced(fan, hs, x, blocks: int) -> None:
    """Push one whole block at a time and wait until every stream took it: each push
    finds the streams idle with nothing queued (the compiled intake's case)."""
    for k in range(blocks):
        assert fan.push(x[k * B:(k + 1) * B])
        for h in hs:
            assert h.wait_idle(30)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_whole_blocks_go_through_the_compiled_intake_exactly(dtype, took):
    """12 streams of two designs (two groups) on one FanOut, fed one block per push: the
    first group's streams take every block through the compiled intake, the other group's
    through the per-stream intake, and every stream equals its offline run to the bit."""
    N, K = 12, 24
    x = np.stack([_signal(80 + c, K * B, dtype) for c in range(N)], axis=1)
    names = ["dau1997" if c % 3 else "king2019" for c in range(N)]
    with Scheduler(threads=2) as s:
        hs = [s.open(m, FS, B, dtype=dtype, admission="best-effort", budget_ms=1000)
              for m in names]
        outs = [[] for _ in hs]
        for h, o, m in zip(hs, outs, names):
            h.subscribe(lambda r, o=o, m=m: o.append(np.array(r.outputs[m])))
        fan = FanOut(hs)
        _paced(fan, hs, x, K)
        fan.stop("drain", timeout=60)
    n_first = names.count(names[0])
    assert took[0] == n_first * K
    for c, m in enumerate(names):
        st = hs[c].stats()
        assert (st.blocks, st.frames_processed, st.rejected_blocks) == (K, K * B, 0)
        assert st.queue_max_frames == B
        want = MODELS[m](FS)(x[:, c])
        assert np.array_equal(np.concatenate(outs[c], axis=-1), want), (m, c)


def test_streams_without_input_rows_take_the_per_stream_intake(took):
    """Moore2016 diotic streams have no batch form (one stream per call, no input rows):
    fed one whole block per push they go through the per-stream intake, exactly."""
    fs, K = 32000, 12
    x = np.stack([tone_in_noise(95 + c, K * B, fs) for c in range(2)], axis=1)
    with Scheduler(threads=2) as s:
        hs = [s.open("moore2016", fs, B, admission="best-effort", budget_ms=1000)
              for _ in range(2)]
        assert not any(h.group.batchable for h in hs)
        outs = [[] for _ in hs]
        for h, o in zip(hs, outs):
            h.subscribe(lambda r, o=o: o.append(np.array(r.outputs["moore2016"]["stl"])))
        fan = FanOut(hs)
        _paced(fan, hs, x, K)
        fan.stop("drain", timeout=60)
    assert took[0] == 0
    for c in range(2):
        assert hs[c].stats().blocks == K
        want = MODELS["moore2016"](fs)(x[:, c])["stl"]
        assert np.array_equal(np.concatenate(outs[c], axis=-1), want)


def test_a_bad_value_rejects_that_stream_block_alone(took):
    """A NaN in one stream's block and a value beyond the model's input limit in another's,
    both arriving through the compiled intake: those two blocks are rejected (named by
    stream, block, channel and sample; the states unchanged, the next result marked after
    a gap), every other block and stream goes on exactly."""
    N, K = 6, 10
    x = np.stack([_signal(90 + c, K * B) for c in range(N)], axis=1)
    with Scheduler(threads=2) as s:
        hs = [s.open("dau1997", FS, B, name=f"s{c}", admission="best-effort",
                     budget_ms=1000, sample_dtype="float64") for c in range(N)]
        res = [[] for _ in hs]
        for h, r in zip(hs, res):
            h.subscribe(lambda q, r=r: r.append((q.gap, np.array(q.outputs["dau1997"]))))
        limit = hs[0].limit
        bad = x.copy()
        bad[3 * B + 17, 1] = np.nan
        bad[5 * B + 200, 4] = 2.0 * limit
        fan = FanOut(hs)
        _paced(fan, hs, bad, K)
        fan.stop("drain", timeout=60)
    assert took[0] == N * K
    for c, blk, smp in ((1, 3, 17), (4, 5, 200)):
        st = hs[c].stats()
        assert st.rejected_blocks == 1 and st.blocks == K - 1
        assert f"s{c}: block {blk}" in st.last_error
        assert f"channel 0, sample {smp} (stream sample {blk * B + smp})" in st.last_error
        kept = np.concatenate([x[:blk * B, c], x[(blk + 1) * B:, c]])
        assert np.array_equal(np.concatenate([o for _, o in res[c]], axis=-1),
                              MODELS["dau1997"](FS)(kept))
        assert [g for g, _ in res[c]] == [k == blk for k in range(K - 1)]
    for c in (0, 2, 3, 5):
        assert hs[c].stats().rejected_blocks == 0
        assert np.array_equal(np.concatenate([o for _, o in res[c]], axis=-1),
                              MODELS["dau1997"](FS)(x[:, c]))


def test_take_rows_copies_converts_and_checks_each_row():
    """The kernel alone: rows of a (streams, capacity, channels) bank into (slots,
    channels, block) rows at any slots, converted to the rows' dtype; one verdict per
    row for NaN, infinity and the limit."""
    rng = np.random.default_rng(3)
    src = rng.standard_normal((5, 40, 2)).astype(np.float32)
    src[1, 12, 1] = np.inf
    src[3, 10, 0] = 7.0
    src[4, 30, 0] = np.nan                      # outside the rows copied: no effect
    dst = np.zeros((8, 2, 16))
    cols, slots = np.array([0, 1, 3, 4]), np.array([6, 2, 0, 5])
    ok = np.zeros(4, bool)
    take_rows(src, cols, 8, 16, dst, slots, 5.0, ok)
    assert ok.tolist() == [True, False, False, True]
    for c, sl in zip(cols, slots):
        assert np.array_equal(dst[sl], src[c, 8:24].T.astype(np.float64))
    assert not dst[[1, 3, 4, 7]].any()
    take_rows(src, cols, 8, 16, dst, slots, np.inf, ok)
    assert ok.tolist() == [True, False, True, True]


def test_a_failing_compiled_intake_falls_back_and_says_so(monkeypatch):
    """Should the compiled intake raise, the worker lives, the error is listed once in
    Scheduler.errors, and every stream takes its input one by one, exactly."""
    from rtamt.scheduler import fanout

    def broken(*a):
        raise RuntimeError("kernel unavailable")
    monkeypatch.setattr(fanout, "take_rows", broken)
    N, K = 3, 6
    x = np.stack([_signal(70 + c, K * B) for c in range(N)], axis=1)
    with Scheduler(threads=2) as s:
        hs = [s.open("dau1997", FS, B, admission="best-effort", budget_ms=1000,
                     sample_dtype="float64") for _ in range(N)]
        outs = [[] for _ in hs]
        for h, o in zip(hs, outs):
            h.subscribe(lambda r, o=o: o.append(np.array(r.outputs["dau1997"])))
        fan = FanOut(hs)
        _paced(fan, hs, x, K)
        fan.stop("drain", timeout=60)
        errors = list(s.errors)
    assert len(errors) == 1 and "compiled intake failed" in errors[0], errors
    for c in range(N):
        assert np.array_equal(np.concatenate(outs[c], axis=-1),
                              MODELS["dau1997"](FS)(x[:, c]))
