"""The stored Moore2016 reference data (tests/data/moore2016_ref/, made by the Cambridge
loudness program's numpy port, see the README.md there) is complete and self-consistent:
shapes, 1 ms frame times aligned with the signals, calibration, the binaural design and
the two AGC constant sets.  It is not compared with rtamt here."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
REF = DATA / "moore2016_ref" / "moore2016_ref.npz"
TABLE7 = np.loadtxt(DATA / "ansi_s34_2007_table7.csv", delimiter=",", skiprows=1)
CONSTS = ("2018", "2016")
VERSIONS = ("mono", "diotic", "dichotic")
I_EQUAL = 2.0 / (1.0 + (2.0 / (np.e + 1.0 / np.e)) ** 1.5978)   # inhibition, equal patterns


@pytest.fixture(scope="module")
def ref():
    with np.load(REF) as d:
        data = {k: d[k] for k in d.files}
    data["meta"] = json.loads(str(data["meta"]))
    return data


def _recipe(ref, name):
    return next(r for r in ref["meta"]["recipes"] if r["name"] == name)


def _steady(ref, case, const="2018", what="stl_bin", lo=0.3, hi=0.9):
    """Median of a tone's binaural STL/LTL over its steady part (lo..hi s)."""
    t = ref[f"{case}__t"]
    return float(np.median(ref[f"{case}__{const}__{what}"][(t >= lo) & (t <= hi)]))


def test_provenance_and_calibration(ref):
    m = ref["meta"]
    assert len(m["commit"]) == 40 and int(m["commit"], 16) >= 0
    assert m["fs"] == 32000 and m["hop_ms"] == 1.0
    assert m["spl_ref"] == pytest.approx(m["db_max"] + 10.0 * np.log10(2.0), abs=1e-12)
    assert set(m["constants"]) == set(CONSTS)
    assert m["constants"]["2018"] == {"st": [0.045, 0.033], "lt": [0.01, 0.00133]}
    assert m["constants"]["2016"] == {"st": [0.045, 0.02], "lt": [0.01, 0.0005]}
    names = {r["name"] for r in m["recipes"]}
    assert {"tone1k_40dB", "tone1k_80dB", "pip1k_70dB", "amnoise_60dB"} <= names
    assert len(m["cases"]) == 3 * len(names)
    assert REF.stat().st_size < 2e6


def test_every_case_has_consistent_shapes_and_values(ref):
    for case in ref["meta"]["cases"]:
        name, version = case.split("__")
        F = int(round(_recipe(ref, name)["dur"] * 1000)) + 1     # frames 0 .. dur in ms
        t = ref[f"{case}__t"]
        assert t.shape == (F,) and t[0] == 0.0
        np.testing.assert_allclose(np.diff(t), 1e-3, rtol=0, atol=1e-12)
        assert ref[f"{case}__inst_mon"].shape == (2, F)
        for c in CONSTS:
            k = f"{case}__{c}"
            stl, ltl = ref[f"{k}__stl"], ref[f"{k}__ltl"]
            assert stl.shape == ltl.shape == (2, F), k
            assert ref[f"{k}__stl_bin"].shape == ref[f"{k}__ltl_bin"].shape == (F,)
            for a in (stl, ltl, ref[f"{k}__stl_bin"], ref[f"{k}__ltl_bin"]):
                assert np.all(np.isfinite(a)) and np.all(a >= 0), k
            np.testing.assert_allclose(stl.sum(0), ref[f"{k}__stl_bin"], rtol=1e-6, atol=1e-9)
            np.testing.assert_allclose(ltl.sum(0), ref[f"{k}__ltl_bin"], rtol=1e-6, atol=1e-9)
            assert float(ref[f"{k}__peak_ltl"]) == pytest.approx(
                float(ref[f"{k}__ltl_bin"].max()), rel=1e-6)
            assert stl[0].max() > 0.05, k                      # the left ear always hears it
            if version == "mono":
                assert not stl[1].any() and not ltl[1].any(), k
            elif version == "diotic":
                np.testing.assert_array_equal(stl[0], stl[1])
            else:
                assert np.all(stl[0] >= stl[1]) and stl[1].max() > 0, k


def test_loudness_grows_with_level_and_matches_the_table_roughly(ref):
    s = {L: _steady(ref, f"tone1k_{L}dB__diotic") for L in (40, 60, 80)}
    assert s[40] < s[60] < s[80]
    # the reference's calibration: within -9 % .. +1 % of ANSI S3.4-2007 Table 7 (issue 41)
    for L, v in s.items():
        assert -0.09 < v / float(TABLE7[TABLE7[:, 0] == L, 1][0]) - 1 < 0.01, (L, v)
    for c in CONSTS:    # long-term loudness settles on the short-term one for a steady tone
        for L in (40, 60, 80):
            case = f"tone1k_{L}dB__diotic"
            assert _steady(ref, case, c, "ltl_bin", 0.8, 0.9) == pytest.approx(
                _steady(ref, case, c, "stl_bin", 0.8, 0.9), rel=0.01)


