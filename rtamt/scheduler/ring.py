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

from ..engine.stage import RtamtInputError

_perf = time.perf_counter


class InputRing:
    """Ring of ``capacity`` frames × ``channels`` plus ``max_chunks`` chunk records.

    Chunk record ``i``: absolute stream index of its first frame (``start``), frame
    count, ring position, ``perf_counter()`` at push, input latency reported by the
    audio API (seconds from ADC capture of its first frame to the push) and the
    PortAudio status flags (``paInputUnderflow=1, paInputOverflow=2,
    paOutputUnderflow=4, paOutputOverflow=8, paPrimingOutput=16``) and ``keep`` (pushed by
    a producer that waited for room: the drop-oldest policy must not skip it).
    """

    def __init__(self, channels: int, capacity: int, max_chunks: int, dtype=np.float32):
        if channels < 1 or capacity < 1 or max_chunks < 1:
            raise ValueError("channels, capacity and max_chunks must be >= 1")
        self.channels = int(channels)
        self.capacity = int(capacity)
        self.max_chunks = int(max_chunks)
        self.dtype = np.dtype(dtype)
        self.data = np.zeros((self.capacity, self.channels), self.dtype)
        # chunk records as preallocated Python lists: an item store is far cheaper
        # (and touches less code, which matters in a freshly woken callback) than a
        # numpy scalar store
        z = [0] * self.max_chunks
        self.m_start, self.m_frames, self.m_pos = list(z), list(z), list(z)
        self.m_tpush, self.m_inlat, self.m_status = [0.0] * self.max_chunks, \
            [0.0] * self.max_chunks, list(z)
        self.m_keep = [False] * self.max_chunks
        # producer-owned counters
        self.w_chunk = 0
        self.w_frame = 0
        self.stream_pos = 0          # absolute frames seen (pushed + dropped)
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
                f"push: block {self.pushed_chunks + self.dropped_chunks}: expected shape "
                f"(frames, {self.channels}), got {tuple(block.shape)}")
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
        t = _perf() if t_push is None else t_push
        block = self.shaped(block)
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
        i = wc % self.max_chunks
        self.m_start[i] = self.stream_pos
        self.m_frames[i] = n
        self.m_pos[i] = wf
        self.m_tpush[i] = t
        self.m_inlat[i] = in_latency
        self.m_status[i] = status
        self.m_keep[i] = keep
        self.stream_pos += n
        self.pushed_chunks += 1
        self.pushed_frames += n
        self.w_frame = wf + n
        self.w_chunk = wc + 1          # publish last
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
