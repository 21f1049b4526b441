"""Admission and placement: whether a new stream's budget can be met, which block it
gets (``open(block=None)``), and where a scheduler group runs: the CPU workers or a GPU
(``Scheduler(device='auto')``).

:class:`Admission` predicts, under the scheduler's lock, the load of the workers and the
worst latency of a stream's blocks from the groups' cost models
(:mod:`rtamt.scheduler.costs`), and refuses (:class:`RtamtCapacityError`) a stream whose
budget cannot be met.  :func:`decide` is a pure function of two cost models and the
current loads, so the decision table can be tested with given numbers.  Units throughout:

* a cost model (:class:`~rtamt.scheduler.costs.CostModel`, or anything with ``fixed_s``,
  ``per_sample_s``, ``scale`` and ``cost(n, T)``) predicts the wall time of one call of
  ``n`` streams of ``T`` samples: ``scale * (fixed_s + per_sample_s * n * T)`` seconds
  (``fixed_s`` in seconds per call, ``per_sample_s`` in seconds per stream-sample);
* a **work** is busy seconds per second of audio time, i.e. cores (on the CPU) or the
  busy fraction of the device (on the GPU);
* a **load** is a work divided by the resource: busy fraction of the workers
  (``work / cores``) or of the GPU (one GPU is one unit).

A call on the GPU holds the worker thread that launched it for its whole wall time (the
worker waits for the group's CUDA stream before it publishes), so a GPU group's work
counts on the workers as well as on the GPU.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from ..engine import backend as backends
from .groups import Group
from .memory import StreamMemory, available_memory, fmt_bytes
from .stream import ring_frames

__all__ = ["BLOCKS", "Admission", "Placement", "RtamtCapacityError", "accelerator", "decide",
           "work"]

#: candidate blocks of ``open(block=None)``, largest first
BLOCKS = (4096, 2048, 1024, 512, 256, 128, 64, 32, 16)


class RtamtCapacityError(RuntimeError):
    """A stream's budget cannot be met at the current load (the message gives the cost
    model, the predicted load and latency, and the budget)."""


def work(cost, streams: int, block: int, fs: float, max_batch: int) -> float:
    """Busy seconds per second of ``streams`` streams of one group: ``fs / block`` blocks
    per second each, run in calls of at most ``max_batch`` streams (1: every stream its
    own call), each call costing ``cost.cost(n, block)`` seconds (the processor's call
    and the scheduler's own time for it, when the model has one)."""
    if streams <= 0:
        return 0.0
    calls = (fs / block) * math.ceil(streams / max_batch)
    return (cost.scale * (calls * cost.fixed_s + streams * fs * cost.per_sample_s)
            + calls * getattr(cost, "call_overhead_s", 0.0)
            + streams * (fs / block) * getattr(cost, "block_overhead_s", 0.0))


@dataclass(frozen=True)
class Placement:
    """The outcome of :func:`decide`.

    device        : ``'cpu'`` or ``'gpu'``.
    reason        : one line saying why.
    on_cpu, on_gpu: the load of the busier resource (workers or GPU, a fraction) with the
                    group on the CPU / on the GPU (``on_gpu`` None without a GPU).
    cpu_latency_s, gpu_latency_s: the block period plus one call of the group (at most
                    ``max_batch`` streams) on each device, seconds (GPU: None without one).
    """

    device: str
    reason: str
    on_cpu: float
    on_gpu: float | None
    cpu_latency_s: float
    gpu_latency_s: float | None


def decide(cpu, gpu, *, streams: int, block: int, fs: float, budget_s: float,
           max_batch: int = 8, cpu_busy: float = 0.0, cores: float = 1.0,
           gpu_busy: float = 0.0, max_load: float = 0.9) -> Placement:
    """Place one group of ``streams`` streams (``block`` samples at ``fs`` Hz, tightest
    budget ``budget_s`` seconds, calls of at most ``max_batch`` streams).

    cpu, gpu : the group design's cost models on the CPU and on the GPU (``gpu=None``: no
               GPU; then the answer is the CPU).
    cpu_busy : cores the other groups keep busy (their work on the workers, GPU groups'
               included), cores.
    cores    : worker threads.
    gpu_busy : the GPU's busy fraction from the other groups' GPU calls.
    max_load : the highest load a placement may leave on the GPU.

    The GPU is chosen when (1) one call there plus the block period meets ``budget_s``,
    (2) the GPU's load with the group stays within ``max_load``, and (3) the CPU is the
    tighter resource: the CPU misses the budget while the GPU meets it, or the busier
    resource is less loaded with the group on the GPU (``on_gpu < on_cpu``).  Otherwise
    the CPU."""
    n = min(streams, max_batch)
    period = block / fs
    w_cpu = work(cpu, streams, block, fs, max_batch)
    lat_cpu = period + cpu.cost(n, block)
    on_cpu = max((cpu_busy + w_cpu) / cores, gpu_busy)
    if gpu is None:
        return Placement("cpu", "no GPU", on_cpu, None, lat_cpu, None)
    w_gpu = work(gpu, streams, block, fs, max_batch)
    lat_gpu = period + gpu.cost(n, block)
    on_gpu = max((cpu_busy + w_gpu) / cores, gpu_busy + w_gpu)

    def pick(device, reason):
        return Placement(device, reason, on_cpu, on_gpu, lat_cpu, lat_gpu)
    if lat_gpu > budget_s:
        return pick("cpu", f"the GPU misses the budget ({1e3 * lat_gpu:.3g} ms > "
                           f"{1e3 * budget_s:.3g} ms)")
    if gpu_busy + w_gpu > max_load:
        return pick("cpu", f"the GPU would be {gpu_busy + w_gpu:.2f} busy (limit "
                           f"{max_load:.2f})")
    if lat_cpu > budget_s:
        return pick("gpu", f"the CPU misses the budget ({1e3 * lat_cpu:.3g} ms > "
                           f"{1e3 * budget_s:.3g} ms), the GPU meets it")
    if on_gpu < on_cpu:
        return pick("gpu", f"the CPU is the tighter resource (busiest load {on_cpu:.2f} "
                           f"on the CPU, {on_gpu:.2f} on the GPU)")
    return pick("cpu", f"the GPU is not the looser resource (busiest load {on_cpu:.2f} on "
                       f"the CPU, {on_gpu:.2f} on the GPU)")


def accelerator(name):
    """``(backend, device)`` of a ``'gpu'`` placement, or None: ``name=None`` is CUDA when
    torch sees a device and triton is installed, else None; a name is resolved on the
    Triton backend (raising if it cannot run here)."""
    if name is None:
        import torch
        if not torch.cuda.is_available() or backends.triton_available() is not None:
            return None
        name = "cuda"
    return backends.resolve("triton", name)


class Admission:
    """Admission and placement over a scheduler's groups.

    groups     : the scheduler's ``{group key: Group}`` (shared).
    costs      : its :class:`~rtamt.scheduler.costs.CostTable` (shared).
    threads    : worker threads (the cores the loads are divided by).
    max_load   : the highest predicted busy fraction admission (and a GPU placement)
                 allows.
    max_batch  : the scheduler's largest call.
    accelerator: ``(backend, device)`` of ``'gpu'`` placements, or None.

    Every method but :meth:`accelerator_cost` runs under the scheduler's lock."""

    def __init__(self, groups: dict, costs, threads: int, max_load: float, max_batch: int,
                 accelerator=None):
        self.groups = groups
        self.costs = costs
        self.threads = threads
        self.max_load = max_load
        self.max_batch = max_batch
        self.accelerator = accelerator

    # ================================================================ admission
    def work(self, g: Group, m: int) -> float:
        """Predicted busy seconds per second of group ``g`` with ``m`` streams."""
        return work(g.cost, m, g.block, g.fs, g.max_batch)

    def predict(self, g: Group, s_budget: float, extra: bool = True):
        """``(load, latency, serial)`` predicted for a stream of budget ``s_budget``
        joining ``g``: the workers' busy fraction; the worst latency of its blocks (its
        own call, one call already running on the worker it waits for, and the work of
        the streams with a budget as tight or tighter, spread over the workers, within
        one block period); and ``serial``, its own call over the block period.  A
        stream's blocks run one after another (one block in flight per stream), so a
        stream whose call takes longer than its period falls behind on any number of
        workers: ``serial`` must stay within ``max_load``."""
        load, tighter, cmax = 0.0, 0.0, 0.0
        groups = set(self.groups.values()) | {g}
        for h in groups:
            m = len([x for x in h.members if not x.closed]) + (1 if (extra and h is g) else 0)
            w = self.work(h, m)
            load += w
            if m:
                ms = [x for x in h.members if not x.closed and x.budget_s <= s_budget]
                k = len(ms) + (1 if (extra and h is g) else 0)
                tighter += w * k / m
                cmax = max(cmax, h.cost.cost(min(m, h.max_batch), h.block))
        m = len(g.members) + (1 if extra else 0)
        own = g.cost.cost(min(m, g.max_batch), g.block)
        load /= self.threads
        tighter /= self.threads
        return load, own + cmax + tighter * g.period, own / g.period

    def refusals(self, g: Group, s) -> list:
        """Why a stream ``s`` (already predicted: ``s.predicted_*``) joining ``g`` cannot
        meet its budget: one sentence per limit it exceeds (empty: admitted)."""
        why = []
        own = s.predicted_serial * g.period
        if s.predicted_serial > self.max_load:
            c = g.cost
            rate = self.max_load / g.fs - c.scale * c.per_sample_s    # s per sample left
            fixed = c.cost(1, g.block) - c.scale * c.per_sample_s * g.block
            need = f"; a block of at least {math.ceil(fixed / rate)} samples" if rate > 0 \
                else ""
            why.append(
                f"one block's call takes {1e6 * own:.1f} us (the scheduler's own "
                f"{1e6 * (c.call_overhead_s + c.block_overhead_s):.1f} us included), "
                f"{s.predicted_serial:.2f} of its {1e6 * g.period:.1f} us period (limit "
                f"{self.max_load:.2f}): a stream's blocks run one after another, so it "
                f"cannot keep up on any number of threads{need}")
        if s.predicted_load > self.max_load:
            why.append("the workers would be too busy")
        if s.predicted_latency_s > s.budget_s:
            why.append("its blocks would be late")
        return why

    def admit(self, g: Group, s, admission: str, open_streams: int) -> None:
        """Predict ``s`` joining ``g`` (kept as ``s.predicted_load``,
        ``s.predicted_latency_s``, ``s.predicted_serial`` and ``s.predicted_memory``); with
        ``admission='strict'`` raise :class:`RtamtCapacityError` naming every limit the
        stream exceeds (:meth:`refusals`)."""
        s.predicted_load, s.predicted_latency_s, s.predicted_serial = \
            self.predict(g, s.budget_s)
        s.predicted_memory = self.stream_memory(g.key[:-1], s.options, g.fs, g.block,
                                                s.channels, s.dtype).at(g.block)
        why = self.refusals(g, s) if admission == "strict" else []
        if why:
            raise RtamtCapacityError(
                f"cannot open {s.name!r} ({g.label}, budget {1e3 * s.budget_s:.2f} ms): "
                f"{'; '.join(why)}: predicted worker load {s.predicted_load:.2f} (limit "
                f"{self.max_load:.2f}) and worst latency {1e3 * s.predicted_latency_s:.2f} "
                f"ms with {open_streams} open streams on {self.threads} threads; cost model "
                f"{g.cost.describe()}; close streams, lengthen the budget or the block, or "
                "open with admission='best-effort'")

    def pick_block(self, dkey, costs: dict, fs, budget_s, batchable) -> int:
        """The largest of :data:`BLOCKS` whose period plus predicted latency fits
        ``budget_s`` at the current load, and whose call fits its period
        (``open(block=None)``); ``costs``: the design's cost model at each candidate
        block (:meth:`~rtamt.scheduler.costs.CostTable.at_block`)."""
        for B in BLOCKS:
            if B / fs >= budget_s or B not in costs:
                continue
            g = self.groups.get(dkey + (B,))
            if g is None:
                g = Group(dkey + (B,), "", None, B, fs, costs[B], False, 1)
                g.batchable, g.max_batch = batchable, self.max_batch if batchable else 1
            load, lat, serial = self.predict(g, budget_s)
            if B / fs + lat <= budget_s and load <= self.max_load and serial <= self.max_load:
                return B
        some = next(iter(costs.values()), None)
        raise RtamtCapacityError(
            f"no block from {BLOCKS[-1]} to {BLOCKS[0]} meets a budget of {1e3 * budget_s:.2f} "
            f"ms at {fs:g} Hz (block period plus predicted latency, and each block's call "
            f"within its period); cost model"
            f"{'' if some is None else ' ' + some.describe()}")

    def blocks(self, block, dkey, name: str, label: str, opts, fs: float, budget_s: float,
               channels: int, dtype) -> list:
        """Before anything of a block's size is allocated (or measured): ``[block]`` when
        the stream fits the memory this process can still allocate (else
        :class:`RtamtCapacityError`, :meth:`check_memory`, whatever the admission) and,
        with ``opts.admission == 'strict'``, the block lasts no longer than the budget
        (else :class:`RtamtCapacityError`: its first sample would wait longer than the
        budget for the block to fill); with ``block=None`` the candidates of
        :data:`BLOCKS` shorter than the budget that fit."""
        def mem(B):
            return self.stream_memory(dkey, opts, fs, B, channels, dtype)
        limit = available_memory()
        if block is not None:
            if opts.admission == "strict" and block / fs > budget_s:
                raise RtamtCapacityError(
                    f"cannot open {name!r} ({label}, budget {1e3 * budget_s:.2f} ms): a "
                    f"block of {block} samples lasts {1e3 * block / fs:.2f} ms at {fs:g} Hz, "
                    "longer than the budget: the worst latency of its first sample is at "
                    f"least that (it waits for the block to fill); at most "
                    f"{int(budget_s * fs)} samples fit (or open with "
                    "admission='best-effort')")
            self.check_memory(name, label, block, mem(block), limit)
            return [block]
        return [B for B in BLOCKS if B / fs < budget_s
                and (limit is None or mem(B).at(B) <= limit)]

    def stream_memory(self, dkey, opts, fs: float, block: int, channels: int,
                      dtype) -> StreamMemory:
        """What one stream of design ``dkey`` keeps at ``block`` samples (its outputs and
        work buffers as measured with the design, nothing when it was not measured; its
        input buffers and ring from the options)."""
        ring = np.dtype(dtype if opts.sample_dtype is None else opts.sample_dtype)
        out, work_ = self.costs.memory.get(dkey, (0.0, 0.0))
        return StreamMemory(out, work_, 2 * channels * np.dtype(dtype).itemsize,
                            ring_frames(opts, fs, block) * channels * ring.itemsize,
                            int(opts.history) + 2)

    def check_memory(self, s_name: str, label: str, block: int, mem, limit) -> None:
        """Raise :class:`RtamtCapacityError` when a stream of ``block`` samples would keep
        more than ``limit`` bytes (:class:`~rtamt.scheduler.memory.StreamMemory` ``mem``;
        ``limit`` None: unknown, nothing refused): the figures and the largest block
        that fits.  Called before anything of the block's size is allocated."""
        if limit is None or mem is None or mem.at(block) <= limit:
            return
        fit = mem.largest_block(limit)
        raise RtamtCapacityError(
            f"cannot open {s_name!r} ({label}): a block of {block} samples needs about "
            f"{mem.describe(block)}, more than the {fmt_bytes(limit)} of memory this process "
            f"can still allocate; the largest block that fits is {fit} samples (use a "
            f"smaller block{', or history=0' if mem.held > 2 else ''})")

    def load(self) -> float:
        """Predicted busy fraction of the workers for the open streams."""
        return sum(self.work(g, len(g.members)) for g in self.groups.values()) / self.threads

    # ================================================================ placement (device='auto')
    def accelerator_cost(self, proc, proto, example, dkey, measure: bool):
        """With an accelerator: the design's key there, its cost model made once per
        (design, device) (measured on a copy of the processor moved there; nominal when
        ``measure`` is False), or None when the processor cannot move."""
        if self.accelerator is None:
            return None
        b, d = self.accelerator
        akey = dkey[:5] + (b, str(d)) + dkey[7:]
        if akey not in self.costs:
            try:
                probe = copy.deepcopy(proto if proto is not None else proc)
                probe.to(d, backend=b)
            except Exception:  # noqa: BLE001 - no Triton kernel, not copyable: CPU only
                return None
            self.costs.measure(probe if measure else None, example, akey)
        return akey

    def decision(self, g: Group | None, homes, block: int, fs: float, max_batch: int,
                 streams: int, budget_s: float) -> Placement:
        """:func:`decide` for ``streams`` streams of the design whose CPU and accelerator
        keys are ``homes``, with the loads of every group but ``g``."""
        others = [h for h in self.groups.values() if h is not g and h.members]
        akey = homes[1]
        return decide(
            self.costs[homes[0]], None if akey is None else self.costs[akey],
            streams=streams, block=block, fs=fs, budget_s=budget_s, max_batch=max_batch,
            cpu_busy=sum(self.work(h, len(h.members)) for h in others), cores=self.threads,
            gpu_busy=0.0 if akey is None else sum(
                self.work(h, len(h.members)) for h in others if h.key[5:7] == akey[5:7]),
            max_load=self.max_load)

    def place(self, proc, dkey, akey, block: int, fs: float, batchable: bool,
              budget_s: float):
        """The key of the group a new stream joins, with ``proc`` moved there: its
        design's group wherever that runs, else where :meth:`decision` places a new
        group."""
        cpu, acc = dkey + (block,), None if akey is None else akey + (block,)
        if acc is None:
            return cpu
        running = [k for k in (acc, cpu) if k in self.groups and self.groups[k].members]
        if running:
            key = running[0]
        else:
            p = self.decision(None, (dkey, akey), block, fs,
                              self.max_batch if batchable else 1, 1, budget_s)
            key = acc if p.device == "gpu" else cpu
        if key == acc:
            proc.to(self.accelerator[1], backend=self.accelerator[0])
        return key

    def placement_of(self, g: Group) -> Placement:
        """The placement :func:`decide` gives group ``g`` now (its cost models per device,
        the other groups' loads, its tightest budget)."""
        return self.decision(g, g.homes, g.block, g.fs, g.max_batch, len(g.members),
                             min(m.budget_s for m in g.members))
