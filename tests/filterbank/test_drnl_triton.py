"""The Triton DRNL kernel (rtamt.filterbank.drnl_triton) against the numba kernel
(rtamt.filterbank.drnl.drnl_kernel), run in Triton's interpreter on CPU tensors.

* kernel vs numba with the Paulick2024 coefficients (built as rtamt.models.paulick2024
  builds its DRNL, with fewer channels), float64 and float32, three streams at once (soft:
  every channel below the broken-stick knee; medium; loud: every channel above it),
  random block partitions with the state carried;
* the stage: ``DRNL.to('cpu', backend='triton')`` vs the numba stage, random partitions;
* the other constexpr branches: a general exponent c (pow), one path only;
* the Triton path against itself: one call vs a random partition, bit-identical output and
  state, with more lanes than one program holds;
* the kernel compiles for sm_80 (no device needed) with the fused multiply-adds and
  correctly rounded square roots the numba build uses.

Sizes are small: the interpreter runs every operation of the sample loop as a numpy call.
"""
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

import scipy.signal as ss  # noqa: E402

from rtamt.filterbank import drnl_triton as DT  # noqa: E402
from rtamt.filterbank.drnl import DRNL, DRNLParams, drnl_kernel, get_preset  # noqa: E402

from _triton import DEVICE, dev, host  # noqa: E402

FS = 44100.0
TOL = {np.float64: 1e-12, np.float32: 1e-5}
# stream amplitudes of the white-noise stapes velocity (m/s): the Paulick2024 knees lie
# between 2e-7 and 1e-5 m/s, the GT cascade before the stick passes ~0.06-0.6 of the
# noise amplitude in 64 samples
SOFT, MEDIUM, LOUD = 1e-9, 1e-6, 1e-3


def _paulick_drnl(n_channels=5, **kw):
    """The DRNL stage as rtamt.models.paulick2024.Paulick2024 makes it (defaults flow=250,
    fhigh=8000, subject 'NH', input in stapes velocity), with ``n_channels`` channels."""
    return DRNL(DRNLParams(fs=FS, **({"preset": "paulick2024", "flow": 250.0,
                                      "fhigh": 8000.0, "n_channels": n_channels,
                                      "subject": "NH"} | kw)))


def _noise(levels, T, dtype, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((len(levels), T)) * np.asarray(levels)[:, None]).astype(dtype)


def _cuts(T, n_blocks, rng):
    inner = np.sort(rng.choice(np.arange(1, T), n_blocks - 1, replace=False))
    return [0, *inner.tolist(), T]


def _run(co, x, cuts, triton_path):
    """Kernel block by block over ``cuts``; returns (y (B, T, C), state dict), numpy."""
    B, C, dt = x.shape[0], co.fc.size, x.dtype
    st = DRNL.init_state(co, B, 1, dt)
    s = co.sections[dt]
    if triton_path:
        st = {k: dev(v) for k, v in st.items()}
        s = {k: dev(v) for k, v in s.items()}
    ys = []
    for a0, a1 in zip(cuts[:-1], cuts[1:]):
        xb = np.ascontiguousarray(x[:, a0:a1])
        y = np.full((B, a1 - a0, C), np.nan, dt)
        if triton_path:
            xb, y = dev(xb), dev(y)
            kern, v, w = DT.drnl_kernel, None, None
        else:
            kern, v, w = drnl_kernel, np.zeros(C, dt), np.zeros(C, dt)
        kern(s["scale"], s["gain"], s["gtl"], s["lpl"], s["gtn"], s["lpn"], s["bs"],
             co.quarter, *co.counts, co.do_lin, co.do_nlin, st["lin_s1"], st["lin_s2"],
             st["nlin_s1"], st["nlin_s2"], xb, y, v, w)
        ys.append(np.asarray(y))
    return np.concatenate(ys, axis=1), {k: np.asarray(v) for k, v in st.items()}


def _rel(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-300))


