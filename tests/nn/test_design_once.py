"""Design once, for both uses (issue 30): the design functions of the differentiable stages
take the learnable values as an optional input, and rtamt.nn reuses them; the gradient rule
of a stage sits beside it, and rtamt.nn finds it through the stage, with no registry."""
import ast
import dataclasses
import importlib
import pathlib

import numpy as np
import pytest
import torch
from scipy import signal
from torch.autograd import gradcheck

import rtamt.nn as rn
from rtamt.adaptation import adaptloop
from rtamt.engine.grad import StageGrad, lift
from rtamt.engine.stage import Stage
from rtamt.filterbank import gammatone
from rtamt.modulation import king2019, modfb
from rtamt.nonlinear import compression

from _examples import stage_classes

FS = 8000
NN = pathlib.Path(rn.__file__).parent


def _x(shape, seed=0, scale=0.02):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape) * scale)


def test_nn_has_no_registry_of_stages():
    """No module of rtamt.nn holds a dict keyed by stage classes (the old ``GRADS`` table),
    names one, or imports a stage's gradient rule: rtamt.nn finds every rule through the
    stage (``type(stage).grad_rule()``)."""
    for path in sorted(NN.glob("*.py")):
        src = path.read_text()
        assert "GRADS" not in src, path.name
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").endswith("_grad"), (path.name, node.module)
                assert "Grad" not in " ".join(a.name for a in node.names), path.name
        mod = importlib.import_module(f"rtamt.nn.{path.stem}" if path.stem != "__init__"
                                      else "rtamt.nn")
        for name, value in vars(mod).items():
            if isinstance(value, dict):
                bad = [k for k in value if isinstance(k, type) and issubclass(k, Stage)]
                assert not bad, f"{path.name}: {name} maps stage classes {bad}"


def test_every_rule_sits_beside_the_stage_that_declares_it():
    """Every stage with a gradient rule (the stages found: rtamt's and the toy stage of
    tests/support) has it as a StageGrad subclass in a module of the package of the class
    that declares ``grad_rule`` (the stage's own, or its base's: SharedSOSStage,
    FIRSignalStage); the stages of rtamt.nn's differentiable models are among them (each
    of them is gradchecked by tests/nn/test_nn_grad.py::test_stage_gradcheck)."""
    found = set()
    for cls in stage_classes():
        rule = cls.grad_rule()
        if rule is None:
            continue
        found.add(cls.__name__)
        assert issubclass(rule, StageGrad), cls
        owner = next(k for k in cls.__mro__ if "grad_rule" in vars(k))
        assert rule.__module__.rsplit(".", 1)[0] == owner.__module__.rsplit(".", 1)[0], (
            cls, owner, rule.__module__)
    layers = (rn.Dau1997(FS, fc=(500.0,)), rn.Osses2021(FS, fc=(500.0,)),
              rn.King2019(FS, fc=(500.0,)), rn.King2019(FS, fc=(500.0,), compression="power"))
    in_models = {type(p.stage).__name__ for layer in layers for p in layer.parts}
    assert len(in_models) >= 9 and in_models | {"OnePole"} <= found, in_models - found


LEARNABLE = {
    "gammatone": (gammatone.Gammatone, lambda: rn.Gammatone(FS, fc=(500.0, 900.0),
                                                            learnable=True), (2, 120)),
    "adaptloop": (adaptloop.AdaptLoop, lambda: rn.AdaptLoop(FS, channels=2, learnable=True),
                  (2, 2, 120)),
    "modfb": (modfb.ModFilterbank, lambda: rn.ModFilterbank(FS, fc=(300.0, 3000.0),
                                                            learnable=True), (2, 2, 120)),
    "kingmodfb": (king2019.KingModFilterbank,
                  lambda: rn.KingModFilterbank(FS, fc=(300.0, 3000.0), lp150=True,
                                               learnable=True), (2, 2, 120)),
    "brokenstick": (compression.BrokenStick,
                    lambda: rn.BrokenStick(channels=2, knee_db=60.0, learnable=True),
                    (2, 2, 50)),
    "power": (compression.PowerCompression,
              lambda: rn.PowerCompression(channels=2, knee_db=60.0, learnable=True),
              (2, 2, 50)),
}


