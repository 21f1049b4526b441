"""DRNL filterbank (rtamt.filterbank.drnl): streaming exactness, design and I/O behaviour.

* block-partition invariance (whole / 1-sample / random blocks, float32 and float64,
  mono and batch) and state_dict / reset;
* the kernel against an independent offline implementation (scipy ``lfilter`` per
  channel and path, sections written from the papers' formulas);
* the linear-path gain at CF against a closed form (regression gain g, 0 dB gammatone at
  CF_lin, analytic Butterworth magnitude);
* the input-output function at CF: slope 1 below the broken-stick knee, slope c = 0.25
  above it, the knee where a, b, c put it, the full DRNL as the phasor sum of the two
  paths, and a more linear growth for a tone at CF/2;
* parameter sets (regressions, a/b frozen above 1.5 kHz, HIx), bad input, errors.
"""
from __future__ import annotations

import copy
import math
import zlib

import numpy as np
import pytest
import scipy.signal as ss

from rtamt import Chain, RtamtInputError
from rtamt.filterbank.drnl import (
    DRNL,
    PRESETS,
    STAPES_PEAK_VELOCITY_1KHZ_0DB,
    flat_stapes_scale,
    get_preset,
    path_responses,
)
from rtamt.ihc import IHCEnvelope

from _helpers import FS, make_signal, max_rel_err, random_partition, run_blocks

N = 9600
TOL = {np.float32: 1e-6, np.float64: 1e-12}
SCALE = flat_stapes_scale()  # digital (RMS 1 = 100 dB SPL) -> stapes velocity, m/s


def _make(**kw):
    kw.setdefault("input_scale", SCALE)
    return DRNL(fs=FS, **kw)


# ----------------------------------------------------------------------------------------
# (1) block-partition invariance

CASES = {
    "paulick2024": dict(preset="paulick2024"),
    "jepsen2008": dict(preset="jepsen2008"),
    "lopezpoveda2001": dict(preset="lopezpoveda2001", flow=100.0, fhigh=6000.0, spacing=2.0),
    "hix": dict(preset="paulick2024", subject="HIx", n_channels=12),
    # general exponent c != 0.25 takes the pow() branch of the kernel
    "c-0.3": dict(preset=get_preset("jepsen2008", c=(math.log10(0.3), 0.0)), n_channels=16,
                  flow=250.0, fhigh=8000.0),
}


@pytest.fixture(scope="module")
def signals():
    x = make_signal(N, seed=0)
    xb = np.stack([make_signal(N, seed=1), 0.3 * make_signal(N, seed=2)])
    return {"mono": x, "batch": xb}


_whole: dict = {}


def _ref(case, inp, dtype, sig):
    key = (case, inp, np.dtype(dtype).name)
    if key not in _whole:
        x = np.ascontiguousarray(sig[inp].astype(dtype))
        _whole[key] = (x, _make(**CASES[case])(x))
    return _whole[key]


RUNS = [(c, "mono") for c in CASES] + [("paulick2024", "batch"), ("c-0.3", "batch")]


