"""Streaming BS.1770-4 / EBU R128 loudness meter (rtamt.loudness.bs1770).

* EBU Tech 3341 (v4) minimum-requirements test signals 1-5 (stereo 1 kHz sines,
  0 dBFS = full-scale sine of peak amplitude 1.0), fed in realistic blocks, at 48 kHz
  and (case 1) at 44.1 kHz;
* the 48 kHz K-weighting equals ITU-R BS.1770-4 Annex 1 Tables 1 and 2; at every rate
  from 8 to 192 kHz a tone or noise reads within 0.02 LU of the same signal resampled
  to 48 kHz (scipy) and measured there;
* block invariance: random partitions (incl. 1-sample blocks) give the one-call
  momentary / short-term sequences, integrated loudness, loudness range, true and
  sample peaks and the maxima of M and S, float32 and float64;
* bad blocks are rejected naming block / channel / sample and leave the state as it was;
* state_dict() / load_state_dict() continue bit-exactly.
"""
from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import signal as sps
from scipy.signal import sosfreqz

from rtamt.loudness.bs1770 import (
    BS1770_48K_PREFILTER,
    BS1770_48K_RLB,
    RLB_F0_HZ,
    RLB_GAIN,
    RLB_Q,
    SHELF_F0_HZ,
    SHELF_Q,
    SHELF_VB,
    SHELF_VH,
    LoudnessInputError,
    LoudnessMeter,
    Params,
    design,
    k_weighting_sos,
    lufs_or_none,
)


# ---------------------------------------------------------------- helpers
def sine_segments(levels_dbfs, durations_s, fs, channels=2, f=1000.0):
    """Concatenated 1 kHz sine segments (phase-continuous), identical in every channel."""
    n = [int(round(d * fs)) for d in durations_s]
    amp = np.repeat([10.0 ** (lv / 20.0) for lv in levels_dbfs], n)
    x = amp * np.sin(2.0 * np.pi * f * np.arange(amp.size) / fs)
    return np.broadcast_to(x, (channels, x.size))


def run_blocks(meter, x, block):
    r = None
    for i in range(0, x.shape[-1], block):
        r = meter(x[..., i:i + block])
    return r


def run_partition(meter, x, lengths):
    """Feed x in blocks of the given lengths; collect the step sequences."""
    t, m, s, pos, last = [], [], [], 0, None
    for n in lengths:
        last = meter(x[..., pos:pos + n])
        pos += n
        t.append(last.step_time)
        m.append(last.step_momentary)
        s.append(last.step_short_term)
    assert pos == x.shape[-1]
    return np.concatenate(t), np.concatenate(m), np.concatenate(s), last


def random_lengths(total, rng, max_len=700, p_one=0.3):
    """Random partition of `total` samples; about `p_one` of the blocks are 1 sample long."""
    out, pos = [], 0
    while pos < total:
        n = 1 if rng.random() < p_one else int(rng.integers(1, max_len))
        n = min(n, total - pos)
        out.append(n)
        pos += n
    return out


