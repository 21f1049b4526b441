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
boundaries (tested for every stage in ``tests/stages/test_invariance.py``).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import contract, migrate
from .backend import (
    Kernels,
    NumbaKernels,
    RtamtBackendError,
    TritonKernels,
    as_numpy_block,
    declare_kernels,
    time_last,
    to_numpy,
)
from .backend import resolve as resolve_backend
from .contract import Registered, RtamtInputError, check_float_dtype, reject_nonfinite
from .denormal import ensure_ftz

__all__ = ["RtamtInputError", "Stage", "Chain", "StageGroup", "Stateless", "as_numpy_block",
           "SAMPLES", "FRAMES", "check_flows"]

#: what flows into or out of a stage (:attr:`Stage.flow_in`, :attr:`Stage.flow_out`):
#: sample blocks at a rate (time-major arrays, the sample stages), or the frames of a block
#: at a hop (named arrays, :mod:`rtamt.loudness.frames`; their layout is the names a stage
#: ``reads`` and ``writes``)
SAMPLES, FRAMES = "samples", "frames"


def check_flows(who: str, stages) -> None:
    """Raise ``ValueError`` unless each stage takes what the one before it gives
    (:attr:`Stage.flow_in` = the previous :attr:`Stage.flow_out`) and, on frames, every
    frame a stage reads (``reads``) was written by a stage before it (``writes``).  A
    frame stage follows a sample stage only if it is a frame producer (``flow_in`` samples,
    ``flow_out`` frames, e.g. :class:`rtamt.loudness.spectrum.Spectrum`)."""
    prev, have = None, set()
    for st in stages:
        fin = getattr(st, "flow_in", SAMPLES)
        if prev is not None and fin != prev[1]:
            raise ValueError(
                f"{who}: stage {st.name!r} takes {fin}, but {prev[0]!r} before it gives "
                f"{prev[1]}")
        if fin == FRAMES:
            missing = [k for k in st.reads if k not in have]
            if missing:
                raise ValueError(f"{who}: stage {st.name!r} reads frames {missing} that no "
                                 f"stage before it writes (written: {sorted(have)})")
        if getattr(st, "flow_out", SAMPLES) == FRAMES:
            have.update(st.writes)
        prev = (st.name, getattr(st, "flow_out", SAMPLES))


_FLOATS = contract.FLOATS


def _identity(y):
    return y


class Stateless(Registered):
    """Base of processors without state (a block's output depends on that block only):
    ``reset()`` does nothing and the state holds no arrays, so any block partition and
    any snapshot/restore are trivially exact.  Subclasses define ``name``, ``outputs``
    and ``__call__``; ``process_all(x)`` is ``{outputs[0]: self(x)}``."""

    name = "stateless"
    outputs: tuple = ("out",)
    batchable = True
    input_limit = math.inf

    def process_all(self, x) -> dict:
        return {self.outputs[0]: self(x)}

    def prepare(self, x) -> None:
        """Nothing to create: a stateless processor has no state."""

    def state_leaves(self) -> list:
        return []

    def reset(self) -> None:
        pass

    def design_identity(self) -> dict:
        return {"name": self.name, "fingerprint": contract.fingerprint(type(self).__name__)}

    def output_info(self) -> dict:
        return {k: {"rate": None, "channels": None} for k in self.outputs}

    def state_dict(self) -> dict:
        return contract.header(self, 0, None, arrays={})

    def load_state_dict(self, sd: dict) -> None:
        contract.check_identity(self.name, sd, self)
        if sd.get("arrays"):
            raise RtamtInputError(f"{self.name}: has no state, got arrays {sorted(sd['arrays'])}")

    @classmethod
    def stack_state_dicts(cls, states):
        return contract.deep(states[0])

    @classmethod
    def split_state_dict(cls, state, i):
        return contract.deep(state)


def _to_device(state: dict, device) -> dict:
    import torch

    return {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in state.items()}


def _device_block(arr: np.ndarray, device):
    """The validated time-major block ``arr`` (numpy) as a tensor on ``device``: ``arr``'s
    own memory on the CPU, else a copy."""
    import torch

    t = torch.from_numpy(arr)
    return t if t.device == device else t.to(device, non_blocking=False)


