import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")

"""The Triton twins (gammatone_triton, engine.sos_triton, modfb_triton) against the numba
kernels beside their stages: gammatone4, sos_shared, modfb_efilt and cplx_biquad_bank on the
coefficients their stages design, random input, a batch of 3 streams, float64 and float32,
state carried across a random block partition; and each Triton kernel against itself
(one call vs a random partition: bit-identical).  Sizes are small: the Triton interpreter
runs every operation of a sample loop as a numpy call.  The last test compiles every
kernel for an sm_80 GPU (no device needed) so that the interpreted code is also code the
GPU compiler accepts."""

import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy import signal  # noqa: E402

from rtamt.engine import sos, sos_triton  # noqa: E402
from rtamt.filterbank import gammatone, gammatone_triton  # noqa: E402
from rtamt.ihc import envelope  # noqa: E402
from rtamt.modulation import modfb, modfb_triton  # noqa: E402

from _triton import DEVICE, dev, host  # noqa: E402

KN = SimpleNamespace(gammatone4=gammatone.gammatone4, sos_shared=sos.sos_shared,
                     modfb_efilt=modfb.modfb_efilt, cplx_biquad_bank=modfb.cplx_biquad_bank)
KT = SimpleNamespace(gammatone4=gammatone_triton.gammatone4, sos_shared=sos_triton.sos_shared,
                     modfb_efilt=modfb_triton.modfb_efilt,
                     cplx_biquad_bank=modfb_triton.cplx_biquad_bank)

FS = 48000.0
B = 3
T = 150
DTYPES = [np.float64, np.float32]
TOL = {np.float64: 1e-12, np.float32: 1e-5}
"""Max |triton - numba| / max |numba|, per output (and per state array)."""


def _rel(got, ref):
    got = host(got) if isinstance(got, torch.Tensor) else got
    scale = float(np.max(np.abs(ref)))
    assert scale > 0, "reference is all zero: the comparison would be vacuous"
    return float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)))) / scale


def _cuts(rng, n=3):
    """A random partition of ``T`` into ``n`` blocks (a block may be empty)."""
    inner = np.sort(rng.integers(0, T + 1, n - 1))
    return [0, *inner.tolist(), T]


def _run(kernel, x, state, cuts, call, y0, **kw):
    """Run ``call(kernel, state, xb, yb, **kw)`` block by block over ``x`` (B, T, ...)
    (time on axis 1); ``y0`` is the full output's initial content (B, T, Ftot).  numpy
    arrays go to the numba kernel, torch tensors (converted here) to the Triton one."""
    torch_path = isinstance(state, dict) and isinstance(next(iter(state.values())),
                                                          torch.Tensor)
    outs = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        xb = np.ascontiguousarray(x[:, a:b])
        yb = np.ascontiguousarray(y0[:, a:b])
        if torch_path:
            xb, yb = dev(xb), dev(yb)
        call(kernel, state, xb, yb, **kw)
        outs.append(host(yb) if torch_path else yb)
    return np.concatenate(outs, axis=1)


def _states(arrays: dict):
    """The same initial states as numpy arrays (numba) and torch tensors (Triton)."""
    return ({k: v.copy() for k, v in arrays.items()},
            {k: dev(v.copy()) for k, v in arrays.items()})


def _compare(call, x, st0, y0, rng, dtype, **kw):
    """numba vs Triton on one random partition (state and output within TOL) and Triton
    on one call vs that partition (torch.equal).  Returns the errors (output, state) and
    the outputs and final states (numba, Triton)."""
    cuts = _cuts(rng)
    sn, st = _states(st0)
    yn = _run(KN, x, sn, cuts, call, y0, **kw)
    yt = _run(KT, x, st, cuts, call, y0, **kw)
    err_y = _rel(yt, yn)
    err_s = max(_rel(st[k], sn[k]) for k in sn)
    assert err_y <= TOL[dtype], (err_y, cuts)
    assert err_s <= TOL[dtype], (err_s, cuts)
    _, s1 = _states(st0)
    y1 = _run(KT, x, s1, [0, T], call, y0, **kw)
    assert torch.equal(dev(y1), dev(yt)), cuts
    for k in s1:
        assert torch.equal(s1[k], st[k]), (k, cuts)
    return (err_y, err_s), (yn, yt, sn, st)


# --- gammatone4 -----------------------------------------------------------------------


