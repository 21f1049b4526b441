"""rtamt.nn gradients of whole models: gradcheck of Dau1997, Osses2021 and King2019 (and of
King2019's adaptation high-pass and compressions), gradients across blocks with carried
state equal to one call, detach_state, gradients refused through a stage without a rule,
and a gradcheck of every stage that has a gradient rule, as its examples build it (found,
not listed).  Each stage's own
gradient checks sit beside its other tests (tests/<package>/test_<stage>_grad.py)."""
import pytest
import torch
from torch.autograd import gradcheck

import rtamt.nn as rn
from rtamt.engine.contract import RtamtInputError

from _examples import cases, example_input, make
from _gradcheck import check_layer, noise

FS = 8000


def test_dau1997_gradcheck():
    """The whole Dau1997 chain (input and every stage's state)."""
    layer = rn.Dau1997(FS, fc=(1000.0, 2000.0))
    check_layer(layer, noise((1, 20), scale=0.3), warm=noise((1, 40), 1, scale=0.3))


def _loss(y, w):
    return (y * w).sum()


def test_osses2021_gradcheck():
    """Osses2021 end to end (ear FIRs, gammatone, 5 IHC low-passes, limiter 5, jepsen2008
    bank with its pre-filter), w.r.t. the input (gradcheck's fast mode: random
    projections of the Jacobian, one backward pass instead of one per output)."""
    layer = rn.Osses2021(FS, fc=(1000.0, 2000.0))
    _, st = layer(noise((1, 300), 1, scale=0.3))
    assert gradcheck(lambda xb: layer(xb, st)[0], (noise((1, 12), scale=0.3).requires_grad_(),),
                     eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True)


_FC = dict(fc=(1000.0, 2000.0))


@pytest.mark.parametrize("model,fs,kw,learned", [
    (rn.Dau1997, FS, _FC, {"gammatone", "adaptloop", "modfb"}),
    (rn.Osses2021, FS, _FC, {"gammatone", "adaptloop", "modfb"}),
    (rn.King2019, FS, dict(_FC, lp150=True), {"gammatone", "compression", "modfb"}),
    (rn.Paulick2024, 16000, dict(n_channels=2, fhigh=4000.0), {"adaptloop", "modfb"})],
    ids=["dau1997", "osses2021", "king2019", "paulick2024"])
def test_gradient_over_blocks_equals_one_call(model, fs, kw, learned):
    """Two blocks with carried (not detached) state give the gradient of one call on the
    concatenated input, w.r.t. the input, the first block's state and every learnable
    parameter (gammatone centre frequencies and bandwidth, adaptation time constants,
    modulation centre frequencies and Q (efilt and King2019 banks), compression knee and
    exponent; <= 1e-10 relative), across a 20 dB onset; the second block starts past a
    recomputation checkpoint (rtamt.engine.grad.SEGMENT).  King2019 runs through its compression,
    adaptation high-pass and modulation bank (with the 150 Hz pre-filter); Paulick2024
    through its DRNL, IHC, adaptation loops, resampler by 2 (the first block, of 601
    samples, ends inside a decimation phase: the loss weights follow the outputs) and
    modulation bank."""
    layer = model(fs, learnable=True, **kw)
    assert set(layer.theta) == learned
    T, cut = 1300, 601
    x = noise((2, T), 4, scale=0.5)
    with torch.no_grad():
        _, s0 = layer(noise((2, 100), 5, scale=0.05))
    w = noise((2, layer.parts[-1].n_out, T), 6)

    def grads(blocks):
        xs = x.clone().requires_grad_(True)
        st = {k: (v.clone().requires_grad_(True) if v.is_floating_point() else v)
              for k, v in s0.items()}
        layer.zero_grad(set_to_none=True)
        loss, s, a, k = 0.0, st, 0, 0
        for b in blocks:
            y, s = layer(xs[:, a:b], s)
            n = y.shape[-1]
            loss = loss + _loss(y, w[..., k:k + n])
            a, k = b, k + n
        loss.backward()
        return [xs.grad] + [p.grad.clone() for _, p in sorted(layer.theta.items())] + [
            st[k].grad for k in sorted(st) if st[k].requires_grad]

    one, two = grads([T]), grads([cut, T])
    for g1, g2 in zip(one, two):
        assert torch.linalg.norm(g1 - g2) <= 1e-10 * torch.linalg.norm(g1)
    assert all(torch.linalg.norm(g) > 0 for g in one[:len(learned) + 2])


def test_paulick2024_gradcheck():
    """Paulick2024 end to end (ear FIRs, DRNL, IHC, adaptation loops, resampler,
    modulation bank) w.r.t. the input, from a warmed-up state (gradcheck's fast mode); the
    block of 13 samples ends inside a decimation phase."""
    layer = rn.Paulick2024(16000, n_channels=2, fhigh=4000.0)
    _, st = layer(noise((1, 301), 1, scale=0.3))
    assert gradcheck(lambda xb: layer(xb, st)[0], (noise((1, 13), scale=0.3).requires_grad_(),),
                     eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True)


