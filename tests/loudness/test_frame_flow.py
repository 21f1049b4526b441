"""One Stage for samples and frames (issue 40 items 1-2, the loudness models): a frame stage
is a Stage whose declared flow is frames; chains check flows when built; Glasberg2002 and
Moore2016 compose their stages with the machinery a Chain has (one ``to()``, a state nested
per stage, one load with roll-back); snapshots of the earlier release (one flat ``arrays``
dict) are migrated once on load."""
from __future__ import annotations

import gzip
import pathlib
import pickle

import numpy as np
import pytest

import rtamt
from rtamt.engine.contract import RtamtInputError
from rtamt.engine.stage import FRAMES, SAMPLES, Chain, Stage, StageGroup, check_flows
from rtamt.loudness.excitation import Excitation
from rtamt.loudness.frames import FrameStage
from rtamt.loudness.specific_loudness import SpecificLoudness
from rtamt.loudness.spectrum import Spectrum
from rtamt.loudness.tvl import TimeVaryingLoudness

FS = 32000.0
V1 = pathlib.Path(__file__).resolve().parents[1] / "data" / "loudness_v1_state.pkl.gz"


def _x(rows, n, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / FS
    return 0.05 * np.sin(2 * np.pi * 1000 * t) + 0.01 * rng.standard_normal((rows, n))


def _v1():
    with gzip.open(V1, "rb") as f:
        return pickle.load(f)


def test_a_frame_stage_is_a_stage_with_no_machinery_of_its_own():
    """The base gives the subclass hook, constructor, to()/binding, fingerprint, snapshot
    load and stack/split; the loudness models take to(), reset() and the children load
    from the class a Chain is built on."""
    assert issubclass(FrameStage, Stage)
    for name in ("__init_subclass__", "to", "design_identity", "state_dict",
                 "stack_state_dicts", "split_state_dict", "reset"):
        assert name not in vars(FrameStage), name
    assert (FrameStage.flow_in, FrameStage.flow_out) == (FRAMES, FRAMES)
    assert (Spectrum.flow_in, Spectrum.flow_out) == (SAMPLES, FRAMES)
    assert issubclass(TimeVaryingLoudness, StageGroup) and issubclass(Chain, StageGroup)
    for name in ("to", "_load_children", "_children_state"):
        assert name not in vars(TimeVaryingLoudness) and name not in vars(Chain), name
    assert "former_params" not in vars(Spectrum)
    # the former spl_ref field of the spectrum lives in the snapshot migration only
    src = pathlib.Path(rtamt.__file__).parent / "loudness"
    tvl = ("frames", "spectrum", "excitation", "specific_loudness", "agc", "binaural", "tvl",
           "migrate")
    assert [n for n in tvl if "former_params" in (src / f"{n}.py").read_text()
            or "with_former_fields" in (src / f"{n}.py").read_text()] == ["migrate"]


def test_chains_check_flows_when_built():
    """A frame stage cannot follow a sample stage unless that is the frame producer; a frame
    stage cannot read frames no stage before it writes; a Chain gives samples."""
    dau = rtamt.Dau1997(48000.0)
    sp = Spectrum(fs=FS)
    exc = Excitation(comp_hz=tuple(sp.coeffs.comp_hz))
    sl = SpecificLoudness(fc=tuple(exc.coeffs.fc))
    with pytest.raises(ValueError, match=r"'excitation' takes frames, but 'gammatone'"):
        Chain([dau["gammatone"], exc])
    with pytest.raises(ValueError, match=r"'specific_loudness' reads frames \['E'\]"):
        check_flows("m", [sp, sl])
    with pytest.raises(ValueError, match="gives frames"):
        Chain([dau["gammatone"], sp])
    check_flows("m", [sp, exc, sl])          # the loudness models' head


@pytest.mark.parametrize("cls,rows", [(rtamt.Glasberg2002, 1), (rtamt.Moore2016, 2)])
def test_the_model_state_is_nested_per_stage(cls, rows):
    """state_dict(): the model's stream layout and one snapshot per stage (``children``, by
    stage name), each with only that stage's arrays; loading it continues exactly."""
    m = cls(FS)
    x = _x(rows, 3000)
    m(x[..., :1700] if rows == 2 else x[0, :1700])
    sd = m.state_dict()
    assert "arrays" not in sd and set(sd["children"]) == {s.name for s in m.stages}
    for s in m.stages:
        assert set(sd["children"][s.name]["arrays"]) == set(s.init_state(1)), s.name
    assert set(sd["children"]["spectrum"]["arrays"]) >= {"hist", "n"}
    twin = cls(FS)
    twin.load_state_dict(pickle.loads(pickle.dumps(sd)))
    rest = x[..., 1700:] if rows == 2 else x[0, 1700:]
    a, b = m(rest), twin(rest)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_a_refused_stage_state_rolls_every_stage_back():
    """One stage's bad arrays: the load is refused naming it, and no stage has changed."""
    m = rtamt.Glasberg2002(FS)
    m(_x(1, 2000)[0])
    sd = m.state_dict()
    other = rtamt.Glasberg2002(FS)
    other(_x(1, 1000, seed=3)[0])
    before = other.state_dict()
    bad = pickle.loads(pickle.dumps(sd))
    bad["children"]["ltl_integrator"]["arrays"]["ltl"][0] = np.nan
    with pytest.raises(RtamtInputError, match="ltl_integrator"):
        other.load_state_dict(bad)
    after = other.state_dict()
    assert after["block"] == before["block"]
    for name, c in before["children"].items():
        for k, v in c["arrays"].items():
            np.testing.assert_array_equal(after["children"][name]["arrays"][k], v)
    bad = pickle.loads(pickle.dumps(sd))
    bad["children"]["spectrum"]["stream"]["rows"] = 2
    with pytest.raises(RtamtInputError, match="'spectrum'"):
        other.load_state_dict(bad)


def test_earlier_release_snapshots_are_migrated_once_and_checked():
    """A flat snapshot of the earlier release loads (migrated into the nested schema), and
    its state_dict() is then the present schema; a flat snapshot of another design or
    with missing arrays is refused; flat snapshots do not stack (load them first)."""
    saved = _v1()["glasberg2002"]["state"]
    m = rtamt.Glasberg2002(FS)
    m.load_state_dict(pickle.loads(pickle.dumps(saved)))
    sd = m.state_dict()
    assert "children" in sd and sd["design"] == m.design_identity()
    assert sd["design"]["fingerprint"] != saved["design"]["fingerprint"]
    np.testing.assert_array_equal(sd["children"]["spectrum"]["arrays"]["hist"],
                                  saved["arrays"]["hist"])
    np.testing.assert_array_equal(sd["children"]["stl_integrator"]["arrays"]["stl"],
                                  saved["arrays"]["stl"])
    with pytest.raises(RtamtInputError, match="other coefficients"):
        rtamt.Glasberg2002(FS, tau_stl=(0.03, 0.05)).load_state_dict(saved)
    short = pickle.loads(pickle.dumps(saved))
    del short["arrays"]["ltl"]
    with pytest.raises(RtamtInputError, match="state arrays"):
        rtamt.Glasberg2002(FS).load_state_dict(short)
    with pytest.raises(RtamtInputError, match="earlier release"):
        rtamt.stack_states([saved, saved])


def test_a_frame_stage_snapshot_of_the_earlier_release_loads():
    """A spectrum snapshot carrying the earlier fingerprint (params with the former
    ``spl_ref`` field, no sample rate) is given the present identity on load."""
    from rtamt.engine import contract as C

    sp = Spectrum(fs=FS)
    sp({"rows": _x(1, 500)})
    sd = sp.state_dict()
    old = dict(sd, design={"name": "spectrum", "fingerprint": C.fingerprint(
        C.with_former_fields(sp.params, spl_ref=100.0), sp.coeffs)})
    twin = Spectrum(fs=FS)
    twin.load_state_dict(old)
    assert twin.state_dict()["design"] == sp.design_identity()
    wrong = dict(sd, design={"name": "spectrum", "fs": FS, "fingerprint": "0" * 16})
    with pytest.raises(RtamtInputError, match="other coefficients"):
        Spectrum(fs=FS).load_state_dict(wrong)


# --- issue 40 items 2-4: the loudness models are Chains headed by their calibration -----------
V2 = pathlib.Path(__file__).resolve().parents[1] / "data" / "loudness_v2_state.pkl.gz"


def _block(cls, n, seed=0, batch=None):
    x = _x(2 if cls is rtamt.Moore2016 else 1, n, seed)
    x = x if cls is rtamt.Moore2016 else x[0]
    return x if batch is None else np.stack([x * (1.0 + 0.5 * i) for i in range(batch)])


@pytest.mark.parametrize("cls", [rtamt.Glasberg2002, rtamt.Moore2016])
def test_the_loudness_models_are_chains_headed_by_their_calibration(cls):
    """``model.stages[0]`` is the calibration stage (also ``model.calibration``,
    ``model['calibration']``), the model is a Chain ending on frames, its input limit is
    the calibration's, the calibration is none of its outputs, and the pure
    ``model.process`` applies it (state nested per stage name, the calibration's empty):
    at ``spl_ref`` 94 it equals the model at 100 on the float64 rows times the gain."""
    from rtamt.ear.calibration import InputCalibration

    m = cls(FS, spl_ref=94.0)
    cal = m.stages[0]
    assert isinstance(m, Chain) and m.frame_outputs and m.stages[-1].flow_out == FRAMES
    assert isinstance(cal, InputCalibration) and cal is m.calibration is m["calibration"]
    assert cal.spl_ref == m.spl_ref == 94.0 and m.input_limit == cal.input_limit
    m.max_spl = 120.0
    assert cal.max_spl == 120.0 and m.input_limit == pytest.approx(10 ** (26 / 20), rel=1e-15)
    assert "calibration" not in m.outputs and "calibration" not in m.output_info()
    x = _block(cls, 700)
    bad = x.copy()
    bad[..., 17] = 25.0                                    # 94 + 28 dB > 120 dB SPL
    with pytest.raises(RtamtInputError, match=r"sample 17.*max_spl 120 dB SPL at spl_ref 94"):
        m(bad)
    assert m.state is None and all(s.state is None for s in m.stages)
    assert set(m(x)) == set(m.outputs)
    assert m.state["calibration"] == {}
    # the pure form: the calibration is a stage inside it
    a, b = cls(FS, spl_ref=94.0), cls(FS, spl_ref=100.0)
    rows = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float64)
    lead, mode = (rows.shape[:1], "stereo") if cls is rtamt.Moore2016 else ((), "mono")
    for model in (a, b):
        model.prepare(x)
    sa = {s.name: s.state for s in a.stages}
    sb = {s.name: s.state for s in b.stages}
    assert sa["calibration"] == {} and list(sa) == [s.name for s in a.stages]
    got = a.process(a.coeffs, sa, rows, lead, mode)
    want = b.process(b.coeffs, sb, rows * a.calibration.gain, lead, mode)
    assert set(got) == set(a.outputs)
    for k in got:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.parametrize("name", ["glasberg2002", "moore2016"])
