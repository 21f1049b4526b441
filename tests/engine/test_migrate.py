"""Snapshots of earlier releases are migrated once on load (rtamt.engine.migrate, issue 40
item 3): the stages that lost ``spl_ref`` to the calibration stage carry no
``former_params``, their fingerprints are today's, and a snapshot with the fingerprint the
earlier release wrote still loads and continues exactly; the models' snapshots without a
``calibration`` child (tests/data/golden_states.pkl.gz, every model) load too."""
from __future__ import annotations

import gzip
import pickle

import _golden
import numpy as np
import pytest

import rtamt
from rtamt.adaptation import AdaptLoop
from rtamt.engine import migrate
from rtamt.engine.contract import RtamtInputError
from rtamt.nonlinear import BrokenStick

#: fingerprints the release before issue 40 wrote (recorded on this code's predecessor)
FORMER = {"adaptloop": "48df517e29e85634", "brokenstick": "e5d27c0313e94ae9"}


def _with_fp(sd, fp):
    return {**sd, "design": {**sd["design"], "fingerprint": fp}}


@pytest.mark.parametrize("make,name", [(lambda: AdaptLoop(fs=48000.0), "adaptloop"),
                                       (lambda: BrokenStick(), "brokenstick")])
def test_former_fingerprint_is_recognised_and_migrated(make, name):
    st = make()
    assert migrate.former_fingerprint(st) == FORMER[name]
    assert st.design_identity()["fingerprint"] != FORMER[name]
    for lead in ((), (4,)):         # one channel (the recorded fingerprint), and four
        st = make()
        x = np.random.default_rng(3).standard_normal(lead + (300,)) * 0.1
        st(x[..., :100])
        fp = FORMER[name] if not lead else migrate.former_fingerprint(st, st.coeffs)
        old = _with_fp(st.state_dict(), fp)          # as the earlier release wrote it
        ref = st(x[..., 100:])
        again = make()
        again.load_state_dict(old)
        np.testing.assert_array_equal(again(x[..., 100:]), ref)
        assert again.state_dict()["design"] == st.state_dict()["design"]


def test_other_fingerprints_are_still_refused():
    st = AdaptLoop(fs=48000.0)
    st(np.zeros((2, 50)))
    with pytest.raises(RtamtInputError, match="other coefficients"):
        AdaptLoop(fs=48000.0).load_state_dict(_with_fp(st.state_dict(), "0123456789abcdef"))
    sd = AdaptLoop(fs=44100.0)
    with pytest.raises(RtamtInputError):     # the former fingerprint of another design
        sd.load_state_dict(_with_fp(st.state_dict(), FORMER["adaptloop"]))


@pytest.mark.parametrize("name", ["dau1997", "osses2021", "king2019", "paulick2024"])
def test_model_snapshots_of_the_former_release_are_migrated(name):
    """The recorded snapshot (no calibration child, the former fingerprints) loads; the
    state written after it is today's form and loads into a fresh model as it is."""
    with gzip.open(_golden.STATES, "rb") as f:
        old = pickle.loads(pickle.load(f)[name])
    assert "calibration" not in old["children"]
    fs = _golden.MODELS[name]
    m = rtamt.MODELS[name](fs)
    m.load_state_dict(old)
    new = m.state_dict()
    assert list(new["children"])[0] == "calibration"
    assert new["children"]["calibration"]["arrays"] == {}
    assert new["design"] == m.design_identity() != old["design"]
    m2 = rtamt.MODELS[name](fs)
    assert migrate.chain_state(m2, new) is new           # nothing to migrate
    m2.load_state_dict(new)
    x = _golden.signal(fs, 0.02)
    np.testing.assert_array_equal(m(x), m2(x))
    # a former snapshot of another design is refused, naming what differs
    with pytest.raises(RtamtInputError):
        rtamt.MODELS[name](fs, spl_ref=90.0).load_state_dict(old)
