"""The :mod:`rtamt.nn` layers: rtamt's streaming models and stages as ``torch.nn.Module``s.

* :class:`ChainLayer` is the one layer class: it runs any chain of rtamt stages (a model of
  :mod:`rtamt.models`, the sample stages of a :class:`rtamt.engine.stage.Chain` or the frame
  stages of a loudness model, or a list of stages) with the state in and out of every
  call, and decides per stage whether a gradient can pass it.
* The model layers (:class:`Dau1997`, :class:`King2019`, :class:`Osses2021`,
  :class:`Paulick2024`, :class:`Glasberg2002`, :class:`Moore2016`; :data:`LAYERS` by the
  keys of :data:`rtamt.models.MODELS`), :class:`StageLayer` and the stage layers
  (:class:`Gammatone`, :class:`IHCEnvelope`, :class:`AdaptLoop`, :class:`ModFilterbank`,
  ...) are :class:`ChainLayer`s that only construct their chain: with the same arguments
  as the streaming model or the stage's params.

The forward pass runs the streaming kernels themselves, so a layer's output equals the
streaming model's bit for bit, and any block partition equals one call.  A stage has
gradients when its class declares a gradient rule (``Stage.grad_rule()``, beside the
stage); a gradient requested through a stage without one is refused, naming the stage
(docs/nn.md lists the layers and their gradients).
"""
from __future__ import annotations

import copy
import math

import numpy as np
import torch

from .. import models as streaming_models
from ..adaptation import adaptloop, highpass
from ..ear.calibration import InputCalibration
from ..engine.backend import RtamtBackendError, resolve
from ..engine.contract import RtamtInputError
from ..engine.stage import FRAMES, SAMPLES, Chain, Stage
from ..filterbank import gammatone
from ..ihc import envelope
from ..modulation import king2019, modfb
from ..nonlinear import compression
from ._autograd import param_np
from ._base import FramePart, Part, StreamLayer, np_dtype, time_last
from ._frames import frame_rows, run_frames

__all__ = ["ChainLayer", "StageLayer", "Dau1997", "King2019", "Osses2021", "Paulick2024",
           "Glasberg2002", "Moore2016", "Gammatone", "IHCEnvelope", "AdaptLoop",
           "ModFilterbank", "KingModFilterbank", "AdaptHighpass", "BrokenStick",
           "PowerCompression", "LAYERS"]

#: the stream layouts of a frame model by rows of a stream (its ``process`` mode)
_FRAME_MODES = {1: "mono", 2: "stereo"}


def _calibration(model, stages: list):
    """The chain's calibration stage: the model's (``model.calibration``, its
    ``stages[0]``; the loudness models may hold it beside their stages), or a first stage
    that is an :class:`~rtamt.ear.calibration.InputCalibration`; ``None`` without one."""
    cal = getattr(model, "calibration", None)
    if cal is None and isinstance(stages[0], InputCalibration):
        cal = stages[0]
    return cal


