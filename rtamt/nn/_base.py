"""The machinery of the :mod:`rtamt.nn` layer: the state as a dict of batch-first tensors,
its checks, and the stages of a layer (:class:`Part` for a sample stage, :class:`FramePart`
for a frame stage)."""
from __future__ import annotations

import copy
import math

import numpy as np
import torch

from ..engine import backend as _backend
from ..engine.contract import RtamtInputError, check_time_last, fingerprint, reject_nonfinite
from . import _autograd
from ._autograd import StageFunction, grad_rule, param_np, run_stage, run_stage_device

__all__ = ["StreamLayer", "Part", "FramePart", "detach_state", "DESIGN_KEY"]

#: state entry naming what made the state: (batch, 2) int64 rows
#: ``[design fingerprint, itemsize of the stream's dtype]``
DESIGN_KEY = "_design"
_FLOAT_T = (torch.float32, torch.float64)


def np_dtype(dtype: torch.dtype) -> type:
    """The numpy float type of torch float ``dtype`` (float32 or float64)."""
    return np.float32 if dtype == torch.float32 else np.float64


def detach_state(state: dict) -> dict:
    """The same state cut from the autograd graph (truncated back-propagation through
    time: the gradient of later blocks stops at this block boundary)."""
    if not isinstance(state, dict):
        raise RtamtInputError(f"detach_state: expected a state dict, got {type(state).__name__}")
    return {k: v.detach() for k, v in state.items()}


def time_last(y: torch.Tensor) -> torch.Tensor:
    """Time-major ``(B, T, C)`` -> ``(B, C, T)`` (a view); ``(B, T)`` stays."""
    return y if y.ndim == 2 else y.permute(0, 2, 1)


