"""Dau1997 (config 'amt0910') against outputs of the original AMT 0.9.10 (GNU Octave).

Reference data: tests/data/*.npz (see tests/data/PROVENANCE.md).  Outputs there are the
full-rate AMT outputs decimated by 8 (samples 0, 8, 16, ...) and stored as float32.
"""
from __future__ import annotations

import numpy as np
import pytest

import rtamt
from rtamt.modulation import to_padded

from _helpers import load_ref, max_rel_err, run_blocks

SIGNALS = ["tone1k_60dB", "noise_70dB", "am4k8Hz_65dB"]
STAGES = ["gammatone", "ihc", "adaptloop", "modfb"]
TOL = 1e-5  # relative RMS error per stage (the references are float32)


@pytest.fixture(scope="module", params=SIGNALS)
def ref(request):
    d = load_ref(request.param)
    assert float(d["fs"]) == 48000.0
    assert int(d["stride"]) == 8
    return d


def _padded_outputs(model, outs, stride):
    res = {}
    for k in STAGES:
        y = np.asarray(outs[k])[..., ::stride]
        if k == "modfb":
            y = to_padded(y, model["modfb"].coeffs)
        res[k] = y
    return res


def _rel_rms(y, r):
    ok = ~np.isnan(r)
    y = np.asarray(y, dtype=np.float64)[ok]
    r = np.asarray(r, dtype=np.float64)[ok]
    assert np.sqrt(np.mean(r ** 2)) > 0
    return float(np.sqrt(np.mean((y - r) ** 2) / np.mean(r ** 2)))


def _check_against_ref(model, outs, d):
    stride = int(d["stride"])
    got = _padded_outputs(model, outs, stride)
    errs = {}
    for k in STAGES:
        r = d[k]
        y = got[k]
        assert y.shape == r.shape, (k, y.shape, r.shape)
        assert np.array_equal(np.isnan(y), np.isnan(r)), f"{k}: NaN pattern differs"
        errs[k] = _rel_rms(y, r)
    bad = {k: e for k, e in errs.items() if not e <= TOL}
    assert not bad, f"relative RMS error above {TOL}: {bad} (all: {errs})"


def test_stage_outputs_match_amt(ref):
    x = ref["x"].astype(np.float64)
    model = rtamt.Dau1997(48000.0)
    assert model.config == "amt0910"
    outs = model.process_all(x)
    assert set(outs) == set(STAGES)
    for k in STAGES:
        assert outs[k].dtype == np.float64
        assert outs[k].shape[-1] == x.size
    _check_against_ref(model, outs, ref)


def test_centre_frequencies_match_amt(ref):
    model = rtamt.Dau1997(48000.0)
    fc_ref = ref["fc"]
    assert model.fc.shape == fc_ref.shape
    np.testing.assert_allclose(model.fc, fc_ref, rtol=1e-9, atol=0)
    # one channel sits exactly on basef = 1000 Hz
    assert np.min(np.abs(model.fc - 1000.0)) < 1e-9
    mfc_ref = ref["mfc"]
    assert model.mfc.shape == mfc_ref.shape
    assert np.array_equal(np.isnan(model.mfc), np.isnan(mfc_ref))
    # equal up to floating-point rounding of the geometric series (AMT computes it in
    # MATLAB arithmetic; values agree to ~1e-15 relative)
    np.testing.assert_allclose(model.mfc, mfc_ref, rtol=1e-12, atol=0, equal_nan=True)


def test_blocks_of_441_match_amt_and_whole(ref):
    x = ref["x"].astype(np.float64)
    n = x.size
    sizes = [441] * (n // 441) + ([n % 441] if n % 441 else [])
    whole_model = rtamt.Dau1997(48000.0)
    whole = whole_model.process_all(x)
    model = rtamt.Dau1997(48000.0)
    blk = run_blocks(model, x, sizes, key=True)
    for k in STAGES:
        assert blk[k].shape == whole[k].shape
        assert max_rel_err(blk[k], whole[k]) <= 1e-12, k
    _check_against_ref(model, blk, ref)