class ChainLayer(StreamLayer):
    """Any chain of rtamt stages as a layer: ``y, state = layer(x, state=None)``.

    ``chain``: a model (an object with ``stages``: a :class:`~rtamt.engine.stage.Chain`
    such as :class:`rtamt.models.Dau1997`, or a loudness model, :class:`rtamt.models.
    Glasberg2002` / :class:`rtamt.models.Moore2016`) or a sequence of
    :class:`~rtamt.engine.stage.Stage` objects.  The stages' designs are used, never
    their own state: the layer's state is the stages' states, batch-first tensors named
    ``'<stage>.<key>'``.

    * **Calibration.**  The chain's calibration stage (``model.calibration``, a model's
      ``stages[0]``; or a first stage that is an
      :class:`~rtamt.ear.calibration.InputCalibration`) gives the input gain and the
      physical input limit (:attr:`input_limit`, read from the stage at every call); it is
      not one of the layer's outputs.  A sample chain applies the gain itself, in the
      input's dtype (differentiable); a frame model's ``process`` applies it.
    * **Sample stages** (``flow`` samples: the modulation models, the stage layers) run one
      by one, time-major between them.  Input ``(batch, T)``, or ``(batch, n_in, T)``
      when the first stage takes channels; output time-last ``(batch, ..., T)``: the
      stage named ``output``, default the last; ``output='all'``: ``{stage name:
      output}``.
    * **Frame stages** (the loudness models) run through the model's pure
      ``model.process(coeffs, state, rows, lead, mode)``, with the state nested per stage.
      ``n_in``: rows of a stream, 1 (mono, input ``(batch, T)``) or 2 (stereo, left and
      right, input ``(batch, 2, T)``: :class:`Moore2016`).  Output the frames completed
      in the block: ``output``, one of ``model.outputs`` (default the first,
      ``'stl'``), ``(batch, F)``; ``output='all'``: every output (``frame_time``
      ``(F,)``).  With a gradient wanted the frame stages run in one
      ``torch.autograd.Function`` with their rules (:mod:`rtamt.nn._frames`).

    **Gradients, per stage.**  A stage whose class declares a gradient rule
    (``stage.grad_rule()`` returns a :class:`rtamt.engine.grad.StageGrad`) runs as a
    ``torch.autograd.Function`` (its kernel forward, its adjoint backward) from the
    first stage a gradient is requested through: the first stage when the input requires
    a gradient, else the first whose learnable parameter or incoming state does.  Every
    stage from there to the last must have a rule: else the call raises
    :class:`~rtamt.engine.contract.RtamtInputError` naming the first that has none, before
    any stage runs.  Stages before it, and every stage under ``torch.no_grad()``, run
    their kernels alone (nothing recorded): forward-only use works for every chain.

    ``learnable``: ``True`` (every stage that has learnable parameters) or the names of
    the stages whose parameters become ``torch.nn.Parameter``s (``self.theta[name]``, a
    float64 vector in the stage's unconstrained parametrisation, 0 = the design;
    :meth:`learned` gives the physical values); each stage's rule defines its
    parametrisation.  A learnable stage followed by a stage without a rule is refused
    here (no gradient would reach it), with the same message.

    **On the device.**  Moving the layer to a CUDA device (``.to('cuda')``, ``.cuda()``)
    binds, once, every stage's Triton forward twins and its rule's Triton adjoints
    (:attr:`backend` ``'triton'``): blocks, states and gradients then stay on the GPU,
    the input check included.  A stage without Triton adjoints for its rule (or without
    Triton twins) runs on the host as on the CPU (:attr:`host_stages` names them).
    ``.to('cpu')`` binds the numba kernels again; ``.to('cpu', backend='triton')`` runs
    the Triton kernels in Triton's interpreter (``TRITON_INTERPRET=1``, how the tests
    check them without a GPU).  A frame layer (the loudness models) binds all or nothing:
    a copy of its model bound to the Triton twins and every rule's Triton adjoints
    (:mod:`rtamt.nn._frames`), or, when a stage has no device path (Moore2016's
    ``config='tvl2018'``), the host (an explicit ``backend='triton'`` then raises).
    """

    #: a frame layer's copy of its model bound to the Triton twins (``None`` on the host)
    _dev_model = None
    #: the kernels the layer's stages run: ``'numba'`` (the host) or ``'triton'``
    #: (:attr:`device`), bound when the layer is moved (:meth:`to`)
    backend = "numba"

    def __init__(self, chain, *, name: str | None = None, n_in: int = 1,
                 output: str | None = None, learnable=()):
        model = chain if hasattr(chain, "stages") else None
        stages = list(chain.stages if model is not None else chain)
        name = str(name or getattr(model, "name", None) or "chain")
        if not stages:
            raise ValueError(f"{name}: no stages")
        cal = _calibration(model, stages)
        body = [s for s in stages if s is not cal]
        if not body:
            raise ValueError(f"{name}: no stage after the calibration")
        n_in = int(n_in)
        frames = any(getattr(s, "flow_out", SAMPLES) == FRAMES for s in stages)
        if frames:
            if model is None:
                raise ValueError(f"{name}: frame stages run in their model (pass the model: "
                                 "its process() turns them into the outputs)")
            if n_in not in _FRAME_MODES:
                raise ValueError(f"{name}: n_in (rows of a stream) must be 1 (mono) or 2 "
                                 f"(stereo), got {n_in}")
            parts = [FramePart(s, n_in) for s in body]
            outputs = tuple(model.outputs)
        else:
            parts, n = [], n_in
            for st in body:
                p = Part(st, n)
                parts.append(p)
                n = p.n_out
            outputs = tuple(p.name for p in parts)
        if output not in (None, "all") and output not in outputs:
            raise ValueError(f"{name}: output must be None, 'all' or one of {list(outputs)}")
        gain = 1.0 if cal is None else float(cal.gain)
        super().__init__(name, (gain, n_in) + tuple(p.fingerprint for p in parts))
        #: the stages run through the model's ``process`` (frame stages), or one by one
        self.frames = frames
        self.model, self.calibration, self.parts = model, cal, parts
        self.n_in, self.gain, self.outputs, self.output = n_in, gain, outputs, output
        self._out = output or (outputs[0] if self.frames else outputs[-1])
        self.in_rank = (2 if n_in == 1 else 3) if self.frames else (
            2 if parts[0].cls.in_kind == "signal" else 3)
        self._keys = [tuple(f"{p.name}.{k}" for k in p.keys) for p in parts]
        self.theta = torch.nn.ParameterDict()
        names = [p.name for p in parts]
        can_learn = [p.name for p in parts if p.grad is not None and p.grad.n_params]
        for s in (can_learn if learnable is True else learnable or ()):
            if s not in names:
                raise ValueError(f"{name}: learnable names an unknown stage {s!r}; the "
                                 f"stages are {names}")
            p = self[s]
            if p.grad is None or p.grad.n_params == 0:
                raise ValueError(f"{name}: stage {p.name!r} has no learnable parameters "
                                 f"(the stages that have: {can_learn})")
            self._check_path(names.index(s), self._unreachable(s, can_learn))
            self.theta[p.name] = torch.nn.Parameter(
                torch.zeros(p.grad.n_params, dtype=torch.float64))

    # -- the device -------------------------------------------------------------------
    def to(self, *args, backend: str | None = None, **kwargs):
        """``torch.nn.Module.to``; the kernels of the layer's device are bound when it
        changes (:meth:`bind_kernels`).  ``backend``: ``'triton'`` or ``'numba'``, bound
        explicitly (``'triton'`` on the CPU: Triton's interpreter)."""
        out = super().to(*args, **kwargs)
        if backend is not None:
            self.bind_kernels(backend)
        return out

    def _apply(self, fn, *args, **kwargs):
        before = self.device
        out = super()._apply(fn, *args, **kwargs)
        if self.device != before:
            self.bind_kernels(None, implicit=True)
        return out

    def bind_kernels(self, backend: str | None = None, implicit: bool = False) -> None:
        """Bind every stage's kernels for ``backend`` on the layer's device, once
        (:func:`rtamt.engine.backend.resolve`: ``None`` is ``'triton'`` on a GPU, else
        ``'numba'``).  Moved implicitly (``implicit``: ``.to(device)``, ``.cuda()``), a
        device whose Triton kernels cannot run here (no triton package) keeps the numba
        kernels on the host; an explicit ``backend`` raises
        :class:`~rtamt.engine.backend.RtamtBackendError` saying what is missing."""
        try:
            backend, dev = resolve(backend, self.device)
        except RtamtBackendError:
            if not implicit:
                raise
            backend, dev = "numba", None
        if self.frames:
            self._bind_frames(backend, dev, implicit)
            return
        for p in self.parts:
            p.bind(backend, dev)
        self.backend = backend
        self.on_device = backend == "triton"

    def _bind_frames(self, backend: str, dev, implicit: bool) -> None:
        """:meth:`bind_kernels` of a frame layer: on ``'triton'`` a copy of the model bound
        to the Triton twins on ``dev`` (:attr:`_dev_model`) runs the block and every rule
        its Triton adjoints, all or nothing; a layer with a stage that has no device path
        (Moore2016's ``config='tvl2018'``: the component floor has no adjoint kernel)
        stays on the host when moved implicitly, and refuses an explicit
        ``backend='triton'``."""
        if backend == "triton":
            cal = self.calibration
            miss = [p.name for p in self.parts if not p.device_ok()]
            if cal is not None and not cal.triton_ready:
                miss.insert(0, cal.name)
            if miss:
                if not implicit:
                    raise RtamtBackendError(
                        f"{self.name}: stage(s) {miss} have no Triton path for gradients "
                        "(forward twins and device adjoints); bind backend='numba' (the "
                        "default)")
                backend = "numba"
        if backend == "triton":
            dm = copy.deepcopy(self.model)
            dm.to(dev, backend="triton")
            stages = {s.name: s for s in dm.stages}
            self._dev_model = dm
        else:
            stages, self._dev_model = {p.name: p.stage for p in self.parts}, None
        for p in self.parts:
            p.bind(backend, dev, stages[p.name])
        self.backend = backend
        self.on_device = backend == "triton"

    @property
    def host_stages(self) -> tuple:
        """Names of the stages that run on the host although the layer is Triton-bound
        (no Triton twins, or a rule without Triton adjoints); ``()`` on the numba
        backend."""
        if self.backend != "triton":
            return ()
        return tuple(p.name for p in self.parts if not p.on_device)

    def __getitem__(self, name: str):
        for p in self.parts:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def input_limit(self) -> float:
        """Largest accepted ``|sample|`` of the input: the calibration stage's physical
        limit (``inf`` without one)."""
        return math.inf if self.calibration is None else float(self.calibration.input_limit)

    def _limit_text(self) -> str:
        return "" if self.calibration is None else self.calibration.limit_text()

    def learned(self, name: str) -> dict:
        """The physical values (numpy arrays, by name; e.g. ``{"tau": ...}`` in s,
        ``{"fc": ..., "bandwidth_factor": ...}``, ``{"mfc": ..., "Q": ...}``,
        ``{"knee": ..., "exponent": ...}``) of learnable stage ``name`` for the current
        ``self.theta[name]``."""
        return self[name].grad.learned(param_np(self.theta[name]))

    def tau(self, name: str = "adaptloop") -> torch.Tensor:
        """Time constants (s) of adaptation stage ``name``: the design's, or, when it is
        learnable, those of ``theta`` (its rule's weights, a tensor that carries the
        gradient)."""
        part = self[name]
        if name not in self.theta:
            return torch.as_tensor(part.coeffs.tau, device=self.device)
        return part.grad.weights(self.theta[name], torch).tau

    # -- gradients, per stage ------------------------------------------------------------
    def _check_path(self, start: int, tail: str) -> None:
        """Raise :class:`RtamtInputError` naming the first stage from ``start`` on that a
        gradient cannot pass (``tail`` ends the message)."""
        for p in self.parts[start:]:
            if p.grad is None:
                raise RtamtInputError(f"{self.name}: stage {p.name!r} ({p.cls.__name__}) "
                                      f"{p.why} (forward-only in rtamt.nn){tail}")

    def _unreachable(self, stage: str, can_learn: list) -> str:
        """The end of the message that refuses learnable ``stage``."""
        names = [p.name for p in self.parts]
        last = max([j for j, p in enumerate(self.parts) if p.grad is None], default=-1)
        ok = [s for s in can_learn if names.index(s) > last]
        return (f"; no gradient would reach the learnable parameters of {stage!r} before "
                f"it: learn only stages after it (learnable={ok})")

    def _grad_start(self, x: torch.Tensor, state: dict):
        """The index of the first stage a gradient is requested through (the input, a
        learnable parameter or an incoming state entry that requires one, grad mode on),
        ``None`` when none is; raises if a stage from there on has no gradient rule."""
        if not torch.is_grad_enabled():
            return None
        theta = self.theta
        start = 0 if x.requires_grad else next(
            (i for i, (p, keys) in enumerate(zip(self.parts, self._keys))
             if (p.name in theta and theta[p.name].requires_grad)
             or any(state[k].requires_grad for k in keys)), None)
        if start is not None:
            self._check_path(start, "; run the layer under torch.no_grad(), or detach what "
                             "requires a gradient before that stage (see docs/nn.md)")
        return start

    # -- one block -------------------------------------------------------------------------
    def _initial_np(self, batch, dtype):
        return {f"{p.name}.{k}": v for p in self.parts for k, v in p.initial(batch, dtype).items()}

    def _run(self, x, state, start):
        for k, th in self.theta.items():
            if not bool(torch.isfinite(th).all()):
                raise RtamtInputError(
                    f"{self.name}: learnable parameter theta[{k!r}] holds a non-finite value "
                    f"at index {int(torch.nonzero(~torch.isfinite(th))[0, 0])} (a diverged "
                    "optimiser step?); block rejected, state unchanged")
        if self.frames:
            if start is not None or len(self.theta):    # gradients or learnt values
                return run_frames(self, x, state, start)
            return self._run_frames(x, state)
        y = x if self.in_rank == 2 else x.permute(0, 2, 1)
        y = y.contiguous()
        if self.gain != 1.0:
            y = y * torch.tensor(self.gain, dtype=x.dtype, device=x.device)
        outs, new = {}, {}
        for i, (p, keys) in enumerate(zip(self.parts, self._keys)):
            th = self.theta[p.name] if p.name in self.theta else None
            y, ns = p.run(y, {k: state[f] for k, f in zip(p.keys, keys)}, th,
                          start is not None and i >= start)
            outs[p.name] = y
            new.update({f: ns[k] for k, f in zip(p.keys, keys)})
        if self.output == "all":
            return {k: time_last(v) for k, v in outs.items()}, new
        return time_last(outs[self._out]), new

    def _run_frames(self, x, state):
        """One block through a frame model's pure ``process`` (no gradient wanted)."""
        m, B = (self._dev_model if self.on_device else self.model), x.shape[0]
        st = {s.name: {} for s in m.stages}        # nested per stage; the calibration: {}
        for p, keys in zip(self.parts, self._keys):
            st[p.name] = p.to_model({k: state[f] for k, f in zip(p.keys, keys)}, B)
        rows = frame_rows(self, x)
        lead = (B,) if self.n_in == 1 else (B, self.n_in)
        out = m.process(m.coeffs, st, rows, lead, _FRAME_MODES[self.n_in])
        dev, dt = x.device, np_dtype(x.dtype)
        ys = {k: (v.to(x.dtype).contiguous() if self.on_device and k != "frame_time" else
                  torch.from_numpy(np.asarray(v) if k == "frame_time" else
                                   np.ascontiguousarray(v).astype(dt)).to(dev))
              for k, v in out.items()}
        new = {f"{p.name}.{k}": v for p in self.parts
               for k, v in p.from_model(st[p.name], B, dev).items()}
        return (ys if self.output == "all" else ys[self._out]), new


