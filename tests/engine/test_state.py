"""state_dict / load_state_dict / reset: bit-exact continuation, deep copies, validation."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import rtamt
from rtamt import RtamtInputError
from rtamt.adaptation import AdaptLoop
from rtamt.modulation import ModFilterbank

from _examples import cases, example_input, make
from _helpers import FS, assert_outputs_equal, make_signal, outputs_of, state_arrays


def _sd_equal(a, b):
    """Deep equality of two state dicts (Stage or Chain)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b)
        for k in a:
            _sd_equal(a[k], b[k])
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    else:
        assert a == b


def _stream(kind, n=4000, dtype=np.float64):
    x = make_signal(n, seed=11)
    if kind == "chain":
        return x.astype(dtype)
    # adaptation input: IHC output of the same signal, 30 channels
    return rtamt.Dau1997(FS).process_all(x)["ihc"].astype(dtype)


MAKERS = {
    "dau1997": (lambda: rtamt.Dau1997(FS), "chain"),
    "dau1997-torch_amt-batch": (lambda: rtamt.Dau1997(FS, "torch_amt"), "chain-batch"),
    "adaptloop": (lambda: AdaptLoop(fs=FS), "stage"),
    "adaptloop-paulick-minspl": (
        lambda: AdaptLoop(fs=FS, preset="paulick2024", minspl=tuple(np.linspace(0, 30, 30))),
        "stage"),
}


def _input(kind, dtype=np.float64):
    if kind == "chain-batch":
        x = _stream("chain", dtype=dtype)
        return np.stack([x, 0.3 * x[::-1].copy()])
    return _stream("chain" if kind.startswith("chain") else "stage", dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(MAKERS))
def test_state_dict_continuation_is_bit_exact(name, dtype):
    make, kind = MAKERS[name]
    x = _input(kind, dtype)
    cut1, cut2 = 1500, 2711  # mid-stream, inside the onset/re-onset of the signal
    orig = make()
    outputs_of(orig, x[..., :700])
    outputs_of(orig, x[..., 700:cut1])
    sd = orig.state_dict()
    snapshot = copy.deepcopy(sd)
    fresh = make()
    fresh.load_state_dict(sd)
    # continue both, in different block partitions
    a = [outputs_of(orig, x[..., cut1:cut2]), outputs_of(orig, x[..., cut2:])]
    b = [outputs_of(fresh, x[..., cut1:cut1 + 1]), outputs_of(fresh, x[..., cut1 + 1:])]
    ya = {k: np.concatenate([a[0][k], a[1][k]], axis=-1) for k in a[0]}
    yb = {k: np.concatenate([b[0][k], b[1][k]], axis=-1) for k in b[0]}
    assert_outputs_equal(ya, yb)
    for k in ya:
        assert ya[k].dtype == np.dtype(dtype)
        assert np.max(np.abs(ya[k])) > 0
    # the snapshot is a deep copy: processing (which advances the state in place) and
    # loading did not change it
    _sd_equal(sd, snapshot)
    # and it differs from the now-advanced state (so the comparison above is not vacuous)
    later = orig.state_dict()
    arrays = (lambda d: d["arrays"]) if kind == "stage" else \
        (lambda d: {f"{s}.{k}": v for s, dd in d["children"].items()
                    for k, v in dd["arrays"].items()})
    assert any(not np.array_equal(arrays(sd)[k], arrays(later)[k]) for k in arrays(sd))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("cls, ex", cases())
