"""One multichannel source, one scheduled stream per channel (or per group of channels):
the batched intake."""
from __future__ import annotations

import time

import numpy as np

from ..engine.contract import FLOATS, RtamtInputError
from .ring import InputRing, RingBank, take_rows
from .stream import as_chunk, callback_latency, mark_pushed, push_waiting

_perf = time.perf_counter


class FanOut:
    """Looks like a single runtime to a source (``push`` / ``callback`` / the watchdog
    calls) and feeds columns ``c*k .. c*k+k-1`` of every ``(frames, n*k)`` chunk to
    ``streams[c]`` (``n`` streams of ``k`` channels each; ``k = 1``: column ``c``).

    **Batched intake.**  Binding replaces the streams' input rings by one
    :class:`~rtamt.scheduler.ring.RingBank`: :meth:`push` writes every stream's frames
    with one numpy copy and records the chunk once, and rings the scheduler's doorbell
    once, whatever ``n`` is; there is no Python per stream on the producer's side.  The
    semantics are :meth:`Stream.push`'s, per stream: ``wait=False`` never blocks, and a
    stream whose ring is full drops the chunk (counted in its ``stats().dropped_frames``)
    while the others take it; ``wait=True`` waits until every open stream has room and
    loses nothing; a chunk of another shape, or one :meth:`Stream.push` refuses
    (integers, complex, lists, scalars), raises :class:`~rtamt.RtamtInputError` naming
    the layout and leaves every ring untouched; a closed scheduler raises
    :class:`~rtamt.scheduler.RtamtClosedError`.  Values are checked per stream and block
    by the scheduler, as for :meth:`Stream.push` (a NaN rejects that stream's block only).

    Every stream must come from one scheduler, with the same ``fs``, channel count and
    ring options (``ring_seconds``, ``max_chunks``, ``sample_dtype``, ``policy``, and
    ``max_backlog_s`` with drop-oldest), and nothing pushed yet; afterwards the streams
    are fed only through this object (their own ``push`` raises).  ``start()`` /
    ``stop()`` start the scheduler and close the streams (drain or discard).
    """

    def __init__(self, streams: list):
        if not streams:
            raise ValueError("FanOut needs at least one stream")
        s0 = streams[0]
        fs, ch = {s.fs for s in streams}, {s.channels for s in streams}
        if len(fs) != 1 or len(ch) != 1:
            raise ValueError("FanOut: every stream needs the same fs and channel count")
        if any(s.link is not s0.link for s in streams):
            raise ValueError("FanOut: every stream must come from one Scheduler")
        if len({id(s) for s in streams}) != len(streams):
            raise ValueError("FanOut: a stream is listed twice")
        r0 = s0.ring
        for s in streams:
            r = s.ring
            if type(r) is not InputRing:
                raise ValueError(f"FanOut: stream {s.name!r} is fed by another FanOut")
            if r.w_chunk or r.dropped_chunks:
                raise ValueError(f"FanOut: stream {s.name!r} was pushed to already; bind "
                                 "the FanOut before the first push")
            if (r.capacity, r.max_chunks, r.dtype) != (r0.capacity, r0.max_chunks, r0.dtype):
                raise ValueError(
                    f"FanOut: stream {s.name!r} has a ring of {r.capacity} frames / "
                    f"{r.max_chunks} chunks / {r.dtype}, stream {s0.name!r} of "
                    f"{r0.capacity} / {r0.max_chunks} / {r0.dtype}; open every stream with "
                    "the same ring_seconds, max_chunks, sample_dtype and policy")
        self.streams = list(streams)
        self.link = s0.link
        self.fs = s0.fs
        self.per = s0.channels
        self.channels = len(self.streams) * self.per
        self.policy = s0.policy
        self.block = s0.block
        bank = RingBank(len(self.streams), self.per, r0.capacity, r0.max_chunks, r0.dtype)
        for s, m in zip(self.streams, bank.members):
            m.stream_pos = s.ring.stream_pos       # a restore() before binding
            s.ring = m
            s.fan = self
        self.bank = bank
        # the compiled intake's work lists (preallocated: nothing is built per push)
        n = len(self.streams)
        self._fast = [None] * n
        self._cols, self._slots = np.zeros(n, np.intp), np.zeros(n, np.intp)
        self._ok = np.zeros(n, np.bool_)
        self.notified = False
        self.t_push = _perf()
        self.push_n = 0
        self._warm_intake()

    def _warm_intake(self) -> None:
        """Load (or compile) :func:`~rtamt.scheduler.ring.take_rows` for the argument types
        of :meth:`take_in` (the bank's sample dtype, each group's input rows) now, with no
        column to copy, rather than on the first push (a compile there took 0.2 s and
        missed the first blocks' deadlines).  Should it fail, the first push meets the
        failure and falls back to the per-stream intake, saying so (as it would anyway)."""
        for inbuf in {id(s.group.inbuf): s.group.inbuf for s in self.streams
                      if s.group is not None and s.group.shares_input(s.slot)}.values():
            try:
                take_rows(self.bank.data, self._cols[:0], 0, self.block, inbuf,
                          self._slots[:0], self.streams[0].limit, self._ok)
            except Exception:  # noqa: BLE001 - reported by take_in's fallback
                return

    def _label(self) -> str:
        """``"push: FanOut ('ch0' .. 'ch7'), block k"`` (the chunk a push would queue
        next), for the message that refuses it."""
        ss = self.streams
        names = repr(ss[0].name) if len(ss) == 1 else f"{ss[0].name!r} .. {ss[-1].name!r}"
        return f"push: FanOut ({names}), block {self.bank.w_chunk}"

    def _check(self, block, want: str, ok) -> np.ndarray:
        """``block`` if it is a float32 / float64 array (or CPU tensor) that ``ok`` accepts,
        else :class:`~rtamt.RtamtInputError` naming the expected layout (as
        :meth:`Stream.push` refuses: lists, scalars, integer, complex or float16
        samples, with the models' hint for integer PCM)."""
        if getattr(block, "dtype", ()) not in FLOATS:   # () equals no dtype (None: float64)
            block = as_chunk(block, self._label)
        if not ok(block):
            k = self.per
            cols = ("column c" if k == 1 else f"columns {k}c..{k}c+{k - 1}") \
                if want.startswith("(frames") else "row c"
            raise RtamtInputError(
                f"{self._label()}: expected shape {want} ({len(self.streams)} streams x {k} "
                f"channel{'s' if k > 1 else ''}; stream c gets {cols}), got "
                f"{tuple(block.shape)}; nothing queued")
        return block

    def push(self, block, status=0, in_latency: float | None = None, *, wait: bool = False,
             timeout: float | None = None) -> bool:
        """Push ``block`` ``(frames, n*k)`` (frame-major, as an audio device delivers it:
        stream ``c`` gets columns ``c*k .. c*k+k-1``) to the streams (see the class
        docstring); True if every open stream queued all of it."""
        nk = self.channels
        x = self._check(block, f"(frames, {nk})", lambda b: (
            b.ndim == 2 and b.shape[1] == nk) or (b.ndim == 1 and nk == 1))
        x = x.reshape(x.shape[0], len(self.streams), self.per).transpose(1, 0, 2)
        return self._offer(x, status, in_latency, wait, timeout)

    def push_streams(self, block, status=0, in_latency: float | None = None, *,
                     wait: bool = False, timeout: float | None = None) -> bool:
        """As :meth:`push`, for a stream-major ``block``: ``(n, frames)`` for one channel
        per stream, ``(n, k, frames)`` for ``k`` (the models' own batch layout; row
        ``c`` is stream ``c``).  Each stream's frames are contiguous then, so the copy into
        the ring bank is row by row (about 4x cheaper than :meth:`push`'s transpose)."""
        N, k = len(self.streams), self.per
        want = f"({N}, frames)" if k == 1 else f"({N}, {k}, frames)"
        x = self._check(block, want, lambda b: b.ndim and b.shape[0] == N and (
            (b.ndim == 2 and k == 1) or (b.ndim == 3 and b.shape[1] == k)))
        x = x[:, :, None] if x.ndim == 2 else x.transpose(0, 2, 1)
        return self._offer(x, status, in_latency, wait, timeout)

    def _offer(self, x, status, in_latency, wait: bool, timeout) -> bool:
        """Queue ``x`` ``(n, frames, k)`` into the bank (see :meth:`push`)."""
        t0 = _perf()
        link = self.link
        if link.closed:
            link.refuse("push: FanOut")
        bank = self.bank
        if not bank.active.any():
            return False
        if not isinstance(status, int):
            status = getattr(status, "_flags", 0) or 0
        n = x.shape[1]
        lat = n / self.fs if in_latency is None else in_latency
        if not wait:
            ok = bank.push(x, status, lat, t0)
            mark_pushed(self, t0, n)
            return ok

        def put(a: int, b: int, st: int, la: float) -> bool:
            t = _perf()
            ok = bank.push(x[:, a:b], st, la, t, True)
            mark_pushed(self, t, b - a)
            return ok
        return push_waiting(link, "FanOut", n, bank.capacity,
                            lambda m: bool((bank.room(m) | ~bank.active).all()),
                            lambda: not bank.active.any(), put, status, lat, self.fs, t0,
                            timeout, alive=lambda: mark_pushed(self, _perf(), self.push_n))

    def take_in(self, now: float) -> list:
        """Under the scheduler's lock, after a push: the compiled intake.  When the newest
        chunk is one whole block (status 0, not wrapping round the ring), every stream
        that can take it as its next block (:meth:`Stream.takes_whole_block`) and is in
        the first such stream's group gets it in one nogil call for all of them
        (:func:`~rtamt.scheduler.ring.take_rows`: the frames copied into the group's
        input rows and checked, one verdict per stream), then
        :meth:`Stream.took_block` makes each block ready.  Returns the streams left to
        the per-stream intake (all of them when the chunk is not one whole block)."""
        bank, B = self.bank, self.block
        wc = bank.w_chunk
        i = (wc - 1) % bank.max_chunks
        pos = bank.m_pos[i] % bank.capacity
        if not wc or bank.m_frames[i] != B or bank.m_status[i] or pos + B > bank.capacity:
            return self.streams
        hole = bank.hole[i] if bank.holes[i] else None
        fast, cols, slots, ok = self._fast, self._cols, self._slots, self._ok
        rest, g0, n = [], None, 0
        for c, m in enumerate(self.streams):
            if (hole is None or not hole[c]) and m.takes_whole_block(wc - 1):
                if g0 is None:
                    g0 = m.group
                if m.group is g0:
                    fast[n] = m
                    cols[n] = c
                    slots[n] = m.slot.index
                    n += 1
                    continue
            rest.append(m)
        if n:
            take_rows(bank.data, cols[:n], pos, B, g0.inbuf, slots[:n], fast[0].limit, ok)
            t_capture = bank.m_tpush[i] - bank.m_inlat[i] + (B - 1) / self.fs
            for j in range(n):
                fast[j].took_block(bool(ok[j]), t_capture, now)
                fast[j] = None
        return rest

    def callback(self, indata, frames, time_info, status) -> None:
        """A ``sounddevice.InputStream`` callback (see :meth:`Stream.callback`)."""
        self.push(indata, status, callback_latency(time_info, frames, self.fs))

    def source_started(self, period_s: float = 0.0) -> None:
        for s in self.streams:
            s.source_started(period_s)

    def source_ended(self) -> None:
        for s in self.streams:
            s.source_ended()

    def report_source_error(self, message: str) -> None:
        for s in self.streams:
            s.report_source_error(message)

    @property
    def source_error(self) -> str | None:
        for s in self.streams:
            if s.source_error:
                return s.source_error
        return None

    @property
    def source_deadline(self) -> float:
        """Seconds without a push after which the watchdog reports the source (the
        largest of the streams')."""
        return max(s.source_deadline for s in self.streams)

    @property
    def running(self) -> bool:
        return any(not s.closed for s in self.streams) and self.link.running

    def start(self, warmup: bool = True):
        self.link.start()
        return self

    def stop(self, policy: str = "drain", timeout: float = 30.0) -> None:
        end = _perf() + timeout
        for s in self.streams:
            s.close(policy, max(end - _perf(), 0.01))

    def wait_idle(self, timeout: float = 10.0) -> bool:
        end = _perf() + timeout
        return all(s.wait_idle(max(end - _perf(), 0.0)) for s in self.streams)
