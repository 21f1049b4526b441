"""Many live streams on every core under latency budgets (see :mod:`rtamt.scheduler.core`).

``Scheduler`` opens streams (``Stream`` handles, each with its ``StreamOptions``);
streams of one design are batched into one kernel call per stage, bit-identical to running
each stream alone; calls run earliest deadline first on worker threads; ``open`` refuses
(``RtamtCapacityError``) a stream whose budget cannot be met.  ``FanOut`` feeds one stream
per channel of a multichannel source.  A stream reaches its scheduler through a
``SchedulerLink``.  A ``CallTrace`` records every call (start, end, deadline, batch).
"""
from .core import BLOCKS, CostModel, RtamtCapacityError, RtamtClosedError, Scheduler
from .fanout import FanOut
from .link import SchedulerLink
from .options import StreamOptions
from .stream import POLICIES, STATUS_FLAGS, Result, Stream, StreamStats
from .trace import CallTrace

__all__ = ["Scheduler", "Stream", "StreamStats", "StreamOptions", "Result",
           "RtamtCapacityError", "RtamtClosedError", "CostModel", "SchedulerLink",
           "FanOut", "CallTrace", "BLOCKS", "POLICIES", "STATUS_FLAGS"]