@pytest.mark.parametrize("which", sorted(LEARNABLE))
def test_nn_coefficients_come_from_the_stage_design(which, monkeypatch):
    """A learnable layer designs its coefficients by calling the stage class's own
    ``design`` with the learnable values (``weights``): at theta = 0 (and after a
    step) the coefficients the forward pass runs on are what that call returned, and
    at theta = 0 they equal the plain design, array for array, bit for bit."""
    cls, make, shape = LEARNABLE[which]
    original = cls.design
    calls = []

    def spy(params, n_in=None, weights=None):
        out = original(params, n_in, weights=weights)
        calls.append((weights, out))
        return out

    monkeypatch.setattr(cls, "design", staticmethod(spy))
    layer = make()
    part = layer.parts[0]
    plain = [c for w, c in calls if w is None]
    assert plain and part.coeffs is plain[-1]
    for step in (0.0, 0.05):
        with torch.no_grad():
            layer.theta[part.name].fill_(step)
        calls.clear()
        layer(_x(shape))
        assert len(calls) == 1 and calls[0][0] is not None, calls
        weights, coeffs = calls[0]
        assert type(weights).__module__ == cls.__module__
        assert part.grad.coeffs_for(layer.theta[part.name].detach().numpy()) is coeffs
        if step == 0.0:
            for f in dataclasses.fields(coeffs):
                a, b = getattr(coeffs, f.name), getattr(part.coeffs, f.name)
                if isinstance(a, list):
                    assert all(np.array_equal(u, v) for u, v in zip(a, b)), f.name
                else:
                    assert np.array_equal(a, b, equal_nan=isinstance(a, np.ndarray)), f.name


FORMULAS = {"gammatone": [(gammatone, "poles")],
            "adaptloop": [(adaptloop, "loop_lowpass")],
            "modfb": [(modfb, "bandpass_poles"), (modfb, "efilt_coefficients")],
            "kingmodfb": [(king2019, "band_edges")]}


@pytest.mark.parametrize("which", sorted(FORMULAS))
def test_parameter_gradients_run_through_the_stage_formula(which, monkeypatch):
    """The part of a stage's design that its learnable values reach is one function in the
    stage's module: the design calls it on numpy arrays, the gradient rule on torch
    tensors (autograd through the same formula gives the parameters' gradient)."""
    cls, make, shape = LEARNABLE[which]
    seen = []
    for mod, name in FORMULAS[which]:
        fn = getattr(mod, name)

        def spy(*args, _fn=fn, **kw):
            vals = list(args) + [v for a in args if dataclasses.is_dataclass(a)
                                 for v in vars(a).values()]
            seen.append({"torch" if isinstance(v, torch.Tensor) else "numpy" for v in vals
                         if isinstance(v, (np.ndarray, torch.Tensor))})
            return _fn(*args, **kw)

        monkeypatch.setattr(mod, name, spy)
    layer = make()
    assert {"numpy"} in seen                       # the stage's design
    seen.clear()
    with torch.no_grad():
        layer.theta[layer.parts[0].name].fill_(0.02)
    y, _ = layer(_x(shape))
    y.square().sum().backward()
    assert any("torch" in s for s in seen), seen   # the rule's chain rule
    assert any(s == {"numpy"} for s in seen), seen
    assert torch.count_nonzero(layer.theta[layer.parts[0].name].grad) > 0


# ---------------------------------------------------------------- a new stage, nn untouched
@dataclasses.dataclass(frozen=True)
class OnePoleParams:
    fs: float
    tau: float = 0.002


@dataclasses.dataclass(frozen=True)
class OnePoleWeights:
    tau: float


@dataclasses.dataclass(frozen=True)
class OnePoleCoeffs:
    fs: float
    tau: float
    a: float


