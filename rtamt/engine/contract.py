"""The streaming contract: what every object that processes a stream offers.

Stages, chains (models), the time-varying loudness models and the BS.1770 meter all
satisfy :class:`Streaming`, as a pedalboard ``Pedalboard`` is itself a ``Plugin``:

* ``obj(x)`` processes one block and carries the state to the next one;
  ``obj.process_all(x)`` returns every output by name (``obj.outputs``);
* ``reset()`` forgets the stream;
* ``state_dict()`` / ``load_state_dict(sd)`` snapshot and restore it (deep copies,
  bit-exact continuation);
* ``output_info()`` describes each output: ``{name: {'rate': Hz, 'channels': ...}}``;
* ``design_identity()`` names what a state belongs to (kind, configuration, sample rate
  and a fingerprint of the designed coefficients);
* ``input_limit`` is the largest accepted ``|sample|``: the models reject input beyond
  ``max_spl`` (default 200 dB SPL) at their calibration like NaN;
* ``batchable`` says whether states of several streams stack into one batched state
  (:func:`stack_states`, :func:`split_state`).

**State schema** (one for every kind; ``version`` :data:`STATE_VERSION`)::

    {"schema": "rtamt.state", "version": 1,
     "kind": "<class name>",              # e.g. "Dau1997", "Gammatone", "LoudnessMeter"
     "design": {...},                     # design_identity() of the object that made it
     "block": int,                        # blocks processed (used in error messages)
     "stream": None | {...},              # layout of the stream; None before the first block
     "arrays": {name: ndarray} | None,    # leaf objects: the state arrays
     "children": {name: state}}           # chains: one state per stage

``stream["batch"]`` is ``None`` for one stream given without a batch axis, or the number
of streams ``B`` stacked on the batch axis; ``stream["lead"]`` is the leading shape of
one stream's block (e.g. ``[]`` for a mono signal, ``[C]`` for ``C`` channels, ``[2]`` for
a stereo pair).  Loading checks the schema, the kind, every identity field and the
fingerprint, every array's key, shape and dtype, and that every value is finite; a
mismatch raises :class:`RtamtInputError` naming it, and nothing changes.

Input checks have one home too: :func:`check_float_dtype` and :func:`reject_nonfinite`
are used by every streaming class.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
from typing import Any, Protocol, runtime_checkable

import numpy as np

from . import kernels

__all__ = ["RtamtInputError", "Streaming", "STATE_VERSION", "SCHEMA", "stack_states",
           "split_state", "fingerprint", "check_float_dtype", "reject_nonfinite",
           "first_nonfinite", "check_state_arrays", "check_state_header", "register_kind",
           "Registered", "with_former_fields",
           "check_time_last", "COLUMN_ROWS"]

SCHEMA = "rtamt.state"
STATE_VERSION = 1
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


class RtamtInputError(ValueError):
    """A block or a snapshot was rejected before it touched any state.

    The message names the object, the block index in the stream, and where applicable
    the batch row / channel / sample of the offending value, or the mismatching field
    of a snapshot.
    """


@runtime_checkable
class Streaming(Protocol):
    """What every streaming object offers (see the module docstring)."""

    name: str
    outputs: tuple
    batchable: bool
    input_limit: float      # largest accepted |sample| (inf: only finite values are checked)

    def __call__(self, x) -> Any: ...

    def process_all(self, x) -> dict: ...

    def reset(self) -> None: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, sd: dict) -> None: ...

    def design_identity(self) -> dict: ...

    def output_info(self) -> dict: ...


# ------------------------------------------------------------------ registry of kinds
_KINDS: dict[str, type] = {}


def register_kind(cls: type) -> type:
    """Record ``cls`` under its class name, so that :func:`stack_states` and
    :func:`split_state` find the class that knows how a state of that kind stacks."""
    _KINDS[cls.__name__] = cls
    return cls


class Registered:
    """Base of the streaming classes: every subclass is recorded by :func:`register_kind`.

    It also holds the defaults of the batching hooks that :mod:`rtamt.scheduler` uses to
    run many streams of one design in one call (overridden by the stages, chains and the
    time-varying loudness models):

    * ``prepare(x)`` creates the state of a stream whose blocks look like ``x`` without
      processing anything (the state a first block would start from);
    * ``state_leaves()`` lists the live state arrays as ``(holder, key, axis)``:
      ``holder[key]`` is the array, ``axis`` its batch axis, or ``None`` for a value that
      all streams of one call share (a frame clock, a resampler phase); ``None`` instead
      of a list means the object does not expose its state (the scheduler then runs
      each of its streams alone);
    * ``advance_blocks(k)`` counts ``k`` processed blocks (the ``block`` of :meth:`state_dict`)
      that a batched copy of the object processed for it;
    * ``unbatched_outputs`` names outputs that have no batch axis (shared by the streams
      of one call, e.g. frame times).
    """

    unbatched_outputs: tuple = ()

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        register_kind(cls)

    def state_leaves(self):
        return None

    def advance_blocks(self, k: int = 1) -> None:
        pass


def _kind_class(state) -> type:
    check_state_header("stack_states/split_state", state)
    cls = _KINDS.get(state["kind"])
    if cls is None:     # ``import rtamt`` no longer imports every kind (rtamt/__init__.py)
        import rtamt.engine.stage  # noqa: F401  (each registers its kinds)
        import rtamt.models  # noqa: F401
        import rtamt.scheduler  # noqa: F401
        cls = _KINDS.get(state["kind"])
    if cls is None:
        raise RtamtInputError(f"unknown state kind {state['kind']!r}")
    return cls


def stack_states(states) -> dict:
    """Stack the states of several streams of the same design into one batched state.

    ``states``: a list of :meth:`state_dict` results (each one stream, or itself a batch);
    the result has ``stream["batch"] == sum of the inputs' stream counts``, in order.
    Processing the stacked batch gives each stream bit-for-bit what it gets alone.
    Raises :class:`RtamtInputError` naming the first state that does not fit (other
    design, dtype, layout, a stream that has not started, or a kind that does not batch).
    """
    states = list(states)
    if not states:
        raise RtamtInputError("stack_states: no states given")
    cls = _kind_class(states[0])
    for i, s in enumerate(states[1:], 1):
        if _kind_class(s) is not cls:
            raise RtamtInputError(
                f"stack_states: state {i} is a {s['kind']}, state 0 a {states[0]['kind']}")
    return cls.stack_state_dicts(states)


def split_state(state: dict, i: int) -> dict:
    """Stream ``i`` of a batched state, as the state of one stream without a batch axis
    (a deep copy; ``split_state(stack_states(ss), i)`` equals ``ss[i]`` when ``ss[i]`` was
    one stream)."""
    return _kind_class(state).split_state_dict(state, int(i))


# ------------------------------------------------------------------ identity
def _feed(h, obj) -> None:
    """Feed a canonical byte form of ``obj`` (arrays, dataclasses, containers, scalars)."""
    if isinstance(obj, np.ndarray):
        h.update(b"A" + obj.dtype.str.encode() + repr(obj.shape).encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(b"D" + type(obj).__name__.encode())
        for f in dataclasses.fields(obj):
            h.update(f.name.encode())
            _feed(h, getattr(obj, f.name))
    elif isinstance(obj, dict):
        h.update(b"M")
        for k in sorted(obj, key=repr):
            h.update(repr(k).encode())
            _feed(h, obj[k])
    elif isinstance(obj, (list, tuple)):
        h.update(b"L" + str(len(obj)).encode())
        for v in obj:
            _feed(h, v)
    elif isinstance(obj, (np.generic, float, int, str, bool, type(None))):
        h.update(b"S" + repr(obj.item() if isinstance(obj, np.generic) else obj).encode())
    elif hasattr(obj, "__dict__") and not callable(obj):   # plain coefficient objects
        h.update(b"P" + type(obj).__name__.encode())
        _feed(h, {k: v for k, v in vars(obj).items() if not k.startswith("_")})
    else:  # functions and other opaque values: their type only (a repr may hold an address)
        h.update(b"O" + type(obj).__name__.encode())


def identity(obj, fields: tuple, fp: str) -> dict:
    """``{'name': obj.name, <field>: getattr(obj, field) ..., 'fingerprint': fp}``
    (numbers as float, so that an int and a float sample rate compare equal)."""
    ident = {"name": obj.name}
    for f in fields:
        v = getattr(obj, f)
        ident[f] = float(v) if isinstance(v, (int, float, np.floating)) else v
    ident["fingerprint"] = fp
    return ident


def fingerprint(*parts) -> str:
    """SHA-256 (first 16 hex digits) of a canonical byte form of ``parts``: identical
    designs give identical fingerprints, any coefficient difference another one."""
    h = hashlib.sha256()
    for p in parts:
        _feed(h, p)
    return h.hexdigest()[:16]


# ------------------------------------------------------------------ input checks
def check_float_dtype(x: np.ndarray, where: str, err: type = RtamtInputError) -> None:
    """Raise ``err`` (an :class:`RtamtInputError`) unless ``x`` is float32 or float64."""
    if x.dtype not in FLOATS:
        raise err(
            f"{where}: dtype {x.dtype} is not supported; expected float32 or float64 "
            "(convert integer PCM with x / 2**(bits-1))")


#: a stream's first block of shape ``(N, 1)`` with ``N >= COLUMN_ROWS`` is refused by
#: :func:`check_time_last` unless the batch was declared (``prepare``): audio callbacks deliver
#: (frames, channels) blocks of at least this many frames, so such a block is almost surely
#: one (e.g. sounddevice's ``indata``), while N streams starting with a single sample each
#: are rare and can say so
COLUMN_ROWS = 8

_TIME_LAST = ("time is the last axis: pass x[:, 0] for one channel, or x.T for a "
              "(frames, channels) block")


def check_time_last(x, where, fresh: bool, declare: str = "with prepare(x)") -> None:
    """Refuse the first block of a stream (``fresh``) when it is a ``(N, 1)`` column with
    ``N >= COLUMN_ROWS``: with time on the last axis it would be taken as ``N`` streams of
    one sample, which is what a (frames, channels) block of an audio callback looks like.
    ``x``: a numpy array or a tensor (only its shape is read).  ``where`` (who and which
    block) may be a callable.  To process ``N`` streams whose first block holds one sample,
    call ``prepare(x)`` first: it declares the batch (``declare`` says how, in the
    message: the torch layers declare it with a state of ``N`` streams)."""
    if fresh and x.ndim == 2 and x.shape[-1] == 1 and x.shape[0] >= COLUMN_ROWS:
        raise RtamtInputError(
            f"{where() if callable(where) else where}: got shape {tuple(x.shape)}, which "
            f"would be {x.shape[0]} streams of 1 sample each; {_TIME_LAST} (sounddevice "
            "and soundfile deliver frames x channels).  For that many streams of one "
            f"sample, declare the batch first {declare}")


def time_last_hint(x: np.ndarray) -> str:
    """A hint for the message that refuses a block of another layout than the stream's:
    empty, or the time-last reminder when ``x`` is a ``(N, 1)`` column."""
    return f"; {_TIME_LAST}" if x.ndim == 2 and x.shape[-1] == 1 else ""


def first_nonfinite(x: np.ndarray) -> tuple[int, ...]:
    """Index of the first non-finite value of ``x`` (C order)."""
    return tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])


def reject_nonfinite(x: np.ndarray, where: str, describe, err: type = RtamtInputError,
                     limit: float = math.inf, limit_text="") -> None:
    """Raise ``err`` (an :class:`RtamtInputError`) if ``x`` holds NaN or Inf, or a value
    whose magnitude exceeds ``limit`` (a model's physical limit, ``limit_text`` says what it
    is: a string, or a callable returning one, called only when a block is rejected).
    ``describe(index)`` names the position of the first offending value (e.g.
    ``'batch 1, channel 3, sample 17'``).  ``where`` (who and which block) may also be a
    callable, so that the hot path formats nothing for a good block."""
    if limit == math.inf:
        if kernels.all_finite(x):
            return
    elif kernels.all_within(x, limit):
        return
    if callable(where):
        where = where()
    if not kernels.all_finite(x):
        bad = first_nonfinite(x)
        raise err(
            f"{where}: non-finite value {x[bad]} at {describe(bad)}; "
            "block rejected, state unchanged")
    bad = tuple(int(i) for i in np.argwhere(np.abs(x) > limit)[0])
    raise err(
        f"{where}: value {float(x[bad]):.4g} at {describe(bad)} is beyond the physical limit "
        f"|x| <= {limit:.4g} ({limit_text() if callable(limit_text) else limit_text}); "
        "block rejected, state unchanged")


# ------------------------------------------------------------------ snapshot checks
def check_state_header(who: str, sd) -> None:
    """The parts of the schema every snapshot has: a dict with ``schema``, ``version``
    and ``kind``."""
    if not isinstance(sd, dict):
        raise RtamtInputError(
            f"{who}: expected a state dict from state_dict(), got {type(sd).__name__}")
    if sd.get("schema") != SCHEMA or "version" not in sd:
        raise RtamtInputError(
            f"{who}: not an rtamt state (no schema/version; snapshots made before the "
            f"versioned schema cannot be loaded; keys: {sorted(sd)[:6]})")
    if sd["version"] != STATE_VERSION:
        raise RtamtInputError(
            f"{who}: state schema version {sd['version']!r}, this rtamt reads version "
            f"{STATE_VERSION}")
    if "kind" not in sd:
        raise RtamtInputError(f"{who}: state has no 'kind'")


_FIELD_NAMES = {"fs": "sample rate", "config": "configuration", "spl_ref": "spl_ref",
                "name": "name", "channels": "channel count", "fingerprint": "coefficients"}


def check_identity(who: str, sd: dict, obj, identity: dict | None = None,
                   kind: str | None = None) -> None:
    """Check that snapshot ``sd`` was made by an object of ``obj``'s kind and design
    (``identity``: the design identity to compare with, default
    ``obj.design_identity()``; ``kind``: the kind its snapshots carry, default ``obj``'s
    class name)."""
    check_state_header(who, sd)
    kind = type(obj).__name__ if kind is None else kind
    if sd["kind"] != kind:
        raise RtamtInputError(f"{who}: the state is of a {sd['kind']}, this is a {kind}")
    mine = obj.design_identity() if identity is None else identity
    theirs = sd.get("design")
    if not isinstance(theirs, dict):
        raise RtamtInputError(f"{who}: state has no design identity")
    for k, v in mine.items():
        if k == "fingerprint":
            continue
        if k not in theirs or theirs[k] != v:
            raise RtamtInputError(
                f"{who}: the state was made with {_FIELD_NAMES.get(k, k)} "
                f"{theirs.get(k)!r}, this {kind} has {v!r}")
    if theirs.get("fingerprint") != mine.get("fingerprint"):
        raise RtamtInputError(
            f"{who}: the state was made by a {kind} with other coefficients (design "
            f"fingerprint {theirs.get('fingerprint')} != {mine.get('fingerprint')}): "
            "other parameters")


def check_state_arrays(who: str, arrays, ref: dict) -> dict:
    """Validate snapshot ``arrays`` against a freshly initialised state ``ref`` (same keys,
    shapes and dtypes; finite values) and return deep copies.  Raises
    :class:`RtamtInputError` naming ``who`` and the first mismatch; nothing is modified."""
    if not isinstance(arrays, dict):
        raise RtamtInputError(f"{who}: state arrays missing (got {type(arrays).__name__})")
    if set(arrays) != set(ref):
        raise RtamtInputError(f"{who}: state arrays {sorted(arrays)} != {sorted(ref)}")
    out = {}
    for k, v in ref.items():
        a = np.asarray(arrays[k])
        if a.shape != v.shape or a.dtype != v.dtype:
            raise RtamtInputError(
                f"{who}: state array {k!r} has shape {a.shape} {a.dtype}, expected "
                f"{v.shape} {v.dtype} (other channel count, batch or dtype?)")
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            raise RtamtInputError(
                f"{who}: state array {k!r} holds a non-finite value at "
                f"{first_nonfinite(a)}; refused")
        out[k] = np.array(a, copy=True)
    return out


def with_former_fields(params, **former):
    """``params`` as a dataclass of the same name with the fields ``former`` (name ->
    the value every design used) appended after its own: what a stage whose ``Params``
    lost those fields feeds to :func:`fingerprint`, so that its design fingerprint, and
    the snapshots made before, stay as they were."""
    own = [(f.name, object) for f in dataclasses.fields(params)]
    cls = dataclasses.make_dataclass(type(params).__name__,
                                     own + [(k, object) for k in former])
    return cls(**{k: getattr(params, k) for k, _ in own}, **former)


def stream_meta(batch, lead, dtype, **extra) -> dict:
    return {"batch": None if batch is None else int(batch), "lead": [int(v) for v in lead],
            "dtype": str(np.dtype(dtype)), **extra}


def stack_leaf_arrays(who: str, states: list, axes: dict, shared: tuple) -> tuple[dict, int]:
    """Concatenate the ``arrays`` of leaf states along their batch axis (``axes[key]``,
    default 0); keys in ``shared`` must be equal in every state and are kept once.
    Returns (arrays, total stream count).  Checks design, stream layout and start."""
    s0 = states[0]
    for i, s in enumerate(states):
        if s.get("design") != s0.get("design"):
            raise RtamtInputError(f"{who}: state {i} has another design than state 0")
        if s.get("stream") is None or s.get("arrays") is None:
            raise RtamtInputError(
                f"{who}: state {i} has not processed a block yet; start every stream first")
        a, b = dict(s["stream"]), dict(s0["stream"])
        a.pop("batch"), b.pop("batch")
        if a != b:
            raise RtamtInputError(f"{who}: state {i} has stream layout {a}, state 0 has {b}")
    out = {}
    for k in s0["arrays"]:
        if k in shared:
            v0 = s0["arrays"][k]
            for i, s in enumerate(states):
                if not np.array_equal(s["arrays"][k], v0):
                    raise RtamtInputError(
                        f"{who}: state {i} is at another position ({k} = "
                        f"{np.asarray(s['arrays'][k]).tolist()} vs "
                        f"{np.asarray(v0).tolist()}); such streams cannot share a call")
            out[k] = np.array(v0, copy=True)
        else:
            out[k] = np.concatenate([s["arrays"][k] for s in states], axis=axes.get(k, 0))
    n = sum(1 if s["stream"]["batch"] is None else s["stream"]["batch"] for s in states)
    return out, n


def split_leaf_arrays(who: str, state: dict, i: int, axes: dict, shared: tuple,
                      rows: int = 1) -> dict:
    """Stream ``i``'s arrays of a leaf state (``rows`` rows per stream on the batch axis)."""
    st = state.get("stream")
    if st is None or state.get("arrays") is None:
        raise RtamtInputError(f"{who}: the state has not processed a block yet")
    n = 1 if st["batch"] is None else st["batch"]
    if not 0 <= i < n:
        raise RtamtInputError(f"{who}: stream {i} out of range (the state holds {n})")
    out = {}
    for k, v in state["arrays"].items():
        if k in shared:
            out[k] = np.array(v, copy=True)
        else:
            ax = axes.get(k, 0)
            sl = [slice(None)] * v.ndim
            sl[ax] = slice(i * rows, (i + 1) * rows)
            out[k] = np.array(v[tuple(sl)], copy=True)
    return out