class StageLayer(ChainLayer):
    """One stage as a layer (``n_in``: channels of a channel stage's input, rank 3); a
    :class:`ChainLayer` of ``[stage]``."""

    def __init__(self, stage: Stage, n_in: int = 1, learnable: bool = False):
        super().__init__([stage], name=stage.name, n_in=n_in,
                         learnable=(stage.name,) if learnable else ())


class _ModelLayer(ChainLayer):
    """A model of :mod:`rtamt.models` (``model_cls``) as a :class:`ChainLayer`; the
    constructor takes the model's arguments, plus ``output`` and ``learnable``
    (``n_rows``: rows of a stream's input, 2 for Moore2016's ears)."""

    model_cls: type = Chain
    n_rows = 1

    def __init__(self, fs: float, *args, output: str | None = None, learnable=False,
                 **kwargs):
        super().__init__(self.model_cls(fs, *args, **kwargs), n_in=self.n_rows,
                         output=output, learnable=learnable or ())


class Dau1997(_ModelLayer):
    """:class:`rtamt.models.Dau1997` as a layer: gradients through every stage."""

    model_cls = streaming_models.Dau1997


class Osses2021(_ModelLayer):
    """:class:`rtamt.models.Osses2021` as a layer: gradients through every stage."""

    model_cls = streaming_models.Osses2021


