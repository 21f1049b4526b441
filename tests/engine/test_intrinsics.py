"""The numba intrinsics and small kernels behind the compiled stages
(:mod:`rtamt.engine.intrinsics`, :func:`rtamt.engine.kernels.all_finite`)."""
import numpy as np
import pytest
from numba import njit

from rtamt.engine.intrinsics import copy8, fma
from rtamt.engine.kernels import all_finite


@njit(cache=False)
def _fma(a, b, c):
    return fma(a, b, c)


@njit(cache=False)
def _mul_add(a, b, c):
    return a * b + c


@pytest.mark.parametrize("dtype, k", [(np.float64, 30), (np.float32, 13)])
def test_fma_rounds_once(dtype, k):
    """(1 + 2^-k)(1 - 2^-k) - 1 = -2^-2k exactly; a separately rounded product is 1, so
    the unfused expression gives 0 and only a fused multiply-add gives -2^-2k."""
    a = dtype(1 + 2.0 ** -k)
    b = dtype(1 - 2.0 ** -k)
    c = dtype(-1)
    r = _fma(a, b, c)
    assert r == dtype(-(2.0 ** (-2 * k)))
    assert np.multiply(a, b) + c == 0  # what an unfused evaluation gives


def test_fma_rejects_mixed_types():
    with pytest.raises(Exception, match="fma"):
        _fma(1.0, np.float32(2.0), 3.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_all_finite_finds_any_non_finite_value(dtype, bad):
    x = np.random.default_rng(0).standard_normal((3, 37)).astype(dtype)
    assert all_finite(x)
    assert all_finite(x[:, ::3])  # non-contiguous
    big = x.copy()
    big[0, 0] = np.finfo(dtype).max
    big[1, 1] = -np.finfo(dtype).max
    big[2, 2] = np.finfo(dtype).tiny / 4  # subnormal
    assert all_finite(big)
    for pos in [(0, 0), (1, 17), (2, 36)]:
        y = x.copy()
        y[pos] = bad
        assert not all_finite(y), pos
        assert not all_finite(y[pos[0]]), pos


@njit(cache=False)
def _copy(src, soff, dst, doff):
    copy8(src, soff, dst, doff)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_copy8_copies_eight_values_and_nothing_else(dtype):
    src = np.arange(20, dtype=dtype)
    dst = np.full(16, -1, dtype)
    _copy(src, 5, dst, 3)
    want = np.full(16, -1, dtype)
    want[3:11] = src[5:13]
    assert np.array_equal(dst, want)


def test_copy8_rejects_strided_arrays():
    with pytest.raises(Exception, match="copy8"):
        _copy(np.zeros(40)[::2], 0, np.zeros(16), 0)


@pytest.mark.parametrize("C", [5, 11, 30])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_efilt_bank_gathers_every_run_shape(C, dtype):
    """The bank's input gather (8-wide vector copies aligned to each run's end, last run
    first; element loops below 8 channels) against a plain complex recursion, on a bank
    whose filters read channels in runs of every length 1..C in scrambled order."""
    from rtamt.modulation.modfb import channel_runs, cplx_onepole_bank

    rng = np.random.default_rng(C)
    ch = np.concatenate([rng.integers(0, C - n + 1) + np.arange(n)
                         for n in rng.permutation(np.arange(1, C + 1))])
    F = ch.size
    nreal = F // 3
    p = 0.9 * np.exp(1j * rng.uniform(0.05, 3.0, F))
    coef = np.stack([p.real, p.imag, rng.uniform(0.1, 1.0, F), rng.uniform(0.5, 2.0, F)])
    coef = coef.astype(dtype)  # the stream's dtype, as the stage passes it
    p = coef[0].astype(np.float64) + 1j * coef[1]
    T = 23
    x = rng.standard_normal((2, T, C)).astype(dtype)
    st = np.zeros((2, 2, F), dtype)
    y = np.full((2, T, F + 3), np.nan, dtype)
    cplx_onepole_bank(channel_runs(ch), nreal, coef, st, x, y, 3)
    coef = coef.astype(np.float64)
    w = np.zeros((2, F), complex)
    want = np.empty((2, T, F))
    for t in range(T):
        w = p * w + coef[2] * x[:, t, ch].astype(np.float64)
        want[:, t] = coef[3] * np.where(np.arange(F) < nreal, w.real, np.abs(w))
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(y[..., 3:], want, rtol=tol, atol=tol * np.abs(want).max())
    assert np.isnan(y[..., :3]).all()


