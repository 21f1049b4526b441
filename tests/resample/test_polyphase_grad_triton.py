import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")

"""The Triton twin of the polyphase resampler's adjoint
(rtamt.resample.polyphase_grad_triton.polyphase_adjoint) against the numba adjoint on the
same inputs: Paulick2024's decimations ``1/D``, an up-sampling and a ratio with both factors
above 1, incoming phases inside the decimation, a block shorter than the history, one that
produces no output, a strided output gradient, gradients added to a non-zero ``gx``; within
1e-12 relative (float64, the adjoint's dtype)."""
import numpy as np  # noqa: E402

from rtamt.resample import polyphase_grad, polyphase_grad_triton  # noqa: E402
from rtamt.resample.polyphase import Resampler, ResamplerParams, block_output_length  # noqa: E402

from _kernel_twins import rel  # noqa: E402
from _triton import compile_sm80, dev  # noqa: E402

FS = 8000.0
TOL = 1e-12
#: (up, down, T): Paulick2024's 1/2 and 1/5 (1/5's 101 taps make the interpreter slow: one
#: block, shorter than the history), an up-sampling, a ratio with both factors above 1
CASES = [(1, 2, 40), (1, 2, 3), (1, 2, 1), (1, 5, 3), (2, 1, 40), (2, 1, 1), (3, 2, 40),
         (3, 2, 1)]


@pytest.mark.parametrize("up,down,T", CASES, ids=[f"{u}-{d}-T{t}" for u, d, t in CASES])
def test_polyphase_adjoint(up, down, T):
    co = Resampler(ResamplerParams(fs_in=FS, up=up, down=down)).coeffs
    K = co.taps.shape[1]
    assert 3 < K - 1                                      # T = 3, 1: shorter than hist
    rng = np.random.default_rng(41 + T)
    B, C = 2, 2
    nouts = []
    for r in sorted({0, down - 1, up + down - 1}):
        offset = np.array([r], dtype=np.int64)
        nout = block_output_length(co, {"offset": offset}, T)
        gy = rng.standard_normal((B, nout, C + 1))[:, :, 1:]   # strided
        mu = rng.standard_normal((B, K - 1, C))
        gx = rng.standard_normal((B, T, C))
        mu_n, gx_n = mu.copy(), gx.copy()
        polyphase_grad.polyphase_adjoint(co.taps, up, down, offset, gy, mu_n, gx_n)
        mu_t, gx_t, off_t = dev(mu.copy()), dev(gx.copy()), dev(offset.copy())
        polyphase_grad_triton.polyphase_adjoint(dev(co.taps), up, down, off_t, dev(gy), mu_t,
                                                gx_t)
        assert rel(gx_t, gx_n) <= TOL, (r, rel(gx_t, gx_n))
        assert rel(mu_t, mu_n) <= TOL, (r, rel(mu_t, mu_n))
        assert int(off_t.cpu()[0]) == r                     # the phase is read only
        assert not np.array_equal(mu_n, mu) and not np.array_equal(gx_n, gx)
        nouts.append(nout)
    # a one-sample block from a phase inside the decimation produces no output
    assert 0 in nouts or not (T == 1 and down > 1)


def test_polyphase_adjoint_kernel_compiles_for_gpu():
    """The GPU compiler (sm_80, no device needed) accepts the kernel."""
    pytest.importorskip("triton.backends.nvidia")
    compile_sm80("""
        from rtamt.resample import polyphase_grad_triton as m
        p, i = "*fp64", "i32"
        build(m._polyphase_adj_kernel,
              dict(taps_ptr=p, offset_ptr="*i64", gy_ptr=p, gys_b=i, gys_i=i, gys_c=i,
                   mu_ptr=p, mu_in_ptr=p, gx_ptr=p, N=i, T=i, C=i, K=i, NOUT=i, UP=i,
                   DOWN=i, QMAX=i, BLOCK=0), {"BLOCK": 32})
    """)
