"""Device moves: a group's streams change backend or device between two of their blocks
(:meth:`Mover.move`), and ``device='auto'`` re-decides every group's placement
(:meth:`Mover.rebalance`)."""
from __future__ import annotations

import copy
import time

from ..engine import backend as backends
from .groups import Group

__all__ = ["Mover"]

_perf = time.perf_counter


class Mover:
    """Moves groups of a scheduler.

    dispatch : the scheduler's :class:`~rtamt.scheduler.dispatch.Dispatcher` (its lock,
               its groups, its doorbell).
    costs    : the scheduler's :class:`~rtamt.scheduler.costs.CostTable`.
    admission: the scheduler's :class:`~rtamt.scheduler.placement.Admission` (placement
               decisions of :meth:`rebalance`).
    max_batch: the largest call of a new group."""

    def __init__(self, dispatch, costs, admission, max_batch: int):
        self.dispatch = dispatch
        self.costs = costs
        self.admission = admission
        self.max_batch = max_batch

    def move(self, s, device=None, *, backend: str | None = None,
             timeout: float = 10.0) -> str:
        """Move the group of stream ``s`` (every open stream of its design and block size)
        to ``backend`` / ``device`` (see :func:`rtamt.engine.backend.resolve`) between two
        of its blocks; returns the new group's label.

        The group's calls stop (the ones in flight finish), every member's state is copied
        out of the slot store exactly, each processor moves with its state
        (``proc.to(device, backend=...)``), and the members form a group on the new
        device; blocks already queued then run there.  All or nothing: a processor that
        cannot run on the new backend raises and the group stays where it was.  The cost
        model starts from the old one and is corrected by the new device's calls."""
        b, d = backends.resolve(backend, device)
        end = _perf() + timeout
        cv, groups = self.dispatch.cv, self.dispatch.groups
        with cv:
            g = s.group
            if g is None or s.closed:
                raise ValueError(f"move: stream {s.name!r} is closed")
            g.frozen = True
            try:
                while g.inflight or any(m.busy for m in g.members):
                    if _perf() > end:
                        raise RuntimeError(f"move: group {g.label} still busy after "
                                           f"{timeout} s")
                    cv.wait(0.05)
                members = list(g.members)
                probe = copy.deepcopy(members[0].proc)
                probe.to(d, backend=b)             # refuses here if it cannot: nothing moved
                for m in members:
                    g.remove(m)
                del groups[g.key]
                for m in members:
                    m.proc.to(d, backend=b)
                key = g.key[:5] + (b, str(d)) + g.key[7:]
                ng = groups.get(key)
                if ng is None:
                    dkey = key[:-1]
                    cost = self.costs.get(dkey)
                    if cost is None:
                        cost = self.costs[dkey] = copy.deepcopy(g.cost)
                    base = g.label.split("/triton:")[0]
                    label = base if b == "numba" else f"{base}/triton:{d}"
                    ng = Group(key, label, probe, g.block, g.fs, cost, g.batchable,
                               self.max_batch, d)
                    ng.homes = g.homes
                    groups[key] = ng
                for m in members:
                    ng.add(m)
            finally:
                g.frozen = False
                cv.notify_all()
        self.dispatch.ring()
        return ng.label

    def rebalance(self, timeout: float = 10.0) -> dict:
        """Re-decide every group's placement and move each group whose device changes
        with :meth:`move` (between two of its blocks, the state exactly).  Returns
        ``{old label: new label}`` of the moves."""
        moved = {}
        if self.admission.accelerator is None:
            return moved
        cv = self.dispatch.cv
        with cv:
            groups = [g for g in self.dispatch.groups.values() if g.members]
        for g in groups:
            if not g.members:
                continue
            s = g.members[0]
            with cv:
                if s.group is None:
                    raise ValueError("placement_of: an open stream of a device='auto' "
                                     "scheduler")
                where = self.admission.placement_of(s.group).device
            home = g.homes[1] if where == "gpu" else g.homes[0]
            if g.key[:-1] != home:
                moved[g.label] = self.move(s, None if home[6] == "None" else home[6],
                                           backend=home[5], timeout=timeout)
        return moved
