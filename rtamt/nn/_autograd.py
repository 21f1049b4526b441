"""``torch.autograd.Function`` around one rtamt stage: the forward pass is the stage's own
``process_tm`` (its compiled kernel, bit-exact), the backward pass the stage's gradient
rule (:class:`rtamt.engine.grad.StageGrad`).

A stage is differentiable when its class declares a rule (``Stage.grad_rule()``, kept
beside the stage with its adjoint kernels, e.g. :mod:`rtamt.filterbank.gammatone_grad`);
this module knows no stage.

Two paths, chosen per stage when the layer is bound (:meth:`rtamt.nn._base.Part.bind`):
the host path (numba kernels on numpy arrays: a block on another device is copied to the
host, :func:`host`, and back) and the device path of a Triton-bound stage (its Triton
forward twins and its rule's Triton adjoints on tensors of the block's device; the block,
its state and its gradients never leave that device).
"""
from __future__ import annotations

import numpy as np
import torch
from torch.autograd.function import once_differentiable


def host(t: torch.Tensor) -> np.ndarray:
    """``t``'s values as a numpy array on the host (a view of a CPU tensor, else a copy):
    every block, state or gradient that rtamt.nn hands to a numba kernel passes here, and
    nothing of a Triton-bound stage does."""
    return t.detach().cpu().numpy()


def _np(t: torch.Tensor) -> np.ndarray:
    """A float64 host copy of ``t`` that a kernel may write."""
    return np.array(host(t), dtype=np.float64, copy=True)


def _read(t: torch.Tensor) -> np.ndarray:
    """A float64 host array of ``t`` for kernels that only read it: a view, in any
    strides, when ``t`` is a float64 CPU tensor (an output gradient can be hundreds of
    MB), else a converted copy in the same memory order."""
    a = host(t)
    return a if a.dtype == np.float64 else a.astype(np.float64, order="K")


def _own64(t: torch.Tensor) -> torch.Tensor:
    """A contiguous float64 copy of ``t`` on its device that a kernel may write."""
    return t.detach().to(torch.float64).clone(memory_format=torch.contiguous_format)


def _in64(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a contiguous float64 tensor on its device for kernels that only read it
    (``t`` itself when it is one)."""
    return t.detach().to(torch.float64).contiguous()


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
    xs = np.ascontiguousarray(host(x))
    st = {k: np.array(host(t), copy=True) for k, t in zip(keys, state)}
    y = cls.process_tm(coeffs, st, xs)
    return (torch.from_numpy(np.ascontiguousarray(y)),) + tuple(
        torch.from_numpy(st[k]) for k in keys)


def run_stage_device(stage, coeffs, keys, x: torch.Tensor, state: tuple) -> tuple:
    """:func:`run_stage` of a Triton-bound ``stage`` (its ``process_tm`` runs the Triton
    twins): ``x`` and ``state`` stay on their device; returns ``(y, *new_state)`` there."""
    st = {k: t.detach().clone(memory_format=torch.contiguous_format)
          for k, t in zip(keys, state)}
    y = stage.process_tm(coeffs, st, x.detach().contiguous())
    return (y,) + tuple(st[k] for k in keys)


class StageFunction(torch.autograd.Function):
    """``StageFunction.apply(part, x, param, *state) -> (y, *new_state)`` (time-major).

    ``part`` carries the stage class, its designed coefficients, the state keys and the
    backward rule (:class:`rtamt.nn._base.Part`).  Saved for backward: the block input,
    the incoming state and the parameter (the nonlinear stages recompute their trajectory
    from them)."""

    @staticmethod
    def forward(ctx, part, x, param, *state):
        coeffs = part.coeffs_at(param)
        out = part.forward(coeffs, x, state)
        ctx.part, ctx.coeffs, ctx.y_shape = part, coeffs, tuple(out[0].shape)
        ctx.save_for_backward(x, param, *state)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, gy, *gstate):
        x, param, *state = ctx.saved_tensors
        part = ctx.part
        if part.on_device:
            return _backward_device(ctx, part, x, param, state, gy, gstate)
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


def _backward_device(ctx, part, x, param, state, gy, gstate) -> tuple:
    """:meth:`StageFunction.backward` of a Triton-bound stage: the rule's Triton adjoints
    on float64 tensors of the block's device (the gradients stay there)."""
    dev = x.device
    mu = {k: (torch.zeros(s.shape, dtype=torch.float64, device=dev) if g is None
              else _own64(g)) for k, g, s in zip(part.keys, gstate, state)}
    st = {k: _in64(s) for k, s in zip(part.keys, state)}
    gyd = (torch.zeros(ctx.y_shape, dtype=torch.float64, device=dev) if gy is None
           else _in64(gy))
    want = param is not None and ctx.needs_input_grad[2]
    gx, gp = part.grad.backward(ctx.coeffs, param_np(param) if want else None, _in64(x),
                                st, gyd, mu)
    gparam = None
    if gp is not None and want:
        gparam = torch.as_tensor(gp).to(param.device, param.dtype)
    return (None, gx.to(x.dtype)) + (gparam,) + tuple(mu[k].to(s.dtype)
                                                      for k, s in zip(part.keys, state))