class King2019(_ModelLayer):
    """:class:`rtamt.models.King2019` as a layer: gradients through every stage (input and
    state; learnable gammatone, compression and modulation-bank parameters)."""

    model_cls = streaming_models.King2019


class Paulick2024(_ModelLayer):
    """:class:`rtamt.models.Paulick2024` as a layer: gradients through every stage (ear
    FIRs, DRNL, IHC, adaptation loops, resampler, modulation bank) w.r.t. the input, the
    carried state and, with ``learnable=True``, the adaptation time constants and the
    modulation filterbank's parameters."""

    model_cls = streaming_models.Paulick2024


class Glasberg2002(_ModelLayer):
    """:class:`rtamt.models.Glasberg2002` as a layer: ``(batch, T)`` -> ``(batch, F)``
    short-term loudness (sone) by default; gradients through every frame stage w.r.t. the
    input, the carried state and, with ``learnable=True``, ``C`` and the STL/LTL
    integrators' time constants (:mod:`rtamt.nn._frames`)."""

    model_cls = streaming_models.Glasberg2002


class Moore2016(_ModelLayer):
    """:class:`rtamt.models.Moore2016` as a layer: ``(batch, 2, T)`` (left, right) ->
    ``(batch, F)`` short-term loudness (sone) by default.  A ``(T,)`` diotic signal is
    given as ``(batch, 2, T)`` with both rows equal.  Gradients through every frame stage
    (both configurations) w.r.t. the input, the carried state and, with
    ``learnable=True``, ``C``, the short-term AGC's time constants, the inhibition
    exponent and the long-term integrator's time constants."""

    model_cls = streaming_models.Moore2016
    n_rows = 2


