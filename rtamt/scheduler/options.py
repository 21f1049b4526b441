"""The per-stream policy of a scheduled stream: :class:`StreamOptions`."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["POLICIES", "ADMISSIONS", "StreamOptions"]

#: overload policies of a stream's input (see :class:`StreamOptions`)
POLICIES = ("drop-oldest", "drop-newest")
#: admission modes of :meth:`~rtamt.scheduler.Scheduler.open`
ADMISSIONS = ("strict", "best-effort")


@dataclass(frozen=True)
class StreamOptions:
    """How one stream takes input, reports, keeps results and leaves (everything
    :meth:`~rtamt.scheduler.Scheduler.open` takes besides the model, the sample rate,
    the block, the budget, the dtype, the name and the channel count).

    policy        : overload policy: ``'drop-oldest'`` skips the oldest queued input
                    beyond ``max_backlog_s`` (never a chunk a waiting push queued);
                    ``'drop-newest'``: the ring drops incoming chunks when full.
    max_backlog_s : seconds of queued input ``'drop-oldest'`` keeps (at least one block).
    ring_seconds  : capacity of the input ring, seconds (at least 4 blocks; with
                    ``'drop-oldest'`` at least twice the backlog).
    max_chunks    : chunk records of the ring (default: ``max(64, frames / 16)``).
    sample_dtype  : dtype of the input ring (default: the stream's dtype, so float64
                    input stays exact).
    on_error      : a rejected block (non-finite, over the input limit) or a failed call:
                    ``'skip'`` it (counted) or ``'stop'`` the stream.
    source_timeout: seconds without a push after which an armed source is reported
                    (``None`` or 0: never).
    history       : results kept for ``Stream.history()`` (0: none; subscribers get
                    every result).
    stats_window  : blocks in the rolling statistics windows.
    idle_timeout  : seconds without a push after which the stream is drained, closed and
                    reported ``aged-out`` (``None``: never).
    admission     : ``'strict'`` (refuse a stream whose budget cannot be met) or
                    ``'best-effort'`` (open it anyway).
    subscriber_backlog_s: seconds of results queued for the stream's subscribers (at
                    least 2 results; :mod:`~rtamt.scheduler.delivery`): when they fall
                    further behind, the stream waits for them (its input queues in its
                    ring) and its stats report a slow subscriber.

    Checked when made: a bad value raises ``ValueError`` naming the option.
    """

    policy: str = "drop-oldest"
    max_backlog_s: float = 0.25
    ring_seconds: float = 2.0
    max_chunks: int | None = None
    sample_dtype: object = None
    on_error: str = "skip"
    source_timeout: float | None = 1.0
    history: int = 1
    stats_window: int = 4096
    idle_timeout: float | None = None
    admission: str = "strict"
    subscriber_backlog_s: float = 0.1

    def __post_init__(self):
        if self.admission not in ADMISSIONS:
            raise ValueError("admission must be 'strict' or 'best-effort'")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.on_error not in ("skip", "stop"):
            raise ValueError("on_error must be 'skip' or 'stop'")
        if int(self.history) < 0:
            raise ValueError(f"history must be >= 0, got {self.history!r}")
        if not float(self.subscriber_backlog_s) >= 0.0:
            raise ValueError(f"subscriber_backlog_s must be >= 0, got "
                             f"{self.subscriber_backlog_s!r}")
        if not float(self.source_timeout or 0.0) >= 0.0:
            raise ValueError(f"source_timeout must be >= 0 or None, got "
                             f"{self.source_timeout!r}")

    @classmethod
    def names(cls) -> tuple:
        """The option names (the keywords ``open()`` accepts for them)."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def replace(self, **changes) -> StreamOptions:
        """A copy with ``changes``; an unknown name raises ``TypeError`` listing the
        options."""
        bad = sorted(set(changes) - set(self.names()))
        if bad:
            raise TypeError(f"unknown stream option(s) {bad}; options are "
                            f"{list(self.names())}")
        return dataclasses.replace(self, **changes) if changes else self
