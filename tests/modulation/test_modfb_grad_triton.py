import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")

"""The Triton twins of the modulation bank's adjoints (rtamt.modulation.modfb_grad_triton:
efilt_adjoint with and without coefficient gradients, biquad_bank_adjoint) against the
numba adjoints on the same inputs: ragged banks designed by the stage, real-part and
envelope filters, a strided output gradient (a column slice of a packed one), gradients
added to non-zero ``gx``/``gc``; every output within 1e-12 relative (float64, the
adjoints' dtype)."""
import numpy as np  # noqa: E402

from rtamt.modulation import modfb, modfb_grad, modfb_grad_triton  # noqa: E402

from _kernel_twins import rel  # noqa: E402
from _triton import compile_sm80, dev, host  # noqa: E402

FS = 48000.0
TOL = 1e-12


def _bank(filter_type, preset="amt0910"):
    return modfb.design(modfb.ModFilterbankParams(FS, fc=(150.0, 1000.0, 4000.0),
                                                  preset=preset, filter_type=filter_type))


def _inputs(rng, co, B, T, state_shape):
    C, Fb = co.fc.size, co.bp_channel.size
    x = 1.0 + rng.standard_normal((B, T, C))
    st = 1e-2 * rng.standard_normal(state_shape)
    gy_packed = rng.standard_normal((B, T, C + Fb))
    mu = rng.standard_normal(state_shape)
    gx = rng.standard_normal((B, T, C))
    return x, st, gy_packed, mu, gx


def _assert_close(got, ref, what):
    assert rel(got, ref) <= TOL, f"{what}: {rel(got, ref):.3g}"


@pytest.mark.parametrize("want,preset,T", [(False, "amt0910", 40), (True, "amt0910", 40),
                                           (True, "jepsen2008", 530)])
def test_efilt_adjoint(want, preset, T):
    """T = 530 crosses numba's first checkpoint segment (SEGMENT = 512)."""
    rng = np.random.default_rng(11)
    co = _bank("efilt", preset)
    C, Fb = co.fc.size, co.bp_channel.size
    assert 0 < co.bp_nreal < Fb
    B = 2
    x, st, gyp, mu, gx = _inputs(rng, co, B, T, (B, 2, Fb))
    gc = rng.standard_normal((3, Fb))
    mu_n, gx_n, gc_n = mu.copy(), gx.copy(), gc.copy()
    modfb_grad.efilt_adjoint(co.bp_coef, co.bp_nreal, co.bp_channel, x, st, gyp[:, :, C:],
                             mu_n, gx_n, want, gc_n)
    mu_t, gx_t, gc_t, gyp_t = dev(mu.copy()), dev(gx.copy()), dev(gc.copy()), dev(gyp)
    modfb_grad_triton.efilt_adjoint(dev(co.bp_coef), co.bp_nreal, dev(co.bp_channel), dev(x),
                                    dev(st), gyp_t[:, :, C:], mu_t, gx_t, want, gc_t)
    _assert_close(gx_t, gx_n, "gx")
    _assert_close(mu_t, mu_n, "mu")
    _assert_close(gc_t, gc_n, "gc")
    assert not np.array_equal(mu_n, mu) and not np.array_equal(gx_n, gx)
    assert np.array_equal(gc_n, gc) != want        # gc written only with want


def test_biquad_bank_adjoint():
    rng = np.random.default_rng(12)
    co = _bank("butterworth")
    C, Fb = co.fc.size, co.bp_channel.size
    assert 0 < co.bp_nreal < Fb
    B, T = 2, 60
    x, st, gyp, mu, gx = _inputs(rng, co, B, T, (B, Fb, 2, 2))
    mu_n, gx_n = mu.copy(), gx.copy()
    modfb_grad.biquad_bank_adjoint(co.bp_channel, co.bp_nreal, co.bp_b, co.bp_a, co.bp_scale,
                                   x, st, gyp[:, :, C:], mu_n, gx_n)
    mu_t, gx_t, gyp_t = dev(mu.copy()), dev(gx.copy()), dev(gyp)
    modfb_grad_triton.biquad_bank_adjoint(dev(co.bp_channel), co.bp_nreal, dev(co.bp_b),
                                          dev(co.bp_a), dev(co.bp_scale), dev(x), dev(st),
                                          gyp_t[:, :, C:], mu_t, gx_t)
    _assert_close(gx_t, gx_n, "gx")
    _assert_close(mu_t, mu_n, "mu")
    assert not np.array_equal(mu_n, mu)


def test_efilt_adjoint_envelope_at_zero():
    """An envelope filter whose w stays 0 (zero input, zero state) passes no output
    gradient (numba's subgradient at |w| = 0), in both twins."""
    co = _bank("efilt")
    C, Fb = co.fc.size, co.bp_channel.size
    B, T = 1, 8
    x = np.zeros((B, T, C))
    st = np.zeros((B, 2, Fb))
    gy = np.ones((B, T, Fb))
    mu_n, gx_n, gc = np.zeros((B, 2, Fb)), np.zeros((B, T, C)), np.zeros((3, Fb))
    modfb_grad.efilt_adjoint(co.bp_coef, co.bp_nreal, co.bp_channel, x, st, gy, mu_n, gx_n,
                             False, gc)
    mu_t, gx_t = dev(np.zeros((B, 2, Fb))), dev(np.zeros((B, T, C)))
    modfb_grad_triton.efilt_adjoint(dev(co.bp_coef), co.bp_nreal, dev(co.bp_channel), dev(x),
                                    dev(st), dev(gy), mu_t, gx_t, False, dev(gc.copy()))
    assert np.all(host(mu_t)[:, :, co.bp_nreal:] == 0.0)
    assert np.any(host(mu_t)[:, :, :co.bp_nreal] != 0.0)
    _assert_close(gx_t, gx_n, "gx")
    _assert_close(mu_t, mu_n, "mu")


def test_adjoint_kernels_compile_for_gpu():
    """The GPU compiler (sm_80, no device needed) accepts both kernels, with and without
    coefficient gradients."""
    pytest.importorskip("triton.backends.nvidia")
    compile_sm80("""
        from rtamt.modulation import modfb_grad_triton as m
        p, i = "*fp64", "i32"
        for want in (False, True):
            build(m._efilt_adj_kernel,
                  dict(coef_ptr=p, nreal=i, ch_ptr="*i64", x_ptr=p, st_ptr=p, gy_ptr=p,
                       gys_b=i, gys_t=i, gys_f=i, mu_ptr=p, wr_ptr=p, wi_ptr=p, gu_ptr=p,
                       gc_ptr=p, N=i, T=i, C=i, F=i, WANT=0, BLOCK=0),
                  {"WANT": want, "BLOCK": 64})
        build(m._cbq_adj_kernel,
              dict(ch_ptr="*i64", nreal=i, b_ptr=p, a_ptr=p, sc_ptr=p, x_ptr=p, st_ptr=p,
                   gy_ptr=p, gys_b=i, gys_t=i, gys_f=i, mu_ptr=p, or_ptr=p, oi_ptr=p,
                   gu_ptr=p, N=i, T=i, C=i, F=i, BLOCK=0), {"BLOCK": 64})
    """)
