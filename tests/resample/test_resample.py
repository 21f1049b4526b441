"""Streaming polyphase resampler (:mod:`rtamt.resample`).

* block-size invariance (whole / 1-sample / random / fixed 3, 7, 11-sample blocks) for
  down- and up-sampling ratios incl. 160/441, float32 and float64, and inside a Chain;
* agreement with ``scipy.signal.upfirdn`` (the causal reference) and, after the
  documented delay, with ``scipy.signal.resample_poly`` (zero-phase, offline);
* length bookkeeping (``ceil(n up / down)``), zero-output blocks, state snapshots,
  ``reset()``, bad input;
* accuracy: pass-band sines vs the analytically resampled sine, alias / image
  rejection as documented for the presets.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from scipy import signal

import rtamt
from rtamt import RtamtInputError
from rtamt.filterbank import Gammatone
from rtamt.ihc import IHCEnvelope
from rtamt.resample import (
    Resampler,
    ResamplerParams,
    block_output_length,
    design,
    gain_db,
    group_delay,
    output_length,
)

from _helpers import make_signal, max_rel_err, random_partition, run_blocks

N = 9600
TOL = {np.float32: 1e-6, np.float64: 1e-12}
DTYPES = [np.float32, np.float64]
RATIOS = [(48000, 16000), (44100, 16000), (16000, 48000), (44100, 48000)]
RATIO_IDS = [f"{a}-{b}" for a, b in RATIOS]
PARTITIONS = ["whole", "ones", "random", "fixed3", "fixed7", "fixed11"]


def _x(fs, dtype=np.float64, n=N):
    """(3, n) realistic channels: onset, silent gap, tone + noise, different levels."""
    x = np.stack([make_signal(n, fs=fs, seed=s) * g for s, g in ((0, 1.0), (1, 0.3), (2, 3.0))])
    return np.ascontiguousarray(x.astype(dtype))


def _sizes(partition, n, seed=0):
    if partition == "whole":
        return [n]
    if partition == "ones":
        return [1] * n
    if partition == "random":
        return random_partition(n, seed=seed, big=min(8192, n - 1000))
    k = int(partition[len("fixed"):])
    return [k] * (n // k) + ([n % k] if n % k else [])


# ----------------------------------------------------------------------------------------
# block-size invariance and length bookkeeping

@pytest.mark.parametrize("partition", PARTITIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("fs_in,fs_out", RATIOS, ids=RATIO_IDS)
def test_block_partition_invariance(fs_in, fs_out, dtype, partition):
    x = _x(fs_in, dtype)
    ref = Resampler(fs_in=fs_in, fs_out=fs_out)(x)
    assert ref.dtype == np.dtype(dtype) and ref.shape == (3, -(-N * fs_out // fs_in))
    sizes = _sizes(partition, N, seed=zlib.crc32(f"{fs_in}{fs_out}".encode()))
    r = Resampler(fs_in=fs_in, fs_out=fs_out)
    outs, n, total = [], 0, 0
    for s in sizes:
        want = r.next_block_length(s)
        y = r(x[:, n:n + s])
        n += s
        assert y.shape == (3, want) and y.dtype == np.dtype(dtype)
        outs.append(y)
        # total produced so far = ceil(n up / down)
        total += y.shape[-1]
        assert total == output_length(r.coeffs, n) == r.output_length(n)
        assert 0 <= int(r.state["offset"][0]) < r.down
    got = np.concatenate(outs, axis=-1)
    assert got.shape == ref.shape
    err = max_rel_err(got, ref)
    assert err <= TOL[dtype], f"{partition}: max rel err {err:.3g}"
    if partition == "ones" and fs_out < fs_in:
        assert any(o.shape[-1] == 0 for o in outs)


@pytest.mark.parametrize("fs_in,fs_out", RATIOS, ids=RATIO_IDS)
def test_partitions_are_bit_exact(fs_in, fs_out):
    x = _x(fs_in, np.float32)
    ref = Resampler(fs_in=fs_in, fs_out=fs_out)(x)
    for sizes in (_sizes("random", N, seed=5), [3, 1, 1, 441, 2] * (N // 448) + [N % 448]):
        assert np.array_equal(run_blocks(Resampler(fs_in=fs_in, fs_out=fs_out), x, sizes), ref)


@pytest.mark.parametrize("fs_in,fs_out", RATIOS, ids=RATIO_IDS)
def test_matches_upfirdn_and_resample_poly(fs_in, fs_out):
    """Causal output = scipy.signal.upfirdn(h, x, up, down) truncated to ceil(n up / down);
    resample_poly (zero-phase) = the same advanced by the group delay."""
    x = _x(fs_in)
    r = Resampler(fs_in=fs_in, fs_out=fs_out)
    c = r.coeffs
    y = r(x)
    ref = signal.upfirdn(c.h, x, c.up, c.down, axis=-1)[:, :y.shape[-1]]
    assert max_rel_err(y, ref) <= 1e-12
    d = r.delay
    rp = signal.resample_poly(x, c.up, c.down, axis=-1)
    assert rp.shape == y.shape
    if d == int(d):
        d = int(d)
        assert max_rel_err(y[:, d:], rp[:, :-d]) <= 1e-12
    # the filter is scipy's default resample_poly filter
    hl = 10 * max(c.up, c.down)
    h = signal.firwin(2 * hl + 1, 1.0 / max(c.up, c.down), window=("kaiser", 5.0)) * c.up
    assert np.array_equal(c.h, h)


def test_ratio_reduction_delay_and_length_formulas():
    cases = {  # (fs_in, fs_out) -> (up, down, taps per phase, delay in output samples)
        (48000, 16000): (1, 3, 61, 10.0),
        (44100, 16000): (160, 441, 56, 10.0),
        (16000, 48000): (3, 1, 21, 30.0),
        (44100, 48000): (160, 147, 21, 1600 / 147),
        (44100, 11025): (1, 4, 81, 10.0),
        (22050.5, 44101): (2, 1, 21, 20.0),
    }
    for (fi, fo), (up, down, k, d) in cases.items():
        r = Resampler(fs_in=fi, fs_out=fo)
        assert (r.up, r.down, r.coeffs.taps_per_phase) == (up, down, k)
        assert r.fs_out == fo and r.delay == pytest.approx(d) and r.coeffs.delay == r.delay
        assert r.delay_s == pytest.approx(10.0 / min(fi, fo))
        assert group_delay(r.coeffs, "in") == pytest.approx(r.delay * fi / fo)
        assert group_delay(r.coeffs, "s") == pytest.approx(r.delay / fo)
        for n in (0, 1, 2, 3, 146, 147, 440, 441, 442, 10 ** 6 + 7):
            assert r.output_length(n) == -(-n * up // down)
    # given as up/down
    r = Resampler(fs_in=48000, up=2, down=6)
    assert (r.up, r.down, r.fs_out) == (1, 3, 16000.0)
    assert Resampler(fs_in=48000, fs_out=16000, up=1, down=3).down == 3
    assert Resampler(fs_in=48000, fs_out=16000, preset="hq").delay == 20.0


def test_zero_output_blocks_have_time_length_zero():
    r = Resampler(fs_in=48000, fs_out=16000)
    y0 = r(np.ones(1))  # the output at position 0 uses x[0]: one sample
    assert y0.shape == (1,)
    for shape, out in (((1,), (0,)), ((1,), (0,)), ((2,), (1,))):
        y = r(np.ones(shape))
        assert y.shape == out and y.dtype == np.float64
    r = Resampler(fs_in=44100, fs_out=16000)
    assert r(np.ones((2, 3, 1), np.float32)).shape == (2, 3, 1)  # n = 1: ceil(160/441)
    assert r(np.ones((2, 3, 2), np.float32)).shape == (2, 3, 1)  # n = 3: ceil(480/441)
    y = r(np.ones((2, 3, 2), np.float32))  # n = 5: ceil(800/441) = 2
    assert y.shape == (2, 3, 0) and y.dtype == np.float32
    r = Resampler(fs_in=44100, fs_out=11025)
    assert r(np.ones((4, 1))).shape == (4, 1)
    yt = r(torch.ones(4, 3, dtype=torch.float64))
    assert isinstance(yt, torch.Tensor) and tuple(yt.shape) == (4, 0)
    # pure form
    c = design(ResamplerParams(fs_in=44100, fs_out=11025))
    st = Resampler.init_state(c, 2, 4, np.float64)
    assert Resampler.process(c, st, np.ones((2, 4, 1))).shape == (2, 4, 1)
    assert block_output_length(c, st, 3) == 0
    assert Resampler.process(c, st, np.ones((2, 4, 3))).shape == (2, 4, 0)
    assert block_output_length(c, st, 1) == 1


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_shapes_mono_batch_and_torch(dtype):
    x = _x(44100, dtype)
    ref = Resampler(fs_in=44100, fs_out=16000)(x)
    sizes = _sizes("random", N, seed=3)
    mono = run_blocks(Resampler(fs_in=44100, fs_out=16000), x[1], sizes)
    assert mono.shape == ref.shape[1:] and np.array_equal(mono, ref[1])
    xb = np.stack([x, x[::-1]])  # (2, 3, T)
    yb = run_blocks(Resampler(fs_in=44100, fs_out=16000), xb, sizes)
    assert yb.shape == (2,) + ref.shape
    assert np.array_equal(yb[0], ref) and np.array_equal(yb[1], ref[::-1])
    rt = Resampler(fs_in=44100, fs_out=16000)
    xt = torch.from_numpy(x.copy())
    yt = torch.cat([rt(xt[:, :1000]), rt(xt[:, 1000:1001]), rt(xt[:, 1001:])], dim=-1)
    assert isinstance(yt, torch.Tensor) and np.array_equal(yt.numpy(), ref)


@pytest.mark.parametrize("partition", ["ones", "random", "fixed7"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_inside_a_chain(dtype, partition):
    """A chain with a 48 kHz -> 16 kHz stage in the middle (T_out != T_in; the chain's
    work-buffer reuse must not be confused by it)."""
    def make():
        return rtamt.Chain([Gammatone(fs=48000.0, flow=100.0, fhigh=6000.0),
                            Resampler(fs_in=48000, fs_out=16000), IHCEnvelope(fs=16000.0)])

    x = make_signal(N, fs=48000.0).astype(dtype)
    ref = make().process_all(x)
    assert ref["resample"].shape[-1] == N // 3 and ref["ihc"].shape == ref["resample"].shape
    sizes = _sizes(partition, N, seed=11)
    got = run_blocks(make(), x, sizes, key=True)
    for k in ref:
        assert got[k].shape == ref[k].shape and max_rel_err(got[k], ref[k]) <= TOL[dtype], k
    got = run_blocks(make(), x, sizes)  # chain(x): last stage only, buffers reused
    assert max_rel_err(got, ref["ihc"]) <= TOL[dtype]
    assert run_blocks(make(), x, [3] * (N // 3)).shape == ref["ihc"].shape


# ----------------------------------------------------------------------------------------
# state

@pytest.mark.parametrize("fs_in,fs_out", RATIOS, ids=RATIO_IDS)
def test_state_dict_roundtrip_and_reset(fs_in, fs_out):
    x = _x(fs_in)
    sizes = [7, 1, 300, 11, 3]
    a = Resampler(fs_in=fs_in, fs_out=fs_out)
    n = 0
    for s in sizes:
        a(x[:, n:n + s])
        n += s
    sd = a.state_dict()
    assert sd["arrays"]["offset"].dtype == np.int64 and sd["arrays"]["offset"].shape == (1,)
    assert sd["arrays"]["hist"].shape == (1, a.coeffs.taps_per_phase - 1, 3)
    rest = [1, 2, 1000, 5, 441]
    ya = []
    m = n
    for s in rest:
        ya.append(a(x[:, m:m + s]))
        m += s
    b = Resampler(fs_in=fs_in, fs_out=fs_out)
    b.load_state_dict(sd)
    m = n
    for s, want in zip(rest, ya):
        assert np.array_equal(b(x[:, m:m + s]), want)
        m += s
    assert b.blocks_processed == a.blocks_processed
    # reset -> as new
    a.reset()
    assert a.state is None
    assert np.array_equal(a(x), Resampler(fs_in=fs_in, fs_out=fs_out)(x))
    # a snapshot with an impossible phase is refused, nothing changes
    bad = b.state_dict()
    bad["arrays"]["offset"] = np.array([b.down], np.int64)
    before = b.state_dict()
    with pytest.raises(RtamtInputError, match="offset"):
        b.load_state_dict(bad)
    after = b.state_dict()
    for k in before["arrays"]:
        assert np.array_equal(before["arrays"][k], after["arrays"][k])


def test_nan_block_rejected_state_untouched():
    rng = np.random.default_rng(0)
    blocks = [rng.standard_normal((2, 3, s)) for s in (13, 7, 29, 5)]
    a, twin = Resampler(fs_in=44100, fs_out=16000), Resampler(fs_in=44100, fs_out=16000)
    for blk in blocks[:2]:
        assert np.array_equal(a(blk), twin(blk))
    before = a.state_dict()["arrays"]
    bad = blocks[2].copy()
    bad[1, 2, 4] = np.nan
    with pytest.raises(RtamtInputError) as ei:
        a(bad)
    msg = str(ei.value)
    for w in ["resample: block 2", "non-finite", "nan", "batch 1", "channel 2", "sample 4"]:
        assert w in msg, (w, msg)
    after = a.state_dict()["arrays"]
    assert all(np.array_equal(before[k], after[k]) for k in before)
    for blk in blocks[2:]:
        assert np.array_equal(a(blk), twin(blk))
    with pytest.raises(RtamtInputError, match="empty block"):
        a(np.ones((2, 3, 0)))
    with pytest.raises(RtamtInputError, match="mid-stream"):
        a(np.ones((3, 5)))


def test_bad_params():
    for kw, match in [
        (dict(fs_in=0.0, fs_out=16000), "fs_in"),
        (dict(fs_in=48000), "fs_out"),
        (dict(fs_in=48000, up=2), "both"),
        (dict(fs_in=48000, up=0, down=3), "positive"),
        (dict(fs_in=48000, fs_out=17000, up=1, down=3), "disagrees"),
        (dict(fs_in=48000, fs_out=48000 * 2 / 3 + 0.001), "too fine"),
        (dict(fs_in=48000, fs_out=16000, preset="best"), "preset"),
        (dict(fs_in=48000, fs_out=16000, cutoff=1.5), "cutoff"),
        (dict(fs_in=48000, fs_out=16000, half_len_factor=0), "half_len_factor"),
    ]:
        with pytest.raises(ValueError, match=match):
            Resampler(**kw)


# ----------------------------------------------------------------------------------------
# accuracy

def _fit(y, f, fs):
    """Least-squares amplitude of a sine at f (Hz) in y and the residual."""
    t = np.arange(y.size) / fs
    m = np.stack([np.sin(2 * np.pi * f * t), np.cos(2 * np.pi * f * t)], 1)
    c, *_ = np.linalg.lstsq(m, y, rcond=None)
    return float(np.hypot(*c)), y - m @ c


@pytest.mark.parametrize("preset,tol", [("scipy", 3e-3), ("hq", 1e-4)])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("fs_in,fs_out", RATIOS, ids=RATIO_IDS)
def test_passband_sine(fs_in, fs_out, dtype, preset, tol):
    f, A = 1000.0, 0.5
    n = fs_in // 2
    x = (A * np.sin(2 * np.pi * f * np.arange(n) / fs_in)).astype(dtype)
    r = Resampler(fs_in=fs_in, fs_out=fs_out, preset=preset)
    y = run_blocks(r, x, _sizes("random", n, seed=1)).astype(np.float64)
    assert y.size == r.output_length(n)
    skip = int(np.ceil(2 * r.delay)) + 1  # the filter has filled
    k = np.arange(y.size)
    ya = A * np.sin(2 * np.pi * f * (k / fs_out - r.delay_s))  # analytically resampled sine
    err = np.max(np.abs(y[skip:] - ya[skip:])) / A
    assert err <= tol + (2e-5 if dtype == np.float32 else 0), err
    amp, _ = _fit(y[skip:], f, fs_out)
    assert abs(20 * np.log10(amp / A)) <= (0.1 if preset == "scipy" else 0.01)
    # frequency: mean phase advance per sample of the analytic signal
    z = signal.hilbert(y[skip:])[200:-200]
    f_est = np.angle(np.sum(z[1:] * np.conj(z[:-1]))) * fs_out / (2 * np.pi)
    assert abs(f_est - f) < 0.05, f_est


# (preset, f / (min(fs_in, fs_out)/2) of the offending component, min attenuation dB)
REJECTION = [("scipy", 1.2, 54.0), ("scipy", 1.4, 54.0), ("hq", 1.1, 85.0), ("hq", 1.3, 85.0),
             ("hq", 1.5, 85.0)]
PASS_EDGE = {"scipy": 0.8, "hq": 0.7}


# up-sampling: the offending image comes from a tone at fs_in - rel * fn, which must lie
# in the pass band
REJECTION_CASES = [(fi, fo) + rj for fi, fo in RATIOS for rj in REJECTION
                   if fo < fi or fi - rj[1] * min(fi, fo) / 2 <= PASS_EDGE[rj[0]] * fi / 2 + 1e-9]


@pytest.mark.parametrize("fs_in,fs_out,preset,rel,att", REJECTION_CASES)
def test_alias_and_image_rejection(fs_in, fs_out, preset, rel, att):
    r = Resampler(fs_in=fs_in, fs_out=fs_out, preset=preset)
    fn = min(fs_in, fs_out) / 2
    n = fs_in // 2
    if fs_out < fs_in:
        # down-sampling: a component above the new Nyquist would alias; the output is
        # (almost) nothing
        f = rel * fn
        x = np.sin(2 * np.pi * f * np.arange(n) / fs_in)
        y = r(x)[int(2 * r.delay) + 1:]
        level = np.sqrt(2 * np.mean(y ** 2))
    else:
        # up-sampling: a tone at f0 < fs_in/2 has an image at fs_in - f0 = rel * fn
        f0 = fs_in - rel * fn
        x = np.sin(2 * np.pi * f0 * np.arange(n) / fs_in)
        y = r(x)[int(2 * r.delay) + 1:]
        amp, res = _fit(y, f0, fs_out)
        assert abs(20 * np.log10(amp)) <= 0.1
        level = np.sqrt(2 * np.mean(res ** 2))  # every image of the tone
    assert 20 * np.log10(level) <= -att, 20 * np.log10(level)


@pytest.mark.parametrize("preset,pb,ripple,sb,att",
                         [("scipy", 0.8, 0.02, 1.2, 54.0), ("hq", 0.7, 0.001, 1.1, 85.0),
                          ("hq", 0.8, 0.1, 1.1, 85.0)])
@pytest.mark.parametrize("fs_in,fs_out", RATIOS + [(44100, 11025), (8000, 11025)])
def test_documented_response(fs_in, fs_out, preset, pb, ripple, sb, att):
    c = Resampler(fs_in=fs_in, fs_out=fs_out, preset=preset).coeffs
    fn = min(fs_in, fs_out) / 2
    f = np.linspace(0.0, c.up * fs_in / 2, 100001)
    g = gain_db(c, f)
    assert np.max(np.abs(g[f <= pb * fn])) <= ripple
    assert np.max(g[f >= sb * fn]) <= -att
    if preset == "scipy":
        assert gain_db(c, fn)[0] == pytest.approx(-6.0, abs=0.5)
