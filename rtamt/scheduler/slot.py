"""The scheduler's side of one stream: its slot (issue 40 item 5).

A scheduled stream has two parts.  The user holds the handle,
:class:`~rtamt.scheduler.stream.Stream` (what :meth:`~rtamt.scheduler.Scheduler.open`
returns: push, read, subscribe, snapshot, restore, stats, close).  The scheduler works on
the stream's :class:`StreamSlot` (``stream.slot``): where the stream lives in its group,
the block being assembled for the next call, and whether a block is ready or in flight.
The group (:mod:`rtamt.scheduler.groups`) batches slots: it owns the stacked states of its
slots' streams (row ``index`` of its state store), gathers the rows of a call's slots
and runs the processor's batched copy on them; it reaches the processor only through the
public batching protocol of :mod:`rtamt.engine.contract` (``state_leaves``,
``advance_blocks``, ``state_dict``, ``load_state_dict``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["StreamSlot"]


class StreamSlot:
    """One stream's place in the scheduler.

    name      : the stream's name (for messages).
    proc      : the stream's processor (the handle's ``proc``; the same object).
    group     : the :class:`~rtamt.scheduler.groups.Group` it belongs to (None before
                ``open`` adds it and after it closed).
    index     : its row in the group's state store and input rows (-1: none, a group
                that runs each stream alone, or detached).
    block_buf : the block being assembled, ``(block, channels)`` in the stream's dtype (a
                view of its row of the group's input rows while the group shares them).
    fill      : frames in ``block_buf``.
    bumps     : blocks that batched calls processed for ``proc``, counted into it between
                blocks (:meth:`flush_bumps`), not per call.
    out_pool  : the output arrays of the stream's own (unbatched) calls
                (:class:`~rtamt.scheduler.outputs.OutputPool`; None: the processor
                allocates).
    busy      : a block (or a between-blocks command) of the stream is in flight.
    ready     : ``block_buf`` holds a block waiting for a worker.
    deadline, t_ready, t_capture : the ready block's deadline, when it became ready and
                the capture time of its last sample (``perf_counter`` seconds; None: a
                partial block at close).
    held_by_subscribers : not handed back after its last call (its subscribers' queue
                is full).
    """

    __slots__ = ("name", "proc", "channels", "group", "index", "block_buf", "fill", "bumps",
                 "out_pool", "busy", "ready", "deadline", "t_ready", "t_capture",
                 "held_by_subscribers")

    def __init__(self, name: str, proc, block: int, channels: int, dtype):
        self.name = name
        self.proc = proc
        self.channels = int(channels)
        self.group = None
        self.index = -1
        self.block_buf = np.zeros((int(block), self.channels), dtype)
        self.fill = 0
        self.bumps = 0
        self.out_pool = None
        self.busy = False
        self.ready = False
        self.deadline = 0.0
        self.t_ready = 0.0
        self.t_capture = None
        self.held_by_subscribers = False

    def block_input(self):
        """The ready block in the processor's layout: ``(T,)`` or ``(channels, T)`` (a view
        of ``block_buf``)."""
        x = self.block_buf[:self.fill]
        return x[:, 0] if self.channels == 1 else x.T

    def flush_bumps(self) -> None:
        """Count the blocks that batched calls processed into the processor's own block
        counter (``advance_blocks``: the ``block`` of its state); done between blocks,
        not per call."""
        if self.bumps:
            self.proc.advance_blocks(self.bumps)
            self.bumps = 0
