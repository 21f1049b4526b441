"""Block-size invariance: any block partition of a stream gives the whole-signal output.

For every stage (each example it declares, ``Stage.examples()``: the stages are found, not
listed, tests/support/_examples.py) and for the modulation models, in float32 and float64,
three partitions are compared with one call on the whole signal, each run on a fresh
instance:

* ``whole``  - the whole signal once more (fresh instance: determinism, no shared state);
* ``ones``   - every block 1 sample long;
* ``random`` - seeded random sizes including 1-sample blocks and one 8192-sample block.

A stage's state after the blocks is compared too (for a stage whose output summarises
each block, the running true peak, only the state).  Channel stages get realistic inputs:
the output of the preceding stage of a float64 Dau1997 run on a 60-80 dB SPL signal with
an onset, a silent gap and a re-onset.
"""
from __future__ import annotations

import typing
import zlib

import numpy as np
import pytest
import torch

import rtamt
from rtamt.filterbank import Gammatone
from rtamt.ihc import IHCEnvelope
from rtamt.models.king2019 import King2019
from rtamt.modulation import ModFilterbank

from _examples import cases, make, signals
from _helpers import FS, max_rel_err, random_partition, run_blocks, state_arrays

N = 9600  # > 8192 so that the random partition holds an 8192-sample block
TOL = {np.float32: 1e-6, np.float64: 1e-12}
DTYPES = [np.float32, np.float64]
PARTITIONS = ["whole", "ones", "random"]


@pytest.fixture(scope="module")
def inputs():
    sig = signals()
    x, outs = sig["signal"], rtamt.Dau1997(FS).process_all(sig["signal"])
    # sanity: inputs are in a realistic range and not trivial
    assert x.shape[-1] == N
    assert 0.005 < np.sqrt(np.mean(x[300:1200] ** 2)) < 0.1
    assert np.all(x[1200:1500] == 0)
    assert np.max(np.abs(outs["adaptloop"])) > 10
    assert np.array_equal(outs["adaptloop"], sig["adapted"])
    return sig


class Case(typing.NamedTuple):
    make: typing.Callable           # () -> a new stage or chain
    input: str                      # the key of the input in tests/support/_examples.signals
    is_chain: bool
    tol: typing.Callable = TOL.__getitem__
    streamed: bool = True           # the output concatenates over blocks
    per_block: tuple = ()           # state keys not compared across partitions
    out_dtype: typing.Callable = np.dtype
    takes: typing.Callable = lambda dtype: True


def _stage_case(cls, ex):
    return Case(lambda: make(cls, ex), ex.input, False, ex.tolerance, ex.streamed, ex.per_block,
                ex.out_dtype, ex.takes)


#: every stage's examples (found), then the modulation models
CASES = {p.id: _stage_case(*p.values) for p in cases()}
CASES.update({
    "king2019": Case(lambda: King2019(FS), "signal", True),
    "king2019-power-basef-batch": Case(lambda: King2019(FS, compression="power", basef=2000.0),
                                       "pair", True),
    "osses2021": Case(lambda: rtamt.Osses2021(FS), "signal", True),
    "osses2021-batch": Case(lambda: rtamt.Osses2021(FS, flow=500.0, fhigh=4000.0), "pair",
                            True),
    "paulick2024": Case(lambda: rtamt.Paulick2024(FS), "signal", True),
    "paulick2024-batch-ratio3": Case(lambda: rtamt.Paulick2024(FS, n_channels=12,
                                                                resample_factor=3), "pair", True),
    "dau1997-amt0910": Case(lambda: rtamt.Dau1997(FS, "amt0910"), "signal", True),
    "dau1997-torch_amt": Case(lambda: rtamt.Dau1997(FS, "torch_amt"), "signal", True),
    "dau1997-batch": Case(lambda: rtamt.Dau1997(FS), "pair", True),
})

_whole_cache: dict = {}


def _state(proc, case):
    return {k: v for k, v in state_arrays(proc.state_dict()).items()
            if k not in case.per_block}


