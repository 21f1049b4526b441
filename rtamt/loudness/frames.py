"""The frame stages of the time-varying loudness models, and what they share.

The loudness models (:class:`rtamt.models.Glasberg2002`, :class:`rtamt.models.Moore2016`)
analyse their input in frames (1 ms apart), not sample by sample, so their stages after
the first work on frames.  A frame stage follows the stage contract of
:mod:`rtamt.engine.stage` in everything but the shape of what flows:

* ``Params`` (a frozen dataclass), ``design(params) -> coeffs``, done once;
* ``init_state(R) -> dict`` of float64 arrays whose first axis is the row (one row per
  signal, a stereo stream has two), so that states stack and split by stream; keys are
  unique across the stages of a model (the model's snapshot is their union, see
  :mod:`rtamt.loudness.tvl`); ``shared_state`` names the keys every row shares (the frame
  clock ``n``);
* ``process_tm(fr, state)`` (named as a stage's per-block call): advances ``state`` in
  place over the frames of one block and adds its outputs to ``fr``, the block's frames
  by name (``'P'`` component powers, ``'E'`` excitation, ``'N'`` specific loudness, ...;
  ``fr['R']`` rows, ``fr['F']`` frames), in whatever layout its kernels want (``(R F,
  K)`` frame rows, ``(F, R)`` for the integrators); it calls only ``self.kern.<kernel>``
  and array operations that numpy arrays and torch tensors share, never tests the
  array's type;
* ``kernels = Kernels(numba=..., triton=<loader>)``, declared in the stage's module with
  its Triton twins in ``<module>_triton.py``; :meth:`FrameStage.bind` (called by the
  model's ``to()``) binds them once.

The first stage, :class:`rtamt.loudness.spectrum.Spectrum`, produces the frames: it owns
the frame clock (hop, analysis length, samples consumed, the input history) and turns
sample blocks ``(R, T)`` into the frames completed in them.  Every frame computation is a
fixed function of the state and that frame's input, so any block partition gives the
same frames as one call (``tests/loudness/test_loudness_stages.py``).

A frame stage is also a streaming object of its own (:class:`rtamt.engine.contract.
Streaming`), on frames: ``stage(fr)`` (= ``stage.process_all(fr)``) advances the stage's
own state over the frames ``fr`` (its inputs, :attr:`FrameStage.reads`, with ``'R'`` and
``'F'``; the spectrum reads ``'rows'``) and returns its outputs (:attr:`FrameStage.outputs`);
its snapshot holds its state arrays with one stream per row (an ear pair for the binaural
stage), so states stack and split by stream.  The models do not use this: they keep the
union of the stages' states.
"""
from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np

from ..engine import backend as _B
from ..engine import contract as _C
from ..engine.contract import Registered, RtamtInputError

__all__ = ["FrameStage", "state_on"]


