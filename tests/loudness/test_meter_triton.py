import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

"""The R128 meter on the Triton backend (issue 40): the Triton twins of the K-weighting
(``kweighting_triton.py``) and the gating blocks (``gating_triton.py``) against their numba
kernels (float64 output within 1e-12 of the output's scale: the twins may contract other
products into FMAs), bit-identical under any partition on the Triton path; and the whole
meter with ``to(backend='triton')`` against the numba meter, continuing the numba
meter's snapshot (M, S, I, LRA, TP within 1e-12), its state loading back into a numba
meter.  Sizes are small (8 kHz, a started state): the interpreter runs every kernel
operation as a numpy call."""

import math  # noqa: E402

import numpy as np  # noqa: E402

from rtamt.loudness.bs1770 import LoudnessMeter  # noqa: E402
from rtamt.loudness.gating import RING, GatingBlocks  # noqa: E402
from rtamt.loudness.kweighting import KWeighting  # noqa: E402

from _triton import DEVICE, compile_sm80, dev, host  # noqa: E402

TOL = 1e-12
FS = 8000.0


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal NaN positions, and the rest within TOL of the larger magnitude."""
    if a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    ok = ~np.isnan(a)
    scale = max(float(np.abs(a[ok]).max(initial=0.0)), 1e-300)
    return bool(np.all(np.abs(a[ok] - b[ok]) <= TOL * scale))


def _run(stage, st, x, parts, on_triton):
    """Process ``x`` (B, T, C) in blocks of ``parts`` through ``stage.process_tm`` with
    state ``st``; the outputs concatenated along time (rows for the gating stage)."""
    outs, pos = [], 0
    for n in parts:
        seg = np.ascontiguousarray(x[:, pos:pos + n])
        pos += n
        y = stage.process_tm(stage.coeffs, st, dev(seg) if on_triton else seg)
        outs.append(host(y) if on_triton else y.copy())
    return outs


def _kw_case(dtype):
    rng = np.random.default_rng(1)
    st = KWeighting.init_state(KWeighting(fs=48000.0).coeffs, 2, 3, np.float64)
    st["zi"][:] = 0.01 * rng.standard_normal(st["zi"].shape)
    return st, (0.3 * rng.standard_normal((2, 300, 3))).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_k_weighting_twin_equals_numba_and_any_partition(dtype):
    st, x = _kw_case(dtype)
    a = KWeighting(fs=48000.0)
    b = KWeighting(fs=48000.0).to(DEVICE, backend="triton")
    sa = {k: v.copy() for k, v in st.items()}
    ya = _run(a, sa, x, [300], False)[0]
    sb = {k: dev(v.copy()) for k, v in st.items()}
    yb = _run(b, sb, x, [300], True)[0]
    assert _close(ya, yb) and _close(sa["zi"], host(sb["zi"]))
    sp = {k: dev(v.copy()) for k, v in st.items()}
    yp = np.concatenate(_run(b, sp, x, [1, 57, 1, 241], True), axis=1)
    assert np.array_equal(yp, yb) and np.array_equal(host(sp["zi"]), host(sb["zi"]))


def _gating_case():
    """A stream state 295 fine blocks in (the 3 s short-term window fills within the
    block), with a partial fine block, and K-weighted noise (2 streams, 3 channels)."""
    rng = np.random.default_rng(2)
    g = GatingBlocks(fs=FS, weights=(1.0, 1.41, 0.5))
    st = GatingBlocks.init_state(g.coeffs, 2, 3, np.float64)
    lens = g.coeffs.fine_lens
    st["n_fine"][:] = [295, 37]
    st["fill"][:] = [13, 0]
    st["acc"][:] = rng.uniform(0, 0.5, st["acc"].shape) * st["fill"][:, None]
    st["ring_e"][:] = rng.uniform(1e-3, 1e-1, (2, RING)) * lens[0]
    st["ring_n"][:] = lens[np.arange(RING) % lens.size]
    st["peak"][:] = [[0.02, 0.03], [-1.0, -1.0]]
    x = 0.2 * rng.standard_normal((2, 1000, 3))
    return g, st, x


def test_gating_twin_equals_numba_and_any_partition():
    g, st, x = _gating_case()
    b = GatingBlocks(fs=FS, weights=(1.0, 1.41, 0.5)).to(DEVICE, backend="triton")
    sa = {k: v.copy() for k, v in st.items()}
    ya = _run(g, sa, x, [1000], False)[0]
    sb = {k: dev(v.copy()) for k, v in st.items()}
    yb = _run(b, sb, x, [1000], True)[0]
    assert int(sa["count"][0]) >= 1 and not np.isnan(ya[0, 0, 2])     # a short-term step
    assert _close(ya, yb)
    for k in st:
        assert _close(sa[k].astype(np.float64), host(sb[k]).astype(np.float64)), k
        if sa[k].dtype == np.int64:
            assert np.array_equal(sa[k], host(sb[k])), k
    sp = {k: dev(v.copy()) for k, v in st.items()}
    rows = _run(b, sp, x, [1, 170, 1, 828], True)
    for s in range(2):            # each stream's steps (rows with k >= 0), in order
        got = np.concatenate([r[s][r[s][:, 0] >= 0] for r in rows])
        assert np.array_equal(got, yb[s][yb[s][:, 0] >= 0], equal_nan=True)
    for k in st:
        assert np.array_equal(host(sp[k]), host(sb[k])), k


def _same(x: float | None, y: float | None) -> bool:
    if x is None or y is None:
        return x is y
    if math.isinf(x) or math.isinf(y):
        return x == y
    return abs(x - y) <= TOL * max(abs(x), 1.0)


def test_meter_on_triton_continues_the_numba_meter():
    rng = np.random.default_rng(3)
    n0, n1 = int(2.9 * FS), int(0.4 * FS)
    t = np.arange(n0 + n1) / FS
    x = 0.3 * np.sin(2 * np.pi * np.array([[440.0], [997.0]]) * t) \
        * (1 + 0.8 * np.sin(2 * np.pi * 0.7 * t)) + 0.02 * rng.standard_normal((2, n0 + n1))
    a = LoudnessMeter(fs=FS, channels=2, truepeak="bs1770")
    a(x[:, :n0])
    b = LoudnessMeter(fs=FS, channels=2, truepeak="bs1770").to(DEVICE, backend="triton")
    assert b.backend == "triton"
    b.load_state_dict(a.state_dict())
    pos = n0
    for n in (1, 1000, n1 - 1001):
        ra, rb = a(x[:, pos:pos + n]), b(x[:, pos:pos + n])
        pos += n
        for f in ("momentary", "short_term", "integrated", "loudness_range", "true_peak",
                  "sample_peak", "max_momentary", "max_short_term", "relative_gate"):
            assert _same(getattr(ra, f), getattr(rb, f)), (f, getattr(ra, f), getattr(rb, f))
        assert np.array_equal(ra.step_time, rb.step_time)
    assert a.short_term is not None and a.loudness_range is not None
    back = LoudnessMeter(fs=FS, channels=2, truepeak="bs1770")
    back.load_state_dict(b.state_dict())            # the Triton meter's state, on numba
    assert _same(back.integrated, a.integrated)


def test_kernels_compile_for_gpu():
    """Both twins compile to a cubin for sm_80 with Triton's CUDA backend (a process
    without TRITON_INTERPRET), for float32 and float64 input of the K-weighting."""
    pytest.importorskip("triton.backends.nvidia")
    compile_sm80("""
        from rtamt.loudness import gating_triton as g, kweighting_triton as k
        d, i, q = "*fp64", "i32", "*i64"
        for x in ("*fp32", "*fp64"):
            build(k._k_weight_kernel, dict(sos_ptr=d, zi_ptr=d, x_ptr=x, y_ptr=d, B=i, T=i,
                                          C=i, BLOCK=0), {"BLOCK": 64})
        build(g._block_powers_kernel, dict(w_ptr=d, lens_ptr=q, acc_ptr=d, fill_ptr=q,
              nf_ptr=q, ring_e_ptr=d, ring_n_ptr=q, peak_ptr=d, y_ptr=d, out_ptr=d,
              count_ptr=q, B=i, T=i, C=i, P=i, K=i, BLOCK=0), {"BLOCK": 16})
    """)


def test_scheduled_meter_on_triton_equals_the_offline_triton_meter():
    """``Scheduler(backend='triton')`` moves an ``'r128'`` stream's meter to the Triton
    twins; its published M, I, TP equal those of an offline meter on the same backend."""
    from rtamt.scheduler import Scheduler

    x = 0.1 * np.random.default_rng(4).standard_normal((2, 3200))
    got = []
    with Scheduler(threads=1, realtime=None, backend="triton", device=DEVICE) as s:
        h = s.open("r128", FS, block=800, channels=2, model_kwargs={"truepeak": "bs1770"},
                   measure=False, budget_ms=5000, admission="best-effort",
                   sample_dtype="float64", history=0)
        h.subscribe(lambda r: got.append(dict(r.outputs)))
        h.push(x.T.copy(), wait=True)
        h.close("drain", timeout=600)
        assert h.proc.backend == "triton"
    m = LoudnessMeter(fs=FS, channels=2, truepeak="bs1770").to(DEVICE, backend="triton")
    assert got == [m.process_all(x[:, i:i + 800]) for i in range(0, 3200, 800)]
    assert got[-1]["momentary"] is not None and got[-1]["short_term"] is None