class Part:
    """One stage of a layer: the :class:`rtamt.engine.stage.Stage` object (its class runs
    the kernels), its coefficients for ``n_in`` input channels, its state keys and its
    backward rule (``grad``, ``None`` for a forward-only stage).

    The stage's state arrays are laid out as the stage keeps them; :meth:`to_batch_first`
    and :meth:`from_batch_first` convert them to the layer's batch-first tensors (a
    batch axis other than 0 is moved to the front; a value shared by all streams of a
    call, e.g. a resampler's phase, is repeated per stream and must stay equal)."""

    def __init__(self, stage, n_in: int):
        self.stage, self.cls, self.name = stage, type(stage), stage.name
        self.n_in = int(n_in)
        self.coeffs = stage._coeffs_for(self.n_in)
        self.n_out = int(stage.n_out(self.coeffs, n_in))
        self.axes = dict(stage.batch_axes)
        self.shared = tuple(stage.shared_state)
        self.keys = tuple(stage.init_state(self.coeffs, 1, self.n_in, np.float64))
        self.grad = grad_rule(stage, self.coeffs, self.n_in)
        #: why a gradient cannot pass the stage (when ``grad`` is ``None``)
        self.why = "has no gradient rule"
        self.fingerprint = stage.design_identity(self.coeffs)["fingerprint"]
        #: the stage runs its Triton twins (forward, and its rule's adjoints) on the
        #: block's device (:meth:`bind`); else the numba kernels on the host
        self.on_device = False
        self._dev_stage = None           # a copy of the stage bound to the Triton kernels
        self._coef = None                # its coefficient cache on the device
        self._last_coeffs = self.coeffs

    def bind(self, backend: str, device) -> bool:
        """Bind the stage for a resolved ``(backend, device)`` (once, when the layer is
        moved): on ``'triton'`` its forward twins (a copy of the stage that holds them)
        and its rule's Triton adjoints, with one coefficient cache on the device for
        both, when the stage has both (a stage without a rule needs only its forward
        twins); else, and on ``'numba'``, the numba kernels on the host (a block on
        another device is copied there and back, as before).  Returns whether the stage
        runs on the device."""
        st = self.stage
        ok = backend == "triton" and st.triton_ready and (
            self.grad is None or self.grad.device_ready)
        if not ok:
            self.on_device, self._dev_stage, self._coef = False, None, None
            if self.grad is not None:
                self.grad.bind("numba")
            return False
        self._coef = _backend._TorchCoeffs(device)
        kern = st._bind(backend, device)
        runner = copy.copy(st)
        runner._state = None
        if kern is not None:
            kern.coef = self._coef
            runner.kern = kern
        self._dev_stage = runner
        if self.grad is not None:
            self.grad.bind(backend, device, coef=self._coef)
        self.on_device = True
        return True

    def coeffs_at(self, param):
        """The coefficients for learnable parameter ``param`` (``None``: the design); on
        the device, a change of coefficients empties the stage's coefficient cache there
        (the cache keeps what it holds alive, so training would otherwise grow it)."""
        c = self.coeffs if self.grad is None else self.grad.coeffs_for(param_np(param))
        if c is not self._last_coeffs:
            self._last_coeffs = c
            if self._coef is not None:
                self._coef.cache.clear()
        return c

    def forward(self, coeffs, x: torch.Tensor, state: tuple) -> tuple:
        """The stage's forward kernel on time-major ``x`` from ``state`` (tensors in
        ``keys`` order, never written): ``(y, *new_state)`` on ``x``'s device."""
        if self.on_device:
            return run_stage_device(self._dev_stage, coeffs, self.keys, x, state)
        return tuple(o.to(x.device) for o in run_stage(self.cls, coeffs, self.keys, x, state))

    def initial(self, batch: int, dtype) -> dict:
        """Batch-first numpy arrays of a stream that has heard nothing."""
        st = self.cls.init_state(self.coeffs, batch, self.n_in, dtype)
        out = {}
        for k, v in st.items():
            if k in self.shared:
                v = np.repeat(np.asarray(v)[None], batch, axis=0)
            else:
                v = np.moveaxis(v, self.axes.get(k, 0), 0)
            out[k] = np.ascontiguousarray(v)
        return out

    def from_batch_first(self, st: dict) -> tuple:
        """The stage's own layout (in ``keys`` order) of batch-first tensors ``st``."""
        out = []
        for k in self.keys:
            v = st[k]
            if k in self.shared:
                if v.shape[0] > 1 and not bool((v == v[:1]).all()):
                    raise RtamtInputError(
                        f"{self.name}: state {k!r} differs between the streams of the batch "
                        "(streams at other positions cannot share a call)")
                v = v[0]
            else:
                v = torch.movedim(v, 0, self.axes.get(k, 0))
            out.append(v)
        return tuple(out)

    def to_batch_first(self, vals: tuple, batch: int) -> dict:
        out = {}
        for k, v in zip(self.keys, vals):
            if k in self.shared:
                v = v[None].expand((batch,) + tuple(v.shape)).clone()
            else:
                v = torch.movedim(v, self.axes.get(k, 0), 0)
            out[k] = v
        return out

    def run(self, x: torch.Tensor, st: dict, param, need_grad: bool):
        """One block through the stage: ``x`` time-major, ``st`` batch-first tensors of
        this stage; returns ``(y, new batch-first state)``.  ``need_grad``: through the
        stage's gradient rule (:class:`~rtamt.nn._autograd.StageFunction`), else its
        kernel alone, nothing recorded."""
        state = self.from_batch_first(st)
        if need_grad:                   # the layer checked that the stage has a rule
            out = StageFunction.apply(self, x, param, *state)
        else:
            out = self.forward(self.coeffs_at(param), x, state)
        return out[0], self.to_batch_first(out[1:], x.shape[0])


