import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

# The Triton FIR kernel (rtamt.ear.fir_triton.fir_tm) against the numba kernel
# rtamt.ear.fir.fir_tm: random taps and real ear-filter designs, filters shorter and
# longer than the blocks, batches of streams with several channels, random block
# partitions with the history carried, float64 and float32; the Triton path against
# itself under different partitions (bit-identical); and Osses2021 end to end on the
# Triton backend against the numba model.  Sizes are small: Triton's interpreter runs
# every operation of the tap loop as a numpy call.

import numpy as np  # noqa: E402

import rtamt  # noqa: E402
from rtamt.ear import HeadphoneFilter, HeadphoneParams, MiddleEarFilter, MiddleEarParams  # noqa: E402
from rtamt.ear.fir import fir_tm as fir_numba  # noqa: E402
from rtamt.ear.fir_triton import fir_tm as fir_triton  # noqa: E402

from _triton import DEVICE, dev, host  # noqa: E402

TOL = {np.float64: 1e-12, np.float32: 1e-5}
FS = 48000


def _cuts(T, n_blocks, rng):
    inner = np.sort(rng.choice(np.arange(1, T), n_blocks - 1, replace=False))
    return [0, *inner.tolist(), T]


def _case(N, B, T, C, dtype, seed):
    """Random taps (N,), a non-zero starting history (B, N-1, C) and input (B, T, C)."""
    rng = np.random.default_rng(seed)
    h = rng.standard_normal(N).astype(dtype)
    hist = rng.standard_normal((B, N - 1, C)).astype(dtype)
    x = rng.standard_normal((B, T, C)).astype(dtype)
    return h, hist, x


def _run_numba(h, hist, x, cuts):
    hist = hist.copy()
    y = np.empty_like(x)
    for a0, a1 in zip(cuts[:-1], cuts[1:]):
        yb = np.empty_like(x[:, a0:a1])
        fir_numba(h, hist, np.ascontiguousarray(x[:, a0:a1]), yb)
        y[:, a0:a1] = yb
    return y, hist


def _run_triton(h, hist, x, cuts, in_place=False):
    """Triton kernel block by block on CPU tensors; ``in_place``: y is x."""
    ht = dev(h)
    st = dev(hist.copy())
    y = torch.empty(x.shape, dtype=ht.dtype, device=DEVICE)
    for a0, a1 in zip(cuts[:-1], cuts[1:]):
        xb = dev(np.ascontiguousarray(x[:, a0:a1]))
        yb = xb if in_place else torch.empty_like(xb)
        fir_triton(ht, st, xb, yb)
        y[:, a0:a1] = yb
    return y, st


