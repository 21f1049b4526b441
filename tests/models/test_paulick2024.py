"""Paulick2024 (CASP) chain: units, rates and level behaviour (block invariance, incl.
blocks that do not divide the resampling ratio, is in tests/stages/test_invariance.py; the
stages' own checks are in filterbank/test_drnl.py, ihc/test_ihc_paulick2024.py,
resample/test_resample.py, ear/test_ear.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import rtamt
from rtamt.models.paulick2024 import MINLVL, minlvl_for, minlvl_grid

FS = 44100.0


def _tone(f, db, seconds, spl_ref=100.0):
    t = np.arange(int(seconds * FS)) / FS
    return np.sqrt(2) * 10 ** ((db - spl_ref) / 20) * np.sin(2 * np.pi * f * t)


def test_calibration_rates_and_lengths():
    m = rtamt.Paulick2024(FS, spl_ref=94.0)
    x = _tone(1000.0, 94.0, 0.05, spl_ref=94.0)     # digital RMS 1 = 94 dB SPL = 1.0024 Pa
    # the model turns digital units into Pa itself: 94 dB SPL re 20 uPa = 1.0024 Pa
    assert m.input_gain == pytest.approx(1.0023744672545452, rel=1e-12)
    p = x
    assert m.fc.size == 50 and m.fc[0] == pytest.approx(250.0) and m.fc[-1] == pytest.approx(8000.0)
    assert m.fs_mod == FS / 4 and m["modfb"].coeffs.fs == FS / 4
    lengths = []
    for n in (1, 2, 3, 5, 7, 4, 1000, 13):                  # blocks that do not divide 4
        out = m.process_all(p[:n])
        lengths.append(out["resample"].shape[-1])
        assert out["modfb"].shape[-1] == out["resample"].shape[-1]
        assert out["ihc"].shape[-1] == n
    tot = 0
    for i, n in enumerate((1, 2, 3, 5, 7, 4, 1000, 13)):
        tot += n
        assert sum(lengths[:i + 1]) == math.ceil(tot / 4)


@pytest.mark.parametrize("fs, factor", [(22050.0, 2), (24000.0, 2), (32000.0, 2),
                                        (44100.0, 4), (48000.0, 4), (96000.0, 8)])
def test_modulation_stage_runs_at_11025_hz_or_above(fs, factor):
    """The default decimation keeps the modulation stage at or above 44.1 kHz / 4 (issue 29:
    a fixed factor 4 ran it at 5.5 kHz for 22.05 kHz input, without a word)."""
    m = rtamt.Paulick2024(fs, n_channels=4)
    assert m.resample_factor == factor and m.fs_mod == fs / factor >= 11025.0
    assert m["modfb"].coeffs.fs == m.fs_mod == m.output_info()["modfb"]["rate"]
    out = m.process_all(_tone(1000.0, 60.0, 0.01)[:333])
    assert out["modfb"].shape[-1] == out["resample"].shape[-1] == math.ceil(333 / factor)


def test_resample_factor_below_22050_hz_and_given_explicitly():
    m = rtamt.Paulick2024(16000.0, n_channels=4, fhigh=4000.0)
    assert m.resample_factor == 2 and m.fs_mod == 8000.0     # no factor >= 2 keeps 11025 Hz
    m = rtamt.Paulick2024(22050.0, n_channels=4, resample_factor=4)    # AMT's fixed factor
    assert m.fs_mod == 5512.5 and m["modfb"].coeffs.fs == 5512.5
    for bad in (1, 0, 2.5, True, "4"):
        with pytest.raises(ValueError, match="resample_factor must be an integer >= 2"):
            rtamt.Paulick2024(22050.0, n_channels=4, resample_factor=bad)


def test_minimum_levels_follow_the_published_table():
    g = minlvl_grid()
    assert g.size == MINLVL.size == 50
    assert g[0] == pytest.approx(250.0) and g[-1] == pytest.approx(8000.0)
    m = rtamt.Paulick2024(FS)
    np.testing.assert_allclose(m["adaptloop"].coeffs.minlvl, minlvl_for(m.fc), rtol=1e-12)
    np.testing.assert_allclose(minlvl_for(m.fc), MINLVL, rtol=1e-12)   # same grid


def test_silence_rests_and_a_tone_excites_its_place():
    m = rtamt.Paulick2024(FS)
    sil = m.process_all(np.zeros(int(0.2 * FS)))
    assert np.abs(sil["ihc"]).max() < 1e-12                 # pre-charged: at rest
    assert np.abs(sil["adaptloop"]).max() < 1e-6
    m.reset()
    out = m.process_all(_tone(2000.0, 60.0, 0.6))
    late = out["adaptloop"][:, -int(0.2 * FS):].mean(axis=1)
    c = int(np.argmax(late))
    assert abs(m.fc[c] - 2000.0) / 2000.0 < 0.15, m.fc[c]
    # excitation spreads upwards (the adaptation loops compress the high channels' tails to
    # a fraction of the peak) but hardly downwards: an octave below, < 2 % of the peak
    assert late[m.fc < 1000.0].max() < 0.02 * late[c]
    assert late[m.fc > 4000.0].max() < 0.5 * late[c]


def test_drnl_compresses_the_on_frequency_growth():
    """40 dB more input at CF gives much less than 40 dB more basilar-membrane output in
    the mid-level range (the DRNL's broken stick), but about 40 dB off frequency."""
    def bm_db(f, db):
        m = rtamt.Paulick2024(FS)
        y = m.process_all(_tone(f, db, 0.15))["drnl"]
        c = int(np.argmin(np.abs(m.fc - 4000.0)))
        return 20 * np.log10(np.sqrt(np.mean(y[c, -int(0.05 * FS):] ** 2)))
    on = bm_db(4000.0, 80.0) - bm_db(4000.0, 40.0)
    off = bm_db(2000.0, 90.0) - bm_db(2000.0, 50.0)
    assert on < 25.0, on
    assert off > 34.0, off
