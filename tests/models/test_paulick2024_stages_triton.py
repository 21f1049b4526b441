"""Triton kernels of two Paulick2024 stages against their numba kernels, in Triton's
interpreter on CPU tensors:

* the IHC membrane model (``rtamt.ihc.paulick2024_triton.ihc_paulick2024_kernel`` vs
  ``rtamt.ihc.paulick2024.ihc_paulick2024_kernel``): float64 and float32 streams (float64
  arithmetic and state in both), both integrators;
* the polyphase resampler (``rtamt.resample.polyphase_triton.polyphase_resample`` vs
  ``rtamt.resample.polyphase.polyphase_resample``): Paulick2024's 44100 Hz -> 11025 Hz
  (up 1, down 4) and 3/2, blocks shorter than the decimation factor (no output), the
  shared phase ``offset`` equal to numba's after every block.

Each through the stage (``.to('cpu', backend='triton')`` vs the numba stage) with a batch
of streams and a random block partition carrying the state, and each Triton path against
itself (one call vs a random partition: bit-identical outputs and state).  Sizes are small:
the interpreter runs every operation of a sample loop as a numpy call.
"""
import os

import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402

import numpy as np  # noqa: E402

from rtamt.ihc.paulick2024 import IHCPaulick2024  # noqa: E402
from rtamt.resample import Resampler, polyphase  # noqa: E402

from _triton import DEVICE, dev, host  # noqa: E402

TOL = {np.float64: 1e-12, np.float32: 1e-5}
"""Max |triton - numba| / max |numba| per output and state array."""
IHC_F32_TOL = 2.0 ** -23
"""float32 IHC streams: both kernels integrate in float64 and round the output once, so
they differ by at most one float32 ulp (measured: not at all).  A kernel that integrated
in float32 would be off by ~1e-6 relative (V ~ -60 mV against outputs of a few mV)."""


def _rel(got, ref):
    got = host(got) if isinstance(got, torch.Tensor) else np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = float(np.max(np.abs(ref.astype(np.float64))))
    assert scale > 0, "reference is all zero: the comparison would be vacuous"
    return float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)))) / scale


def _sizes(T, rng, short=()):
    """Block sizes summing to ``T``: the ``short`` sizes and a random split of the rest
    into three blocks (each >= 1), in random order."""
    rest = T - sum(short)
    cuts = np.sort(rng.choice(np.arange(1, rest), 2, replace=False))
    sizes = [*short, int(cuts[0]), int(cuts[1] - cuts[0]), int(rest - cuts[1])]
    return [int(s) for s in rng.permutation(sizes)]


def _stream(stage, x, sizes):
    """Run ``stage`` block by block over ``x`` (…, T); returns the blocks' outputs."""
    outs, a = [], 0
    for n in sizes:
        outs.append(stage(x[..., a:a + n]))
        a += n
    assert a == x.shape[-1]
    return outs


def _cat(outs):
    if isinstance(outs[0], torch.Tensor):
        return torch.cat([o.contiguous() for o in outs], dim=-1)
    return np.concatenate(outs, axis=-1)


def _triton(stage):
    return stage.to(DEVICE, backend="triton")


# --- IHC ------------------------------------------------------------------------------