def stack_leaves(who: str, states: list, axes: dict, shared: tuple) -> dict:
    """Batched state of leaf states (arrays, no children): arrays stacked by
    :func:`stack_leaf_arrays`, ``stream['batch']`` the total, ``block`` the largest."""
    arrays, n = stack_leaf_arrays(who, states, axes, shared)
    out = deep({k: v for k, v in states[0].items() if k != "arrays"})
    out["stream"]["batch"] = n
    out["block"] = max(int(s["block"]) for s in states)
    out["arrays"] = arrays
    return out


def split_leaf(who: str, state: dict, i: int, axes: dict, shared: tuple, rows: int = 1) -> dict:
    """Stream ``i`` of a batched leaf state, without a batch axis."""
    arrays = split_leaf_arrays(who, state, i, axes, shared, rows)
    out = deep({k: v for k, v in state.items() if k != "arrays"})
    out["stream"]["batch"] = None
    out["arrays"] = arrays
    return out


class Composite(Registered):
    """Base of objects whose state is their parts' states (``children``): chains and
    :class:`~rtamt.engine.parallel.Parallel`.  States stack and split part by part."""

    @classmethod
    def stack_state_dicts(cls, states: list) -> dict:
        """Batched state of several streams: each part's states stacked."""
        return stack_children(cls.__name__, states)

    @classmethod
    def split_state_dict(cls, state: dict, i: int) -> dict:
        """Stream ``i`` of a batched composite state."""
        return split_children(state, i)


