import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

"""The Triton twins of the loudness stages' kernels (``rtamt/loudness/<stage>_triton.py``,
``rtamt/engine/rowwise_triton.py``) against their numba kernels, on the arguments the
loudness models really pass them: a
Moore2016 stereo batch (two ear pairs) and a diotic stream, a Glasberg2002 batch of three
rows, the stateless spectrum of the phon table and the ``direct`` spectrum method are run
once (numba), and every kernel call is recorded (copies of its arguments before the call).
Each test replays recorded calls through both kernels: max |triton - numba| / max |numba|
<= 1e-12 for the float64 kernels; the lower skirt (float32 weights and sums) is
bit-identical.  The
recursive kernels (AGC integrators, binaural long-term AGC, the chunk ring of the
hopping DFT) are also run on a random partition of their frames on the Triton path and
must give bit-identical outputs and states.  Sizes are small (a few frames): the
interpreter runs every kernel operation as a numpy call.  The last test compiles every
kernel for an sm_80 GPU (no device needed)."""

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import types  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402
import triton.language as tl  # noqa: E402

import rtamt  # noqa: E402
from rtamt.engine import fastexp, rowwise, rowwise_triton  # noqa: E402
from rtamt.loudness import (  # noqa: E402
    agc,
    agc_triton,
    binaural,
    binaural_triton,
    excitation,
    excitation_triton,
    specific_loudness,
    specific_loudness_triton,
    spectrum,
    spectrum_triton,
)
from rtamt.loudness.agc import LoudnessIntegrator, SpecificLoudnessAGC  # noqa: E402
from rtamt.loudness.binaural import BinauralInhibition  # noqa: E402
from rtamt.loudness.excitation import Excitation  # noqa: E402
from rtamt.loudness.excitation_triton import _exp2_neg_f32, _log_f64  # noqa: E402
from rtamt.loudness.specific_loudness import SpecificLoudness  # noqa: E402
from rtamt.loudness.spectrum import Spectrum  # noqa: E402

from _triton import DEVICE, dev, host  # noqa: E402

TOL64 = 1e-12


def _merged(*modules):
    """The public functions and kernels of several modules as one namespace."""
    return types.SimpleNamespace(**{k: v for m in modules for k, v in vars(m).items()
                                    if not k.startswith("__")})


#: the numba kernels and their Triton twins, by name
KN = _merged(rowwise, spectrum, excitation, specific_loudness, agc, binaural)
KT = _merged(rowwise_triton, spectrum_triton, excitation_triton, specific_loudness_triton,
             agc_triton, binaural_triton)

# (bound kernel set of a stage class, name) of every kernel call site that is recorded
_SITES = [(Spectrum.kern, "spectrum_chunks"), (Spectrum.kern, "autocorr_frames"),
          (Spectrum.kern, "group_add"), (Spectrum.kern, "rowwise_matmul"),
          (Excitation.kern, "rowwise_matmul"), (Excitation.kern, "lower_skirt"),
          (SpecificLoudness.kern, "specific_loudness"), (LoudnessIntegrator.kern, "agc"),
          (SpecificLoudnessAGC.kern, "agc_rows"), (BinauralInhibition.kern, "binaural_frames"),
          (BinauralInhibition.kern, "rowwise_matmul")]


def _copy(a):
    return a.copy() if isinstance(a, np.ndarray) else a