def _velocity(B, C, T, seed, dtype):
    """BM velocity (m/s), (B, C, T): noise of a few mm/s, a louder tone burst (20 mm/s,
    MET saturation), and one sample per stream at -3 m/s, where ``exp`` overflows to inf
    and the MET conductance is exactly 0 (numba's numpy error model: no exception)."""
    rng = np.random.default_rng(seed)
    x = 3e-3 * rng.standard_normal((B, C, T))
    t = np.arange(T)
    x[:, :, T // 3:2 * T // 3] += 2e-2 * np.sin(0.3 * t[T // 3:2 * T // 3] + np.arange(C)[:, None])
    x[:, 0, T // 2] = -3.0
    return x.astype(dtype)


@pytest.mark.parametrize("integrator", ["euler", "exponential"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ihc_stage_matches_numba(dtype, integrator):
    """3 streams x 5 channels (15 lanes, a masked tail), 96 samples in 4 random blocks:
    every block's output and the final float64 membrane potential against numba."""
    B, C, T = 3, 5, 96
    rng = np.random.default_rng(1)
    x = _velocity(B, C, T, seed=2, dtype=dtype)
    sizes = _sizes(T, rng, short=(1,))
    ref = IHCPaulick2024(fs=44100.0, integrator=integrator)
    tri = _triton(IHCPaulick2024(fs=44100.0, integrator=integrator))
    with np.errstate(over="ignore"):               # the -3 m/s sample: exp -> inf
        y_ref, y = _cat(_stream(ref, x, sizes)), _cat(_stream(tri, x, sizes))
    assert isinstance(y, torch.Tensor) and y.dtype == dev(x[:0]).dtype
    assert tri.state["v"].dtype == torch.float64
    assert np.ptp(y_ref) > 5e-3                     # mV-size responses, saturation included
    assert not np.allclose(y_ref[0], y_ref[1])      # the streams differ: a lane mix-up shows
    ey, ev = _rel(y, y_ref), _rel(tri.state["v"], ref.state["v"])
    assert ey <= TOL[dtype] and ev <= 1e-12
    if dtype == np.float32:
        assert ey <= IHC_F32_TOL


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ihc_triton_is_partition_invariant(dtype):
    """One call over 80 samples vs 4 random blocks on the Triton path: bit-identical."""
    B, C, T = 2, 3, 80
    x = _velocity(B, C, T, seed=3, dtype=dtype)
    one = _triton(IHCPaulick2024(fs=44100.0))
    many = _triton(IHCPaulick2024(fs=44100.0))
    with np.errstate(over="ignore"):
        y1 = one(x)
        y4 = _cat(_stream(many, x, _sizes(T, np.random.default_rng(4), short=(2,))))
    assert torch.equal(y1.contiguous(), y4)
    assert torch.equal(one.state["v"], many.state["v"])


def test_ihc_kernel_in_place():
    """The Triton kernel with ``y`` = ``x`` (as numba allows) gives the same as with a
    separate output."""
    from rtamt.ihc.paulick2024_triton import ihc_paulick2024_kernel

    st = IHCPaulick2024(fs=44100.0)
    c = st.coeffs
    args = (c.alpha, c.gmet, c.x0, c.inv_s0, c.inv_s1, c.ep, c.gkf, c.ekf, c.gks, c.eks, c.k,
            c.method, c.offset)
    x = dev(np.ascontiguousarray(
        _velocity(2, 3, 40, seed=5, dtype=np.float64)[:, :, 1:].transpose(0, 2, 1)))
    v1 = torch.full((2, 3), c.v_rest, dtype=torch.float64, device=DEVICE)
    v2 = v1.clone()
    y = torch.empty_like(x)
    with np.errstate(over="ignore"):
        ihc_paulick2024_kernel(*args, v1, x, y)
        ihc_paulick2024_kernel(*args, v2, x, x)
    assert torch.equal(x, y) and torch.equal(v1, v2)


# --- resampler ------------------------------------------------------------------------

RATIOS = [(44100.0, 11025.0), (44100.0, 66150.0)]   # Paulick2024's 1/4, and 3/2


def _signal(B, C, T, seed, dtype):
    return np.random.default_rng(seed).standard_normal((B, C, T)).astype(dtype)


@pytest.mark.parametrize("fs_in,fs_out", RATIOS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_resampler_stage_matches_numba(fs_in, fs_out, dtype):
    """2 streams x 2 channels, 44 samples in 6 blocks, three of them shorter than the
    decimation factor (sizes 1, 2, 3: a down-by-4 block may give no output): every block's
    output length and values, the history and the shared phase against numba."""
    B, C, T = 2, 2, 44
    x = _signal(B, C, T, seed=6, dtype=dtype)
    sizes = _sizes(T, np.random.default_rng(7), short=(1, 2, 3))
    ref = Resampler(fs_in=fs_in, fs_out=fs_out)
    tri = _triton(Resampler(fs_in=fs_in, fs_out=fs_out))
    outs_ref, outs, phases = [], [], set()
    a = 0
    for n in sizes:
        outs_ref.append(ref(x[..., a:a + n]))
        outs.append(tri(x[..., a:a + n]))
        a += n
        assert outs[-1].shape == outs_ref[-1].shape                    # same n_out
        phases.add(int(ref.state["offset"][0]))
        assert int(tri.state["offset"][0]) == int(ref.state["offset"][0])
    if fs_out < fs_in:
        assert any(o.shape[-1] == 0 for o in outs_ref)                 # an empty block
    assert len(phases) > 1                                             # phases carried
    y_ref, y = _cat(outs_ref), _cat(outs)
    assert y.shape[-1] == polyphase.output_length(ref.coeffs, T)
    assert not np.allclose(y_ref[0], y_ref[1])
    assert _rel(y, y_ref) <= TOL[dtype]
    assert torch.equal(tri.state["hist"], dev(ref.state["hist"]))
    assert tri.state["offset"].dtype == torch.int64


@pytest.mark.parametrize("fs_in,fs_out", RATIOS)
def test_resampler_triton_is_partition_invariant(fs_in, fs_out):
    """One call over 40 samples vs 5 blocks (two of them 1 and 3 samples long) on the
    Triton path, 3 streams x 1 channel: bit-identical outputs, history and phase."""
    B, C, T = 3, 1, 40
    x = _signal(B, C, T, seed=8, dtype=np.float64)
    one = _triton(Resampler(fs_in=fs_in, fs_out=fs_out))
    many = _triton(Resampler(fs_in=fs_in, fs_out=fs_out))
    y1 = one(x)
    y5 = _cat(_stream(many, x, _sizes(T, np.random.default_rng(9), short=(1, 3))))
    assert torch.equal(y1.contiguous(), y5)
    assert torch.equal(one.state["hist"], many.state["hist"])
    assert torch.equal(one.state["offset"], many.state["offset"])


@pytest.mark.parametrize("up,down,r0", [(1, 4, 3), (3, 2, 1)])
def test_resample_kernel_from_a_phase_and_in_place(up, down, r0):
    """The Triton kernel from a nonzero phase ``r0`` and a random history (float32), into
    a separate output and into an output that shares ``x``'s memory: both equal numba's
    result within the float32 tolerance, and the history and phase exactly."""
    from rtamt.resample.polyphase_triton import polyphase_resample

    co = polyphase.design(polyphase.ResamplerParams(fs_in=44100.0, up=up, down=down))
    K = co.taps_per_phase
    rng = np.random.default_rng(10)
    B, T, C = 2, 24, 2
    x = rng.standard_normal((B, T, C)).astype(np.float32)
    hist = rng.standard_normal((B, K - 1, C)).astype(np.float32)
    off = np.array([r0], np.int64)
    n = polyphase.block_output_length(co, {"offset": off}, T)
    y_ref = np.empty((B, n, C), np.float32)
    h_ref = hist.copy()
    polyphase.polyphase_resample(co.taps32, up, down, off, h_ref, x.copy(), y_ref)
    taps = dev(co.taps32)
    for alias in (False, True):
        o = torch.tensor([r0], dtype=torch.int64, device=DEVICE)
        h = dev(hist.copy())
        if alias:       # x and y are views at the start of one storage
            buf = torch.empty(B * max(T, n) * C, dtype=torch.float32, device=DEVICE)
            xt = buf[:B * T * C].view(B, T, C)
            xt.copy_(dev(x))
            y = buf[:B * n * C].view(B, n, C)
        else:
            xt = dev(x.copy())
            y = torch.empty((B, n, C), dtype=torch.float32, device=DEVICE)
        polyphase_resample(taps, up, down, o, h, xt, y)
        assert _rel(y, y_ref) <= TOL[np.float32]
        assert torch.equal(h, dev(h_ref)) and int(o[0]) == int(off[0])


# --- the GPU compiler accepts the kernels -----------------------------------------------


def test_kernels_compile_for_gpu(tmp_path):
    """Compile both kernels (float32 and float64 streams, both integrators) to a cubin for
    sm_80 with Triton's CUDA backend, in a process without TRITON_INTERPRET."""
    pytest.importorskip("triton.backends.nvidia")
    script = textwrap.dedent("""
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from rtamt.ihc import paulick2024_triton as IT
        from rtamt.resample import polyphase_triton as RT

        def build(fn, sig, cx):
            sig = {k: ("constexpr" if k in cx else v) for k, v in sig.items()}
            k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=cx),
                               target=GPUTarget("cuda", 80, 32),
                               options={"enable_fp_fusion": True, "num_warps": 1})
            assert k.asm["cubin"]

        for d in ("fp32", "fp64"):
            p, i = "*" + d, "i32"
            for method in (0, 1):
                build(IT._ihc_kernel, dict(cst_ptr="*fp64", v_ptr="*fp64", x_ptr=p, y_ptr=p,
                                           N=i, T=i, C=i, METHOD=0, BLOCK=0),
                      {"METHOD": method, "BLOCK": IT.BLOCK})
            build(RT._polyphase_kernel, dict(taps_ptr=p, offset_ptr="*i64", hist_ptr=p,
                                             x_ptr=p, y_ptr=p, N=i, T=i, C=i, K=i, NOUT=i,
                                             UP=i, DOWN=i, BLOCK=0), {"BLOCK": RT.BLOCK})
        print("compiled")
    """)
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-3000:]
