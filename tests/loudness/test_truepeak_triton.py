import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

"""The Triton twins of the true-peak kernels (``rtamt/loudness/truepeak_triton.py``) against
their numba kernels: both methods (``'sinc'`` at 48 and 192 kHz, ``'bs1770'``), float32 and
float64 input, two streams of three channels with a history and running peaks already set;
outputs and states within 1e-12 of numba (the twins sum a value's taps as a tree); the
Triton path bit-identical under a random partition of the block (1-sample blocks
included), through the stage bound with ``to(backend='triton')``.  Sizes are small: the
interpreter runs every kernel operation as a numpy call.  The last test compiles both
kernels for an sm_80 GPU (no device needed)."""


import numpy as np  # noqa: E402

from rtamt.loudness import truepeak, truepeak_triton  # noqa: E402
from rtamt.loudness.truepeak import TruePeak  # noqa: E402

from _triton import DEVICE, compile_sm80, dev, host  # noqa: E402

TOL64 = 1e-12


def _case(fs, method, dtype, T=64, seed=0):
    """Coefficients, a started state (random history, running peaks 0.3 / 0.2) and a block
    ``(2, T, 3)`` of noise with a 0.41 fs tone burst above the running peak."""
    rng = np.random.default_rng(seed)
    co = TruePeak(fs=fs, method=method).coeffs
    st = TruePeak.init_state(co, 2, 3, np.float64)
    st["hist"][:] = 0.2 * rng.standard_normal(st["hist"].shape)
    st["true_peak"][:] = 0.3
    st["sample_peak"][:] = 0.2
    x = 0.25 * rng.standard_normal((2, T, 3))
    x[0, 10:40, 1] = 0.9 * np.sin(2 * np.pi * 0.41 * np.arange(30) + 0.3)
    return co, st, x.astype(dtype)


def _numba(co, st, x):
    st = {k: v.copy() for k, v in st.items()}
    y = np.empty((x.shape[0], 2, x.shape[2]))
    kern = truepeak.true_peak_sinc if co.method == "sinc" else truepeak.true_peak_fir
    kern(co.phases, st["hist"], st["true_peak"], st["sample_peak"], x, y,
         np.empty(co.history + 2 * x.shape[1] + 1))
    return st, y


def _triton(co, st, x, lengths=None):
    st = {k: dev(v.copy()) for k, v in st.items()}
    h = dev(co.phases)
    kern = truepeak_triton.true_peak_sinc if co.method == "sinc" else truepeak_triton.true_peak_fir
    y = torch.empty((x.shape[0], 2, x.shape[2]), dtype=torch.float64, device=DEVICE)
    pos = 0
    for n in lengths or [x.shape[1]]:
        kern(h, st["hist"], st["true_peak"], st["sample_peak"],
             dev(np.ascontiguousarray(x[:, pos:pos + n])), y)
        pos += n
    return {k: host(v) for k, v in st.items()}, host(y)


@pytest.mark.parametrize("fs, method, dtype", [
    (48000.0, "sinc", np.float64), (192000.0, "sinc", np.float32),
    (48000.0, "bs1770", np.float64), (48000.0, "bs1770", np.float32)])
def test_twin_matches_numba(fs, method, dtype):
    co, st, x = _case(fs, method, dtype)
    want_st, want_y = _numba(co, st, x)
    got_st, got_y = _triton(co, st, x)
    np.testing.assert_array_equal(got_st["hist"], want_st["hist"])
    np.testing.assert_array_equal(got_st["sample_peak"], want_st["sample_peak"])
    np.testing.assert_allclose(got_st["true_peak"], want_st["true_peak"], rtol=TOL64, atol=0)
    np.testing.assert_allclose(got_y, want_y, rtol=TOL64, atol=0)
    assert (want_st["true_peak"] > 0.3).any()          # the block raised a running peak


@pytest.mark.parametrize("method", ["sinc", "bs1770"])
def test_twin_is_exact_under_partitions(method):
    """The Triton path gives the bits of one call for blocks of 1 to 9 samples."""
    co, st, x = _case(192000.0, method, np.float64, T=40, seed=3)
    rng = np.random.default_rng(4)
    lengths, pos = [], 0
    while pos < x.shape[1]:
        lengths.append(min(int(rng.integers(1, 10)) if rng.random() < 0.6 else 1,
                           x.shape[1] - pos))
        pos += lengths[-1]
    assert lengths.count(1) >= 3
    one_st, one_y = _triton(co, st, x)
    many_st, many_y = _triton(co, st, x, lengths)
    for k in one_st:
        np.testing.assert_array_equal(many_st[k], one_st[k], err_msg=k)
    np.testing.assert_array_equal(many_y, one_y)


def test_stage_on_the_triton_backend():
    """``TruePeak(...).to(backend='triton')`` runs the twin on torch blocks: its state
    equals the numba stage's within 1e-12."""
    rng = np.random.default_rng(5)
    x = 0.3 * rng.standard_normal((2, 50))
    a = TruePeak(fs=192000.0)
    b = TruePeak(fs=192000.0).to(DEVICE, backend="triton")
    a(x[:, :20])
    a(x[:, 20:])
    b(dev(np.ascontiguousarray(x[:, :20])))
    b(dev(np.ascontiguousarray(x[:, 20:])))
    for k, v in a.state.items():
        np.testing.assert_allclose(host(b.state[k]), v, rtol=TOL64, atol=0, err_msg=k)


def test_kernels_compile_for_gpu():
    """Both kernels compile to a cubin for sm_80 with Triton's CUDA backend (a process
    without TRITON_INTERPRET; the screening ratio is an fp64 scalar)."""
    pytest.importorskip("triton.backends.nvidia")
    compile_sm80("""
        from rtamt.loudness import truepeak_triton as t
        d, i = "*fp64", "i32"
        for x in ("*fp32", "*fp64"):
            ptx = build(t._true_peak_sinc_kernel, dict(h_ptr=d, hist_ptr=d, tp_ptr=d, sp_ptr=d,
                        x_ptr=x, out_ptr=d, B=i, T=i, C=i, L=i, K=i, screen="fp64", BLOCK=0,
                        KC=0), {"BLOCK": 64, "KC": 16})
            assert "approx" not in ptx
            build(t._true_peak_fir_kernel, dict(h_ptr=d, hist_ptr=d, tp_ptr=d, sp_ptr=d,
                  x_ptr=x, out_ptr=d, B=i, T=i, C=i, P=i, K=i, BLOCK=0, KC=0),
                  {"BLOCK": 64, "KC": 16})
    """)
