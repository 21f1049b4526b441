"""Bounded, preallocated single-producer / single-consumer input ring.

The producer is an audio callback (PortAudio / JACK thread) or a source thread;
the consumer is the runtime's processing thread.  The producer side
(:meth:`InputRing.push`) never blocks, never takes a lock and never allocates a
large array: it copies the incoming block into preallocated storage (at most two
slice copies around the wrap point), writes a few scalars of chunk metadata and
publishes the chunk by advancing its write counter last.  The consumer only
advances the read counters after it has copied a chunk out, so the producer
never overwrites unread data.  Each counter has exactly one writer; under the
GIL the reads of the other side's counter are atomic.

When the ring is full (consumer stalled), the incoming chunk is dropped whole
and counted (``dropped_chunks`` / ``dropped_frames``); the ring never grows.
The absolute stream position still advances, so results show the gap.  A producer that
can wait checks :meth:`InputRing.room` first and pushes only when it is True (nothing is
dropped); such chunks are marked ``keep`` and the consumer's drop-oldest policy never
skips them.
"""
from __future__ import annotations

import time

import numpy as np
from numba import njit

from ..engine.jit import JIT
from ..engine.kernels import DBL_MAX
from ..engine.stage import RtamtInputError


@njit(**JIT)
def take_rows(src, cols, pos, n, dst, slots, limit, ok):
    """The compiled intake of one chunk for many streams (no Python per stream):
    ``dst[slots[j], c, t] = src[cols[j], pos + t, c]`` for ``t < n`` and every channel
    ``c`` (a ring bank's ``(streams, capacity, channels)`` frames into a group's input
    rows ``(slots, channels, block)``, converted to ``dst``'s dtype), and ``ok[j]``: every
    value written for ``j`` is finite and ``|v| <= limit`` (the check a stream's block
    passes before it is processed).  ``j < cols.shape[0]``; ``pos + n`` within the ring."""
    lim = min(limit, DBL_MAX)
    for j in range(cols.shape[0]):
        a, b = cols[j], slots[j]
        good = True
        for c in range(src.shape[2]):
            for t in range(n):
                dst[b, c, t] = src[a, pos + t, c]
                good &= abs(dst[b, c, t]) <= lim
        ok[j] = good

_perf = time.perf_counter


class _Records:
    """Chunk records and write counters (one writer: the producer) of a ring or bank."""

    def _init_records(self, max_chunks: int) -> None:
        self.max_chunks = int(max_chunks)
        z = [0] * self.max_chunks
        # preallocated Python lists: an item store is far cheaper (and touches less code,
        # which matters in a freshly woken callback) than a numpy scalar store
        self.m_start, self.m_frames, self.m_pos = list(z), list(z), list(z)
        self.m_tpush, self.m_inlat, self.m_status = [0.0] * self.max_chunks, \
            [0.0] * self.max_chunks, list(z)
        self.m_keep = [False] * self.max_chunks
        self.w_chunk = 0
        self.w_frame = 0
        self.stream_pos = 0           # absolute frames seen (pushed + dropped)

    def _publish(self, n: int, t: float, in_latency: float, status: int, keep: bool) -> None:
        """Record the chunk of ``n`` frames just written at ``w_frame``, then publish it
        (the write counters advance, ``w_chunk`` last)."""
        wc, wf = self.w_chunk, self.w_frame
        i = wc % self.max_chunks
        self.m_start[i] = self.stream_pos
        self.m_frames[i] = n
        self.m_pos[i] = wf
        self.m_tpush[i] = t
        self.m_inlat[i] = in_latency
        self.m_status[i] = status
        self.m_keep[i] = keep
        self.stream_pos += n
        self.w_frame = wf + n
        self.w_chunk = wc + 1          # publish last


