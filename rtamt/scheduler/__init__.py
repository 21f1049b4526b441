"""Many live streams on every core under latency budgets (see :mod:`rtamt.scheduler.core`).

``Scheduler`` opens streams (``Stream`` handles); streams of one design are batched into
one kernel call per stage, bit-identical to running each stream alone; calls run earliest
deadline first on worker threads; ``open`` refuses (``RtamtCapacityError``) a stream whose
budget cannot be met.  ``FanOut`` feeds one stream per channel of a multichannel source.
"""
from .core import BLOCKS, CostModel, RtamtCapacityError, RtamtClosedError, Scheduler
from .fanout import FanOut
from .stream import POLICIES, STATUS_FLAGS, Result, Stream, StreamStats

__all__ = ["Scheduler", "Stream", "StreamStats", "Result", "RtamtCapacityError",
           "RtamtClosedError", "CostModel",
           "FanOut", "BLOCKS", "POLICIES", "STATUS_FLAGS"]