def test_snapshots_without_a_calibration_child_are_migrated_once(name):
    """Snapshots of the release before the calibration was ``stages[0]``
    (tests/data/loudness_v2_state.pkl.gz, see PROVENANCE.md: nested, no ``calibration``
    child, ``spl_ref`` 94) load and continue with the bits that release computed; the
    model's snapshot is then today's (a calibration child, no arrays, the design identity
    unchanged) and loads as it is; two of them stack (a batch, its calibration child too)
    and continue row for row; a calibration child of another layout is refused, naming it,
    and nothing changes."""
    import hashlib

    with gzip.open(V2, "rb") as f:
        ref = pickle.load(f)[name]
    old = ref["state"]
    assert "calibration" not in old["children"]
    cls = rtamt.MODELS[name]
    rng = np.random.default_rng(40)
    t = np.arange(4000) / FS
    x = (0.05 * np.sin(2 * np.pi * 1000 * t) + 0.01 * rng.standard_normal((2, 2, 4000)))[0]
    rest = (x if cls is rtamt.Moore2016 else x[0])[..., 3000:]
    m = cls(FS, spl_ref=94.0)
    m.load_state_dict(pickle.loads(pickle.dumps(old)))
    sd = m.state_dict()
    got = m(rest)
    assert set(got) == set(ref["sha256"])
    for k, v in ref["next"].items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    for k, digest in ref["sha256"].items():
        assert hashlib.sha256(np.ascontiguousarray(got[k]).tobytes()).hexdigest() == digest, k
    assert list(sd["children"])[0] == "calibration" and sd["design"] == old["design"]
    kid = sd["children"]["calibration"]
    assert kid["arrays"] == {} and kid["block"] == old["block"]
    assert kid["stream"] == {"batch": None, "lead": [], "dtype": "float64", "n_in": 1}
    twin = cls(FS, spl_ref=94.0)
    twin.load_state_dict(sd)                   # today's schema loads as it is
    assert pickle.dumps(twin.state_dict()) == pickle.dumps(sd)
    # a batch of two snapshots of that release, stacked, then loaded
    both = rtamt.stack_states([old, old])
    mb = cls(FS, spl_ref=94.0)
    mb.load_state_dict(both)
    assert mb.state_dict()["children"]["calibration"]["stream"]["batch"] == 2
    yb = mb(np.stack([rest, rest]))
    for k in got:
        for i in range(2):
            np.testing.assert_array_equal(yb[k] if k == "frame_time" else yb[k][i], got[k],
                                          err_msg=k)
    # a calibration child of another layout is refused, naming it; nothing changes
    bad = pickle.loads(pickle.dumps(sd))
    bad["children"]["calibration"]["stream"]["batch"] = 3
    before = pickle.dumps(twin.state_dict())
    with pytest.raises(RtamtInputError, match="'calibration'"):
        twin.load_state_dict(bad)
    assert pickle.dumps(twin.state_dict()) == before


