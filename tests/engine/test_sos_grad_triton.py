import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""The Triton adjoint of the shared SOS cascade (rtamt.engine.sos_grad_triton.sos_adjoint)
against the numba adjoint beside its rule: second- and first-order sections (the IHC
low-passes), with and without the rectifier, an output gradient that is a column slice
of a packed output, and a cascade of no sections."""
import numpy as np  # noqa: E402
import torch  # noqa: E402

from rtamt.engine import sos_grad, sos_grad_triton  # noqa: E402
from rtamt.ihc import envelope  # noqa: E402

from _adjoint_twins import TOL, check_adjoint  # noqa: E402
from _kernel_twins import rel  # noqa: E402
from _triton import dev  # noqa: E402

B, T, C = 2, 40, 3
MIXED = np.array([[0.2, 0.3, 0.1, 1.0, -0.6, 0.2],     # second order
                  [0.4, 0.2, 0.0, 1.0, -0.5, 0.0]])    # first order (b2 = a2 = 0)


def _args(sos, rectify, rng):
    S = sos.shape[0]
    return [("sos", sos), ("rectify", rectify), ("x", rng.standard_normal((B, T, C))),
            ("gy", rng.standard_normal((B, T, C))),
            ("mu", rng.standard_normal((B, S, 2, C))),
            ("gx", rng.standard_normal((B, T, C)))]


@pytest.mark.parametrize("rectify", [True, False])
def test_sos_adjoint_mixed_sections(rectify):
    check_adjoint(sos_grad.sos_adjoint, sos_grad_triton.sos_adjoint,
                  _args(MIXED, rectify, np.random.default_rng(1)), ("mu", "gx"))


def test_sos_adjoint_ihc_envelope_design():
    """The IHC envelope's own sections (the Dau 1996 first-order low-pass cascade)."""
    sos = envelope.IHCEnvelope(fs=16000.0).coeffs.sos
    assert sos.shape[0] >= 1
    check_adjoint(sos_grad.sos_adjoint, sos_grad_triton.sos_adjoint,
                  _args(sos, True, np.random.default_rng(2)), ("mu", "gx"))


def test_sos_adjoint_no_sections():
    check_adjoint(sos_grad.sos_adjoint, sos_grad_triton.sos_adjoint,
                  _args(np.zeros((0, 6)), True, np.random.default_rng(3)), ("gx",))


def test_sos_adjoint_strided_output_gradient():
    """``gy`` a column slice of a packed (B, T, 2C) gradient, as the modulation banks
    hand it: read in its strides."""
    rng = np.random.default_rng(4)
    args = dict(_args(MIXED, False, rng))
    packed = rng.standard_normal((B, T, 2 * C))
    mu_n, gx_n = args["mu"].copy(), args["gx"].copy()
    sos_grad.sos_adjoint(MIXED, False, args["x"], packed[:, :, C:], mu_n, gx_n)
    mu_t, gx_t = dev(args["mu"].copy()), dev(args["gx"].copy())
    gy_t = dev(packed)[:, :, C:]
    assert not gy_t.is_contiguous()
    sos_grad_triton.sos_adjoint(dev(MIXED), False, dev(args["x"]), gy_t, mu_t, gx_t)
    assert rel(mu_t, mu_n) <= TOL and rel(gx_t, gx_n) <= TOL
    assert torch.is_tensor(gx_t)
