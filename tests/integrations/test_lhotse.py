"""rtamt.integrations.lhotse: the extractor's frames (streaming equals corpus, equals the
model's own outputs pooled by numpy), its configuration, channels, and the lhotse
pipelines (num_jobs=2, a Dask LocalCluster, lilcom and HDF5 storage) on a corpus of WAV
files written here."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import rtamt
from rtamt.integrations.lhotse import RtamtConfig, RtamtExtractor

FS = 16000


def _noise(seconds, fs=FS, channels=None, seed=0, level=0.05):
    """Noise with a slow amplitude modulation (so the modulation features vary)."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds * fs))
    shape = (n,) if channels is None else (channels, n)
    t = np.arange(n) / fs
    return rng.standard_normal(shape) * level * (1 + 0.8 * np.sin(2 * np.pi * 4 * t))


def _online(ext, x, fs, seed, max_block=5000, ones=3):
    """online_inference over a random partition of ``x`` (with ``ones`` 1-sample blocks
    first), the last block with last=True; the frames concatenated."""
    rng = np.random.default_rng(seed)
    n = x.shape[-1]
    sizes = [1] * ones
    while sum(sizes) < n:
        sizes.append(int(rng.integers(1, max_block)))
    ctx, out, pos = None, [], 0
    for b in sizes:
        blk = x[..., pos:pos + b]
        pos += b
        f, ctx = ext.online_inference(blk, ctx, sampling_rate=fs, last=pos >= n)
        out.append(f)
        if pos >= n:
            break
    return np.concatenate(out, axis=0), ctx