def test_detach_state_truncates():
    """detach_state stops the gradient at the block boundary: the first block's input
    gets no gradient from the second block's loss."""
    layer = rn.Dau1997(FS, fc=(1000.0,))
    x = noise((1, 200), 7, scale=0.3).requires_grad_(True)
    _, s = layer(x[:, :100])
    y, _ = layer(x[:, 100:], rn.detach_state(s))
    y.sum().backward()
    assert torch.count_nonzero(x.grad[:, :100]) == 0
    assert torch.count_nonzero(x.grad[:, 100:]) > 0
    x.grad = None
    _, s = layer(x[:, :100])
    y, _ = layer(x[:, 100:], s)
    y.sum().backward()
    assert torch.count_nonzero(x.grad[:, :100]) > 0


#: models with a frame stage made rule-less (a subclass whose ``grad_rule()`` is ``None``):
#: sample rate, input shape, rows, and that stage's index in ``model.stages``
NO_RULE = {
    "glasberg2002": (32000, (1, 300), 1, -2),
    "moore2016": (32000, (1, 2, 300), 2, -1),
}


def _without_rule(key):
    """The model ``key`` with one frame stage's class replaced by a rule-less subclass
    (every stage of the loudness models has a rule), as a layer; the stage's name and the
    subclass's name."""
    from rtamt import models

    fs, shape, rows, i = NO_RULE[key]
    m = models.MODELS[key](fs)
    stage = m.stages[i]
    stage.__class__ = type("NoRule", (type(stage),), {"grad_rule": classmethod(lambda c: None)})
    return rn.ChainLayer(m, n_in=rows), stage.name, shape


@pytest.mark.parametrize("key", sorted(NO_RULE))
def test_a_gradient_through_a_stage_without_a_rule_is_refused(key):
    """An input that requires a gradient is refused before any stage runs, naming the first
    stage without a gradient rule, and the state is left as it was; under torch.no_grad()
    (or with nothing that requires a gradient) the same layer runs, recording nothing."""
    layer, stage, shape = _without_rule(key)
    x = noise(shape, scale=0.1)
    st = layer.initial_state(1, dtype=torch.float64)
    before = {k: v.clone() for k, v in st.items()}
    with pytest.raises(RtamtInputError, match=rf"^{key}: stage '{stage}' \(NoRule\) has no "
                       r"gradient rule \(forward-only in rtamt.nn\); run the layer under "
                       r"torch.no_grad\(\)"):
        layer(x.clone().requires_grad_(True), st)
    assert all(torch.equal(st[k], before[k]) for k in st)
    with torch.no_grad():
        y, _ = layer(x.clone().requires_grad_(True), st)
    assert y.grad_fn is None
    y2, _ = layer(x, st)
    assert y2.grad_fn is None and torch.equal(y, y2)


def test_the_gradient_path_starts_where_a_gradient_is_requested():
    """The stages a gradient is requested through run from the first one it enters on: an
    incoming state entry of a loudness integrator that requires a gradient gets its
    gradient, with nothing before it requiring one; Paulick2024's modulation bank,
    adaptation loops and IHC get gradients for their incoming state, through the
    resampler, with nothing before them requiring one."""
    gl = rn.Glasberg2002(32000)
    _, st = gl(noise((1, 3000), scale=0.1))
    st = dict(st)
    st["ltl_integrator.ltl"] = st["ltl_integrator.ltl"].clone().requires_grad_(True)
    y, _ = gl(noise((1, 100)), st)
    y.sum().backward()                             # the STL does not depend on the LTL
    assert st["ltl_integrator.ltl"].grad is None or not st["ltl_integrator.ltl"].grad.any()
    y, _ = rn.Glasberg2002(32000, output="ltl")(noise((1, 100)), st)
    y.sum().backward()
    assert st["ltl_integrator.ltl"].grad.abs().sum() > 0
    kw = dict(n_channels=2, fhigh=4000.0)
    layer = rn.Paulick2024(16000, **kw)
    _, st = layer(noise((1, 300), 1, scale=0.1))
    st = dict(st)
    mod = [k for k in st if k.startswith("modfb.") and st[k].is_floating_point()]
    for k in mod:
        st[k] = st[k].clone().requires_grad_(True)
    y, _ = layer(noise((1, 100), 2, scale=0.1), st)
    y.sum().backward()
    assert any(torch.count_nonzero(st[k].grad) for k in mod)
    st = {k: v.detach() for k, v in st.items()}
    st["adaptloop.s"] = st["adaptloop.s"].clone().requires_grad_(True)
    y, _ = layer(noise((1, 100), 2, scale=0.1), st)          # through the resampler
    y.sum().backward()
    assert torch.count_nonzero(st["adaptloop.s"].grad) > 0
    st = {k: v.detach() for k, v in st.items()}
    st["ihc.v"] = st["ihc.v"].clone().requires_grad_(True)
    y, _ = layer(noise((1, 100), 2, scale=0.1), st)          # from the IHC on
    y.sum().backward()
    assert torch.count_nonzero(st["ihc.v"].grad) > 0