def one_pole(tau, fs, xp=np):
    return xp.exp(-1.0 / (tau * fs))


def one_pole_design(params, n_in=None, weights=None):
    tau = params.tau if weights is None else weights.tau
    return OnePoleCoeffs(params.fs, tau, one_pole(tau, params.fs))


class OnePoleGrad(StageGrad):
    """``y[t] = (1 - a) x[t] + z``, ``z <- a y[t]``; learnable ``tau = tau0 exp(th)``."""

    n_params = 1

    def weights(self, th, xp=np):
        return OnePoleWeights(lift(np.float64(self.coeffs0.tau), th, xp) * xp.exp(th[0]))

    def coefficients(self, w, xp):
        return (one_pole(w.tau, self.coeffs0.fs, xp),)

    def backward(self, coeffs, th, x, state, gy, mu):
        a = coeffs.a
        # lam[t] = gy[t] + a lam[t+1], lam[T] = mu (the gradient of z after the block)
        lam = signal.lfilter([1.0], [1.0, -a], gy[:, ::-1], axis=1,
                             zi=a * mu["z"][:, None])[0][:, ::-1]
        gx = (1.0 - a) * lam
        if th is None:
            mu["z"][:] = lam[:, 0]
            return gx, None
        y = OnePole.process_tm(coeffs, {"z": state["z"].copy()}, x)
        dz = np.concatenate([lam[:, 1:], mu["z"][:, None]], axis=1)   # dL/dz[t]
        mu["z"][:] = lam[:, 0]
        return gx, self.chain(th, np.sum(dz * y - lam * x))


class OnePole(Stage):
    name = "onepole"
    Params = OnePoleParams
    design = staticmethod(one_pole_design)

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        return {"z": np.zeros((batch, n_in), dtype)}

    @staticmethod
    def process_tm(coeffs, state, x, out=None):
        a = coeffs.a
        y, zf = signal.lfilter([1.0 - a], [1.0, -a], x, axis=1, zi=state["z"][:, None])
        state["z"][:] = zf[:, 0]
        return y

    @classmethod
    def grad_rule(cls):
        return OnePoleGrad


def test_a_new_stage_gets_gradients_without_an_edit_in_nn():
    """A stage defined here, with its design taking the learnable value and its rule
    beside it, becomes a learnable layer: gradcheck of the input, the state and theta,
    and theta = 0 gives the stage's own design."""
    layer = rn.StageLayer(OnePole(fs=FS), n_in=2, learnable=True)
    assert layer.parts[0].grad.coeffs_for(np.zeros(1)) == layer.parts[0].coeffs
    _, st = layer(_x((1, 2, 20), 1))
    keys = [k for k in st if k != rn.DESIGN_KEY]

    def f(theta, xb, z):
        s = dict(st, **{keys[0]: z})
        y, new = torch.func.functional_call(layer, {"theta.onepole": theta}, (xb, s))
        return y, new[keys[0]]

    theta = torch.tensor([0.3], dtype=torch.float64, requires_grad=True)
    z = st[keys[0]].detach().clone().requires_grad_(True)
    assert gradcheck(f, (theta, _x((1, 2, 30), 2).requires_grad_(True), z), eps=1e-6,
                     atol=1e-7, rtol=1e-5)


def test_learnable_refusal_names_the_stages_whose_rules_have_parameters():
    """Naming a stage without parameters in ``learnable`` is refused with the stages of
    this layer whose rules have parameters (taken from the rules, a new stage included)."""
    from rtamt.ihc.envelope import IHCEnvelope

    with pytest.raises(ValueError, match=r"'ihc' has no learnable parameters \(the stages "
                                         r"that have: \['onepole'\]\)"):
        rn.ChainLayer([IHCEnvelope(fs=FS), OnePole(fs=FS)], n_in=2, learnable=["ihc"])
    with pytest.raises(ValueError, match=r"\['gammatone', 'adaptloop', 'modfb'\]"):
        rn.Dau1997(FS, fhigh=2000.0, learnable=["ihc"])
