import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""The Triton FIR adjoint (rtamt.ear.fir_grad_triton.fir_adjoint) against the numba adjoint
beside its rule: a history longer than the block, shorter than the block, and a one-tap
filter (no history)."""
import numpy as np  # noqa: E402

from rtamt.ear import fir_grad, fir_grad_triton  # noqa: E402

from _adjoint_twins import check_adjoint  # noqa: E402

B, C = 2, 1


@pytest.mark.parametrize("taps,T", [(30, 9), (9, 40), (1, 5)],
                         ids=["history-longer", "block-longer", "one-tap"])
def test_fir_adjoint(taps, T):
    rng = np.random.default_rng(taps)
    args = [("h", rng.standard_normal(taps)), ("gy", rng.standard_normal((B, T, C))),
            ("mu", rng.standard_normal((B, taps - 1, C))),
            ("gx", rng.standard_normal((B, T, C)))]
    check_adjoint(fir_grad.fir_adjoint, fir_grad_triton.fir_adjoint, args,
                  ("gx",) if taps == 1 else ("mu", "gx"))
