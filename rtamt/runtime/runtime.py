"""Real-time runtime: one input stream, one or more chains, on the scheduler.

::

    audio callback / source ──push──► Stream ring (bounded, preallocated)
                                          │
                   rtamt.Scheduler ───────┘  re-block to ``block`` frames, validate,
                   (one worker thread,        run every chain (one Parallel), publish
                    FTZ/DAZ on)               a Result
                                          │
    readers ◄── latest() / history() / subscribe(fn) / stats()

:class:`Runtime` is a thin single-stream front end over :class:`rtamt.Scheduler`: it
owns a private scheduler with one worker and opens one stream whose processor runs every
chain (:class:`~rtamt.engine.parallel.Parallel`).  There is one processing path in
rtamt: the scheduler's.  Everything the stream does is documented in
:mod:`rtamt.scheduler.stream`; in short:

* **Callback side** (:meth:`Runtime.callback`, :meth:`Runtime.push`): one copy into the
  ring plus a few scalar writes; no lock, no allocation that scales with the block or the
  chain, never blocks.  It measures its own duration.
* **Re-blocking**: chunks are re-cut to the chains' block size (results do not depend on
  the callback block size, because every rtamt chain is exact under any block partition).
* **Overload policy** (never grows without bound): ``'drop-oldest'`` (default) keeps the
  backlog at most ``max_backlog_s`` by skipping the oldest queued chunks (``skipped``);
  ``'drop-newest'`` skips nothing queued and the ring drops incoming chunks when full
  (``dropped``).  Absolute sample indices (``Result.start``) count dropped frames, so a
  gap is visible (``Result.gap``).
* **State under real time**: :meth:`reset`, :meth:`snapshot`, :meth:`restore` run
  between two blocks (the stream keeps running); :meth:`stop` drains (everything
  queued, then the partial last block) or discards.
* **Source watchdog**: once a source is started (:meth:`source_started`), a source that
  stops delivering for ``source_timeout`` (at least two callback periods) becomes
  :attr:`Runtime.source_error`; when pushes resume the error clears, the state is kept
  and the block spanning the gap has ``Result.gap`` set.
"""
from __future__ import annotations

import numpy as np

from ..engine.contract import RtamtInputError, Streaming
from ..engine.parallel import Parallel
from ..scheduler.core import Scheduler
from ..scheduler.stream import POLICIES, STATUS_FLAGS, Result, StreamStats

__all__ = ["Runtime", "Result", "RuntimeStats", "POLICIES", "STATUS_FLAGS"]

#: the runtime's statistics are its stream's
RuntimeStats = StreamStats