def _pool_numpy(y, h, pooling):
    """The frames of a model output ``y`` (dim, T) with T a multiple of h, by numpy."""
    d, t = y.shape
    frames = y.reshape(d, t // h, h)
    if pooling == "mean":
        return frames.mean(axis=-1).T
    p = (frames ** 2).mean(axis=-1).T
    return 10 * np.log10(np.maximum(p, 1e-12)) if pooling == "db" else p


# ------------------------------------------------------------------ streaming = corpus
def test_dau1997_extract_equals_online_random_blocks_and_numpy_pooling():
    """10 s recording (plus a trailing 100-sample partial frame): compute() equals
    online_inference over random blocks bit for bit (float64), extract() is its float32,
    and the frames are the model's own modfb pooled by numpy (dB of mean power)."""
    ext = RtamtExtractor(RtamtConfig(model="dau1997", spl_ref=94.0))
    x = _noise(10.0)
    x = np.concatenate([x, x[:100]])
    full = ext.compute(x, FS)
    hop = FS // 100
    assert full.dtype == np.float64
    assert full.shape == ((len(x) + hop // 2) // hop, ext.feature_dim(FS)) == (1001, 275)
    online, ctx = _online(ext, x, FS, seed=1)
    np.testing.assert_array_equal(online, full)
    assert ctx["done"] and ctx["frames"] == full.shape[0]
    e = ext.extract(x, FS)
    assert e.dtype == np.float32
    np.testing.assert_array_equal(e, full.astype(np.float32))

    # the model on its own, 1 s blocks (100 frames each), pooled here
    model = rtamt.Dau1997(FS, spl_ref=94.0)
    ref = []
    for i in range(0, 10 * FS, FS):
        ref.append(_pool_numpy(np.asarray(model.process_all(x[i:i + FS])["modfb"]), hop,
                               "db"))
    tail = np.asarray(model.process_all(x[10 * FS:])["modfb"])      # 100 samples
    ref.append(10 * np.log10((tail ** 2).mean(axis=-1))[None])
    ref = np.concatenate(ref)
    np.testing.assert_allclose(full, ref, rtol=1e-12, atol=1e-9)
    assert np.ptp(full[:, 10]) > 1.0          # the 4 Hz modulation shows in the features


def test_online_partitions_agree_with_each_other_and_pooling_kinds():
    """Other outputs and poolings: the adaptation output, mean and rms, two partitions."""
    x = _noise(2.0, seed=3)
    for output, pooling in (("adaptloop", "mean"), ("adaptloop", "rms"), ("modfb", "power")):
        ext = RtamtExtractor(RtamtConfig(model="king2019" if output == "modfb" else "dau1997",
                                         output=output if output == "modfb" else
                                         "adaptloop", pooling=pooling))
        full = ext.compute(x, FS)
        for seed in (5, 6):
            np.testing.assert_array_equal(_online(ext, x, FS, seed, max_block=700)[0], full)
    ext = RtamtExtractor(RtamtConfig(output="adaptloop", pooling="rms"))
    mean = RtamtExtractor(RtamtConfig(output="adaptloop", pooling="mean")).compute(x, FS)
    rms = ext.compute(x, FS)
    model = rtamt.Dau1997(FS)
    y = np.asarray(model.process_all(x)["adaptloop"])
    np.testing.assert_allclose(mean, _pool_numpy(y, 160, "mean"), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rms, np.sqrt(_pool_numpy(y, 160, "power")), rtol=1e-12)


def test_moore2016_stereo_loudness_frames():
    """Moore2016 at 32 kHz, left/right: specific loudness (2 ears x 150) and STL pooled
    over 10 model frames; online equals compute; numpy pooling of the model's frames."""
    fs = 32000
    x = _noise(1.5, fs=fs, channels=2, seed=7)
    x[1] *= 0.3
    ext = RtamtExtractor(RtamtConfig(model="moore2016"))
    full = ext.compute(x, fs)
    assert full.shape == (150, 300) and ext.feature_dim(fs) == 300
    np.testing.assert_array_equal(_online(ext, x, fs, seed=8)[0], full)
    y = np.asarray(rtamt.Moore2016(fs).process_all(x)["specific_loudness"])
    np.testing.assert_allclose(full, _pool_numpy(y.reshape(300, -1), 10, "mean"), rtol=1e-12,
                               atol=1e-15)
    stl = RtamtExtractor(RtamtConfig(model="moore2016", output="stl")).compute(x[:1], fs)
    assert stl.shape == (150, 1) and (stl[50:] > 0).all()


def test_online_inference_context_is_not_modified_and_ends():
    ext = RtamtExtractor(RtamtConfig(output="adaptloop"))
    x = _noise(0.5)
    f1, c1 = ext.online_inference(x[:1234], sampling_rate=FS)
    buf = c1["buf"].copy()
    f2, c2 = ext.online_inference(x[1234:], c1)
    f2b, _ = ext.online_inference(x[1234:], c1)          # same context again: same frames
    np.testing.assert_array_equal(f2, f2b)
    np.testing.assert_array_equal(c1["buf"], buf)
    assert c1["samples"] == 1234 and c2["samples"] == len(x)
    _, c3 = ext.online_inference(np.zeros(0), c2, last=True)
    with pytest.raises(ValueError, match="ended by last=True"):
        ext.online_inference(x[:10], c3)
    with pytest.raises(ValueError, match="sampling_rate"):
        ext.online_inference(x[:10])
    with pytest.raises(ValueError, match="context must be"):
        ext.online_inference(x[:10], {"model": 1})


# ------------------------------------------------------------------ channels
def test_channels():
    x = _noise(0.5, channels=2, seed=9)
    cfg = dict(output="adaptloop")
    with pytest.raises(ValueError, match="2 channels for dau1997; choose channels='first'"):
        RtamtExtractor(RtamtConfig(**cfg)).extract(x, FS)
    one = RtamtExtractor(RtamtConfig(**cfg))
    a, b = one.extract(x[0], FS), one.extract(x[1], FS)
    np.testing.assert_array_equal(
        RtamtExtractor(RtamtConfig(channels="first", **cfg)).extract(x, FS), a)
    np.testing.assert_array_equal(
        RtamtExtractor(RtamtConfig(channels="mean", **cfg)).extract(x, FS),
        one.extract(x.mean(axis=0), FS))
    st = RtamtExtractor(RtamtConfig(channels="stack", num_channels=2, **cfg))
    assert st.feature_dim(FS) == 60
    np.testing.assert_array_equal(st.extract(x, FS), np.concatenate([a, b], axis=1))
    with pytest.raises(ValueError, match="num_channels=2, got 3 channels"):
        st.extract(np.concatenate([x, x[:1]]), FS)
    with pytest.raises(ValueError, match="not for moore2016"):
        RtamtConfig(model="moore2016", channels="stack")
    # check_channels: the same refusals before any audio is read (rtamt features uses it)
    one.check_channels(1)
    st.check_channels(2)
    RtamtExtractor(RtamtConfig(model="moore2016")).check_channels(2)
    with pytest.raises(ValueError, match="2 channels for dau1997"):
        one.check_channels(2)
    with pytest.raises(ValueError, match="3 channels for moore2016"):
        RtamtExtractor(RtamtConfig(model="moore2016")).check_channels(3)
    with pytest.raises(ValueError, match="num_channels=2, got 1 channels"):
        st.check_channels(1)


# ------------------------------------------------------------------ configuration
def test_config_round_trips_and_registers(tmp_path):
    from lhotse.features.base import FeatureExtractor, get_extractor_type

    cfg = RtamtConfig(model="king2019", model_kwargs={"flow": 100.0}, spl_ref=94.0,
                      dtype="float32", pooling="rms", frame_shift=0.02, db_floor=-90.0,
                      channels="mean", sampling_rate=FS)
    ext = RtamtExtractor(cfg)
    assert get_extractor_type("rtamt") is RtamtExtractor
    assert RtamtConfig.from_dict(cfg.to_dict()) == cfg
    path = tmp_path / "rtamt.yaml"
    ext.to_yaml(path)
    back = FeatureExtractor.from_yaml(path)
    assert type(back) is RtamtExtractor and back.config == cfg
    x = _noise(0.4, seed=2)
    np.testing.assert_array_equal(back.extract(x, FS), ext.extract(x, FS))
    assert back.frame_shift == 0.02 and back.feature_dim(FS) == ext.feature_dim(FS)
    # defaults are explicit after construction (so the YAML says what was computed)
    d = RtamtConfig().to_dict()
    assert d["output"] == "modfb" and d["pooling"] == "db"
    assert RtamtConfig(model="glasberg2002").output == "specific_loudness"


@pytest.mark.parametrize("kw, msg", [
    (dict(model="nope"), "unknown model 'nope'"),
    (dict(output="stl"), "dau1997 has no output 'stl'"),
    (dict(model="moore2016", output="frame_time"), "no output 'frame_time'"),
    (dict(pooling="max"), "pooling 'max'"),
    (dict(dtype="int16"), "dtype 'int16'"),
    (dict(frame_shift=0.0), "frame_shift must be > 0"),
    (dict(spl_ref=float("nan")), "spl_ref must be a finite number"),
    (dict(spl_ref=1e9), r"spl_ref=1000000000.0 is not a finite level within -50 to 200 dB"),
    (dict(channels="left"), "channels 'left'"),
    (dict(num_channels=0), "num_channels must be an integer >= 1"),
])
def test_config_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        RtamtConfig(**kw)


def test_from_dict_unknown_field_and_runtime_errors():
    with pytest.raises(ValueError, match="unknown field.*colour"):
        RtamtConfig.from_dict({"model": "dau1997", "colour": "red"})
    with pytest.raises(ValueError, match="not a whole number of samples at 16000 Hz"):
        RtamtExtractor(RtamtConfig(frame_shift=0.01234)).feature_dim(FS)
    with pytest.raises(ValueError, match="configured for 16000 Hz, got 22050"):
        RtamtExtractor(RtamtConfig(sampling_rate=FS)).extract(np.zeros(2205), 22050)
    with pytest.raises(ValueError, match="bad model_kwargs"):
        RtamtExtractor(RtamtConfig(model_kwargs={"colour": 1})).feature_dim(FS)
    with pytest.raises(ValueError, match="expected float samples"):
        RtamtExtractor(RtamtConfig()).extract(np.zeros(1600, dtype=np.int16), FS)


# ------------------------------------------------------------------ base install
def _run_py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_base_install_imports_neither_lhotse_nor_dask():
    r = _run_py("""
        import sys
        import numpy as np
        import rtamt
        m = rtamt.Dau1997(16000)
        m(np.zeros(256))
        rtamt.Moore2016(32000)(np.zeros(320))
        import rtamt.integrations
        bad = sorted(k for k in sys.modules
                     if k.split('.')[0] in ('lhotse', 'dask', 'distributed', 'lilcom', 'h5py'))
        print('LOADED', bad)
    """)
    assert r.returncode == 0, r.stderr
    assert "LOADED []" in r.stdout


def test_without_lhotse_the_import_says_what_to_install():
    r = _run_py("""
        import sys
        sys.modules['lhotse'] = None        # as if lhotse were not installed
        try:
            import rtamt.integrations.lhotse
        except ModuleNotFoundError as e:
            print('ERR', e)
    """)
    assert r.returncode == 0, r.stderr
    assert "ERR rtamt.integrations.lhotse needs lhotse: pip install 'rtamt[lhotse]'" in r.stdout
