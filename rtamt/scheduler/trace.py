"""The call trace: every processing call's start, end, batch size and deadline, kept in
memory allocated once, so that a missed deadline can be matched to its cause (a slow
call, a call that started late, a stall of the whole process).

A :class:`CallTrace` is given to :class:`rtamt.scheduler.Scheduler` (``trace=``); each
worker writes one record per call, after the call returns, into its own rows of
preallocated arrays: no lock, no allocation, no record shared between threads.  When a
worker's rows are full its oldest records are overwritten (:attr:`CallTrace.overwritten`
counts them).

Times are ``time.perf_counter()`` seconds, the clock of the scheduler's deadlines.
"""
from __future__ import annotations

import numpy as np

__all__ = ["CallTrace", "RECORD"]

#: one call: start and end of the processing (s), when its outputs were published (s), the
#: earliest deadline of its streams (s), the number of streams in the call, the group's
#: index (in order of first call) and the worker's index
RECORD = np.dtype([("start", "f8"), ("end", "f8"), ("published", "f8"), ("deadline", "f8"),
                   ("batch", "i4"), ("group", "i4"), ("worker", "i4")])
_COLUMNS = ("start", "end", "published", "deadline", "batch", "group")


class CallTrace:
    """A fixed-size ring of call records (:data:`RECORD`) per worker thread.

    capacity: records kept per worker (default 2**19, 16 MiB per worker: about 50 s of a
    worker making 10 000 calls per second).  The rows are allocated when the scheduler's
    workers start (:meth:`bind`).
    """

    def __init__(self, capacity: int = 1 << 19):
        if int(capacity) < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._cols: dict = {}
        self._count = np.zeros(0, np.int64)
        #: group key -> index, and the groups' labels in index order
        self._groups: dict = {}
        self.group_labels: list[str] = []

    def bind(self, workers: int) -> None:
        """Allocate the rows of ``workers`` worker threads (kept records are dropped),
        unless they exist for that many workers already."""
        if self._count.size == int(workers):
            return
        shape = (int(workers), self.capacity)
        self._cols = {c: np.zeros(shape, RECORD[c]) for c in _COLUMNS}
        self._count = np.zeros(int(workers), np.int64)

    def group_index(self, key, label: str) -> int:
        """The index of a group, assigned on its first call (under the scheduler's lock)."""
        i = self._groups.get(key)
        if i is None:
            i = self._groups[key] = len(self.group_labels)
            self.group_labels.append(label)
        return i

    def record(self, worker: int, start: float, end: float, published: float,
               deadline: float, batch: int, group: int) -> None:
        """Write one call's record into ``worker``'s rows (only that worker calls this)."""
        k = self._count[worker]
        j = k % self.capacity
        c = self._cols
        c["start"][worker, j] = start
        c["end"][worker, j] = end
        c["published"][worker, j] = published
        c["deadline"][worker, j] = deadline
        c["batch"][worker, j] = batch
        c["group"][worker, j] = group
        self._count[worker] = k + 1

    def __len__(self) -> int:
        return int(np.minimum(self._count, self.capacity).sum())

    @property
    def overwritten(self) -> int:
        """Records lost to the wrap-around of full rows."""
        return int(np.maximum(self._count - self.capacity, 0).sum())

    def records(self) -> np.ndarray:
        """A copy of the kept records of every worker, ordered by start time."""
        parts = []
        for w, k in enumerate(self._count):
            n = int(min(k, self.capacity))
            r = np.empty(n, RECORD)
            for c in _COLUMNS:
                r[c] = self._cols[c][w, :n]
            r["worker"] = w
            parts.append(r)
        r = np.concatenate(parts) if parts else np.empty(0, RECORD)
        return r[np.argsort(r["start"], kind="stable")]
