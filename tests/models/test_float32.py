"""float32 streams track float64 (Dau1997, AMT 0.9.10 configuration).

Block invariance proves a dtype consistent with itself; this bounds how far float32
processing is from float64 on the same input, stage by stage, relative to the stage's peak.
Measured when written (1 s of ``make_signal``): gammatone 6.8e-7, IHC 6.2e-7, adaptation
4.2e-6, modulation band-pass bank 5.4e-6, its 2.5 Hz low-passes 9.3e-4.  The low-pass
figure is the float32 rounding of a second-order section whose poles lie 2e-4 inside the
unit circle (transposed direct form II, state stored in the stream's dtype); the band-pass
bank runs in float32 arithmetic and stays near the adaptation stage's error.
"""
import numpy as np
import pytest

from rtamt.models import Dau1997

from _helpers import FS, make_signal

BOUND = {"gammatone": 4e-6, "ihc": 4e-6, "adaptloop": 2e-5}


@pytest.fixture(scope="module")
def outputs():
    x = make_signal(int(FS))
    return Dau1997(FS).process_all(x), Dau1997(FS).process_all(x.astype(np.float32))


@pytest.mark.parametrize("stage", sorted(BOUND))
def test_float32_stage_tracks_float64(outputs, stage):
    o64, o32 = outputs
    assert o32[stage].dtype == np.float32
    err = np.abs(o32[stage].astype(np.float64) - o64[stage]).max() / np.abs(o64[stage]).max()
    assert err <= BOUND[stage], err


def test_float32_modulation_filterbank_tracks_float64(outputs):
    o64, o32 = outputs
    a, b = o64["modfb"], o32["modfb"].astype(np.float64)
    n_lp = Dau1997(FS)["modfb"].coeffs.fc.size        # the low-passes come first
    peak = np.abs(a).max()
    bank = np.abs(b[n_lp:] - a[n_lp:]).max() / peak
    lowpass = np.abs(b[:n_lp] - a[:n_lp]).max() / peak
    assert bank <= 3e-5, bank
    assert lowpass <= 5e-3, lowpass
