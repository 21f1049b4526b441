"""Analytic properties of the stages, checked by driving the streaming stages with
synthetic signals (and, for the modulation filters, also from the designed coefficients).

Expected values come from the equations (AMT 0.9.10 / Dau et al. 1996a, 1997a) and from
first principles, not from rtamt's own output.
"""
from __future__ import annotations

import numpy as np
import pytest

import rtamt
from rtamt import RtamtInputError
from rtamt.adaptation import AdaptLoop
from rtamt.filterbank import Gammatone
from rtamt.ihc import IHCEnvelope
from rtamt.modulation import ModFilterbank
from rtamt.nonlinear import BrokenStick, PowerCompression


def _sine_fit(y, f, t):
    """Least-squares fit y ~ a cos + b sin + dc; returns (amplitude, dc)."""
    A = np.stack([np.cos(2 * np.pi * f * t), np.sin(2 * np.pi * f * t), np.ones_like(t)], 1)
    c, *_ = np.linalg.lstsq(A, y, rcond=None)
    return float(np.hypot(c[0], c[1])), float(c[2])


def _db(a):
    return 20.0 * np.log10(a)


# ----------------------------------------------------------------------------------------
# Gammatone: 0 dB at fc


def test_gammatone_unit_gain_at_centre_frequency():
    fs = 48000.0
    fcs = (100.0, 250.0, 500.0, 1000.0, 2000.0, 4000.0, 7000.0)
    T = int(0.3 * fs)
    t = np.arange(T) / fs
    x = np.stack([np.cos(2 * np.pi * f * t) for f in fcs])  # batch: one tone per row
    gt = Gammatone(fs=fs, fc=fcs)
    y = gt(x)
    assert y.shape == (len(fcs), len(fcs), T)
    seg = slice(int(0.2 * fs), T)  # steady state (slowest channel: tau ~ 4.4 ms)
    for i, f in enumerate(fcs):
        a, _ = _sine_fit(y[i, i, seg], f, t[seg])
        assert abs(_db(a)) <= 0.05, f"channel {f} Hz: gain {_db(a):.4f} dB at fc"
        # and it is a band-pass: a tone two octaves away is strongly attenuated
        f_off = f * 4 if f * 4 < fs / 2 else f / 4
        xo = np.cos(2 * np.pi * f_off * t)
        yo = Gammatone(fs=fs, fc=(f,))(xo)[0]
        ao, _ = _sine_fit(yo[seg], f_off, t[seg])
        assert _db(ao) < -20.0


def test_gammatone_default_grid_is_one_erb_with_basef():
    gt = Gammatone(fs=48000.0, basef=1000.0)
    fc = gt.coeffs.fc
    e = 9.2645 * np.log(1 + 0.00437 * fc)  # Glasberg & Moore ERB number
    np.testing.assert_allclose(np.diff(e), 1.0, rtol=0, atol=1e-9)
    assert np.min(np.abs(fc - 1000.0)) < 1e-9
    assert fc[0] >= 80.0 and fc[-1] <= 8000.0
    # no further 1-ERB step fits inside [80, 8000]
    assert e[0] - 1 < 9.2645 * np.log(1 + 0.00437 * 80.0)
    assert e[-1] + 1 > 9.2645 * np.log(1 + 0.00437 * 8000.0)


# ----------------------------------------------------------------------------------------
# IHC envelope low-pass


@pytest.mark.parametrize("preset,cutoff", [("dau1996", 1000.0), ("king2019", 1500.0),
                                           ("lindemann", 800.0)])
