"""The :mod:`rtamt.nn` layers: rtamt's streaming models and stages as ``torch.nn.Module``s.

* :class:`ChainLayer` runs the stages of an :class:`rtamt.engine.stage.Chain` (the
  modulation models), :class:`StageLayer` one :class:`rtamt.engine.stage.Stage`;
  :class:`LoudnessLayer` a time-varying loudness model (forward only).
* One class per model of :data:`rtamt.models.MODELS` (:class:`Dau1997`, :class:`King2019`,
  :class:`Osses2021`, :class:`Paulick2024`, :class:`Glasberg2002`, :class:`Moore2016`),
  built with the same arguments as the streaming model, and one per stage that makes
  sense alone (:class:`Gammatone`, :class:`IHCEnvelope`, :class:`AdaptLoop`,
  :class:`ModFilterbank`, ...).

The forward pass runs the streaming kernels themselves, so a layer's output equals the
streaming model's bit for bit, and any block partition equals one call.  A stage has
gradients when its class declares a gradient rule (``Stage.grad_rule()``, beside the
stage); docs/nn.md lists them.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import models as streaming_models
from ..adaptation import adaptloop, highpass
from ..ear.calibration import InputCalibration
from ..engine.contract import RtamtInputError
from ..engine.stage import Chain, Stage
from ..filterbank import gammatone
from ..ihc import envelope
from ..modulation import king2019, modfb
from ..nonlinear import compression
from ._autograd import param_np
from ._base import Part, StreamLayer, np_dtype, time_last

__all__ = ["ChainLayer", "StageLayer", "LoudnessLayer", "Dau1997", "King2019", "Osses2021",
           "Paulick2024", "Glasberg2002", "Moore2016", "Gammatone", "IHCEnvelope",
           "AdaptLoop", "ModFilterbank", "KingModFilterbank", "AdaptHighpass", "BrokenStick",
           "PowerCompression", "LAYERS"]


class ChainLayer(StreamLayer):
    """A chain of stages as one layer: input ``(batch, T)`` (or ``(batch, C, T)`` when the
    first stage takes channels), output the last stage's ``(batch, ..., T)``, or with
    ``output='all'`` a dict ``{stage name: output}`` of every stage (time-last).

    ``stages``: the :class:`~rtamt.engine.stage.Stage` objects (their designs are used,
    never their own state).  A first stage that is an
    :class:`~rtamt.ear.calibration.InputCalibration` (a model's ``stages[0]``) gives the
    layer its input gain, applied in the input's dtype, and its physical input limit
    (:attr:`input_limit`, taken when the layer is made); it is not one of the layer's
    outputs.  ``learnable``: ``True`` (every stage that has learnable parameters)
    or the names of the stages whose parameters become
    ``torch.nn.Parameter``s (``self.theta[name]``, a float64 vector in the stage's
    unconstrained parametrisation, 0 = the design; :meth:`learned` gives the physical
    values).  Stages with learnable parameters: the gammatone
    (log centre frequencies, log bandwidth factor), the adaptation loops (log time
    constants), the ``efilt`` modulation bank (log modulation centre frequencies, log Q),
    King2019's modulation bank (centre frequencies bounded below Nyquist, log Q) and the
    compressions (log knee, log exponent); each stage's rule (``grad_rule()``) defines
    its parametrisation.
    """

    def __init__(self, stages, *, name: str = "chain", n_in: int = 1,
                 output: str | None = None, learnable=()):
        stages = list(stages)
        cal = stages[0] if stages and isinstance(stages[0], InputCalibration) else None
        if cal is not None:
            stages = stages[1:]
        gain = 1.0 if cal is None else cal.gain
        parts, n = [], int(n_in)
        for st in stages:
            p = Part(st, n)
            parts.append(p)
            n = p.n_out
        self.parts = parts
        names = [p.name for p in parts]
        if output not in (None, "all") and output not in names:
            raise ValueError(f"{name}: output must be None, 'all' or one of {names}")
        super().__init__(name, tuple(p.fingerprint for p in parts) + (float(gain), n_in))
        self.in_rank = 2 if parts[0].cls.in_kind == "signal" else 3
        self.n_in, self.gain, self.output = int(n_in), float(gain), output
        self.input_limit = float("inf") if cal is None else float(cal.input_limit)
        self._ltext = "" if cal is None else cal.limit_text()
        self.theta = torch.nn.ParameterDict()
        can_learn = [p for p in parts if p.grad is not None and p.grad.n_params]
        if learnable is True:
            learnable = can_learn
        for s in learnable or ():
            if isinstance(s, str) and s not in names:
                raise ValueError(f"{name}: learnable names an unknown stage {s!r}; the "
                                 f"stages are {names}")
            p = self[s] if isinstance(s, str) else s
            if p.grad is None or p.grad.n_params == 0:
                raise ValueError(f"{name}: stage {p.name!r} has no learnable parameters "
                                 f"(the stages that have: {[q.name for q in can_learn]})")
            self.theta[p.name] = torch.nn.Parameter(
                torch.zeros(p.grad.n_params, dtype=torch.float64))

    def __getitem__(self, name: str) -> Part:
        for p in self.parts:
            if p.name == name:
                return p
        raise KeyError(name)

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

    def _limit_text(self) -> str:
        return self._ltext

    def _initial_np(self, batch, dtype):
        return {f"{p.name}.{k}": v for p in self.parts for k, v in p.initial(batch, dtype).items()}

    def _run(self, x, state, need_grad):
        for k, th in self.theta.items():
            if not bool(torch.isfinite(th).all()):
                raise RtamtInputError(
                    f"{self.name}: learnable parameter theta[{k!r}] holds a non-finite value "
                    f"at index {int(torch.nonzero(~torch.isfinite(th))[0, 0])} (a diverged "
                    "optimiser step?); block rejected, state unchanged")
        y = x if self.in_rank == 2 else x.permute(0, 2, 1)
        y = y.contiguous()
        if self.gain != 1.0:
            y = y * torch.tensor(self.gain, dtype=x.dtype, device=x.device)
        outs, new = {}, {}
        for p in self.parts:
            sub = {k: state[f"{p.name}.{k}"] for k in p.keys}
            th = self.theta[p.name] if p.name in self.theta else None
            y, ns = p.run(y, sub, th, need_grad)
            outs[p.name] = y
            new.update({f"{p.name}.{k}": v for k, v in ns.items()})
        if self.output == "all":
            return {k: time_last(v) for k, v in outs.items()}, new
        return time_last(outs[self.output or self.parts[-1].name]), new


class StageLayer(ChainLayer):
    """One stage as a layer (``n_in``: channels of a channel stage's input, rank 3)."""

    def __init__(self, stage: Stage, n_in: int = 1, learnable: bool = False):
        super().__init__([stage], name=stage.name, n_in=n_in,
                         learnable=(stage.name,) if learnable else ())


def _from_model(model: Chain, output=None, learnable=False) -> dict:
    """ChainLayer arguments of a streaming modulation model besides its stages (whose
    first, the calibration, gives the gain and input limit; ``learnable``: ``True`` for
    every stage with learnable parameters, or the names of the stages to learn)."""
    return dict(name=model.name, output=output, learnable=learnable or ())


class _ModelLayer(ChainLayer):
    """A modulation model of :mod:`rtamt.models` (``model_cls``) as a layer; the
    constructor takes the model's arguments, plus ``output`` and ``learnable``."""

    model_cls: type = Chain

    def __init__(self, fs: float, *args, output: str | None = None, learnable=False,
                 **kwargs):
        model = self.model_cls(fs, *args, **kwargs)
        self.model_config = getattr(model, "config", None)
        super().__init__(model.stages, **_from_model(model, output, learnable))


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
    """:class:`rtamt.models.Paulick2024` as a layer (forward-only)."""

    model_cls = streaming_models.Paulick2024


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


# ---------------------------------------------------------------------------- loudness
class LoudnessLayer(StreamLayer):
    """A time-varying loudness model (:mod:`rtamt.loudness.tvl`) as a forward-only layer:
    input ``(batch, T)`` (:class:`Moore2016`: also ``(batch, 2, T)``, left/right), output
    the frames completed in the block, ``(batch, ..., F)``: ``output`` (default ``'stl'``)
    or with ``output='all'`` a dict of every output (``frame_time`` ``(F,)``)."""

    rows_per_stream = 1

    def __init__(self, model, output: str | None = "stl"):
        outs = tuple(model.outputs)
        if output != "all" and output not in outs:
            raise ValueError(f"{model.name}: output must be 'all' or one of {outs}")
        super().__init__(model.name, (model.design_identity()["fingerprint"],))
        self.model, self.output = model, output
        self.input_limit = model.input_limit

    def _limit_text(self) -> str:
        return self.model._limit_text()

    def _initial_np(self, batch, dtype):
        """Every stage's initial state as ``'<stage>.<key>'``, batch first (a value every
        row shares, the frame clock, repeated per stream)."""
        r = self.rows_per_stream
        out = {}
        for s in self.model.stages:
            for k, v in s.init_state(batch * r).items():
                if k in s.shared_state:
                    v = np.repeat(v[None], batch, axis=0)
                elif r > 1:
                    v = np.ascontiguousarray(v.reshape((batch, r) + v.shape[1:]))
                out[f"{s.name}.{k}"] = v
        return out

    _mode = "mono"

    def _rows(self, x: torch.Tensor) -> np.ndarray:
        return x.detach().cpu().numpy().astype(np.float64)

    def _run(self, x, state, need_grad):
        if need_grad:
            raise RtamtInputError(f"{self.name}: the loudness layers are forward-only (no "
                                  "gradients); run them under torch.no_grad()")
        m = self.model
        B, r = x.shape[0], self.rows_per_stream
        st = {s.name: {} for s in m.stages}         # the model's state, nested per stage
        for name, v in state.items():
            stage, k = name.split(".", 1)
            a = v.detach().cpu().numpy()
            if k in m[stage].shared_state:
                if not (a == a[:1]).all():
                    raise RtamtInputError(f"{self.name}: the streams' frame clocks differ")
                st[stage][k] = a[0].copy()
            else:
                st[stage][k] = a.reshape((B * r,) + a.shape[2 if r > 1 else 1:]).copy()
        rows = self._rows(x)
        lead = (B, 2) if r > 1 else (B,)
        out = m.process(m.coeffs, st, rows, lead, "stereo" if r > 1 else self._mode)
        dev = x.device
        ys = {k: (torch.from_numpy(np.asarray(v)).to(dev) if k == "frame_time" else
                  torch.from_numpy(np.ascontiguousarray(v).astype(
                      np_dtype(x.dtype))).to(dev))
              for k, v in out.items()}
        new = {f"{sn}.{k}": torch.from_numpy(
                   np.repeat(v[None], B, axis=0) if k in m[sn].shared_state else
                   v.reshape((B, r) + v.shape[1:]) if r > 1 else v).to(dev)
               for sn, d in st.items() for k, v in d.items()}
        return (ys if self.output == "all" else ys[self.output]), new


class Glasberg2002(LoudnessLayer):
    """:class:`rtamt.models.Glasberg2002` as a forward-only layer: ``(batch, T)`` ->
    ``(batch, F)`` short-term loudness (sone) by default."""

    def __init__(self, fs: float, *args, output: str | None = "stl", **kwargs):
        super().__init__(streaming_models.Glasberg2002(fs, *args, **kwargs), output)


class Moore2016(LoudnessLayer):
    """:class:`rtamt.models.Moore2016` as a forward-only layer: ``(batch, 2, T)`` (left,
    right) -> ``(batch, F)`` short-term loudness (sone) by default.  A ``(T,)`` diotic
    signal is given as ``(batch, 2, T)`` with both rows equal."""

    in_rank, n_in, rows_per_stream = 3, 2, 2

    def __init__(self, fs: float, *args, output: str | None = "stl", **kwargs):
        super().__init__(streaming_models.Moore2016(fs, *args, **kwargs), output)

    def _rows(self, x):
        return x.detach().cpu().numpy().astype(np.float64).reshape(-1, x.shape[-1])


#: a layer class for every model of :data:`rtamt.models.MODELS`, by the same key
LAYERS = {"dau1997": Dau1997, "glasberg2002": Glasberg2002, "king2019": King2019,
          "moore2016": Moore2016, "osses2021": Osses2021, "paulick2024": Paulick2024}