def _gt_before(co, x):
    """The nonlinear path's input to the broken stick (B, T, C), float64, scipy."""
    g = co.sections[np.dtype(np.float64)]["gtn"]
    u = np.empty(x.shape + (co.fc.size,))
    for c in range(co.fc.size):
        row = [g[0, c], g[1, c], g[2, c], 1.0, g[3, c], g[4, c]]
        u[..., c] = ss.sosfilt(np.tile(row, (co.counts[2], 1)), x.astype(np.float64), axis=-1)
    return u


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernel_matches_numba_soft_medium_loud(dtype):
    """3 streams (soft, medium, loud) x 5 channels, 120 samples in 3 random blocks:
    output per stream (relative to that stream's own peak) and final memories."""
    co = _paulick_drnl().coeffs
    assert co.quarter and co.counts == (2, 4, 2, 2, 1) and co.do_lin and co.do_nlin
    T = 120
    x = _noise([SOFT, MEDIUM, LOUD], T, dtype, seed=1)
    # both sides of the knee: soft stays below it in every channel, loud exceeds it in
    # every channel, medium does both (low channels below, high channels above)
    peak = np.abs(_gt_before(co, x)).max(axis=1)          # (B, C)
    assert np.all(peak[0] < co.knee) and np.all(peak[2] > 2 * co.knee)
    assert np.any(peak[1] < co.knee) and np.any(peak[1] > co.knee)
    cuts = _cuts(T, 3, np.random.default_rng(2))
    y_ref, s_ref = _run(co, x, cuts, False)
    y, s = _run(co, x, cuts, True)
    assert y.dtype == dtype
    for b in range(3):
        assert _rel(y[b], y_ref[b]) <= TOL[dtype], b
    for k in s_ref:
        assert _rel(s[k], s_ref[k]) <= TOL[dtype], k
    # loud is compressed relative to soft (the stick acted): output/input ratio drops
    gain = np.abs(y_ref).max(axis=(1, 2)) / np.array([SOFT, MEDIUM, LOUD])
    assert gain[2] < 0.1 * gain[0]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stage_on_triton_matches_numba_stage(dtype):
    """DRNL stage with backend='triton' (tensors out, state on the device) vs the numba
    stage, 2 streams, 100 samples in a random partition of 3 blocks."""
    ref = _paulick_drnl(n_channels=4)
    tri = _paulick_drnl(n_channels=4).to(DEVICE, backend="triton")
    assert tri.backend == "triton"
    T = 100
    x = _noise([MEDIUM, LOUD], T, dtype, seed=3)
    y_ref = ref(x)
    cuts = _cuts(T, 3, np.random.default_rng(4))
    parts = []
    for a0, a1 in zip(cuts[:-1], cuts[1:]):
        yb = tri(x[:, a0:a1])
        assert isinstance(yb, torch.Tensor) and yb.dtype == dev(x[:0]).dtype
        parts.append(host(yb))
    y = np.concatenate(parts, axis=-1)
    assert y.shape == y_ref.shape == (2, 4, T)
    for b in range(2):
        assert _rel(y[b], y_ref[b]) <= TOL[dtype], b
    for k, v in ref.state.items():
        assert isinstance(tri.state[k], torch.Tensor)
        assert _rel(host(tri.state[k]), v) <= TOL[dtype], k