def test_stage_snapshot_continues_exactly(cls, ex, dtype):
    """Every stage example (found, tests/support/_examples.py): a snapshot taken mid-stream
    and loaded into a new stage continues the stream bit-exactly (in another block
    partition where the output is a stream), the snapshot is a deep copy, and ``reset()``
    starts the stream again."""
    if not ex.takes(dtype):
        pytest.skip(f"{ex.id} takes {ex.dtypes}")
    x = example_input(ex, 2400, dtype)         # onset at 300, gap, re-onset at 1500
    cut = 1300
    orig = make(cls, ex)
    orig(x[..., :700])
    orig(x[..., 700:cut])
    sd = orig.state_dict()
    snapshot = copy.deepcopy(sd)
    fresh = make(cls, ex)
    fresh.load_state_dict(sd)
    parts = [cut, cut + 1, x.shape[-1]] if ex.streamed else [cut, x.shape[-1]]
    a = np.asarray(orig(x[..., cut:]))
    b = [np.asarray(fresh(x[..., i:j])) for i, j in zip(parts[:-1], parts[1:])]
    np.testing.assert_array_equal(np.concatenate(b, axis=-1) if ex.streamed else b[0], a)
    assert np.any(a), ex.id
    later = {k: v for k, v in state_arrays(orig.state_dict()).items() if k not in ex.per_block}
    for k, v in later.items():
        np.testing.assert_array_equal(state_arrays(fresh.state_dict())[k], v, err_msg=k)
    # the snapshot is a deep copy: processing and loading did not change it, and it
    # differs from the advanced state (unless the stage keeps none)
    _sd_equal(sd, snapshot)
    assert not later or any(not np.array_equal(state_arrays(sd)[k], v)
                            for k, v in later.items()), ex.id
    orig.reset()
    np.testing.assert_array_equal(orig(x[..., :700]), make(cls, ex)(x[..., :700]))


@pytest.mark.parametrize("name", ["dau1997", "adaptloop"])
def test_state_dict_is_decoupled_both_ways(name):
    make, kind = MAKERS[name]
    x = _input(kind)
    st = make()
    outputs_of(st, x[..., :1000])
    sd = st.state_dict()
    twin = make()
    twin.load_state_dict(sd)
    # mutating the snapshot after load must not reach the stage that loaded it, nor the
    # stage it was taken from
    arrays = [sd["arrays"]] if kind == "stage" else [d["arrays"] for d in sd["children"].values()]
    for arrs in arrays:
        for v in arrs.values():
            v[...] = 123.0
    expect = outputs_of(make_and_run(make, x[..., :1000]), x[..., 1000:])
    assert_outputs_equal(outputs_of(st, x[..., 1000:]), expect)
    assert_outputs_equal(outputs_of(twin, x[..., 1000:]), expect)


def make_and_run(make, x):
    p = make()
    outputs_of(p, x)
    return p


@pytest.mark.parametrize("name", ["dau1997", "adaptloop"])
def test_reset_equals_fresh_instance(name):
    make, kind = MAKERS[name]
    x = _input(kind)
    st = make()
    y_first = outputs_of(st, x[..., :1200])
    outputs_of(st, x[..., 1200:2500])
    st.reset()
    if kind == "stage":
        assert st.blocks_processed == 0
    else:
        assert all(s.blocks_processed == 0 for s in st.stages)
    y_again = outputs_of(st, x[..., :1200])
    assert_outputs_equal(y_again, y_first)
    assert_outputs_equal(outputs_of(st, x[..., 1200:]),
                         outputs_of(make_and_run(make, x[..., :1200]), x[..., 1200:]))



def test_reset_starts_a_new_stream_with_new_shape_and_dtype():
    m = rtamt.Dau1997(FS)
    x = make_signal(2000)
    m(x[:700])
    m.reset()
    x2 = np.stack([x, 0.5 * x]).astype(np.float32)  # batch of 2, float32
    assert_outputs_equal(outputs_of(m, x2), outputs_of(rtamt.Dau1997(FS), x2))
    st = AdaptLoop(fs=FS)
    y = _input("stage")
    st(y[:, :300])
    st.reset()
    y3 = y[:5, :400].astype(np.float32)  # 5 channels instead of 30
    assert_outputs_equal(outputs_of(st, y3), outputs_of(AdaptLoop(fs=FS), y3))


def test_reset_before_any_block_is_harmless():
    st = AdaptLoop(fs=FS)
    st.reset()
    assert st.state is None
    x = _input("stage")[:, :500]
    assert_outputs_equal(outputs_of(st, x), outputs_of(AdaptLoop(fs=FS), x))