def test_paulick2024_learns_what_it_has():
    """``rn.Paulick2024(learnable=True)`` learns the adaptation loops' time constants and
    the modulation bank: a backward pass reaches both parameters."""
    kw = dict(n_channels=2, fhigh=4000.0)
    layer = rn.Paulick2024(16000, **kw, learnable=True)
    assert sorted(layer.theta) == ["adaptloop", "modfb"]
    y, _ = layer(noise((1, 400), scale=0.1))
    y.sum().backward()
    assert all(torch.count_nonzero(p.grad) > 0 for p in layer.theta.values())


def test_a_learnable_stage_before_a_stage_without_a_rule_is_refused():
    """A learnable stage before a stage without a rule is refused when the layer is made,
    naming that stage and the stages that can be learnt (adaptation loops, learnable,
    before a copy of them that declares no rule)."""
    from rtamt.adaptation import AdaptLoop, AdaptLoopParams

    class NoRule(AdaptLoop):
        name = "norule"

        @classmethod
        def grad_rule(cls):
            return None

    stages = [AdaptLoop(AdaptLoopParams(fs=FS)), NoRule(AdaptLoopParams(fs=FS))]
    with pytest.raises(RtamtInputError, match=r"^chain: stage 'norule' \(NoRule\) has no "
                       r"gradient rule \(forward-only in rtamt.nn\); no gradient would reach "
                       r"the learnable parameters of 'adaptloop' before it: learn only stages "
                       r"after it \(learnable=\[\]\)"):
        rn.ChainLayer(stages, n_in=2, learnable=["adaptloop"])


def test_king2019_gradcheck():
    """King2019 end to end (gammatone, broken-stick compression, IHC, adaptation high-pass,
    modulation bank with its pre-filter) w.r.t. the input, from a warmed-up state
    (gradcheck's fast mode)."""
    layer = rn.King2019(FS, fc=(1000.0, 2000.0), lp150=True)
    _, st = layer(noise((1, 300), 1, scale=0.3))
    assert gradcheck(lambda xb: layer(xb, st)[0], (noise((1, 12), scale=0.3).requires_grad_(),),
                     eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True)


def test_highpass_and_compression_gradcheck():
    """King2019's adaptation high-pass and both compressions (above and below the knee;
    no input at 0, where the power law has no derivative)."""
    check_layer(rn.AdaptHighpass(FS, 2), noise((2, 2, 30)), warm=noise((2, 2, 20), 1))
    x = noise((2, 2, 30), 2, scale=0.01)
    x = x + 0.002 * torch.sign(x)
    layer = rn.BrokenStick(channels=2, knee_db=60.0)          # knee at 0.01
    assert (x.abs() > 0.01).any() and (x.abs() < 0.01).any()
    check_layer(layer, x)
    check_layer(rn.PowerCompression(channels=2, knee_db=60.0), x)


# ---------------------------------------------------------------- every stage with a rule
def _has_rule(cls, ex):
    from _examples import on_samples

    return on_samples(cls, ex) and cls.grad_rule() is not None


@pytest.mark.parametrize("cls, ex", cases(where=_has_rule))
def test_stage_gradcheck(cls, ex):
    """Every stage with a gradient rule (found, with the examples it declares:
    tests/support/_examples.py), as a layer: gradcheck (fast mode) w.r.t. the block input,
    every floating-point entry of the incoming state (an integer one, the resampler's
    phase, is carried as it is; NaN outputs, not defined yet, are set to 0) and, where
    the rule has parameters, ``theta`` (away from 0, so that the learned design is not
    the stage's own)."""
    import numpy as np

    stage = make(cls, ex)
    x = example_input(ex, 52, start=1500)                # inside the re-onset
    lead = x[None] if stage.in_kind == "channels" or x.ndim == 1 else x
    n_in = x.shape[0] if stage.in_kind == "channels" else 1
    rule = cls.grad_rule()
    layer = rn.StageLayer(stage, n_in=n_in, learnable=rule.n_params > 0)
    _, st = layer(torch.from_numpy(np.ascontiguousarray(lead[..., :40])))
    keys = [k for k in st if k != rn.DESIGN_KEY and st[k].is_floating_point()]
    key = f"theta.{stage.name}"
    theta = [] if rule.n_params == 0 else [torch.full((rule.n_params,), 0.05, dtype=torch.float64,
                                                      requires_grad=True)]

    def f(*args):
        th, (xb, *vals) = args[:len(theta)], args[len(theta):]
        s = dict(st, **dict(zip(keys, vals)))
        y, new = torch.func.functional_call(layer, {key: th[0]} if th else {}, (xb, s))
        # outputs not defined yet (NaN: the meter's windows before they are full) carry no
        # gradient; their numerical derivative would be NaN
        return (torch.nan_to_num(y),) + tuple(new[k] for k in keys)

    xb = torch.from_numpy(np.ascontiguousarray(lead[..., 40:])).requires_grad_(True)
    vals = [st[k].detach().clone().requires_grad_(True) for k in keys]
    assert gradcheck(f, (*theta, xb, *vals), eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True)