def stack_children(who: str, states: list) -> dict:
    """Batched state of composite states (``children``: one state per part, e.g. a
    chain's stages): each part's states stacked by :func:`stack_states`."""
    s0 = states[0]
    for i, s in enumerate(states):
        if s.get("design") != s0.get("design"):
            raise RtamtInputError(f"{who}: state {i} has another design than state 0 "
                                  f"({s.get('design')} vs {s0.get('design')})")
    out = {k: deep(v) for k, v in s0.items() if k != "children"}
    out["children"] = {name: stack_states([s["children"][name] for s in states])
                       for name in s0["children"]}
    first = next(iter(out["children"].values()))
    out["stream"], out["block"] = deep(first["stream"]), first["block"]
    return out


def split_children(state: dict, i: int) -> dict:
    """Stream ``i`` of a batched composite state (see :func:`stack_children`)."""
    out = {k: deep(v) for k, v in state.items() if k != "children"}
    out["children"] = {name: split_state(c, i) for name, c in state["children"].items()}
    out["stream"] = deep(next(iter(out["children"].values()))["stream"])
    return out


def header(obj, block: int, stream, **body) -> dict:
    """A state dict of the schema for ``obj`` (see the module docstring)."""
    return {"schema": SCHEMA, "version": STATE_VERSION, "kind": type(obj).__name__,
            "design": obj.design_identity(), "block": int(block), "stream": stream, **body}


def deep(sd: dict) -> dict:
    return copy.deepcopy(sd)


def load_all_or_none(name: str, stages, ch) -> None:
    """Load each of ``stages`` from its snapshot in ``ch`` (``{stage name: state}``), all or
    none: a stage that refuses its state rolls every stage back, and the error names
    ``name`` (the owner) and what differs."""
    if not isinstance(ch, dict) or set(ch) != {s.name for s in stages}:
        raise RtamtInputError(
            f"{name}: the state's stages {sorted(ch) if isinstance(ch, dict) else ch} "
            f"differ from this chain's {[s.name for s in stages]}")
    backup = [s.state_dict() for s in stages]
    try:
        for s in stages:
            s.load_state_dict(ch[s.name])
    except Exception:
        for s, b in zip(stages, backup):
            s.load_state_dict(b)
        raise
