"""``torch.autograd.Function`` around one rtamt stage: the forward pass is the stage's own
``process_tm`` (its compiled kernel, bit-exact), the backward pass the stage's gradient
rule (:class:`rtamt.engine.grad.StageGrad`).

A stage is differentiable when its class declares a rule (``Stage.grad_rule()``, kept
beside the stage with its adjoint kernels, e.g. :mod:`rtamt.filterbank.gammatone_grad`);
this module knows no stage.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.autograd.function import once_differentiable


def _np(t: torch.Tensor) -> np.ndarray:
    """A float64 host copy of ``t`` that a kernel may write."""
    return np.array(t.detach().cpu().numpy(), dtype=np.float64, copy=True)


def _read(t: torch.Tensor) -> np.ndarray:
    """A float64 host array of ``t`` for kernels that only read it: a view, in any
    strides, when ``t`` is a float64 CPU tensor (an output gradient can be hundreds of
    MB), else a converted copy in the same memory order."""
    a = t.detach().cpu().numpy()
    return a if a.dtype == np.float64 else a.astype(np.float64, order="K")


def grad_rule(stage, coeffs, n_in: int):
    """The gradient rule of ``stage`` (designed ``coeffs`` for ``n_in`` input channels),
    found through the stage (``type(stage).grad_rule()``), or ``None`` (forward-only)."""
    rule = type(stage).grad_rule()
    return None if rule is None else rule(stage, coeffs, n_in)


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
