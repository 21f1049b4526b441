import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""The Triton adjoint of the loudness integrators (rtamt.loudness.frames_grad_triton.
agc_adjoint) against the numba adjoint (rtamt.loudness.frames_grad.agc_adjoint): the
input, incoming-state and coefficient gradients on frames that rise above and fall below
the smoother (both branches of the attack/release switch taken), an empty block, and the
declaration that binds it for the integrators' rules."""
import numpy as np  # noqa: E402

from rtamt.loudness import agc, agc_grad, frames_grad, frames_grad_triton  # noqa: E402

from _adjoint_twins import check_adjoint  # noqa: E402
from _triton import DEVICE  # noqa: E402

N, K = 12, 5
AA, AR = 0.35, 0.02


def _args(rng, n=N):
    # a rising, then falling envelope: x > y (attack) at the start, x < y (release) later
    env = np.concatenate([np.linspace(0.2, 3.0, n // 2), np.linspace(2.5, 0.1, n - n // 2)])
    x = env[:, None] * (1.0 + 0.3 * rng.random((n, K)))
    return [("x", x), ("y0", 0.5 * rng.random(K)), ("aa", AA), ("ar", AR),
            ("gy", rng.standard_normal((n, K))), ("mu", rng.standard_normal(K)),
            ("gx", rng.standard_normal((n, K)))]


def test_agc_adjoint_both_branches():
    rng = np.random.default_rng(3)
    args = _args(rng)
    x, y0 = args[0][1], args[1][1]
    y = np.empty((N, K))
    agc.agc(x, y0.copy(), AA, AR, y)
    prev = np.vstack([y0, y[:-1]])
    assert (x > prev).any() and (x < prev).any()          # both branches taken
    out = check_adjoint(frames_grad.agc_adjoint, frames_grad_triton.agc_adjoint, args,
                        ("mu", "gx"), returns=2)
    assert out["numba"]["ret0"] != 0 and out["numba"]["ret1"] != 0


def test_agc_adjoint_empty_block_passes_the_state_gradient():
    out = check_adjoint(frames_grad.agc_adjoint, frames_grad_triton.agc_adjoint,
                        _args(np.random.default_rng(4), n=0)[:5]
                        + [("mu", np.arange(1.0, K + 1)), ("gx", np.zeros((0, K)))],
                        ("mu",), returns=0)
    assert np.array_equal(out["triton"]["mu"], np.arange(1.0, K + 1))


def test_integrator_rules_declare_the_triton_adjoint():
    for rule in (agc_grad.LoudnessIntegratorGrad, agc_grad.SpecificLoudnessAGCGrad):
        assert rule.kernels.has_triton
        assert rule.kern.agc_adjoint is frames_grad.agc_adjoint
        bound = rule.kernels.bind("triton", DEVICE)
        assert bound.names == ("agc_adjoint",)
        assert rule.device_ready is True         # a Triton-bound frame layer binds it