class InputRing(_Records):
    """Ring of ``capacity`` frames × ``channels`` plus ``max_chunks`` chunk records.

    Chunk record ``i``: absolute stream index of its first frame (``start``), frame
    count, ring position, ``perf_counter()`` at push, input latency reported by the
    audio API (seconds from ADC capture of its first frame to the push) and the
    PortAudio status flags (``paInputUnderflow=1, paInputOverflow=2,
    paOutputUnderflow=4, paOutputOverflow=8, paPrimingOutput=16``) and ``keep`` (pushed by
    a producer that waited for room: the drop-oldest policy must not skip it).
    """

    def __init__(self, channels: int, capacity: int, max_chunks: int, dtype=np.float32,
                 owner: str = "ring"):
        if channels < 1 or capacity < 1 or max_chunks < 1:
            raise ValueError("channels, capacity and max_chunks must be >= 1")
        #: who the ring belongs to, in messages (``"stream 'mic0'"``)
        self.owner = owner
        self.channels = int(channels)
        self.capacity = int(capacity)
        self.dtype = np.dtype(dtype)
        self.data = np.zeros((self.capacity, self.channels), self.dtype)
        self._init_records(max_chunks)
        # producer-owned counters
        self.pushed_chunks = 0
        self.pushed_frames = 0
        self.dropped_chunks = 0
        self.dropped_frames = 0
        self.dropped_status = 0       # OR of status flags of dropped chunks
        # consumer-owned counters
        self.r_chunk = 0
        self.r_frame = 0

    # ------------------------------------------------------------------ producer
    def shaped(self, block):
        """``block`` as ``(frames, channels)`` (a ``(frames,)`` block of a one-channel
        ring as a view), or :class:`~rtamt.RtamtInputError` naming the expected shape."""
        if block.ndim != 2 or block.shape[1] != self.channels:
            if block.ndim == 1 and self.channels == 1:
                return block.reshape(block.shape[0], 1)
            raise RtamtInputError(
                f"push: {self.owner}, block {self.pushed_chunks + self.dropped_chunks}: "
                f"expected shape (frames, {self.channels}), got {tuple(block.shape)}; "
                "nothing queued")
        return block

    def room(self, n: int) -> bool:
        """Would a chunk of ``n`` frames be queued now (room for its frames and a record)?"""
        return (n <= self.capacity and self.w_chunk - self.r_chunk < self.max_chunks
                and self.w_frame + n - self.r_frame <= self.capacity)

    def push(self, block, status: int = 0, in_latency: float = 0.0,
             t_push: float | None = None, keep: bool = False) -> bool:
        """Copy ``block`` (frames, channels) into the ring; never blocks.

        Returns True if queued, False if dropped (ring full).  The shape is checked
        (cheap); values are checked by the processing thread.  ``keep``: the chunk comes
        from a producer that waited for room (the drop-oldest policy leaves it alone).
        """
        return self.put(self.shaped(block), status, in_latency, t_push, keep)

    def put(self, block, status: int = 0, in_latency: float = 0.0,
            t_push: float | None = None, keep: bool = False) -> bool:
        """:meth:`push` of a block already ``(frames, channels)`` (:meth:`shaped`)."""
        t = _perf() if t_push is None else t_push
        n = block.shape[0]
        wc = self.w_chunk
        wf = self.w_frame
        if n > self.capacity or wc - self.r_chunk >= self.max_chunks or \
                wf + n - self.r_frame > self.capacity:
            self.dropped_chunks += 1
            self.dropped_frames += n
            self.dropped_status |= int(status)
            self.stream_pos += n
            return False
        cap = self.capacity
        pos = wf % cap
        first = n if n <= cap - pos else cap - pos
        self.data[pos:pos + first] = block[:first]
        if first < n:
            self.data[:n - first] = block[first:]
        self.pushed_chunks += 1
        self.pushed_frames += n
        self._publish(n, t, in_latency, status, keep)
        return True

    # ------------------------------------------------------------------ consumer
    def available(self) -> int:
        """Chunks queued and not yet consumed."""
        return self.w_chunk - self.r_chunk

    def queued_frames(self) -> int:
        return self.w_frame - self.r_frame

    def chunk(self, k: int = 0):
        """Metadata of the k-th oldest queued chunk:
        ``(start, frames, ring_pos, t_push, in_latency, status)``."""
        i = (self.r_chunk + k) % self.max_chunks
        return (self.m_start[i], self.m_frames[i], self.m_pos[i],
                self.m_tpush[i], self.m_inlat[i], self.m_status[i])

    def kept(self, k: int = 0) -> bool:
        """Was the k-th oldest queued chunk pushed by a waiting producer?"""
        return self.m_keep[(self.r_chunk + k) % self.max_chunks]

    def copy_frames(self, ring_pos: int, offset: int, n: int, out: np.ndarray) -> None:
        """Copy ``n`` frames starting ``offset`` frames into the chunk at absolute ring
        position ``ring_pos`` into ``out`` (n, channels) (dtype conversion allowed)."""
        cap = self.capacity
        pos = (ring_pos + offset) % cap
        first = n if n <= cap - pos else cap - pos
        out[:first] = self.data[pos:pos + first]
        if first < n:
            out[first:n] = self.data[:n - first]

    def release(self, frames: int) -> None:
        """Mark the oldest chunk (of ``frames`` frames) consumed."""
        self.r_frame += frames
        self.r_chunk += 1

    def retire(self) -> None:
        """The stream closed (nothing to do for a ring of its own)."""