# ---------------------------------------------------------------------------- stages
def _stage_layer(stage_cls, params_cls, doc: str):
    """A :class:`StageLayer` class for ``stage_cls`` built from ``params_cls`` keywords;
    a channel stage takes ``channels``, or one per auditory centre frequency when its
    parameters list them (``fc``, the modulation banks)."""

    class _Layer(StageLayer):
        def __init__(self, fs: float, channels: int | None = None, *, learnable=False,
                     **kwargs):
            params = params_cls(fs=fs, **kwargs)
            stage = stage_cls(params)
            if stage_cls.in_kind == "signal":
                channels = 1
            elif channels is None:
                if getattr(params, "fc", None) is None:
                    raise TypeError(f"{stage_cls.__name__} layer needs channels=")
                channels = len(params.fc)
            super().__init__(stage, int(channels), learnable=learnable)

    _Layer.__name__ = _Layer.__qualname__ = stage_cls.__name__
    _Layer.__doc__ = doc
    return _Layer


Gammatone = _stage_layer(
    gammatone.Gammatone, gammatone.GammatoneParams,
    "Gammatone filterbank (:mod:`rtamt.filterbank.gammatone`): ``(batch, T)`` -> "
    "``(batch, C, T)``; differentiable.  ``Gammatone(fs, **GammatoneParams)``.")