@pytest.mark.parametrize("name", ["tone1k_40dB", "tone1k_80dB", "tone250_60dB", "tone4k_60dB"])
def test_binaural_design_mono_diotic_dichotic(ref, name):
    mono, dio, dich = (ref[f"{name}__{v}__2018__stl_bin"] for v in VERSIONS)
    on = mono > 1e-3
    # equal patterns inhibit each other by I = 1.33326, a silent ear not at all
    np.testing.assert_allclose(dio[on] / mono[on], 2.0 / I_EQUAL, rtol=1e-5)
    steady = slice(300, 900)
    assert np.all(mono[steady] < dich[steady]) and np.all(dich[steady] < dio[steady])



def test_frame_times_are_window_centres(ref):
    """The pip (onset 300 ms, 100 ms) gives an instantaneous loudness symmetric about its
    centre, 350 ms, and crossing half its maximum within a few ms of onset and offset."""
    rec = _recipe(ref, "pip1k_70dB")
    t_on, t_off = rec["onset"], rec["onset"] + rec["pip_dur"]
    t = ref["pip1k_70dB__mono__t"]
    inst = ref["pip1k_70dB__mono__inst_mon"][0]
    above = t[inst > 0.5 * inst.max()]
    assert abs(above[0] - t_on) <= 0.005 and abs(above[-1] - t_off) <= 0.005
    assert abs(0.5 * (above[0] + above[-1]) - 0.5 * (t_on + t_off)) <= 0.0011
    assert np.all(inst[t < t_on - 0.07] == 0) and np.all(inst[t > t_off + 0.07] == 0)


def test_2016_constants_release_more_slowly(ref):
    """Same attacks in both sets, so the pip's onset is nearly the same (a few channels
    release while the onset builds); after the offset the 2016 short-term (release 0.02/ms)
    and long-term (0.0005/ms) loudness decay more slowly than the 2018 ones (0.033,
    0.00133): once the instantaneous loudness is zero (the reference drops components
    below -30 dB SPL), each falls by exactly its release factor per frame."""
    case = "pip1k_70dB__dichotic"
    t = ref[f"{case}__t"]
    s18, s16 = ref[f"{case}__2018__stl_bin"], ref[f"{case}__2016__stl_bin"]
    l18, l16 = ref[f"{case}__2018__ltl_bin"], ref[f"{case}__2016__ltl_bin"]
    onset = (t < 0.33) & (s18 > 0.05)
    assert onset.sum() > 20
    np.testing.assert_allclose(s16[onset], s18[onset], rtol=0.01)
    assert s16.max() == pytest.approx(s18.max(), rel=0.01)
    after = t > 0.41
    assert np.all(s16[after] > s18[after]) and np.all(l16[after] > l18[after])
    assert l16[-1] / l16.max() > 0.5 > 0.3 > l18[-1] / l18.max()
    assert not ref[f"{case}__inst_mon"][:, t > 0.45].any()
    for st, lt, c in ((s18, l18, "2018"), (s16, l16, "2016")):
        a_st, a_lt = (ref["meta"]["constants"][c][k][1] for k in ("st", "lt"))
        gone = (t[1:] > 0.45) & (st[:-1] > 1e-3)      # (far below, the 1e-13 guard in the
        assert gone.sum() > 100                          # inhibition ratio shows)
        np.testing.assert_allclose(st[1:][gone] / st[:-1][gone], 1 - a_st, atol=1e-5)
        tail = t[1:] > 1.0                                 # STL negligible against LTL
        np.testing.assert_allclose(lt[1:][tail] / lt[:-1][tail], 1 - a_lt, atol=1e-6)


def test_specific_loudness_frames_sum_to_the_loudness(ref):
    frames = ref["meta"]["spec_frames"]
    assert ref["cam"].shape == (150,)
    for case, idx in frames.items():
        np.testing.assert_array_equal(ref[f"{case}__spec_frames"], idx)
        inst = ref[f"{case}__spec_inst"]
        assert inst.shape == (len(idx), 2, 150) and np.all(inst >= 0)
        np.testing.assert_allclose(0.25 * inst.sum(-1),
                                   ref[f"{case}__inst_mon"][:, idx].T, rtol=1e-5, atol=1e-8)
        for c in CONSTS:
            st = ref[f"{case}__{c}__spec_st"]
            assert st.shape == (len(idx), 2, 150) and np.all(st >= 0)
            per_ear = ref[f"{case}__{c}__stl"][:, idx].T        # (n, 2), after inhibition
            version = case.split("__")[1]
            if version == "mono":            # nothing inhibits the left ear
                np.testing.assert_allclose(0.25 * st[:, 0].sum(-1), per_ear[:, 0],
                                           rtol=1e-5, atol=1e-8)
            elif version == "diotic":
                np.testing.assert_allclose(0.25 * st.sum(-1) / I_EQUAL, per_ear,
                                           rtol=1e-5, atol=1e-8)
            else:                            # inhibition only lowers the loudness
                assert np.all(0.25 * st.sum(-1) >= per_ear * (1 - 1e-6))
