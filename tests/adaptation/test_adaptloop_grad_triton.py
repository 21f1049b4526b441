import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""The Triton adaptation-loop adjoint (rtamt.adaptation.adaptloop_grad_triton.
adaptloop_adjoint) against the numba adjoint beside its rule, on the designed constants:
with the overshoot limiter on (an input far above the resting dividers, so the limiter
acts) and off, and with the trajectory recomputed from several checkpoints (the Triton
module's segment length shortened; the results must not depend on it)."""
import numpy as np  # noqa: E402

from rtamt.adaptation import adaptloop, adaptloop_grad, adaptloop_grad_triton  # noqa: E402

from _adjoint_twins import check_adjoint  # noqa: E402

B, T, C = 2, 40, 3
FS = 16000.0


def _args(limit, rng):
    co = adaptloop.AdaptLoop(adaptloop.AdaptLoopParams(fs=FS, limit=limit)).coeffs
    K = co.a.size
    s0 = co.lanes[3 + 3 * K:3 + 4 * K, :C]
    s = np.repeat(s0[None], B, 0) * (1.0 + 0.1 * rng.random((B, K, C)))
    x = np.abs(rng.standard_normal((B, T, C))) * 30.0
    x[:, 3::7] = 0.0                                 # below the minimum level: no gradient
    assert (x[:, 0] / s[:, 0] > 1.0).any()           # the limiter's branch is reached
    return co, [("a", co.a), ("bcoef", co.b), ("lanes", co.lanes),
                ("limit_on", bool(co.limit_on)), ("s_in", s), ("x", x),
                ("gy", rng.standard_normal((B, T, C))), ("mu", rng.standard_normal((B, K, C))),
                ("gx", rng.standard_normal((B, T, C))), ("ga", rng.standard_normal(K))]


@pytest.mark.parametrize("limit", [10.0, 0.0], ids=["limiter", "no-limiter"])
def test_adaptloop_adjoint(limit):
    co, args = _args(limit, np.random.default_rng(1))
    assert bool(co.limit_on) == (limit > 1.0)
    check_adjoint(adaptloop_grad.adaptloop_adjoint, adaptloop_grad_triton.adaptloop_adjoint,
                  args, ("mu", "gx", "ga"))


def test_adaptloop_adjoint_checkpoints(monkeypatch):
    monkeypatch.setattr(adaptloop_grad_triton, "SEGMENT", 16)
    _, args = _args(10.0, np.random.default_rng(2))
    check_adjoint(adaptloop_grad.adaptloop_adjoint, adaptloop_grad_triton.adaptloop_adjoint,
                  args, ("mu", "gx", "ga"))
