"""Physiological inner-hair-cell (IHC) receptor potential of the revised CASP model (streaming).

Paulick, Relaño-Iborra & Dau (2024) replaced the rectify-and-low-pass IHC of CASP
(Jepsen et al. 2008) with a small electrical model of the IHC: basilar-membrane
(BM) velocity deflects the stereocilia, the deflection opens mechano-electrical
transduction (MET) channels, and the MET current charges the cell membrane against
two basolateral potassium currents.  The circuit is the one of Altoè, Pulkki &
Verhulst (2018, Appendix A) and Verhulst, Altoè & Vasilkov (2018, Appendix A), with
the potassium conductances held constant (the CASP simplification; reference
implementation: AMT 1.6 ``paulick2024_ihc``).

Provenance: the equations and constants below were checked against the AMT 1.6
reference implementation (``paulick2024_ihc``, by the first author of the paper) and
the seed documentation; the equation/table numbers of Altoè et al. (2018) are those
that AMT's ``verhulst2018_ihctransduction`` cites.  The paper text itself was not
available when this stage was written.

Equations (per channel, sample period ``dt = 1/fs``)
----------------------------------------------------
1. Stereocilia displacement from BM velocity ``v`` (m/s) [Paulick et al. 2024;
   AMT ``paulick2024_ihc``]::

       d = alpha * v,        alpha = 10^(scale_db/20) s,  scale_db = -105 dB

2. MET conductance, second-order Boltzmann function of ``d`` [Altoè et al. 2018,
   Eq. A2; Verhulst et al. 2018, Eq. A2]::

       G(d) = Gmet / (1 + exp((x0 - d)/s1) * (1 + exp((x0 - d)/s0)))

   (the slow, wide factor ``s1`` outside, the steep factor ``s0`` inside).

3. Membrane potential ``V`` [Altoè et al. 2018, Eqs. A1, A4, A7]::

       Cm dV/dt = G(d) (EP - V) + Gkf (Ekf - V) + Gks (Eks - V)

   with constant ``Gkf``, ``Gks`` (CASP 2024 simplification of the voltage-gated
   K+ channels of Altoè et al. 2018).

4. Time stepping (fixed, one step per sample; sample n uses ``G(d[n])`` and
   outputs the updated ``V[n]``):

   * ``integrator="euler"`` (default, as AMT ``paulick2024_ihc`` and the seed
     documentation): forward Euler, ``V[n] = V[n-1] + dt/Cm * I(V[n-1], G[n])``.
     Stable only for ``dt (Gmet + Gkf + Gks) / Cm < 2``, i.e. ``fs > 2784 Hz``
     with the default constants; :func:`design` raises otherwise.
   * ``integrator="exponential"``: exact solution of the linear ODE over one
     step with ``G`` held at ``G[n]`` (exponential Euler, as in Rush & Larsen
     1978): ``V[n] = Vinf + (V[n-1] - Vinf) exp(-dt Gtot/Cm)``,
     ``Gtot = G + Gkf + Gks``, ``Vinf = (G EP + Gkf Ekf + Gks Eks)/Gtot``.
     Unconditionally stable (not in the seed; an rtamt option).

5. Output: ``V - V_rest`` in volts (``output="relative"``, default; AMT and the
   seed subtract the pre-charged potential) or ``V`` in volts
   (``output="absolute"``).

Constants (defaults) and sources
--------------------------------
==================  ===========  =====================================================
``scale_db``        -105 dB      Paulick et al. 2024 (AMT ``paulick2024_ihc``)
``gmet``            30 nS        Altoè et al. 2018, Table 1
``x0``              20 nm        Altoè et al. 2018, Table 1
``s0``, ``s1``      16, 35 nm    Altoè et al. 2018, Table 1 (Verhulst 2018 code: s1 = 48 nm)
``ep``              +90 mV       endocochlear potential; Altoè et al. 2018, Table 1
``cm``              12.5 pF      Altoè et al. 2018, Table 1
``gkf``, ``gks``    19.8 nS      Altoè et al. 2018, Table 1 (resting K+ conductance),
                                 held constant in CASP 2024
``ekf``, ``eks``    -71, -78 mV  Altoè et al. 2018, Table 1
``v_init``          -57.03 mV    start of the pre-charge; the resting potential of the
                                 Verhulst et al. (2018) IHC model
``precharge_s``     50 ms        AMT ``paulick2024_ihc``
==================  ===========  =====================================================

Resting potential (deviation from the seed documentation)
---------------------------------------------------------
The seed documentation states that the 50 ms pre-charge "reaches" a resting
potential of -57.03 mV.  It does not: -57.03 mV is where the pre-charge *starts*
(the equilibrium of the Verhulst et al. 2018 model with voltage-gated K+
channels).  With constant ``Gkf = Gks = 19.8 nS`` and the resting MET conductance
``G(0) = 3.3514 nS`` the membrane equation has the single fixed point::

    V_rest = (G(0) EP + Gkf Ekf + Gks Eks) / (G(0) + Gkf + Gks) = -61.664 mV,

which the pre-charge reaches after ~170 membrane time constants (tau = Cm /
Gtot = 0.29 ms).  rtamt keeps the published constant-conductance equations and
constants rather than retuning one of them to make -57.03 mV the rest, which would
no longer be the published model: it computes the pre-charge exactly as specified (so
its state is the one the reference code produces) and reports the true value
(:attr:`IHCPaulick2024Coeffs.v_rest`).  Both values are tested.

Streaming (deviation from the seed, by design)
----------------------------------------------
The seed and AMT are offline: every call starts again from ``v_init``, runs the
pre-charge, then integrates.  rtamt runs the pre-charge once, in :func:`design`
(``init_state`` copies the result), and carries ``V`` across blocks, so any block
partition gives bit-identical output to one call on the whole signal.  For one
call on a whole signal from a fresh state the two agree (to 1e-14 V with the
seed's pre-charge conductance, to 8.4 nV by default; see the note below).

Other notes
-----------
* The pre-charge uses the model's own resting conductance ``G(0)`` (computed,
  3.35140237 nS) where the seed hard-codes 3.3514 nS (G(0) rounded); the resting
  potentials differ by 8.4 nV.  Pass ``precharge_conductance=3.3514e-9`` to reproduce
  the seed to rounding.  With ``G(0)`` the pre-charged state is also the state of
  silence, so silence in gives (to a few ulp) 0 V out.
* Arithmetic is float64 whatever the input dtype; float32 input gives float32
  output (rounded once, at the end), so float32 streams are block-invariant
  bit for bit as well.  The state ``v`` is float64 ``(batch, C)``.
* There is no MET activation time constant (Verhulst et al. 2018 have 50 µs);
  CASP 2024 uses the instantaneous Boltzmann function.

Input: BM velocity in m/s, ``(T,)``, ``(C, T)`` or ``(batch, C, T)`` (the output of
the CASP DRNL stage, AMT ``paulick2024_drnl``).  The MET function covers
displacements of roughly -50 .. +150 nm, i.e. velocities of about -10 .. +30 mm/s.

References
----------
L. Paulick, H. Relaño-Iborra, T. Dau (2024). The Computational Auditory Signal
Processing and Perception Model (CASP): a revised version. bioRxiv
2024.02.02.578582.

A. Altoè, V. Pulkki, S. Verhulst (2018). The effects of the activation of the
inner-hair-cell basolateral K+ channels on auditory nerve responses. Hear. Res.
364, 68-80 (Appendix A, Table 1).

S. Verhulst, A. Altoè, V. Vasilkov (2018). Computational modeling of the human
auditory periphery: auditory-nerve responses, evoked potentials and hearing loss.
Hear. Res. 360, 55-75 (Appendix A).

S. Rush, H. Larsen (1978). A practical algorithm for solving dynamic membrane
equations. IEEE Trans. Biomed. Eng. 25, 389-392.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from ..engine.backend import Kernels, kernel_method
from ..engine.jit import JIT as _JIT
from ..engine.stage import Stage

__all__ = ["IHCPaulick2024", "IHCPaulick2024Params", "IHCPaulick2024Coeffs", "design",
           "met_conductance", "equilibrium_potential", "precharge"]

_INTEGRATORS = {"euler": 0, "exponential": 1}
_OUTPUTS = ("relative", "absolute")


@dataclass(frozen=True)
class IHCPaulick2024Params:
    """User parameters (SI units: s, m, S, F, V).  Defaults: Paulick et al. 2024 /
    Altoè et al. 2018 (see the module table).

    ``precharge_conductance``: MET conductance during the pre-charge; ``None`` =
    ``G(0)``, the model's resting conductance.  ``integrator``: ``"euler"`` or
    ``"exponential"``.  ``output``: ``"relative"`` (V - V_rest) or ``"absolute"`` (V).
    """

    fs: float
    scale_db: float = -105.0
    gmet: float = 30e-9
    x0: float = 20e-9
    s0: float = 16e-9
    s1: float = 35e-9
    ep: float = 90e-3
    cm: float = 12.5e-12
    gkf: float = 19.8e-9
    gks: float = 19.8e-9
    ekf: float = -71e-3
    eks: float = -78e-3
    v_init: float = -57.03e-3
    precharge_s: float = 0.05
    precharge_conductance: float | None = None
    integrator: str = "euler"
    output: str = "relative"


@dataclass(frozen=True)
class IHCPaulick2024Coeffs:
    """Designed constants.  ``alpha`` (s): velocity -> displacement; ``inv_s0``,
    ``inv_s1`` (1/m); ``k = dt/Cm``; ``g_rest = G(0)``; ``n_precharge`` steps;
    ``v_rest``: the pre-charged membrane potential (V); ``offset``: subtracted from
    ``V`` at the output (``v_rest`` or 0); ``method``: 0 Euler, 1 exponential."""

    fs: float
    dt: float
    alpha: float
    gmet: float
    x0: float
    inv_s0: float
    inv_s1: float
    ep: float
    cm: float
    gkf: float
    ekf: float
    gks: float
    eks: float
    k: float
    g_rest: float
    g_precharge: float
    n_precharge: int
    v_init: float
    v_rest: float
    offset: float
    method: int


# -- kernels -------------------------------------------------------------------------------

@njit(**_JIT)
def _met_g(d, gmet, x0, inv_s0, inv_s1):
    """MET conductance of displacement d (Altoè et al. 2018, Eq. A2)."""
    u = x0 - d
    return gmet / (1.0 + math.exp(u * inv_s1) * (1.0 + math.exp(u * inv_s0)))


@njit(**_JIT)
def _step(vm, g, ep, gkf, ekf, gks, eks, k, method):
    """One sample of the membrane equation (Altoè et al. 2018, Eq. A1) with MET
    conductance g held over the step; k = dt/Cm."""
    if method == 0:
        # forward Euler
        return vm + k * (g * (ep - vm) + gkf * (ekf - vm) + gks * (eks - vm))
    gt = g + gkf + gks
    vinf = (g * ep + gkf * ekf + gks * eks) / gt
    return vinf + (vm - vinf) * math.exp(-k * gt)


@njit(**_JIT)
def precharge_kernel(v0, g, n, ep, gkf, ekf, gks, eks, k, method):
    """Integrate n steps at constant MET conductance g from v0; return V."""
    vm = v0
    for _ in range(n):
        vm = _step(vm, g, ep, gkf, ekf, gks, eks, k, method)
    return vm


@njit(**_JIT)
def ihc_paulick2024_kernel(alpha, gmet, x0, inv_s0, inv_s1, ep, gkf, ekf, gks, eks, k,
                           method, offset, v, x, y):
    """BM velocity -> receptor potential, time-major.

    v : (B, C) float64 membrane potential (state, advanced in place).
    x : (B, T, C) float32/float64 BM velocity (m/s); y : (B, T, C) output (V), same
    dtype as x; all arithmetic in float64.
    """
    B, T, C = x.shape
    for b in range(B):
        for t in range(T):
            for c in range(C):
                d = alpha * np.float64(x[b, t, c])
                g = _met_g(d, gmet, x0, inv_s0, inv_s1)
                vm = _step(v[b, c], g, ep, gkf, ekf, gks, eks, k, method)
                v[b, c] = vm
                y[b, t, c] = vm - offset


# -- design ----------------------------------------------------------------------------------

def met_conductance(d, params_or_coeffs=None):
    """MET conductance (S) of stereocilia displacement ``d`` (m), vectorised numpy
    (Altoè et al. 2018, Eq. A2).  Constants from params/coeffs (default: Paulick 2024)."""
    p = params_or_coeffs if params_or_coeffs is not None else IHCPaulick2024Params(fs=44100.0)
    s0 = 1.0 / p.inv_s0 if hasattr(p, "inv_s0") else p.s0
    s1 = 1.0 / p.inv_s1 if hasattr(p, "inv_s1") else p.s1
    u = p.x0 - np.asarray(d, dtype=np.float64)
    with np.errstate(over="ignore"):
        return p.gmet / (1.0 + np.exp(u / s1) * (1.0 + np.exp(u / s0)))


def equilibrium_potential(g, params_or_coeffs=None):
    """Steady-state membrane potential (V) for a constant MET conductance ``g`` (S):
    ``(g EP + Gkf Ekf + Gks Eks) / (g + Gkf + Gks)`` (fixed point of Eq. A1)."""
    p = params_or_coeffs if params_or_coeffs is not None else IHCPaulick2024Params(fs=44100.0)
    g = np.asarray(g, dtype=np.float64)
    return (g * p.ep + p.gkf * p.ekf + p.gks * p.eks) / (g + p.gkf + p.gks)


def precharge(coeffs: IHCPaulick2024Coeffs, v0: float | None = None) -> float:
    """Run the pre-charge (``n_precharge`` steps at ``g_precharge``) from ``v0``
    (default ``coeffs.v_init``) with the stage's integrator; returns V (volts)."""
    c = coeffs
    return float(precharge_kernel(float(c.v_init if v0 is None else v0), c.g_precharge,
                                  c.n_precharge, c.ep, c.gkf, c.ekf, c.gks, c.eks, c.k, c.method))


