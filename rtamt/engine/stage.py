"""The stage contract: Params -> Coeffs -> State, a pure ``process`` and a stateful object.

Every processing stage of rtamt follows the same three-layer design (after the
CARFAC Python implementation, Lyon 2017):

* **Params** - a frozen dataclass of what a user sets (sample rate, preset, ...).
* **Coeffs** - designed once from the params by a pure function ``design(params)``
  (filter poles, gains, index maps); never changes while streaming.
* **State**  - a ``dict`` of numpy arrays that change every sample (filter memories,
  loop dividers).  ``init_state(coeffs, batch, n_in, dtype)`` builds the state of a
  stream that has heard nothing (or silence, where the model defines it so).

The stateless kernel of a stage is ``process_tm(coeffs, state, x_tm) -> y_tm`` on
**time-major** arrays ``(B, T, C)``; it advances ``state`` in place.  The public,
time-last pure form is the classmethod ``StageClass.process(coeffs, state, x)``
(``(B, C, T)`` in, ``(B, C', T)`` out), and the
stateful object :class:`Stage` adds validation, lazy state creation,
``reset()``, ``state_dict()`` / ``load_state_dict()`` and numpy/torch round-trips.

Shapes (public, time is always the last axis):

* stages whose ``in_kind == "signal"`` (e.g. the gammatone filterbank) take
  ``(T,)`` or ``(batch, T)`` and return ``(C, T)`` or ``(batch, C, T)``;
* stages whose ``in_kind == "channels"`` take ``(C, T)`` or ``(batch, C, T)``
  (a 1-D ``(T,)`` block is one channel) and return the same leading shape.

Any block partition of a stream gives bit-identical outputs to one call on the
whole stream: kernels apply the same arithmetic to each sample whatever the block
boundaries (tested for every stage in ``tests/test_invariance.py``).
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable

import numpy as np

from . import kernels as K
from .denormal import ensure_ftz

__all__ = ["RtamtInputError", "Stage", "SharedSOSStage", "Chain", "Stateless", "as_numpy_block"]


class RtamtInputError(ValueError):
    """A block was rejected before it touched any state.

    The message names the stage, the block index in the stream, and where
    applicable the batch row / channel / sample of the offending value.
    """


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def as_numpy_block(x: Any) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """Return ``(array, back)`` where ``back(y)`` converts a result to x's library.

    torch tensors are viewed without copy when on CPU; results go back with
    ``torch.from_numpy`` onto the input's device.
    """
    if type(x) is np.ndarray:
        return x, _identity
    if _is_torch(x):
        import torch

        if x.dtype not in (torch.float32, torch.float64):
            raise RtamtInputError(
                f"torch dtype {x.dtype} is not supported; expected torch.float32 or torch.float64")
        dev = x.device
        arr = x.detach().to("cpu").numpy()

        def back(y, _dev=dev):
            t = torch.from_numpy(y)  # keeps y's strides (see Stage._to_public), no copy
            return t if _dev.type == "cpu" else t.to(_dev)

        return arr, back
    if isinstance(x, np.ndarray):
        return x, _identity
    raise RtamtInputError(f"expected a numpy array or torch tensor, got {type(x).__name__}")


def _identity(y):
    return y


def checked_state_copy(who: str, arrays: dict, ref: dict) -> dict:
    """Validate snapshot ``arrays`` against a freshly initialised state ``ref`` (same keys,
    shapes and dtypes) and return deep copies; raises :class:`RtamtInputError` naming
    ``who`` and the first mismatch.  Nothing is modified."""
    if set(arrays) != set(ref):
        raise RtamtInputError(f"{who}: state arrays {sorted(arrays)} != {sorted(ref)}")
    for k, v in ref.items():
        a = np.asarray(arrays[k])
        if a.shape != v.shape or a.dtype != v.dtype:
            raise RtamtInputError(
                f"{who}: state array {k!r} has shape {a.shape} {a.dtype}, expected "
                f"{v.shape} {v.dtype}")
    return {k: np.array(arrays[k], copy=True) for k in ref}


class Stateless:
    """Base of chains without state (a block's output depends on that block only):
    ``reset()`` does nothing, ``state_dict()`` is empty, so any block partition and any
    snapshot/restore are trivially exact.  Subclasses define ``name`` and ``__call__``."""

    name = "stateless"

    def reset(self) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, sd: dict) -> None:
        if sd:
            raise RtamtInputError(f"{self.name}: has no state, got a snapshot with {sorted(sd)}")


def work_buffer(out, shape, dtype) -> np.ndarray:
    """The output array of a ``process_tm`` call: ``out`` if it is a C-contiguous array of
    exactly ``shape`` and ``dtype`` (a chain hands back a stage's previous output as its
    work buffer for the next block of the same size), else a new uninitialised array."""
    shape = tuple(shape)
    if (out is not None and out.shape == shape and out.dtype == dtype
            and out.flags.c_contiguous):
        return out
    return np.empty(shape, dtype)


def _first_bad(x: np.ndarray) -> tuple[int, ...]:
    idx = np.argwhere(~np.isfinite(x))[0]
    return tuple(int(i) for i in idx)


class Stage:
    """Stateful block processor; subclasses supply ``Params``, ``design``,
    ``init_state`` and ``process_tm``.

    ``stage(x)`` processes one block and carries state to the next;
    ``reset()`` returns to the initial state; ``state_dict()`` /
    ``load_state_dict()`` snapshot and restore (bit-exact continuation).
    """

    name = "stage"
    in_kind = "channels"  # or "signal"
    Params: type = object

    # -- to override -----------------------------------------------------------------
    @staticmethod
    def design(params, n_in: int | None = None):  # pragma: no cover - abstract
        raise NotImplementedError

    @staticmethod
    def init_state(coeffs, batch: int, n_in: int, dtype) -> dict:  # pragma: no cover
        raise NotImplementedError

    @staticmethod
    def process_tm(coeffs, state: dict, x: np.ndarray, out=None) -> np.ndarray:  # pragma: no cover
        """Advance ``state`` over time-major ``x`` (B, T, C); write into ``out``
        ((B, T, C') work buffer, optional) and return the output."""
        raise NotImplementedError

    @classmethod
    def process(cls, coeffs, state: dict, x: np.ndarray) -> np.ndarray:
        """Pure functional form, time-last: ``y = StageClass.process(coeffs, state, x)``.

        ``coeffs`` from ``StageClass.design(params)``, ``state`` from
        ``StageClass.init_state(coeffs, batch, n_in, dtype)`` (advanced in place);
        ``x`` is ``(B, T)`` for signal stages or ``(B, C, T)`` for channel stages, float32
        or float64, finite (no validation here: the stateful object validates).
        Returns ``(B, C', T)``.
        """
        if cls.in_kind == "signal":
            xt = np.ascontiguousarray(x)
        else:
            xt = np.ascontiguousarray(np.transpose(x, (0, 2, 1)))
        return np.ascontiguousarray(cls.process_tm(coeffs, state, xt).transpose(0, 2, 1))

    @staticmethod
    def n_out(coeffs, n_in: int) -> int:
        """Number of output channels for ``n_in`` input channels."""
        return n_in

    # -- machinery ---------------------------------------------------------------------
    def __init__(self, params=None, **kwargs):
        if params is None:
            params = self.Params(**kwargs)
        elif kwargs:
            params = dataclasses.replace(params, **kwargs)
        self.params = params
        self.coeffs = self.design(params)
        self._state: dict | None = None
        self._meta: tuple | None = None  # (lead shape, n_in, dtype)
        self._block = 0

    def __repr__(self):
        return f"{type(self).__name__}({self.params!r})"

    @property
    def state(self) -> dict | None:
        """The current state arrays (``None`` before the first block)."""
        return self._state

    @property
    def blocks_processed(self) -> int:
        return self._block

    def _label(self, who: str | None) -> str:
        """``'<who>: block <n>'`` for an error message (built only when one is raised:
        the check of every block runs on the real-time path)."""
        return f"{who or self.name}: block {self._block}"

    def _check(self, x: np.ndarray, who: str | None = None) -> tuple[np.ndarray, tuple, int]:
        """Validate a public block; return (time-major array, lead shape, n_in).

        Raises :class:`RtamtInputError` naming ``who`` (default: the stage), the
        block index and the position of the problem.  Nothing is modified.
        """
        if x.dtype not in _FLOATS:
            raise RtamtInputError(
                f"{self._label(who)}: dtype {x.dtype} is not supported; expected float32 or "
                "float64 (convert integer PCM with x / 2**(bits-1))")
        if self.in_kind == "signal":
            if x.ndim not in (1, 2):
                raise RtamtInputError(
                    f"{self._label(who)}: expected shape (T,) or (batch, T), got ndim={x.ndim} "
                    f"shape {x.shape}")
            lead = x.shape[:-1]
            n_in = 1
        else:
            if x.ndim not in (1, 2, 3):
                raise RtamtInputError(
                    f"{self._label(who)}: expected shape (T,), (C, T) or (batch, C, T), got "
                    f"ndim={x.ndim} shape {x.shape}")
            lead = x.shape[:-1]
            n_in = 1 if x.ndim == 1 else x.shape[-2]
        if x.shape[-1] == 0:
            raise RtamtInputError(
                f"{self._label(who)}: empty block (0 samples); blocks need >= 1 sample")
        if self._meta is not None:
            lead0, n0, dt0 = self._meta
            if lead != lead0:
                raise RtamtInputError(
                    f"{self._label(who)}: leading shape {lead} differs from the stream's "
                    f"{lead0} (channel/batch count cannot change mid-stream; call reset() first)")
            if x.dtype != dt0:
                raise RtamtInputError(
                    f"{self._label(who)}: dtype {x.dtype} differs from the stream's {dt0} "
                    "(call reset() to change dtype)")
        if not K.all_finite(x):
            bad = _first_bad(x)
            names = (("batch",) if len(bad) == 2 else ()) if self.in_kind == "signal" else \
                (("batch", "channel") if len(bad) == 3 else ("channel",) if len(bad) == 2 else ())
            loc = ", ".join(f"{n} {i}" for n, i in zip(names, bad[:-1]))
            val = x[bad]
            raise RtamtInputError(
                f"{self._label(who)}: non-finite value {val} at "
                f"{loc + ', ' if loc else ''}sample {bad[-1]}; "
                "block rejected, state unchanged")
        # to (B, T, C) or (B, T)
        if self.in_kind == "signal":
            xt = x[None] if x.ndim == 1 else x
            if not xt.flags.c_contiguous:
                xt = np.ascontiguousarray(xt)
            return xt, lead, n_in
        x3 = x.reshape(-1, n_in, x.shape[-1])
        return np.ascontiguousarray(x3.transpose(0, 2, 1)), lead, n_in

    def _batch_of(self, lead: tuple) -> int:
        rows = lead if self.in_kind == "signal" else lead[:-1]
        return int(np.prod(rows, dtype=np.int64)) if len(rows) else 1

    def _ensure_state(self, lead, n_in, dtype):
        if self._state is None:
            self.coeffs = self._coeffs_for(n_in)
            self._state = self.init_state(self.coeffs, self._batch_of(lead), n_in, dtype)
            self._meta = (lead, n_in, dtype)

    def _coeffs_for(self, n_in):
        return self.coeffs

    def __call__(self, x):
        ensure_ftz()
        arr, back = as_numpy_block(x)
        xt, lead, n_in = self._check(arr)
        self._ensure_state(lead, n_in, arr.dtype)
        yt = self.process_tm(self.coeffs, self._state, xt)
        self._block += 1
        return back(self._to_public(yt, lead))

    def _to_public(self, yt: np.ndarray, lead: tuple) -> np.ndarray:
        """``yt`` (B, T, C') -> lead-shaped (…, C', T): time on the last axis as a *view*
        of the time-major memory, no copy.

        ``yt`` must be a new array that nothing else writes to (a ``process_tm`` call with
        ``out=None``; the chain never hands out a work buffer it reuses).  The result's
        strides are time-major (``y.strides[-1] == C' * itemsize``): every value is where
        the kernels wrote it.  Copying into time-last memory cost more than any stage but
        two (Dau1997 at 48 kHz, 275 filter rows: 14 us per 256-sample block, 87 us per
        1024, 0.0026-0.0041 of real time, 2-vCPU EPYC), and most consumers reduce over
        time or take a few rows; ``np.ascontiguousarray(y)`` gives contiguous rows to a
        caller that needs them.  (librosa's STFT likewise returns its frames in
        Fortran order rather than copying.)
        """
        y = yt.transpose(0, 2, 1)
        if self.in_kind == "signal":  # lead () or (batch,)
            return y if lead else y[0]
        shape = (lead[:-1] if len(lead) else ()) + y.shape[1:]
        if not lead:  # 1-D input, one channel
            shape = y.shape[1:] if y.shape[1] != 1 else y.shape[2:]
        return y.reshape(shape)

    def reset(self) -> None:
        """Forget the stream: the next block starts from the initial state (and may
        have a new batch/channel count or dtype); block counter back to 0."""
        self._state = None
        self._meta = None
        self._block = 0

    def state_dict(self) -> dict:
        """Deep copy of the state: ``{'block', 'meta', 'arrays'}``."""
        return {
            "stage": self.name,
            "block": self._block,
            "meta": None if self._meta is None else
            (tuple(self._meta[0]), int(self._meta[1]), str(np.dtype(self._meta[2]))),
            "arrays": None if self._state is None else {k: v.copy() for k, v in self._state.items()},
        }

    def load_state_dict(self, sd: dict) -> None:
        """Restore a snapshot from :meth:`state_dict` (validated before anything changes)."""
        if sd.get("stage") != self.name:
            raise RtamtInputError(f"{self.name}: state_dict is for stage {sd.get('stage')!r}")
        if sd["meta"] is None:
            self._state, self._meta, self._block = None, None, int(sd["block"])
            return
        lead, n_in, dt = sd["meta"]
        lead, n_in = tuple(int(v) for v in lead), int(n_in)
        ok = n_in == 1 if self.in_kind == "signal" else \
            (lead[-1] == n_in if lead else n_in == 1)
        if not ok or any(v < 1 for v in lead):
            raise RtamtInputError(
                f"{self.name}: inconsistent snapshot meta: leading shape {lead} with {n_in} "
                "input channels")
        try:
            dtype = np.dtype(dt)
        except TypeError:
            raise RtamtInputError(f"{self.name}: snapshot dtype {dt!r} is not a dtype") from None
        if dtype not in _FLOATS:
            raise RtamtInputError(f"{self.name}: snapshot dtype {dtype} is not float32/float64")
        coeffs = self._coeffs_for(n_in)
        ref = self.init_state(coeffs, self._batch_of(tuple(lead)), n_in, dtype)
        state = checked_state_copy(self.name, sd["arrays"], ref)
        self.coeffs = coeffs
        self._state = state
        self._meta = (tuple(lead), int(n_in), dtype)
        self._block = int(sd["block"])


class SharedSOSStage(Stage):
    """Base of channel stages that run one real SOS cascade ``coeffs.sos`` (S, 6) on every
    channel (DF-II transposed, :func:`rtamt.engine.kernels.sos_shared`), after half-wave
    rectification if the class sets ``rectify = True``.  State: ``zi`` (batch, S, 2, C)."""

    rectify = False

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        return {"zi": np.zeros((batch, coeffs.sos.shape[0], 2, n_in), dtype)}

    @classmethod
    def process_tm(cls, coeffs, state, x, out=None):
        y = work_buffer(out, x.shape, x.dtype)
        K.sos_shared(coeffs.sos, cls.rectify, state["zi"], x, y, 0)
        return y


class Chain:
    """A model: stages run in sequence on one stream, with the Stage interface.

    ``chain(x)`` returns the last stage's output; ``chain.process_all(x)`` returns
    ``{stage name: output}`` for every stage (time-last).  Validation happens once
    at the chain's input; between stages the arrays stay time-major.
    """

    name = "chain"

    def __init__(self, stages: list[Stage]):
        if not stages or stages[0].in_kind != "signal":
            raise ValueError("a Chain starts with a stage that takes a signal (T,) / (batch, T)")
        self.stages = list(stages)
        self._bufs: list = [None] * len(self.stages)
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique, got {names}")

    def __getitem__(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.stages]

    def _run(self, x, keep_all: bool):
        ensure_ftz()
        arr, back = as_numpy_block(x)
        first = self.stages[0]
        xt, lead, _ = first._check(arr, who=self.name)
        # state creation for every stage (first block) - cheap after that
        if first._state is None:
            self._init_states(lead, arr.dtype)
        y = xt
        stages = self.stages
        if keep_all:
            outs = {}
            for st in stages:
                y = st.process_tm(st.coeffs, st._state, y)  # new arrays: all handed out
                st._block += 1
                outs[st.name] = y
            return {k: back(first._to_public(v, lead)) for k, v in outs.items()}
        # the inner stages' work buffers are reused across blocks (no large allocation per
        # block; work_buffer() in each stage takes one only on an exact shape/dtype match).
        # The last stage's output is handed out: a new array, returned as a time-last view
        # (_to_public).
        bufs = self._bufs
        for i in range(len(stages) - 1):
            st = stages[i]
            y = bufs[i] = st.process_tm(st.coeffs, st._state, y, bufs[i])
            st._block += 1
        st = stages[-1]
        y = st.process_tm(st.coeffs, st._state, y)
        st._block += 1
        return back(first._to_public(y, lead))

    def _init_states(self, lead, dtype):
        """Create every stage's state for a new stream, all or nothing."""
        try:
            n = 1
            for i, s in enumerate(self.stages):
                s._ensure_state(tuple(lead) if i == 0 else tuple(lead) + (n,), n, dtype)
                n = s.n_out(s.coeffs, n)
        except Exception:
            for s in self.stages:
                s.reset()
            raise
        self._bufs = [None] * len(self.stages)

    def __call__(self, x):
        return self._run(x, keep_all=False)

    def process_all(self, x) -> dict:
        return self._run(x, keep_all=True)

    def reset(self) -> None:
        """Forget the stream (see :meth:`Stage.reset`)."""
        for s in self.stages:
            s.reset()
        self._bufs = [None] * len(self.stages)

    def state_dict(self) -> dict:
        return {"chain": self.name, "stages": {s.name: s.state_dict() for s in self.stages}}

    def load_state_dict(self, sd: dict) -> None:
        if sd.get("chain") != self.name or set(sd["stages"]) != {s.name for s in self.stages}:
            raise RtamtInputError(f"{self.name}: state_dict does not match this chain")
        self._bufs = [None] * len(self.stages)
        backup = [s.state_dict() for s in self.stages]
        try:
            for s in self.stages:
                s.load_state_dict(copy.deepcopy(sd["stages"][s.name]))
        except Exception:
            for s, b in zip(self.stages, backup):
                s.load_state_dict(b)
            raise
