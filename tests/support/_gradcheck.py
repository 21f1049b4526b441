"""gradcheck helpers for rtamt.nn layers: seeded float64 inputs and a check of a layer
w.r.t. its block input and every entry of its incoming state."""
from __future__ import annotations

import numpy as np
import torch
from torch.autograd import gradcheck

import rtamt.nn as rn


def noise(shape, seed=0, scale=1.0, positive=False):
    """Seeded standard-normal float64 tensor of ``shape`` times ``scale`` (its absolute
    value when ``positive``)."""
    a = np.random.default_rng(seed).standard_normal(shape) * scale
    return torch.from_numpy(np.abs(a) if positive else a)


def check_layer(layer, x, warm=None, eps=1e-6, atol=1e-6):
    """gradcheck of ``layer`` w.r.t. the block input and every floating-point state entry
    (started from the state after ``warm``, so that it is not trivially zero; integer
    entries such as the resampler's phase are carried as they are)."""
    _, st = layer(x if warm is None else warm)
    keys = [k for k in st if k != rn.DESIGN_KEY and st[k].is_floating_point()]
    fixed = {k: v for k, v in st.items() if k not in keys}   # the design tag, integer phases

    def f(xb, *vals):
        y, new = layer(xb, dict(zip(keys, vals), **fixed))
        return (y,) + tuple(new[k] for k in keys)

    inputs = [x.clone().requires_grad_(True)] + [st[k].clone().requires_grad_(True)
                                                 for k in keys]
    assert gradcheck(f, inputs, eps=eps, atol=atol, rtol=1e-4)


def check_params(layer, name, theta0, x, warm=None, eps=1e-6, atol=1e-6, wrt_input=True):
    """gradcheck of ``layer``'s output and outgoing state w.r.t. ``theta[name]`` (set to
    ``theta0``) and, when ``wrt_input``, the block input ``x``, from the state after
    ``warm`` (integer state entries, such as a resampler's phase, carried as they are)."""
    st = None
    if warm is not None:
        with torch.no_grad():
            _, st = layer(warm)
    keys = [k for k, v in (st or layer.initial_state(x.shape[0], dtype=x.dtype)).items()
            if k != rn.DESIGN_KEY and v.is_floating_point()]

    def f(theta, *xb):
        xin = xb[0] if wrt_input else x
        y, new = torch.func.functional_call(layer, {f"theta.{name}": theta}, (xin, st))
        return (y,) + tuple(new[k] for k in keys)

    theta = torch.as_tensor(theta0, dtype=torch.float64).clone().requires_grad_(True)
    inputs = (theta, x.clone().requires_grad_(True)) if wrt_input else (theta,)
    assert gradcheck(f, inputs, eps=eps, atol=atol, rtol=1e-4)