@pytest.fixture(scope="module")
def calls():
    """``{(tag, kernel name): [argument tuples]}`` recorded from real model runs."""
    rec: dict = {}
    tag = ["?"]

    def recorder(fn, name):
        def call(*args):
            rec.setdefault((tag[0], name), []).append(tuple(_copy(a) for a in args))
            return fn(*args)
        return call

    rng = np.random.default_rng(7)
    fs = 32000
    t = np.arange(3307) / fs
    with pytest.MonkeyPatch.context() as mp:
        for kern, name in _SITES:
            mp.setattr(kern, name, recorder(getattr(kern, name), name))
        # stereo, a batch of two ear pairs: a 1 kHz tone in noise (~75 dB SPL) in one ear
        # and quieter noise in the other (the left ear of pair 0, the right ear of pair 1);
        # the first block leaves non-trivial rings and AGC states, the second completes
        # 3 frames
        tone = 0.05 * np.sin(2 * np.pi * 1000 * t) + 0.02 * rng.standard_normal(t.size)
        x = np.stack([[tone, 0.01 * rng.standard_normal(t.size)],
                      [0.01 * rng.standard_normal(t.size), tone]])
        m = rtamt.Moore2016(fs)
        tag[0] = "stereo_long"
        m(x[..., :3207])
        tag[0] = "stereo"
        m(x[..., 3207:])
        tag[0] = "diotic"
        rtamt.Moore2016(fs)(tone[:1600])
        tag[0] = "g2002"
        rtamt.Glasberg2002(fs)(0.03 * rng.standard_normal((3, 3207)))
        # stateless spectrum (phon table, steady-tone loudness): the rings are primed from
        # the history, chunk indices before frame 0 are negative
        sp = m.coeffs.spec
        z = 0.03 * rng.standard_normal((2, sp.nmax + 3 * sp.hop))
        ends = sp.nmax + sp.hop * np.arange(1, 4)
        tag[0] = "stateless"
        spectrum.frame_powers(sp, z, ends)
        # the 'direct' method (44.1 kHz rates) is the one that calls group_add
        sd = spectrum.design_spectrum(spectrum.SpectrumParams(fs=fs, method="direct"))
        tag[0] = "direct"
        spectrum.frame_powers(sd, z, ends)
    return rec


def _t(a):
    return dev(np.ascontiguousarray(a).copy()) if isinstance(a, np.ndarray) else a


def _rel(got, ref):
    got = host(got) if isinstance(got, torch.Tensor) else got
    scale = float(np.max(np.abs(ref)))
    assert scale > 0, "reference is all zero: the comparison would be vacuous"
    return float(np.max(np.abs(got - ref))) / scale


def _both(name, args):
    """Run numba and Triton ``name`` on copies of ``args``; returns both argument lists
    after the call (numpy, torch)."""
    an = [_copy(a) for a in args]
    at = [_t(a) for a in args]
    getattr(KN, name)(*an)
    getattr(KT, name)(*at)
    return an, at


def _check_written(an, at, idx, tol):
    errs = []
    for i in idx:
        errs.append(_rel(at[i], an[i]))
        assert errs[-1] <= tol, (i, errs[-1])
    return max(errs)


def _cuts(n, rng, parts=3):
    """A random partition of ``range(n)`` into ``parts`` consecutive pieces (some may be
    empty)."""
    inner = np.sort(rng.integers(0, n + 1, parts - 1))
    return [0, *inner.tolist(), n]


# --- excitation and specific loudness -------------------------------------------------


def test_lower_skirt(calls):
    """The excitation after the lower skirts is bit-identical to numba's on every recorded
    call of the stereo, diotic and Glasberg2002 runs (four frame rows each): the
    Triton kernel evaluates rtamt's own float32 ``exp2_neg_f32`` and float64 ``log_f64``
    with the FMAs numba's machine code has, and sums in the same order."""
    for tag in ("stereo", "diotic", "g2002"):
        args = calls[(tag, "lower_skirt")][0]
        P, lvl, c_slope, a, b, i0, seg, cnt, E = args
        assert a.dtype == b.dtype == np.float32 and P.dtype == E.dtype == np.float64
        args = (P[:4], lvl[:4], c_slope, a, b, i0, seg, cnt, E[:4])   # the interpreter is slow
        an, at = _both("lower_skirt", args)
        assert np.all(an[-1] - E[:4] >= 0) and np.any(an[-1] > E[:4]), tag
        assert np.array_equal(host(at[-1]), an[-1]), (tag, _rel(at[-1], an[-1]))


