"""Block-size invariance: any block partition of a stream gives the whole-signal output.

For every stage (and the Dau1997 chain), in float32 and float64, three partitions are
compared with one call on the whole signal, each run on a fresh instance:

* ``whole``  - the whole signal once more (fresh instance: determinism, no shared state);
* ``ones``   - every block 1 sample long;
* ``random`` - seeded random sizes including 1-sample blocks and one 8192-sample block.

Channel stages get realistic inputs: the output of the preceding stage of a float64
Dau1997 run on a 60-80 dB SPL signal with an onset, a silent gap and a re-onset.
"""
from __future__ import annotations

import functools
import zlib

import numpy as np
import pytest
import torch

import rtamt
from rtamt.adaptation import AdaptLoop
from rtamt.adaptation.highpass import AdaptHighpass
from rtamt.filterbank import Gammatone
from rtamt.ihc import IHCEnvelope
from rtamt.models.king2019 import King2019
from rtamt.modulation import ModFilterbank
from rtamt.modulation.king2019 import KingModFilterbank
from rtamt.nonlinear import BrokenStick, PowerCompression

from _helpers import FS, make_signal, max_rel_err, random_partition, run_blocks

N = 9600  # > 8192 so that the random partition holds an 8192-sample block
TOL = {np.float32: 1e-6, np.float64: 1e-12}
DTYPES = [np.float32, np.float64]
PARTITIONS = ["whole", "ones", "random"]


@pytest.fixture(scope="module")
def signals():
    x = make_signal(N, seed=0)
    x2 = np.stack([make_signal(N, seed=1), 0.5 * make_signal(N, seed=2)])
    outs = rtamt.Dau1997(FS).process_all(x)
    fc = tuple(rtamt.Dau1997(FS).fc)
    sig = {"signal": x, "batch": x2, "fc": fc}
    sig.update(outs)
    # sanity: inputs are in a realistic range and not trivial
    assert 0.005 < np.sqrt(np.mean(x[300:1200] ** 2)) < 0.1
    assert np.all(x[1200:1500] == 0)
    assert np.max(np.abs(outs["adaptloop"])) > 10
    return sig


def _ignore_s(cls, **kw):
    """A maker ``lambda s: cls(**kw)`` (the stage does not depend on the signal)."""
    return lambda s: cls(**kw)


def _modfb(s, preset, filter_type):
    return ModFilterbank(fs=FS, fc=s["fc"], preset=preset, filter_type=filter_type)


def _C(sig):
    return len(sig["fc"])


# name -> (factory(sig) -> stage/chain, input key, is_chain)
CASES = {
    "gammatone": (lambda s: Gammatone(fs=FS, basef=1000.0), "signal", False),
    **{f"ihc-{p}": (_ignore_s(IHCEnvelope, fs=FS, preset=p), "gammatone", False)
       for p in ["dau1996", "breebaart2001", "king2019", "lindemann"]},
    "ihc-custom": (lambda s: IHCEnvelope(fs=FS, cutoff=500.0, order=3, iterations=2),
                   "gammatone", False),
    **{f"adapt-{p}": (_ignore_s(AdaptLoop, fs=FS, preset=p), "ihc", False)
       for p in ["dau1997", "osses2021", "paulick2024"]},
    "adapt-minspl-per-channel": (
        lambda s: AdaptLoop(fs=FS, minspl=tuple(np.linspace(-10.0, 20.0, _C(s)))), "ihc", False),
    **{f"modfb-{p}-{ft}": (functools.partial(_modfb, preset=p, filter_type=ft), "adaptloop",
                           False)
       for p in ["amt0910", "dau1997", "jepsen2008", "paulick2024"]
       for ft in ["efilt", "butterworth"]},
    "brokenstick-per-channel": (
        lambda s: BrokenStick(exponent=tuple(np.linspace(0.2, 0.8, _C(s)))), "gammatone", False),
    "power-per-channel": (
        lambda s: PowerCompression(exponent=tuple(np.linspace(0.2, 0.8, _C(s)))), "gammatone",
        False),
    "adapt-highpass-king2019": (lambda s: AdaptHighpass(fs=FS), "ihc", False),
    "modfb-king2019": (lambda s: KingModFilterbank(fs=FS, fc=s["fc"]), "adaptloop", False),
    "modfb-king2019-lp150-nmod": (
        lambda s: KingModFilterbank(fs=FS, fc=s["fc"], lp150=True, nmod=8, qfactor=2.0),
        "adaptloop", False),
    "king2019": (lambda s: King2019(FS), "signal", True),
    "king2019-power-basef-batch": (lambda s: King2019(FS, compression="power", basef=2000.0),
                                   "batch", True),
    "osses2021": (lambda s: rtamt.Osses2021(FS), "signal", True),
    "osses2021-batch": (lambda s: rtamt.Osses2021(FS, flow=500.0, fhigh=4000.0), "batch", True),
    "paulick2024": (lambda s: rtamt.Paulick2024(FS), "signal", True),
    "paulick2024-batch-ratio3": (lambda s: rtamt.Paulick2024(FS, n_channels=12,
                                                              resample_factor=3), "batch", True),
    "dau1997-amt0910": (lambda s: rtamt.Dau1997(FS, "amt0910"), "signal", True),
    "dau1997-torch_amt": (lambda s: rtamt.Dau1997(FS, "torch_amt"), "signal", True),
    "dau1997-batch": (lambda s: rtamt.Dau1997(FS), "batch", True),
}

