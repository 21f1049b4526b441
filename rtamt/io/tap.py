"""Taking a scheduled stream's outputs off the scheduler's threads, in bounded memory.

::

    delivery thread ── Result ──► StreamTap.__call__   (subscriber: copies the block's outputs
                                  into the next free slot of a preallocated ring; no array
                                  is allocated, no lock taken)
    writer thread ──────────────► StreamTap.oldest() / release()   (pools, converts, writes,
                                  then frees the slot)

A :class:`StreamTap` is subscribed to one stream (``stream.subscribe(tap)``); the scheduler
calls its subscribers from its delivery thread (:mod:`rtamt.scheduler.delivery`), so the
"producer" below is that thread.  Each slot
holds one block of every output named in its layout, time-major (``(capacity, *lead)``,
so a block computed time-major, as the stages compute it, is copied in one contiguous
pass), plus the block's ``start``, ``frames``, ``gap`` and ``seq``.  The ring has one
producer (the stream's blocks are published one at a time) and one consumer, each of which
only advances its own counter (``written`` / ``taken``), so neither side locks.

The result the subscriber receives is let go as soon as it is copied, so the stream's
output buffers are reused block after block (:mod:`rtamt.scheduler.outputs`): the memory
of a run is the ring, whatever its length.

When the ring is full:

* ``wait=True`` (a file processed as fast as possible): the producer waits until the
  consumer frees a slot.  That is backpressure, not loss: the stream's subscriber queue
  fills, its blocks wait, its input ring fills and a waiting ``push(wait=True)`` waits in
  turn; nothing is dropped.
* ``wait=False`` (a live input, where waiting would hold the stream's blocks back):
  the block is not kept.  The loss is counted (``lost_blocks``, ``lost_frames``) and
  :attr:`StreamTap.error` says which block was the first lost, so the consumer can stop
  and report it instead of writing an output with a hole.

A failure inside the subscriber (an output missing from the result, a block longer than
its slot, ``MemoryError``) never escapes to the scheduler (which would count it and go on):
it sets :attr:`StreamTap.error`, and every later block is counted as lost.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

__all__ = ["StreamTap", "TapBlock", "TapError"]


class TapError(RuntimeError):
    """A block could not be taken (see :attr:`StreamTap.error`)."""


class TapBlock(NamedTuple):
    """One block in a :class:`StreamTap` slot (views of the slot: valid until
    :meth:`StreamTap.release`).

    outputs : ``{name: (*lead, n) array}``, time last (views of time-major memory).
    seq     : the block's number in the stream.
    start   : stream index (frames) of its first input sample; a jump from the previous
              block's ``start + frames`` is a gap (input dropped or skipped upstream).
    frames  : input samples in the block.
    gap     : input was dropped, skipped or rejected before or inside this block.
    """

    outputs: dict
    seq: int
    start: int
    frames: int
    gap: bool


def _one_value(outputs: dict, names: tuple) -> dict:
    """A stream's ``Result.outputs`` as ``{output name: array}``: a processor returning one
    array is the single output of ``names``; one returning a dict of outputs (a loudness
    model, a selection of stages) is that dict."""
    if len(outputs) == 1:
        (v,) = outputs.values()
        if isinstance(v, dict):
            return v
        if len(names) == 1:
            return {names[0]: v}
    return outputs


class StreamTap:
    """Subscriber copying a stream's outputs into a ring of ``slots`` preallocated slots
    (see the module docstring).

    layout : ``{name: (lead, capacity, dtype)}``: output ``name`` of a block is
             ``(*lead, n)`` with ``n <= capacity`` samples; it is stored as ``dtype``.
    slots  : blocks the ring holds (>= 2).
    wait   : a full ring makes the producer wait (True) or loses the block (False).
    pick   : ``pick(result.outputs) -> {name: array}`` (default: the processor's one
             array, or its dict of outputs).
    name   : the stream's name, for messages.
    poll_s : how often a waiting producer looks for a free slot, s.

    Memory: ``slots * sum(capacity * prod(lead)) * itemsize`` bytes (:attr:`nbytes`),
    written once here so that its pages are mapped before the stream starts.
    """

    def __init__(self, layout: dict, slots: int, *, wait: bool = False,
                 pick: Callable[[dict], dict] | None = None, name: str = "stream",
                 poll_s: float = 0.0005):
        if int(slots) < 2:
            raise ValueError(f"StreamTap: slots must be >= 2, got {slots}")
        if not layout:
            raise ValueError("StreamTap: the layout names no output")
        self.slots, self.wait, self.name, self.poll_s = int(slots), bool(wait), name, poll_s
        names = tuple(layout)
        self.pick = pick or (lambda outputs: _one_value(outputs, names))
        self.lead = {k: tuple(int(d) for d in v[0]) for k, v in layout.items()}
        self.bufs = {}
        for k, (_, cap, dtype) in layout.items():
            b = np.empty((self.slots, int(cap)) + self.lead[k], dtype=dtype)
            b.fill(0)                       # map the pages now, not on the producer
            self.bufs[k] = b
        self.n = {k: np.zeros(self.slots, np.int64) for k in layout}
        self.meta = np.zeros((self.slots, 4), np.int64)      # seq, start, frames, gap
        self.written = 0          # slots filled (the producer's counter)
        self.taken = 0            # slots released (the consumer's counter)
        self.blocks = 0           # blocks received, kept or not
        self.frames = 0           # their input frames
        self.kept_frames = 0
        self.lost_blocks = 0
        self.lost_frames = 0
        self.waits = 0            # blocks that had to wait for a slot (wait=True)
        self.wait_s = 0.0
        self.error: str | None = None
        self.cancelled = False

    @property
    def nbytes(self) -> int:
        """Memory of the ring's slots, bytes."""
        return sum(b.nbytes for b in self.bufs.values())

    # ---------------------------------------------------------------- producer (subscriber)
    def __call__(self, r) -> None:
        self.blocks += 1
        self.frames += r.frames
        try:
            if self.error is None and self._room(r):
                self._put(r)
                self.kept_frames += r.frames
                return
        except Exception as e:  # noqa: BLE001 - never raised into the scheduler
            if self.error is None:
                self.error = (f"{self.name}: block {r.seq} could not be kept: "
                              f"{' '.join(str(e).split()) or type(e).__name__}")
        self.lost_blocks += 1
        self.lost_frames += r.frames

    def _room(self, r) -> bool:
        """A free slot for block ``r``: True; else wait (``wait``) or record the loss."""
        if self.written - self.taken < self.slots:
            return True
        if self.wait:
            t0 = time.perf_counter()
            self.waits += 1
            while self.written - self.taken >= self.slots:
                if self.cancelled:
                    break
                time.sleep(self.poll_s)
            self.wait_s += time.perf_counter() - t0
            if not self.cancelled:
                return True
            if self.error is None:
                self.error = f"{self.name}: block {r.seq} not kept: the tap was cancelled"
            return False
        self.error = (f"{self.name}: the writer fell behind: block {r.seq} (input frames "
                      f"{r.start}..{r.start + r.frames}) lost, the ring of {self.slots} "
                      "blocks being full")
        return False

    def _put(self, r) -> None:
        i = self.written % self.slots
        outs = self.pick(r.outputs)
        for k, buf in self.bufs.items():
            v = outs.get(k)
            if v is None:
                raise TapError(f"the result has no output {k!r} (it has {', '.join(outs)})")
            n = v.shape[-1]
            if v.shape[:-1] != self.lead[k] or n > buf.shape[1]:
                raise TapError(f"output {k!r} of shape {v.shape} does not fit a slot of "
                               f"{self.lead[k] + (buf.shape[1],)}")
            np.copyto(buf[i, :n], np.moveaxis(v, -1, 0), casting="same_kind")
            self.n[k][i] = n
        m = self.meta[i]
        m[0], m[1], m[2], m[3] = r.seq, r.start, r.frames, bool(r.gap)
        self.written += 1          # publish the slot (after its content)

    # -------------------------------------------------------------- consumer thread
    def pending(self) -> int:
        """Filled slots not yet released."""
        return self.written - self.taken

    def oldest(self) -> TapBlock:
        """The oldest filled slot (:class:`TapBlock` of views); :class:`TapError` when none
        is filled."""
        if self.written == self.taken:
            raise TapError(f"{self.name}: no block to take")
        i = self.taken % self.slots
        outs = {k: np.moveaxis(b[i, :int(self.n[k][i])], 0, -1) for k, b in self.bufs.items()}
        seq, start, frames, gap = (int(v) for v in self.meta[i])
        return TapBlock(outs, seq, start, frames, bool(gap))

    def release(self) -> None:
        """Free the oldest slot (its views must no longer be used)."""
        if self.written == self.taken:
            raise TapError(f"{self.name}: no block to release")
        self.taken += 1

    def cancel(self) -> None:
        """Stop waiting for room (the consumer gave up): the producer returns, and this block
        and every later one count as lost."""
        self.cancelled = True
