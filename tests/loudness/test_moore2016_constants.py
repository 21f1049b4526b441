"""Moore2016's AGC time constants by name (issue 41): ``constants='2018'`` (default; Moore,
Jervis, Harries & Schlittenlacher 2018, JASA 143, 1504-1513) and ``'2016'`` (Moore,
Glasberg, Varathanathan & Schlittenlacher 2016, Trends in Hearing 20): the step responses
of the model's own AGC stages reach 1 - 1/e within one frame of each published time
constant, and against the stored reference data (tests/data/moore2016_ref) rtamt's
long-term loudness after a tone pip decays in the reference's order."""
from __future__ import annotations

import numpy as np
import pytest

from rtamt.loudness.agc import agc
from rtamt.models import Moore2016

import _moore2016ref

#: the papers' per-ms coefficients (attack, release), short-term then long-term
PUBLISHED = {"2018": ((0.045, 0.033), (0.01, 0.00133)),
             "2016": ((0.045, 0.02), (0.01, 0.0005))}


def _tau_ms(alpha):
    return -1.0 / np.log(1.0 - alpha)


def _crossing(step_up: bool, attack: float, release: float, n: int) -> int:
    """Frames until the AGC's step response (0 -> 1, or settled 1 -> 0) has covered
    1 - 1/e of the step; the AGC kernel the model's stages run."""
    x = np.full((n, 1), 1.0 if step_up else 0.0)
    y = np.array([0.0 if step_up else 1.0])
    out = np.empty_like(x)
    agc(x, y, attack, release, out)
    moved = out[:, 0] if step_up else 1.0 - out[:, 0]
    return int(np.argmax(moved >= 1.0 - np.exp(-1.0))) + 1


@pytest.mark.parametrize("name", ["2018", "2016"])
def test_step_responses_reach_1_minus_1_over_e_at_the_published_taus(name):
    m = Moore2016(32000.0, constants=name)
    assert m.constants == name
    assert m.alpha_st == pytest.approx(PUBLISHED[name][0], rel=1e-12)
    assert m.alpha_lt == pytest.approx(PUBLISHED[name][1], rel=1e-12)
    agc_st, binaural = m["specific_loudness_agc"], m["binaural_inhibition"]
    pairs = ((agc_st.params.attack, agc_st.params.release, PUBLISHED[name][0]),
             (binaural.params.attack, binaural.params.release, PUBLISHED[name][1]))
    frame_ms = m.hop / m.fs * 1e3
    for attack, release, (a_pub, r_pub) in pairs:
        for up, a_pub_k in ((True, a_pub), (False, r_pub)):
            tau = _tau_ms(a_pub_k)
            k = _crossing(up, attack, release, int(3 * tau) + 10)
            assert abs(k * frame_ms - tau) <= frame_ms, (name, up, k, tau)


def test_default_is_2018_and_raw_coefficients_stay():
    d = Moore2016(32000.0)
    assert d.constants == "2018"
    assert d.alpha_st == Moore2016(32000.0, constants="2018").alpha_st
    raw = Moore2016(32000.0, alpha_st=(0.045, 0.02), alpha_lt=(0.01, 0.0005))
    assert raw.constants is None
    assert raw.alpha_st == Moore2016(32000.0, constants="2016").alpha_st
    assert raw.alpha_lt == Moore2016(32000.0, constants="2016").alpha_lt
    assert Moore2016(32000.0, alpha_lt=(0.02, 0.001)).alpha_st == d.alpha_st


def test_name_and_raw_values_together_is_an_error():
    with pytest.raises(ValueError, match="by name .* or as raw"):
        Moore2016(32000.0, constants="2016", alpha_st=(0.045, 0.02))
    with pytest.raises(ValueError, match="unknown constants '2017'"):
        Moore2016(32000.0, constants="2017")


def test_ltl_decay_after_a_pip_follows_the_references_ordering():
    """After the pip's offset (400 ms) the 2016 constants (slower releases) keep the
    long-term loudness higher than the 2018 ones, in the reference and in rtamt, and by
    a ratio that grows alike over the tail."""
    data = _moore2016ref.load()
    meta = data["meta"]
    case = "pip1k_70dB__dichotic"
    t_ref = data[f"{case}__t"]
    ref = {c: data[f"{case}__{c}__ltl_bin"].astype(np.float64) for c in PUBLISHED}
    x = _moore2016ref.signal(data, case)
    got = {}
    for c in PUBLISHED:
        out = Moore2016(32000.0, constants=c, spl_ref=meta["spl_ref"])(x)
        got[c] = (np.asarray(out["frame_time"]), np.asarray(out["ltl"]))
    t = got["2018"][0]
    tail = np.round(np.arange(0.45, 1.45, 0.05), 6)
    i_ref = np.searchsorted(np.round(t_ref, 6), tail)
    i_got = np.searchsorted(np.round(t, 6), tail)
    r_ref = ref["2016"][i_ref] / ref["2018"][i_ref]
    r_got = got["2016"][1][i_got] / got["2018"][1][i_got]
    assert np.all(r_ref > 1) and np.all(r_got > 1)
    assert np.all(np.diff(r_ref) > 0) and np.all(np.diff(r_got) > 0)
    # both decay per frame by the release factor once the pip's loudness is gone
    np.testing.assert_allclose(r_got[-1], r_ref[-1], rtol=0.05)
