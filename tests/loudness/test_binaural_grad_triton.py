import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""The Triton binaural-inhibition adjoint (rtamt.loudness.binaural_grad_triton) against
the numba adjoint beside its rule, on the stage's smoothed patterns: two ear pairs (one
with the right ear silent: the held inhibition), and a diotic row; the long-term
integrator on both sides of its switch; excitations below the dB floor."""
import numpy as np  # noqa: E402

from rtamt.engine.rowwise import product  # noqa: E402
from rtamt.loudness import binaural_grad as bg  # noqa: E402
from rtamt.loudness import binaural_grad_triton as bt  # noqa: E402
from rtamt.loudness.binaural import BinauralInhibition  # noqa: E402

from _adjoint_twins import check_adjoint  # noqa: E402

K, F = 20, 5


def _args(R, rng):
    s = BinauralInhibition(cam=tuple(1.75 + 0.25 * np.arange(K)), attack=0.3, release=0.1)
    st = np.abs(rng.standard_normal((F, R, K)))
    if R == 4:
        st[:, 3] = 0.0                                  # pair 1: the right ear silent
        st[:, 1] *= 0.5
    else:                                               # loud, then soft: attack, release
        st *= np.array([2.0, 2.0, 0.1, 0.1, 0.1])[:, None, None]
    c = s.coeffs
    S = product(s.kern, st.reshape(F * R, K), c.smooth, c.smooth_rng).reshape(F, R, K)
    E = 10 ** rng.uniform(-12, 5, (R, F, K))            # some below the dB floor
    B = 1 if R == 1 else R // 2
    lt0 = np.array([10.0, 0.1, 5.0, 0.2] if R == 4 else [3.0])
    q = s.params
    return [("st", st), ("S", S), ("E", E), ("lt0", lt0), ("aa", q.attack),
            ("ar", q.release), ("p", q.p), ("gspec", rng.standard_normal((B, 2, K, F))),
            ("gexc", rng.standard_normal((B, 2, K, F))),
            ("gste", rng.standard_normal((B, 2, F))), ("glte", rng.standard_normal((B, 2, F))),
            ("mu", rng.standard_normal(R)), ("gst", rng.standard_normal((F, R, K))),
            ("gS", rng.standard_normal((F, R, K))), ("gE", rng.standard_normal((R, F, K)))]


@pytest.mark.parametrize("R", [4, 1], ids=["two-pairs-one-silent", "diotic"])
def test_binaural_adjoint(R):
    out = check_adjoint(bg.binaural_adjoint, bt.binaural_adjoint,
                        _args(R, np.random.default_rng(20 + R)),
                        ("mu", "gst", "gS", "gE"), returns=3)
    assert all(out["numba"][f"ret{i}"] != 0 for i in range(3))   # p, attack, release


def test_binaural_rule_declares_the_triton_adjoint():
    assert bg.BinauralGrad.kernels.has_triton
    assert bg.BinauralGrad.kern.binaural_adjoint is bg.binaural_adjoint
    assert bg.BinauralGrad.device_ready is True              # frame layers bind it