def design(params: IHCPaulick2024Params, n_in=None) -> IHCPaulick2024Coeffs:
    """Validate the parameters, derive the step constants and run the pre-charge once."""
    p = params
    if not (np.isfinite(p.fs) and p.fs > 0):
        raise ValueError(f"fs must be a positive finite number, got {p.fs}")
    if p.integrator not in _INTEGRATORS:
        raise ValueError(f"unknown integrator {p.integrator!r}; choose from {sorted(_INTEGRATORS)}")
    if p.output not in _OUTPUTS:
        raise ValueError(f"unknown output {p.output!r}; choose from {list(_OUTPUTS)}")
    for name in ("cm", "s0", "s1"):
        if not getattr(p, name) > 0:
            raise ValueError(f"{name} must be > 0, got {getattr(p, name)}")
    for name in ("gmet", "gkf", "gks"):
        if not getattr(p, name) >= 0:
            raise ValueError(f"{name} must be >= 0, got {getattr(p, name)}")
    if not p.gkf + p.gks > 0:
        raise ValueError("gkf + gks must be > 0 (the membrane needs a resting conductance)")
    if not p.precharge_s >= 0:
        raise ValueError(f"precharge_s must be >= 0, got {p.precharge_s}")
    dt = 1.0 / float(p.fs)
    k = dt / p.cm
    method = _INTEGRATORS[p.integrator]
    gmax_total = p.gmet + p.gkf + p.gks
    if method == 0 and k * gmax_total >= 2.0:
        raise ValueError(
            f"forward Euler is unstable at fs = {p.fs} Hz: dt*Gtot/Cm = {k * gmax_total:.3f} >= 2 "
            f"(needs fs > {gmax_total / (2 * p.cm):.0f} Hz); use integrator='exponential'")
    alpha = 10.0 ** (p.scale_db / 20.0)
    inv_s0, inv_s1 = 1.0 / p.s0, 1.0 / p.s1
    g_rest = float(_met_g(0.0, p.gmet, p.x0, inv_s0, inv_s1))
    g_pc = g_rest if p.precharge_conductance is None else float(p.precharge_conductance)
    if not g_pc >= 0:
        raise ValueError(f"precharge_conductance must be >= 0, got {g_pc}")
    n_pc = int(math.floor(p.fs * p.precharge_s + 0.5))  # round half up, as MATLAB round
    v_rest = float(precharge_kernel(float(p.v_init), g_pc, n_pc, p.ep, p.gkf, p.ekf, p.gks, p.eks,
                                    k, method))
    offset = v_rest if p.output == "relative" else 0.0
    return IHCPaulick2024Coeffs(
        fs=float(p.fs), dt=dt, alpha=alpha, gmet=float(p.gmet), x0=float(p.x0), inv_s0=inv_s0,
        inv_s1=inv_s1, ep=float(p.ep), cm=float(p.cm), gkf=float(p.gkf), ekf=float(p.ekf),
        gks=float(p.gks), eks=float(p.eks), k=k, g_rest=g_rest, g_precharge=g_pc,
        n_precharge=n_pc, v_init=float(p.v_init), v_rest=v_rest, offset=offset, method=method)


