"""Bad blocks are rejected with RtamtInputError before they touch any state.

For the Dau1997 chain and every stage on samples (the first example each declares; the
stages are found, not listed: tests/support/_examples.py): NaN / +Inf in a block, wrong
ndim, a channel/batch count that changes mid-stream, integer dtype, an empty block and a
dtype switched mid-stream.  Each must raise RtamtInputError naming the problem and the block
index, and the stream must continue exactly as a twin that never saw the bad block.
"""
from __future__ import annotations

import typing

import numpy as np
import pytest
import torch

import rtamt
from rtamt import RtamtInputError
from rtamt.adaptation import AdaptLoop
from rtamt.filterbank import Gammatone
from rtamt.modulation import ModFilterbank

from _examples import example_input, examples, make, on_samples
from _helpers import assert_outputs_equal, outputs_of, state_arrays

FS = 48000.0
FC4 = (500.0, 1000.0, 2000.0, 4000.0)
BLOCK_LEN = [64, 37, 50, 80, 41]


def _good(kind, lead, T, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    if kind == "signal":
        x = 0.05 * rng.standard_normal(lead + (T,))  # ~74 dB SPL
    else:
        x = 0.01 * np.abs(rng.standard_normal(lead + (T,))) + 1e-4  # envelope-like
    return x.astype(dtype)


class Target(typing.NamedTuple):
    make: typing.Callable           # () -> a new chain or stage
    kind: str                       # "signal" or "channels"
    lead: tuple                     # the leading shape of a valid block
    good: typing.Callable           # (T, seed, dtype=float64) -> a valid block
    name: str                       # the name its messages start with


def _example_target(cls, ex):
    stage = make(cls, ex)
    x = example_input(ex)

    def good(T, seed, dtype=np.float64):
        start = 1500 + 97 * seed                   # inside the re-onset
        return np.ascontiguousarray(x[..., start:start + T].astype(dtype))

    return Target(lambda: make(cls, ex), stage.in_kind, x.shape[:-1], good, stage.name)


def _first_example(cls, ex):
    return on_samples(cls, ex) and ex.id == cls.examples()[0].id


TARGETS = {
    "dau1997": Target(lambda: rtamt.Dau1997(FS), "signal", (2,),
                      lambda T, seed, dtype=np.float64: _good("signal", (2,), T, seed, dtype),
                      "dau1997"),
    "dau1997-mono": Target(lambda: rtamt.Dau1997(FS, "torch_amt"), "signal", (),
                           lambda T, seed, dtype=np.float64: _good("signal", (), T, seed, dtype),
                           "dau1997"),
    **{ex.id: _example_target(cls, ex) for cls, ex in examples(_first_example)},
}






def _state_arrays(proc):
    return state_arrays(proc.state_dict())


def _bad(kind_of_bad, target, T=50):
    """(bad block, words that the message must contain)."""
    kind, lead = target.kind, target.lead
    x = target.good(T, 9)
    if kind_of_bad in ("nan", "inf"):
        val = np.nan if kind_of_bad == "nan" else np.inf
        words = ["non-finite", "nan" if kind_of_bad == "nan" else "inf", "sample 7"]
        if kind == "signal" and lead == (2,):
            x[1, 7] = val
            words.append("batch 1")
        elif kind == "signal":
            x[7] = val
        else:
            c = min(2, lead[0] - 1)
            x[c, 7] = val
            words.append(f"channel {c}")
        return x, words
    if kind_of_bad == "ndim":
        want = 3 if kind == "signal" else 4
        return x.reshape((1,) * (want - x.ndim) + x.shape), ["ndim=" + str(want), "shape"]
    if kind_of_bad == "count":            # one stream or channel more
        more = np.stack([x, x]) if lead == () else np.concatenate([x, x[:1]])
        return np.ascontiguousarray(more), ["mid-stream", "shape"]
    if kind_of_bad == "int16":
        return (np.clip(x, -1, 1) * 32767).astype(np.int16), ["dtype", "int16"]
    if kind_of_bad == "empty":
        return x[..., :0], ["empty", "0 samples"]
    if kind_of_bad == "dtype_switch":
        return x.astype(np.float32), ["dtype", "float32", "float64"]
    raise AssertionError(kind_of_bad)


BAD_KINDS = ["nan", "inf", "ndim", "count", "int16", "empty", "dtype_switch"]


@pytest.mark.parametrize("bad", BAD_KINDS)
@pytest.mark.parametrize("target", list(TARGETS))
def test_bad_block_mid_stream_is_rejected_and_state_unchanged(target, bad):
    t = TARGETS[target]
    a, twin = t.make(), t.make()
    blocks = [t.good(n, i) for i, n in enumerate(BLOCK_LEN)]
    for i in range(2):
        assert_outputs_equal(outputs_of(a, blocks[i]), outputs_of(twin, blocks[i]))
    before = _state_arrays(a)
    xb, words = _bad(bad, t)
    for _ in range(2):  # rejected twice: the block counter did not advance
        with pytest.raises(RtamtInputError) as ei:
            outputs_of(a, xb)
        msg = str(ei.value)
        assert f"{t.name}: block 2" in msg, msg
        for w in words:
            assert w in msg, (w, msg)
    after = _state_arrays(a)
    assert set(before) == set(after)
    for k in before:
        assert np.array_equal(before[k], after[k]), k
    # the stream continues exactly as the twin that never saw the bad block
    for i in (2, 3):
        assert_outputs_equal(outputs_of(a, blocks[i]), outputs_of(twin, blocks[i]))
    # and the next bad block is reported as block 4
    with pytest.raises(RtamtInputError, match="block 4"):
        outputs_of(a, xb)
    assert_outputs_equal(outputs_of(a, blocks[4]), outputs_of(twin, blocks[4]))


@pytest.mark.parametrize("bad", ["nan", "inf", "ndim", "int16", "empty"])
@pytest.mark.parametrize("target", list(TARGETS))
def test_bad_first_block_is_rejected(target, bad):
    t = TARGETS[target]
    a, twin = t.make(), t.make()
    xb, words = _bad(bad, t)
    with pytest.raises(RtamtInputError) as ei:
        outputs_of(a, xb)
    msg = str(ei.value)
    assert "block 0" in msg, msg
    for w in words:
        assert w in msg, (w, msg)
    # nothing was initialised by the rejected block
    if isinstance(a, rtamt.Chain):
        assert all(s.state is None for s in a.stages)
    else:
        assert a.state is None and a.blocks_processed == 0
    blocks = [t.good(n, i) for i, n in enumerate(BLOCK_LEN[:3])]
    for blk in blocks:
        assert_outputs_equal(outputs_of(a, blk), outputs_of(twin, blk))


def test_nan_position_reported_for_batched_channel_input():
    st = AdaptLoop(fs=FS)
    x = _good("channels", (3, 4), 30, 0)  # (batch, C, T)
    st(x)
    x2 = _good("channels", (3, 4), 30, 1)
    x2[2, 1, 13] = -np.inf
    with pytest.raises(RtamtInputError) as ei:
        st(x2)
    msg = str(ei.value)
    for w in ["adaptloop: block 1", "non-finite", "-inf", "batch 2", "channel 1", "sample 13"]:
        assert w in msg, (w, msg)


def test_chain_switch_mono_to_batch_is_rejected():
    m = rtamt.Dau1997(FS)
    m(_good("signal", (), 40, 0))
    with pytest.raises(RtamtInputError, match="mid-stream"):
        m(_good("signal", (2,), 40, 1))


def test_modfb_channel_count_must_match_fc_on_first_block():
    st = ModFilterbank(fs=FS, fc=FC4)
    with pytest.raises(RtamtInputError, match="3 channels"):
        st(_good("channels", (3,), 40, 0))
    assert st.state is None


def test_non_array_input_rejected():
    with pytest.raises(RtamtInputError, match="numpy array or torch tensor"):
        rtamt.Dau1997(FS)([0.0, 0.1, 0.2])
    with pytest.raises(RtamtInputError):
        Gammatone(fs=FS)(0.5)


def test_torch_bad_blocks_rejected_like_numpy():
    a, twin = Gammatone(fs=FS), Gammatone(fs=FS)
    x0 = torch.from_numpy(_good("signal", (), 40, 0))
    a(x0)
    twin(x0)
    bad = x0.clone()
    bad[5] = float("nan")
    with pytest.raises(RtamtInputError, match=r"block 1: non-finite value nan at sample 5"):
        a(bad)
    with pytest.raises(RtamtInputError, match="dtype"):
        a(torch.zeros(10, dtype=torch.int16))
    with pytest.raises(RtamtInputError, match="dtype"):
        a(torch.zeros(10, dtype=torch.float16))
    x1 = torch.from_numpy(_good("signal", (), 40, 1))
    assert np.array_equal(a(x1).numpy(), twin(x1).numpy())


# ----------------------------------------------------------------------------------------
# Regressions of defects found while writing these tests (fixed in the engine)


def test_torch_bfloat16_rejected_with_input_error():
    with pytest.raises(RtamtInputError, match="dtype"):
        Gammatone(fs=FS)(torch.zeros(10, dtype=torch.bfloat16))


def test_adaptloop_minspl_channel_mismatch_is_input_error():
    st = AdaptLoop(fs=FS, minspl=(0.0, 10.0, 20.0))
    with pytest.raises(RtamtInputError, match="minspl"):
        st(_good("channels", (2,), 40, 0))
    assert st.state is None


def test_chain_failed_first_block_leaves_chain_consistent():
    m = rtamt.Dau1997(FS, adapt=dict(minspl=(0.0,) * 5))
    x = _good("signal", (), 40, 0)
    for _ in range(2):
        with pytest.raises(RtamtInputError, match="minspl"):
            m(x)
    assert all(s.state is None for s in m.stages)


@pytest.mark.parametrize("change", ["dtype", "batch"])
def test_reset_allows_new_dtype_or_shape_as_the_message_says(change):
    g = Gammatone(fs=FS)
    g(np.zeros(10))
    with pytest.raises(RtamtInputError, match="reset"):
        g(np.zeros(10, np.float32) if change == "dtype" else np.zeros((2, 10)))
    g.reset()
    y = g(np.zeros(10, np.float32) if change == "dtype" else np.zeros((2, 10)))
    assert y.shape[-1] == 10


# ----------------------------------------------------------------------------------------
# Issue 29: a (frames, channels) column from an audio callback, unusable spl_ref values


def _column_targets():
    return {"dau1997": rtamt.Dau1997(FS, "torch_amt"), "gammatone": Gammatone(fs=FS),
            "glasberg2002": rtamt.Glasberg2002(FS)}


@pytest.mark.parametrize("name", ["dau1997", "gammatone", "glasberg2002"])
def test_sounddevice_column_is_refused_as_a_first_block(name):
    """sounddevice's ``indata`` (and soundfile with always_2d) is (frames, channels): a mono
    (256, 1) block used to be taken as 256 streams of one sample each, without a word."""
    m = _column_targets()[name]
    x = _good("signal", (), 256, 0)[:, None]
    with pytest.raises(RtamtInputError) as ei:
        m(x)
    msg = str(ei.value)
    for w in [f"{name}: block 0", "(256, 1)", "256 streams of 1 sample", "time is the last axis",
              "x[:, 0]", "x.T", "prepare(x)"]:
        assert w in msg, (w, msg)
    assert m.state_dict()["stream"] is None          # nothing was created
    m(x[:, 0])                                       # what the message says to do works
    assert m.state_dict()["stream"]["batch"] is None


@pytest.mark.parametrize("name", ["dau1997", "gammatone", "glasberg2002"])
def test_column_after_the_stream_started_names_the_time_axis(name):
    m = _column_targets()[name]
    m(_good("signal", (), 64, 0))
    with pytest.raises(RtamtInputError, match=r"block 1: leading shape \(256,\) differs.*"
                                              r"time is the last axis: pass x\[:, 0\]"):
        m(_good("signal", (), 256, 1)[:, None])


@pytest.mark.parametrize("name", ["dau1997", "gammatone", "glasberg2002"])
def test_single_sample_blocks_of_a_batch_still_work(name):
    """A batch of streams fed one sample at a time: a fresh (B, 1) block with B below
    COLUMN_ROWS starts a batch as before; any B after prepare() declares it; both give
    the output of one call on the whole (B, T) signal."""
    from rtamt.engine.contract import COLUMN_ROWS

    def outs(m, x):
        y = outputs_of(m, x)
        return y["out"] if isinstance(y.get("out"), dict) else y

    for B, declare in [(2, False), (COLUMN_ROWS - 1, False), (COLUMN_ROWS, True), (256, True)]:
        x = _good("signal", (B,), 100, B)
        ref = outs(_column_targets()[name], x)
        m = _column_targets()[name]
        if declare:
            m.prepare(x[:, :1])
        got = [outs(m, x[:, i:i + 1]) for i in range(x.shape[-1])]
        for k, v in ref.items():
            if k == "frame_time":
                continue
            cat = np.concatenate([g[k] for g in got], axis=-1)
            assert cat.shape == v.shape and cat.shape[0] == B, (k, cat.shape, v.shape)
            np.testing.assert_array_equal(cat, v)


def test_torch_column_is_refused_too():
    with pytest.raises(RtamtInputError, match="time is the last axis"):
        rtamt.Dau1997(FS, "torch_amt")(torch.zeros(64, 1, dtype=torch.float64))


def test_moore2016_frames_by_channels_block_says_to_transpose():
    m = rtamt.Moore2016(FS)
    with pytest.raises(RtamtInputError, match=r"got \(256, 2\); time is the last axis: pass "
                                              r"x\.T for a \(frames, 2\) block"):
        m(np.zeros((256, 2)))
    with pytest.raises(RtamtInputError, match=r"got \(256, 1\); time is the last axis: pass "
                                              r"x\[:, 0\]"):
        m(np.zeros((256, 1)))


def _fs_of(name):
    return 44100.0 if name == "paulick2024" else FS


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 1e9, -1e9,
                                   200.5, -50.5, "loud", None])
