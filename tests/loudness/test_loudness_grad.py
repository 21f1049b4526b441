"""Gradient rules of the loudness models' frame stages (issue 42 item 2): each rule
against central finite differences of its stage's forward pass (tests/support/
_framegrad.py), w.r.t. what it reads, its float state and its learnable vector, on both
sides of every switch; the excitation's adjoint against torch's autograd through a float64
form of it."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _framegrad import check_rule

from rtamt.loudness.agc import LoudnessIntegrator, SpecificLoudnessAGC
from rtamt.loudness.binaural import BinauralInhibition
from rtamt.loudness.excitation import Excitation, excitation
from rtamt.loudness.specific_loudness import InstantaneousLoudness, SpecificLoudness
from rtamt.loudness.spectrum import ReferenceSpectrumParams, Spectrum, SpectrumParams
from rtamt.loudness.tvl2018 import ComponentFloor, EarFIR
from rtamt.models import Glasberg2002, Moore2016

RNG = np.random.default_rng


@pytest.fixture(scope="module")
def g2002():
    return Glasberg2002(32000)


def test_loudness_integrator_both_sides_of_the_switch():
    """Attack and release frames both occur (the input crosses the output), in both
    layouts of the source (the STL's (R, F), the LTL's (F, R)); the coefficients' time
    constants are learnable."""
    R, F = 2, 12
    x = np.abs(RNG(0).standard_normal((R, F))) * np.array([[1.0], [3.0]])
    st = {"stl": np.array([0.8, 1.5])}
    s = LoudnessIntegrator(attack=0.3, release=0.1, source="inst", key="stl", transpose=True)
    lt = st["stl"].copy()
    ups = 0
    for f in range(F):                      # the switch takes both branches
        ups += int(np.sum(x[:, f] > lt))
        lt = lt + np.where(x[:, f] > lt, 0.3, 0.1) * (x[:, f] - lt)
    assert 0 < ups < R * F
    check_rule(s, {"inst": x, "R": R, "F": F}, st, th=np.array([0.2, -0.3]))
    s2 = LoudnessIntegrator(attack=0.3, release=0.1, source="stl", key="ltl")
    check_rule(s2, {"stl": np.ascontiguousarray(x.T), "R": R, "F": F},
               {"ltl": np.array([0.8, 1.5])}, th=np.array([-0.1, 0.4]))


def test_specific_loudness_agc():
    R, F, K = 2, 7, 5
    N = np.abs(RNG(1).standard_normal((R * F, K)))
    s = SpecificLoudnessAGC(attack=0.2, release=0.05, channels=K)
    check_rule(s, {"N": N, "R": R, "F": F}, {"st": np.full((R, K), 0.7)},
               th=np.array([0.3, -0.2]))


@pytest.mark.parametrize("threshold", ["ansi", "program"])
def test_specific_loudness_every_branch(g2002, threshold):
    """Below threshold, above it, above 1e10 (eq. 19) and at 0 excitation, each present;
    learnable C; the threshold table of the program (tvl2018) too."""
    fc = tuple(g2002.fc)
    if threshold == "ansi":
        s = SpecificLoudness(fc=fc, C=0.046871)
    else:
        s = Moore2016(32000, config="tvl2018").specific
    c = s.coeffs
    K = c.fc.size
    E = np.empty((4, K))
    E[0] = c.ethrq * 0.3                              # below threshold
    E[1] = c.ethrq * 50.0                              # above
    E[2] = 10 ** RNG(2).uniform(10.5, 12, K)           # eq. 19
    E[3] = c.ethrq * RNG(3).uniform(0.5, 2.0, K)       # both sides of the threshold
    assert (E[3] < c.ethrq).any() and (E[3] > c.ethrq).any()
    pairs = check_rule(s, {"E": E, "R": 4, "F": 1}, {}, th=np.array([0.1]), relative=True,
                       eps=1e-7, rtol=1e-6)
    assert all(a != 0 for _, a, _ in pairs)
    z = np.zeros((1, K))                             # E = 0: N' = 0, gradient 0
    rule = type(s).grad_rule()(s, 1)
    gin, _ = rule.backward(s, {"E": z, "R": 1, "F": 1, "out": {}}, {}, {"N": np.ones((1, K))},
                           {}, None)
    assert not gin["E"].any()


def test_instantaneous_loudness():
    s = InstantaneousLoudness(ear_factor=2.0)
    check_rule(s, {"N": np.abs(RNG(4).standard_normal((6, 9))), "R": 2, "F": 3}, {})


def _torch_excitation(c, P):
    """A float64 torch form of the excitation (ANSI S3.4-2007 §3.5; the kernel's tables,
    no float32 rounding)."""
    nf = c.fc.size
    lvl = P @ torch.from_numpy(c.sym_t)
    E = P @ torch.from_numpy(c.up_t)
    s = 1.0 - c.c_slope * (10.0 / math.log(10.0) * torch.log(torch.clamp(lvl, min=1e-10))
                           - 51.0)
    ii, jj, qq = [], [], []
    for j in range(c.i0.size):
        for q in range(int(c.cnt[j])):
            if int(c.i0[j]) + q < nf:
                ii.append(int(c.i0[j]) + q)
                jj.append(j)
                qq.append(int(c.seg[j]) + q)
    ii, jj, qq = (torch.tensor(v) for v in (ii, jj, qq))
    a = torch.from_numpy(c.a.astype(np.float64))[qq]
    b = torch.from_numpy(c.b.astype(np.float64))[qq]
    t = torch.maximum(b, a * s[:, jj])
    W = (1.0 + t * math.log(2.0)) * torch.exp2(-t)
    return E.index_add(1, ii, W * P[:, jj]), (a * s[:, jj] > b)


@pytest.mark.parametrize("model", ["glasberg2002", "tvl2018"])
def test_excitation_adjoint_equals_autograd_of_a_float64_form(model):
    """The adjoint (incl. the level per ERB's path and the dB output) equals torch's
    autograd through the float64 form to 1e-10, with the lower slope both on its floor
    (p = 0.1, very high levels) and above it; the float64 form is the kernel's function
    (within its float32 rounding)."""
    s = Glasberg2002(32000).excitation if model == "glasberg2002" else \
        Moore2016(32000, config="tvl2018").excitation
    c = s.coeffs
    J = c.i0.size
    P = 10 ** RNG(5).uniform(0, 7, (3, J))
    P[2] = 10 ** RNG(6).uniform(12, 15, J)           # the floor of the lower slope
    P[1, ::7] = 0.0                                 # absent components
    Pt = torch.from_numpy(P).requires_grad_(True)
    E, above = _torch_excitation(c, Pt)
    assert above.any() and (~above).any()
    np.testing.assert_allclose(E.detach().numpy(), excitation(c, P), rtol=3e-6)
    gE = torch.from_numpy(RNG(7).standard_normal(E.shape))
    gdb = torch.from_numpy(RNG(8).standard_normal(E.shape))
    (E * gE + 10.0 * torch.log10(torch.clamp(E, min=1e-10)) * gdb).sum().backward()
    stage = Excitation(comp_hz=tuple(s.params.comp_hz), level_db=True)
    rule = Excitation.grad_rule()(stage, 1)
    gin, _ = rule.backward(stage, {"P": P, "R": 3, "F": 1, "out": {"E": E.detach().numpy()}},
                           {}, {"E": gE.numpy(), "E_db": gdb.numpy()}, {}, None)
    ref = Pt.grad.numpy()
    assert np.max(np.abs(gin["P"] - ref)) <= 1e-10 * np.max(np.abs(ref))


def _warm_spectrum(s, R, seed):
    st = s.init_state(R)
    s.process_tm({"rows": RNG(seed).standard_normal((R, 2600)) * 0.05}, st)
    return st


@pytest.mark.parametrize("params", [
    SpectrumParams(fs=32000.0, method="direct"),
    SpectrumParams(fs=32000.0, method="direct", comp_cam=0.0, field="diffuse"),
    ReferenceSpectrumParams(fs=32000.0, method="direct")], ids=["direct", "bins", "program"])
def test_spectrum_rows_and_history(params):
    """The windowed DFT powers (ear gain, bin grouping, the program's window and scaling)
    w.r.t. the block and the history (all windows direct: the history is the whole
    state)."""
    s = Spectrum(params)
    st = _warm_spectrum(s, 2, 9)
    rows = RNG(10).standard_normal((2, 100)) * 0.05
    check_rule(s, {"rows": rows}, st, rtol=1e-8, eps=1e-2)     # quadratic: exact differences


def test_spectrum_chunk_and_autocorr_methods():
    """The forward pass's methods (hopping DFT, autocorrelation) have the same gradient:
    w.r.t. the block from a warm state (the rings are a function of the history, their
    gradient is counted in it: tests/nn/test_loudness_layers_grad.py)."""
    s = Spectrum(SpectrumParams(fs=32000.0))
    assert {p.method for p in s.coeffs.plans} >= {"chunk", "autocorr"}
    st = _warm_spectrum(s, 1, 11)
    check_rule(s, {"rows": RNG(12).standard_normal((1, 90)) * 0.05}, st, rtol=1e-8,
               skip_state=tuple(st), eps=1e-2)


def test_binaural_inhibition_both_ears_one_silent_and_diotic():
    """Ear pairs with both ears heard, one ear silent (the held inhibition), and a
    diotic row; the long-term integrator on both sides of its switch; learnable p and
    time constants.  (A silent ear whose long-term loudness is 0 sits on the integrator's
    switch, ``x == y``, where the one-sided derivatives differ: the state avoids it.)"""
    K, F = 150, 6
    cam = tuple(1.75 + 0.25 * np.arange(K))
    s = BinauralInhibition(cam=cam, attack=0.3, release=0.1)
    rng = RNG(13)
    st = np.abs(rng.standard_normal((F, 4, K)))
    st[:, 3] = 0.0                                 # pair 1: the right ear silent
    st[:, 1] *= 0.5
    E = 10 ** rng.uniform(-12, 5, (4 * F, K))       # some below the dB floor
    check_rule(s, {"st": st, "E": E, "R": 4, "F": F}, {"lt": np.array([10.0, 0.1, 5.0, 0.2])},
               th=np.array([0.1, 0.2, -0.2]), rtol=1e-5, relative=True)
    st1 = np.abs(rng.standard_normal((F, 1, K)))
    check_rule(s, {"st": st1, "E": E[:F], "R": 1, "F": F}, {"lt": np.array([3.0])},
               th=np.array([0.1, 0.2, -0.2]), rtol=1e-5, relative=True)


def test_ear_fir_and_component_floor():
    s = EarFIR(fs=32000.0, order=64)
    check_rule(s, {"rows": RNG(14).standard_normal((2, 50))},
               {"hist": RNG(15).standard_normal((2, 64))})
    f = ComponentFloor()
    P = 10 ** RNG(16).uniform(-6, 9, (4 * 3, 40))
    thr_min, rel = f.coeffs
    out = P.copy()
    from rtamt.loudness.tvl2018 import component_floor
    component_floor(out, 4, 3, 2, thr_min, rel)
    assert (out == 0).any() and (out != 0).any()          # both sides of the floor
    check_rule(f, {"P": P, "R": 4, "F": 3}, {}, relative=True, eps=1e-8)
