"""The streaming contract (rtamt.engine.contract): one Protocol, one state schema, states
that stack and split by stream, identity checks on load, and calibration by spl_ref.

The stage sweeps here run every example every stage declares (``Stage.examples()``; the
stages are found, not listed: tests/support/_examples.py)."""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import rtamt
from rtamt import RtamtInputError, Streaming, split_state, stack_states
from rtamt.engine import contract
from rtamt.engine.parallel import Parallel
from rtamt.engine.stage import Chain
from rtamt.loudness.bs1770 import LoudnessMeter
from rtamt.loudness.r128stream import R128Stream
from rtamt.models import MODELS

from _examples import cases, example_input, examples, make, stage_classes

FS = {"paulick2024": 44100.0}
#: the registered bases that are not stages (a stage base says so itself: its
#: ``examples()`` is empty)
ABSTRACT = {"Stage", "Stateless", "Composite", "StageGroup", "TimeVaryingLoudness",
            "ModulationModel"}


def _fs(name):
    return FS.get(name, 48000.0)


def _signal(name, n, seed, batch=None, dtype=np.float64):
    """Independent noise-modulated tones, ``(T,)``/``(B, T)`` (Moore2016: ``(2, T)``/
    ``(B, 2, T)``), digital RMS ~0.1."""
    rng = np.random.default_rng(seed)
    rows = (1 if batch is None else batch) * (2 if name == "moore2016" else 1)
    t = np.arange(n) / _fs(name)
    f = rng.uniform(300, 3000, rows)[:, None]
    x = 0.1 * np.sin(2 * np.pi * f * t) * (1 + 0.5 * np.sin(2 * np.pi * 7 * t)) \
        + 0.02 * rng.standard_normal((rows, n))
    shape = ((2,) if name == "moore2016" else ()) + (n,)
    if batch is not None:
        shape = (batch,) + shape
    return x.reshape(shape).astype(dtype)


def _outs(model, x):
    """Every output of one block as float64 numpy arrays (dict)."""
    return {k: np.asarray(v) for k, v in model.process_all(x).items()}


def _composites():
    """The streaming objects that are not stages: every model (and its stages), the meter,
    a chain, a parallel group and the scheduler's R128 stream."""
    objs = []
    for name, cls in MODELS.items():
        m = cls(_fs(name))
        objs.append(m)
        objs.extend(getattr(m, "stages", []))
    objs.append(LoudnessMeter(fs=48000.0, channels=2))
    objs.append(Chain(MODELS["dau1997"](48000.0).stages[:2]))
    objs.append(Parallel({"dau": MODELS["dau1997"](48000.0),
                          "meter": LoudnessMeter(fs=48000.0)}))
    objs.append(R128Stream(48000.0, channels=2))
    return objs


def _satisfies_the_protocol(o):
    assert isinstance(o, Streaming), type(o).__name__
    ident = o.design_identity()
    assert ident["name"] == o.name and len(ident["fingerprint"]) == 16
    assert set(o.output_info()) == set(o.outputs)
    sd = o.state_dict()
    assert sd["schema"] == contract.SCHEMA and sd["version"] == contract.STATE_VERSION
    # the scheduler's R128 stream snapshots its meter: the meter's kind and design
    own = LoudnessMeter(o.params) if isinstance(o, R128Stream) else o
    assert sd["kind"] == type(own).__name__ and sd["design"] == own.design_identity()


@pytest.mark.parametrize("cls, ex", cases(where=lambda cls, ex: True))
def test_every_stage_example_satisfies_the_protocol(cls, ex):
    """Every stage (frame stages included), as each of its examples builds it."""
    _satisfies_the_protocol(make(cls, ex))


def test_every_streaming_class_satisfies_the_protocol():
    objs = _composites()            # (stage_classes() imported every module of rtamt)
    for o in objs:
        _satisfies_the_protocol(o)
    # every concrete registered kind is covered: by the objects above or by a stage's
    # examples (the sweep above); a stage base declares that it runs none
    covered = {type(o).__name__ for o in objs} | {c.__name__ for c, _ in examples(
        lambda cls, ex: True)}
    bases = {c.__name__ for c in stage_classes() if c.examples() == ()}
    library = {k for k, c in contract._KINDS.items() if c.__module__.startswith("rtamt.")}
    assert {"Gammatone", "LoudnessMeter", "Dau1997", "R128Stream"} <= covered
    missing = library - covered - ABSTRACT - bases
    assert not missing, f"streaming classes not checked: {sorted(missing)}"
    # a class missing a contract method is not Streaming
    assert not isinstance(object(), Streaming)