class FramePart:
    """One frame stage of a frame model (:mod:`rtamt.loudness.frames`; the loudness
    models), ``rows`` rows a stream (a stereo stream has two).  The model's pure
    ``process`` runs the frame stages together; with a gradient, :mod:`rtamt.nn._frames`
    runs them and their rules (``grad``: the stage's
    :class:`~rtamt.loudness.frames_grad.FrameGrad`, ``None`` without one).  Its state, per
    row in the stage (``init_state(R)``, the keys in ``shared_state`` without a row axis),
    is batch-first in the layer: ``(batch, ...)``, ``(batch, rows, ...)`` for
    ``rows > 1``, a shared value repeated per stream."""

    def __init__(self, stage, rows: int):
        self.stage, self.cls, self.name = stage, type(stage), stage.name
        self.rows = int(rows)
        self.shared = tuple(stage.shared_state)
        self.keys = tuple(stage.init_state(1))
        self.fingerprint = stage.design_identity()["fingerprint"]
        rule = self.cls.grad_rule()
        self.grad = None if rule is None else rule(stage, self.rows)
        self.why = "has no gradient rule"
        #: the stage and its rule run on the block's device (:meth:`bind`): the state is
        #: kept there as tensors (the frame clock ``n`` excepted, a host array as in the
        #: Triton-bound model)
        self.on_device = False
        #: the stage the layer runs (the model's copy bound to Triton on the device)
        self.run_stage = stage

    def device_ok(self) -> bool:
        """Whether the stage has Triton twins and a rule whose ``backward`` runs on the
        device."""
        return bool(self.stage.triton_ready and self.grad is not None
                    and self.grad.device_ready)

    def bind(self, backend: str, device, stage) -> None:
        """Bind for a resolved ``(backend, device)``: ``stage`` is the stage to run (the
        Triton-bound model's on ``'triton'``, else this part's own); the rule's adjoints
        bound alike, with ``stage``'s coefficient cache."""
        self.on_device = backend == "triton"
        self.run_stage = stage
        if self.grad is not None:
            if self.on_device:
                self.grad.bind(backend, device, coef=getattr(stage.kern, "coef", None))
            else:
                self.grad.bind("numba")

    def _first(self, k: str, v, batch: int) -> np.ndarray:
        """State array ``k`` of the stage's own layout, batch-first."""
        if k in self.shared:
            v = np.repeat(np.asarray(v)[None], batch, axis=0)
        elif self.rows > 1:
            v = v.reshape((batch, self.rows) + v.shape[1:])
        return np.ascontiguousarray(v)

    def initial(self, batch: int, dtype) -> dict:
        """Batch-first numpy arrays of ``batch`` streams that have heard nothing (the
        stage's own float64 state, whatever the input's ``dtype``)."""
        return {k: self._first(k, v, batch)
                for k, v in self.stage.init_state(batch * self.rows).items()}

    def to_model(self, st: dict, batch: int) -> dict:
        """The stage's own state (new numpy arrays, rows first) of batch-first tensors
        ``st`` (by key)."""
        out = {}
        for k in self.keys:
            v = st[k].detach()
            if self.on_device and k not in self.shared:     # stays on the device
                out[k] = v.reshape((batch * self.rows,) + tuple(
                    v.shape[2 if self.rows > 1 else 1:])).clone()
                continue
            a = v.cpu().numpy()           # the frame clock: read on the host, as the model
            if k in self.shared:
                if not (a == a[:1]).all():
                    raise RtamtInputError(
                        f"{self.name}: state {k!r} (the frame clock) differs between the "
                        "streams of the batch (streams at other positions cannot share a "
                        "call)")
                out[k] = a[0].copy()
            else:
                out[k] = a.reshape((batch * self.rows,) + a.shape[2 if self.rows > 1 else 1:]
                                   ).copy()
        return out

    def from_model(self, st: dict, batch: int, device) -> dict:
        """Batch-first tensors on ``device`` of the stage's own state ``st`` (numpy; for a
        part bound to the device, tensors there but the frame clock)."""
        out = {}
        for k, v in st.items():
            if self.on_device and k not in self.shared:     # a tensor there already
                if self.rows > 1:
                    v = v.reshape((batch, self.rows) + tuple(v.shape[1:]))
                out[k] = v.contiguous()
            else:
                out[k] = torch.from_numpy(self._first(k, v, batch)).to(device)
        return out


