"""The frame stages of the time-varying loudness models, and what they share.

The loudness models (:class:`rtamt.models.Glasberg2002`, :class:`rtamt.models.Moore2016`)
analyse their input in frames (1 ms apart), not sample by sample, so their stages after
the first work on frames.  A frame stage is a :class:`rtamt.engine.stage.Stage` whose
declared flow (``flow_in``, ``flow_out``) is :data:`~rtamt.engine.stage.FRAMES`; it
follows the stage contract in everything but the shape of what flows:

* ``Params`` (a frozen dataclass), ``design(params) -> coeffs``, done once;
* ``init_state(R) -> dict`` of float64 arrays whose first axis is the row (one row per
  signal, a stereo stream has two), so that states stack and split by stream (a model's
  snapshot nests each stage's own, :mod:`rtamt.loudness.tvl`); ``shared_state`` names the
  keys every row shares (the frame clock ``n``);
* ``process_tm(fr, state)`` (named as a stage's per-block call): advances ``state`` in
  place over the frames of one block and adds its outputs to ``fr``, the block's frames
  by name (``'P'`` component powers, ``'E'`` excitation, ``'N'`` specific loudness, ...;
  ``fr['R']`` rows, ``fr['F']`` frames), in whatever layout its kernels want (``(R F,
  K)`` frame rows, ``(F, R)`` for the integrators); it calls only ``self.kern.<kernel>``
  and array operations that numpy arrays and torch tensors share, never tests the
  array's type;
* ``kernels = Kernels(numba=..., triton=<loader>)``, declared in the stage's module with
  its Triton twins in ``<module>_triton.py``; the model's ``to()`` (the one of
  :class:`rtamt.engine.stage.StageGroup`) binds them once, and :attr:`FrameStage.kcoeffs`
  holds the coefficients as the bound kernels take them.

The first stage, :class:`rtamt.loudness.spectrum.Spectrum`, produces the frames: it owns
the frame clock (hop, analysis length, samples consumed, the input history) and turns
sample blocks ``(R, T)`` into the frames completed in them (``flow_in`` samples,
``flow_out`` frames; a chain checks that each stage reads frames written before it,
:func:`rtamt.engine.stage.check_flows`).  Every frame computation is a
fixed function of the state and that frame's input, so any block partition gives the
same frames as one call (``tests/loudness/test_loudness_stages.py``).

A frame stage is also a streaming object of its own (:class:`rtamt.engine.contract.
Streaming`), on frames: ``stage(fr)`` (= ``stage.process_all(fr)``) advances the stage's
own state over the frames ``fr`` (its inputs, :attr:`FrameStage.reads`, with ``'R'`` and
``'F'``; the spectrum reads ``'rows'``) and returns its outputs (:attr:`FrameStage.outputs`);
its snapshot holds its state arrays with one stream per row (an ear pair for the binaural
stage), so states stack and split by stream; the models nest exactly these snapshots.
"""
from __future__ import annotations

import copy

import numpy as np

from ..engine import backend as _B
from ..engine import contract as _C
from ..engine.contract import RtamtInputError
from ..engine.stage import FRAMES, Stage

__all__ = ["FrameStage", "rows_stream", "state_on"]