def test_fingerprint_tells_designs_apart():
    a, b = rtamt.Dau1997(48000.0), rtamt.Dau1997(48000.0)
    assert a.design_identity() == b.design_identity()
    assert rtamt.Dau1997(48000.0, flow=100.0).design_identity()["fingerprint"] != \
        a.design_identity()["fingerprint"]
    assert rtamt.Dau1997(44100.0).design_identity()["fingerprint"] != \
        a.design_identity()["fingerprint"]


# ------------------------------------------------------------------ calibration
@pytest.mark.parametrize("spl", [80.0, 117.0])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_calibration_identity(name, spl):
    """M(spl_ref=s)(x) == M(spl_ref=100)(x * 10^((s-100)/20)), with no calibrate() call."""
    cls = MODELS[name]
    x = _signal(name, int(_fs(name) * 0.06), seed=3)
    a = _outs(cls(_fs(name), spl_ref=spl), x)
    b = _outs(cls(_fs(name), spl_ref=100.0), x * 10 ** ((spl - 100) / 20))
    c = _outs(cls(_fs(name), spl_ref=100.0), x)
    assert set(a) == set(b)
    moved = False
    for k in a:
        if a[k].size == 0 or k == "frame_time":
            continue
        peak = np.max(np.abs(b[k]))
        assert np.max(np.abs(a[k] - b[k])) <= 1e-10 * peak, k
        moved |= not np.allclose(a[k], c[k], rtol=1e-6, atol=1e-9 * peak)
    assert moved, "spl_ref had no effect"
    if name in ("dau1997", "osses2021", "king2019"):   # one gain, applied as in the test
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_calibrate_is_not_public():
    for name, cls in MODELS.items():
        assert not hasattr(cls(_fs(name)), "calibrate"), name


def test_seed_config_is_a_deprecated_alias():
    with pytest.warns(DeprecationWarning, match="torch_amt"):
        m = rtamt.Dau1997(48000.0, "seed")
    assert m.config == "torch_amt"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        n = rtamt.Dau1997(48000.0, "torch_amt")
    x = _signal("dau1997", 2000, seed=1)
    om, on = _outs(m, x), _outs(n, x)
    for k, v in om.items():
        np.testing.assert_array_equal(v, on[k])


# ------------------------------------------------------------------ stack / split
def _run_alone(name, xs, cuts):
    """Each stream alone, in the blocks given by ``cuts``: list of per-stream, per-block
    outputs, and the states at each cut."""
    cls = MODELS[name]
    outs, states = [], []
    for x in xs:
        m = cls(_fs(name))
        o, s = [], []
        for a, b in zip(cuts[:-1], cuts[1:]):
            o.append(_outs(m, x[..., a:b]))
            s.append(m.state_dict())
        outs.append(o)
        states.append(s)
    return outs, states


