import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""The Triton gammatone adjoint (rtamt.filterbank.gammatone_grad_triton.gammatone4_adjoint)
against the numba adjoint beside its rule, on the coefficients the stage designs: the
input and state gradients alone (``want`` false), and with the coefficient gradients,
whose trajectory is recomputed from checkpoints (one segment, and several: the Triton
module's segment length shortened so that a small block crosses checkpoints the numba
kernel does not have; the results must not depend on it)."""
import numpy as np  # noqa: E402

from rtamt.filterbank import gammatone, gammatone_grad, gammatone_grad_triton  # noqa: E402

from _adjoint_twins import check_adjoint  # noqa: E402

B, T = 2, 40
FS = 16000.0


def _args(want, rng):
    co = gammatone.design(gammatone.GammatoneParams(FS, fc=(300.0, 1000.0, 4000.0)))
    C = co.fc.size
    return [("pr", co.pr), ("pi", co.pi), ("gain", co.gain),
            ("gy", rng.standard_normal((B, T, C))), ("mur", rng.standard_normal((B, 4, C))),
            ("mui", rng.standard_normal((B, 4, C))), ("gx", rng.standard_normal((B, T))),
            ("want", want), ("sr", 0.1 * rng.standard_normal((B, 4, C))),
            ("si", 0.1 * rng.standard_normal((B, 4, C))), ("x", rng.standard_normal((B, T))),
            ("gp", rng.standard_normal((3, C)))]


def test_gammatone_adjoint_input_and_state():
    out = check_adjoint(gammatone_grad.gammatone4_adjoint, gammatone_grad_triton.
                        gammatone4_adjoint, _args(False, np.random.default_rng(1)),
                        ("mur", "mui", "gx", "gp"))
    # without want the coefficient gradients are left as they were
    assert np.array_equal(out["triton"]["gp"], out["numba"]["gp"])


@pytest.mark.parametrize("segment", [None, 16], ids=["one-segment", "checkpoints"])
def test_gammatone_adjoint_coefficients(segment, monkeypatch):
    if segment is not None:
        monkeypatch.setattr(gammatone_grad_triton, "SEGMENT", segment)
    check_adjoint(gammatone_grad.gammatone4_adjoint, gammatone_grad_triton.gammatone4_adjoint,
                  _args(True, np.random.default_rng(2)), ("mur", "mui", "gx", "gp"))