def test_the_block_path_of_the_loudness_models_looks_at_no_array_type():
    """The boundary of a block (input as numpy, float64 rows on the backend's device,
    outputs in the input's dtype and library) is chosen by ``to()``
    (``rtamt.engine.backend.rows_io``); the models' block path tests no array's type or
    backend and converts nothing itself."""
    import ast
    import inspect
    import re
    import textwrap

    path = [getattr(TimeVaryingLoudness, f) for f in
            ("__call__", "process_all", "process", "prepare", "_check", "_start")]
    path += [getattr(c, f) for c in (rtamt.Glasberg2002, rtamt.Moore2016)
             for f in ("_layout", "_pack", "prepare") if f in vars(c)]
    for fn in path:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        if isinstance(tree.body[0], ast.Expr):
            tree.body = tree.body[1:]                   # the docstring
        src = ast.unparse(tree)
        bad = re.findall(r"\b(as_numpy_block|isinstance|type|backend|torch|apply|astype)\b",
                         src)
        assert not bad, (fn.__qualname__, bad)
    from rtamt.engine.backend import HostRows

    m = rtamt.Glasberg2002(FS)
    assert isinstance(m._io, HostRows)
    torch = pytest.importorskip("torch")
    x = _x(1, 600)[0].astype(np.float32)
    got, want = m(torch.from_numpy(x)), rtamt.Glasberg2002(FS)(x)
    for k, v in want.items():
        assert isinstance(got[k], torch.Tensor) and got[k].numpy().dtype == v.dtype, k
        np.testing.assert_array_equal(got[k].numpy(), v, err_msg=k)
    pytest.importorskip("triton")
    m.to("cpu", backend="triton")
    assert m._io.backend == "triton"
    m.to(backend="numba")
    assert isinstance(m._io, HostRows)
