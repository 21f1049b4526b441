"""Memory: what one stream of a design keeps at a given block size, and what this process
may still allocate.  :meth:`rtamt.Scheduler.open` refuses a block whose stream would not
fit (:class:`~rtamt.scheduler.placement.RtamtCapacityError` with both figures) before
anything of that size is allocated.

A stream's memory grows with its block: every output a call writes is ``block`` samples
long, and the scheduler keeps several of them (:class:`~rtamt.scheduler.outputs.
OutputPool`: the results a stream holds, ``history``, plus the one being written and the
one being published), and each batched copy of the processor keeps work buffers of its
inner stages' outputs (``rtamt.engine.stage.Chain``).  The bytes per sample of the
outputs are measured once per design (:meth:`~rtamt.scheduler.costs.CostTable.measure`).
"""
from __future__ import annotations

import os
import resource
from dataclasses import dataclass

__all__ = ["StreamMemory", "available_memory", "fmt_bytes"]


def fmt_bytes(n: float) -> str:
    """``n`` bytes as ``'1.23 GB'`` / ``'45.6 MB'`` / ``'789 kB'`` (powers of 1000)."""
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return f"{n / k:.3g} {unit}"
    return f"{int(n)} B"


@dataclass(frozen=True)
class StreamMemory:
    """Bytes one stream of a design keeps, as a function of its block.

    out_per_sample  : bytes per input sample of the processor's output (what a call
                      returns; every result holds one), measured.
    work_per_sample : bytes per input sample of the outputs of its other stages (the work
                      buffers a batched copy keeps between calls), measured.
    in_per_sample   : bytes per frame of the stream's input buffers (its block buffer and
                      its row of the group's input rows: ``2 * channels * itemsize``).
    ring_bytes      : the stream's input ring (frames x channels x itemsize), fixed.
    held            : output arrays kept per stream: the results of its ``history``, the
                      call being written and the one being published (``history + 2``).
    """

    out_per_sample: float
    work_per_sample: float
    in_per_sample: float
    ring_bytes: int
    held: int

    @property
    def per_sample(self) -> float:
        """Bytes per sample of block: ``held`` outputs, the work buffers, the inputs."""
        return self.held * self.out_per_sample + self.work_per_sample + self.in_per_sample

    def at(self, block: int) -> float:
        """Bytes the stream keeps with blocks of ``block`` samples."""
        return self.ring_bytes + block * self.per_sample

    def largest_block(self, limit: float) -> int:
        """The largest block whose stream fits ``limit`` bytes (0: none)."""
        return max(int((limit - self.ring_bytes) // self.per_sample), 0) if \
            self.per_sample > 0 else 2 ** 62

    def describe(self, block: int) -> str:
        return (f"{fmt_bytes(self.at(block))} ({block} samples x ({self.held} outputs kept x "
                f"{fmt_bytes(self.out_per_sample)} + {fmt_bytes(self.work_per_sample)} of work "
                f"buffers + {fmt_bytes(self.in_per_sample)} of input) per sample, + "
                f"{fmt_bytes(self.ring_bytes)} of input ring)")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _meminfo_available() -> int | None:
    """MemAvailable of /proc/meminfo (what the kernel can give without swapping), bytes."""
    text = _read("/proc/meminfo")
    for line in (text or "").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


#: per cgroup version: (folder of the hierarchy, limit file, usage file, the page cache
#: line of memory.stat)
_CGROUPS = {"v2": ("/sys/fs/cgroup", "memory.max", "memory.current", "inactive_file "),
            "v1": ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
                   "total_inactive_file ")}


def _cgroup_room() -> int | None:
    """The room under this process's cgroup memory limit (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``): the limit less what the cgroup uses but the page cache it
    could drop (``inactive_file`` of ``memory.stat``, as container tools count usage),
    bytes; None without a limit or a readable cgroup.  In a container the cgroup's own
    folder is the hierarchy's root."""
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        _, ctrl, path = line.split(":", 2)
        kind = "v2" if ctrl == "" else "v1" if "memory" in ctrl.split(",") else None
        if kind is None:
            continue
        root, lim_f, cur_f, cache_row = _CGROUPS[kind]
        for base in dict.fromkeys((root + path.strip().rstrip("/"), root)):
            lim, cur = _read(f"{base}/{lim_f}"), _read(f"{base}/{cur_f}")
            if lim is None or cur is None:
                continue
            if lim.strip() == "max" or int(lim) >= 2 ** 60:
                return None
            cache = 0
            for row in (_read(f"{base}/memory.stat") or "").splitlines():
                if row.startswith(cache_row):
                    cache = int(row.split()[1])
            return int(lim) - (int(cur) - cache)
    return None


def _rlimit_room() -> int | None:
    """``RLIMIT_AS`` minus this process's virtual size, bytes (None without a limit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    statm = _read("/proc/self/statm")
    used = int(statm.split()[0]) * os.sysconf("SC_PAGE_SIZE") if statm else 0
    return soft - used


def available_memory() -> int | None:
    """Bytes this process may still allocate: the least of the memory the kernel has
    available (``MemAvailable``), the room under its cgroup's memory limit and the room
    under ``RLIMIT_AS``; None when none of them is known."""
    room = [v for v in (_meminfo_available(), _cgroup_room(), _rlimit_room()) if v is not None]
    return max(min(room), 0) if room else None