def invariance_signal(fs, seconds, seed=0):
    """Stereo noise with level steps; digital silence at the start (exactly -inf LUFS)
    and in the middle (K-weighting ringing decays: far below the -70 LUFS gate)."""
    rng = np.random.default_rng(seed)
    n = int(seconds * fs)
    x = 0.1 * rng.standard_normal((2, n))
    x[:, n // 5: 2 * n // 5] *= 0.03           # a quiet part (about -30 dB)
    x[1, 2 * n // 5:] *= 0.5                   # unequal channels
    x[:, int(0.55 * n): int(0.7 * n)] = 0.0    # digital silence (> 400 ms)
    x[:, :int(0.45 * fs)] = 0.0                # leading digital silence
    return x


def assert_same_state(a, b):
    """Recursive equality of two state_dicts (arrays bit-exact, NaN == NaN)."""
    assert type(a) is type(b) or (np.isscalar(a) and np.isscalar(b))
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same_state(a[k], b[k])
    elif isinstance(a, np.ndarray):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


# ---------------------------------------------------------------- EBU Tech 3341
EBU_CASES = {
    # case: (levels dBFS, durations s, expected integrated LUFS, check M and S at end)
    1: ((-23.0,), (20.0,), -23.0, True),
    2: ((-33.0,), (20.0,), -33.0, True),
    3: ((-36.0, -23.0, -36.0), (10.0, 60.0, 10.0), -23.0, False),
    4: ((-72.0, -36.0, -23.0, -36.0, -72.0), (10.0, 10.0, 60.0, 10.0, 10.0), -23.0, False),
    5: ((-26.0, -20.0, -26.0), (20.0, 20.1, 20.0), -23.0, False),
}


@pytest.mark.parametrize("case", sorted(EBU_CASES))
def test_ebu3341_cases(case):
    levels, durations, expected, check_ms = EBU_CASES[case]
    fs = 48000
    x = sine_segments(levels, durations, fs)
    r = run_blocks(LoudnessMeter(fs=fs, channels=2), x, 1024)
    assert r.integrated == pytest.approx(expected, abs=0.1)
    if check_ms:
        assert r.momentary == pytest.approx(expected, abs=0.1)
        assert r.short_term == pytest.approx(expected, abs=0.1)


def test_ebu3341_case1_at_44k1():
    fs = 44100
    x = sine_segments((-23.0,), (20.0,), fs)
    r = run_blocks(LoudnessMeter(fs=fs, channels=2), x, 480)
    for v in (r.momentary, r.short_term, r.integrated):
        assert v == pytest.approx(-23.0, abs=0.1)


# ---------------------------------------------------------------- K-weighting design
def test_48k_coefficients_equal_bs1770_tables():
    sos = k_weighting_sos(48000.0)
    published = np.array([list(BS1770_48K_PREFILTER[0]) + list(BS1770_48K_PREFILTER[1]),
                          list(BS1770_48K_RLB[0]) + list(BS1770_48K_RLB[1])])
    # BS.1770-4 Annex 1, Tables 1 and 2, re-typed here independently of the module
    typed = np.array([
        [1.53512485958697, -2.69169618940638, 1.19839281085285, 1.0, -1.69065929318241,
         0.73248077421585],
        [1.0, -2.0, 1.0, 1.0, -1.99004745483398, 0.99007225036621]])
    np.testing.assert_array_equal(published, typed)
    np.testing.assert_allclose(sos, typed, rtol=0, atol=1e-8)
    np.testing.assert_allclose(design(Params(fs=48000)).sos, typed, rtol=0, atol=1e-8)


def test_prototype_constants_invert_the_published_biquads():
    """The analog prototype parameters are the exact inverse bilinear transform of the
    published 48 kHz biquads (K^2 = D(1)/D(-1), K/Q = 2(1 - a2)/D(-1), ...)."""
    fs = 48000.0

    def invert(b, a):
        d1, dm = 1 + a[1] + a[2], 1 - a[1] + a[2]
        K = math.sqrt(d1 / dm)
        kq = 2 * (1 - a[2]) / dm
        return fs / math.pi * math.atan(K), K / kq, (b[0] - b[1] + b[2]) / dm, \
            (b[0] - b[2]) / (1 - a[2]), 1 + kq + K * K

    f0, q, vh, vb, _ = invert(*BS1770_48K_PREFILTER)
    np.testing.assert_allclose([f0, q, vh, vb], [SHELF_F0_HZ, SHELF_Q, SHELF_VH, SHELF_VB],
                               rtol=1e-12)
    f0, q, _, _, g = invert(*BS1770_48K_RLB)
    np.testing.assert_allclose([f0, q, g], [RLB_F0_HZ, RLB_Q, RLB_GAIN], rtol=1e-12)


@pytest.mark.parametrize("fs", [32000.0, 44100.0, 96000.0])
def test_k_weighting_response_matches_48k_design(fs):
    """Designed for another rate, the K-weighting keeps the 48 kHz magnitude response
    (bilinear warping differences stay small below 8 kHz)."""
    f = np.array([20.0, 50.0, 100.0, 500.0, 1000.0, 2000.0, 4000.0, 8000.0])
    _, h48 = sosfreqz(k_weighting_sos(48000.0), worN=f, fs=48000.0)
    _, h = sosfreqz(k_weighting_sos(fs), worN=f, fs=fs)
    np.testing.assert_allclose(20 * np.log10(abs(h)), 20 * np.log10(abs(h48)), atol=0.05)


KW_RATES = [8000, 11025, 16000, 22050, 32000, 44100, 48000, 88200, 96000, 176400, 192000]


def _to_48k(x, fs):
    """``x`` (rows of signals at ``fs``) resampled to 48 kHz by scipy's polyphase resampler
    with a long Kaiser-windowed filter (64 input samples either side; flat to < 1e-4 dB
    below 0.4 of the lower rate)."""
    if fs == 48000:
        return x
    r = Fraction(48000, fs)
    up, down = r.numerator, r.denominator
    m = max(up, down)
    h = sps.firwin(2 * 64 * m + 1, 1.0 / m, window=("kaiser", 10.0))
    return sps.resample_poly(x, up, down, axis=-1, window=h)


def _rate_signals(fs, seconds=3.0):
    """Tones at 100 Hz, 1 kHz and 0.4 min(fs, 48 kHz), and white noise low-passed at
    0.4 min(fs, 48 kHz) (what survives resampling to 48 kHz), one per row."""
    n = int(seconds * fs)
    t = np.arange(n) / fs
    top = 0.4 * min(fs, 48000)
    noise = np.random.default_rng(fs).standard_normal(n)
    noise = sps.sosfiltfilt(sps.butter(16, top, fs=fs, output="sos"), noise)
    rows = [0.1 * np.sin(2 * np.pi * f * t) for f in (100.0, 1000.0, top)]
    return np.array(rows + [0.05 * noise / noise.std()])


@pytest.mark.parametrize("fs", KW_RATES)
def test_k_weighting_at_any_rate_reads_as_resampled_to_48k(fs):
    """Issue 39 item 6: a tone or noise measured at ``fs`` reads within 0.02 LU of the
    same signal resampled to 48 kHz and measured there (8 to 192 kHz; with the prewarped
    bilinear design a 1 kHz tone read 0.20 LU low at 8 kHz, 0.05 LU at 16 kHz)."""
    x = _rate_signals(fs)
    y = _to_48k(x, fs)

    def integrated(row, rate):
        edge = int(0.5 * rate)                 # away from the resampler's ends
        return LoudnessMeter(fs=rate, channels=1)(np.ascontiguousarray(row[edge:-edge])) \
            .integrated

    diff = [integrated(a, fs) - integrated(b, 48000) for a, b in zip(x, y)]
    assert max(abs(d) for d in diff) <= 0.02, (fs, diff)


@pytest.mark.parametrize("fs", [3400.0, 4000.0, 6000.0, 8000.0, 12345.6, 47999.0, 48001.0,
                                 352800.0, 768000.0])
def test_k_weighting_design_is_stable_and_close_at_any_rate(fs):
    """The fitted pre-filter is stable and minimum phase at any rate the meter accepts,
    the RLB is the prewarped bilinear one, and below 8 kHz (where one biquad cannot follow
    the 48 kHz shelf to Nyquist) the error stays under 0.15 dB."""
    sos = k_weighting_sos(fs)
    for row in sos:
        assert row[3] == 1.0
        assert np.abs(np.roots(row[3:])).max() < 1.0 and np.abs(np.roots(row[:3])).max() <= 1.0
    top = min(fs / 2, 24000.0) * 0.999
    f = np.linspace(10.0, top, 2000)
    _, h48 = sosfreqz(k_weighting_sos(48000.0), worN=f, fs=48000.0)
    _, h = sosfreqz(sos, worN=f, fs=fs)
    err = np.abs(20 * np.log10(np.abs(h) / np.abs(h48)))
    assert err.max() <= (0.15 if fs < 8000 else 0.025), (fs, err.max())
    assert np.array_equal(k_weighting_sos(fs), sos)          # deterministic


# ---------------------------------------------------------------- conventions
def test_undefined_until_full_window_and_silence_is_minus_inf():
    fs = 48000
    m = LoudnessMeter(fs=fs, channels=1)
    r = m(np.zeros(int(0.3 * fs)))
    assert (r.momentary, r.short_term, r.integrated) == (None, None, None)
    assert np.isnan(r.step_momentary).all() and r.step_time.tolist() == [0.1, 0.2, 0.3]
    r = m(np.zeros(int(0.1 * fs), dtype=np.float32))
    assert r.momentary == -math.inf and r.short_term is None and r.integrated == -math.inf
    r = m(np.zeros(3 * fs))
    assert r.short_term == -math.inf
    d = r.to_json()
    json.dumps(d, allow_nan=False)
    assert d["momentary"] is None and d["integrated"] is None
    assert lufs_or_none(-23.5) == -23.5 and lufs_or_none(np.array([1.0, -np.inf])) == [1.0, None]


def test_five_channel_default_weights():
    assert Params(channels=5).weights == (1.0, 1.0, 1.0, 1.41, 1.41)
    assert Params(channels=2).weights == (1.0, 1.0)
    # a signal in Ls only reads 10 log10(1.41) = 1.49 LU above the same signal in L
    fs = 48000
    x = np.zeros((5, 2 * fs))
    x[0] = 0.1 * np.sin(2 * np.pi * 1000 * np.arange(2 * fs) / fs)
    y = x[[1, 2, 3, 0, 4]]  # the sine moved to channel 3 (Ls)
    lf = LoudnessMeter(fs=fs, channels=5)(x).integrated
    ls = LoudnessMeter(fs=fs, channels=5)(y).integrated
    assert ls - lf == pytest.approx(10 * math.log10(1.41), abs=1e-9)


# ---------------------------------------------------------------- block invariance
TOL = {np.float64: 1e-12, np.float32: 1e-6}


def _check_invariance(fs, x, lengths, dtype):
    x = x.astype(dtype)
    t0, m0, s0, r0 = run_partition(LoudnessMeter(fs=fs), x, [x.shape[-1]])
    t1, m1, s1, r1 = run_partition(LoudnessMeter(fs=fs), x, lengths)
    assert np.isfinite(m0).sum() > 10 and np.isfinite(s0).sum() >= 3 and np.isinf(m0).any()
    assert (m0[np.isfinite(m0)] < -100).any()
    np.testing.assert_array_equal(t1, t0)
    np.testing.assert_allclose(m1, m0, rtol=TOL[dtype], atol=0, equal_nan=True)
    np.testing.assert_allclose(s1, s0, rtol=TOL[dtype], atol=0, equal_nan=True)
    assert r1.integrated == pytest.approx(r0.integrated, rel=TOL[dtype], abs=0)
    assert (r1.momentary, r1.short_term, r1.samples) == \
        pytest.approx((r0.momentary, r0.short_term, r0.samples), rel=TOL[dtype], abs=0)
    # the R128 outputs: loudness range, true and sample peak, maxima of M and S
    assert r0.loudness_range > 0.5 and r0.true_peak >= r0.sample_peak > -20
    for f in ("loudness_range", "true_peak", "sample_peak", "max_momentary", "max_short_term"):
        assert getattr(r1, f) == pytest.approx(getattr(r0, f), rel=TOL[dtype], abs=0), f
    np.testing.assert_allclose(r1.true_peak_channels, r0.true_peak_channels, rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_block_invariance_random_partitions(dtype):
    fs = 48000
    x = invariance_signal(fs, 3.5)
    rng = np.random.default_rng(1)
    lengths = random_lengths(x.shape[-1], rng)
    assert lengths.count(1) > 50
    _check_invariance(fs, x, lengths, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_block_invariance_single_samples(dtype):
    fs = 8000  # every block 1 sample: a low rate keeps the call count down
    x = invariance_signal(fs, 3.3, seed=2)
    _check_invariance(fs, x, [1] * x.shape[-1], dtype)


def test_block_invariance_non_integer_subblock_rate():
    fs = 11025  # 100 ms = 1102.5 samples: sub-blocks of 1102 and 1103 samples alternate
    x = invariance_signal(fs, 3.5, seed=3)
    t0, m0, _, r0 = run_partition(LoudnessMeter(fs=fs), x, [x.shape[-1]])
    np.testing.assert_allclose(t0, 0.1 * np.arange(1, t0.size + 1), rtol=0, atol=1 / fs)
    _check_invariance(fs, x, random_lengths(x.shape[-1], np.random.default_rng(4)), np.float64)


def test_transposed_time_major_blocks_give_the_bits_of_contiguous_blocks():
    """``rtamt loudness`` passes ``buf.T``, the ``(C, T)`` view of a ``(T, C)`` buffer that
    soundfile decodes into (the meter's stages are time-major, so nothing is copied): the
    same bits as C-contiguous ``(C, T)`` blocks, state included."""
    fs = 48000
    x = invariance_signal(fs, 3.5, seed=7)                 # (2, T)
    a, b = LoudnessMeter(fs=fs), LoudnessMeter(fs=fs)
    buf = np.empty((7000, 2))
    for i in range(0, x.shape[1], 7000):
        n = min(7000, x.shape[1] - i)
        buf[:n] = x[:, i:i + n].T
        ra, rb = a(np.ascontiguousarray(x[:, i:i + n])), b(buf[:n].T)
        np.testing.assert_array_equal(ra.step_momentary, rb.step_momentary)
    assert_same_state(a.state_dict(), b.state_dict())
    assert (a.integrated, a.loudness_range, a.true_peak) == (b.integrated, b.loudness_range,
                                                             b.true_peak)


@pytest.mark.parametrize("truepeak", ["sinc", "bs1770"])
def test_true_peak_on_a_second_thread_gives_the_same_bits(truepeak):
    """``threads=2`` runs each block's true peak on a thread of its own (with denormals
    flushed there too) beside the K-weighting and gating: the same results and state as one
    thread, block by block, under a random partition; a copy and a pickle of such a meter
    leave the thread behind and go on alike."""
    import copy
    import pickle

    fs = 48000
    x = invariance_signal(fs, 3.5, seed=11) * 4.0         # crests above full scale too
    x[:, 30000:31000] *= 1e-307                            # denormal range
    one = LoudnessMeter(fs=fs, truepeak=truepeak)
    two = LoudnessMeter(fs=fs, truepeak=truepeak, threads=2)
    pos = 0
    for n in random_lengths(x.shape[-1], np.random.default_rng(5)):
        ra, rb = one(x[:, pos:pos + n]), two(x[:, pos:pos + n])
        pos += n
        np.testing.assert_array_equal(ra.true_peak_channels, rb.true_peak_channels)
        np.testing.assert_array_equal(ra.step_momentary, rb.step_momentary)
    assert_same_state(one.state_dict(), two.state_dict())
    assert two._pool is not None
    for other in (copy.deepcopy(two), pickle.loads(pickle.dumps(two))):
        assert other._pool is None and other.threads == 2
        y = x[:, :9000]
        np.testing.assert_array_equal(other(y).true_peak_channels,
                                      copy.deepcopy(one)(y).true_peak_channels)
    # a stream of subnormal samples only: its peaks are what flushing denormals makes of
    # them, on either thread (MXCSR is per thread)
    tiny = invariance_signal(fs, 0.5, seed=12) * 1e-310
    a = LoudnessMeter(fs=fs, truepeak=truepeak)(tiny)
    b = LoudnessMeter(fs=fs, truepeak=truepeak, threads=2)(tiny)
    np.testing.assert_array_equal(a.true_peak_channels, b.true_peak_channels)
    np.testing.assert_array_equal(a.sample_peak_channels, b.sample_peak_channels)
    with pytest.raises(ValueError, match="threads must be 1 or 2"):
        LoudnessMeter(fs=fs, threads=3)


# ---------------------------------------------------------------- bad input
def _bad_blocks():
    nan = np.full((2, 100), 0.01)
    nan[1, 37] = np.nan
    inf = np.full((2, 100), 0.01, dtype=np.float32)
    inf[0, 5] = np.inf
    return {
        "nan": (nan, ["block 5", "channel 1", "sample 37"]),
        "inf": (inf, ["block 5", "channel 0", "sample 5"]),
        "channels": (np.zeros((3, 100)), ["block 5", "3 channels"]),
        "ndim1": (np.zeros(100), ["block 5", "ndim=1"]),
        "ndim3": (np.zeros((1, 2, 100)), ["block 5", "ndim=3"]),
        "empty": (np.zeros((2, 0)), ["block 5", "empty"]),
        "int": (np.zeros((2, 100), dtype=np.int16), ["block 5", "int16"]),
        "list": ([[0.0], [0.0]], ["block 5", "numpy array"]),
    }


@pytest.mark.parametrize("kind", sorted(_bad_blocks()))
def test_bad_input_rejected_state_untouched(kind):
    fs = 48000
    x = invariance_signal(fs, 1.0, seed=5)
    meter, twin = LoudnessMeter(fs=fs), LoudnessMeter(fs=fs)
    for i in range(5):  # 5 good blocks (mid sub-block afterwards)
        meter(x[:, i * 1111:(i + 1) * 1111])
        twin(x[:, i * 1111:(i + 1) * 1111])
    before = meter.state_dict()
    bad, words = _bad_blocks()[kind]
    with pytest.raises(LoudnessInputError) as exc:
        meter(bad)
    assert isinstance(exc.value, ValueError)
    for w in words:
        assert w in str(exc.value), (w, str(exc.value))
    assert_same_state(meter.state_dict(), before)
    a, b = meter(x[:, 5555:]), twin(x[:, 5555:])
    np.testing.assert_array_equal(a.step_momentary, b.step_momentary)
    assert a.integrated == b.integrated


# ---------------------------------------------------------------- state
def test_state_dict_round_trip_bit_exact():
    fs = 48000
    x = invariance_signal(fs, 4.0, seed=6)
    a = LoudnessMeter(fs=fs)
    run_blocks(a, x[:, :100_000], 1000)  # stops mid sub-block
    sd = a.state_dict()
    rest = [a(x[:, i:i + 777]) for i in range(100_000, x.shape[-1], 777)]  # a moves on
    for _ in range(2):  # the snapshot is a deep copy: loadable twice, unaffected by `a`
        b = LoudnessMeter(fs=fs)
        b.load_state_dict(sd)
        for ra, i in zip(rest, range(100_000, x.shape[-1], 777)):
            rb = b(x[:, i:i + 777])
            np.testing.assert_array_equal(rb.step_time, ra.step_time)
            np.testing.assert_array_equal(rb.step_momentary, ra.step_momentary)
            np.testing.assert_array_equal(rb.step_short_term, ra.step_short_term)
            assert (rb.momentary, rb.short_term, rb.integrated) == \
                (ra.momentary, ra.short_term, ra.integrated)
        assert_same_state(b.state_dict(), a.state_dict())
    with pytest.raises(LoudnessInputError):
        LoudnessMeter(fs=44100).load_state_dict(sd)


def test_reset_equals_fresh_meter():
    fs = 48000
    x = invariance_signal(fs, 1.0, seed=7)
    m = LoudnessMeter(fs=fs)
    m(x)
    m.reset()
    assert m.momentary is None and m.blocks_processed == 0
    assert_same_state(m.state_dict(), LoudnessMeter(fs=fs).state_dict())
    assert m(x).integrated == LoudnessMeter(fs=fs)(x).integrated


def test_the_meter_reaches_its_stages_only_through_their_public_interface():
    """The meter is a composition (issue 40): K-weighting -> gating blocks -> gated
    statistics, true peak beside them.  No private name of a stage (``kw._state``,
    ``st._block``, ``st._ensure_state``) is read or written in bs1770.py: a private
    attribute is only ever taken of the meter itself (``self``, a fresh meter) or of the
    module aliases."""
    import ast
    import inspect

    from rtamt.loudness import bs1770

    own = {"self", "fresh", "cls", "_G", "_L", "_C"}
    bad = []
    for node in ast.walk(ast.parse(inspect.getsource(bs1770))):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            base = node.value
            if not (isinstance(base, ast.Name) and base.id in own):
                bad.append(f"line {node.lineno}: {ast.unparse(node)}")
    assert bad == []
    m = bs1770.LoudnessMeter(fs=48000, channels=2)
    assert [type(s).__name__ for s in m.stages] == [
        "KWeighting", "GatingBlocks", "GatedStatistics", "TruePeak"]
    assert m.gated is m["statistics"]


def test_the_meter_is_a_stage_group_whose_stages_count_its_blocks():
    """Issue 40: the meter (and its scheduler front end) is a StageGroup that defines no
    ``to()`` of its own; every stage's own block counter advances with the meter's, and
    the snapshot's children carry those counts; ``to()`` rebinds (all stages)."""
    import ast
    import inspect

    from rtamt.engine.stage import StageGroup
    from rtamt.loudness import bs1770, r128stream

    assert issubclass(LoudnessMeter, StageGroup)
    assert issubclass(r128stream.R128Stream, LoudnessMeter)
    for cls in (LoudnessMeter, r128stream.R128Stream):
        assert "to" not in vars(cls), cls
    # no array-type test on the meter's block path (the conversions are bound in to())
    src = ast.parse(inspect.getsource(bs1770.LoudnessMeter))
    calls = [ast.unparse(n) for n in ast.walk(src) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id in ("isinstance", "type")]
    assert not [c for c in calls if "ndarray" in c or "Tensor" in c or "torch" in c], calls
    assert not [n for n in ast.walk(src) if isinstance(n, ast.Compare)
                and "backend" in ast.unparse(n)]
    x = invariance_signal(48000, 1.0, seed=11)
    m = LoudnessMeter(fs=48000, channels=2)
    for a, b in ((0, 100), (100, 4900), (4900, 4901), (4901, 48000)):
        m(x[:, a:b])
    assert m.blocks_processed == 4
    assert [s.blocks_processed for s in m.stages] == [4, 4, 4, 4]
    sd = m.state_dict()
    assert {k: c["block"] for k, c in sd["children"].items()} == {
        "kweighting": 4, "gating": 4, "statistics": 4, "truepeak": 4}
    assert m.to(backend="numba") is m and m.backend == "numba"
    twin = LoudnessMeter(fs=48000, channels=2)
    twin.load_state_dict(sd)
    assert [s.blocks_processed for s in twin.stages] == [4, 4, 4, 4]
    m.reset()
    assert [s.blocks_processed for s in m.stages] == [0, 0, 0, 0]


def test_a_refused_stage_state_rolls_every_stage_back():
    """A snapshot whose statistics are refused (a non-finite power) changes nothing: the
    sample stages loaded before it are rolled back (all stages or none)."""
    x = invariance_signal(48000, 1.0, seed=12)
    a, b = LoudnessMeter(fs=48000), LoudnessMeter(fs=48000)
    a(x[:, :30000])
    b(x[:, :10000])
    before = b.state_dict()
    bad = a.state_dict()
    bad["children"]["statistics"]["arrays"]["gate_e"][7] = np.nan
    with pytest.raises(LoudnessInputError, match="statistics.*non-finite"):
        b.load_state_dict(bad)
    assert_same_state(b.state_dict(), before)
    del bad["children"]["statistics"]
    with pytest.raises(LoudnessInputError, match="stages"):
        b.load_state_dict(bad)
    assert_same_state(b.state_dict(), before)