@pytest.mark.parametrize("name", sorted(rtamt.MODELS))
def test_unusable_spl_ref_is_refused_by_the_model_constructor(name, value):
    """spl_ref=nan or +-1e9 used to be accepted; the first block then failed with an
    IndexError or OverflowError."""
    cls = rtamt.MODELS[name]
    with pytest.raises(ValueError, match=rf"^{cls.__name__}: spl_ref.*{value!r}"):
        cls(_fs_of(name), spl_ref=value)


@pytest.mark.parametrize("name", sorted(rtamt.MODELS))
def test_spl_ref_range_ends_are_accepted(name):
    from rtamt.calibration import MODEL_SPL_REF_RANGE

    for v in MODEL_SPL_REF_RANGE:
        m = rtamt.MODELS[name](_fs_of(name), spl_ref=v)
        assert m.spl_ref == v and np.isfinite(m.input_limit)


def test_unusable_spl_ref_is_refused_by_the_calibration_stage():
    """The calibration stage at the head of every modulation model is the one place that
    takes an ``spl_ref`` (issue 30 item 5); the stages after it refuse one."""
    from rtamt.adaptation import AdaptLoopParams
    from rtamt.calibration import InputCalibration
    from rtamt.nonlinear.compression import CompressionParams

    with pytest.raises(ValueError, match=r"^AdaptLoop: spl_ref=nan is not a finite level"):
        InputCalibration(float("nan"), who="AdaptLoop")
    with pytest.raises(ValueError, match=r"^BrokenStick: spl_ref=1000000000.0"):
        InputCalibration(1e9, who="BrokenStick")
    with pytest.raises(ValueError, match=r"^PowerCompression: spl_ref=-inf"):
        InputCalibration(float("-inf"), who="PowerCompression")
    cal = InputCalibration(94.0)
    assert cal.spl_ref == 94.0 and cal.gain == 10.0 ** ((94.0 - 100.0) / 20.0)
    with pytest.raises(TypeError, match="spl_ref"):
        AdaptLoopParams(fs=FS, spl_ref=94.0)
    with pytest.raises(TypeError, match="spl_ref"):
        CompressionParams(spl_ref=94.0)


