import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""The Triton specific-loudness adjoint (rtamt.loudness.specific_loudness_grad_triton)
against the numba adjoint beside its rule, on the coefficients the stage designs, with
excitations in every branch of ANSI S3.4-2007 eqs. 17-19: below threshold (eq. 18), above
it, above 1e10 (eq. 19), and zero or negative (no gradient)."""
import numpy as np  # noqa: E402

from rtamt.loudness import specific_loudness_grad as slg  # noqa: E402
from rtamt.loudness import specific_loudness_grad_triton as slt  # noqa: E402
from rtamt.loudness.specific_loudness import SpecificLoudness  # noqa: E402

from _adjoint_twins import check_adjoint  # noqa: E402

FC = (50.0, 200.0, 1000.0, 4000.0, 12000.0)


def test_specific_loudness_adjoint_every_branch():
    c = SpecificLoudness(fc=FC, C=0.046871).coeffs
    rng = np.random.default_rng(5)
    K = len(FC)
    E = 10.0 ** rng.uniform(-2.0, 12.0, (24, K))           # 0.01 .. 1e12 (-20 .. 120 dB)
    E[0] = 0.0
    E[1, :2] = -1.0
    E[2] = 0.5 * c.ethrq                                   # below threshold
    E[3] = 2e10                                            # eq. 19
    assert (E > 1e10).any() and ((E > 0) & (E < c.ethrq)).any()
    gN = rng.standard_normal(E.shape)
    gE = rng.standard_normal(E.shape)
    out = check_adjoint(slg.specific_loudness_adjoint, slt.specific_loudness_adjoint,
                        [("E", E), ("G", c.G), ("A", c.A), ("alpha", c.alpha),
                         ("A_alpha", c.A_alpha), ("ethrq", c.ethrq), ("C", float(c.C)),
                         ("gN", gN), ("gE", gE)], ("gE",), returns=1)
    # where E <= 0 the gradient added is exactly 0
    assert np.array_equal(out["triton"]["gE"][0], gE[0])
    assert np.array_equal(out["triton"]["gE"][1, :2], gE[1, :2])


def test_specific_loudness_rule_declares_the_triton_adjoint():
    assert slg.SpecificLoudnessGrad.kernels.has_triton
    assert slg.SpecificLoudnessGrad.kern.specific_loudness_adjoint \
        is slg.specific_loudness_adjoint
    assert slg.SpecificLoudnessGrad.device_ready is True      # frame layers bind it