VARIANTS = {
    # general exponent: the pow branch (exp(c log|u|) in float64) with the knee test
    "c=0.3": dict(preset=get_preset("paulick2024", c=(math.log10(0.3), 0.0))),
    "lin": dict(paths="lin"),
    "nlin": dict(paths="nlin"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernel_matches_numba_other_branches(variant, dtype):
    co = _paulick_drnl(n_channels=3, **VARIANTS[variant]).coeffs
    assert co.quarter == (variant != "c=0.3")
    assert (co.do_lin, co.do_nlin) == {"lin": (True, False), "nlin": (False, True)}.get(
        variant, (True, True))
    T = 80
    x = _noise([SOFT, LOUD], T, dtype, seed=5)
    cuts = _cuts(T, 2, np.random.default_rng(6))
    y_ref, s_ref = _run(co, x, cuts, False)
    y, s = _run(co, x, cuts, True)
    for b in range(2):
        assert _rel(y[b], y_ref[b]) <= TOL[dtype], b
    for k in s_ref:
        if np.any(s_ref[k]):        # a path that is off keeps its memories at zero
            assert _rel(s[k], s_ref[k]) <= TOL[dtype], k
        else:
            assert not np.any(s[k]), k


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_triton_path_is_partition_invariant(dtype):
    """3 streams x 12 channels = 36 lanes (two programs, the second masked): one call over
    60 samples vs a random partition into 3 blocks, bit-identical output and memories."""
    co = _paulick_drnl(n_channels=12).coeffs
    T = 60
    x = _noise([SOFT, MEDIUM, LOUD], T, dtype, seed=7)
    y1, s1 = _run(co, x, [0, T], True)
    y3, s3 = _run(co, x, _cuts(T, 3, np.random.default_rng(8)), True)
    assert not np.any(np.isnan(y1)) and np.abs(y1[2]).max() > 0
    assert torch.equal(dev(y1), dev(y3))
    for k in s1:
        assert torch.equal(dev(s1[k]), dev(s3[k])), k
    # streams are independent lanes: the loud stream alone gives the same bits
    y_one, _ = _run(co, x[2:], [0, T], True)
    assert torch.equal(dev(y_one[0]), dev(y1[2]))


def test_kernel_compiles_for_gpu_with_numbas_fmas(tmp_path):
    """Compile the kernel for sm_80 (float32/float64; quarter and general exponent; both
    paths and one path) in a process without TRITON_INTERPRET, and read the PTX: three
    ``fma.rn`` per biquad section (the numba build's contraction) and nothing else fused
    (fp fusion off), square roots ``sqrt.rn``."""
    pytest.importorskip("triton.backends.nvidia")
    script = textwrap.dedent("""
        import re
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from rtamt.filterbank import drnl_triton as DT

        ptrs = ["scale_ptr", "gain_ptr", "gtl_ptr", "lpl_ptr", "gtn_ptr", "lpn_ptr",
                "bs_ptr", "l1_ptr", "l2_ptr", "n1_ptr", "n2_ptr", "x_ptr", "y_ptr"]
        for d in ("f32", "f64"):
            for quarter, lin, nlin in ((True, True, True), (False, True, True),
                                       (True, True, False), (True, False, True)):
                cx = dict(N_GL=2, N_LL=4, N_GB=2, N_GA=2, N_LN=1, KL=8, KN=8,
                          QUARTER=quarter, DO_LIN=lin, DO_NLIN=nlin, F32=d == "f32",
                          BLOCK=DT.BLOCK)
                sig = {p: "*fp" + d[1:] for p in ptrs} | dict(N="i32", T="i32", C="i32")
                sig |= {k: "constexpr" for k in cx}
                k = triton.compile(ASTSource(fn=DT._drnl_kernel, signature=sig,
                                             constexprs=cx),
                                   target=GPUTarget("cuda", 80, 32),
                                   options={"enable_fp_fusion": False, "num_warps": 1})
                assert k.asm["cubin"]
                ptx = k.asm["ptx"]
                n_sec = 6 * lin + 5 * nlin
                n_fma = len(re.findall(r"\\bfma\\.rn\\." + d + r"\\b", ptx))
                # (a general exponent adds libdevice exp/log, with fmas of their own)
                assert n_fma == 3 * n_sec if quarter else n_fma >= 3 * n_sec, (
                    d, quarter, lin, nlin, n_fma)
                if nlin and quarter:
                    assert len(re.findall(r"\\bsqrt\\.rn\\." + d + r"\\b", ptx)) == 2
                assert not re.search(r"\\bsqrt\\.approx", ptx)
        print("compiled")
    """)
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-3000:]