IHCEnvelope = _stage_layer(
    envelope.IHCEnvelope, envelope.IHCEnvelopeParams,
    "Inner-hair-cell envelope (:mod:`rtamt.ihc.envelope`): ``(batch, C, T)`` -> same; "
    "differentiable.  ``IHCEnvelope(fs, channels, **IHCEnvelopeParams)``.")
AdaptLoop = _stage_layer(
    adaptloop.AdaptLoop, adaptloop.AdaptLoopParams,
    "Adaptation loops (:mod:`rtamt.adaptation.adaptloop`): ``(batch, C, T)`` -> same; "
    "differentiable, with ``learnable=True`` time constants (``theta``: log of tau / "
    "tau0).  ``AdaptLoop(fs, channels, **AdaptLoopParams)``.")
ModFilterbank = _stage_layer(
    modfb.ModFilterbank, modfb.ModFilterbankParams,
    "Modulation filterbank (:mod:`rtamt.modulation.modfb`): ``(batch, C, T)`` -> packed "
    "``(batch, F, T)``; differentiable (learnable mfc and Q: ``efilt``).  "
    "``ModFilterbank(fs, fc=(...), **ModFilterbankParams)``.")
KingModFilterbank = _stage_layer(
    king2019.KingModFilterbank, king2019.KingModFilterbankParams,
    "King et al. (2019) modulation filterbank (:mod:`rtamt.modulation.king2019`): "
    "``(batch, C, T)`` -> packed ``(batch, M*C, T)``; differentiable (learnable mfc and "
    "Q).  "
    "``KingModFilterbank(fs, fc=(...), **KingModFilterbankParams)``.")
AdaptHighpass = _stage_layer(
    highpass.AdaptHighpass, highpass.AdaptHighpassParams,
    "King2019's adaptation high-pass (:mod:`rtamt.adaptation.highpass`): ``(batch, C, T)`` "
    "-> same; differentiable.  ``AdaptHighpass(fs, channels, **AdaptHighpassParams)``.")


def _compression(cls):
    def make(fs: float | None = None, channels: int = 1, *, learnable: bool = False,
             **kwargs):
        return StageLayer(cls(compression.CompressionParams(**kwargs)), int(channels),
                          learnable=learnable)

    make.__name__ = cls.__name__
    make.__doc__ = (f"{cls.__name__} compression (:mod:`rtamt.nonlinear.compression`) as a "
                    "differentiable layer: ``(batch, channels, T)`` -> same.")
    return make


BrokenStick = _compression(compression.BrokenStick)
PowerCompression = _compression(compression.PowerCompression)


#: a layer class for every model of :data:`rtamt.models.MODELS`, by the same key
LAYERS = {"dau1997": Dau1997, "glasberg2002": Glasberg2002, "king2019": King2019,
          "moore2016": Moore2016, "osses2021": Osses2021, "paulick2024": Paulick2024}
