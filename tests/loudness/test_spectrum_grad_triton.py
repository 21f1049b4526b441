import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""The Triton spectrum adjoint (rtamt.loudness.spectrum_grad_triton.dft_power_adjoint)
against the numba adjoint beside the rule: on a small window with overlapping frames and
several bins per component (the interpreter is slow), and on the widest window the
stage designs at 32 kHz (its 2048-sample Hann window and its bins, as the rule holds
them)."""
import numpy as np  # noqa: E402

from rtamt.loudness import spectrum_grad as sg  # noqa: E402
from rtamt.loudness import spectrum_grad_triton as stt  # noqa: E402
from rtamt.loudness.spectrum import Spectrum, SpectrumParams  # noqa: E402

from _adjoint_twins import check_adjoint  # noqa: E402


def _check(z, st, F, H, mat, gain, grp, J, rng):
    R = z.shape[0]
    gz = rng.standard_normal(z.shape)
    out = check_adjoint(sg.dft_power_adjoint, stt.dft_power_adjoint,
                        [("z", z), ("st", st), ("F", F), ("H", H), ("mat", mat),
                         ("mat_t", np.ascontiguousarray(mat.T)), ("gain", gain), ("grp", grp),
                         ("gP", rng.standard_normal((R * F, J))), ("gz", gz)], ("gz",))
    changed = out["numba"]["gz"] != gz
    # the frames' windows, and nothing outside them, got a gradient
    n = mat.shape[0]
    assert changed[:, st:st + (F - 1) * H + n].all()
    assert not changed[:, :st].any() and not changed[:, st + (F - 1) * H + n:].any()


def test_dft_power_adjoint_overlapping_frames():
    rng = np.random.default_rng(10)
    n, B, F, H, st = 16, 6, 3, 4, 5
    mat = rng.standard_normal((n, 2 * B))
    _check(rng.standard_normal((2, st + (F - 1) * H + n + 3)), st, F, H, mat,
           rng.random(B), np.array([0, 0, 1, 2, 2, 3]), 4, rng)


def test_dft_power_adjoint_on_the_stage_window():
    s = Spectrum(SpectrumParams(fs=32000.0))
    rule = sg.SpectrumGrad(s)
    n, start, mat, _, gain, grp = rule.windows[0]
    assert n == 2048
    rng = np.random.default_rng(11)
    H = s.coeffs.hop
    _check(0.05 * rng.standard_normal((1, n + H + 7)), 3, 2, H, mat, gain,
           grp.astype(np.int64), s.coeffs.comp_hz.size, rng)


def test_spectrum_rule_declares_the_triton_adjoint():
    assert sg.SpectrumGrad.kernels.has_triton
    assert sg.SpectrumGrad.kern.dft_power_adjoint is sg.dft_power_adjoint
    assert sg.SpectrumGrad.device_ready is True              # frame layers bind it
