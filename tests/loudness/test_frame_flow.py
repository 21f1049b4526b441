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
