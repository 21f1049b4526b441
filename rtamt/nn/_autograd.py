"""``torch.autograd.Function`` around one rtamt stage: the forward pass is the stage's own
``process_tm`` (the compiled kernel of :mod:`rtamt.engine.kernels`, bit-exact), the
backward pass the stage's adjoint recursion (:mod:`rtamt.nn.adjoint`).

A stage is differentiable when :data:`GRADS` has a rule for its class (and the rule
accepts its design): :class:`GammatoneGrad`, :class:`SOSGrad` (the IHC envelope),
:class:`AdaptLoopGrad`, :class:`ModFilterbankGrad` (the ``efilt`` and Butterworth banks),
:class:`HighpassGrad` (King2019's adaptation high-pass),
:class:`KingModFilterbankGrad` (King2019's modulation bank), :class:`FIRGrad` (the ear
filters) and the compressions (:class:`BrokenStickGrad`, :class:`PowerGrad`).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
from scipy import signal
from torch.autograd.function import once_differentiable

from ..adaptation.adaptloop import AdaptLoop
from ..adaptation.highpass import AdaptHighpass
from ..ear.filters import HeadphoneFilter, MiddleEarFilter, OuterMiddleEarFilter
from ..engine import kernels as K
from ..filterbank.erb import erb
from ..filterbank.gammatone import Gammatone, bandwidth_factor
from ..ihc.envelope import IHCEnvelope
from ..modulation.king2019 import KingModFilterbank
from ..modulation.modfb import ModFilterbank
from ..nonlinear.compression import BrokenStick, PowerCompression
from . import adjoint as A


def _np(t: torch.Tensor) -> np.ndarray:
    """A float64 host copy of ``t`` that a kernel may write."""
    return np.array(t.detach().cpu().numpy(), dtype=np.float64, copy=True)


def _read(t: torch.Tensor) -> np.ndarray:
    """A float64 host array of ``t`` for kernels that only read it: a view, in any
    strides, when ``t`` is a float64 CPU tensor (an output gradient can be hundreds of
    MB), else a converted copy in the same memory order."""
    a = t.detach().cpu().numpy()
    return a if a.dtype == np.float64 else a.astype(np.float64, order="K")


class StageGrad:
    """The backward rule of one stage, made once per layer stage from the stage and its
    designed coefficients (``self.coeffs0``).

    Learnable parameters: ``n_params`` values (0: none), a vector ``th`` in an
    unconstrained parametrisation (every real ``th`` gives a stable design; ``th = 0`` is
    the design itself, bit for bit).  ``coeffs_for(th)`` designs the coefficients for
    ``th`` (``None``: the design); ``learned(th)`` gives the physical values by name.

    ``backward(coeffs, th, x, state, gy, mu)`` gets the coefficients of the forward
    pass, ``th`` (``None`` when no parameter gradient is wanted), the block input ``x``
    (time-major), the incoming ``state`` (float64 numpy copies), the output gradient
    ``gy`` and the gradient of the outgoing state ``mu`` (modified in place into the
    gradient of the incoming state); returns ``(gx, gth)`` (``gth``: gradient of ``th``,
    or ``None``).
    """

    n_params = 0

    def __init__(self, stage, coeffs):
        self.stage, self.coeffs0 = stage, coeffs

    def coeffs_for(self, th):
        return self.coeffs0

    def learned(self, th) -> dict:
        return {}


class GammatoneGrad(StageGrad):
    """Learnable: ``th = [log(fc / fc0) (C,), log(b / b0)]``, the centre frequencies
    ``fc`` (Hz) and the bandwidth factor ``b`` of ``beta = b ERB(fc)`` (Hz; Holdsworth et
    al. 1988, ``b0`` = 1.0183 for order 4; ERB of Glasberg & Moore 1990, Hear. Res. 47,
    103-138).  Every ``th`` keeps ``fc > 0`` and ``beta > 0``, so the pole radius
    ``r = exp(-2 pi beta / fs)`` (``fs`` in Hz) stays below 1.  The coefficients are
    designed as :func:`rtamt.filterbank.gammatone.design` does (Hohmann 2002, Acta
    Acustica 88, 433-442): pole ``p = r exp(-i 2 pi fc / fs)``, gain ``2 (1 - r)^4`` (the
    real part's factor 2 folded in)."""

    def __init__(self, stage, coeffs):
        super().__init__(stage, coeffs)
        self.n_params = coeffs.fc.size + 1
        self.b0 = bandwidth_factor(4)
        self.erb_slope = float(erb(1.0) - erb(0.0))   # ERB(f) is linear in f

    def _values(self, th):
        C = self.coeffs0.fc.size
        return self.coeffs0.fc * np.exp(th[:C]), self.b0 * np.exp(th[C])

    def learned(self, th):
        fc, b = self._values(th)
        return {"fc": fc, "bandwidth_factor": b}

    def coeffs_for(self, th):
        if th is None:
            return self.coeffs0
        fc, bf = self._values(th)
        fs = self.coeffs0.fs
        beta = bf * erb(fc)
        r = np.exp(-2 * np.pi * beta / fs)
        pole = r * np.exp(-1j * 2 * np.pi * fc / fs)
        gain = 2.0 * (1.0 - r) ** 4
        lanes = K.pad_lanes(np.stack([pole.real, pole.imag, gain]), repeat_first=False)
        return dataclasses.replace(self.coeffs0, fc=fc, beta=beta,
                                   pr=np.ascontiguousarray(pole.real),
                                   pi=np.ascontiguousarray(pole.imag), gain=gain, lanes=lanes)

    def backward(self, coeffs, th, x, state, gy, mu):
        gx = np.zeros(x.shape)
        gp = np.zeros((3, coeffs.fc.size))
        A.gammatone4_adjoint(coeffs.pr, coeffs.pi, coeffs.gain, gy, mu["sr"], mu["si"], gx,
                             th is not None, state["sr"], state["si"], x, gp)
        if th is None:
            return gx, None
        # chain rule through r, the phase phi = 2 pi fc / fs (p = r e^{-i phi}) and beta
        fc, bf = self._values(th)
        fs, pr, pi, r = coeffs.fs, coeffs.pr, coeffs.pi, np.hypot(coeffs.pr, coeffs.pi)
        g_r = (gp[0] * pr + gp[1] * pi) / r - 8.0 * gp[2] * (1.0 - r) ** 3
        g_phi = gp[0] * pi - gp[1] * pr
        g_beta = g_r * (-2 * np.pi / fs) * r
        g_fc = g_beta * bf * self.erb_slope + g_phi * 2 * np.pi / fs
        return gx, np.concatenate([g_fc * fc, [np.sum(g_beta * coeffs.beta)]])


class SOSGrad(StageGrad):
    """Stages of :class:`rtamt.engine.stage.SharedSOSStage`: the IHC envelope, half-wave
    rectification then Butterworth low-pass sections (Dau et al. 1996a, JASA 99, 3615;
    presets in :mod:`rtamt.ihc.envelope`).  No learnable parameters."""

    rectify = True

    def backward(self, coeffs, th, x, state, gy, mu):
        gx = np.zeros(x.shape)
        A.sos_adjoint(coeffs.sos, self.rectify, x, gy, mu["zi"], gx)
        return gx, None


class HighpassGrad(SOSGrad):
    """:class:`rtamt.adaptation.highpass.AdaptHighpass`, the Butterworth high-pass that
    stands in for adaptation in King, Varnet & Lorenzi (2019, JASA 145, 2277-2293): the
    same sections' adjoint, without the rectifier."""

    rectify = False


class FIRGrad(StageGrad):
    """The ear filters (:class:`rtamt.ear.fir.FIRSignalStage`: headphone, middle-ear and
    outer+middle-ear FIRs): ``(B, T)`` in and out; adjoint
    :func:`rtamt.nn.adjoint.fir_adjoint`."""

    def backward(self, coeffs, th, x, state, gy, mu):
        gx = np.zeros(x.shape + (1,))
        A.fir_adjoint(coeffs.h, gy.reshape(gx.shape), mu["hist"], gx)
        return gx.reshape(x.shape), None


class CompressionGrad(StageGrad):
    """The compressions (:mod:`rtamt.nonlinear.compression`), pointwise, no state.
    Both laws are ``y = sign(x) |x|^n k^(1-n)`` where they compress (broken stick, as in
    King, Varnet & Lorenzi 2019, JASA 145, 2277-2293: ``|x| > k``, else ``y = x``; power
    law: everywhere), so there ``dy/dk = (1 - n) y / k`` and ``dy/dn = y log(|x| / k)``.
    ``x``, ``y`` and the knee ``k`` are in the model's linear units (an RMS of 1 is
    ``spl_ref`` dB SPL); ``n`` is dimensionless.

    Learnable: ``th = [log(k / k0), log(n / n0) (one per exponent)]``: the knee and the
    exponent(s) stay positive."""

    def __init__(self, stage, coeffs):
        super().__init__(stage, coeffs)
        self.n_params = 1 + coeffs.exponent.size

    def learned(self, th):
        c = self.coeffs_for(th)
        return {"knee": c.knee, "exponent": c.exponent}

    def coeffs_for(self, th):
        if th is None:
            return self.coeffs0
        c = self.coeffs0
        return dataclasses.replace(c, knee=c.knee * np.exp(th[0]),
                                   exponent=c.exponent * np.exp(th[1:]))

    def backward(self, coeffs, th, x, state, gy, mu):
        n, k, ax = coeffs.exponent, coeffs.knee, np.abs(x)
        gx = gy * self.slope(n, k, ax)
        if th is None:
            return gx, None
        act = self.active(ax, k)
        y = self.stage.process_tm(coeffs, {}, x)
        with np.errstate(divide="ignore", invalid="ignore"):
            gyy = np.where(act, gy * y, 0.0)
            g_n = (gyy * np.log(np.where(act, ax, k) / k)).sum(axis=(0, 1))
        g_k = (1.0 - n) / k * gyy
        g_n = g_n.sum(keepdims=True) if n.size == 1 else g_n
        return gx, np.concatenate([[g_k.sum() * k], g_n * n])


class BrokenStickGrad(CompressionGrad):
    """Below the knee ``y = x`` (slope 1); above, ``dy/dx = n |x|^(n-1) k^(1-n)``."""

    @staticmethod
    def active(ax, k):
        return ax > k

    @staticmethod
    def slope(n, k, ax):
        return np.where(ax > k, n * np.maximum(ax, k) ** (n - 1) * k ** (1 - n), 1.0)


class PowerGrad(CompressionGrad):
    """``y = sign(x) |x/k|^n k``: ``dy/dx = n |x/k|^(n-1)`` (infinite at ``x = 0`` for
    ``n < 1``: the gradient there is set to 0)."""

    @staticmethod
    def active(ax, k):
        return ax > 0

    @staticmethod
    def slope(n, k, ax):
        with np.errstate(divide="ignore"):
            return np.where(ax > 0, n * (ax / k) ** (n - 1), 0.0)


class AdaptLoopGrad(StageGrad):
    """Learnable: ``th`` (K,), the log of each time constant relative to its designed
    value, ``tau = tau0 exp(th)`` (s; positive for every th; th = 0 is the design, bit for
    bit); the loop low-pass coefficients ``a = exp(-1 / (tau fs))`` (``fs`` in Hz),
    ``b = 1 - a`` as designed by :func:`rtamt.adaptation.adaptloop.design` (Dau, Püschel
    & Kohlrausch 1996a, JASA 99, 3615)."""

    def __init__(self, stage, coeffs):
        super().__init__(stage, coeffs)
        self.n_params = coeffs.tau.size

    def learned(self, th):
        return {"tau": self.coeffs_for(th).tau}

    def coeffs_for(self, th):
        c = self.coeffs0
        if th is None:
            return c
        tau = c.tau * np.exp(th)
        a = np.exp(-1.0 / (tau * c.fs))
        return dataclasses.replace(c, tau=tau, a=a, b=1.0 - a)

    def backward(self, coeffs, th, x, state, gy, mu):
        gx = np.zeros(x.shape)
        ga = np.zeros(coeffs.a.size)
        A.adaptloop_adjoint(coeffs.a, coeffs.b, coeffs.lanes, bool(coeffs.limit_on),
                            state["s"], x, gy, mu["s"], gx, ga)
        # a = exp(-1/(tau fs)), tau = tau0 exp(th): da/dth = a / (tau fs)
        return gx, ga * coeffs.a / (coeffs.tau * coeffs.fs)


def _prefiltered(coeffs, x, state):
    """A modulation bank's filter input, recomputed: ``x`` through the optional low-pass
    before the bank (``coeffs.pre_sos``) from its incoming state ``state["pre"]`` (not
    written), else ``x`` itself."""
    if coeffs.pre_sos is None:
        return x
    u = np.empty_like(x)
    K.sos_shared(coeffs.pre_sos, False, state["pre"].copy(), x, u, 0)
    return u


def _prefilter_adjoint(coeffs, x, gu, mu):
    """The input gradient of a modulation bank from that of its filters' input ``gu``:
    through the optional low-pass before the bank (``coeffs.pre_sos``, state ``pre``,
    whose gradient ``mu["pre"]`` becomes that of the incoming state), else ``gu``."""
    if coeffs.pre_sos is None:
        return gu
    gx = np.zeros(x.shape)
    A.sos_adjoint(coeffs.pre_sos, False, x, gu, mu["pre"], gx)
    return gx


def king_bandpass_sos(f_lo, f_hi, fs: float) -> torch.Tensor:
    """The band-passes of King et al. (2019) as a differentiable torch function of their
    -3 dB edges ``f_lo < f_hi`` (Hz, tensors of shape (M,), below ``fs / 2``): rows
    ``[b0, b1, b2, 1, a1, a2]`` (M, 6), the values of
    ``scipy.signal.butter(1, [f_lo, f_hi], 'bandpass', fs=fs, output='sos')`` (to
    rounding) written in closed form.

    Derivation: the 1st-order Butterworth low-pass prototype ``1 / (s + 1)`` becomes,
    with ``s -> (s^2 + w_lo w_hi) / (B s)``, ``B = w_hi - w_lo``, the band-pass
    ``H(s) = B s / (s^2 + B s + w_lo w_hi)`` whose -3 dB edges are ``w_lo``, ``w_hi``.
    The bilinear transform ``s = 2 fs (z - 1) / (z + 1)`` with pre-warped edges
    ``w = 2 fs tan(pi f / fs)`` keeps the edges of the digital filter at ``f_lo``,
    ``f_hi`` (Oppenheim & Schafer, *Discrete-Time Signal Processing*, 3rd ed., sec.
    7.2.2).  The factor ``2 fs`` cancels: with ``W = tan(pi f / fs)``, ``b = W_hi - W_lo``
    and ``p = W_lo W_hi``, multiplying numerator and denominator by ``(z + 1)^2`` gives
    ``H(z) = b (z^2 - 1) / ((1 + b + p) z^2 + 2 (p - 1) z + (1 - b + p))``, so with
    ``D = 1 + b + p``: ``b0 = b / D``, ``b1 = 0``, ``b2 = -b / D``, ``a1 = 2 (p - 1) / D``,
    ``a2 = (1 - b + p) / D``.  For every ``0 < f_lo < f_hi < fs / 2`` the poles are inside
    the unit circle (``0 < a2 < 1`` and ``|a1| < 1 + a2``)."""
    w_lo, w_hi = torch.tan(torch.pi * f_lo / fs), torch.tan(torch.pi * f_hi / fs)
    b, p = w_hi - w_lo, w_lo * w_hi
    d = 1.0 + b + p
    zero = torch.zeros_like(d)
    return torch.stack([b / d, zero, -b / d, zero + 1.0, 2.0 * (p - 1.0) / d,
                        (1.0 - b + p) / d], dim=1)


def _king_edges(mfc, Q, lib):
    """-3 dB edges (M, 2) in Hz of the band-passes of King, Varnet & Lorenzi (2019, JASA
    145, 2277-2293) of centre ``mfc`` (M,) in Hz and quality factor ``Q`` (``lib``: numpy
    or torch), in the operations of :func:`rtamt.modulation.king2019.design`:
    ``f_lo,hi = mfc/2 sqrt(4 + 1/Q^2) -/+ mfc/(2Q)`` (so ``f_hi - f_lo = mfc / Q`` and
    ``sqrt(f_lo f_hi) = mfc``)."""
    mid = mfc / 2 * lib.sqrt(4 + 1 / Q ** 2)
    return lib.stack([mid - mfc / (2 * Q), mid + mfc / (2 * Q)], 1)


class KingModFilterbankGrad(StageGrad):
    """:class:`rtamt.modulation.king2019.KingModFilterbank` (King, Varnet & Lorenzi 2019,
    JASA 145, 2277-2293): the real Butterworth band-pass of every modulation filter on
    every channel, after the optional 150 Hz low-pass (fixed).  Adjoint:
    :func:`rtamt.nn.adjoint.king_bank_adjoint` (linear: the input and state gradients need
    no forward trajectory; the coefficient gradients recompute the filter outputs).

    Learnable: ``th = [th_m (M,), log(Q / Q0)]``, each modulation filter's centre
    frequency and the bank's quality factor (shared by all filters, as in the paper).
    ``Q = Q0 exp(th_Q) > 0``.  The centre frequencies are kept below the one whose upper
    -3 dB edge reaches ``fs / 2`` (the edges are linear in ``mfc``: ``f_hi = mfc
    k(Q)``): with ``a(Q) = mfc0 k(Q) / (fs / 2)``, the upper edge the designed centre
    frequency would have at ``Q``, relative to the Nyquist frequency,

        ``mfc = mfc0 / (exp(-th_m) (1 - a(Q0)) + a(Q))``,

    i.e. ``1 / mfc = exp(-th_m) / u0 + k(Q) / (fs / 2)`` with ``1 / u0 = 1 / mfc0 -
    k(Q0) / (fs / 2)``: ``mfc ~ mfc0 exp(th_m)`` for filters far below Nyquist, and the
    upper edge ``fs/2 a(Q) / (exp(-th_m) (1 - a(Q0)) + a(Q))`` stays below ``fs / 2`` for
    every ``th`` (the lower edge stays above 0).  At ``th = 0`` the denominator is
    ``(1 - a0) + a0``, exactly 1 in floating point, so ``mfc = mfc0`` and the filters are
    the design, bit for bit.

    The forward coefficients are designed as :func:`rtamt.modulation.king2019.design`
    does (``scipy.signal.butter``); the chain rule to ``th`` runs torch's autograd through
    :func:`king_bandpass_sos`, the same design in closed form."""

    def __init__(self, stage, coeffs):
        super().__init__(stage, coeffs)
        self.mfc0, self.Q0 = coeffs.mfc.copy(), float(stage.params.qfactor)
        self.n_params = self.mfc0.size + 1
        self.fn = coeffs.fs / 2
        self.a0 = _king_edges(self.mfc0, self.Q0, np)[:, 1] / self.fn
        self._last = (None, coeffs)

    def _values(self, th, lib=np):
        """``mfc`` (M,) and ``Q`` for ``th`` (numpy float64, or a torch tensor with
        ``lib=torch``); ``a(Q)`` is the upper edge of :func:`_king_edges` at ``mfc0``."""
        M = self.mfc0.size
        mfc0, one_minus = self.mfc0, 1 - self.a0
        Q = self.Q0 * lib.exp(th[M])
        if lib is np:
            Q = float(Q)
        else:
            mfc0, one_minus = torch.from_numpy(mfc0), torch.from_numpy(one_minus)
        a = _king_edges(mfc0, Q, lib)[:, 1] / self.fn
        return mfc0 / (lib.exp(-th[:M]) * one_minus + a), Q

    def learned(self, th):
        return dict(zip(("mfc", "Q"), self._values(th)))

    def coeffs_for(self, th):
        if th is None:
            return self.coeffs0
        key = th.tobytes()
        if self._last[0] == key:
            return self._last[1]
        c = self.coeffs0
        mfc, Q = self._values(th)
        edges = _king_edges(mfc, Q, np)
        if not (edges[:, 0] > 0).all() or not (edges[:, 1] < self.fn).all():
            raise ValueError(f"modulation filter edges {edges} outside (0, fs/2)")
        sos = np.stack([signal.butter(1, e, btype="bandpass", fs=c.fs, output="sos")
                        for e in edges])
        C = c.fc.size
        out = dataclasses.replace(c, mfc=mfc, edges=edges, sos=np.ascontiguousarray(sos),
                                  filter_mfc=mfc[c.filter_slot], mfc_padded=np.tile(mfc, (C, 1)))
        self._last = (key, out)
        return out

    def backward(self, coeffs, th, x, state, gy, mu):
        want = th is not None
        gu = np.zeros(x.shape)
        u = _prefiltered(coeffs, x, state) if want else x   # read only with want
        gc = np.zeros((coeffs.mfc.size, 5))
        A.king_bank_adjoint(coeffs.sos, gy, mu["bp"], gu, want, u, state["bp"], gc)
        gx = _prefilter_adjoint(coeffs, x, gu, mu)
        if not want:
            return gx, None
        # chain rule through the design: d sos / d th by torch autograd
        tht = torch.from_numpy(th).requires_grad_(True)
        with torch.enable_grad():
            mfc, Q = self._values(tht, torch)
            sos = king_bandpass_sos(*_king_edges(mfc, Q, torch).unbind(1), coeffs.fs)
            (gth,) = torch.autograd.grad(sos[:, [0, 1, 2, 4, 5]], tht, torch.from_numpy(gc))
        return gx, gth.numpy()


class ModFilterbankGrad(StageGrad):
    """The modulation bank: low-pass, optional pre-filter, and the ``efilt`` complex
    one-poles (Dau, Kollmeier & Kohlrausch 1997a, JASA 102, 2892; AMT 0.9.10
    ``modfilterbank``) or the frequency-shifted Butterworth biquads (an rtamt extension,
    :mod:`rtamt.modulation.modfb`).

    Learnable: ``th = [log(mfc / mfc0) (Fb,), log(Q / Q0)]``, the centre frequency (Hz)
    of every band-pass filter (packed order, ``coeffs.filter_mfc[C:]``) and the quality
    factor.  The filters keep their design's structure: those designed below 10 Hz keep
    their 5 Hz bandwidth (``Q`` does not act on them), the others have bandwidth
    ``bw = mfc / Q`` (Hz); the pole ``e0 exp(i 2 pi mfc / fs)``, ``e0 = exp(-pi bw / fs)``
    (Dau et al. 1997a, as in :mod:`rtamt.modulation.modfb`), has radius below 1 for every
    ``th``; real-part / envelope outputs stay as designed.  The 2.5 Hz low-pass and the
    pre-filter are fixed.  The Butterworth bank has no learnable parameters (input and
    state gradients only)."""

    def __init__(self, stage, coeffs):
        super().__init__(stage, coeffs)
        C = coeffs.fc.size
        self.mfc0 = coeffs.filter_mfc[C:].copy()
        self.fixed_bw = self.mfc0 < 10.0
        self.n_params = self.mfc0.size + 1 if coeffs.filter_type == "efilt" else 0
        self.Q0 = float(getattr(stage.params, "Q", 2.0))

    def _design(self, th):
        """``mfc``, ``Q``, bandwidth (Hz), ``w0`` and ``e0`` of the band-pass filters."""
        Fb = self.mfc0.size
        mfc, Q = self.mfc0 * np.exp(th[:Fb]), self.Q0 * np.exp(th[Fb])
        fs = self.coeffs0.fs
        w0 = 2 * np.pi * mfc / fs
        bw = np.where(self.fixed_bw, 5.0, mfc / Q)
        return mfc, Q, bw, w0, np.exp(-(2 * np.pi * bw / fs) / 2)

    def learned(self, th):
        mfc, Q, *_ = self._design(th)
        return {"mfc": mfc, "Q": Q}

    def coeffs_for(self, th):
        c = self.coeffs0
        if th is None:
            return c
        mfc, _, _, w0, e0 = self._design(th)
        pole = e0 * np.exp(1j * w0)
        coef = np.ascontiguousarray(np.stack([pole.real, pole.imag, 2.0 * (1.0 - e0),
                                              c.bp_coef[3]]))
        return dataclasses.replace(c, bp_coef=coef, bp_coef32=coef.astype(np.float32),
                                   filter_mfc=np.concatenate([c.filter_mfc[:c.fc.size], mfc]))

    def backward(self, coeffs, th, x, state, gy, mu):
        C, Fb = coeffs.fc.size, coeffs.bp_channel.size
        want = th is not None
        u = _prefiltered(coeffs, x, state)
        gu = np.zeros(x.shape)
        A.sos_adjoint(coeffs.lp_sos, False, u, gy[:, :, :C], mu["lp"], gu)
        gc = np.zeros((3, Fb))
        if Fb and coeffs.filter_type == "butterworth":
            A.biquad_bank_adjoint(coeffs.bp_channel, coeffs.bp_nreal, coeffs.bp_b,
                                  coeffs.bp_a, coeffs.bp_scale, u, state["bp"],
                                  gy[:, :, C:], mu["bp"], gu)
        elif Fb:
            A.efilt_adjoint(coeffs.bp_coef, coeffs.bp_nreal, coeffs.bp_channel, u,
                            state["bp"], gy[:, :, C:], mu["bp"], gu, want, gc)
        gx = _prefilter_adjoint(coeffs, x, gu, mu)
        if not want:
            return gx, None
        # chain rule: Re p = e0 cos w0, Im p = e0 sin w0, g = 2 (1 - e0);
        # log e0 = -pi bw / fs with bw = mfc / Q (or fixed); w0 = 2 pi mfc / fs
        _, _, bw, w0, e0 = self._design(th)
        pr, pi = coeffs.bp_coef[0], coeffs.bp_coef[1]
        g_e0 = gc[0] * np.cos(w0) + gc[1] * np.sin(w0) - 2.0 * gc[2]
        g_w0 = gc[1] * pr - gc[0] * pi
        dlog = np.where(self.fixed_bw, 0.0, g_e0 * e0 * np.pi * bw / coeffs.fs)
        return gx, np.concatenate([g_w0 * w0 - dlog, [dlog.sum()]])


#: backward rules by stage class
GRADS: dict[type, type] = {Gammatone: GammatoneGrad, IHCEnvelope: SOSGrad,
                           AdaptLoop: AdaptLoopGrad, ModFilterbank: ModFilterbankGrad,
                           KingModFilterbank: KingModFilterbankGrad,
                           AdaptHighpass: HighpassGrad, HeadphoneFilter: FIRGrad,
                           MiddleEarFilter: FIRGrad, OuterMiddleEarFilter: FIRGrad,
                           BrokenStick: BrokenStickGrad, PowerCompression: PowerGrad}


def grad_rule(stage, coeffs):
    """The :class:`StageGrad` of ``stage`` (with designed ``coeffs``), or ``None``."""
    rule = GRADS.get(type(stage))
    return None if rule is None else rule(stage, coeffs)


def param_np(param):
    """A float64 host copy of a learnable parameter tensor (``None`` stays)."""
    return None if param is None else param.detach().cpu().numpy().astype(np.float64)


def run_stage(cls, coeffs, keys, x: torch.Tensor, state: tuple) -> tuple:
    """The stage's forward kernel on time-major ``x`` from ``state`` (tensors, in ``keys``
    order; never written): returns ``(y, *new_state)`` as CPU tensors."""
    xs = np.ascontiguousarray(x.detach().cpu().numpy())
    st = {k: np.array(t.detach().cpu().numpy(), copy=True) for k, t in zip(keys, state)}
    y = cls.process_tm(coeffs, st, xs)
    return (torch.from_numpy(np.ascontiguousarray(y)),) + tuple(
        torch.from_numpy(st[k]) for k in keys)


class StageFunction(torch.autograd.Function):
    """``StageFunction.apply(part, x, param, *state) -> (y, *new_state)`` (time-major).

    ``part`` carries the stage class, its designed coefficients, the state keys and the
    backward rule (:class:`rtamt.nn._base.Part`).  Saved for backward: the block input,
    the incoming state and the parameter (the nonlinear stages recompute their trajectory
    from them)."""

    @staticmethod
    def forward(ctx, part, x, param, *state):
        coeffs = part.grad.coeffs_for(param_np(param))
        out = run_stage(part.cls, coeffs, part.keys, x, state)
        ctx.part, ctx.coeffs, ctx.y_shape = part, coeffs, tuple(out[0].shape)
        ctx.save_for_backward(x, param, *state)
        return tuple(o.to(x.device) for o in out)

    @staticmethod
    @once_differentiable
    def backward(ctx, gy, *gstate):
        x, param, *state = ctx.saved_tensors
        part = ctx.part
        mu = {k: (np.zeros(s.shape) if g is None else _np(g))
              for k, g, s in zip(part.keys, gstate, state)}
        st = {k: _np(s) for k, s in zip(part.keys, state)}
        gyn = np.zeros(ctx.y_shape) if gy is None else _read(gy)
        want = param is not None and ctx.needs_input_grad[2]
        gx, gp = part.grad.backward(ctx.coeffs, param_np(param) if want else None, _np(x), st,
                                    gyn, mu)

        def back(a, like):
            return torch.from_numpy(np.ascontiguousarray(a)).to(like.device, like.dtype)

        gparam = None
        if gp is not None and want:
            gparam = torch.from_numpy(gp).to(param.device, param.dtype)
        return (None, back(gx, x), gparam) + tuple(back(mu[k], s)
                                                  for k, s in zip(part.keys, state))
