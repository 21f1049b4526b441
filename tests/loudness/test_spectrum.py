"""Multi-resolution spectrum (rtamt.loudness.spectrum): every evaluation method equals the
zero-padded FFT of Glasberg & Moore (2002) bin by bin, stateless and streaming."""
from __future__ import annotations

import numpy as np
import pytest

from rtamt.loudness.spectrum import SpectrumParams, _hann, design_spectrum, frame_powers, new_rings


def _fft_reference(c, z, ends):
    """The paper's procedure, literally: Hann segment, zero-padded rfft, chosen bins,
    scaled, summed into the compression groups."""
    out = []
    for r in range(z.shape[0]):
        for e in ends:
            pb = []
            for pl in c.plans:
                seg = z[r, e + pl.start:e + pl.start + pl.n]
                X = np.fft.rfft(_hann(pl.n) * seg, c.nfft)
                k = np.round(c.bin_hz[pl.bins] * c.nfft / c.fs).astype(int)
                pb.append(np.abs(X[k]) ** 2)
            out.append(np.bincount(c.group_of_bin, np.concatenate(pb) * c.gains,
                                   minlength=c.n_comp))
    return np.array(out)


def _signals(c, n_frames, seed=0):
    rng = np.random.default_rng(seed)
    n = c.nmax + n_frames * c.hop
    t = np.arange(n) / c.fs
    return np.stack([rng.standard_normal(n),
                     0.3 * np.sin(2 * np.pi * 1000 * t) + 1e-3 * rng.standard_normal(n)])


@pytest.mark.parametrize("fs", [32000, 44100, 48000])
@pytest.mark.parametrize("method", ["auto", "direct", "chunk", "autocorr"])
def test_each_method_equals_zero_padded_fft(fs, method):
    c = design_spectrum(SpectrumParams(fs=fs, method=method))
    z = _signals(c, 12)
    ends = c.nmax + c.hop * np.arange(1, 13)
    got = frame_powers(c, z, ends)
    ref = _fft_reference(c, z, ends)
    # autocorrelation: rounding floor ~1e-16 of the segment energy (documented)
    floor = 1e-13 * ref.sum(axis=1, keepdims=True)
    assert np.all(got >= 0)
    assert np.all(np.abs(got - ref) <= 1e-9 * ref + floor)


def test_auto_picks_the_cheap_methods_at_32_khz():
    c = design_spectrum(SpectrumParams(fs=32000))
    assert [p.method for p in c.plans] == ["chunk"] * 5 + ["autocorr"]
    c = design_spectrum(SpectrumParams(fs=44100))   # windows are not whole hops there
    assert "chunk" not in [p.method for p in c.plans]
    with pytest.raises(ValueError, match="method"):
        design_spectrum(SpectrumParams(method="fft"))


@pytest.mark.parametrize("fs", [32000, 48000])
def test_streaming_rings_equal_stateless_frames(fs):
    """Frames computed block by block with the chunk rings carried as state equal the
    stateless computation from the full history."""
    c = design_spectrum(SpectrumParams(fs=fs))
    n_fr = 40
    z = np.concatenate([np.zeros((2, c.nmax)), _signals(c, n_fr, seed=3)[:, :n_fr * c.hop]],
                       axis=1)
    ends_all = c.nmax + c.hop * np.arange(1, n_fr + 1)
    ref = frame_powers(c, z, ends_all).reshape(2, n_fr, -1)
    rings = new_rings(c, 2)          # all-zero history before the stream = zero rings
    got, k = [], 0
    for nf in (1, 3, 7, 1, 12, 16):
        ends = ends_all[k:k + nf]
        got.append(frame_powers(c, z, ends, rings, k).reshape(2, nf, -1))
        k += nf
    got = np.concatenate(got, axis=1)
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-14 * ref.max())


def test_rowwise_matmul_rows_do_not_depend_on_the_row_count():
    """kernels.rowwise_matmul (the spectrum's and the excitation's products): a row's bits
    are the same whether it is computed alone or with 1 .. 63 others (BLAS rounds a row
    differently for M = 1, a few and >= 16 rows), and equal a plain float64 product."""
    from rtamt.engine.rowwise import band_ranges, matmul_rows
    from rtamt.loudness.excitation import design_excitation

    c = design_spectrum(SpectrumParams(fs=48000))
    e = design_excitation(c.comp_hz)
    mats = [e.up_t, e.sym_t] + [p.arrays.get("tab", p.arrays.get("cg")) for p in c.plans]
    rng = np.random.default_rng(3)
    for B in mats:
        A = rng.standard_normal((64, B.shape[0]))
        A[5, ::3] = 0.0                          # skipped terms change nothing
        rb = band_ranges(B)
        full = matmul_rows(A, B, rb)
        for m in (1, 2, 5, 16, 17, 64):
            for s in (0, 64 - m):
                np.testing.assert_array_equal(matmul_rows(A[s:s + m], B, rb), full[s:s + m])
        np.testing.assert_array_equal(matmul_rows(A, B), full)    # ranges computed inside
        ref = np.einsum("ik,kj->ij", A, B)
        assert np.all(np.abs(full - ref) <= 1e-12 * (np.abs(A) @ np.abs(B)))
