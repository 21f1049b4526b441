"""``push`` refuses what the models refuse (issue 38, item 4): integer samples (with the
scaling hint the models give), lists, scalars, complex numbers and chunks of another
shape raise :class:`rtamt.RtamtInputError` naming the stream and the block, before
anything is queued or counted; through a ``FanOut`` as well.  (The torch layers' refusal
of a ``(T, 1)`` column: tests/nn/test_nn.py.)"""
from __future__ import annotations

import time

import numpy as np
import pytest

import rtamt
from rtamt import RtamtInputError
from rtamt.scheduler import FanOut, Scheduler

FS = 48000
#: the models' own hint for integer PCM (rtamt.engine.contract.check_float_dtype)
HINT = r"convert integer PCM with x / 2\*\*\(bits-1\)"

#: (what, chunk, what the message says) for a one-channel stream
BAD = [
    ("int16", np.zeros(480, np.int16), "dtype int16 is not supported.*" + HINT),
    ("int32 frames x 1", np.zeros((480, 1), np.int32), "dtype int32 .*" + HINT),
    ("list", [0.0] * 480, "expected a numpy array.*got list"),
    ("numpy scalar", np.float64(0.5), r"expected shape \(frames, 1\), got \(\)"),
    ("int scalar", 3, "expected a numpy array.*got int"),
    ("0-d array", np.array(0.5), r"expected shape \(frames, 1\), got \(\)"),
    ("complex", np.zeros(480, complex), "dtype complex128 is not supported"),
    ("float16", np.zeros(480, np.float16), "dtype float16 is not supported"),
    ("two columns", np.zeros((480, 2)), r"expected shape \(frames, 1\), got \(480, 2\)"),
    ("3-d", np.zeros((480, 1, 1)), r"expected shape \(frames, 1\), got \(480, 1, 1\)"),
]


def _untouched(h) -> None:
    st = h.stats()
    assert (st.frames_received, st.chunks_pushed, st.dropped_chunks, st.queue_frames) == \
        (0, 0, 0, 0), st.line()
    assert h.ring.w_chunk == 0 and h.ring.stream_pos == 0 and not h.ring.data.any()


@pytest.mark.parametrize("wait", [False, True])
@pytest.mark.parametrize("what,chunk,says", BAD, ids=[b[0] for b in BAD])
def test_push_refuses_what_the_models_refuse_and_queues_nothing(what, chunk, says, wait):
    """Each bad chunk raises RtamtInputError naming the stream and the block (and, for
    integers, how to scale them); nothing is queued, counted or dropped, and a good push
    afterwards is block 0 of the stream.  (Before: int16 was taken unscaled, a list raised
    AttributeError, a numpy scalar IndexError, complex input a ComplexWarning.)"""
    with Scheduler(threads=1, realtime=None) as s:
        h = s.open("dau1997", FS, 240, budget_ms=1000, name="mic7", admission="best-effort")
        t_push = h.t_push
        with pytest.raises(RtamtInputError, match=r"stream 'mic7', block 0: " + says):
            h.push(chunk, wait=wait)
        _untouched(h)
        assert h.t_push == t_push and not h.notified
        # the models refuse the same chunk (lists and scalars, integers, complex)
        if what in ("int16", "list", "numpy scalar", "complex", "float16"):
            with pytest.raises(RtamtInputError):
                rtamt.Dau1997(FS)(chunk)
        x = np.full(480, 0.01)
        assert h.push(x, wait=wait) and h.wait_idle(30)
        r = h.latest()
        assert r.seq == 1 and r.start == 240 and not r.gap


def test_push_takes_torch_float_tensors_and_refuses_torch_integers():
    """A CPU float tensor is taken as the models take it; an integer tensor is refused
    with the stream and block named."""
    import torch

    with Scheduler(threads=1, realtime=None) as s:
        h = s.open("dau1997", FS, 240, budget_ms=1000, name="t", admission="best-effort")
        with pytest.raises(RtamtInputError, match="stream 't', block 0: .*torch.int16"):
            h.push(torch.zeros(480, dtype=torch.int16))
        _untouched(h)
        assert h.push(torch.full((480,), 0.01, dtype=torch.float64), wait=True)
        assert h.wait_idle(30) and h.stats().frames_processed == 480


@pytest.mark.parametrize("chunk,says", [
    (np.zeros((480, 3), np.int16), "dtype int16 is not supported.*" + HINT),
    ([[0.0] * 3] * 480, "expected a numpy array.*got list"),
    (np.zeros((480, 3), np.complex64), "dtype complex64 is not supported"),
    (np.float32(0.0), r"expected shape \(frames, 3\) \(3 streams.*got \(\)"),
], ids=["int16", "list", "complex", "scalar"])
def test_fanout_push_refuses_the_same_and_leaves_every_ring_untouched(chunk, says):
    """FanOut.push / push_streams refuse the same chunks, naming the streams and the
    block.  (Before: int16 was taken unscaled and push returned True.)"""
    s = Scheduler(threads=1, start=False, realtime=None)
    try:
        hs = [s.open("dau1997", FS, 256, admission="best-effort", name=f"ch{c}")
              for c in range(3)]
        fan = FanOut(hs)
        with pytest.raises(RtamtInputError, match=r"FanOut \('ch0' \.\. 'ch2'\), block 0: "
                           + says):
            fan.push(chunk)
        rows = np.asarray(chunk).T if isinstance(chunk, np.ndarray) and chunk.ndim else chunk
        with pytest.raises(RtamtInputError, match="block 0: "):
            fan.push_streams(rows)
        assert fan.bank.w_chunk == 0 and not fan.bank.data.any()
        assert all(h.stats().frames_received == 0 for h in hs)
    finally:
        s.close("discard", timeout=30)


def test_the_check_costs_the_hot_path_nothing_measurable():
    """Valid float input takes the same path as before: a type and a dtype test.  The
    median push of 256 float32 samples stays within a few microseconds (the budget of an
    audio callback is milliseconds; measured, not asserted tightly on a shared CPU)."""
    s = Scheduler(threads=1, start=False, realtime=None)
    try:
        h = s.open("dau1997", FS, 256, admission="best-effort", policy="drop-newest",
                   ring_seconds=60.0)
        x = np.zeros(256, np.float32)
        ts = []
        for _ in range(2000):
            t0 = time.perf_counter()
            h.push(x)
            ts.append(time.perf_counter() - t0)
        assert h.stats().dropped_chunks == 0
        assert np.median(ts) < 50e-6, np.median(ts)
    finally:
        s.close("discard", timeout=30)