class Stage(Registered):
    """Stateful block processor; subclasses supply ``Params``, ``design``,
    ``init_state`` and ``process_tm``, and declare the kernels ``process_tm`` runs
    (``kernels``, a :class:`rtamt.engine.backend.Kernels`: numba kernels and their Triton
    twins).  :meth:`to` binds them once for a backend and device (``self.kern``);
    ``process_tm`` (decorated with :func:`rtamt.engine.backend.kernel_method`) calls
    ``stage.kern.<kernel>`` and never looks at the array's type.

    ``stage(x)`` processes one block and carries state to the next;
    ``reset()`` returns to the initial state; ``state_dict()`` /
    ``load_state_dict()`` snapshot and restore (bit-exact continuation).
    """

    name = "stage"
    in_kind = "channels"  # or "signal"
    Params: type = object
    #: the stage's kernels per backend (:class:`rtamt.engine.backend.Kernels`), declared
    #: in the stage's module; ``None``: a stage whose ``process_tm`` needs no kernel set
    kernels: Kernels | None = None
    #: the kernels ``process_tm`` calls: the class's numba set, or the set that
    #: :meth:`to` bound on this object
    kern: NumbaKernels | TritonKernels | None = None
    #: the stage runs on the Triton backend (set from ``kernels``; a subclass may say no)
    triton_ready = False
    backend = "numba"
    device = None
    #: what the stage takes and gives (:data:`SAMPLES` or :data:`FRAMES`), checked when a
    #: chain is built (:func:`check_flows`); a frame stage says :data:`FRAMES`
    flow_in = SAMPLES
    flow_out = SAMPLES
    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        declare_kernels(cls, "triton_ready")

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
        Returns ``(B, C', T)``, or ``(B, T)`` for a stage whose output is a signal.
        """
        xt = np.ascontiguousarray(x if x.ndim == 2 else np.transpose(x, (0, 2, 1)))
        yt = cls.process_tm(coeffs, state, xt)
        return yt if yt.ndim == 2 else np.ascontiguousarray(yt.transpose(0, 2, 1))

    @staticmethod
    def n_out(coeffs, n_in: int) -> int:
        """Number of output channels for ``n_in`` input channels."""
        return n_in

    @classmethod
    def grad_rule(cls):
        """The stage's gradient rule for :mod:`rtamt.nn`, a
        :class:`rtamt.engine.grad.StageGrad` subclass kept beside the stage, or ``None``
        (forward-only)."""
        return None

    @classmethod
    def examples(cls):
        """The constructions of this stage the test sweeps run, a tuple of
        :class:`rtamt.engine.examples.Example`, declared by every stage class at the end of
        its body (``()``: a base class not run itself); this default, ``None``, means
        "none declared", which a test refuses."""
        return None

    # -- machinery ---------------------------------------------------------------------
    def __init__(self, params=None, **kwargs):
        if params is None:
            params = self.Params(**kwargs)
        elif kwargs:
            params = dataclasses.replace(params, **kwargs)
        self.params = params
        self.coeffs = self._coeffs0 = self.design(params)
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

    input_limit = math.inf

    def _check(self, x: np.ndarray, who: str | None = None, limit: float = math.inf,
               limit_text="", declare: bool = False) -> tuple[np.ndarray, tuple, int]:
        """Validate a public block; return (time-major array, lead shape, n_in).

        Raises :class:`RtamtInputError` naming ``who`` (default: the stage), the
        block index and the position of the problem.  Nothing is modified.  A signal
        stage refuses a stream's first block of shape ``(N, 1)`` with ``N >=``
        :data:`~rtamt.engine.contract.COLUMN_ROWS` (a (frames, channels) block; see
        :func:`~rtamt.engine.contract.check_time_last`) unless ``declare`` (``prepare``).
        """
        if x.dtype not in _FLOATS:
            check_float_dtype(x, self._label(who))
        if self.in_kind == "signal":
            if x.ndim not in (1, 2):
                raise RtamtInputError(
                    f"{self._label(who)}: expected shape (T,) or (batch, T), got ndim={x.ndim} "
                    f"shape {x.shape}")
            lead = x.shape[:-1]
            n_in = 1
            if x.ndim == 2 and x.shape[1] == 1 and not declare:
                contract.check_time_last(x, lambda: self._label(who), self._meta is None)
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
                    f"{lead0} (channel/batch count cannot change mid-stream; call reset() "
                    f"first{contract.time_last_hint(x) if self.in_kind == 'signal' else ''})")
            if x.dtype != dt0:
                raise RtamtInputError(
                    f"{self._label(who)}: dtype {x.dtype} differs from the stream's {dt0} "
                    "(call reset() to change dtype)")
        reject_nonfinite(x, lambda: self._label(who), self._where, limit=limit,
                         limit_text=limit_text)
        # to (B, T, C) or (B, T)
        if self.in_kind == "signal":
            xt = x[None] if x.ndim == 1 else x
            if not xt.flags.c_contiguous:
                xt = np.ascontiguousarray(xt)
            return xt, lead, n_in
        x3 = x.reshape(-1, n_in, x.shape[-1])
        return np.ascontiguousarray(x3.transpose(0, 2, 1)), lead, n_in

    def _where(self, bad: tuple) -> str:
        """Name the position ``bad`` (an index into a public block) in an error message."""
        if self.in_kind == "signal":
            names = ("batch",) if len(bad) == 2 else ()
        else:
            names = ("batch", "channel") if len(bad) == 3 else ("channel",) if len(bad) == 2 else ()
        return ", ".join([f"{n} {i}" for n, i in zip(names, bad[:-1])] + [f"sample {bad[-1]}"])

    def _batch_of(self, lead: tuple) -> int:
        rows = lead if self.in_kind == "signal" else lead[:-1]
        return int(np.prod(rows, dtype=np.int64)) if len(rows) else 1

    def _ensure_state(self, lead, n_in, dtype):
        if self._state is None:
            self.coeffs = self._coeffs_for(n_in)
            st = self.init_state(self.coeffs, self._batch_of(lead), n_in, dtype)
            self._state = self._state_on(st, self.backend, self.device) \
                if self.backend == "triton" else st
            self._meta = (lead, n_in, dtype)

    def _bind(self, backend: str, device):
        """The kernels of a resolved ``(backend, device)`` (``None``: the class's own),
        bound from the stage's declaration; raises if the stage has none for it."""
        if backend == "numba" or (self.kernels is None and self.triton_ready):
            return None     # the class's numba set, or a stage of array operations only
        if not self.triton_ready or self.kernels is None:
            raise RtamtBackendError(
                f"{self.name} ({type(self).__name__}) has no Triton kernel yet; use "
                "backend='numba'")
        return self.kernels.bind(backend, device)

    def _set_backend(self, backend: str, device, kern=False) -> None:
        """Switch to a resolved ``(backend, device)``: bind the stage's kernels for it
        (or take ``kern``, bound by :meth:`_bind`) and move the state (kept exactly)."""
        if kern is False:
            kern = self._bind(backend, device)
        if kern is None:
            self.__dict__.pop("kern", None)     # the class's numba set
        else:
            self.kern = kern
        if self._state is not None:
            self._state = self._state_on(self._state, backend, device)
        self.backend, self.device = backend, device

    def _state_on(self, st: dict, backend: str, device) -> dict:
        """``st`` (numpy arrays or tensors) as the state of ``backend``/``device``: numpy on
        numba, tensors on the device on Triton (values exact)."""
        st = {k: to_numpy(v) for k, v in st.items()}
        return _to_device(st, device) if backend == "triton" else st

    def to(self, device=None, *, backend: str | None = None):
        """Run on ``backend`` ('numba' or 'triton') and ``device`` (see
        :func:`rtamt.engine.backend.resolve`); the state moves along.  Returns self."""
        self._set_backend(*resolve_backend(backend, device))
        return self

    def _coeffs_for(self, n_in):
        return self.coeffs

    def prepare(self, x) -> None:
        """Create the initial state of a stream whose blocks look like ``x`` (checked like
        a block; nothing is processed).  Does nothing if the state exists.  This declares
        the layout: a ``(N, 1)`` block here is ``N`` streams (a first block of that shape
        is otherwise refused as a (frames, channels) block, see ``_check``)."""
        arr, _ = as_numpy_block(x)
        xt, lead, n_in = self._check(arr, declare=True)
        self._ensure_state(lead, n_in, arr.dtype)

    def state_leaves(self) -> list:
        st = self._state
        if st is None:
            return []
        return [(st, k, None if k in self.shared_state else self.batch_axes.get(k, 0))
                for k in st]

    def advance_blocks(self, k: int = 1) -> None:
        self._block += k

    def __call__(self, x, out=None):
        """Process one block; returns the output (time-last).  ``out``: a time-major
        ``(B, T, C')`` array of the output's shape and dtype (C-contiguous; a tensor on the
        stage's device on the Triton backend) that the output is written into, the
        returned array being a view of it; an ``out`` that does not fit exactly is not
        used (a new array is)."""
        ensure_ftz()
        arr, back = as_numpy_block(x)
        xt, lead, n_in = self._check(arr)
        self._ensure_state(lead, n_in, arr.dtype)
        if self.backend == "triton":
            xt, back = _device_block(xt, self.device), _identity
        yt = self.process_tm(self.coeffs, self._state, xt, out)
        self._block += 1
        return back(self._to_public(yt, lead))

    def _to_public(self, yt: np.ndarray, lead: tuple) -> np.ndarray:
        """``yt`` (B, T, C') -> lead-shaped (…, C', T): time on the last axis as a *view*
        of the time-major memory, no copy.

        ``yt`` must be a new array that nothing else writes to (a ``process_tm`` call with
        ``out=None``; the chain never hands out a work buffer it reuses).  The result's
        strides are time-major (``y.strides[-1] == C' * itemsize``): every value is where
        the kernels wrote it.  A copy into time-last memory would cost more than most
        stages (docs/performance.md), and most consumers reduce over time or take a few
        rows; ``np.ascontiguousarray(y)`` gives contiguous rows to a caller that needs them.
        """
        y = time_last(yt)
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

    # -- the streaming contract ------------------------------------------------------
    #: state keys whose batch axis is not 0 (``{key: axis}``); keys shared by all streams
    batch_axes: dict = {}
    shared_state: tuple = ()
    batchable = True

    @property
    def outputs(self) -> tuple:
        return (self.name,)

    def process_all(self, x) -> dict:
        """``{self.name: self(x)}`` (the contract's every-output form)."""
        return {self.name: self(x)}

    def output_rate(self, rate_in: float) -> float:
        """Sample rate (Hz) of the output for input at ``rate_in`` Hz (resamplers change it)."""
        fs_out = getattr(self.coeffs, "fs_out", None)
        return float(fs_out) if fs_out is not None else float(rate_in)

    def output_info(self) -> dict:
        """``{name: {'rate': Hz, 'channels': per input channel}}`` of this stage alone."""
        fs = float(getattr(self.params, "fs", getattr(self.params, "fs_in", 0.0)) or 0.0)
        return {self.name: {"rate": self.output_rate(fs),
                            "channels": int(self.n_out(self.coeffs, 1))}}

    def design_identity(self, coeffs=None) -> dict:
        """``{'name', 'fs', 'fingerprint'}``: the stage's name, sample rate (Hz, if its
        params have one) and a fingerprint of its params and designed coefficients."""
        c = self.coeffs if coeffs is None else coeffs
        memo = self.__dict__.get("_fp_memo")         # (coeffs, fingerprint) of the last call
        if memo is None or memo[0] is not c:
            memo = self._fp_memo = (c, contract.fingerprint(self.params, c))
        ident = {"name": self.name}
        fs = getattr(self.params, "fs", None)
        if fs is not None:
            ident["fs"] = float(fs)
        ident["fingerprint"] = memo[1]
        return ident

    def _stream_meta(self):
        if self._meta is None:
            return None
        lead, n_in, dt = self._meta
        nb = 1 if self.in_kind == "signal" else 2       # leading dims with a batch axis
        batched = len(lead) == nb
        return contract.stream_meta(lead[0] if batched else None, lead[1:] if batched else lead,
                                    dt, n_in=int(n_in))

    def state_dict(self) -> dict:
        """Deep copy of the state in the contract's schema (:mod:`rtamt.engine.contract`)."""
        if self._state is None:   # identity of the design before any channel count is known
            sd = contract.header(self, self._block, None, arrays=None)
            sd["design"] = self.design_identity(self._coeffs0)
            return sd
        return contract.header(self, self._block, self._stream_meta(),
                               arrays={k: to_numpy(v) for k, v in self._state.items()})

    def _meta_from(self, st: dict) -> tuple:
        """Internal (lead, n_in, dtype) from a snapshot's ``stream`` entry (validated)."""
        try:
            lead = tuple(int(v) for v in st["lead"])
            n_in = int(st["n_in"])
            dtype = np.dtype(st["dtype"])
            batch = st["batch"]
        except (KeyError, TypeError, ValueError):
            raise RtamtInputError(f"{self.name}: malformed stream entry {st!r}") from None
        if dtype not in _FLOATS:
            raise RtamtInputError(f"{self.name}: snapshot dtype {dtype} is not float32/float64")
        if batch is not None:
            lead = (int(batch),) + lead
        ok = n_in == 1 if self.in_kind == "signal" else (lead[-1] == n_in if lead else n_in == 1)
        if not ok or any(v < 1 for v in lead) or len(lead) > (1 if self.in_kind == "signal" else 2):
            raise RtamtInputError(
                f"{self.name}: inconsistent snapshot layout: leading shape {lead} with {n_in} "
                "input channels")
        return lead, n_in, dtype

    def load_state_dict(self, sd: dict) -> None:
        """Restore a snapshot from :meth:`state_dict`: checked (kind, design identity,
        layout, array shapes and dtypes, finite values) before anything changes.  A
        snapshot of an earlier release is migrated first (:mod:`rtamt.engine.migrate`)."""
        sd = migrate.stage_state(self, sd)
        contract.check_state_header(self.name, sd)
        if sd.get("stream") is None:
            contract.check_identity(self.name, sd, self, self.design_identity(self._coeffs0))
            self._state, self._meta, self._block = None, None, int(sd["block"])
            return
        meta = self._meta_from(sd["stream"])
        coeffs = self._coeffs_for(meta[1])
        contract.check_identity(self.name, sd, self, self.design_identity(coeffs))
        state = contract.check_state_arrays(self.name, sd.get("arrays"),
                                            self._initial_state(coeffs, meta))
        self.coeffs = coeffs
        self._state = self._state_on(state, self.backend, self.device)
        self._meta = meta
        self._block = int(sd["block"])

    def _initial_state(self, coeffs, meta: tuple) -> dict:
        """The initial state (numpy) of a stream of layout ``meta`` (see
        :meth:`_meta_from`)."""
        lead, n_in, dtype = meta
        return self.init_state(coeffs, self._batch_of(lead), n_in, dtype)

    @classmethod
    def stack_state_dicts(cls, states: list) -> dict:
        """Batched state of several streams (see :func:`rtamt.engine.contract.stack_states`)."""
        return contract.stack_leaves(cls.__name__, states, cls.batch_axes, cls.shared_state)

    @classmethod
    def split_state_dict(cls, state: dict, i: int) -> dict:
        """Stream ``i`` of a batched state (see :func:`rtamt.engine.contract.split_state`);
        a stream of ``stream['rows']`` rows (a frame stage's) takes that many."""
        rows = int((state.get("stream") or {}).get("rows", 1))
        return contract.split_leaf(cls.__name__, state, i, cls.batch_axes, cls.shared_state,
                                   rows)


class StageGroup(contract.Composite):
    """What every composition of stages shares (:class:`Chain` and the time-varying
    loudness models, :class:`rtamt.loudness.tvl.TimeVaryingLoudness`): ``stages``, one
    :meth:`to`, one :meth:`reset`, a state that is the stages' states nested by stage name
    (``children``; no key has to be unique across stages) restored all or none
    (:meth:`_load_children`), and the batching hooks over every stage's leaves.  A
    subclass sets ``stages`` and may react to a new binding or state
    (:meth:`_rebound`)."""

    stages: list = []
    backend = "numba"
    device = None

    def __getitem__(self, name: str):
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    def _rebound(self) -> None:
        """Called after :meth:`to`, :meth:`reset` and a load (a subclass drops what it
        kept for the former binding or stream)."""

    def to(self, device=None, *, backend: str | None = None):
        """Run every stage on ``backend`` ('numba' or 'triton') and ``device`` (see
        :func:`rtamt.engine.backend.resolve`: ``device='cuda'`` implies Triton); the
        stream's state moves along and continues exactly.  All stages or none: a stage
        without a kernel for the backend raises :class:`~rtamt.engine.backend.
        RtamtBackendError` and nothing changes.  Returns self."""
        backend, device = resolve_backend(backend, device)
        missing = [s.name for s in self.stages if backend == "triton" and not s.triton_ready]
        if missing:
            raise RtamtBackendError(
                f"{self.name}: no Triton kernel yet for stage(s) {missing}; use "
                "backend='numba'")
        kerns = [s._bind(backend, device) for s in self.stages]   # all bound, then moved
        for s, k in zip(self.stages, kerns):
            s._set_backend(backend, device, k)
        self.backend, self.device = backend, device
        self._rebound()
        return self

    def reset(self) -> None:
        """Forget the stream (see :meth:`Stage.reset`)."""
        for s in self.stages:
            s.reset()
        self._rebound()

    def _children_state(self) -> dict:
        """``{stage name: stage.state_dict()}``, the ``children`` of a snapshot."""
        return {s.name: s.state_dict() for s in self.stages}

    def _load_children(self, ch) -> None:
        """Load every stage's snapshot from ``ch`` (``{stage name: state}``): all stages or
        none (a stage that refuses its state rolls every stage back)."""
        contract.load_all_or_none(self.name, self.stages, ch)
        self._rebound()

    def state_leaves(self) -> list:
        return [leaf for s in self.stages for leaf in s.state_leaves()]

    def advance_blocks(self, k: int = 1) -> None:
        for s in self.stages:
            s._block += k


class Chain(StageGroup):
    """A model: stages run in sequence on one stream, with the stages' contract.

    ``chain(x)`` returns the last stage's output; ``chain.process_all(x)`` returns
    ``{stage name: output}`` for every stage but the internal ones (time-last).
    Validation happens once at the chain's input; between stages the arrays stay
    time-major.

    A model's first stage is its calibration (``stages[0]``, a
    :class:`rtamt.ear.calibration.InputCalibration`, :attr:`calibration`): it multiplies
    every block by its gain (:attr:`input_gain`) into the internal units of the stages
    after it, and the chain checks every input block against its physical limit
    (:attr:`input_limit`, the first stage's ``input_limit``: infinite for other stages, so
    that only finiteness is checked).  A stage whose class sets ``internal = True`` (the
    calibration) is not one of the chain's outputs.
    The state is the stages' states (``children``), stacked and split stage by stage.

    A chain whose last stage gives frames (``flow_out`` :data:`FRAMES`: the loudness
    models, :class:`rtamt.loudness.tvl.TimeVaryingLoudness`) is a subclass that sets
    :attr:`frame_outputs`: its outputs are the frames completed in each block, which it
    packs itself (its own ``process_all``); a plain Chain gives samples.
    """

    name = "chain"
    batchable = True
    #: attributes that identify a model's design besides its stages (checked on load)
    identity_fields: tuple = ()
    #: the chain ends on frames and its subclass packs the frames of a block into outputs
    frame_outputs = False

    def __init__(self, stages: list[Stage], calibration=None):
        stages = list(stages) if calibration is None else [calibration, *stages]
        if not stages or stages[0].in_kind != "signal":
            raise ValueError("a Chain starts with a stage that takes a signal (T,) / (batch, T)")
        check_flows(self.name, stages)
        if stages[-1].flow_out != SAMPLES and not self.frame_outputs:
            raise ValueError(f"{self.name}: a Chain's stages give samples; "
                             f"{stages[-1].name!r} gives {stages[-1].flow_out} (a chain "
                             "ending on frames is a subclass that packs them, frame_outputs)")
        self.stages = stages
        self._bufs: list = [None] * len(self.stages)
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique, got {names}")

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.stages if not getattr(s, "internal", False)]

    @property
    def outputs(self) -> tuple:
        """Names of the outputs of :meth:`process_all` (one per stage, in order)."""
        return tuple(self.output_names)

    @property
    def calibration(self):
        """The calibration stage (``stages[0]`` when it has a ``gain``), or ``None``."""
        first = self.stages[0]
        return first if hasattr(first, "gain") and hasattr(first, "limit_text") else None

    @property
    def input_gain(self) -> float:
        """Factor from input samples to the stages' internal units (the calibration's)."""
        cal = self.calibration
        return 1.0 if cal is None else cal.gain

    @property
    def input_limit(self) -> float:
        """Largest accepted ``|sample|`` of the input (the first stage's: the
        calibration's physical limit)."""
        return self.stages[0].input_limit

    def _limit_text(self) -> str:
        """What :attr:`input_limit` is (for the error message of a rejected block)."""
        cal = self.calibration
        return "" if cal is None else cal.limit_text()

    def output_info(self) -> dict:
        """``{output name: {'rate': Hz, 'channels': C'}}`` for one mono input stream, in
        stage order (``channels``: rows of the output per stream, before time)."""
        # the input rate: the first stage's that has one (the calibration has none)
        fs = next((s.params.fs for s in self.stages if hasattr(s.params, "fs")), 0.0)
        rate, n, out = float(fs), 1, {}
        for st in self.stages:
            c = st._coeffs_for(n)
            n, rate = st.n_out(c, n), st.output_rate(rate)
            if not getattr(st, "internal", False):
                out[st.name] = {"rate": rate, "channels": int(n)}
        return out

    def design_identity(self) -> dict:
        """``{'name', <identity_fields>, 'fingerprint'}``; the fingerprint covers every
        stage's design (the calibration's gain included) at the channel counts the chain
        feeds it."""
        fp = self.__dict__.get("_fp")
        if fp is None:
            parts, n = [], 1
            for st in self.stages:
                c = st._coeffs_for(n)
                parts.append(st.design_identity(c)["fingerprint"])
                n = st.n_out(c, n)
            fp = self._fp = contract.fingerprint(*parts)
        return contract.identity(self, self.identity_fields, fp)

    def _rebound(self) -> None:
        self._bufs = [None] * len(self.stages)

    def _run(self, x, keep_all: bool, out=None):
        ensure_ftz()
        arr, back = as_numpy_block(x)
        first = self.stages[0]
        xt, lead, _ = first._check(arr, self.name, first.input_limit, self._limit_text)
        if self.backend == "triton":       # validated on the host; processed on the device
            xt, back = _device_block(xt, self.device), _identity
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
                if not getattr(st, "internal", False):
                    outs[st.name] = y
            return {k: back(first._to_public(v, lead)) for k, v in outs.items()}
        # the inner stages' work buffers are reused across blocks (no large allocation per
        # block; work_buffer() in each stage takes one only on an exact shape/dtype match;
        # the calibration writes the caller's block into its own, or passes it on unwritten
        # for a gain of 1).  The last stage's output is handed out: a new array, or the
        # caller's ``out``, returned as a time-last view (_to_public).
        bufs = self._bufs
        for i in range(len(stages) - 1):
            st = stages[i]
            y = bufs[i] = st.process_tm(st.coeffs, st._state, y, bufs[i])
            st._block += 1
        st = stages[-1]
        y = st.process_tm(st.coeffs, st._state, y, out)
        st._block += 1
        return back(first._to_public(y, lead))

    def _init_states(self, lead, dtype):
        """Create every stage's state for a new stream, all or nothing."""
        try:
            n = 1
            for s in self.stages:
                # a signal stage's leading shape is the stream's batch; a channel
                # stage's adds the channel count
                s._ensure_state(tuple(lead) if s.in_kind == "signal" else tuple(lead) + (n,),
                                n, dtype)
                n = s.n_out(s.coeffs, n)
        except Exception:
            for s in self.stages:
                s.reset()
            raise
        self._bufs = [None] * len(self.stages)

    def prepare(self, x) -> None:
        """Create every stage's initial state for a stream whose blocks look like ``x``
        (checked like a block; nothing is processed).  Does nothing if the state exists.
        Declares the layout like :meth:`Stage.prepare`: ``(N, 1)`` is ``N`` streams."""
        arr, _ = as_numpy_block(x)
        first = self.stages[0]
        xt, lead, _ = first._check(arr, self.name, first.input_limit, self._limit_text,
                                   declare=True)
        if first._state is None:
            self._init_states(lead, arr.dtype)

    def __call__(self, x, out=None):
        """The last stage's output for one block (time-last).  ``out``: a time-major
        ``(B, T, C')`` array of that output's shape and dtype that it is written into (see
        :meth:`Stage.__call__`)."""
        return self._run(x, keep_all=False, out=out)

    def process_all(self, x) -> dict:
        return self._run(x, keep_all=True)

    def state_dict(self) -> dict:
        """Deep copy of every stage's state, in the contract's schema (``children``)."""
        first = self.stages[0]
        return contract.header(self, first._block, first._stream_meta(),
                               children=self._children_state())

    def load_state_dict(self, sd: dict) -> None:
        """Restore a snapshot from :meth:`state_dict`: all stages or none (each checked
        as in :meth:`Stage.load_state_dict`, plus the chain's own identity).  A snapshot
        of an earlier release is migrated first (:func:`rtamt.engine.migrate.chain_state`)."""
        sd = migrate.chain_state(self, sd)
        contract.check_identity(self.name, sd, self)
        self._load_children(sd.get("children"))


def __getattr__(name):
    # SharedSOSStage lives beside its kernels in rtamt.engine.sos (imported from here
    # before); loaded on first use, since rtamt.engine.sos imports this module
    if name == "SharedSOSStage":
        from .sos import SharedSOSStage
        return SharedSOSStage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