class FrameStage(Registered):
    """Base of a frame stage (see the module docstring): ``Params``, ``design``,
    ``init_state``, ``process_tm`` and the declared ``kernels``; ``kern`` is the bound set
    (the class's numba set until :meth:`bind` binds another)."""

    name = "frame_stage"
    Params: type = object
    #: the stage's kernels per backend; ``None``: the stage runs array operations only
    #: (the same code on numpy arrays and torch tensors)
    kernels: _B.Kernels | None = None
    kern: _B.NumbaKernels | _B.TritonKernels | None = None
    #: the stage runs on the Triton backend
    triton_ready = False
    #: state keys every row shares (kept once when states are stacked)
    shared_state: tuple = ()
    #: fields the ``Params`` had before, with the value every design used, fed to the
    #: design fingerprint (:meth:`rtamt.engine.stage.Stage.design_identity`)
    former_params: dict = {}
    #: the frames ``process_tm`` reads from ``fr`` (besides ``'R'``, ``'F'``) and writes
    reads: tuple = ()
    writes: tuple = ()
    batchable = True
    input_limit = math.inf
    #: rows of one stream in the stage's own snapshot (the binaural stage: an ear pair)
    rows_per_stream = 1
    backend = "numba"
    device = None

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        decl = cls.__dict__.get("kernels")
        if decl is not None:
            cls.kern = decl.bind("numba")
            if "triton_ready" not in cls.__dict__:
                cls.triton_ready = decl.has_triton

    def __init__(self, params=None, **kwargs):
        if params is None:
            params = self.Params(**kwargs)
        elif kwargs:
            params = dataclasses.replace(params, **kwargs)
        self.params = params
        self.coeffs = self.design(params)
        #: the coefficients as the bound kernels take them (:attr:`kcoeffs`)
        self.kc = self.coeffs
        self._state = None
        self._rows = None
        self._block = 0

    def __repr__(self):
        return f"{type(self).__name__}({self.params!r})"

    @staticmethod
    def design(params):  # pragma: no cover - abstract
        raise NotImplementedError

    def init_state(self, R: int) -> dict:
        """The state of ``R`` rows that have heard nothing (numpy float64; none here)."""
        return {}

    def process_tm(self, fr: dict, state: dict) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def bind(self, backend: str, device=None) -> None:
        """Run on a resolved ``(backend, device)`` (:func:`rtamt.engine.backend.resolve`):
        the kernels bound once, the class's numba set back on ``'numba'``."""
        if backend == "numba" or self.kernels is None:
            self.__dict__.pop("kern", None)
            self.kc = self.coeffs
            return
        if not self.triton_ready:
            raise _B.RtamtBackendError(f"{self.name} has no Triton kernels; use backend='numba'")
        self.kern = self.kernels.bind(backend, device)
        self.kc = _on_backend(self.coeffs, self.kern.coef)

    @property
    def kcoeffs(self):
        """:attr:`coeffs` with every array as the bound kernels take it (``kern.coef``: the
        arrays themselves on numba, cached float64 tensors on the device on Triton), made
        once per binding (:meth:`bind`): the per-block code passes no array through
        ``kern.coef``."""
        return self.kc

    def design_identity(self) -> dict:
        """``{'name', 'fingerprint'}`` of the stage's params and designed coefficients."""
        fp = self.__dict__.get("_fp")
        if fp is None:
            p = self.params
            if self.former_params:
                p = _C.with_former_fields(p, **self.former_params)
            fp = self._fp = _C.fingerprint(p, self.coeffs)
        return {"name": self.name, "fingerprint": fp}

    # ------------------------------------------------------------------ a stream of its own
    @property
    def outputs(self) -> tuple:
        return self.writes

    def output_info(self) -> dict:
        """``{output: {'rate': None, 'channels': None}}`` (frames; the rate is the model's
        frame rate)."""
        return {k: {"rate": None, "channels": None} for k in self.writes}

    def to(self, device=None, *, backend: str | None = None):
        """Run on ``backend`` and ``device`` (:func:`rtamt.engine.backend.resolve`); the
        stage's own state moves along (the frame clock ``n`` stays on the host)."""
        backend, device = _B.resolve(backend, device)
        self.bind(backend, device)
        if self._state is not None:
            self._state = state_on(self._state, backend, device)
        self.backend, self.device = backend, device
        return self

    def __call__(self, fr: dict) -> dict:
        return self.process_all(fr)

    def process_all(self, fr: dict) -> dict:
        """Advance the stage's own state over the frames ``fr`` (its :attr:`reads`, ``'R'``
        and ``'F'``, in the backend's arrays); returns ``{output: frames}``.  ``fr`` is
        not modified."""
        R = int(fr["R"]) if "R" in fr else int(fr["rows"].shape[0])
        if self._state is None:
            self._state = state_on(self.init_state(R), self.backend, self.device)
            self._rows = R
        elif R != self._rows:
            raise RtamtInputError(
                f"{self.name}: block {self._block}: {R} rows, the stream has {self._rows} "
                "(call reset() first)")
        out = dict(fr)
        self.process_tm(out, self._state)
        self._block += 1
        return {k: out[k] for k in self.writes}

    def reset(self) -> None:
        self._state, self._rows, self._block = None, None, 0

    def state_dict(self) -> dict:
        """The stage's own state in the contract's schema: ``stream['batch']`` streams of
        ``stream['rows']`` rows (:attr:`rows_per_stream`)."""
        if self._state is None:
            return _C.header(self, self._block, None, arrays=None)
        R, rps = self._rows, self.rows_per_stream
        rows = rps if R % rps == 0 else R              # a diotic row of the binaural stage
        return _C.header(self, self._block, _C.stream_meta(R // rows, (), np.float64,
                                                           rows=rows),
                         arrays={k: _B.to_numpy(v) for k, v in self._state.items()})

    def load_state_dict(self, sd: dict) -> None:
        _C.check_identity(self.name, sd, self)
        st = sd.get("stream")
        if st is None:
            self.reset()
            self._block = int(sd["block"])
            return
        try:
            R = int(st["batch"]) * int(st["rows"])
        except (KeyError, TypeError, ValueError):
            raise RtamtInputError(f"{self.name}: malformed stream entry {st!r}") from None
        state = _C.check_state_arrays(self.name, sd.get("arrays"), self.init_state(R))
        self._state = state_on(state, self.backend, self.device)
        self._rows, self._block = R, int(sd["block"])

    @classmethod
    def stack_state_dicts(cls, states: list) -> dict:
        return _C.stack_leaves(cls.__name__, states, {}, cls.shared_state)

    @classmethod
    def split_state_dict(cls, state: dict, i: int) -> dict:
        rows = int((state.get("stream") or {}).get("rows", 1))
        out = _C.split_leaf(cls.__name__, state, i, {}, cls.shared_state, rows)
        out["stream"]["batch"] = 1          # one stream
        return out


def _on_backend(obj, coef):
    """``obj`` (coefficients: arrays, dicts, lists, dataclasses, plain objects) with every
    numpy array replaced by ``coef(array)``; containers are new, everything else shared."""
    if isinstance(obj, np.ndarray):
        return coef(obj)
    if isinstance(obj, dict):
        return {k: _on_backend(v, coef) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_on_backend(v, coef) for v in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        new = copy.copy(obj)
        for k, v in vars(obj).items():
            setattr(new, k, _on_backend(v, coef))
        return new
    return obj


def state_on(st: dict, backend: str, device) -> dict:
    """``st`` (numpy or tensors) on ``backend``/``device`` (new arrays, values exact); the
    frame clock ``n`` stays a host numpy array."""
    if backend != "triton":
        return {k: _B.to_numpy(v) for k, v in st.items()}
    import torch

    return {k: (_B.to_numpy(v) if k == "n" else
                torch.from_numpy(np.ascontiguousarray(_B.to_numpy(v))).to(device))
            for k, v in st.items()}