class StreamLayer(torch.nn.Module):
    """Base of the :mod:`rtamt.nn` layers: ``y, state = layer(x, state=None)``.

    The state is a ``dict`` of tensors, every one batch-first (``state[k][i]`` belongs to
    stream ``i``, so the states of several streams concatenate with ``torch.cat`` on
    axis 0), including :data:`DESIGN_KEY`, which names the design and the stream's dtype
    that made it.  A layer never writes the state it is given; it returns a new one.

    The one concrete layer is :class:`rtamt.nn.ChainLayer`; it defines ``in_rank`` (2:
    input ``(batch, T)``; 3: ``(batch, C, T)``), ``n_in`` (rows of a rank-3 input),
    ``_initial_np(batch, dtype)`` (batch-first numpy arrays of a stream of float
    ``dtype``), ``_grad_start(x, state)`` (the index of the first stage a gradient is
    requested through, ``None`` for none; it raises when a stage from there on has no
    gradient rule) and ``_run(x, state, start)`` (one block, returns ``(y, new state
    without DESIGN_KEY)``).
    """

    in_rank = 2
    n_in = 1
    input_limit = math.inf
    #: the input check runs on the block's device (a Triton-bound layer, see
    #: :meth:`rtamt.nn.ChainLayer.to`)
    on_device = False

    def __init__(self, name: str, design_parts: tuple):
        super().__init__()
        self.name = name
        self._tag = int(fingerprint("rtamt.nn", name, *design_parts)[:15], 16)
        self.register_buffer("_anchor", torch.zeros(0, dtype=torch.float64), persistent=False)
        self._shapes: dict = {}

    # -- to override ---------------------------------------------------------------------
    def _initial_np(self, batch: int, dtype) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _run(self, x: torch.Tensor, state: dict, start):  # pragma: no cover - abstract
        raise NotImplementedError

    def _grad_start(self, x: torch.Tensor, state: dict):  # pragma: no cover - abstract
        raise NotImplementedError

    def _limit_text(self) -> str:
        return ""

    # -- public --------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """The device of the layer's parameters and buffers (moved by ``.to``)."""
        return self._anchor.device

    def initial_state(self, batch: int, device=None, dtype=None) -> dict:
        """The state of ``batch`` streams that have heard nothing (or the silence the model
        defines as its start), on ``device`` (default: the layer's) for input of float
        ``dtype`` (default: torch's default dtype)."""
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if dtype not in _FLOAT_T:
            raise RtamtInputError(f"{self.name}: dtype {dtype} is not float32/float64")
        if int(batch) < 1:
            raise RtamtInputError(f"{self.name}: batch must be >= 1, got {batch}")
        device = self.device if device is None else torch.device(device)
        np_dt = np_dtype(dtype)
        st = {k: torch.from_numpy(v).to(device)
              for k, v in self._initial_np(int(batch), np_dt).items()}
        tag = torch.tensor([[self._tag, torch.finfo(dtype).bits // 8]], dtype=torch.int64)
        st[DESIGN_KEY] = tag.expand(int(batch), 2).clone().to(device)
        return st

    def forward(self, x: torch.Tensor, state: dict | None = None):
        """One block: ``x`` ``(batch, T)`` (``(batch, C, T)`` for a channel stage), float32
        or float64; returns ``(y, new_state)``, ``y`` time-last.  ``state=None`` starts
        from :meth:`initial_state`.  Gradients are recorded only when grad mode is on and
        ``x``, the state or a parameter requires them, and only from the first stage they
        enter on; otherwise nothing is saved."""
        self._check_input(x, fresh=state is None)
        if state is None:
            state = self.initial_state(x.shape[0], x.device, x.dtype)
        else:
            self._check_state(state, x)
        body = {k: v for k, v in state.items() if k != DESIGN_KEY}
        y, new = self._run(x, body, self._grad_start(x, body))
        new[DESIGN_KEY] = state[DESIGN_KEY]
        return y, new

    def online_inference(self, x: torch.Tensor, context: dict | None = None):
        """lhotse's streaming form: ``(y, context) = layer.online_inference(x, context)``
        (the same as :meth:`forward`; ``context`` is the state)."""
        return self(x, context)

    # -- checks --------------------------------------------------------------------------
    def _where(self, bad: tuple) -> str:
        names = ("batch", "channel") if len(bad) == 3 else ("batch",)
        return ", ".join([f"{n} {i}" for n, i in zip(names, bad[:-1])] + [f"sample {bad[-1]}"])

    def _check_input(self, x, fresh: bool = False) -> None:
        """Refuse a block the layer cannot take (:class:`RtamtInputError`, nothing run):
        not a float tensor, another shape, empty, non-finite or beyond the input limit,
        and, as a stream's first block (``fresh``: no state given), a ``(N, 1)`` column
        that is one channel in (frames, channels) layout rather than ``N`` streams (as
        the models refuse it, :func:`~rtamt.engine.contract.check_time_last`)."""
        if getattr(x, "dtype", None) not in _FLOAT_T:
            raise RtamtInputError(
                f"{self.name}: expected a torch.float32 or torch.float64 tensor, got "
                f"{type(x).__name__} of dtype {getattr(x, 'dtype', None)}")
        if x.is_meta:
            raise RtamtInputError(f"{self.name}: the input is on the meta device (no data)")
        shape = "(batch, T)" if self.in_rank == 2 else f"(batch, {self.n_in}, T)"
        if x.ndim != self.in_rank or (self.in_rank == 3 and x.shape[1] != self.n_in):
            raise RtamtInputError(f"{self.name}: expected shape {shape}, got {tuple(x.shape)}")
        if self.in_rank == 2:
            check_time_last(x, self.name, fresh, "with a state of that many streams "
                            "(layer.initial_state(N))")
        if x.shape[0] == 0 or x.shape[-1] == 0:
            raise RtamtInputError(f"{self.name}: empty block {tuple(x.shape)}")
        if self.on_device:
            if x.device != self.device:
                raise RtamtInputError(
                    f"{self.name}: the input is on {x.device}, the layer runs its Triton "
                    f"kernels on {self.device} (move the input there, or the layer: .to())")
            # on the block's device: one reduction, one boolean read back; the block goes
            # to the host only to name the offending value of a refused block
            xd, limit = x.detach(), self.input_limit
            ok = torch.isfinite(xd).all() if limit == math.inf else (xd.abs() <= limit).all()
            if bool(ok):
                return
        reject_nonfinite(_autograd.host(x), lambda: self.name, self._where,
                         limit=self.input_limit, limit_text=self._limit_text)

    def _check_state(self, state, x: torch.Tensor) -> None:
        who = self.name
        if not isinstance(state, dict):
            raise RtamtInputError(f"{who}: expected a state dict, got {type(state).__name__}")
        B = x.shape[0]
        np_dt = np_dtype(x.dtype)
        ref = self._shapes.get((B, np_dt))
        if ref is None:
            ref = self._shapes[(B, np_dt)] = {
                k: (tuple(v.shape), torch.from_numpy(v[:0]).dtype)
                for k, v in self._initial_np(B, np_dt).items()}
        if set(state) != set(ref) | {DESIGN_KEY}:
            raise RtamtInputError(
                f"{who}: the state has entries {sorted(state)[:6]}, this layer's are "
                f"{sorted(set(ref) | {DESIGN_KEY})[:6]} (a state of another layer?)")
        for k, v in state.items():
            if getattr(v, "device", None) != x.device:
                raise RtamtInputError(
                    f"{who}: state entry {k!r} is on {getattr(v, 'device', None)} "
                    f"({type(v).__name__}), expected a tensor on the input's device "
                    f"{x.device}")
        tag = state[DESIGN_KEY]
        if tag.dtype != torch.int64:
            raise RtamtInputError(
                f"{who}: state entry {DESIGN_KEY!r} has dtype {tag.dtype}, expected "
                "torch.int64 (convert only the floating-point entries of a state)")
        if tuple(tag.shape) != (B, 2):
            raise RtamtInputError(
                f"{who}: state entry {DESIGN_KEY!r} has shape "
                f"{tuple(tag.shape)}, expected ({B}, 2) for a batch of {B}")
        if not bool((tag[:, 0] == self._tag).all()):
            raise RtamtInputError(
                f"{who}: the state was made by another layer or design (another model, "
                "configuration, sample rate or coefficients)")
        size = torch.finfo(x.dtype).bits // 8
        if not bool((tag[:, 1] == size).all()):
            raise RtamtInputError(
                f"{who}: dtype change: the state belongs to a stream of "
                f"{int(tag[0, 1]) * 8}-bit floats, the input is {x.dtype}; start a new "
                "state (initial_state) to change dtype")
        for k, (shape, dt) in ref.items():
            v = state[k]
            if tuple(v.shape) != shape or v.dtype != dt:
                raise RtamtInputError(
                    f"{who}: state entry {k!r} has shape {tuple(v.shape)} {v.dtype}, "
                    f"expected {shape} {dt} (other batch size or layer?)")
            if v.is_floating_point() and not bool(torch.isfinite(v).all()):
                bad = tuple(int(i) for i in torch.nonzero(~torch.isfinite(v))[0])
                raise RtamtInputError(
                    f"{who}: state entry {k!r} holds a non-finite value at batch {bad[0]}, "
                    f"index {bad[1:]}; state refused")