def _triton():
    """The Triton twin (:mod:`rtamt.ihc.paulick2024_triton`), imported on first binding."""
    from . import paulick2024_triton
    return (paulick2024_triton.ihc_paulick2024_kernel,)


class IHCPaulick2024(Stage):
    """Streaming CASP 2024 IHC: BM velocity (m/s) ``(…, C, T)`` -> receptor potential (V),
    same shape; relative to the resting potential unless ``output="absolute"``.

    State: ``{"v": (batch, C) float64}``, initialised to the pre-charged potential
    ``coeffs.v_rest`` (the pre-charge runs once, in :func:`design`).
    """

    name = "ihc"
    Params = IHCPaulick2024Params
    design = staticmethod(design)
    kernels = Kernels(numba=(ihc_paulick2024_kernel,), triton=_triton)

    @classmethod
    def grad_rule(cls):
        from .paulick2024_grad import IHCPaulick2024Grad
        return IHCPaulick2024Grad

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        # float64 whatever the stream dtype: the ODE is integrated in float64
        return {"v": np.full((batch, n_in), coeffs.v_rest, np.float64)}

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        """Advance ``state["v"]`` over ``x`` (B, T, C) BM velocity (m/s); return the
        receptor potential (B, T, C) (V) in x's dtype: :func:`ihc_paulick2024_kernel`, or
        its Triton twin (:mod:`rtamt.ihc.paulick2024_triton`) on the stage's bound
        kernels."""
        c = coeffs
        k = stage.kern
        x = k.contiguous(x)
        y = k.buffer(out, x.shape, x)
        k.ihc_paulick2024_kernel(c.alpha, c.gmet, c.x0, c.inv_s0, c.inv_s1, c.ep, c.gkf,
                                 c.ekf, c.gks, c.eks, c.k, c.method, c.offset, state["v"],
                                 x, y)
        return y

    @property
    def v_rest(self) -> float:
        """The pre-charged (resting) membrane potential in volts."""
        return self.coeffs.v_rest

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("ihc-paulick2024", dict(fs=48000.0), "bands"),
                Example("ihc-paulick2024-exponential",
                        dict(fs=48000.0, integrator="exponential"), "bands"))
