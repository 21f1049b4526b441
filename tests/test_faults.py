"""Faults and bad input at the library level: input beyond physics, poisoned states."""
from __future__ import annotations

import numpy as np
import pytest

import rtamt
from rtamt import RtamtInputError
from rtamt.models import MODELS


def _fs(name):
    return 44100.0 if name == "paulick2024" else 48000.0


def _tone(name, n, amp, dtype=np.float64):
    t = np.arange(n) / _fs(name)
    x = (amp * np.sin(2 * np.pi * 1000 * t)).astype(dtype)
    return np.stack([x, 0.5 * x]) if name == "moore2016" else x


def _finite_state(sd) -> bool:
    if isinstance(sd, dict):
        return all(_finite_state(v) for v in sd.values())
    if isinstance(sd, np.ndarray) and sd.dtype.kind == "f":
        return bool(np.isfinite(sd).all())
    return True


def _outs(m, x):
    return {k: np.asarray(v) for k, v in m.process_all(x).items()}


@pytest.mark.parametrize("dtype,huge", [(np.float32, 1e30), (np.float64, 1e300)],
                         ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_input_beyond_physics_is_rejected_and_state_untouched(name, dtype, huge):
    m, twin = MODELS[name](_fs(name)), MODELS[name](_fs(name))
    x = _tone(name, 3000, 0.1, dtype)
    _outs(m, x[..., :1000]), _outs(twin, x[..., :1000])
    bad = x[..., 1000:1500].copy()
    bad[..., 17] = huge
    with pytest.raises(RtamtInputError, match=r"block 1: value .* sample 17 is beyond the "
                                              r"physical limit .*200 dB SPL"):
        m(bad)
    a, b = _outs(m, x[..., 1000:]), _outs(twin, x[..., 1000:])
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("spl_ref", [100.0, 20.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_largest_accepted_input_leaves_a_finite_state(name, dtype, spl_ref):
    """A square wave at exactly the limit (200 dB SPL peak at spl_ref), then normal input:
    every output and every state value stays finite."""
    m = MODELS[name](_fs(name), spl_ref=spl_ref)
    lim = m.input_limit
    assert lim == pytest.approx(10 ** ((200.0 - spl_ref) / 20.0))
    n = int(_fs(name) * 0.1)
    sq = np.where(np.sin(2 * np.pi * 1000 * np.arange(n) / _fs(name)) >= 0, lim, -lim)
    sq = sq.astype(dtype)
    assert np.abs(sq).max() <= lim
    sq = np.stack([sq, -sq]) if name == "moore2016" else sq
    for x in (sq, _tone(name, n, 10 ** ((60.0 - spl_ref) / 20.0), dtype)):
        for v in m.process_all(x).values():
            assert np.isfinite(np.asarray(v)).all()
        assert _finite_state(m.state_dict())


def test_max_spl_is_settable_per_model():
    m = rtamt.Dau1997(48000.0, spl_ref=94.0)
    x = np.full(64, 10.0)                      # 114 dB SPL
    m(x)
    m.max_spl = 110.0
    with pytest.raises(RtamtInputError, match="max_spl 110 dB SPL at spl_ref 94"):
        m(x)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_max_spl_is_not_part_of_the_design(name):
    """A state moves between instances with different limits, set before or after first use."""
    a, b = MODELS[name](_fs(name)), MODELS[name](_fs(name))
    b.max_spl = 210.0                       # set before anything asks for the identity
    a(_tone(name, 2000, 0.1))
    b.load_state_dict(a.state_dict())
    a.max_spl = 190.0                       # and after
    a.load_state_dict(b.state_dict())


def test_runtime_checks_every_chains_limit_before_any_chain_runs():
    """Block 1 is within Dau1997(spl_ref=100)'s limit (1e5) but beyond that of
    Dau1997(spl_ref=120) (1e4): the runtime rejects it before either chain runs, so both
    continue as if it never came."""
    from rtamt.runtime import ArraySource, Runtime
    fs = 48000.0
    lo, hi = rtamt.Dau1997(fs, spl_ref=120.0), rtamt.Dau1997(fs)   # limits 1e4, 1e5
    x = _tone("dau1997", 2048, 0.1)
    x[300] = 5e4                               # block 1: beyond lo's limit only
    rt = Runtime({"lo": lo, "hi": hi}, fs, block=256, policy="drop-newest",
                 sample_dtype="float64")
    assert rt._limit == lo.input_limit == pytest.approx(1e4)
    got = []
    rt.subscribe(got.append)
    rt.start()
    ArraySource(x, fs, blocksize=256, realtime=False).run(rt)
    rt.stop()
    st = rt.stats()
    assert st.rejected_blocks == 1 and "physical limit" in st.last_error
    keep = np.concatenate([x[:256], x[512:]])
    for name, ref in (("lo", rtamt.Dau1997(fs, spl_ref=120.0)), ("hi", rtamt.Dau1997(fs))):
        y = np.concatenate([np.asarray(r.outputs[name]) for r in got], axis=-1)
        np.testing.assert_array_equal(y, ref(keep))
