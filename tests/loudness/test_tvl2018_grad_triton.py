import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""The Triton twin of the tvl2018 ear FIR's adjoint (rtamt.loudness.tvl2018_grad_triton.
fir_adjoint) against the numba adjoint beside the rule: random taps, and the stage's own
taps (through the sample history: a block shorter than the filter too)."""
import numpy as np  # noqa: E402

from rtamt.loudness import tvl2018_grad as tg  # noqa: E402
from rtamt.loudness import tvl2018_grad_triton as tt  # noqa: E402
from rtamt.loudness.tvl2018 import EarFIR  # noqa: E402

from _adjoint_twins import check_adjoint  # noqa: E402


@pytest.mark.parametrize("T", [40, 5], ids=["block-longer", "block-shorter"])
def test_fir_adjoint_random_taps(T):
    rng = np.random.default_rng(30 + T)
    h = rng.standard_normal(9)
    check_adjoint(tg.fir_adjoint, tt.fir_adjoint,
                  [("h", h), ("gy", rng.standard_normal((2, T))),
                   ("gz", rng.standard_normal((2, h.size - 1 + T)))], ("gz",))


def test_fir_adjoint_stage_taps():
    h = np.asarray(EarFIR(fs=32000.0, order=64).coeffs.h, dtype=np.float64)
    rng = np.random.default_rng(33)
    check_adjoint(tg.fir_adjoint, tt.fir_adjoint,
                  [("h", h), ("gy", rng.standard_normal((2, 50))),
                   ("gz", np.zeros((2, h.size - 1 + 50)))], ("gz",))


def test_ear_fir_rule_declares_the_triton_adjoint():
    assert tg.EarFIRGrad.kernels.has_triton
    assert tg.EarFIRGrad.kern.fir_adjoint is tg.fir_adjoint
    assert tg.EarFIRGrad.device_ready is False               # tvl2018: the host
