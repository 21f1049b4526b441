"""A numba kernel against its Triton twin, on the test device of :mod:`_triton`: the same
initial states as numpy arrays (numba) and tensors (Triton), block by block over a random
partition of ``T`` samples (state and output within :data:`TOL`), and the Triton kernel on
one call against that partition (``torch.equal``).  Sizes are small: the Triton
interpreter runs every operation of a sample loop as a numpy call."""
from __future__ import annotations

import numpy as np
import torch

from _triton import dev, host

B = 3
T = 150
DTYPES = [np.float64, np.float32]
TOL = {np.float64: 1e-12, np.float32: 1e-5}
"""Max |triton - numba| / max |numba|, per output (and per state array)."""


def rel(got, ref):
    """max |got - ref| / max |ref| (``got`` an array or a tensor on any device)."""
    got = host(got) if isinstance(got, torch.Tensor) else got
    scale = float(np.max(np.abs(ref)))
    assert scale > 0, "reference is all zero: the comparison would be vacuous"
    return float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)))) / scale


def random_cuts(rng, n=3):
    """A random partition of ``T`` into ``n`` blocks (a block may be empty)."""
    inner = np.sort(rng.integers(0, T + 1, n - 1))
    return [0, *inner.tolist(), T]


def run_blocks(kernel, x, state, cuts, call, y0, **kw):
    """Run ``call(kernel, state, xb, yb, **kw)`` block by block over ``x`` (B, T, ...)
    (time on axis 1); ``y0`` is the full output's initial content (B, T, Ftot).  numpy
    arrays go to the numba kernel, torch tensors (converted here) to the Triton one."""
    torch_path = isinstance(state, dict) and isinstance(next(iter(state.values())),
                                                          torch.Tensor)
    outs = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        xb = np.ascontiguousarray(x[:, a:b])
        yb = np.ascontiguousarray(y0[:, a:b])
        if torch_path:
            xb, yb = dev(xb), dev(yb)
        call(kernel, state, xb, yb, **kw)
        outs.append(host(yb) if torch_path else yb)
    return np.concatenate(outs, axis=1)


def twin_states(arrays: dict):
    """The same initial states as numpy arrays (numba) and torch tensors (Triton)."""
    return ({k: v.copy() for k, v in arrays.items()},
            {k: dev(v.copy()) for k, v in arrays.items()})


def compare(kn, kt, call, x, st0, y0, rng, dtype, **kw):
    """numba (kernels ``kn``) vs Triton (``kt``) on one random partition (state and output
    within TOL) and Triton on one call vs that partition (torch.equal).  Returns the errors
    (output, state) and the outputs and final states (numba, Triton)."""
    cuts = random_cuts(rng)
    sn, st = twin_states(st0)
    yn = run_blocks(kn, x, sn, cuts, call, y0, **kw)
    yt = run_blocks(kt, x, st, cuts, call, y0, **kw)
    err_y = rel(yt, yn)
    err_s = max(rel(st[k], sn[k]) for k in sn)
    assert err_y <= TOL[dtype], (err_y, cuts)
    assert err_s <= TOL[dtype], (err_s, cuts)
    _, s1 = twin_states(st0)
    y1 = run_blocks(kt, x, s1, [0, T], call, y0, **kw)
    assert torch.equal(dev(y1), dev(yt)), cuts
    for k in s1:
        assert torch.equal(s1[k], st[k]), (k, cuts)
    return (err_y, err_s), (yn, yt, sn, st)
