"""``torch.autograd.Function`` around one rtamt stage: the forward pass is the stage's own
``process_tm`` (the compiled kernel of :mod:`rtamt.engine.kernels`, bit-exact), the
backward pass the stage's adjoint recursion (:mod:`rtamt.nn.adjoint`).

A stage is differentiable when :data:`GRADS` has a rule for its class (and the rule
accepts its design): :class:`GammatoneGrad`, :class:`SOSGrad` (the IHC envelope),
:class:`AdaptLoopGrad`, :class:`ModFilterbankGrad` (the ``efilt`` bank),
:class:`HighpassGrad` (King2019's adaptation high-pass), :class:`FIRGrad` (the ear
filters) and the compressions (:class:`BrokenStickGrad`, :class:`PowerGrad`).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from ..adaptation.adaptloop import AdaptLoop
from ..adaptation.highpass import AdaptHighpass
from ..ear.filters import HeadphoneFilter, MiddleEarFilter, OuterMiddleEarFilter
from ..engine import kernels as K
from ..filterbank.gammatone import Gammatone
from ..ihc.envelope import IHCEnvelope
from ..modulation.modfb import ModFilterbank
from ..nonlinear.compression import BrokenStick, PowerCompression
from . import adjoint as A


def _np(t: torch.Tensor) -> np.ndarray:
    """A float64 host copy of ``t`` that a kernel may write."""
    return np.array(t.detach().cpu().numpy(), dtype=np.float64, copy=True)


class StageGrad:
    """The backward rule of one stage class.

    ``backward(coeffs, x, state, gy, mu)`` gets the block input ``x`` (time-major), the
    incoming ``state`` (float64 numpy copies), the output gradient ``gy`` and the
    gradient of the outgoing state ``mu`` (modified in place into the gradient of the
    incoming state); returns ``(gx, gparam)`` (``gparam``: gradient of the learnable
    parameter vector, or ``None``).  ``coeffs_for(coeffs, param)`` applies the learnable
    parameter (``None``: none) to the designed coefficients.
    """

    @staticmethod
    def supports(coeffs) -> bool:
        return True

    @staticmethod
    def coeffs_for(coeffs, param):
        return coeffs


class GammatoneGrad(StageGrad):
    @staticmethod
    def backward(coeffs, x, state, gy, mu):
        gx = np.zeros(x.shape)
        A.gammatone4_adjoint(coeffs.pr, coeffs.pi, coeffs.gain, gy, mu["sr"], mu["si"], gx)
        return gx, None


class SOSGrad(StageGrad):
    """Stages of :class:`rtamt.engine.stage.SharedSOSStage` (the IHC envelope)."""

    rectify = True

    @classmethod
    def backward(cls, coeffs, x, state, gy, mu):
        gx = np.zeros(x.shape)
        A.sos_adjoint(coeffs.sos, cls.rectify, x, gy, mu["zi"], gx)
        return gx, None


class HighpassGrad(SOSGrad):
    """:class:`rtamt.adaptation.highpass.AdaptHighpass` (no rectifier)."""

    rectify = False


class FIRGrad(StageGrad):
    """The ear filters (:class:`rtamt.ear.fir.FIRSignalStage`): ``(B, T)`` in and out."""

    @staticmethod
    def backward(coeffs, x, state, gy, mu):
        x3 = x[:, :, None] if x.ndim == 2 else x
        gx = np.zeros(x3.shape)
        A.fir_adjoint(coeffs.h, gy.reshape(x3.shape), mu["hist"], gx)
        return gx.reshape(x.shape), None


class BrokenStickGrad(StageGrad):
    """``y = sign(x) |x|^n k^(1-n)`` above the knee ``k``, else ``x``:
    ``dy/dx = n |x|^(n-1) k^(1-n)`` above the knee, 1 below (pointwise, no state)."""

    @staticmethod
    def backward(coeffs, x, state, gy, mu):
        n, k, ax = coeffs.exponent, coeffs.knee, np.abs(x)
        d = np.where(ax > k, n * np.maximum(ax, k) ** (n - 1) * k ** (1 - n), 1.0)
        return gy * d, None


class PowerGrad(StageGrad):
    """``y = sign(x) |x/k|^n k``: ``dy/dx = n |x/k|^(n-1)`` (infinite at ``x = 0`` for
    ``n < 1``: the gradient there is set to 0)."""

    @staticmethod
    def backward(coeffs, x, state, gy, mu):
        n, k, ax = coeffs.exponent, coeffs.knee, np.abs(x)
        with np.errstate(divide="ignore"):
            d = np.where(ax > 0, n * (ax / k) ** (n - 1), 0.0)
        return gy * d, None


class AdaptLoopGrad(StageGrad):
    """Learnable parameter: ``theta`` (K,), the log of each time constant relative to its
    designed value, ``tau = tau0 exp(theta)`` (positive for every theta; theta = 0 is the
    design, bit for bit)."""

    @staticmethod
    def coeffs_for(coeffs, param):
        if param is None:
            return coeffs
        th = param.detach().cpu().numpy().astype(np.float64)
        tau = coeffs.tau * np.exp(th)
        a = np.exp(-1.0 / (tau * coeffs.fs))
        return dataclasses.replace(coeffs, tau=tau, a=a, b=1.0 - a)

    @staticmethod
    def backward(coeffs, x, state, gy, mu):
        gx = np.zeros(x.shape)
        ga = np.zeros(coeffs.a.size)
        A.adaptloop_adjoint(coeffs.a, coeffs.b, coeffs.lanes, bool(coeffs.limit_on),
                            state["s"], x, gy, mu["s"], gx, ga)
        # a = exp(-1/(tau fs)), tau = tau0 exp(theta): da/dtheta = a / (tau fs)
        return gx, ga * coeffs.a / (coeffs.tau * coeffs.fs)


class ModFilterbankGrad(StageGrad):
    """The ``efilt`` modulation bank (low-pass, optional pre-filter, complex one-poles)."""

    @staticmethod
    def supports(coeffs) -> bool:
        return coeffs.filter_type == "efilt"

    @staticmethod
    def backward(coeffs, x, state, gy, mu):
        C = coeffs.fc.size
        u = x
        if coeffs.pre_sos is not None:          # the bank's input, recomputed
            u = np.empty_like(x)
            K.sos_shared(coeffs.pre_sos, False, state["pre"].copy(), x, u, 0)
        gu = np.zeros(x.shape)
        A.sos_adjoint(coeffs.lp_sos, False, u, gy[:, :, :C], mu["lp"], gu)
        if coeffs.bp_channel.size:
            A.efilt_adjoint(coeffs.bp_coef, coeffs.bp_nreal, coeffs.bp_channel, u,
                            state["bp"], gy[:, :, C:], mu["bp"], gu)
        if coeffs.pre_sos is None:
            return gu, None
        gx = np.zeros(x.shape)
        A.sos_adjoint(coeffs.pre_sos, False, x, gu, mu["pre"], gx)
        return gx, None


#: backward rules by stage class
GRADS: dict[type, type] = {Gammatone: GammatoneGrad, IHCEnvelope: SOSGrad,
                           AdaptLoop: AdaptLoopGrad, ModFilterbank: ModFilterbankGrad,
                           AdaptHighpass: HighpassGrad, HeadphoneFilter: FIRGrad,
                           MiddleEarFilter: FIRGrad, OuterMiddleEarFilter: FIRGrad,
                           BrokenStick: BrokenStickGrad, PowerCompression: PowerGrad}


def grad_rule(stage, coeffs):
    """The :class:`StageGrad` of ``stage`` (with designed ``coeffs``), or ``None``."""
    rule = GRADS.get(type(stage))
    return rule if rule is not None and rule.supports(coeffs) else None


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
        coeffs = part.grad.coeffs_for(part.coeffs, param)
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
        gyn = np.zeros(ctx.y_shape) if gy is None else _np(gy)
        gx, gp = part.grad.backward(ctx.coeffs, _np(x), st, gyn, mu)

        def back(a, like):
            return torch.from_numpy(np.ascontiguousarray(a)).to(like.device, like.dtype)

        gparam = None
        if gp is not None and ctx.needs_input_grad[2]:
            gparam = torch.from_numpy(gp).to(param.device, param.dtype)
        return (None, back(gx, x), gparam) + tuple(back(mu[k], s)
                                                  for k, s in zip(part.keys, state))