class RingBank(_Records):
    """The input rings of ``n`` streams fed together by one multichannel source
    (:class:`~rtamt.scheduler.FanOut`), laid out so that one push writes every stream's
    frames with one numpy copy and one set of chunk records.

    ``data`` is ``(n, capacity, channels)``: stream ``c``'s ring is ``data[c]`` (contiguous,
    as an :class:`InputRing`'s).  Every chunk is offered to all streams at the same ring
    position, so the write counters (``w_frame``, ``w_chunk``, ``stream_pos``) and chunk
    records are shared; each stream has its own read counters (``r_frame[c]``,
    ``r_chunk[c]``, written by its consumer only).  A stream whose ring is full does not
    take the chunk: its bytes are not written, the chunk is a **hole** for that stream
    (``hole[record, c]``), counted in ``dropped_chunks[c]`` / ``dropped_frames[c]``, and
    its consumer steps over it (the stream position shows the gap); the other streams
    take it.  A closed stream (``active[c]`` False) takes nothing and counts nothing.
    ``members[c]`` is stream ``c``'s consumer view (:class:`BankRing`).
    """

    def __init__(self, n: int, channels: int, capacity: int, max_chunks: int, dtype):
        if n < 1 or channels < 1 or capacity < 1 or max_chunks < 1:
            raise ValueError("n, channels, capacity and max_chunks must be >= 1")
        self.n, self.channels, self.capacity = int(n), int(channels), int(capacity)
        self.dtype = np.dtype(dtype)
        self.data = np.zeros((self.n, self.capacity, self.channels), self.dtype)
        self._init_records(max_chunks)
        self.hole = np.zeros((self.max_chunks, self.n), bool)
        self.holes = [False] * self.max_chunks     # per record: any hole in hole[i]
        self.active = np.ones(self.n, bool)
        # producer-owned
        self.dropped_chunks = np.zeros(self.n, np.int64)
        self.dropped_frames = np.zeros(self.n, np.int64)
        self.dropped_status = np.zeros(self.n, np.int64)
        # consumer-owned, one element per stream
        self.r_chunk = np.zeros(self.n, np.int64)
        self.r_frame = np.zeros(self.n, np.int64)
        self.members = [BankRing(self, c) for c in range(self.n)]

    def room(self, n: int) -> np.ndarray:
        """Per stream: would a chunk of ``n`` frames fit now?"""
        if n > self.capacity:
            return np.zeros(self.n, bool)
        return ((self.w_frame + n - self.r_frame <= self.capacity)
                & (self.w_chunk - self.r_chunk < self.max_chunks))

    def push(self, x: np.ndarray, status: int = 0, in_latency: float = 0.0,
             t_push: float | None = None, keep: bool = False, room=None) -> bool:
        """Offer chunk ``x`` ``(n, frames, channels)`` (stream ``c`` gets ``x[c]``; any
        strides: a transposed view of a frame-major source is copied as it is) to every
        active stream; never blocks.  Returns True if every active stream took it.
        ``room``: :meth:`room` of ``frames``, when the caller has it already."""
        t = _perf() if t_push is None else t_push
        n = x.shape[1]
        if room is None:
            room = self.room(n)
        take = room & self.active
        wc, wf, cap = self.w_chunk, self.w_frame, self.capacity
        i = wc % self.max_chunks
        np.logical_not(take, out=self.hole[i])
        self.holes[i] = not take.all()
        pos = wf % cap
        first = n if n <= cap - pos else cap - pos
        if take.all():
            self.data[:, pos:pos + first] = x[:, :first]
            if first < n:
                self.data[:, :n - first] = x[:, first:]
        elif take.any():
            idx = np.flatnonzero(take)
            self.data[idx, pos:pos + first] = x[idx, :first]
            if first < n:
                self.data[idx, :n - first] = x[idx, first:]
        miss = self.active & ~room
        lost = bool(miss.any())
        if lost:
            self.dropped_chunks[miss] += 1
            self.dropped_frames[miss] += n
            self.dropped_status[miss] |= int(status)
        self._publish(n, t, in_latency, status, keep)
        return not lost