class FrameStage(Stage):
    """A :class:`~rtamt.engine.stage.Stage` whose flow is frames (see the module
    docstring): the base class gives the subclass hook, the constructor, ``to()`` and the
    kernel binding, the design fingerprint, ``state_dict`` / ``load_state_dict`` and
    stack/split; this class says what differs when frames flow: the state is per row
    (:meth:`init_state` ``(R)``), ``process_tm(fr, state)`` works on the block's frames by
    name, and ``kcoeffs`` are the coefficients as the bound kernels take them."""

    name = "frame_stage"
    flow_in = FRAMES
    flow_out = FRAMES
    #: the frames ``process_tm`` reads from ``fr`` (besides ``'R'``, ``'F'``) and writes
    reads: tuple = ()
    writes: tuple = ()
    #: rows of one stream in the stage's own snapshot (the binaural stage: an ear pair)
    rows_per_stream = 1

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        #: the coefficients as the bound kernels take them (:attr:`kcoeffs`)
        self.kc = self.coeffs

    @staticmethod
    def design(params):  # pragma: no cover - abstract
        raise NotImplementedError

    def init_state(self, R: int) -> dict:
        """The state of ``R`` rows that have heard nothing (numpy float64; none here)."""
        return {}

    def process_tm(self, fr: dict, state: dict) -> None:  # pragma: no cover - abstract
        """Advance ``state`` over the frames of one block and add the outputs to ``fr``."""
        raise NotImplementedError

    def _set_backend(self, backend: str, device, kern=False) -> None:
        """:meth:`Stage._set_backend`, and the coefficients made once as the bound
        kernels take them (:attr:`kcoeffs`)."""
        super()._set_backend(backend, device, kern)
        k = self.__dict__.get("kern")
        self.kc = self.coeffs if k is None else _on_backend(self.coeffs, k.coef)

    def _state_on(self, st: dict, backend: str, device) -> dict:
        return state_on(st, backend, device)

    @property
    def kcoeffs(self):
        """:attr:`coeffs` with every array as the bound kernels take it (``kern.coef``: the
        arrays themselves on numba, cached float64 tensors on the device on Triton), made
        once per binding: the per-block code passes no array through ``kern.coef``."""
        return self.kc

    # ------------------------------------------------------------------ rows
    def _start(self, R: int, rows_per_stream: int | None = None) -> None:
        """The initial state of ``R`` rows, ``rows_per_stream`` rows a stream (default
        :attr:`rows_per_stream`; a model sets its layout's), on the stage's backend."""
        rps = self.rows_per_stream if rows_per_stream is None else rows_per_stream
        if R % rps:
            rps = R                                  # a diotic row of the binaural stage
        self._state = self._state_on(self.init_state(R), self.backend, self.device)
        self._meta = (R, rps, np.dtype(np.float64))

    def _stream_meta(self):
        if self._meta is None:
            return None
        R, rps, dt = self._meta
        return rows_stream(R, rps)

    def _meta_from(self, st: dict) -> tuple:
        try:
            rps = int(st["rows"])
            R = (1 if st["batch"] is None else int(st["batch"])) * rps
        except (KeyError, TypeError, ValueError):
            raise RtamtInputError(f"{self.name}: malformed stream entry {st!r}") from None
        if R < 1:
            raise RtamtInputError(f"{self.name}: snapshot of {R} rows")
        return R, rps, np.dtype(np.float64)

    def _initial_state(self, coeffs, meta: tuple) -> dict:
        return self.init_state(meta[0])

    def load_state_dict(self, sd: dict) -> None:
        """:meth:`Stage.load_state_dict`, after migrating a snapshot of an earlier release
        (:mod:`rtamt.loudness.migrate`)."""
        from .migrate import frame_stage_snapshot

        super().load_state_dict(frame_stage_snapshot(self, sd))

    # ------------------------------------------------------------------ a stream of its own
    @property
    def outputs(self) -> tuple:
        return self.writes

    def output_info(self) -> dict:
        """``{output: {'rate': None, 'channels': None}}`` (frames; the rate is the model's
        frame rate)."""
        return {k: {"rate": None, "channels": None} for k in self.writes}

    def __call__(self, fr: dict) -> dict:
        return self.process_all(fr)

    def process_all(self, fr: dict) -> dict:
        """Advance the stage's own state over the frames ``fr`` (its :attr:`reads`, ``'R'``
        and ``'F'``, in the backend's arrays); returns ``{output: frames}``.  ``fr`` is
        not modified."""
        R = int(fr["R"]) if "R" in fr else int(fr["rows"].shape[0])
        if self._state is None:
            self._start(R)
        elif R != self._meta[0]:
            raise RtamtInputError(
                f"{self.name}: block {self._block}: {R} rows, the stream has {self._meta[0]} "
                "(call reset() first)")
        out = dict(fr)
        self.process_tm(out, self._state)
        self._block += 1
        return {k: out[k] for k in self.writes}

    def prepare(self, x) -> None:  # pragma: no cover - frames come from a model
        raise TypeError(f"{self.name}: a frame stage starts on its first frames")

    @classmethod
    def examples(cls):
        return ()                            # a base class: its subclasses run


def rows_stream(R: int, rows_per_stream: int) -> dict:
    """The ``stream`` entry of a frame stage's snapshot: ``R`` float64 rows,
    ``rows_per_stream`` a stream (``batch`` ``None`` for one stream)."""
    n = R // rows_per_stream
    return _C.stream_meta(None if n == 1 else n, (), np.float64, rows=rows_per_stream)


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