@triton.jit
def _helpers_kernel(t_ptr, x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(y_ptr + i, _exp2_neg_f32(tl.load(t_ptr + i, mask=m, other=0.0)), mask=m)
    tl.store(z_ptr + i, _log_f64(tl.load(x_ptr + i, mask=m, other=1.0)), mask=m)


@numba.njit(fastmath={"contract"})
def _helpers_numba(t, x, y, z):
    for i in range(t.size):
        y[i] = fastexp.exp2_neg_f32(t[i])
        z[i] = fastexp.log_f64(x[i])


def test_skirt_math_helpers():
    """The Triton ``exp2_neg_f32`` and ``log_f64`` give numba's bits on a wide grid (t in
    [0, 130], x over 1e-10 .. 1e12 and both sides of every power of two)."""
    rng = np.random.default_rng(3)
    n = 4096
    t = np.concatenate([rng.uniform(0, 130, n - 64), np.arange(64) * 0.5]).astype(np.float32)
    x = 10.0 ** rng.uniform(-10, 12, n)
    x[:128] = np.ldexp(1.0, np.arange(-64, 64)) * (1 + 1e-16 * rng.standard_normal(128))
    y, z = np.empty(n, np.float32), np.empty(n)
    _helpers_numba(t, x, y, z)
    yt = torch.empty(n, dtype=torch.float32, device=DEVICE)
    zt = torch.empty(n, dtype=torch.float64, device=DEVICE)
    _helpers_kernel[(n // 256,)](dev(t), dev(x), yt, zt, n,
                                 BLOCK=256, enable_fp_fusion=False)
    assert np.array_equal(host(yt), y)
    assert np.array_equal(host(zt), z)


@pytest.mark.parametrize("tag", ["stereo", "g2002"])
def test_specific_loudness(calls, tag):
    """Moore2016 (C = 0.06084) and Glasberg2002 (C = 0.046871) excitation frames, plus
    rows that reach the three branches (below threshold, above 1e10, zero)."""
    (args,) = calls[(tag, "specific_loudness")]
    an, at = _both("specific_loudness", args)
    _check_written(an, at, [7], TOL64)
    E = args[0][:2].copy()
    E[0, ::3] = 0.0
    E[0, 1::3] *= 1e-6                      # far below threshold
    E[1] = np.geomspace(1e9, 1e12, E.shape[1])
    an, at = _both("specific_loudness", (E,) + args[1:7] + (np.empty_like(E),))
    _check_written(an, at, [7], TOL64)
    assert np.all(host(at[7])[0, ::3] == 0.0)


# --- AGC integrators ------------------------------------------------------------------


def _agc_partition(name, x, y, aa, ar, axis, ref_out, ref_y, rng):
    """Triton ``name`` (agc or agc_rows) over a random partition of the frames of ``x``
    (frame axis ``axis``; the output is frame-major): the outputs and the state must be
    bit-identical to the one-call results ``ref_out``, ``ref_y``."""
    cuts = _cuts(x.shape[axis], rng)
    yt = _t(y)
    parts = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        o = torch.empty((hi - lo,) + tuple(ref_out.shape[1:]), dtype=torch.float64,
                        device=DEVICE)
        getattr(KT, name)(_t(np.take(x, np.arange(lo, hi), axis=axis)), yt, aa, ar, o)
        parts.append(o)
    assert torch.equal(torch.cat(parts), ref_out), cuts
    assert torch.equal(yt, ref_y), cuts


def test_agc(calls):
    """Glasberg2002's two integrators (STL from N_I, LTL from STL) on a batch of three
    rows over 100 frames; then the Triton path on a random partition of the frames."""
    rng = np.random.default_rng(1)
    for args in calls[("g2002", "agc")]:
        x, y, aa, ar, out = args
        assert x.shape == (100, 3)
        an, at = _both("agc", args)
        _check_written(an, at, [1, 4], TOL64)
        _agc_partition("agc", x, y, aa, ar, 0, at[4], at[1], rng)


def test_agc_rows(calls):
    """Moore2016's short-term AGC (two ear pairs x 150 channels, 100 frames), and a
    random partition of the frames on the Triton path."""
    rng = np.random.default_rng(2)
    (args,) = calls[("stereo_long", "agc_rows")]
    x, y, aa, ar, out = args
    an, at = _both("agc_rows", args)
    _check_written(an, at, [1, 4], TOL64)
    _agc_partition("agc_rows", x, y, aa, ar, 1, at[4], at[1], rng)


# --- binaural inhibition --------------------------------------------------------------


def _binaural_slice(args, lo, hi):
    st, S, E, lt, aa, ar, p, spec, exc, ste, lte = args
    B = spec.shape[0]
    K = st.shape[2]
    return (st[lo:hi], S[lo:hi], E[:, lo:hi], lt, aa, ar, p,
            np.zeros((B, 2, K, hi - lo)), np.zeros((B, 2, K, hi - lo)),
            np.zeros((B, 2, hi - lo)), np.zeros((B, 2, hi - lo)))


@pytest.mark.parametrize("tag,frames", [("stereo_long", 30), ("diotic", 20)])
def test_binaural_frames(calls, tag, frames):
    """Stereo (two ear pairs, a tone in one ear of each) and diotic (one row feeding both
    ears) on their first frames; then the Triton path on a random partition."""
    rng = np.random.default_rng(3)
    (full,) = calls[(tag, "binaural_frames")]
    assert full[0].shape[1] == (1 if tag == "diotic" else 4)
    args = _binaural_slice(full, 0, frames)
    an, at = _both("binaural_frames", args)
    _check_written(an, at, [3, 7, 8, 9, 10], TOL64)
    if tag == "diotic":
        for i in (7, 8, 9, 10):
            assert torch.equal(at[i][:, 0], at[i][:, 1])
    else:   # the ear with the tone is the louder one, in each pair
        assert np.all(an[7][0, 0].sum(0) > an[7][0, 1].sum(0))
        assert np.all(an[7][1, 1].sum(0) > an[7][1, 0].sum(0))
    cuts = _cuts(frames, rng)
    lt = _t(full[3])
    outs = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        part = [_t(a) for a in _binaural_slice(full, lo, hi)]
        part[3] = lt
        KT.binaural_frames(*part)
        outs.append(part[7:])
    for k, i in enumerate((7, 8, 9, 10)):
        assert torch.equal(torch.cat([o[k] for o in outs], dim=-1), at[i]), (i, cuts)
    assert torch.equal(lt, at[3]), cuts


# --- spectrum -------------------------------------------------------------------------


@pytest.mark.parametrize("tag", ["stereo", "stateless"])
def test_spectrum_chunks(calls, tag):
    """Every window that uses the hopping DFT (64, 32, 16, 8, 4 ms): the ring state and
    the component powers, added into P on top of what earlier windows left there.
    ``stateless`` primes the rings from the history (C - 1 extra chunks, negative chunk
    indices: Python's modulo in the kernel)."""
    recorded = calls[(tag, "spectrum_chunks")]
    assert len(recorded) == 5
    for args in recorded:
        assert (args[4] > 0) == (tag == "stateless")
        an, at = _both("spectrum_chunks", args)
        _check_written(an, at, [8, 14], TOL64)


def test_spectrum_chunks_partition(calls):
    """The chunk recursion on the Triton path: the stereo block's 3 frames in one call vs
    split at a random frame (ring and powers bit-identical)."""
    rng = np.random.default_rng(4)
    for w, args in enumerate(calls[("stereo", "spectrum_chunks")]):
        D, k0, lag, F, n_prime, rc, rs, wn, ring, offs, cm, cp, gain, grp, P = args
        assert n_prime == 0 and F == 3
        full = [_t(a) for a in args]
        KT.spectrum_chunks(*full)
        R, J = D.shape[0], P.shape[1]
        P3 = P.reshape(R, F, J)
        cuts = _cuts(F, rng, parts=2)
        rg = _t(ring)
        pieces = []
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            Pp = _t(P3[:, lo:hi].reshape(R * (hi - lo), J))
            KT.spectrum_chunks(_t(D[:, lo:hi]), k0 + lo, lag, hi - lo, 0, full[5], full[6],
                               full[7], rg, full[9], full[10], full[11], full[12], full[13],
                               Pp)
            pieces.append(Pp.reshape(R, hi - lo, J))
        assert torch.equal(torch.cat(pieces, dim=1).reshape(R * F, J), full[14]), (w, cuts)
        assert torch.equal(rg, full[8]), (w, cuts)


def test_autocorr_frames(calls):
    """The 2 ms window (64 samples, all lags) of the stereo block and of the stateless
    spectrum."""
    for tag in ("stereo", "stateless"):
        (args,) = calls[(tag, "autocorr_frames")]
        assert args[5].size == 64
        an, at = _both("autocorr_frames", args)
        _check_written(an, at, [6], TOL64)


def test_group_add(calls):
    """The 'direct' method's bin powers into compression groups (all six windows; the
    2 ms window's 701 bins fall into 108 groups)."""
    recorded = calls[("direct", "group_add")]
    assert len(recorded) == 6
    for args in recorded:
        an, at = _both("group_add", args)
        _check_written(an, at, [3], TOL64)
    assert np.unique(recorded[-1][2]).size < recorded[-1][2].size


# --- row-wise products ----------------------------------------------------------------


def test_rowwise_matmul(calls):
    """Every product of the stereo block: chunk DFTs, autocorrelation cosine sums,
    level per ERB, upper skirts, spatial smoothing.  A row's result does not depend on
    the other rows (row 0 alone == row 0 of the batch, bit for bit)."""
    recorded = calls[("stereo", "rowwise_matmul")]
    assert len(recorded) == 9
    for A, B, rng, _ in recorded:
        ref = KN.matmul_rows(A, B, rng)
        got = KT.matmul_rows(_t(A), _t(B), _t(rng))
        assert _rel(got, ref) <= TOL64
        out1 = torch.empty((1, B.shape[1]), dtype=torch.float64, device=DEVICE)
        one = KT.rowwise_matmul(_t(A[:1]), _t(B), _t(rng), out1)
        assert torch.equal(one[0], got[0])
    # rng computed by the wrapper, non-contiguous A
    A, B, rng, _ = recorded[-1]
    At = _t(A.T).T
    assert not At.is_contiguous()
    assert _rel(KT.matmul_rows(At, _t(B)), KN.matmul_rows(A, B)) <= TOL64


def test_band_ranges(calls):
    """The band of every recorded coefficient matrix, and a matrix with an all-zero row,
    interior zeros and a single nonzero: equal to numba's."""
    for _, B, rng, _ in calls[("stereo", "rowwise_matmul")]:
        assert np.array_equal(host(KT.band_ranges(_t(B))), rng)
    M = np.zeros((70, 9))
    M[1, 3] = 1.0
    M[2, [0, 4, 8]] = -2.0
    M[3:, 2:5] = 0.5
    got = host(KT.band_ranges(dev(M)))
    ref = KN.band_ranges(M)
    assert np.array_equal(got, ref)
    assert got[0].tolist() == [9, 9] and got[2].tolist() == [0, 9]


# --- the GPU compiler accepts the kernels ---------------------------------------------


def test_kernels_compile_for_gpu(tmp_path):
    """Compile every kernel to a cubin for sm_80 with Triton's CUDA backend, in a process
    without TRITON_INTERPRET, float scalars as fp64 (and their parameters are annotated
    so).  The lower skirt's PTX has exactly its explicit FMAs, all ``.rn``, and no
    flush-to-zero or approximate instructions.  The kernels that read back their own global
    stores (chunk ring, group sums) must have no asynchronous or non-coherent loads in their
    PTX."""
    pytest.importorskip("triton.backends.nvidia")
    script = textwrap.dedent("""
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        import types
        from rtamt.engine import rowwise_triton
        from rtamt.loudness import (agc_triton, binaural_triton, excitation_triton,
                                    specific_loudness_triton, spectrum_triton)
        KT = types.SimpleNamespace(**{k: v for m in (rowwise_triton, spectrum_triton,
                                      excitation_triton, specific_loudness_triton,
                                      agc_triton, binaural_triton)
                                      for k, v in vars(m).items() if not k.startswith("__")})

        def build(fn, sig, cx, warps=2, fusion=True):
            sig = {k: ("constexpr" if k in cx else v) for k, v in sig.items()}
            src = ASTSource(fn=fn, signature=sig, constexprs=cx)
            k = triton.compile(src, target=GPUTarget("cuda", 80, 32),
                               options={"enable_fp_fusion": fusion, "num_warps": warps})
            assert k.asm["cubin"]
            return k.asm["ptx"]

        d, f, i, l = "*fp64", "fp64", "i32", "*i64"
        skirt = build(KT._skirt_kernel, dict(P_ptr=d, lvl_ptr=d, c_slope=f, a_ptr="*fp32",
                      b_ptr="*fp32", i0_ptr=l, seg_ptr=l, cnt_ptr=l, E_ptr=d, J=i, nf=i,
                      FLUSH=0, BLOCK=0), {"FLUSH": 32, "BLOCK": 256}, 4, fusion=False)
        # exactly the explicit tl.fma (9 float32, 15 float64 per element; 2 elements per
        # thread), correctly rounded, no flush to zero, no approximate exp2/log2
        assert skirt.count("fma.rn.f32") == 18 and skirt.count("fma.rn.f64") == 15
        assert not any(w in skirt for w in ("ftz", "approx", "ex2", "lg2"))
        build(KT._sl_kernel, dict(E_ptr=d, G_ptr=d, A_ptr=d, al_ptr=d, Aal_ptr=d, thr_ptr=d,
              C=f, out_ptr=d, N=i, K=i, BLOCK=0), {"BLOCK": 256}, 4)
        build(KT._agc_kernel, dict(x_ptr=d, y_ptr=d, aa=f, ar=f, out_ptr=d, N=i, K=i,
              BLOCK=0), {"BLOCK": 64})
        build(KT._agc_rows_kernel, dict(x_ptr=d, y_ptr=d, aa=f, ar=f, out_ptr=d, R=i, F=i,
              K=i, BLOCK=0), {"BLOCK": 64})
        for diotic in (False, True):
            build(KT._binaural_kernel, dict(st_ptr=d, S_ptr=d, E_ptr=d, lt_ptr=d, aa=f, ar=f,
                  p=f, spec_ptr=d, exc_ptr=d, ste_ptr=d, lte_ptr=d, F=i, R=i, K=i, DIOTIC=0,
                  KP=0), {"DIOTIC": diotic, "KP": 256}, 4)
        ring = build(KT._chunk_ring_kernel, dict(D_ptr=d, k0=i, lag=i, n_prime=i, F=i,
                     rc_ptr=d, rs_ptr=d, wn_ptr=d, ring_ptr=d, T_ptr=d, R=i, C=i, nF=i,
                     BLOCK=0), {"BLOCK": 64})
        build(KT._chunk_power_kernel, dict(T_ptr=d, k0=i, lag=i, F=i, rc_ptr=d, rs_ptr=d,
              offs_ptr=l, cm_ptr=d, cp_ptr=d, gain_ptr=d, pw_ptr=d, RF=i, Bn=i, C=i, nF=i,
              BLOCK=0), {"BLOCK": 64})
        build(KT._autocorr_kernel, dict(z_ptr=d, L=i, e0=i, F=i, H=i, start=i, win_ptr=d,
              out_ptr=d, RFn=i, n=i, BLOCK=0), {"BLOCK": 64})
        groups = [build(KT._group_add_kernel, dict(pb_ptr=d, gain_ptr=d, grp_ptr=l, P_ptr=d,
                  N=i, Bn=i, J=i, WITH_GAIN=0, BLOCK=0), {"WITH_GAIN": g, "BLOCK": 64})
                  for g in (False, True)]
        build(KT._band_ranges_kernel, dict(B_ptr=d, rng_ptr=l, K=i, J=i, BLOCK=0),
              {"BLOCK": 64})
        build(KT._rowwise_kernel, dict(A_ptr=d, B_ptr=d, rng_ptr=l, out_ptr=d, M=i, K=i,
              J=i, BM=0, BN=0), {"BM": 16, "BN": 64}, 4)
        for ptx in [ring] + groups:
            assert "cp.async" not in ptx and "ld.global.nc" not in ptx
        # float scalars reach a real launch as doubles (annotated tl.float64)
        for kern, names in ((KT._skirt_kernel, {"c_slope"}), (KT._sl_kernel, {"C"}),
                            (KT._agc_kernel, {"aa", "ar"}), (KT._agc_rows_kernel, {"aa", "ar"}),
                            (KT._binaural_kernel, {"aa", "ar", "p"})):
            typed = {p.name: p.annotation_type for p in kern.params if p.name in names}
            assert typed == dict.fromkeys(names, "fp64"), typed
        print("compiled")
    """)
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path),
               TRITON_DEFAULT_FP_FUSION="1")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-3000:]