_whole_cache: dict = {}


def _whole(case, dtype, sig):
    key = (case, np.dtype(dtype).name)
    if key not in _whole_cache:
        factory, inp, is_chain = CASES[case]
        x = np.ascontiguousarray(sig[inp].astype(dtype))
        proc = factory(sig)
        y = proc.process_all(x) if is_chain else proc(x)
        _whole_cache[key] = (x, y)
    return _whole_cache[key]


@pytest.mark.parametrize("partition", PARTITIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(CASES))
def test_block_partition_invariance(case, dtype, partition, signals):
    factory, _, is_chain = CASES[case]
    x, ref = _whole(case, dtype, signals)
    n = x.shape[-1]
    assert n >= 9000
    if partition == "whole":
        sizes = [n]
    elif partition == "ones":
        sizes = [1] * n
    else:
        sizes = random_partition(n, seed=zlib.crc32(case.encode()))
        assert 8192 in sizes and sizes.count(1) >= 3
    proc = factory(signals)  # fresh instance
    got = run_blocks(proc, x, sizes, key=is_chain)
    refs = ref if is_chain else {"out": ref}
    gots = got if is_chain else {"out": got}
    assert set(gots) == set(refs)
    for k in refs:
        r, g = refs[k], gots[k]
        assert g.dtype == np.dtype(dtype), (k, g.dtype)
        assert r.dtype == np.dtype(dtype), (k, r.dtype)
        assert g.shape == r.shape, (k, g.shape, r.shape)
        assert np.all(np.isfinite(g)), k
        err = max_rel_err(g, r)
        assert err <= TOL[dtype], f"{case} [{k}] {partition}: max rel err {err:.3g}"



CHAIN_CASES = [c for c, v in CASES.items() if v[2]]


@pytest.mark.parametrize("partition", ["ones", "random"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("case", CHAIN_CASES)
def test_chain_call_partition_invariance(case, dtype, partition, signals):
    """``chain(x)`` (last stage only; reuses work buffers between equal-size blocks) gives
    the same stream as one ``process_all`` call, and earlier returned blocks stay intact."""
    factory, _, _ = CASES[case]
    x, ref = _whole(case, dtype, signals)
    n = x.shape[-1]
    sizes = [1] * n if partition == "ones" else random_partition(n, seed=99)
    proc = factory(signals)
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

TORCH_CASES = ["gammatone", "ihc-dau1996", "adapt-dau1997", "modfb-amt0910-efilt",
               "modfb-dau1997-butterworth", "brokenstick-per-channel", "dau1997-amt0910",
               "dau1997-batch"]


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("case", TORCH_CASES)
def test_torch_roundtrip(case, dtype, signals):
    factory, inp, is_chain = CASES[case]
    x = np.ascontiguousarray(signals[inp][..., :3000].astype(dtype))
    tdtype = {np.float32: torch.float32, np.float64: torch.float64}[dtype]
    xt = torch.from_numpy(x.copy())
    assert xt.dtype == tdtype
    proc_np, proc_t = factory(signals), factory(signals)
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
            assert gs[k].dtype == tdtype, (k, gs[k].dtype)
            assert gs[k].device.type == "cpu"
            assert tuple(gs[k].shape) == rs[k].shape
            assert np.array_equal(gs[k].numpy(), rs[k]), k
    # the input tensor was not modified
    assert np.array_equal(xt.numpy(), x)


def test_torch_non_contiguous_and_requires_grad(signals):
    x = signals["signal"][:2000]
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


def test_harness_detects_a_block_dependent_stage(signals):
    x = signals["gammatone"]
    whole = _LeakyIHC(fs=FS)(x)
    got = run_blocks(_LeakyIHC(fs=FS), x, random_partition(x.shape[-1], seed=5))
    assert max_rel_err(got, whole) > 1e-3


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_efilt_bank_is_bit_exact_across_its_4_and_1_sample_paths(dtype, signals):
    """The complex one-pole bank takes samples four at a time and the rest of a block one
    at a time; both paths must round identically, so any partition - here block lengths
    that leave every remainder 1..3 - gives the whole-signal output bit for bit."""
    x = np.ascontiguousarray(signals["adaptloop"].astype(dtype))
    ref = ModFilterbank(fs=FS, fc=signals["fc"])(x)
    mf = ModFilterbank(fs=FS, fc=signals["fc"])
    sizes = [1, 2, 3, 5, 6, 7, 4, 9, 10, 11] * 80
    sizes.append(x.shape[-1] - sum(sizes))
    assert sizes[-1] > 0
    got = run_blocks(mf, x, sizes)
    assert np.array_equal(got, ref)
