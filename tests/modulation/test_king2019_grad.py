"""Gradients of King et al. (2019)'s modulation filterbank: gradcheck through rtamt.nn,
the adjoint as reversed filtering, and its coefficient gradients against finite
differences of scipy.signal.sosfilt over recomputation segments."""
import numpy as np
import pytest

import rtamt.nn as rn

from _gradcheck import check_layer, noise

FS = 8000
FC = (500.0, 1000.0, 3000.0)


@pytest.mark.parametrize("lp150", [False, True])
def test_king_modfb_gradcheck(lp150):
    """King2019's modulation bank (5 band-passes on 3 channels), with and without its
    150 Hz pre-filter: input and every state entry."""
    layer = rn.KingModFilterbank(FS, fc=FC, lp150=lp150)
    assert layer.parts[0].coeffs.mfc.size == 5
    check_layer(layer, noise((1, 3, 25)), warm=noise((1, 3, 20), 1))


def test_king_bank_adjoint_is_reversed_filtering():
    """The derivation of king_bank_adjoint: with no gradient on the outgoing state,
    the input gradient is the output gradient filtered backwards in time by the same
    band-passes (scipy.signal.sosfilt on the time-reversed gradient), summed over the
    modulation filters of each channel; a gradient on the outgoing state of one filter
    gives the incoming state that same filter's state gradient back through T samples of
    its homogeneous recursion."""
    from scipy import signal

    from rtamt.modulation import king2019_grad

    c = rn.KingModFilterbank(FS, fc=FC).parts[0].coeffs
    M, C, T = c.mfc.size, len(FC), 200
    gy = noise((2, T, M * C), 3).numpy()
    gx, mu = np.zeros((2, T, C)), np.zeros((M, 2, 1, 2, C))
    unused = (np.zeros((2, T, C)), np.zeros_like(mu), np.zeros((M, 5)))
    king2019_grad.king_bank_adjoint(c.sos, gy, mu, gx, False, *unused)
    ref = sum(signal.sosfilt(c.sos[m], gy[:, ::-1, m * C:(m + 1) * C], axis=1)[:, ::-1]
              for m in range(M))
    np.testing.assert_allclose(gx, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    # zero input: (z0, z1)[T-1] = P^T (z0, z1)[-1] (P to the power T), so the gradient of
    # the incoming state is (P^T)' mu ((.)' the transpose)
    m, b, ch = 2, 1, 1
    mu = np.zeros((M, 2, 1, 2, C))
    mu[m, b, 0, :, ch] = (0.7, -0.3)
    king2019_grad.king_bank_adjoint(c.sos, np.zeros_like(gy), mu, np.zeros((2, T, C)), False,
                                    *unused)
    a1, a2 = c.sos[m, 0, 4], c.sos[m, 0, 5]
    P = np.array([[-a1, 1.0], [-a2, 0.0]])              # (z0, z1)[t] = P (z0, z1)[t-1]
    want = np.linalg.matrix_power(P, T).T @ np.array([0.7, -0.3])
    np.testing.assert_allclose(mu[m, b, 0, :, ch], want, rtol=1e-10, atol=1e-14)
    mu[m, b, 0, :, ch] = 0.0
    assert not mu.any()


def test_king_bank_coefficient_gradients_over_segments():
    """king_bank_adjoint with want: the gradients of b0, b1, b2, a1, a2 of every
    band-pass over 1100 samples (three recomputation segments, from a non-zero incoming
    state, with an outgoing-state gradient) equal central differences (five-point
    stencil) of the same loss computed with scipy.signal.sosfilt; the input and state
    gradients are bit-identical to those of the pass without coefficient gradients."""
    from scipy import signal

    from rtamt.modulation import king2019_grad

    c = rn.KingModFilterbank(FS, fc=FC).parts[0].coeffs
    M, C, B, T = c.mfc.size, len(FC), 2, 1100
    assert T > 2 * king2019_grad.SEGMENT
    u, gy = noise((B, T, C), 1).numpy(), noise((B, T, M * C), 2).numpy()
    st, mu0 = 0.3 * noise((M, B, 1, 2, C), 3).numpy(), noise((M, B, 1, 2, C), 4).numpy()

    def loss(sos):
        total = 0.0
        for m in range(M):
            y, zf = signal.sosfilt(sos[m], u, axis=1, zi=st[m].transpose(1, 0, 2, 3))
            total += np.sum(gy[:, :, m * C:(m + 1) * C] * y)
            total += np.sum(mu0[m] * zf.transpose(1, 0, 2, 3))
        return total

    out = {}
    for want in (False, True):
        gx, mu, gc = np.zeros((B, T, C)), mu0.copy(), np.zeros((M, 5))
        king2019_grad.king_bank_adjoint(c.sos, gy, mu, gx, want, u, st, gc)
        out[want] = gx, mu, gc
    assert np.array_equal(out[False][0], out[True][0])
    assert np.array_equal(out[False][1], out[True][1])
    assert not out[False][2].any()
    fd, h = np.zeros((M, 5)), 1e-7
    for m in range(M):
        for i, col in enumerate((0, 1, 2, 4, 5)):
            val = []
            for step in (2, 1, -1, -2):
                sos = c.sos.copy()
                sos[m, 0, col] += step * h
                val.append(loss(sos))
            fd[m, i] = (-val[0] + 8 * val[1] - 8 * val[2] + val[3]) / (12 * h)  # O(h^4)
    np.testing.assert_allclose(out[True][2], fd, rtol=5e-6, atol=0)
