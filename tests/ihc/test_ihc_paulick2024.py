"""IHCPaulick2024: CASP 2024 inner-hair-cell receptor potential (MET conductance +
membrane ODE) as a streaming stage.

Covers: the pre-charged resting state, block invariance (float32/float64, both
integrators), that the state is really carried (vs the seed's per-call pre-charge),
physiological behaviour (depolarisation, AC+DC, saturation, membrane low-pass),
snapshot/restore, reset, and rejection of bad input.
"""
from __future__ import annotations

import numpy as np
import pytest

from rtamt.engine.stage import RtamtInputError
from rtamt.ihc.paulick2024 import (
    IHCPaulick2024,
    IHCPaulick2024Params,
    equilibrium_potential,
    met_conductance,
    precharge,
)

from _helpers import max_rel_err, random_partition, run_blocks

FS = 44100.0
N = 9600
ALPHA = 10.0 ** (-105.0 / 20.0)  # stereocilia displacement per BM velocity (s)


def _velocity(n=N, fs=FS, seed=0, channels=(250.0, 1000.0, 4000.0, 8000.0)):
    """BM-velocity-like test input (m/s), (C, T): per channel a tone at its own
    frequency with an abrupt onset, a silent gap and a louder re-onset, plus noise.
    Amplitudes 1..20 mm/s = 6..110 nm stereocilia displacement (the MET range)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / fs
    x = np.zeros((len(channels), n))
    for c, f in enumerate(channels):
        a = 2e-3 * (1 + c)
        x[c, 200:3000] = a * np.sin(2 * np.pi * f * t[200:3000])
        x[c, 4000:] = 4 * a * np.sin(2 * np.pi * f * t[4000:] + c)
        x[c] += 0.5e-3 * rng.standard_normal(n)
    return x


def _seed_reference(vel, fs, v_start=-57.03e-3, g_pc=3.3514e-9, dur=50e-3):
    """The seed's offline algorithm, written from its documentation: scale velocity to
    displacement, MET conductance, pre-charge ``round(fs*dur)`` forward-Euler steps at a
    fixed conductance from ``v_start``, forward Euler over the signal, subtract the
    pre-charged potential.  vel: (C, T).  (Python loop over time: test use only.)"""
    ep, cm, gkf, gks, ekf, eks = 90e-3, 12.5e-12, 19.8e-9, 19.8e-9, -71e-3, -78e-3
    dt = 1.0 / fs
    d = ALPHA * np.asarray(vel, np.float64)
    g = 30e-9 / (1.0 + np.exp((20e-9 - d) / 35e-9) * (1.0 + np.exp((20e-9 - d) / 16e-9)))
    v = np.full(d.shape[0], v_start)
    for _ in range(int(round(fs * dur))):
        v = v - (g_pc * (v - ep) + gkf * (v - ekf) + gks * (v - eks)) * dt / cm
    v_pc = v.copy()
    out = np.empty_like(d)
    for i in range(d.shape[1]):
        v = v + (-g[:, i] * (v - ep) - gkf * (v - ekf) - gks * (v - eks)) * dt / cm
        out[:, i] = v
    return out - v_pc[:, None]


def _steady(y, fs, f, skip=0.05):
    """DC and fundamental (AC) amplitude of y over an integer number of cycles after skip s."""
    i0 = int(skip * fs)
    ncyc = int((len(y) - i0) / fs * f)
    n = int(round(ncyc * fs / f))
    seg = y[i0:i0 + n]
    t = np.arange(i0, i0 + n) / fs
    dc = seg.mean()
    ac = 2.0 * abs(np.mean(seg * np.exp(-2j * np.pi * f * t)))
    return dc, ac


# -- 1. resting potential ---------------------------------------------------------------------

def test_resting_potential_is_precharged_fixed_point():
    st = IHCPaulick2024(fs=FS)
    c = st.coeffs
    g0 = met_conductance(0.0)
    assert c.g_rest == pytest.approx(g0, rel=1e-15)
    assert c.g_rest == pytest.approx(3.3514e-9, rel=1e-5)  # the seed's hard-coded value
    v_eq = float(equilibrium_potential(g0))
    # the pre-charge lands on the analytic fixed point of the membrane equation ...
    assert abs(c.v_rest - v_eq) < 1e-12
    # ... which is -61.664 mV for the documented constants (not -57.03 mV, see below)
    assert abs(c.v_rest * 1e3 - (-61.664)) < 0.01
    # init_state holds it
    s0 = IHCPaulick2024.init_state(c, 2, 3, np.float32)
    assert s0["v"].dtype == np.float64 and s0["v"].shape == (2, 3)
    assert np.all(s0["v"] == c.v_rest)
    # silence keeps it: state and relative output, and absolute output
    y = st(np.zeros((2, 3, int(FS))))
    assert np.max(np.abs(st.state["v"] - c.v_rest)) < 1e-5 * 1e-3  # 0.01 mV ... in fact ~ulp
    assert np.max(np.abs(st.state["v"] - c.v_rest)) < 1e-15
    assert np.max(np.abs(y)) < 1e-15
    ya = IHCPaulick2024(fs=FS, output="absolute")(np.zeros(1000))
    assert np.max(np.abs(ya - c.v_rest)) < 1e-15


def test_documented_minus_57_mV_is_where_the_precharge_starts():
    """The seed documents V_rest = -57.03 mV as the result of the pre-charge; with the
    documented constant K+ conductances it is only the starting point (the resting
    potential of the Verhulst et al. 2018 model).  rtamt follows the equations."""
    c = IHCPaulick2024(fs=FS).coeffs
    assert c.v_init == -57.03e-3
    assert c.v_rest < -61e-3 and abs(c.v_rest - c.v_init) > 4e-3
    # no pre-charge: the stage starts at the documented value
    c0 = IHCPaulick2024(fs=FS, precharge_s=0.0).coeffs
    assert c0.n_precharge == 0 and abs(c0.v_rest * 1e3 - (-57.03)) < 0.01
    # pre-charge duration = round(fs * 50 ms) steps, converged (tau = Cm / Gtot = 0.29 ms)
    assert c.n_precharge == round(FS * 0.05)
    assert precharge(c) == c.v_rest
    assert abs(precharge(c, v0=0.0) - c.v_rest) < 1e-15
    # the seed's hard-coded pre-charge conductance (3.3514 nS, G(0) rounded) moves the
    # rest by 8.4 nV
    cs = IHCPaulick2024(fs=FS, precharge_conductance=3.3514e-9).coeffs
    assert 1e-9 < abs(cs.v_rest - c.v_rest) < 1e-8


# -- 2. block invariance ----------------------------------------------------------------------

@pytest.mark.parametrize("integrator", ["euler", "exponential"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("partition", ["whole", "ones", "random"])
def test_block_invariance(integrator, dtype, partition):
    x = _velocity().astype(dtype)
    ref = IHCPaulick2024(fs=FS, integrator=integrator)(x)
    assert ref.dtype == dtype and ref.shape == x.shape
    sizes = {"whole": [N], "ones": [1] * N, "random": random_partition(N)}[partition]
    got = run_blocks(IHCPaulick2024(fs=FS, integrator=integrator), x, sizes)
    assert max_rel_err(got, ref) <= 1e-12
    # float64 arithmetic inside, one rounding at the output: exact for both dtypes
    assert np.array_equal(got, ref)


def test_float32_is_rounded_float64():
    x = _velocity().astype(np.float32)
    y32 = IHCPaulick2024(fs=FS)(x)
    y64 = IHCPaulick2024(fs=FS)(x.astype(np.float64))
    assert np.array_equal(y32, y64.astype(np.float32))


def test_shapes_and_batch_rows_independent():
    x = _velocity()
    xb = np.stack([x, 0.5 * x[::-1]])
    yb = IHCPaulick2024(fs=FS)(xb)
    assert yb.shape == xb.shape
    assert np.array_equal(yb[0], IHCPaulick2024(fs=FS)(x))
    assert np.array_equal(yb[1], IHCPaulick2024(fs=FS)(0.5 * x[::-1].copy()))
    y1 = IHCPaulick2024(fs=FS)(x[2])
    assert y1.shape == (N,) and np.array_equal(y1, yb[0, 2])


def test_torch_round_trip():
    torch = pytest.importorskip("torch")
    x = _velocity().astype(np.float32)
    yt = IHCPaulick2024(fs=FS)(torch.from_numpy(x))
    assert isinstance(yt, torch.Tensor) and yt.dtype == torch.float32
    assert np.array_equal(yt.numpy(), IHCPaulick2024(fs=FS)(x))


# -- 3. the state is carried (vs the seed's per-call pre-charge) ------------------------------

def test_matches_seed_on_whole_signal():
    x = _velocity()
    ref = _seed_reference(x, FS)
    assert np.max(np.abs(ref)) > 0.02
    # with the seed's pre-charge conductance: equal up to rounding
    y = IHCPaulick2024(fs=FS, precharge_conductance=3.3514e-9)(x)
    assert np.max(np.abs(y - ref)) < 1e-14  # volts
    # default (pre-charge at G(0)): the 8.4 nV shift of the resting potential
    y = IHCPaulick2024(fs=FS)(x)
    assert np.max(np.abs(y - ref)) < 1e-8


def test_per_block_precharge_differs_from_carried_state():
    x = _velocity()
    block = 256
    sizes = [block] * (N // block) + ([N % block] if N % block else [])
    carried = run_blocks(IHCPaulick2024(fs=FS), x, sizes)
    # the seed's behaviour, blockwise: every call pre-charges again from -57.03 mV
    edges = np.cumsum([0] + sizes)
    seedwise = np.concatenate([_seed_reference(x[:, a:b], FS)
                               for a, b in zip(edges[:-1], edges[1:])], axis=1)
    # same thing with the stage: back to the fresh pre-charged state before each block
    st = IHCPaulick2024(fs=FS, precharge_conductance=3.3514e-9)
    resetwise = []
    for a, b in zip(edges[:-1], edges[1:]):
        st.reset()
        resetwise.append(st(x[:, a:b]))
    resetwise = np.concatenate(resetwise, axis=1)
    assert np.max(np.abs(resetwise - seedwise)) < 1e-14
    whole = IHCPaulick2024(fs=FS)(x)
    assert np.array_equal(carried, whole)
    scale = np.max(np.abs(whole))
    diff = np.max(np.abs(resetwise - whole))
    assert diff > 0.3 * scale, (diff, scale)
    # the error sits at the block starts: the membrane is re-charged from rest there
    starts = edges[1:-1]
    assert np.max(np.abs(resetwise[:, starts] - whole[:, starts])) > 0.3 * scale


# -- 4. physiology ----------------------------------------------------------------------------

def test_step_depolarises_to_equilibrium_and_is_asymmetric():
    st = IHCPaulick2024(fs=FS)
    v = 5e-3  # m/s -> 28 nm
    n = 2000
    up = st(np.full(n, v))
    assert np.all(up > 0) and np.all(np.diff(up) >= -1e-18)  # monotone rise, no overshoot
    target = float(equilibrium_potential(met_conductance(ALPHA * v))) - st.v_rest
    assert abs(up[-1] - target) < 1e-12 and target > 0.02  # > 20 mV depolarisation
    # 63 % of the step within ~ one membrane time constant Cm/Gtot
    c = st.coeffs
    tau = c.cm / (met_conductance(ALPHA * v) + c.gkf + c.gks)
    i63 = int(np.argmax(up >= 0.632 * target))
    assert abs(i63 / FS - tau) < 2.0 / FS
    down = IHCPaulick2024(fs=FS)(np.full(n, -v))
    # hyperpolarisation is smaller (few MET channels open at rest) and bounded by the
    # all-closed potential (K+ reversal mix, -74.5 mV)
    vmin = float(equilibrium_potential(0.0)) - st.v_rest
    assert vmin < down[-1] < 0 and abs(down[-1]) < 0.5 * up[-1]


def test_low_frequency_tone_gives_ac_and_dc():
    t = np.arange(int(0.3 * FS)) / FS
    y = IHCPaulick2024(fs=FS)(5e-3 * np.sin(2 * np.pi * 100.0 * t))
    dc, ac = _steady(y, FS, 100.0)
    assert dc > 2e-3 and ac > 5e-3  # volts: both clearly present
    assert ac > dc  # at low frequency the receptor potential follows the waveform


def test_saturation_monotone_and_bounded():
    c = IHCPaulick2024(fs=FS).coeffs
    vmax = float(equilibrium_potential(c.gmet)) - c.v_rest  # all MET channels open
    amps = np.geomspace(1e-4, 1.0, 25)  # 0.56 nm .. 5.6 um
    ss = np.array([IHCPaulick2024(fs=FS)(np.full(1000, a))[-1] for a in amps])
    assert np.all(np.diff(ss) >= 0) and np.all(ss <= vmax + 1e-15)  # (rounding at the bound)
    assert np.all(np.diff(ss[amps <= 0.05]) > 0)  # strictly increasing up to 280 nm
    assert ss[-1] > 0.999 * vmax
    # compressive: the first two decades (0.6 .. 56 nm) span most of the range, the last
    # decade (0.56 .. 5.6 um) adds less than 0.1 %
    assert ss[12] > 0.75 * vmax and ss[-1] - ss[-7] < 1e-3 * vmax
    # tones: peak and DC grow monotonically with level and stay below the bound
    t = np.arange(int(0.1 * FS)) / FS
    tone = np.sin(2 * np.pi * 500.0 * t)
    pk, dcs = [], []
    for a in np.geomspace(3e-4, 3e-1, 10):
        y = IHCPaulick2024(fs=FS)(a * tone)
        pk.append(y.max())
        dcs.append(_steady(y, FS, 500.0, skip=0.02)[0])
    assert np.all(np.diff(pk) > 0) and max(pk) < vmax
    assert np.all(np.diff(dcs) > 0) and max(dcs) < vmax


def test_ac_dc_ratio_falls_with_frequency():
    t = np.arange(int(0.2 * FS)) / FS
    freqs = [100.0, 300.0, 1000.0, 3000.0, 8000.0]
    ratios, dcs = [], []
    for f in freqs:
        y = IHCPaulick2024(fs=FS)(5e-3 * np.sin(2 * np.pi * f * t))
        dc, ac = _steady(y, FS, f)
        ratios.append(ac / dc)
        dcs.append(dc)
    assert np.all(np.diff(ratios) < 0), ratios
    assert ratios[-1] < 0.1 * ratios[0]
    assert min(dcs) > 2e-3  # the DC survives the membrane low-pass


# -- 5. snapshot / reset ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_state_dict_continues_bit_for_bit_and_reset(dtype):
    x = _velocity().astype(dtype)
    a, b = x[:, :3000], x[:, 3000:]
    st = IHCPaulick2024(fs=FS)
    st(a)
    sd = st.state_dict()
    assert set(sd["arrays"]) == {"v"} and sd["arrays"]["v"].dtype == np.float64
    y1 = st(b)
    st2 = IHCPaulick2024(fs=FS)
    st2.load_state_dict(sd)
    y2 = st2(b)
    assert np.array_equal(y1, y2)
    assert np.array_equal(np.concatenate([IHCPaulick2024(fs=FS)(a), y1], axis=1),
                          IHCPaulick2024(fs=FS)(x))
    # the snapshot is a copy
    assert not np.array_equal(sd["arrays"]["v"], st.state["v"])
    st.reset()
    assert st.state is None
    y3 = st(x)
    assert np.all(IHCPaulick2024.init_state(st.coeffs, 1, 4, dtype)["v"] == st.coeffs.v_rest)
    assert np.array_equal(y3, IHCPaulick2024(fs=FS)(x))


# -- 6. bad input -----------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_bad_input_rejected_state_untouched(bad):
    x = _velocity()
    st = IHCPaulick2024(fs=FS)
    st(x[:, :1000])
    before = st.state_dict()
    blk = x[:, 1000:2000].copy()
    blk[2, 17] = bad
    with pytest.raises(RtamtInputError, match="channel 2, sample 17"):
        st(blk)
    after = st.state_dict()
    assert after["block"] == before["block"]
    assert np.array_equal(after["arrays"]["v"], before["arrays"]["v"])
    # and the stream continues as if the bad block never came
    y = st(x[:, 1000:])
    assert np.array_equal(y, IHCPaulick2024(fs=FS)(x)[:, 1000:])


def test_bad_params():
    with pytest.raises(ValueError, match="unstable"):
        IHCPaulick2024(fs=2000.0)
    with pytest.raises(ValueError):
        IHCPaulick2024(fs=FS, integrator="rk4")
    with pytest.raises(ValueError):
        IHCPaulick2024(fs=FS, output="mV")
    with pytest.raises(ValueError):
        IHCPaulick2024(fs=FS, cm=0.0)


# -- integrators ------------------------------------------------------------------------------

def test_exponential_integrator():
    # same fixed points, close trajectories at audio rates, stable at low rates
    xe = _velocity()
    ye = IHCPaulick2024(fs=FS, integrator="euler")(xe)
    yx = IHCPaulick2024(fs=FS, integrator="exponential")(xe)
    assert IHCPaulick2024(fs=FS, integrator="exponential").v_rest == pytest.approx(
        IHCPaulick2024(fs=FS).v_rest, abs=1e-15)
    assert max_rel_err(yx, ye) < 0.05
    st = IHCPaulick2024(fs=1000.0, integrator="exponential")
    y = st(np.full(200, 1.0))
    c = st.coeffs
    assert abs(y[-1] - (float(equilibrium_potential(c.gmet)) - c.v_rest)) < 1e-4
    assert np.all(np.isfinite(y)) and np.all(np.diff(y) >= -1e-15)


def test_params_dataclass_round_trip():
    p = IHCPaulick2024Params(fs=48000.0, output="absolute")
    st = IHCPaulick2024(p)
    assert st.params is p and st.coeffs.offset == 0.0
    assert IHCPaulick2024(p, output="relative").coeffs.offset == st.coeffs.v_rest