def _rel(got, ref):
    ref = np.asarray(ref, np.float64)
    return float(np.abs(host(got).astype(np.float64) - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("N", [1, 6, 90])
def test_matches_numba_random_taps(dtype, N):
    """3 streams x 2 channels, 60 samples in 3 random blocks (blocks of roughly 20: the
    6-tap filter reaches back into the block, the 90-tap one into the history of several
    earlier blocks; 1 tap has no history); output and final history against numba."""
    B, T, C = 3, 60, 2
    h, hist, x = _case(N, B, T, C, dtype, seed=N)
    cuts = _cuts(T, 3, np.random.default_rng(N + 1))
    y_ref, s_ref = _run_numba(h, hist, x, cuts)
    y, s = _run_triton(h, hist, x, cuts)
    assert y.dtype == s.dtype == dev(x[:0]).dtype
    assert _rel(y, y_ref) <= TOL[dtype]
    if N > 1:
        assert np.array_equal(host(s), s_ref)  # the history is a copy of samples
    # streams and channels differ, so a lane mix-up would show
    assert not np.allclose(y_ref[0], y_ref[1]) and not np.allclose(y_ref[..., 0], y_ref[..., 1])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_numba_with_the_osses2021_ear_filters(dtype):
    """The 513-tap headphone and middle-ear designs of Osses2021 (48 kHz), 2 streams,
    blocks of at most 64 samples (far shorter than the filter), the headphone output
    feeding the middle-ear filter as in the model."""
    hp = HeadphoneFilter(HeadphoneParams(fs=FS)).coeffs
    me = MiddleEarFilter(MiddleEarParams(fs=FS, preset="jepsen2008")).coeffs
    assert hp.ntaps == me.ntaps == 513
    rng = np.random.default_rng(3)
    B, T = 2, 96
    x = rng.standard_normal((B, T, 1)).astype(dtype)
    cuts = [0, int(rng.integers(32, 64)), T]
    for co in (hp, me):
        h = co.taps(dtype)
        hist = np.zeros((B, co.ntaps - 1, 1), dtype)
        y_ref, s_ref = _run_numba(h, hist, x, cuts)
        y, s = _run_triton(h, hist, x, cuts)
        assert _rel(y, y_ref) <= TOL[dtype]
        assert np.array_equal(host(s), s_ref)
        x = y_ref


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_triton_is_partition_invariant_and_works_in_place(dtype):
    """One call over 48 samples vs random blocks (with 1-sample blocks) with y = x:
    bit-identical output and history, for a filter longer than every block."""
    B, T, C, N = 2, 48, 3, 20
    h, hist, x = _case(N, B, T, C, dtype, seed=7)
    y1, s1 = _run_triton(h, hist, x, [0, T])
    inner = np.random.default_rng(8).choice(np.arange(3, T - 1), 3, replace=False)
    cuts = [0, 1, 2, *sorted(inner.tolist()), T - 1, T]
    y3, s3 = _run_triton(h, hist, x, cuts, in_place=True)
    assert torch.equal(y1, y3)
    assert torch.equal(s1, s3)


def _signal(n, seed, dtype):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 0.05
    x[n // 3:n // 3 + 20] *= 40.0
    return x.astype(dtype)


def _parts(n, seed):
    rng = np.random.default_rng(seed)
    return np.split(np.arange(n), np.sort(rng.choice(np.arange(1, n), 2, replace=False)))


# 3 gammatone channels (1 ERB apart from 1 kHz) keep the model fast in the interpreter
SMALL = dict(flow=1000.0, fhigh=1300.0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_osses2021_triton_equals_numba_per_stage(dtype):
    """Osses2021(backend='triton', device='cpu'): every stage's output of a 96-sample
    signal fed in 3 random blocks equals the numba model's (one call) within tolerance."""
    x = _signal(96, 1, dtype)
    ref = rtamt.Osses2021(FS, **SMALL).process_all(x)
    m = rtamt.Osses2021(FS, **SMALL, backend="triton", device=DEVICE)
    assert m.backend == "triton" and all(s.backend == "triton" for s in m.stages)
    outs = {k: [] for k in ref}
    for idx in _parts(x.size, 2):
        for k, v in m.process_all(x[idx]).items():
            assert isinstance(v, torch.Tensor) and v.device.type == DEVICE
            outs[k].append(host(v))
    assert ref["gammatone"].shape[0] == 3
    for k, v in ref.items():
        got = np.concatenate(outs[k], axis=-1)
        assert got.shape == v.shape and got.dtype == v.dtype, k
        err = _rel(dev(got), v)
        assert err <= TOL[dtype], (k, err)
    assert np.abs(ref["middleear"]).max() > 0


def test_ear_filter_stage_switches_backend_mid_stream():
    """A HeadphoneFilter stage (batch of 2 signals) moved to the Triton backend mid-stream
    carries its history over: the output continues the numba run within 1e-12."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 80))
    ref = HeadphoneFilter(HeadphoneParams(fs=FS))(x)
    st = HeadphoneFilter(HeadphoneParams(fs=FS))
    a = st(x[:, :30])
    st.to(DEVICE, backend="triton")
    assert isinstance(st.state["hist"], torch.Tensor)
    b = st(x[:, 30:])
    assert isinstance(b, torch.Tensor)
    got = np.concatenate([a, host(b)], axis=-1)
    assert _rel(dev(got), ref) <= 1e-12


def test_kernel_compiles_for_gpu_with_only_fused_multiply_adds(tmp_path):
    """Compile the kernel to a cubin for sm_80 with Triton's CUDA backend (no device
    needed; a process without TRITON_INTERPRET), float32 and float64, with the scalar
    arguments that Triton specialises when they equal 1 (C, T, N); the PTX's only
    floating-point arithmetic is the round-to-nearest fused multiply-add."""
    import os
    import subprocess
    import sys
    import textwrap

    pytest.importorskip("triton.backends.nvidia")
    script = textwrap.dedent("""
        import re
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from rtamt.ear import fir_triton as FT

        for d in ("fp32", "fp64"):
            p = "*" + d
            for cx in ({}, {"C": 1}, {"C": 1, "T": 1, "N": 1}):
                cx = dict(cx, BLOCK=FT.BLOCK)
                sig = dict(h_ptr=p, N="i32", hist_ptr=p, x_ptr=p, y_ptr=p, L="i32",
                           T="i32", C="i32", BLOCK=0)
                sig = {k: ("constexpr" if k in cx else v) for k, v in sig.items()}
                k = triton.compile(ASTSource(fn=FT._fir_kernel, signature=sig, constexprs=cx),
                                   target=GPUTarget("cuda", 80, 32),
                                   options={"enable_fp_fusion": False, "num_warps": 4})
                assert k.asm["cubin"]
                ops = set(re.findall(r"\\b(?:fma|mul|add|sub|div|neg)(?:\\.\\w+)*\\.f(?:32|64)\\b",
                                     k.asm["ptx"]))
                assert ops == {"fma.rn.f" + d[2:]}, (d, cx, ops)
        print("compiled")
    """)
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-3000:]
