import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")

"""The Triton twin of King2019's modulation-bank adjoint
(rtamt.modulation.king2019_grad_triton.king_bank_adjoint) against the numba adjoint on the
same inputs: the designed band-passes, with and without coefficient gradients, a strided
output gradient, gradients added to non-zero ``gx``/``gc``; every output within 1e-12
relative (float64, the adjoint's dtype)."""
import numpy as np  # noqa: E402

from rtamt.modulation import king2019_grad, king2019_grad_triton  # noqa: E402
from rtamt.modulation.king2019 import KingModFilterbank, KingModFilterbankParams  # noqa: E402

from _kernel_twins import rel  # noqa: E402
from _triton import compile_sm80, dev  # noqa: E402

TOL = 1e-12


@pytest.mark.parametrize("want,first_order", [(False, False), (True, False), (False, True)])
def test_king_bank_adjoint(want, first_order):
    """first_order: filter 1 made a first-order section (``b2 = a2 = 0``), whose second
    memory the forward leaves unchanged (``mu1 <- mu0 + mu1``)."""
    co = KingModFilterbank(KingModFilterbankParams(fs=8000.0, fc=(500.0, 1000.0, 2000.0),
                                                   nmod=4)).coeffs
    M, C = co.sos.shape[0], co.fc.size
    assert M == 4
    sos = co.sos.copy()
    if first_order:
        sos[1, 0, [2, 5]] = 0.0
    rng = np.random.default_rng(51)
    B, T = 2, 30
    gy = rng.standard_normal((B, T, M * C + 1))[:, :, 1:]     # strided
    mu = rng.standard_normal((M, B, 1, 2, C))
    gx = rng.standard_normal((B, T, C))
    u = rng.standard_normal((B, T, C))
    st = 0.1 * rng.standard_normal((M, B, 1, 2, C))
    gc = rng.standard_normal((M, 5))
    mu_n, gx_n, gc_n = mu.copy(), gx.copy(), gc.copy()
    king2019_grad.king_bank_adjoint(sos, gy, mu_n, gx_n, want, u, st, gc_n)
    mu_t, gx_t, gc_t = dev(mu.copy()), dev(gx.copy()), dev(gc.copy())
    king2019_grad_triton.king_bank_adjoint(dev(sos), dev(gy), mu_t, gx_t, want, dev(u),
                                           dev(st), gc_t)
    assert rel(gx_t, gx_n) <= TOL, rel(gx_t, gx_n)
    assert rel(mu_t, mu_n) <= TOL, rel(mu_t, mu_n)
    assert rel(gc_t, gc_n) <= TOL, rel(gc_t, gc_n)
    assert not np.array_equal(mu_n, mu) and not np.array_equal(gx_n, gx)
    assert np.array_equal(gc_n, gc) != want


def test_king_adjoint_kernel_compiles_for_gpu():
    """The GPU compiler (sm_80, no device needed) accepts the kernel, with and without
    coefficient gradients."""
    pytest.importorskip("triton.backends.nvidia")
    compile_sm80("""
        from rtamt.modulation import king2019_grad_triton as m
        p, i = "*fp64", "i32"
        for want in (False, True):
            build(m._king_adj_kernel,
                  dict(sos_ptr=p, gy_ptr=p, gys_b=i, gys_t=i, gys_f=i, mu_ptr=p, gx_ptr=p,
                       u_ptr=p, st_ptr=p, o_ptr=p, gl_ptr=p, N=i, B=i, T=i, C=i, M=i,
                       WANT=0, BLOCK=0), {"WANT": want, "BLOCK": 64})
    """)