def _whole(name, dtype, sig):
    key = (name, np.dtype(dtype).name)
    if key not in _whole_cache:
        case = CASES[name]
        x = np.ascontiguousarray(sig[case.input].astype(dtype))
        proc = case.make()
        y = proc.process_all(x) if case.is_chain else proc(x)
        _whole_cache[key] = (x, y, None if case.is_chain else _state(proc, case))
    return _whole_cache[key]


def _close(got, ref, tol, what):
    """``got`` equals ``ref`` within ``tol`` relative to max |ref| (exactly where ``ref`` is
    all zero or not float)."""
    ref, got = np.asarray(ref), np.asarray(got)
    assert got.dtype == ref.dtype and got.shape == ref.shape, (what, got.dtype, got.shape)
    if ref.dtype.kind != "f" or not np.any(ref):
        assert np.array_equal(got, ref), what
        return
    assert np.all(np.isfinite(got)), what
    err = max_rel_err(got, ref)
    assert err <= tol, f"{what}: max rel err {err:.3g}"


@pytest.mark.parametrize("partition", PARTITIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(CASES))
def test_block_partition_invariance(case, dtype, partition, inputs):
    c = CASES[case]
    if not c.takes(dtype):
        pytest.skip(f"{case}: the stage does not take {np.dtype(dtype).name}")
    x, ref, ref_state = _whole(case, dtype, inputs)
    n = x.shape[-1]
    assert n >= 9000
    if partition == "whole":
        sizes = [n]
    elif partition == "ones":
        sizes = [1] * n
    else:
        sizes = random_partition(n, seed=zlib.crc32(case.encode()))
        assert 8192 in sizes and sizes.count(1) >= 3
    proc = c.make()  # fresh instance
    got = run_blocks(proc, x, sizes, key=c.is_chain)
    if not c.is_chain:
        state = _state(proc, c)
        assert set(state) == set(ref_state)
        for k in ref_state:
            _close(state[k], ref_state[k], c.tol(dtype), f"{case} state [{k}] {partition}")
        if not c.streamed:
            return
    refs = ref if c.is_chain else {"out": ref}
    gots = got if c.is_chain else {"out": got}
    assert set(gots) == set(refs)
    for k in refs:
        r, g = refs[k], gots[k]
        assert g.dtype == c.out_dtype(dtype), (k, g.dtype)
        assert r.dtype == c.out_dtype(dtype), (k, r.dtype)
        _close(g, r, c.tol(dtype), f"{case} [{k}] {partition}")