class Runtime:
    """Connects an input stream to one or more chains (see module docstring).

    chains        : a streaming object (:class:`rtamt.Streaming`: a model, chain, stage
                    or meter), a list of them, or a dict ``{name: chain}``.  Each
                    receives the same input: ``(T,)`` for one channel, ``(channels, T)``
                    otherwise (channels as batch).
    fs            : sample rate, Hz.
    channels      : input channels.
    block         : frames per processing block (re-blocking target).
    dtype         : dtype the chains run in (``float64`` for AMT-exact results).
    sample_dtype  : dtype of the input ring (default: ``dtype``, so pushes in the chains'
                    dtype reach them exactly; ``float32``, as devices deliver, halves
                    the ring's memory).
    ring_seconds  : ring capacity in seconds (bounded; preallocated).
    policy        : ``'drop-oldest'`` or ``'drop-newest'``.
    max_backlog_s : drop-oldest only: largest tolerated backlog (seconds).
    history       : number of recent results kept.
    on_error      : ``'skip'`` (count the block as rejected, keep streaming) or
                    ``'stop'`` (stop processing; :meth:`stop` re-raises).
    source_timeout: seconds without a push (at least two callback periods) after which a
                    started source counts as failed (:attr:`source_error`); ``None`` or 0
                    turns the watchdog off.
    budget_ms     : latency budget of a block (default: the block period; ``misses``
                    counts blocks published later).
    """

    def __init__(self, chains, fs: float, channels: int = 1, block: int = 256, *,
                 dtype="float64", sample_dtype=None, ring_seconds: float = 2.0,
                 max_chunks: int | None = None, policy: str = "drop-oldest",
                 max_backlog_s: float = 0.25, history: int = 16, on_error: str = "skip",
                 stats_window: int = 4096, source_timeout: float | None = 1.0,
                 budget_ms: float | None = None):
        if isinstance(chains, dict):
            self.chains = dict(chains)
        else:
            lst = list(chains) if isinstance(chains, (list, tuple)) else [chains]
            self.chains = {}
            for c in lst:
                nm = getattr(c, "name", type(c).__name__)
                k, i = nm, 1
                while k in self.chains:
                    i += 1
                    k = f"{nm}{i}"
                self.chains[k] = c
        if not self.chains:
            raise ValueError("Runtime needs at least one chain")
        for k, c in self.chains.items():
            if not isinstance(c, Streaming):
                raise TypeError(f"Runtime: chain {k!r} ({type(c).__name__}) does not follow "
                                "the streaming contract (rtamt.Streaming)")
        if block < 1 or channels < 1 or fs <= 0:
            raise ValueError("block, channels must be >= 1 and fs > 0")
        self.proc = Parallel(self.chains)
        # a block is checked once, against every chain's limit, before any chain runs
        self._limit = self.proc.input_limit
        self.scheduler = Scheduler(threads=1, max_batch=1, start=False)
        self.stream = self.scheduler.open(
            self.proc, fs, block, channels=channels, dtype=dtype,
            budget_ms=1e3 * block / fs if budget_ms is None else budget_ms,
            admission="best-effort", name="runtime", measure=False, sample_dtype=sample_dtype,
            ring_seconds=ring_seconds, max_chunks=max_chunks, policy=policy,
            max_backlog_s=max_backlog_s, history=history, on_error=on_error,
            stats_window=stats_window, source_timeout=source_timeout)
        st = self.stream
        self.fs, self.channels, self.block, self.dtype = st.fs, st.channels, st.block, st.dtype
        self.policy, self.on_error, self.ring = st.policy, st.on_error, st.ring
        self.max_backlog = st.max_backlog

    def __getattr__(self, name):
        # everything else (push, callback, latest, history, subscribe, stats, reset,
        # simulate_overload, source_*, counters) is the stream's
        if name == "stream":
            raise AttributeError(name)
        return getattr(self.stream, name)

    # ================================================================ lifecycle
    def warmup(self) -> None:
        """Compile / load every chain's kernels before the stream starts (numba JIT
        would otherwise stall the first block).  Runs the chains as the stream calls them
        (their :class:`~rtamt.engine.parallel.Parallel`, whose input check is a kernel
        too) on one block of zeros in the stream's layout and restores their exact state
        afterwards; kernels that a short signal does not reach are the apps' warm-up's
        (:func:`rtamt.engine.jit.warmup`)."""
        z = np.zeros((self.block, self.channels), self.dtype)
        xin = z[:, 0] if self.channels == 1 else z.T

        def _do():
            sd = self.proc.state_dict()
            self.proc(xin)
            self.proc.load_state_dict(sd)
            self.stream.state_replaced()
        self.stream.between_blocks(_do)

    def start(self, warmup: bool = True) -> Runtime:
        """Start processing (idempotent); warms the chains up first."""
        if self.running:
            return self
        if self.stream.closed:
            raise RuntimeError("Runtime: stopped runtimes cannot restart; make a new one")
        if warmup:
            self.warmup()
        self.scheduler.start()
        return self

    @property
    def running(self) -> bool:
        return self.scheduler.running and not self.stream.closed

    def stop(self, policy: str = "drain", timeout: float = 30.0) -> None:
        """Stop processing.

        ``'drain'``: process everything queued, then the partial last block;
        ``'discard'``: throw the queue and the partial block away (counted).
        Re-raises an error that stopped processing (``on_error='stop'``).
        """
        if policy not in ("drain", "discard"):
            raise ValueError("stop policy must be 'drain' or 'discard'")
        self.stream.source_ended()
        if self.scheduler.running:
            self.stream.close(policy, timeout)
        self.scheduler.stop(timeout)
        err, self.stream.error = self.stream.error, None
        if err is not None:
            raise RuntimeError(f"rtamt processing failed: {err!r}") from err

    def __enter__(self):
        return self.start()

    def __exit__(self, et, ev, tb):
        self.stop("discard" if et is not None else "drain")

    # ================================================================ state
    def snapshot(self) -> dict:
        """Consistent copy of all chain states (``chains``: ``{name: state_dict}``) plus
        the re-blocking buffer and stream position, taken between two blocks while the
        stream keeps running."""
        snap = self.stream.snapshot()
        snap["chains"] = snap.pop("state")["children"]
        return snap

    def restore(self, snap: dict) -> None:
        """Load a :meth:`snapshot`.  Before :meth:`start` this also sets the stream
        position (the next pushed frame continues the snapshot's stream); while
        running it replaces the model state and the stream continues.  Every chain's
        state is checked by its own ``load_state_dict`` (the contract's checks); nothing
        changes unless all of them load."""
        if not isinstance(snap, dict) or not isinstance(snap.get("chains"), dict):
            raise RtamtInputError(
                f"restore: expected a snapshot() dict, got {type(snap).__name__}")
        if set(snap["chains"]) != set(self.chains):
            raise RtamtInputError(f"restore: snapshot chains {sorted(snap['chains'])} != "
                                  f"{sorted(self.chains)}")
        state = self.proc.state_dict()          # the chains' states in the Parallel's schema
        state["children"] = snap["chains"]
        self.stream.restore({**snap, "state": state})