def _assert_row(batch_out, row, alone_out, name):
    for k, v in alone_out.items():
        if k == "frame_time":
            np.testing.assert_array_equal(batch_out[k], v)
            continue
        np.testing.assert_array_equal(batch_out[k][row], v, err_msg=f"{name} {k} row {row}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_stacked_batch_equals_streams_alone(name, dtype):
    """Streams run alone; their states stacked mid-stream run as one batch; the batch state
    split again and continued alone: every stream's output is bit-identical throughout."""
    cls = MODELS[name]
    n = int(_fs(name) * 0.045)
    cuts = [0, 700, 1500, n]
    xs = [_signal(name, n, seed=s, dtype=dtype) for s in (1, 2, 3)]
    alone, states = _run_alone(name, xs, cuts)
    # stack after block 0, run block 1 as a batch of 3
    st = stack_states([s[0] for s in states])
    assert st["stream"]["batch"] == 3
    batch = cls(_fs(name))
    batch.load_state_dict(st)
    xb = np.stack([x[..., cuts[1]:cuts[2]] for x in xs])
    ob = _outs(batch, xb)
    for i in range(3):
        _assert_row(ob, i, alone[i][1], name)
    # split after block 1, continue each alone for block 2
    sb = batch.state_dict()
    for i in range(3):
        one = cls(_fs(name))
        si = split_state(sb, i)
        assert si["stream"]["batch"] is None
        one.load_state_dict(si)
        o = _outs(one, xs[i][..., cuts[2]:])
        for k, v in alone[i][2].items():
            np.testing.assert_array_equal(o[k], v, err_msg=f"{name} {k} stream {i}")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_stack_split_round_trip_and_batch_composition(name):
    n = int(_fs(name) * 0.03)
    xs = [_signal(name, n, seed=s) for s in (4, 5, 6, 7)]
    _, states = _run_alone(name, xs, [0, n])
    ss = [s[0] for s in states]
    # split(stack(...)) gives back each state exactly
    st = stack_states(ss)
    for i, s in enumerate(ss):
        back = split_state(st, i)
        assert _equal_states(back, s), f"{name}: stream {i} changed by stack/split"
    # stacking a batch with a single stream: the composition does not matter
    st2 = stack_states([stack_states(ss[:2]), ss[2], stack_states(ss[3:])])
    assert _equal_states(st2, st)
    with pytest.raises(RtamtInputError, match="out of range"):
        split_state(st, 4)


def _stream_pair(ex):
    """Two streams of ``ex``'s input (the second a scaled, time-reversed copy of the first),
    600 samples from the first onset."""
    x = example_input(ex, 600, start=300)
    return [x, np.ascontiguousarray(0.7 * x[..., ::-1])]


def _join(blocks, batched):
    """The batch input of streams' blocks: stacked, or concatenated on their batch axis."""
    return np.concatenate(blocks) if batched else np.stack(blocks)


@pytest.mark.parametrize("cls, ex", cases())
def test_stage_states_stack_and_split(cls, ex):
    """Two streams of every stage example run alone; their states stacked after block 0
    run block 1 as one batch; the batch state split again continues each alone in block
    2: every output and every state is bit-identical to the streams' own."""
    xs, cuts = _stream_pair(ex), [0, 250, 430, 600]
    alone, states = [], []
    for x in xs:
        st = make(cls, ex)
        alone.append([st(x[..., a:b]) for a, b in zip(cuts[:-1], cuts[1:])])
        states.append(st.state_dict())
    first = []
    for x in xs:
        st = make(cls, ex)
        st(x[..., :cuts[1]])
        first.append(st.state_dict())
    n = [1 if s["stream"]["batch"] is None else s["stream"]["batch"] for s in first]
    batched = first[0]["stream"]["batch"] is not None
    stacked = stack_states(first)
    assert stacked["stream"]["batch"] == sum(n)
    batch = make(cls, ex)
    batch.load_state_dict(stacked)
    yb = np.asarray(batch(_join([x[..., cuts[1]:cuts[2]] for x in xs], batched)))
    rows = np.split(yb, np.cumsum(n)[:-1]) if batched else list(yb)
    for i in range(2):
        np.testing.assert_array_equal(rows[i], alone[i][1], err_msg=f"{ex.id} stream {i}")
    sb = batch.state_dict()
    for i, x in enumerate(xs):
        one = make(cls, ex)
        one.load_state_dict(split_state(sb, i) if not batched else
                            stack_states([split_state(sb, j) for j in
                                          range(sum(n[:i]), sum(n[:i + 1]))]))
        np.testing.assert_array_equal(one(x[..., cuts[2]:]), alone[i][2],
                                      err_msg=f"{ex.id} stream {i} after split")
        assert _equal_states(_arrays(one.state_dict()), _arrays(states[i])), ex.id


def _arrays(sd):
    return {k: v for k, v in sd.items() if k not in ("block",)}


def _equal_states(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and set(a) == set(b) and all(_equal_states(a[k], b[k])
                                                                for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


def test_stack_refuses_what_cannot_share_a_call():
    x = _signal("dau1997", 1000, seed=1)
    a, b = rtamt.Dau1997(48000.0), rtamt.Dau1997(44100.0)
    a(x), b(x)
    with pytest.raises(RtamtInputError, match="another design"):
        stack_states([a.state_dict(), b.state_dict()])
    c = rtamt.Dau1997(48000.0)
    c(x.astype(np.float32))
    with pytest.raises(RtamtInputError, match="layout"):
        stack_states([a.state_dict(), c.state_dict()])
    with pytest.raises(RtamtInputError, match="not processed"):
        stack_states([a.state_dict(), rtamt.Dau1997(48000.0).state_dict()])
    with pytest.raises(RtamtInputError, match="Glasberg2002"):
        g = rtamt.Glasberg2002(48000.0)
        g(x)
        stack_states([a.state_dict(), g.state_dict()])
    # loudness frames of a batch fall due together: streams at other positions refuse
    g2 = rtamt.Glasberg2002(48000.0)
    g2(x[:999])
    with pytest.raises(RtamtInputError, match="position"):
        stack_states([g.state_dict(), g2.state_dict()])
    # a diotic Moore2016 stream has no batch form
    m = rtamt.Moore2016(48000.0)
    m(x)
    with pytest.raises(RtamtInputError, match="diotic"):
        stack_states([m.state_dict(), m.state_dict()])
    meter = LoudnessMeter(fs=48000.0, channels=1)
    meter(x)
    with pytest.raises(RtamtInputError, match="do not stack"):
        stack_states([meter.state_dict(), meter.state_dict()])
    with pytest.raises(RtamtInputError, match="no states"):
        stack_states([])


# ------------------------------------------------------------------ identity on load
def _started(name, **kw):
    m = MODELS[name](kw.pop("fs", _fs(name)), **kw)
    m(_signal(name, 2000, seed=9))
    return m


@pytest.mark.parametrize("name", sorted(MODELS))
def test_load_refuses_other_design_and_leaves_state(name):
    target = _started(name)
    before = target.state_dict()
    other_fs = 48000.0 if _fs(name) != 48000.0 else 44100.0
    cases = {
        "sample rate": _started(name, fs=other_fs).state_dict(),
        "spl_ref": _started(name, spl_ref=90.0).state_dict(),
    }
    if name == "dau1997":
        cases["configuration"] = _started(name, config="torch_amt").state_dict()
    for what, sd in cases.items():
        with pytest.raises(RtamtInputError, match=what):
            target.load_state_dict(sd)
    other_kind = next(k for k in MODELS if k != name)
    with pytest.raises(RtamtInputError, match="is of a"):
        target.load_state_dict(_started(other_kind).state_dict())
    assert _equal_states(target.state_dict(), before)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_load_refuses_nonfinite_none_and_old_schema(name):
    target = _started(name)
    before = target.state_dict()
    bad = copy.deepcopy(before)
    leaf = bad
    while "children" in leaf:
        leaf = next(iter(leaf["children"].values()))
    leaf = leaf if leaf.get("arrays") else bad["children"][list(bad["children"])[-1]]
    k = next(k for k, v in leaf["arrays"].items() if v.dtype.kind == "f")
    leaf["arrays"][k].flat[0] = np.nan
    with pytest.raises(RtamtInputError, match="non-finite"):
        target.load_state_dict(bad)
    with pytest.raises(RtamtInputError, match="NoneType"):
        target.load_state_dict(None)
    old = {k: v for k, v in before.items() if k not in ("schema", "version")}
    with pytest.raises(RtamtInputError, match="schema"):
        target.load_state_dict(old)
    assert _equal_states(target.state_dict(), before)


def test_stage_load_names_the_channel_count():
    from rtamt.modulation import ModFilterbank
    a = ModFilterbank(fs=48000.0, fc=(500.0, 1000.0, 2000.0))
    a(np.full((3, 100), 10.0))
    b = ModFilterbank(fs=48000.0, fc=(500.0, 1000.0))
    with pytest.raises(RtamtInputError, match="channels"):
        b.load_state_dict(a.state_dict())

