"""Osses2021 chain: composition and the behaviour its configuration documents (block
invariance is in tests/stages/test_invariance.py)."""
from __future__ import annotations

import numpy as np

import rtamt
from rtamt.ear import HeadphoneFilter, MiddleEarFilter
from rtamt.signals import rms_for_spl

FS = 32000.0


def _tone(f, db, seconds=0.6, onset=0.1):
    t = np.arange(int(seconds * FS)) / FS
    x = np.sqrt(2) * rms_for_spl(db) * np.sin(2 * np.pi * f * t)
    x[t < onset] = 0.0
    return x


def test_ear_filters_run_before_the_gammatone():
    x = _tone(3000.0, 60.0)
    m = rtamt.Osses2021(FS)
    out = m.process_all(x)
    hp = np.asarray(HeadphoneFilter(fs=FS)(x))
    me = np.asarray(MiddleEarFilter(fs=FS, preset="jepsen2008")(hp))
    np.testing.assert_array_equal(out["headphone"], hp)
    np.testing.assert_array_equal(out["middleear"], me)
    gt = rtamt.filterbank.Gammatone(fs=FS, basef=80.0)(me)
    np.testing.assert_allclose(out["gammatone"], np.asarray(gt), rtol=0, atol=1e-15)


def test_configuration_matches_the_documented_presets():
    m = rtamt.Osses2021(FS)
    assert m.fc[0] == 80.0 and m.fc[-1] <= 8000.0
    assert np.allclose(np.diff(rtamt.filterbank.erb_number(m.fc)), 1.0)
    assert m["ihc"].coeffs.iterations == 5 and m["ihc"].coeffs.cutoff == 2000.0
    mfc = m.mfc
    assert np.nanmax(mfc) <= 150.0                      # jepsen2008: at most 150 Hz
    c = int(np.argmin(np.abs(m.fc - 1000.0)))
    assert np.nanmax(mfc[c]) > 100.0 and np.nanmax(mfc[0]) <= 0.25 * m.fc[0]
    assert m["modfb"].coeffs.pre_sos is not None        # the 150 Hz pre-filter


def test_overshoot_limit_5_reduces_the_onset_peak_not_the_steady_state():
    """The osses2021 adaptation preset limits the onset overshoot to 5 (Dau1997: 10); the
    steady state of a stationary tone is the same."""
    x = _tone(1000.0, 70.0)
    a5 = rtamt.Osses2021(FS).process_all(x)["adaptloop"]
    a10 = rtamt.Osses2021(FS, adapt={"preset": "dau1997"}).process_all(x)["adaptloop"]
    c = int(np.argmin(np.abs(rtamt.Osses2021(FS).fc - 1000.0)))
    on = slice(int(0.1 * FS), int(0.2 * FS))
    assert a5[c, on].max() < 0.8 * a10[c, on].max()
    late = slice(int(0.5 * FS), None)
    np.testing.assert_allclose(a5[c, late].mean(), a10[c, late].mean(), rtol=0.02)
