"""Groups: the streams of one design batched into one call per stage.

A :class:`Group` owns its members' states: one store per state leaf, a row per
:class:`~rtamt.scheduler.slot.StreamSlot` (``slot.index``); the stream's own processor
holds views of its row (between blocks it reads and writes them as ever: snapshot,
restore, reset).  A batched call gathers the rows of its slots (a view when they are
contiguous) into a batched copy of the processor (:func:`make_runner`), runs it and
writes the rows back, so every kernel runs each stream's lanes with exactly the
arithmetic it runs alone; outputs are split back by stream.  The group reaches a
processor only through the public batching protocol of :mod:`rtamt.engine.contract`:
``state_dict`` / ``load_state_dict`` / :func:`~rtamt.engine.contract.stack_states` to
build a batched copy, ``state_leaves()`` for the arrays to point at the rows, and
``advance_blocks(k)`` (:meth:`StreamSlot.flush_bumps`) for the block counter.  States
that all streams of a call must share (a loudness model's frame clock, a resampler's
phase) partition the ready streams (:meth:`Group.shared_key`): only streams at the same
value share a call.

Which streams a call takes, and when, is :mod:`rtamt.scheduler.dispatch`'s concern; a
group only runs the call it is given.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import numpy as np

from ..engine import contract as streaming
from ..engine.backend import concat_slots, copy_leaf, leaf_bytes, take_slots, zeros_like_leaf
from ..engine.contract import RtamtInputError
from .outputs import OutputPool, pools_outputs

if TYPE_CHECKING:
    from .costs import CostModel

__all__ = ["Group", "make_runner"]


def make_runner(proto, n: int):
    """A copy of ``proto`` whose state is a batch of ``n`` streams: ``(obj, leaves,
    buffers)``; ``leaves`` are its ``(holder, key, axis)``, ``buffers`` the arrays it was
    built with (used to gather slots that are not contiguous)."""
    r = copy.deepcopy(proto)
    sd = proto.state_dict()
    r.load_state_dict(streaming.stack_states([sd] * n))
    leaves = r.state_leaves()
    return r, leaves, [h[k] for h, k, _ in leaves]


def splitter(obj, out):
    """How a batched call's output of ``obj`` is cut by stream, decided once per group
    from its first output ``out`` (not per call): ``f(out, sl)`` is stream ``sl``'s part
    (``sl`` an index or a slice of the batch axis).  One output: its rows; the outputs of
    a :class:`~rtamt.engine.parallel.Parallel` (``children_map``): each child's part, cut
    as that child's; any other dict of outputs: each one's rows, those the object names
    in ``unbatched_outputs`` (shared by the streams of a call) whole."""
    if not isinstance(out, dict):
        return _rows
    sub = getattr(obj, "children_map", None)
    if sub is not None:
        parts = {k: splitter(sub[k], v) for k, v in out.items()}
        return lambda o, sl: {k: parts[k](v, sl) for k, v in o.items()}
    ub = frozenset(getattr(obj, "unbatched_outputs", ()))
    return lambda o, sl: {k: (v if k in ub else v[sl]) for k, v in o.items()}


def _rows(out, sl):
    return out[sl]


class Group:
    """Streams of one design (see the module docstring): a slot store of their states,
    a pool of batched copies of the processor, and a cost model."""

    #: the group's index in the scheduler's call trace (set when a call is picked)
    trace_index = 0
    #: how a batched call's output is cut by stream (:func:`splitter`, made on the first)
    split = None

    def __init__(self, key, label: str, proto, block: int, fs: float, cost: CostModel,
                 batchable: bool, max_batch: int, device=None):
        self.key = key
        self.label = label
        self.proto = proto
        self.block = block
        self.fs = fs
        self.cost = cost
        self.batchable = batchable
        self.max_batch = max_batch if batchable else 1
        self.members: list = []
        self.inflight = 0
        self.frozen = False
        self.runners: dict[int, list] = {}
        #: batched copies built per batch size (in the pool or in a call)
        self.built: dict[int, int] = {}
        #: the processor writes its output into a given numpy array (``proc(x, out=...)``,
        #: :func:`~rtamt.scheduler.outputs.pools_outputs`, decided here once): every
        #: batched call's output goes to memory from the pool of its batch size
        #: (:meth:`take_out`, under the scheduler's lock)
        self.writes_out = proto is not None and pools_outputs(proto)
        self.out_pools: dict[int, OutputPool] = {}
        #: the most results a member keeps (its ``history``; set by :meth:`add`)
        self.history = 1
        self.period = block / fs
        #: CUDA groups only (None elsewhere): the group's CUDA stream, on which its calls
        #: copy and launch, and its pinned host staging buffers, a pool per input shape
        self.cuda_stream, self.staging = None, None
        #: device='auto': the design's cost-model keys (CPU, accelerator or None)
        self.homes = None
        if device is not None and getattr(device, "type", None) == "cuda":
            import torch
            self.cuda_stream, self.staging = torch.cuda.Stream(device), {}
        if batchable:
            sd = proto.state_dict()["stream"]
            self.stream_batch = sd.get("batch")
            leaves = proto.state_leaves()
            # (axis, shape, a leaf to copy dtype / library / device from: numpy arrays on
            # the numba backend, tensors on a device on the Triton backend)
            self.spec = [(axis, tuple(h[k].shape), h[k]) for h, k, axis in leaves]
            self.has_shared = any(a is None for a, _, _ in self.spec)
            self._alloc(4)
        else:
            self.spec, self.has_shared, self.store, self.slots = [], False, [], []

    #: the members' block buffers, one row per slot: ``(slots, channels, block)`` in the
    #: streams' dtype (None until the first member; see :meth:`_share_input`)
    inbuf = None

    def _alloc(self, S: int) -> None:
        old = getattr(self, "store", None)
        self.store = [zeros_like_leaf((S,) + shape, like) for _, shape, like in self.spec]
        slots = getattr(self, "slots", [])
        if old is not None:
            for new, o in zip(self.store, old):
                new[:o.shape[0]] = o
        self.slots = slots + [None] * (S - len(slots))

    # -- state attachment (scheduler lock; the stream not in flight) -------------------
    def attach(self, sl) -> None:
        """Write the state of slot ``sl``'s processor into its rows of the store and point
        the processor's state arrays at them."""
        if not self.batchable:
            return
        leaves = sl.proc.state_leaves()
        if leaves is None or len(leaves) != len(self.spec):
            raise RtamtInputError(f"{sl.name}: the processor's state does not fit its group")
        for j, (h, k, _) in enumerate(leaves):
            v = self.store[j][sl.index]
            if h[k] is not v:
                v[...] = h[k]
                h[k] = v

    def _share_input(self, s) -> None:
        """Make slot ``s``'s block buffer (``s.block_buf``, ``(block, channels)``) a view of its
        row of :attr:`inbuf` (``(channels, block)``, transposed), keeping what it
        holds: the blocks of streams in neighbouring slots then lie side by side, and a
        call of contiguous slots reads its input without stacking it.  CPU groups only
        (a CUDA group stages its input in pinned memory)."""
        if self.cuda_stream is not None:
            return
        acc = s.block_buf
        shape = (len(self.slots), acc.shape[1], acc.shape[0])
        old = buf = self.inbuf
        if buf is not None and (buf.shape[1:] != shape[1:] or buf.dtype != acc.dtype):
            return                                   # not of the group's layout
        if buf is None or buf.shape[0] < shape[0]:
            buf = np.zeros(shape, acc.dtype)
            if old is not None:
                buf[:old.shape[0]] = old
            self.inbuf = buf
            for m in self.slots:                    # move the others' rows along
                if m is not None and m is not s and old is not None \
                        and m.block_buf.base is old:
                    m.block_buf = buf[m.index].T
        view = buf[s.index].T
        if acc is not view:
            view[...] = acc
            s.block_buf = view

    def shares_input(self, s) -> bool:
        """Does slot ``s``'s block buffer live in its row of :attr:`inbuf`?"""
        buf = self.inbuf
        return buf is not None and s.index >= 0 and s.block_buf.base is buf

    def detach(self, s) -> None:
        """Give slot ``s``'s processor its own copy of the state, and the slot its own
        block buffer (its row is freed)."""
        s.flush_bumps()
        if self.batchable and s.index >= 0:
            leaves = s.proc.state_leaves() or []
            for h, k, _ in leaves:
                h[k] = copy_leaf(h[k])
            if self.shares_input(s):
                s.block_buf = s.block_buf.copy()
            self.slots[s.index] = None
        s.index = -1

    def add(self, stream) -> None:
        """Make ``stream`` (a handle) a member: its slot gets a row of the store (its
        processor's state moves there) and of the input rows."""
        s = stream.slot
        if self.batchable:
            free = [i for i, v in enumerate(self.slots) if v is None]
            if not free:
                S = len(self.slots)
                self._alloc(2 * S)
                for m in self.slots[:S]:
                    self.attach(m)
                free = [S]
            s.index = free[0]
            self.slots[s.index] = s
            self.attach(s)
            self._share_input(s)
        self.members.append(stream)
        s.group = self
        s.out_pool = OutputPool() if pools_outputs(s.proc) else None
        self.history = max(self.history, int(stream.options.history))

    def out_depth(self, n: int) -> int:
        """Output arrays the group keeps for calls of ``n`` streams: the calls within the
        ``history`` + 1 periods that a result may stay held (one call per ``n`` members
        per period), and one more."""
        return (self.history + 1) * -(-max(len(self.members), n) // n) + 1

    def _out_pool(self, n: int) -> OutputPool:
        """The output pool of calls of ``n`` streams (made on first use)."""
        pool = self.out_pools.get(n)
        if pool is None:
            pool = self.out_pools[n] = OutputPool()
        return pool

    def take_out(self, n: int):
        """Under the scheduler's lock, for a call of ``n`` streams: an output array of the
        pool of that size that no result holds any more, or None (the call makes one)."""
        if not self.writes_out or self.cuda_stream is not None:
            return None
        return self._out_pool(n).take()

    def remove(self, stream) -> None:
        """``stream`` (a handle) leaves the group (:meth:`detach`)."""
        self.detach(stream.slot)
        if stream in self.members:
            self.members.remove(stream)
        stream.slot.group = None

    def shared_key(self, s):
        """The values of the shared state leaves in slot ``s``'s rows (None: none)."""
        if not self.has_shared:
            return None
        return tuple(leaf_bytes(self.store[j][s.index])
                     for j, (a, _, _) in enumerate(self.spec) if a is None)

    #: largest batch size whose copies :meth:`prebuild` makes (a GPU group's batches of
    #: thousands are built on first use)
    PREBUILD_MAX = 64

    def prebuild(self, members: int, workers: int, example: np.ndarray) -> None:
        """Build and warm the batched copies every call of up to ``members`` streams may
        need, so that no worker builds one (a deep copy, a state allocation, its work
        buffers, its input and output arrays) on the real-time path: of each size ``n``
        from 1 to ``max_batch``, as many as calls of that size can run at once
        (``min(workers, members // n)``: a stream is in one call at a time).  The output
        pool of the largest of these sizes is filled to its depth with arrays already
        written once (a fresh array's first write maps its pages, about 0.3 ms per MB,
        and two workers mapping at once wait on each other).  ``example``:
        one stream's block as the processor takes it (zeros).  Called by ``open`` outside
        the scheduler's lock: the warm call runs on the copy's own state, which every real
        call overwrites with its streams' slots, and the pools' list operations are
        atomic."""
        if not self.batchable or getattr(self.proto, "backend", "numba") != "numba":
            return                 # Triton: a device's copies are built on first use
        for n in range(1, min(members, self.max_batch, self.PREBUILD_MAX) + 1):
            while self.built.get(n, 0) < min(workers, members // n):
                r = self._new_runner(n)
                x = self._input([example] * n, None, r)
                out = r[0](self._rows(x, n))
                if self.writes_out:
                    self._out_pool(n).keep(out, self.out_depth(n))
                self.runners.setdefault(n, []).append(r)
        if self.writes_out:     # the full calls' outputs, mapped before the first block
            n = min(members, self.max_batch, self.PREBUILD_MAX)
            self._out_pool(n).fill(self.out_depth(n))

    def _rows(self, x, n: int):
        """A call's stacked input ``x`` (n, …) as the batched copy takes it (a stream of
        ``stream_batch`` rows: ``n × stream_batch`` rows)."""
        if self.stream_batch is None:
            return x
        return x.reshape((n * self.stream_batch,) + tuple(x.shape[2:]))

    def _new_runner(self, n: int) -> list:
        """A batched copy for ``n`` streams: ``[obj, leaves, buffers, input buffer]`` (the
        input buffer made on the first call, when the block's shape is known)."""
        self.built[n] = self.built.get(n, 0) + 1
        return [*make_runner(self.proto, n), None]

    # -- a call (worker thread, outside the lock) --------------------------------------
    def runner(self, n: int):
        pool = self.runners.get(n)
        if pool:
            return pool.pop()
        if pool is None:
            self.runners[n] = []
        return self._new_runner(n)

    def run(self, slots: list, out=None) -> list:
        """Process the ready block of every slot in ``slots`` (the streams'
        :class:`~rtamt.scheduler.slot.StreamSlot` objects, sorted by index, same length,
        same shared state) in one call; returns each one's output.  ``out``:
        the array the batched output is written into (from :meth:`take_out`; None: the
        call makes one).

        A CUDA group stages the input in a pinned host buffer and runs the call on its
        CUDA stream (after the work queued on the device's default stream), then waits
        for that stream: the outputs (tensors on the device) are complete when this
        returns."""
        if self.cuda_stream is None:
            return self._call(slots, None, out)
        import torch
        pool, cs = self.staging, self.cuda_stream
        # state written on the default stream (attach, move, restore) comes first
        cs.wait_stream(torch.cuda.default_stream(cs.device))
        try:
            with torch.cuda.stream(cs):
                return self._call(slots, pool)
        finally:
            cs.synchronize()

    def _input(self, blocks: list, pool, runner=None):
        """The ready blocks as one call's input: the one block itself, or the blocks
        stacked into the runner's input buffer when ``pool`` is None (allocated on its
        first call); otherwise written into a pinned host buffer from ``pool`` (a CPU
        tensor, so the model's copy to the device reads page-locked memory) that
        :meth:`_release` returns to the pool after the call."""
        if pool is None:
            if runner is None:
                return blocks[0]
            shape = (len(blocks),) + blocks[0].shape
            buf = runner[3]
            if buf is None or buf.shape != shape or buf.dtype != blocks[0].dtype:
                buf = runner[3] = np.empty(shape, blocks[0].dtype)
            return np.stack(blocks, out=buf)
        import torch
        shape = blocks[0].shape if len(blocks) == 1 else (len(blocks),) + blocks[0].shape
        key = (shape, blocks[0].dtype.str)
        free = pool.setdefault(key, [])
        buf = free.pop() if free else torch.empty(
            shape, dtype=torch.from_numpy(blocks[0][:0]).dtype, pin_memory=True)
        dst = buf.numpy()
        if len(blocks) == 1:
            dst[...] = blocks[0]
        else:
            np.stack(blocks, out=dst)
        return buf

    def _input_rows(self, idx: list, contiguous: bool, runner):
        """A call's input from :attr:`inbuf`: the rows of slots ``idx`` (full blocks), a
        view when they are contiguous, else gathered into the runner's input buffer;
        ``(n, block)`` for one channel, ``(n, channels, block)`` otherwise."""
        buf = self.inbuf
        n = len(idx)
        if contiguous:
            x = buf[idx[0]:idx[0] + n]
        else:
            x = runner[3]
            if x is None or x.shape != (n,) + buf.shape[1:] or x.dtype != buf.dtype:
                x = runner[3] = np.empty((n,) + buf.shape[1:], buf.dtype)
            np.take(buf, idx, axis=0, out=x)
        return x[:, 0] if x.shape[1] == 1 else x

    @staticmethod
    def _release(pool, x) -> None:
        if pool is not None:
            pool[(tuple(x.shape), x.numpy().dtype.str)].append(x)

    def _call(self, slots: list, pool, out=None) -> list:
        n = len(slots)
        if not self.batchable or (n == 1 and pool is not None):
            s = slots[0]
            if pool is None:
                op = s.out_pool
                if op is None:
                    return [s.proc(s.block_input())]
                y = s.proc(s.block_input(), out=op.take())
                op.keep(y, self.history + 2)
                return [y]
            x = self._input([s.block_input()], pool)
            try:
                return [s.proc(x)]
            finally:
                self._release(pool, x)
        runner = self.runner(n)
        obj, leaves, bufs, _ = runner
        x = None
        try:
            idx = [s.index for s in slots]
            contiguous = idx[-1] - idx[0] == n - 1
            set_ = []
            for j, ((h, k, axis), buf) in enumerate(zip(leaves, bufs)):
                st = self.store[j]
                if axis is None:
                    buf[...] = st[idx[0]]
                    v = buf
                elif axis == 0 and contiguous:
                    v = st[idx[0]:idx[0] + n].reshape(buf.shape)
                elif axis == 0:
                    take_slots(st, idx, buf)
                    v = buf
                else:
                    concat_slots(st, idx, axis, buf)
                    v = buf
                h[k] = v
                set_.append(v)
            if pool is None and all(s.fill == self.block and self.shares_input(s)
                                    for s in slots):
                x = self._input_rows(idx, contiguous, runner)
            else:
                x = self._input([s.block_input() for s in slots], pool, runner)
            xb = self._rows(x, n)
            if not self.writes_out or pool is not None:
                out = obj(xb)
            else:
                out = obj(xb, out=out)
                self._out_pool(n).keep(out, self.out_depth(n))
            # write back what does not live in the store already
            for j, ((h, k, axis), buf) in enumerate(zip(leaves, bufs)):
                st = self.store[j]
                v = h[k]
                if v is not set_[j]:          # the object rebound the array: copy it back
                    buf = v
                elif not (axis == 0 and contiguous):
                    buf = v
                else:
                    continue
                if axis is None:
                    for i in idx:
                        st[i] = buf
                elif axis == 0:
                    st[idx] = buf.reshape((n,) + st.shape[1:])
                else:
                    r = st.shape[1 + axis]
                    for p, i in enumerate(idx):
                        sl = (slice(None),) * axis + (slice(p * r, (p + 1) * r),)
                        st[i][...] = buf[sl]
            b = self.stream_batch
            split = self.split
            if split is None:
                split = self.split = splitter(obj, out)
            outs = []
            for p, s in enumerate(slots):
                s.bumps += 1          # counted into the processor between blocks
                outs.append(split(out, p if b is None else slice(p * b, (p + 1) * b)))
            return outs
        finally:
            for (h, k, _), buf in zip(leaves, bufs):
                h[k] = buf
            self.runners[n].append(runner)
            if x is not None:
                self._release(pool, x)

