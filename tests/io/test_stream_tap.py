"""rtamt.io.StreamTap (a scheduler subscriber handing a stream's outputs to a writer thread
through a ring of preallocated slots) and rtamt.io.OutputSet (several outputs committed as
one directory): the blocks come out in order and unchanged, the worker allocates no array
memory, a full ring waits (``wait=True``) or says which block it lost, a failure inside
the subscriber is reported, never raised into the scheduler; a set appears whole or not
at all, an older one intact."""
from __future__ import annotations

import errno
import json
import os
import threading
import time
import tracemalloc

import numpy as np
import pytest

from rtamt.io import OutputSet, StreamTap, read_outputs
from rtamt.io import writer as writer_mod
from rtamt.scheduler.stream import Result

from _helpers import file_tree

R, N = 275, 256                       # Dau1997's packed modfb rows, one block


def _result(seq: int, n: int = N, value: float | None = None) -> Result:
    """A block as a stream publishes it: time-last views of time-major memory."""
    tm = np.empty((n, R))
    tm[:] = np.arange(R) + 1000.0 * seq if value is None else value
    tm[:, 0] = np.arange(n)
    return Result(seq, seq * N, n, {"dau1997": tm.T}, 0.0, 0.0, 0.0, False)


def _tap(slots=4, **kw) -> StreamTap:
    return StreamTap({"modfb": ((R,), N, np.float64)}, slots, name="ch0", **kw)


def test_blocks_come_out_in_order_and_unchanged():
    tap = _tap()
    for k in range(10):
        r = _result(k, n=N if k % 3 else 100)
        tap(r)
        b = tap.oldest()
        assert (b.seq, b.start, b.frames, b.gap) == (k, k * N, r.frames, False)
        assert np.array_equal(b.outputs["modfb"], r.outputs["dau1997"])
        tap.release()
    assert tap.pending() == 0 and tap.lost_blocks == 0 and tap.error is None
    assert tap.blocks == 10 and tap.kept_frames == tap.frames


def test_the_worker_allocates_no_array_memory():
    """The subscriber copies into its slots: traced allocations stay far below one block
    (Dau1997's 563 kB), however many blocks go through."""
    tap = _tap(slots=8)
    blocks = [_result(k) for k in range(64)]
    tap(blocks[0])
    tap.release()
    tracemalloc.start()
    try:
        for r in blocks[1:]:
            tap(r)
            tap.release()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16_000, peak
    assert tap.lost_blocks == 0


def test_full_ring_live_loses_the_block_and_says_which():
    tap = _tap(slots=2)
    tap(_result(0))
    tap(_result(1))
    tap(_result(2))                                  # no room, no waiting
    assert tap.lost_blocks == 1 and tap.lost_frames == N
    assert "block 2" in tap.error and "writer fell behind" in tap.error
    tap.release()
    tap(_result(3))                                  # after a loss nothing more is kept
    assert tap.lost_blocks == 2 and tap.pending() == 1


def test_full_ring_with_wait_holds_the_worker_until_a_slot_is_free():
    tap = _tap(slots=2, wait=True)
    tap(_result(0))
    tap(_result(1))
    done = threading.Event()
    t = threading.Thread(target=lambda: (tap(_result(2)), done.set()))
    t.start()
    assert not done.wait(0.3)                        # backpressure: the worker waits
    assert np.array_equal(tap.oldest().outputs["modfb"], _result(0).outputs["dau1997"])
    tap.release()
    assert done.wait(5.0)
    t.join()
    assert tap.lost_blocks == 0 and tap.waits == 1 and tap.wait_s > 0.2
    assert [tap.oldest().seq, tap.release(), tap.oldest().seq] == [1, None, 2]


def test_cancel_ends_a_wait_and_counts_the_block_lost():
    tap = _tap(slots=2, wait=True)
    tap(_result(0))
    tap(_result(1))
    t = threading.Thread(target=tap, args=(_result(2),))
    t.start()
    time.sleep(0.1)
    tap.cancel()
    t.join(5.0)
    assert not t.is_alive() and tap.lost_blocks == 1 and "cancelled" in tap.error


@pytest.mark.parametrize("bad", ["missing", "too long", "shape"])
def test_a_failure_inside_the_subscriber_is_reported_not_raised(bad):
    tap = _tap()
    r = _result(0)
    if bad == "missing":
        r = r._replace(outputs={"dau1997": {"other": r.outputs["dau1997"]}})
    elif bad == "too long":
        r = _result(0, n=N + 1)
    else:
        r = r._replace(outputs={"dau1997": r.outputs["dau1997"][:10]})
    tap(r)                                           # no exception
    assert tap.lost_blocks == 1 and tap.pending() == 0
    assert tap.error.startswith("ch0: block 0 could not be kept: "), tap.error


