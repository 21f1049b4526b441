"""King et al. (2019) stages and chain: analytic checks (block invariance is in
tests/stages/test_invariance.py)."""
from __future__ import annotations

import numpy as np
import pytest

from rtamt.adaptation.highpass import AdaptHighpass
from rtamt.models.king2019 import King2019
from rtamt.modulation.king2019 import KingModFilterbank, king_centre_frequencies
from rtamt.signals import rms_for_spl

FS = 16000.0


def test_centre_frequencies_touch_at_their_3db_edges():
    mfc = king_centre_frequencies(2.0, 150.0, 1.0)
    np.testing.assert_allclose(mfc, [2.0, 5.2360680, 13.7082039, 35.8885438, 93.9574275],
                               rtol=1e-7)
    st = KingModFilterbank(fs=FS, fc=(1000.0,))
    e = st.coeffs.edges
    np.testing.assert_allclose(e[1:, 0], e[:-1, 1], rtol=1e-12)         # adjacent edges meet
    np.testing.assert_allclose(np.sqrt(e[:, 0] * e[:, 1]), mfc, rtol=1e-12)
    np.testing.assert_allclose(e[:, 1] - e[:, 0], mfc / 1.0, rtol=1e-12)
    np.testing.assert_allclose(king_centre_frequencies(1.0, 200.0, 1.0, nmod=6)[[0, -1]],
                               [1.0, 200.0])


def test_modulation_filters_peak_at_mfc_and_are_3db_down_at_edges():
    st = KingModFilterbank(fs=FS, fc=(1000.0,), qfactor=1.0)
    mfc, e = st.coeffs.mfc, st.coeffs.edges
    n = 1 << 19                                            # 0.03 Hz resolution
    x = np.zeros(n)
    x[0] = 1.0
    H = np.abs(np.fft.rfft(np.asarray(st(x)), axis=-1))   # (M, n/2+1)
    fr = np.fft.rfftfreq(n, 1 / FS)
    for m in range(mfc.size):
        def g(f, m=m):
            return 20 * np.log10(np.interp(f, fr, H[m]))

        assert abs(g(mfc[m])) < 0.02, m
        assert abs(g(e[m, 0]) + 3.0103) < 0.05 and abs(g(e[m, 1]) + 3.0103) < 0.05, m
        assert fr[np.argmax(H[m])] == pytest.approx(mfc[m], rel=0.02)


def test_adaptation_highpass_3db_at_cutoff_and_blocks_dc():
    hp = AdaptHighpass(fs=FS, cutoff=3.0)
    n = 1 << 18
    x = np.zeros(n)
    x[0] = 1.0
    H = np.abs(np.fft.rfft(np.asarray(hp(x))))
    fr = np.fft.rfftfreq(n, 1 / FS)
    assert 20 * np.log10(np.interp(3.0, fr, H)) == pytest.approx(-3.0103, abs=0.02)
    assert 20 * np.log10(np.interp(300.0, fr, H)) == pytest.approx(0.0, abs=0.01)
    step = np.asarray(AdaptHighpass(fs=FS)(np.ones(int(3 * FS))))
    assert step[0] > 0.99 and abs(step[-1]) < 1e-3          # the DC decays (tau = 53 ms)


def test_compression_keeps_sign_linear_below_knee():
    m = King2019(FS, fc=(1000.0,), spl_ref=100.0)
    comp = m["compression"]
    knee = 10 ** ((30.0 - 100.0) / 20)
    x = np.array([[-10 * knee, -0.5 * knee, 0.0, 0.5 * knee, knee, 10 * knee, 100 * knee]])
    y = np.asarray(comp(x))[0]
    np.testing.assert_allclose(y[1:5], x[0, 1:5], rtol=1e-15)
    np.testing.assert_allclose(y[[5, 6]], knee * np.array([10.0, 100.0]) ** 0.3, rtol=1e-12)
    assert y[0] == -y[5]                                    # odd: the sign is kept


def test_am_tone_peaks_in_the_matching_modulation_filter():
    """A 4 kHz tone, 100 % AM at 13.7 Hz: in the channel at 4 kHz, the modulation filter at
    13.7 Hz carries the most power; a pure tone gives far less power at 13.7 Hz."""
    fs = 32000.0
    t = np.arange(int(1.5 * fs)) / fs
    car = np.sin(2 * np.pi * 4000 * t)

    def power(x):
        m = King2019(fs, basef=4000.0)
        y = np.asarray(m(x))[:, int(0.5 * fs):]            # skip the onset
        C = m.fc.size
        p = (y ** 2).mean(axis=-1).reshape(-1, C)           # (M, C)
        return p[:, int(np.argmin(np.abs(m.fc - 4000.0)))], m
    am = (1 + np.sin(2 * np.pi * 13.7082 * t)) * car
    p_am, m = power(rms_for_spl(65) * am / np.sqrt(np.mean(am ** 2)))
    p_tone, _ = power(rms_for_spl(65) * np.sqrt(2) * car)
    assert m.fc.size == 5 and int(np.argmax(p_am)) == 2
    assert p_am[2] > 100 * p_tone[2]