def test_model_spl_ref_range_is_the_cli_range():
    from rtamt.calibration import MODEL_SPL_REF_RANGE
    from rtamt_apps.args import SPL_REF_LIMITS

    assert tuple(SPL_REF_LIMITS) == MODEL_SPL_REF_RANGE


# ---------------------------------------------------------------------------------------
# Issue 29: device='cuda' without CUDA said to install triton


def _cuda_error(monkeypatch, *, cuda_build, gpu, triton):
    from rtamt.engine import backend as B

    monkeypatch.setattr(torch.version, "cuda", "12.4" if cuda_build else None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(B, "triton_available",
                        lambda: None if triton else "No module named 'triton'")
    with pytest.raises(B.RtamtBackendError) as ei:
        rtamt.Dau1997(FS, device="cuda")
    return str(ei.value)


def test_cuda_on_a_cpu_only_torch_says_so(monkeypatch):
    msg = _cuda_error(monkeypatch, cuda_build=False, gpu=False, triton=True)
    for w in ["device='cuda': no CUDA device is visible to torch", "CPU-only build",
              "torch.version.cuda is None", "download.pytorch.org/whl/", "backend='numba'"]:
        assert w in msg, (w, msg)
    assert "rtamt[gpu]" not in msg and "triton package" not in msg, msg


def test_cuda_build_without_a_visible_gpu_says_so(monkeypatch):
    msg = _cuda_error(monkeypatch, cuda_build=True, gpu=False, triton=True)
    for w in ["no CUDA device is visible to torch", "torch.cuda.is_available() is False",
              "built for CUDA 12.4", "nvidia-smi", "CUDA_VISIBLE_DEVICES"]:
        assert w in msg, (w, msg)
    assert "CPU-only" not in msg and "rtamt[gpu]" not in msg


def test_missing_triton_with_a_gpu_says_to_install_the_extra(monkeypatch):
    msg = _cuda_error(monkeypatch, cuda_build=True, gpu=True, triton=False)
    assert "needs the triton package" in msg and "pip install 'rtamt[gpu]'" in msg, msg
    assert "CUDA" not in msg, msg


def test_no_cuda_and_no_triton_names_both(monkeypatch):
    msg = _cuda_error(monkeypatch, cuda_build=False, gpu=False, triton=False)
    assert msg.startswith("device='cuda': no CUDA device is visible to torch"), msg
    assert "CPU-only build" in msg and "pip install 'rtamt[gpu]'" in msg, msg