class BankRing:
    """Stream ``c``'s view of a :class:`RingBank`: the consumer side of an
    :class:`InputRing` (holes stepped over), and its counters.  Its producer is the bank:
    :meth:`push` refuses (push the stream's :class:`~rtamt.scheduler.FanOut`)."""

    def __init__(self, bank: RingBank, c: int):
        self.bank, self.c = bank, c
        self.data = bank.data[c]
        self.channels, self.capacity = bank.channels, bank.capacity
        self.max_chunks, self.dtype = bank.max_chunks, bank.dtype
        self.r_chunk = self.r_frame = 0
        self._offset = 0               # this stream's position minus the bank's
        self._holes_done = 0           # hole frames stepped over

    # ---------------------------------------------------------------- producer (the bank)
    def shaped(self, *args, **kw):
        raise RuntimeError("this stream is fed by a FanOut (one ring bank for all its "
                           "streams): push the FanOut, not the stream")

    push = put = room = shaped

    # ---------------------------------------------------------------- counters
    @property
    def w_chunk(self) -> int:
        return self.bank.w_chunk

    @property
    def w_frame(self) -> int:
        return self.bank.w_frame

    @property
    def stream_pos(self) -> int:
        return self.bank.stream_pos + self._offset

    @stream_pos.setter
    def stream_pos(self, v: int) -> None:
        self._offset = int(v) - self.bank.stream_pos

    @property
    def dropped_chunks(self) -> int:
        return int(self.bank.dropped_chunks[self.c])

    @property
    def dropped_frames(self) -> int:
        return int(self.bank.dropped_frames[self.c])

    @property
    def dropped_status(self) -> int:
        return int(self.bank.dropped_status[self.c])

    @property
    def pushed_chunks(self) -> int:
        return self.bank.w_chunk - self.dropped_chunks

    @property
    def pushed_frames(self) -> int:
        return self.bank.w_frame - self.dropped_frames

    # ---------------------------------------------------------------- consumer
    def _advance(self, frames: int) -> None:
        self.r_frame += frames
        self.r_chunk += 1
        self.bank.r_frame[self.c] = self.r_frame
        self.bank.r_chunk[self.c] = self.r_chunk

    def _skip_holes(self) -> None:
        b, c, mc = self.bank, self.c, self.max_chunks
        while self.r_chunk < b.w_chunk:
            i = self.r_chunk % mc
            if not (b.holes[i] and b.hole[i, c]):
                return
            n = b.m_frames[i]
            self._holes_done += n
            self._advance(n)

    def available(self) -> int:
        self._skip_holes()
        return self.bank.w_chunk - self.r_chunk

    def queued_frames(self) -> int:
        b = self.bank
        return max(0, b.w_frame - self.r_frame
                   - (int(b.dropped_frames[self.c]) - self._holes_done))

    def chunk(self, k: int = 0):
        """As :meth:`InputRing.chunk` (``k = 0`` only: holes are stepped over first)."""
        self._skip_holes()
        b = self.bank
        i = self.r_chunk % self.max_chunks
        return (b.m_start[i] + self._offset, b.m_frames[i], b.m_pos[i], b.m_tpush[i],
                b.m_inlat[i], b.m_status[i])

    def kept(self, k: int = 0) -> bool:
        return self.bank.m_keep[self.r_chunk % self.max_chunks]

    copy_frames = InputRing.copy_frames

    def release(self, frames: int) -> None:
        self._advance(frames)

    def retire(self) -> None:
        """The stream closed: the bank stops offering it chunks."""
        self.bank.active[self.c] = False