def _gt_call(K, st, x, y, lanes):
    lanes = dev(lanes) if K is KT else lanes
    K.gammatone4(lanes, st["sr"], st["si"], x, y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gammatone4(dtype):
    rng = np.random.default_rng(1)
    fc = tuple(np.geomspace(80.0, 20000.0, 25))  # 75 lanes: two programs, a masked tail
    co = gammatone.design(gammatone.GammatoneParams(FS, fc=fc))
    C = len(fc)
    x = rng.standard_normal((B, T)).astype(dtype)
    st0 = {k: (1e-3 * rng.standard_normal((B, 4, C))).astype(dtype) for k in ("sr", "si")}
    y0 = np.zeros((B, T, C), dtype)
    _compare(_gt_call, x, st0, y0, rng, dtype, lanes=co.lanes)


# --- sos_shared -----------------------------------------------------------------------


def _sos_cases():
    ihc = envelope.design(envelope.IHCEnvelopeParams(FS, preset="breebaart2001")).sos
    band = signal.butter(2, [300.0, 3000.0], btype="band", fs=FS, output="sos")
    mixed = np.vstack([signal.butter(1, 800.0, fs=FS, output="sos"),
                       signal.butter(2, 2000.0, fs=FS, output="sos")])
    return {"ihc_first_order": ihc, "butter_band": band, "mixed_orders": mixed}


SOS = _sos_cases()


def _sos_call(K, st, x, y, sos, rectify, yoff):
    sos = dev(sos) if K is KT else sos
    K.sos_shared(sos, rectify, st["zi"], x, y, yoff)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case,rectify", [("ihc_first_order", True), ("butter_band", False),
                                          ("butter_band", True), ("mixed_orders", False)])
