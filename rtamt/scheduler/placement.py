"""Where a scheduler group runs: the CPU workers or a GPU (``Scheduler(device='auto')``).

:func:`decide` is a pure function of two cost models and the current loads, so the
decision table can be tested with given numbers.  Units throughout:

* a cost model (:class:`~rtamt.scheduler.core.CostModel`, or anything with ``fixed_s``,
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

import math
from dataclasses import dataclass

__all__ = ["Placement", "decide", "work"]


def work(cost, streams: int, block: int, fs: float, max_batch: int) -> float:
    """Busy seconds per second of ``streams`` streams of one group: ``fs / block`` blocks
    per second each, run in calls of at most ``max_batch`` streams (1: every stream its
    own call), each call costing ``cost.cost(n, block)`` seconds."""
    if streams <= 0:
        return 0.0
    calls = (fs / block) * math.ceil(streams / max_batch)
    return cost.scale * (calls * cost.fixed_s + streams * fs * cost.per_sample_s)


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
