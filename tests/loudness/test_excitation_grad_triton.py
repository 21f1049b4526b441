import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""The Triton excitation adjoints (rtamt.loudness.excitation_grad_triton) against the numba
adjoints beside the rule, on the tables the stage designs: the lower skirts (levels on both
sides of the slope's floor, a level below 1e-10, a silent component) and the dB form (an
excitation on its 1e-10 floor)."""
import numpy as np  # noqa: E402

from rtamt.engine.rowwise import product  # noqa: E402
from rtamt.loudness import excitation_grad as eg  # noqa: E402
from rtamt.loudness import excitation_grad_triton as et  # noqa: E402
from rtamt.loudness.excitation import Excitation, ExcitationParams  # noqa: E402

from _adjoint_twins import check_adjoint  # noqa: E402

COMP = tuple(np.geomspace(60.0, 14000.0, 30))


def test_lower_skirt_adjoint():
    s = Excitation(ExcitationParams(comp_hz=COMP))
    c = s.coeffs
    rng = np.random.default_rng(8)
    N, J, nf = 3, len(COMP), c.fc.size
    P = 10 ** rng.uniform(-4, 9, (N, J))                  # -40 .. 90 dB per component
    P[0, 3] = 0.0
    P[1] *= 1e-13                                         # levels below 1e-10
    lvl = product(s.kern, P, c.sym_t, c.sym_rng)
    assert (lvl < 1e-10).any() and (lvl > 1e6).any()
    glvl = rng.standard_normal((N, J))
    out = check_adjoint(eg.lower_skirt_adjoint, et.lower_skirt_adjoint,
                        [("P", P), ("lvl", lvl), ("c_slope", float(c.c_slope)), ("a", c.a),
                         ("b", c.b), ("i0", c.i0), ("seg", c.seg), ("cnt", c.cnt),
                         ("gE", rng.standard_normal((N, nf))),
                         ("gP", rng.standard_normal((N, J))),
                         ("glvl", glvl)], ("gP", "glvl"))
    # the slope's level term reached the level's gradient (a s > b somewhere), and a
    # level below 1e-10 got none
    changed = out["numba"]["glvl"] != glvl
    assert changed.any() and not changed[lvl <= 1e-10].any()


def test_excitation_db_adjoint():
    rng = np.random.default_rng(9)
    E = 10 ** rng.uniform(-14, 10, (4, 37))
    E[0, :5] = 1e-10                                      # on the floor: no gradient
    gE = rng.standard_normal(E.shape)
    out = check_adjoint(eg.excitation_db_adjoint, et.excitation_db_adjoint,
                        [("E", E), ("gdb", rng.standard_normal(E.shape)), ("gE", gE)], ("gE",))
    assert np.array_equal(out["triton"]["gE"][0, :5], gE[0, :5])


def test_excitation_rule_declares_the_triton_adjoints():
    assert eg.ExcitationGrad.kernels.has_triton
    assert set(eg.ExcitationGrad.kern.names) == {"lower_skirt_adjoint",
                                                  "excitation_db_adjoint"}
    assert eg.ExcitationGrad.device_ready is True            # frame layers bind it
