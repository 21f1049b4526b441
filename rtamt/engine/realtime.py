"""Real-time scheduling for processing threads (Linux ``SCHED_FIFO``).

A thread in the normal time-sharing class (``SCHED_OTHER``) can lose its core to any other
runnable task for one or more whole scheduler ticks (on the benchmark machine mostly the
kernel thread ``kdamond``; measurements in docs/performance.md), and a block caught in such
a gap can miss its budget.  A ``SCHED_FIFO`` thread is not preempted
by time-sharing tasks, which is why audio servers run their processing threads in it (JACK's
``-R``, PipeWire through RTKit).  The kernel keeps 5 % of every second for the other tasks
(``/proc/sys/kernel/sched_rt_runtime_us``), so a runaway real-time thread cannot lock the
machine.

Raising a thread to ``SCHED_FIFO`` needs ``CAP_SYS_NICE`` or an ``RLIMIT_RTPRIO`` at least
the priority asked for (the ``@audio - rtprio 95`` line of a pro-audio Linux setup).
:func:`request_realtime` never raises: it returns why it could not, and the thread runs on
at normal priority.
"""
from __future__ import annotations

import os

#: SCHED_FIFO priority of rtamt's processing threads: the lowest real-time one, above every
#: time-sharing task and below any audio thread (jackd's driver runs at 10 by default, the
#: process threads of its clients, PortAudio's included, at 5), so that a capture callback
#: always preempts processing.
DEFAULT_PRIORITY = 1


def request_realtime(priority: int = DEFAULT_PRIORITY) -> str | None:
    """Put the calling thread in ``SCHED_FIFO`` at ``priority`` (1-99).

    Returns ``None`` on success, else the reason it stays at normal priority (no
    ``SCHED_FIFO`` on this platform, or the OS refused: e.g. ``"[Errno 1] Operation not
    permitted"`` without ``CAP_SYS_NICE`` / ``RLIMIT_RTPRIO``)."""
    priority = int(priority)
    if not 1 <= priority <= 99:
        raise ValueError(f"real-time priority must be 1..99, got {priority}")
    if not hasattr(os, "sched_setscheduler") or not hasattr(os, "SCHED_FIFO"):
        return "SCHED_FIFO is not available on this platform"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError as e:
        return str(e)
    return None


def thread_policy() -> tuple[str, int]:
    """The calling thread's scheduling policy name and priority, e.g. ``('fifo', 5)``."""
    if not hasattr(os, "sched_getscheduler"):
        return "other", 0
    pol = os.sched_getscheduler(0)
    names = {getattr(os, k): k[6:].lower() for k in ("SCHED_OTHER", "SCHED_FIFO", "SCHED_RR",
                                                    "SCHED_BATCH", "SCHED_IDLE")
             if hasattr(os, k)}
    return names.get(pol, str(pol)), os.sched_getparam(0).sched_priority