def test_sos_shared(case, rectify, dtype):
    """Every section's second memory starts non-zero: a first-order section adds it every
    sample and leaves it unchanged (numba's shorter loop), a second-order one updates it.
    The output has 3C columns, the filters write columns C..2C-1 (yoff), the others keep
    their sentinel."""
    rng = np.random.default_rng(2)
    sos = np.ascontiguousarray(SOS[case])
    S, C = sos.shape[0], 25
    x = rng.standard_normal((B, T, C)).astype(dtype)
    st0 = {"zi": (1e-3 * rng.standard_normal((B, S, 2, C))).astype(dtype)}
    y0 = np.full((B, T, 3 * C), 7.0, dtype)
    _compare(_sos_call, x, st0, y0, rng, dtype, sos=sos, rectify=rectify, yoff=C)
    # first-order sections: the Triton kernel leaves the second memory as it was
    _, st = _states(st0)
    _sos_call(KT, st, dev(x), dev(y0.copy()), sos, rectify, C)
    first = (sos[:, 2] == 0) & (sos[:, 5] == 0)
    assert torch.equal(st["zi"][:, first, 1], dev(st0["zi"][:, first, 1]))
    if not first.all():
        assert not torch.equal(st["zi"][:, ~first, 1],
                               dev(st0["zi"][:, ~first, 1]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_sos_shared_in_place_and_no_sections(dtype):
    """y is x (Ftot == C, yoff == 0): same result as into a separate y; with no sections
    the kernel writes the rectified input."""
    rng = np.random.default_rng(3)
    sos = np.ascontiguousarray(SOS["mixed_orders"])
    C = 7
    x = rng.standard_normal((B, 40, C)).astype(dtype)
    zn = np.zeros((B, 2, 2, C), dtype)
    yn = np.empty_like(x)
    KN.sos_shared(sos, True, zn, x, yn, 0)
    xt = dev(x.copy())
    zt = torch.zeros((B, 2, 2, C), dtype=xt.dtype, device=DEVICE)
    KT.sos_shared(dev(sos), True, zt, xt, xt, 0)
    assert _rel(xt, yn) <= TOL[dtype]
    assert _rel(zt, zn) <= TOL[dtype]
    y = torch.empty_like(xt)
    z0 = torch.zeros((B, 0, 2, C), dtype=xt.dtype, device=DEVICE)
    KT.sos_shared(torch.zeros((0, 6), dtype=torch.float64, device=DEVICE), True, z0, dev(x), y, 0)
    assert torch.equal(y, dev(np.maximum(x, 0)))


# --- modulation filterbank ------------------------------------------------------------


def _mfb(preset, filter_type):
    # ragged banks: the channels reach different upper modulation frequencies
    return modfb.design(modfb.ModFilterbankParams(FS, fc=(150.0, 400.0, 1000.0, 4000.0),
                                                  preset=preset, filter_type=filter_type))


def _efilt_call(K, st, x, y, co, coef, channel):
    if K is KT:
        KT.modfb_efilt(dev(co.lp_sos), st["lp"], dev(co.bp_runs),
                       co.bp_nreal, dev(coef), st["bp"], x, y,
                       channel=None if channel is None else dev(channel))
    else:
        KN.modfb_efilt(co.lp_sos, st["lp"], co.bp_runs, co.bp_nreal, coef, st["bp"], x, y)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("preset,with_channel", [("amt0910", True), ("jepsen2008", False)])
def test_modfb_efilt(preset, with_channel, dtype):
    """with_channel=False: the filter -> channel map is derived from ``runs``."""
    rng = np.random.default_rng(4)
    co = _mfb(preset, "efilt")
    C, Fb = co.fc.size, co.bp_channel.size
    assert 0 < co.bp_nreal < Fb and len(co.bp_runs) > 1
    if preset == "jepsen2008":
        assert np.any(co.bp_scale != 1.0)
    coef = co.bp_coef if dtype == np.float64 else co.bp_coef32
    x = (1.0 + rng.standard_normal((B, T, C))).astype(dtype)
    st0 = {"lp": (1e-3 * rng.standard_normal((B, co.lp_sos.shape[0], 2, C))).astype(dtype),
           "bp": (1e-3 * rng.standard_normal((B, 2, Fb))).astype(dtype)}
    y0 = np.zeros((B, T, C + Fb), dtype)
    ch = co.bp_channel if with_channel else None
    _, (yn, yt, sn, st) = _compare(_efilt_call, x, st0, y0, rng, dtype, co=co, coef=coef,
                                   channel=ch)
    # the band-pass bank is built without FMA contraction on both sides and spells out the
    # same fused multiply-adds and a correctly rounded square root: bit-identical
    assert np.array_equal(yt[..., C:], yn[..., C:])
    assert np.array_equal(host(st["bp"]), sn["bp"])


def _cbq_call(K, st, x, y, co):
    args = (co.bp_channel, co.bp_nreal, co.bp_b, co.bp_a, co.bp_scale)
    if K is KT:
        args = tuple(dev(a) if isinstance(a, np.ndarray) else a for a in args)
    K.cplx_biquad_bank(*args, st["bp"], x, y, co.fc.size)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cplx_biquad_bank(dtype):
    """The Butterworth-type bank (filter_type='butterworth'; no model preset uses it) into
    columns C.. of the packed output; columns 0..C-1 keep their sentinel."""
    rng = np.random.default_rng(5)
    co = _mfb("jepsen2008", "butterworth")
    C, Fb = co.fc.size, co.bp_channel.size
    assert 0 < co.bp_nreal < Fb and co.bp_b is not None
    x = (1.0 + rng.standard_normal((B, T, C))).astype(dtype)
    st0 = {"bp": (1e-3 * rng.standard_normal((B, Fb, 2, 2))).astype(dtype)}
    y0 = np.full((B, T, C + Fb), 7.0, dtype)
    _compare(_cbq_call, x, st0, y0, rng, dtype, co=co)


# --- the GPU compiler accepts the kernels ---------------------------------------------


def test_kernels_compile_for_gpu(tmp_path):
    """Compile every kernel (float32 and float64, every constexpr combination) to a cubin
    for sm_80 with Triton's CUDA backend, in a process without TRITON_INTERPRET."""
    pytest.importorskip("triton.backends.nvidia")
    script = textwrap.dedent("""
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from rtamt.engine import sos_triton
        from rtamt.filterbank import gammatone_triton
        from rtamt.modulation import modfb_triton

        def build(fn, sig, cx, fusion):
            sig = {k: ("constexpr" if k in cx else v) for k, v in sig.items()}
            src = ASTSource(fn=fn, signature=sig, constexprs=cx)
            k = triton.compile(src, target=GPUTarget("cuda", 80, 32),
                               options={"enable_fp_fusion": fusion, "num_warps": 2})
            assert k.asm["cubin"]

        for d in ("fp32", "fp64"):
            p = "*" + d
            i = "i32"
            build(gammatone_triton._gammatone4_kernel,
                  dict(lanes_ptr="*fp64", L=i, sr_ptr=p, si_ptr=p, x_ptr=p, y_ptr=p, N=i,
                       T=i, C=i, BLOCK=0), {"BLOCK": 64}, True)
            for rect in (False, True):
                for has in (False, True):
                    build(sos_triton._sos_kernel,
                          dict(sos_ptr="*fp64", S=i, zi_ptr=p, x_ptr=p, y_ptr=p, N=i, T=i,
                               C=i, F=i, yoff=i, RECTIFY=0, HAS_SOS=0, BLOCK=0),
                          {"RECTIFY": rect, "HAS_SOS": has, "BLOCK": 64}, True)
            build(modfb_triton._efilt_kernel,
                  dict(coef_ptr=p, Fb=i, nreal=i, ch_ptr="*i64", st_ptr=p, x_ptr=p, y_ptr=p,
                       N=i, T=i, C=i, F=i, yoff=i, F32=0, BLOCK=0),
                  {"F32": d == "fp32", "BLOCK": 64}, False)
            build(modfb_triton._cbq_kernel,
                  dict(ch_ptr="*i64", nreal=i, b_ptr="*fp64", a_ptr="*fp64", sc_ptr="*fp64",
                       st_ptr=p, x_ptr=p, y_ptr=p, N=i, Fb=i, T=i, C=i, F=i, yoff=i,
                       BLOCK=0), {"BLOCK": 64}, True)
        print("compiled")
    """)
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-3000:]