@pytest.mark.parametrize("partition", ["whole", "ones", "random"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case,inp", RUNS, ids=[f"{c}-{i}" for c, i in RUNS])
def test_block_partition_invariance(case, inp, dtype, partition, signals):
    x, ref = _ref(case, inp, dtype, signals)
    n = x.shape[-1]
    if partition == "whole":
        sizes = [n]
    elif partition == "ones":
        sizes = [1] * n
    else:
        sizes = random_partition(n, seed=zlib.crc32(f"{case}{inp}".encode()))
        assert 8192 in sizes and sizes.count(1) >= 3
    got = run_blocks(_make(**CASES[case]), x, sizes)
    assert got.dtype == np.dtype(dtype) and got.shape == ref.shape
    assert ref.shape[-2] == _make(**CASES[case]).coeffs.fc.size
    assert np.all(np.isfinite(got))
    err = max_rel_err(got, ref)
    assert err <= TOL[dtype], f"{case} {inp} {partition}: max rel err {err:.3g}"


def test_float32_tracks_float64(signals):
    """Same design in single precision: coefficient and rounding differences only
    (measured 1.5e-4 of the output peak; up to ~1e-3 of a channel's own peak at 250 Hz)."""
    x = signals["mono"]
    y64 = _make()(x)
    y32 = _make()(x.astype(np.float32))
    assert max_rel_err(y32, y64) < 1e-3
    per_ch = np.max(np.abs(y32 - y64), axis=1) / np.max(np.abs(y64), axis=1)
    assert per_ch.max() < 5e-3


def test_chain_with_drnl_front_end(signals):
    """DRNL composes as the signal stage of a Chain; random blocks == one call."""
    x = signals["mono"]

    def make():
        return Chain([_make(n_channels=20), IHCEnvelope(fs=FS)])

    whole = make().process_all(x)
    got = run_blocks(make(), x, random_partition(N, seed=3), key=True)
    for k in whole:
        assert max_rel_err(got[k], whole[k]) <= 1e-12, k


# ----------------------------------------------------------------------------------------
# (2) state_dict / load_state_dict / reset


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_state_dict_continuation_and_reset(dtype, signals):
    x = signals["batch"].astype(dtype)
    cut = 2711
    a = _make(n_channels=24)
    first = a(x[:, :1500])
    a(x[:, 1500:cut])
    sd = a.state_dict()
    snap = copy.deepcopy(sd)
    assert set(sd["arrays"]) == {"lin_s1", "lin_s2", "nlin_s1", "nlin_s2"}
    assert sd["arrays"]["lin_s1"].shape == (2, 2 + 4, 24)
    assert sd["arrays"]["nlin_s1"].shape == (2, 2 + 2 + 1, 24)
    b = _make(n_channels=24)
    b.load_state_dict(sd)
    ya = a(x[:, cut:])
    yb = np.concatenate([b(x[:, cut:cut + 1]), b(x[:, cut + 1:])], axis=-1)
    assert np.array_equal(ya, yb)
    assert np.max(np.abs(ya)) > 0
    # the snapshot was a deep copy: processing did not change it
    for k, v in sd["arrays"].items():
        assert np.array_equal(v, snap["arrays"][k])
    # reset: the next block starts from silence (bit-identical to a fresh instance)
    a.reset()
    assert a.state is None and a.blocks_processed == 0
    assert np.array_equal(a(x[:, :1500]), first)
    # a snapshot of a different design is rejected
    other = _make(n_channels=25)
    with pytest.raises(RtamtInputError):
        other.load_state_dict(snap)


# ----------------------------------------------------------------------------------------
# independent offline reference (scipy), written from the papers' formulas


def _gt_ba(f, bw, fs):
    r, th = math.exp(-2 * math.pi * bw / fs), 2 * math.pi * f / fs
    b = np.array([1.0, -r * math.cos(th), 0.0])
    a = np.array([1.0, -2 * r * math.cos(th), r * r])
    _, h = ss.freqz(b, a, worN=[f], fs=fs)
    return b / abs(h[0]), a


def _offline_drnl(x, fc, preset, fs):
    """One channel: LP&M 2001 structure with the preset's regressions, scipy filters."""
    p = PRESETS[preset]

    def reg(pm, f):
        return 10 ** pm[0] * f ** pm[1]

    f_ab = min(fc, p.ab_limit_hz) if p.ab_limit_hz else fc
    a, b, c = reg(p.a, f_ab), reg(p.b, f_ab), 0.25
    bgl, agl = _gt_ba(reg(p.cf_lin, fc), reg(p.bw_lin, fc), fs)
    bll, all_ = ss.butter(2, reg(p.lp_lin, fc) / (fs / 2))
    bgn, agn = _gt_ba(reg(p.cf_nlin, fc), reg(p.bw_nlin, fc), fs)
    bln, aln = ss.butter(2, reg(p.lp_nlin, fc) / (fs / 2))
    yl = reg(p.gain, fc) * x
    for _ in range(p.n_gt_lin):
        yl = ss.lfilter(bgl, agl, yl)
    for _ in range(p.n_lp_lin):
        yl = ss.lfilter(bll, all_, yl)
    yn = x
    for _ in range(p.n_gt_nlin_before):
        yn = ss.lfilter(bgn, agn, yn)
    yn = np.sign(yn) * np.minimum(a * np.abs(yn), b * np.abs(yn) ** c)
    for _ in range(p.n_gt_nlin_after):
        yn = ss.lfilter(bgn, agn, yn)
    for _ in range(p.n_lp_nlin):
        yn = ss.lfilter(bln, aln, yn)
    return yl + yn


@pytest.mark.parametrize("preset", list(PRESETS))
def test_matches_offline_scipy_reference(preset, signals):
    fcs = (250.0, 1000.0, 1300.0, 4000.0)
    x = signals["mono"] * SCALE
    y = DRNL(fs=FS, preset=preset, fc=fcs)(x)
    ref = np.stack([_offline_drnl(x, f, preset, FS) for f in fcs])
    assert max_rel_err(y, ref) < 1e-9
    # the input is in the compressive range somewhere (the test is not linear-only)
    co = DRNL(fs=FS, preset=preset, fc=fcs).coeffs
    assert np.max(np.abs(x)) > 10 * co.knee.min()


# ----------------------------------------------------------------------------------------
# (3) linear-path gain at CF


def _tone_gain_db(d, f, amp, n=9600, tail=4800):
    """Steady-state gain (dB) of each channel of ``d`` for a sine of ``amp`` at ``f``:
    least-squares fit of a sinusoid at ``f`` to the last ``tail`` samples (exact for
    the steady state of a linear system at any f), divided by ``amp``."""
    t = np.arange(n) / FS
    y = d(amp * np.sin(2 * np.pi * f * t))
    y = y.reshape(-1, n)[:, n - tail:]
    tt = t[n - tail:]
    M = np.stack([np.sin(2 * np.pi * f * tt), np.cos(2 * np.pi * f * tt)], axis=1)
    coef = np.linalg.lstsq(M, y.T, rcond=None)[0]
    return 20 * np.log10(np.hypot(coef[0], coef[1]) / amp)


@pytest.mark.parametrize("preset", ["paulick2024", "lopezpoveda2001"])
@pytest.mark.parametrize("cf", [500.0, 1000.0, 4000.0])
def test_linear_path_gain_at_cf(cf, preset):
    """Linear path alone, tone at CF_lin: gain = 20 log10 g (regression) + 0 dB for each
    gammatone section (unit gain at its centre by design) + n_lp x the Butterworth
    magnitude |H|^2 = 1 / (1 + (tan(pi f/fs) / tan(pi f_c/fs))^4) (bilinear transform)."""
    p = PRESETS[preset]
    d = DRNL(fs=FS, preset=preset, fc=(cf,), paths="lin")
    co = d.coeffs
    f = float(co.cf_lin[0])
    g = 10 ** p.gain[0] * cf ** p.gain[1]
    lp = 10 ** p.lp_lin[0] * cf ** p.lp_lin[1]
    w = math.tan(math.pi * f / FS) / math.tan(math.pi * lp / FS)
    expected = 20 * math.log10(g) - p.n_lp_lin * 10 * math.log10(1 + w ** 4)
    got = _tone_gain_db(d, f, 1e-9)[0]
    assert abs(got - expected) < 0.5, (got, expected)
    # and the design's response (path_responses) is what the stream does
    assert abs(got - 20 * math.log10(abs(path_responses(co, [f])["lin"][0, 0]))) < 0.01
    # at CF itself (CF_lin < CF): scipy's response of the sections written from the papers
    bg, ag = _gt_ba(float(co.cf_lin[0]), 10 ** p.bw_lin[0] * cf ** p.bw_lin[1], FS)
    bl, al = ss.butter(2, lp / (FS / 2))
    hg = ss.freqz(bg, ag, worN=[cf], fs=FS)[1][0]
    hl = ss.freqz(bl, al, worN=[cf], fs=FS)[1][0]
    expected_cf = 20 * math.log10(g * abs(hg) ** p.n_gt_lin * abs(hl) ** p.n_lp_lin)
    d.reset()
    got_cf = _tone_gain_db(d, cf, 1e-9)[0]
    assert abs(got_cf - expected_cf) < 0.5, (got_cf, expected_cf)


def test_low_level_response_is_sum_of_paths():
    """Far below the knee the broken stick is the gain a: the DRNL is linear with
    response H_lin + a H_nlin (phasor sum, from the design), checked at CF and CF/2."""
    cf = 1000.0
    d = DRNL(fs=FS, fc=(cf,))
    for f in (cf, cf / 2):
        H = path_responses(d.coeffs, [f])
        expected = 20 * np.log10(abs(H["lin"][0, 0] + H["nlin_low"][0, 0]))
        d.reset()
        got = _tone_gain_db(d, f, 1e-10)[0]
        assert abs(got - expected) < 0.5, (f, got, expected)
    # at CF the nonlinear path dominates at low levels (LP&M 2001: the tip of the tuning)
    H = path_responses(d.coeffs, [cf])
    assert abs(H["nlin_low"][0, 0]) > 30 * abs(H["lin"][0, 0])


# ----------------------------------------------------------------------------------------
# (4) input-output function at CF: the broken-stick knee

# fundamental of sign(s)|s|^c for s = sin: (2/pi) int_0^pi sin^(1+c) = (2/sqrt(pi))
# Gamma(1 + c/2) / Gamma(3/2 + c/2)
_KC = 2 / math.sqrt(math.pi) * math.gamma(1.125) / math.gamma(1.625)


def _io(cf, f, paths, levels_db):
    """Output level (dB re 1 m/s) of the component at f vs input level (dB re 1 m/s
    stapes peak velocity), one batch row per level."""
    d = DRNL(fs=FS, fc=(cf,), paths=paths)
    n, tail = 4800, 1920
    t = np.arange(n) / FS
    amp = 10 ** (np.asarray(levels_db) / 20)
    y = d(amp[:, None] * np.sin(2 * np.pi * f * t)[None, :])[:, 0, n - tail:]
    tt = t[n - tail:]
    re = 2 * np.mean(y * np.sin(2 * np.pi * f * tt), axis=-1)
    im = 2 * np.mean(y * np.cos(2 * np.pi * f * tt), axis=-1)
    return 20 * np.log10(np.hypot(re, im)), d.coeffs


def _slope(lv, out, lo, hi):
    m = (lv >= lo - 1e-9) & (lv <= hi + 1e-9)
    return float(np.polyfit(lv[m], out[m], 1)[0])


@pytest.mark.parametrize("cf", [1000.0, 4000.0])
def test_io_function_at_cf_has_the_broken_stick_knee(cf):
    lv = np.arange(-200.0, -19.0, 2.5)
    nl, co = _io(cf, cf, "nlin", lv)
    both, _ = _io(cf, cf, "both", lv)
    H = path_responses(co, [cf])
    Hb, Ha, Hl = H["gt_before"][0, 0], H["nlin_after"][0, 0], H["lin"][0, 0]
    a, b, c = co.a[0], co.b[0], co.c[0]
    assert c == 0.25
    # knee: broken-stick input (b/a)^(1/(1-c)) referred to the stapes through the GT
    # cascade in front of it
    knee = 20 * math.log10((b / a) ** (1 / (1 - c)) / abs(Hb))
    # LP&M 2001: compression starts near 30-40 dB SPL at CF; with their middle ear
    # (8.2e-9 m/s peak at 0 dB SPL, 1 kHz) the 1-kHz knee lies at ~36 dB SPL
    if cf == 1000.0:
        assert 30 < knee - 20 * math.log10(STAPES_PEAK_VELOCITY_1KHZ_0DB) < 42

    # nonlinear path: slope 1 below the knee, c above it
    assert abs(_slope(lv, nl, knee - 60, knee - 10) - 1) < 0.01
    s_mid = _slope(lv, nl, knee + 15, knee + 60)
    assert abs(s_mid - c) < 0.01, s_mid  # measured 0.0002 (1 kHz), 0.0008 (4 kHz)
    # asymptotes: low  out = L + 20log10(a |Hb Ha|);  high  out = c L + const (fitted
    # with slope c); they cross where a A = KC b A^c (A: stick input amplitude), i.e. at
    # the knee + 20/(1-c) log10(KC) = knee + 1.97 dB
    low = lv + 20 * np.log10(a * abs(Hb * Ha))
    m = (lv > knee + 20) & (lv < knee + 60)
    k_hi = float(np.mean(nl[m] - c * lv[m]))
    assert np.max(np.abs(nl[lv < knee - 10] - low[lv < knee - 10])) < 0.01
    cross = (k_hi - 20 * math.log10(a * abs(Hb * Ha))) / (1 - c)
    predicted = knee + 20 / (1 - c) * math.log10(_KC)
    assert abs(cross - predicted) < 0.2, (cross, predicted)  # measured 0.004, 0.02 dB

    # full DRNL = phasor sum of the paths: linear path + compressed nonlinear path
    # (the stick's fundamental is in phase with its input)
    A = 10 ** (lv / 20) * abs(Hb)
    nl_amp = b * _KC * A ** c * abs(Ha)
    model = 20 * np.log10(np.abs(10 ** (lv / 20) * Hl + nl_amp * Ha / abs(Ha) * Hb / abs(Hb)))
    m = lv > knee + 15
    # residual: the part of each cycle below the knee and harmonics left by the GT/LP
    # cascades after the stick (measured <= 0.11 dB from knee + 15 dB up)
    assert np.max(np.abs(both[m] - model[m])) < 0.3
    # slopes of the full DRNL: linear at low levels, compressive above the knee (the
    # linear path adds a little: 0.25..0.4), linear again where the linear path wins
    assert abs(_slope(lv, both, knee - 60, knee - 10) - 1) < 0.01
    s_both = _slope(lv, both, knee + 10, knee + 25)
    assert 0.2 < s_both < 0.4, s_both
    assert _slope(lv, both, lv[-8], lv[-1]) > 0.9

    # off frequency (tone at CF/2): the nonlinear path is far weaker there (its knee
    # moves up with the gammatone attenuation) -> growth is (nearly) linear over the
    # range where the on-CF response is compressed
    off, _ = _io(cf, cf / 2, "both", lv)
    s_off = _slope(lv, off, knee + 10, knee + 25)
    assert s_off > 0.9, s_off
    assert s_off - s_both > 0.5


# ----------------------------------------------------------------------------------------
# parameter sets


def test_regressions_and_presets():
    cf = np.array([250.0, 1000.0, 1250.0, 1500.0, 4000.0])
    co = DRNL(fs=FS, preset="jepsen2008", fc=tuple(cf)).coeffs

    def reg(p0, m, f):
        return 10 ** (p0 + m * np.log10(f))

    assert np.allclose(co.gain, reg(4.20405, -0.47909, cf), rtol=1e-12)
    assert np.allclose(co.cf_lin, reg(-0.06762, 1.01679, cf), rtol=1e-12)
    assert np.allclose(co.bw_lin, reg(0.03728, 0.75, cf), rtol=1e-12)
    assert np.allclose(co.lp_lin, reg(-0.06762, 1.01, cf), rtol=1e-12)
    assert np.allclose(co.cf_nlin, reg(-0.05252, 1.01650, cf), rtol=1e-12)
    assert np.allclose(co.bw_nlin, reg(-0.03193, 0.77, cf), rtol=1e-12)
    assert np.allclose(co.lp_nlin, reg(-0.05252, 1.01650, cf), rtol=1e-12)
    # a, b: regression up to 1.5 kHz, frozen above (Jepsen et al. 2008) - continuous
    fab = np.minimum(cf, 1500.0)
    assert np.allclose(co.a, reg(1.40298, 0.81916, fab), rtol=1e-12)
    assert np.allclose(co.b, reg(1.61912, -0.81867, fab), rtol=1e-12)
    assert np.isclose(math.log10(co.a[-1]), 4.00471, atol=1e-5)
    assert np.all(co.c == 0.25)
    assert co.counts == (2, 4, 2, 2, 1)
    # the AMT/Jepsen code's switch at 1 kHz is available as an explicit option
    amt = DRNL(fs=FS, preset=get_preset("jepsen2008", ab_switch_hz=1000.0), fc=tuple(cf)).coeffs
    assert amt.a[2] == co.a[3] and amt.a[1] == co.a[1]
    # presets: LP&M 2001 cascades and slopes, Paulick 2024 = Jepsen 2008 filters on its grid
    lpm = DRNL(fs=FS, preset="lopezpoveda2001", fc=tuple(cf)).coeffs
    assert lpm.counts == (3, 4, 3, 3, 3)
    assert np.allclose(lpm.a, reg(1.40298, 0.81916, cf), rtol=1e-12)
    pk = DRNL(fs=FS, preset="paulick2024")
    assert pk.fc.size == 50 and np.isclose(pk.fc[0], 250.0) and np.isclose(pk.fc[-1], 8000.0)
    assert np.allclose(np.diff(np.log1p(0.00437 * pk.fc)), np.log1p(0.00437 * pk.fc[1]) -
                       np.log1p(0.00437 * pk.fc[0]))
    pkc = DRNL(fs=FS, preset="paulick2024", fc=tuple(cf)).coeffs
    for k in ("gain", "bw_lin", "lp_lin", "bw_nlin", "lp_nlin", "a", "b", "c"):
        assert np.array_equal(getattr(pkc, k), getattr(co, k)), k
    # 1-ERB grid with a base frequency on it
    for preset in ("jepsen2008", "paulick2024"):
        d = DRNL(fs=FS, preset=preset, basef=1000.0)
        assert np.min(np.abs(d.fc - 1000.0)) < 1e-6
        assert np.allclose(np.diff(9.2645 * np.log1p(0.00437 * d.fc)), 1.0)


def test_hix_subject_has_no_nonlinear_path(signals):
    """a = 0: min(0, b|x|^c) = 0, the nonlinear path is silent and the DRNL is linear."""
    x = signals["mono"]
    hix = _make(subject="HIx", n_channels=10)(x)
    lin = _make(paths="lin", n_channels=10)(x)
    assert np.array_equal(hix, lin)
    y1 = _make(subject="HIx", n_channels=10)(3.0 * x)
    assert max_rel_err(y1, 3.0 * hix) < 1e-12


def test_paths_add_up_exactly(signals):
    x = signals["mono"]
    both = _make(n_channels=10)(x)
    lin = _make(n_channels=10, paths="lin")(x)
    nlin = _make(n_channels=10, paths="nlin")(x)
    assert np.array_equal(both, lin + nlin)


def test_input_scale_is_a_plain_factor(signals):
    x = signals["mono"][:3000]
    a = DRNL(fs=FS, n_channels=8, input_scale=SCALE)(x)
    b = DRNL(fs=FS, n_channels=8)(x * SCALE)
    assert max_rel_err(a, b) < 1e-12
    # flat_stapes_scale: a 1-kHz sine at 0 dB SPL (RMS 1e-5 digital) -> 8.235e-9 m/s peak
    assert math.isclose(SCALE * math.sqrt(2) * 1e-5, STAPES_PEAK_VELOCITY_1KHZ_0DB, rel_tol=1e-12)


def test_design_errors():
    with pytest.raises(ValueError, match="fs/2"):
        DRNL(fs=16000.0, preset="paulick2024")  # CF_nlin(8 kHz) = 8.2 kHz > 8 kHz
    with pytest.raises(ValueError, match="preset"):
        DRNL(fs=FS, preset="casp2099")
    with pytest.raises(ValueError, match="subject"):
        DRNL(fs=FS, subject="HI")
    with pytest.raises(ValueError, match="paths"):
        DRNL(fs=FS, paths="linear")
    with pytest.raises(ValueError, match="input_scale"):
        DRNL(fs=FS, input_scale=0.0)
    with pytest.raises(ValueError, match="characteristic"):
        DRNL(fs=FS, fc=(100.0, 30000.0))
    with pytest.raises(ValueError, match="basef"):
        DRNL(fs=FS, basef=1000.0, n_channels=10)
    with pytest.raises(ValueError, match="cascade"):
        DRNL(fs=FS, preset=get_preset("paulick2024", n_lp_lin=-1))


# ----------------------------------------------------------------------------------------
# (5) bad input


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_bad_input_rejected_state_untouched(bad, signals):
    x = signals["batch"][:, :600]
    d, twin = _make(n_channels=12), _make(n_channels=12)
    d(x[:, :200])
    twin(x[:, :200])
    before = {k: v.copy() for k, v in d.state.items()}
    blk = x[:, 200:300].copy()
    blk[1, 57] = bad
    with pytest.raises(RtamtInputError, match=r"drnl: block 1: non-finite .*batch 1, sample 57"):
        d(blk)
    for k, v in d.state.items():
        assert np.array_equal(v, before[k]), k
    assert d.blocks_processed == 1
    assert np.array_equal(d(x[:, 200:]), twin(x[:, 200:]))
    with pytest.raises(RtamtInputError, match="dtype"):
        d(x[:, :10].astype(np.int16))
    with pytest.raises(RtamtInputError, match="leading shape"):
        d(x[0, :10])