def _wrong_shape_sd(sd, kind):
    bad = copy.deepcopy(sd)
    if kind == "stage":
        bad["arrays"]["s"] = bad["arrays"]["s"][..., :-1].copy()
    else:
        # gammatone fine, modfb (last stage) broken: checks rollback of earlier stages
        arr = bad["children"]["modfb"]["arrays"]
        k = sorted(arr)[0]
        arr[k] = arr[k][..., :-1].copy()
    return bad


@pytest.mark.parametrize("name", ["dau1997", "adaptloop"])
@pytest.mark.parametrize("how", ["shape", "dtype", "missing", "extra", "stage"])
def test_load_state_dict_rejects_bad_snapshot_and_keeps_state(name, how):
    make, kind = MAKERS[name]
    x = _input(kind)
    # a snapshot taken at a different point of the stream (so a partial load would show)
    other = make()
    outputs_of(other, x[..., :2000])
    sd = other.state_dict()
    st, twin = make(), make()
    outputs_of(st, x[..., :900])
    outputs_of(twin, x[..., :900])
    before = st.state_dict()
    if how == "shape":
        bad = _wrong_shape_sd(sd, kind)
    else:
        bad = copy.deepcopy(sd)
        target = bad if kind == "stage" else bad["children"]["modfb"]
        arrs = target["arrays"]
        k = sorted(arrs)[0]
        if how == "dtype":
            arrs[k] = arrs[k].astype(np.float32)
        elif how == "missing":
            del arrs[k]
        elif how == "extra":
            arrs["bogus"] = np.zeros(3)
        else:  # snapshot of another stage type
            target["kind"] = "Gammatone"
    with pytest.raises(RtamtInputError):
        st.load_state_dict(bad)
    _sd_equal(st.state_dict(), before)
    assert_outputs_equal(outputs_of(st, x[..., 900:]), outputs_of(twin, x[..., 900:]))


def test_chain_state_dict_rejects_other_chain():
    a = rtamt.Dau1997(FS)
    a(make_signal(2000)[:500])
    sd = a.state_dict()
    sd2 = copy.deepcopy(sd)
    sd2["kind"] = "Osses2021"
    b = rtamt.Dau1997(FS)
    with pytest.raises(RtamtInputError):
        b.load_state_dict(sd2)
    sd3 = copy.deepcopy(sd)
    del sd3["children"]["ihc"]
    with pytest.raises(RtamtInputError):
        b.load_state_dict(sd3)
    assert all(s.state is None for s in b.stages)


def test_load_state_dict_modfb_channel_count_mismatch():
    a = ModFilterbank(fs=FS, fc=(500.0, 1000.0, 2000.0))
    b = ModFilterbank(fs=FS, fc=(500.0, 1000.0))
    a(np.full((3, 100), 10.0))
    with pytest.raises(RtamtInputError):
        b.load_state_dict(a.state_dict())
    assert b.state is None


def test_state_dict_before_first_block_roundtrip():
    a = AdaptLoop(fs=FS)
    sd = a.state_dict()
    assert sd["arrays"] is None and sd["stream"] is None
    b = AdaptLoop(fs=FS)
    x = _input("stage")[:, :300]
    b(x)
    b.load_state_dict(sd)  # back to "never processed"
    assert b.state is None and b.blocks_processed == 0
    assert_outputs_equal(outputs_of(b, x), outputs_of(AdaptLoop(fs=FS), x))


def test_state_dict_keeps_block_counter():
    a = rtamt.Dau1997(FS)
    x = make_signal(2000)[:600]
    for i in range(3):
        a(x[i * 200:(i + 1) * 200])
    b = rtamt.Dau1997(FS)
    b.load_state_dict(a.state_dict())
    bad = x[:10].copy()
    bad[3] = np.nan
    with pytest.raises(RtamtInputError, match="block 3"):
        b(bad)


def test_load_state_dict_rejects_inconsistent_meta():
    a = AdaptLoop(fs=FS)
    a(np.full((4, 50), 0.01))
    sd = copy.deepcopy(a.state_dict())
    sd["stream"]["lead"] = [5]  # lead says 5 channels, arrays/n_in say 4
    b = AdaptLoop(fs=FS)
    with pytest.raises(RtamtInputError):
        b.load_state_dict(sd)
    assert b.state is None