# ------------------------------------------------------------------ OutputSet
def _write_set(dest, value: float, commit=True) -> OutputSet:
    s = OutputSet(dest, ["ch0", "ch1"], lengths={"x": 6})
    for c in range(2):
        s[f"ch{c}"].write({"x": np.full((3, 6), value + c)})
        s[f"ch{c}"].add_meta(fs=np.float64(16000))
    if commit:
        s.commit({"run": value}, {"ch0": {"channel": 0}, "ch1": {"channel": 1}})
    return s


def test_set_is_committed_whole_and_replaces_an_older_one(tmp_path):
    dest = tmp_path / "o"
    _write_set(dest, 1.0)
    assert sorted(os.listdir(dest)) == ["ch0", "ch1", "rtamt.json"]
    top = json.loads((dest / "rtamt.json").read_text())
    assert top["run"] == 1.0 and top["members"]["ch1"]["x"] == [3, 6]
    assert json.loads((dest / "ch0" / "rtamt.json").read_text())["channel"] == 0
    assert float(read_outputs(dest / "ch1")["x"][0, 0]) == 2.0
    _write_set(dest, 5.0)
    assert float(read_outputs(dest / "ch0")["x"][0, 0]) == 5.0
    assert os.listdir(tmp_path) == ["o"]


def test_aborted_or_failed_set_leaves_the_older_one_intact(tmp_path, monkeypatch):
    dest = tmp_path / "o"
    _write_set(dest, 1.0)
    before = file_tree(tmp_path)
    _write_set(dest, 2.0, commit=False).abort()
    assert file_tree(tmp_path) == before
    real, calls = os.rename, []

    def rename(a, b):                     # the second member's rename fails
        calls.append(b)
        if len(calls) == 2:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(a, b)

    monkeypatch.setattr(writer_mod.os, "rename", rename)
    with pytest.raises(OSError, match="Input/output error"):
        _write_set(dest, 3.0)
    assert file_tree(tmp_path) == before


def test_set_refuses_a_npz_name_and_a_foreign_directory(tmp_path):
    with pytest.raises(OSError, match="directory, not a .npz"):
        OutputSet(tmp_path / "o.npz", ["ch0"])
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    with pytest.raises(OSError, match="not an rtamt output"):
        OutputSet(mine, ["ch0"])
    assert sorted(os.listdir(tmp_path)) == ["mine"]


@pytest.mark.parametrize("fan", [False, True], ids=["stream", "fanout"])
def test_backpressure_is_not_a_source_that_stopped(fan):
    """A source pushing as fast as possible (``push(wait=True)``) into a stream whose
    subscriber holds the worker (a full tap waiting for its writer) waits longer than the
    source timeout: that is backpressure, not a dead input (a 10-minute ``stream --fast
    --out`` run was stopped with "input stopped delivering audio" and exit 3)."""
    from rtamt.filterbank import Gammatone, GammatoneParams
    from rtamt.scheduler import FanOut, Scheduler

    fs = 16000.0
    sched = Scheduler(threads=1)
    streams = [sched.open(Gammatone(GammatoneParams(fs=fs)), fs, 256, policy="drop-newest",
                          admission="best-effort", source_timeout=0.3, history=0,
                          ring_seconds=0.5, name=f"s{c}") for c in range(2 if fan else 1)]
    held = threading.Event()

    def slow(r):                        # block 5 holds the worker for 1 s
        if r.seq == 5:
            held.set()
            time.sleep(1.0)

    streams[0].subscribe(slow)
    into = FanOut(streams) if fan else streams[0]
    x = 0.01 * np.random.default_rng(0).standard_normal((int(4 * fs), len(streams)))
    try:
        into.source_started()
        for k in range(0, x.shape[0], 256):
            assert into.push(x[k:k + 256] if fan else x[k:k + 256, 0], wait=True)
        into.source_ended()
        assert held.is_set()
        for s in streams:
            assert s.wait_idle(30.0)
            st = s.stats()
            assert st.source_error is None and st.source_stalls == 0, st.line()
            assert st.frames_processed == x.shape[0] and st.dropped_frames == 0
    finally:
        sched.close("discard", 5.0)