@pytest.mark.parametrize("partition", ["ones", "random"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("case", [c for c, v in CASES.items() if v.is_chain])
def test_chain_call_partition_invariance(case, dtype, partition, inputs):
    """``chain(x)`` (last stage only; reuses work buffers between equal-size blocks) gives
    the same stream as one ``process_all`` call, and earlier returned blocks stay intact."""
    x, ref, _ = _whole(case, dtype, inputs)
    n = x.shape[-1]
    sizes = [1] * n if partition == "ones" else random_partition(n, seed=99)
    proc = CASES[case].make()
    outs, i = [], 0
    for s in sizes:
        outs.append(proc(x[..., i:i + s]))
        i += s
    first = outs[0].copy()
    got = np.concatenate(outs, axis=-1)
    assert np.array_equal(outs[0], first)
    assert got.dtype == np.dtype(dtype) and got.shape == ref["modfb"].shape
    err = max_rel_err(got, ref["modfb"])
    assert err <= TOL[dtype], f"{case} {partition}: max rel err {err:.3g}"


def test_partition_helper_is_nontrivial():
    sizes = random_partition(N, seed=7)
    assert sum(sizes) == N
    assert 8192 in sizes
    assert sizes.count(1) >= 3
    assert len(set(sizes)) > 5


# ----------------------------------------------------------------------------------------
# torch in -> torch out

#: every stage's examples and two Dau1997 configurations
TORCH_CASES = [c for c, v in CASES.items() if not v.is_chain] + ["dau1997-amt0910",
                                                                  "dau1997-batch"]


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("case", TORCH_CASES)
def test_torch_roundtrip(case, dtype, inputs):
    c = CASES[case]
    if not c.takes(dtype):
        pytest.skip(f"{case}: the stage does not take {np.dtype(dtype).name}")
    is_chain = c.is_chain
    x = np.ascontiguousarray(inputs[c.input][..., :3000].astype(dtype))
    xt = torch.from_numpy(x.copy())
    assert xt.dtype == getattr(torch, np.dtype(dtype).name)
    proc_np, proc_t = c.make(), c.make()
    # two blocks, so that state carried across torch calls is exercised too
    ref = [proc_np.process_all(x[..., :1234]) if is_chain else proc_np(x[..., :1234]),
           proc_np.process_all(x[..., 1234:]) if is_chain else proc_np(x[..., 1234:])]
    got = [proc_t.process_all(xt[..., :1234]) if is_chain else proc_t(xt[..., :1234]),
           proc_t.process_all(xt[..., 1234:]) if is_chain else proc_t(xt[..., 1234:])]
    for r, g in zip(ref, got):
        rs = r if is_chain else {"out": r}
        gs = g if is_chain else {"out": g}
        assert set(rs) == set(gs)
        for k in rs:
            assert isinstance(gs[k], torch.Tensor), (k, type(gs[k]))
            assert gs[k].dtype == getattr(torch, c.out_dtype(dtype).name), (k, gs[k].dtype)
            assert gs[k].device.type == "cpu"
            assert tuple(gs[k].shape) == rs[k].shape
            assert np.array_equal(gs[k].numpy(), rs[k], equal_nan=True), k
    # the input tensor was not modified
    assert np.array_equal(xt.numpy(), x)


def test_torch_non_contiguous_and_requires_grad(inputs):
    x = inputs["signal"][:2000]
    base = torch.from_numpy(np.stack([x, 2 * x], axis=1).copy()).requires_grad_(True)
    xt = base[:, 0]  # non-contiguous view (stride 2) of a tensor that requires grad
    assert not xt.is_contiguous() and xt.requires_grad
    y = Gammatone(fs=FS, basef=1000.0)(xt)
    assert isinstance(y, torch.Tensor)
    ref = Gammatone(fs=FS, basef=1000.0)(x)
    assert np.array_equal(y.detach().numpy(), ref)


class _LeakyIHC(IHCEnvelope):
    """Deliberately broken stage: forgets its filter state at every block boundary."""

    @staticmethod
    def process_tm(coeffs, state, x, out=None):
        state["zi"][...] = 0.0
        return IHCEnvelope.process_tm(coeffs, state, x, out)


def test_harness_detects_a_block_dependent_stage(inputs):
    x = inputs["bands"]
    whole = _LeakyIHC(fs=FS)(x)
    got = run_blocks(_LeakyIHC(fs=FS), x, random_partition(x.shape[-1], seed=5))
    assert max_rel_err(got, whole) > 1e-3


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_efilt_bank_is_bit_exact_across_its_4_and_1_sample_paths(dtype, inputs):
    """The complex one-pole bank takes samples four at a time and the rest of a block one
    at a time; both paths must round identically, so any partition - here block lengths
    that leave every remainder 1..3 - gives the whole-signal output bit for bit."""
    x = np.ascontiguousarray(inputs["adapted"].astype(dtype))
    ref = ModFilterbank(fs=FS, fc=inputs["fc"])(x)
    mf = ModFilterbank(fs=FS, fc=inputs["fc"])
    sizes = [1, 2, 3, 5, 6, 7, 4, 9, 10, 11] * 80
    sizes.append(x.shape[-1] - sum(sizes))
    assert sizes[-1] > 0
    got = run_blocks(mf, x, sizes)
    assert np.array_equal(got, ref)