def test_ihc_lowpass_minus3db_at_cutoff(preset, cutoff):
    fs = 48000.0
    T = int(0.1 * fs)
    t = np.arange(T) / fs
    # positive input: half-wave rectification is the identity
    x = 1.0 + 0.1 * np.sin(2 * np.pi * cutoff * t)
    y = IHCEnvelope(fs=fs, preset=preset)(x)
    seg = slice(T // 2, T)
    a, dc = _sine_fit(y[seg], cutoff, t[seg])
    assert abs(_db(a / 0.1) - (-3.0103)) <= 0.1
    assert abs(dc - 1.0) < 1e-3  # unit DC gain
    # a decade below the cut-off the low-pass is (almost) transparent
    xl = 1.0 + 0.1 * np.sin(2 * np.pi * cutoff / 10 * t)
    al, _ = _sine_fit(IHCEnvelope(fs=fs, preset=preset)(xl)[seg], cutoff / 10, t[seg])
    assert abs(_db(al / 0.1)) < 0.1


def test_ihc_breebaart_minus3db_near_770hz():
    fs = 48000.0
    T = int(0.1 * fs)
    t = np.arange(T) / fs
    freqs = np.arange(600.0, 951.0, 10.0)
    x = np.stack([1.0 + 0.1 * np.sin(2 * np.pi * f * t) for f in freqs])  # (C, T)
    y = IHCEnvelope(fs=fs, preset="breebaart2001")(x)
    seg = slice(T // 2, T)
    g = np.array([_db(_sine_fit(y[i, seg], f, t[seg])[0] / 0.1) for i, f in enumerate(freqs)])
    assert np.all(np.diff(g) < 0)  # monotone low-pass
    f3 = float(np.interp(3.0103, -g, freqs))
    assert 740.0 <= f3 <= 800.0, f3


def test_ihc_rectifies():
    fs = 48000.0
    x = -np.abs(np.random.default_rng(0).standard_normal((3, 2000)))  # all <= 0
    y = IHCEnvelope(fs=fs)(x)
    assert np.all(y == 0.0)


# ----------------------------------------------------------------------------------------
# Adaptation loops: steady-state law


def test_adaptloop_steady_state_law():
    fs = 8000.0
    levels = np.array([1e-4, 1e-3, 1e-2, 0.1, 1.0, 5e-6, 1e-7, 0.0, -0.3])
    T = int(3.5 * fs)
    x = np.repeat(levels[:, None], T, axis=1)  # one channel per level
    y = AdaptLoop(fs=fs)(x)  # preset dau1997, minspl 0 dB SPL
    m = 1e-5
    c = m ** (1 / 32)
    expect = (np.maximum(levels, m) ** (1 / 32) - c) * 100 / (1 - c)
    final = y[:, -1]
    for lv, e, f in zip(levels, expect, final):
        if lv >= m:
            assert abs(f / e - 1) <= 5e-3, (lv, f, e)
        else:
            assert abs(f) <= 1e-3, (lv, f)
    assert np.all(np.abs(y[levels < m]) <= 1e-9)  # silence stays exactly at 0 model units
    # the output of a step rises above the steady state first (overshoot, then adaptation)
    i = int(np.nonzero(levels == 1e-2)[0][0])
    assert np.max(y[i]) > 2 * expect[i]


def test_adaptloop_minspl_per_channel_sets_floor():
    fs = 8000.0
    minspl = (0.0, 20.0, 40.0)
    lvl = 10 ** ((30.0 - 100.0) / 20)  # 30 dB SPL input: above 0 and 20, below 40 dB
    x = np.full((3, int(3 * fs)), lvl)
    y = AdaptLoop(fs=fs, minspl=minspl)(x)[:, -1]
    for ms, yv in zip(minspl, y):
        m = 10 ** ((ms - 100.0) / 20)
        c = m ** (1 / 32)
        e = (max(lvl, m) ** (1 / 32) - c) * 100 / (1 - c)
        if lvl > m:
            assert abs(yv / e - 1) <= 5e-3
        else:
            assert abs(yv) <= 1e-6


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_ch", [1, 5, 31, 32, 33, 40])
def test_adaptloop_channels_are_independent_of_their_count(n_ch, dtype):
    """Each channel's output (and final state) is the same to the bit whether it is
    processed alone or among n_ch channels: the kernel pads the channel loops to a lane
    multiple, and nothing of a padding lane or another channel may reach a channel.
    Per-channel minimum levels make every channel's constants different; the signals
    (level steps up to 100 dB SPL) drive the overshoot limiter in all loops."""
    fs = 16000.0
    rng = np.random.default_rng(n_ch)
    T = 3000
    steps = 10 ** ((rng.uniform(20, 100, (n_ch, 1)) - 100) / 20) * (np.arange(T) >= 500)
    x = (np.abs(rng.standard_normal((n_ch, T))) * steps).astype(dtype)
    minspl = tuple(rng.uniform(0, 30, n_ch))
    together = AdaptLoop(fs=fs, minspl=minspl)
    y = together(x)
    s_all = together.state_dict()["arrays"]["s"]
    assert y.max() > 200  # the limiter was active: outputs far above the steady state
    for c in range(n_ch):
        alone = AdaptLoop(fs=fs, minspl=(minspl[c],))
        yc = alone(x[c:c + 1])
        assert np.array_equal(yc[0], y[c]), c
        assert np.array_equal(alone.state_dict()["arrays"]["s"][..., 0], s_all[..., c]), c


# ----------------------------------------------------------------------------------------
# Modulation filterbank


def _amt_mfc(fc, max_mfc=1000.0, factor=0.25, Q=2.0):
    """The AMT 0.9.10 rule, written out independently from the module."""
    u = min(factor * fc, max_mfc) if factor > 0 else max_mfc
    out = [0.0]
    last = None
    for f in (5.0, 10.0):
        if f <= u:
            out.append(f)
            last = f
    if last is not None:
        start = (last + 2.5) / (1 - 1 / (2 * Q))
        ratio = (1 + 1 / (2 * Q)) / (1 - 1 / (2 * Q))
        f = start
        while f <= u * (1 + 1e-12):
            out.append(f)
            f *= ratio
    return np.array(out)


def test_mfc_lists_follow_amt_rule():
    m = rtamt.Dau1997(48000.0)
    fc = m.fc
    mfc = m.mfc
    assert mfc.shape[0] == fc.size
    for c in range(fc.size):
        row = mfc[c][~np.isnan(mfc[c])]
        np.testing.assert_allclose(row, _amt_mfc(fc[c]), rtol=1e-12, atol=0)
        assert np.all(np.isnan(mfc[c][row.size:]))
    np.testing.assert_allclose(mfc[0][~np.isnan(mfc[0])], [0.0, 5.0, 10.0, 50.0 / 3.0],
                               rtol=1e-12)
    # the highest channels reach the 1 kHz cap
    assert np.nanmax(mfc) <= 1000.0
    assert np.nanmax(mfc) > 600.0


def test_seed_config_has_eight_filters_up_to_128hz_everywhere():
    m = rtamt.Dau1997(48000.0, "torch_amt")
    mfc = m.mfc
    assert mfc.shape == (m.fc.size, 8)
    assert not np.any(np.isnan(mfc))
    expect = [0.0, 5.0, 10.0] + [50.0 / 3.0 * (5.0 / 3.0) ** k for k in range(5)]
    for row in mfc:
        np.testing.assert_allclose(row, expect, rtol=1e-12)
    assert abs(mfc[0, -1] - 128.6) < 0.05


def test_jepsen2008_attenuates_envelope_outputs_by_sqrt2():
    fs = 8000.0
    fc = (500.0, 2000.0)
    t = np.arange(int(0.5 * fs)) / fs
    rng = np.random.default_rng(3)
    x = np.stack([50 + 30 * np.cos(2 * np.pi * 40 * t), 20 + rng.standard_normal(t.size)])
    a = ModFilterbank(fs=fs, fc=fc, preset="jepsen2008")
    b = ModFilterbank(fs=fs, fc=fc, preset="jepsen2008", att_factor=1.0)
    ya, yb = a(x), b(x)
    assert a.coeffs.filter_mfc.tolist() == b.coeffs.filter_mfc.tolist()
    mag = a.coeffs.filter_mfc > 10.0
    assert mag.sum() >= 4 and (~mag).sum() >= 4
    assert np.max(np.abs(yb[mag])) > 1.0
    np.testing.assert_allclose(ya[mag], yb[mag] / np.sqrt(2.0), rtol=1e-12, atol=0)
    np.testing.assert_array_equal(ya[~mag], yb[~mag])
    # jepsen2008 caps the modulation filters at 150 Hz
    assert np.nanmax(a.coeffs.mfc_padded) <= 150.0


def _design_response(coeffs, w):
    """Complex frequency response (F_bp, W) of the band-pass filters at angular freqs w."""
    z1 = np.exp(-1j * w)[None, :]
    if coeffs.filter_type == "efilt":
        pr, pi_, g, _scale = coeffs.bp_coef
        p = (pr + 1j * pi_)[:, None]
        return g[:, None] / (1 - p * z1)
    b = coeffs.bp_b[..., 0] + 1j * coeffs.bp_b[..., 1]  # (F, 3)
    a = coeffs.bp_a[..., 0] + 1j * coeffs.bp_a[..., 1]
    zz = np.stack([np.ones_like(z1[0]), z1[0], z1[0] ** 2])  # (3, W)
    return (b @ zz) / (a @ zz)


@pytest.mark.parametrize("filter_type", ["efilt", "butterworth"])
def test_modfilter_design_peaks_at_mfc(filter_type):
    fs = 16000.0
    mf = ModFilterbank(fs=fs, fc=(4000.0,), preset="amt0910", filter_type=filter_type)
    c = mf.coeffs
    bp_mfc = c.filter_mfc[c.fc.size:]
    assert bp_mfc.size == 11  # 5, 10, then 16.7 ... 992 Hz
    for f, mfc in enumerate(bp_mfc):
        grid = mfc * np.logspace(-1, 1, 4001, base=2.0)  # 0.5 .. 2 x mfc
        H = _design_response(c, 2 * np.pi * grid / fs)[f]
        k = int(np.argmax(np.abs(H)))
        # the grid holds mfc exactly (index 2000); the maximally flat Butterworth peak is
        # only resolved to ~1e-12 in |H|, so allow a 1 % neighbourhood for the argmax
        assert abs(grid[k] - mfc) <= 0.01 * mfc, (filter_type, mfc, grid[k])
        Hm = _design_response(c, np.array([2 * np.pi * mfc / fs]))[f, 0]
        assert np.max(np.abs(H)) <= abs(Hm) * (1 + 1e-9)
        # a real peak, not a plateau: 0.8 and 1.25 x mfc are clearly lower
        Hs = _design_response(c, 2 * np.pi * mfc * np.array([0.8, 1.25]) / fs)[f]
        assert np.all(np.abs(Hs) < 0.99 * abs(Hm))
        # output 2·H: unit envelope gain for a modulation at mfc
        assert abs(abs(Hm) - 2.0) < 1e-9
        if filter_type == "butterworth":
            bw = 5.0 if mfc < 10 else mfc / 2.0  # Q = 2
            He = _design_response(c, 2 * np.pi * np.array([mfc - bw / 2, mfc + bw / 2]) / fs)[f]
            np.testing.assert_allclose(np.abs(He), 2.0 / np.sqrt(2.0), rtol=1e-6)


@pytest.mark.parametrize("filter_type", ["efilt", "butterworth"])
def test_modfilter_streaming_response_peaks_at_mfc(filter_type):
    """Drive with 1 + 0.5 cos(2 pi fm t); the envelope (magnitude) outputs of the filters
    with mfc > 10 Hz respond most at fm = mfc on a log grid 0.5 .. 2 x mfc."""
    fs = 8000.0
    mf = ModFilterbank(fs=fs, fc=(4000.0,), preset="amt0910", filter_type=filter_type)
    c = mf.coeffs
    fmfc = c.filter_mfc
    idx = np.nonzero(fmfc > 10.0)[0]
    assert idx.size == 9
    ratios = 2.0 ** (np.arange(-4, 5) / 4)  # 0.5 .. 2, mfc in the middle
    fms = (fmfc[idx][:, None] * ratios[None, :]).ravel()
    T = int(1.2 * fs)
    t = np.arange(T) / fs
    x = 1.0 + 0.5 * np.cos(2 * np.pi * fms[:, None] * t[None, :])
    y = mf(x[:, None, :])  # batch of one-channel inputs -> (B, F, T)
    assert y.shape == (fms.size, c.n_filters, T)
    settle = int(0.4 * fs)
    P = np.zeros((idx.size, ratios.size))
    for i, f in enumerate(idx):
        for j in range(ratios.size):
            b = i * ratios.size + j
            per = fs / fms[b]
            n = int(np.floor((T - settle) / per) * per)  # whole periods
            P[i, j] = np.mean(y[b, f, T - n:] ** 2)
    assert np.all(np.argmax(P, axis=1) == 4), np.argmax(P, axis=1)
    # clear peak: 0.7 and 1.4 x mfc give less than the response at mfc
    for f in idx:
        mfc = fmfc[f]
        xs = 1.0 + 0.5 * np.cos(2 * np.pi * np.array([0.7, 1.0, 1.4])[:, None] * mfc * t[None])
        ys = ModFilterbank(fs=fs, fc=(4000.0,), preset="amt0910",
                           filter_type=filter_type)(xs[:, None, :])[:, f, settle:]
        r = np.mean(ys ** 2, axis=-1)
        assert r[1] > r[0] and r[1] > r[2], (mfc, r)


# ----------------------------------------------------------------------------------------
# Instantaneous compression


def _knee(knee_db=30.0, spl_ref=100.0):
    return 10.0 ** ((knee_db - spl_ref) / 20.0)


def test_broken_stick_formula():
    k = _knee()
    n = 0.3
    xs = np.concatenate([np.linspace(-3 * k, 3 * k, 601), [-1.0, -0.01, 0.0, 0.01, 1.0]])
    y = BrokenStick(exponent=n)(xs)
    below = np.abs(xs) <= k
    assert below.sum() > 100 and (~below).sum() > 100
    np.testing.assert_array_equal(y[below], xs[below])  # identity below the knee
    above = ~below
    expect = np.sign(xs[above]) * np.abs(xs[above]) ** n * k ** (1 - n)
    np.testing.assert_allclose(y[above], expect, rtol=1e-12)
    # continuous at the knee (from above and below)
    eps = 1e-9 * k
    yk = BrokenStick(exponent=n)(np.array([k - eps, k + eps, -k - eps, -k + eps]))
    np.testing.assert_allclose(yk, [k, k, -k, -k], rtol=1e-6)
    # compressive above the knee, odd symmetric
    assert BrokenStick(exponent=n)(np.array([1.0]))[0] < 1.0
    np.testing.assert_array_equal(BrokenStick(exponent=n)(-xs), -y)


def test_broken_stick_knee_db_and_spl_ref():
    """The knee is at knee_db dB SPL of the internal units (RMS 1 = 100 dB SPL): behind a
    calibration stage with spl_ref 94, a digital sample compresses from 50 dB SPL on."""
    from rtamt.calibration import InputCalibration

    k = _knee(50.0, 94.0)
    cal = InputCalibration(94.0)
    st = BrokenStick(knee_db=50.0, exponent=0.5)
    xs = np.array([0.5 * k, 0.99 * k, 4 * k, 100 * k])
    y = st(cal(xs)) / cal.gain
    np.testing.assert_allclose(y, [0.5 * k, 0.99 * k, 2 * k, 10 * k], rtol=1e-12)


def test_power_compression_formula():
    k = _knee()
    n = 0.4
    xs = np.concatenate([np.linspace(-0.1, 0.1, 401), [k, -k, 0.0]])
    y = PowerCompression(exponent=n)(xs)
    expect = np.sign(xs) * np.abs(xs / k) ** n * k
    np.testing.assert_allclose(y, expect, rtol=1e-12, atol=0)
    np.testing.assert_allclose(PowerCompression(exponent=n)(np.array([k, -k])), [k, -k],
                               rtol=1e-12)


@pytest.mark.parametrize("cls", [BrokenStick, PowerCompression])
def test_compression_per_channel_exponents(cls):
    k = _knee()
    exps = (0.2, 0.5, 1.0, 0.8)
    rng = np.random.default_rng(5)
    x = 0.05 * rng.standard_normal((2, 4, 500))  # (batch, C, T), mostly above the knee
    y = cls(exponent=exps)(x)
    for c, n in enumerate(exps):
        y1 = cls(exponent=n)(x[:, c, :])  # same exponent applied to that channel alone
        np.testing.assert_allclose(y[:, c, :], y1, rtol=1e-12, atol=0)
        if cls is PowerCompression:
            e = np.sign(x[:, c]) * np.abs(x[:, c] / k) ** n * k
        else:
            e = np.where(np.abs(x[:, c]) > k,
                         np.sign(x[:, c]) * np.abs(x[:, c]) ** n * k ** (1 - n), x[:, c])
        np.testing.assert_allclose(y[:, c], e, rtol=1e-12, atol=0)
    # exponent 1 is the identity; different exponents give different channels
    np.testing.assert_allclose(y[:, 2], x[:, 2], rtol=1e-12)
    assert not np.allclose(y[:, 0], cls(exponent=0.5)(x[:, 0]))


@pytest.mark.parametrize("cls", [BrokenStick, PowerCompression])
def test_compression_exponent_count_mismatch(cls):
    st = cls(exponent=(0.2, 0.3, 0.4))
    with pytest.raises(RtamtInputError, match="3 exponents for 2 channels"):
        st(np.ones((2, 10)) * 0.01)
    assert st.state is None and st.blocks_processed == 0


@pytest.mark.parametrize("filter_type", ["efilt", "butterworth"])
def test_modfilter_real_part_filters_respond_most_at_mfc(filter_type):
    """The real-part (mfc <= 10 Hz) band-pass outputs: an 1 + 0.5 cos modulation at mfc
    gives more AC output than at 0.7 x mfc and at 1.4 x mfc."""
    fs = 8000.0
    T = int(3 * fs)
    t = np.arange(T) / fs
    settle = int(1.5 * fs)
    probe = ModFilterbank(fs=fs, fc=(4000.0,), filter_type=filter_type).coeffs
    real_f = [f for f in range(probe.n_filters) if 0 < probe.filter_mfc[f] <= 10.0]
    assert [probe.filter_mfc[f] for f in real_f] == [5.0, 10.0]
    for f in real_f:
        mfc = probe.filter_mfc[f]
        fm = np.array([0.7, 1.0, 1.4]) * mfc
        xs = 1.0 + 0.5 * np.cos(2 * np.pi * fm[:, None] * t[None])
        ys = ModFilterbank(fs=fs, fc=(4000.0,), filter_type=filter_type)(xs[:, None, :])[:, f]
        r = []
        for j in range(3):
            n = int(np.floor((T - settle) / (fs / fm[j])) * (fs / fm[j]))
            r.append(np.var(ys[j, T - n:]))
        assert r[1] > r[0] and r[1] > r[2], (mfc, r)
