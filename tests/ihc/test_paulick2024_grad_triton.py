import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")

"""The Triton twin of Paulick2024's IHC adjoint
(rtamt.ihc.paulick2024_grad_triton.ihc_paulick2024_adjoint) against the numba adjoint on
the same inputs: both integrators, displacements around the MET's operating point and far
below it (where the conductance's denominator overflows and both give 0), a strided
output gradient, gradients added to a non-zero ``gx``; within 1e-12 relative (float64,
the adjoint's dtype)."""
import numpy as np  # noqa: E402

from rtamt.ihc import paulick2024_grad, paulick2024_grad_triton  # noqa: E402
from rtamt.ihc.paulick2024 import IHCPaulick2024, IHCPaulick2024Params  # noqa: E402

from _kernel_twins import rel  # noqa: E402
from _triton import compile_sm80, dev  # noqa: E402

FS = 44100.0
TOL = 1e-12


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered in subtract:RuntimeWarning")
@pytest.mark.parametrize("integrator", ["euler", "exponential"])
def test_ihc_paulick2024_adjoint(integrator):
    c = IHCPaulick2024(IHCPaulick2024Params(fs=FS, integrator=integrator)).coeffs
    rng = np.random.default_rng(31)
    B, T, C = 2, 40, 3
    # displacements d = alpha x of a few x0 around 0; one channel's far below (D overflows)
    x = (3 * c.x0 / c.alpha) * rng.standard_normal((B, T, C))
    x[:, ::7, 2] = -1e3 * c.x0 / c.alpha
    v0 = c.v_rest + 1e-3 * rng.standard_normal((B, C))
    gy = rng.standard_normal((B, T, 2 * C))[:, :, ::2]      # strided
    mu = rng.standard_normal((B, C))
    gx = rng.standard_normal((B, T, C))
    consts = (c.alpha, c.gmet, c.x0, c.inv_s0, c.inv_s1, c.ep, c.gkf, c.ekf, c.gks, c.eks,
              c.k, c.method)
    mu_n, gx_n = mu.copy(), gx.copy()
    paulick2024_grad.ihc_paulick2024_adjoint(*consts, v0, x, gy, mu_n, gx_n)
    mu_t, gx_t = dev(mu.copy()), dev(gx.copy())
    paulick2024_grad_triton.ihc_paulick2024_adjoint(*consts, dev(v0), dev(x), dev(gy), mu_t,
                                                    gx_t)
    assert rel(gx_t, gx_n) <= TOL, rel(gx_t, gx_n)
    assert rel(mu_t, mu_n) <= TOL, rel(mu_t, mu_n)
    assert not np.array_equal(gx_n, gx) and not np.array_equal(mu_n, mu)
    # the overflowing samples pass no gradient to x in either twin
    assert np.array_equal(gx_t.cpu().numpy()[:, ::7, 2], gx[:, ::7, 2])
    assert np.array_equal(gx_n[:, ::7, 2], gx[:, ::7, 2])


def test_ihc_adjoint_kernel_compiles_for_gpu():
    """The GPU compiler (sm_80, no device needed) accepts the kernel, both integrators."""
    pytest.importorskip("triton.backends.nvidia")
    compile_sm80("""
        from rtamt.ihc import paulick2024_grad_triton as m
        p, i = "*fp64", "i32"
        for method in (0, 1):
            build(m._ihc_adj_kernel,
                  dict(cst_ptr=p, v0_ptr=p, x_ptr=p, gy_ptr=p, gys_b=i, gys_t=i, gys_c=i,
                       mu_ptr=p, gx_ptr=p, vb_ptr=p, N=i, T=i, C=i, METHOD=0, BLOCK=0),
                  {"METHOD": method, "BLOCK": 32})
    """)
