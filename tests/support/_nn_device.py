"""Helpers of the rtamt.nn device tests (tests/nn/test_nn_triton*.py): a layer bound to the
Triton kernels on the test device of :mod:`_triton` against its numba layer, through a
forward and backward step with a loss on the output and on the outgoing state."""
from __future__ import annotations

import copy

import torch

from rtamt.nn import _autograd

from _triton import DEVICE

#: max |difference| relative to max |reference| allowed between the Triton and numba layers
TOL = {torch.float64: 1e-12, torch.float32: 1e-5}


def on_device(layer):
    """A copy of ``layer`` bound to the Triton kernels on :data:`DEVICE`."""
    return copy.deepcopy(layer).to(DEVICE, backend="triton")


def rel(got, ref) -> float:
    """max |got - ref| / max |ref| (float64, on the host); ``ref`` must not be all zero."""
    got, ref = got.detach().cpu().to(torch.float64), ref.detach().to(torch.float64)
    scale = float(ref.abs().max())
    assert scale > 0, "reference is all zero: the comparison would be vacuous"
    return float((got - ref).abs().max()) / scale


def step(layer, x, state):
    """Forward + backward of a loss on the output and the outgoing state; returns the
    output and the gradients of the input, the incoming state and the parameters."""
    dev = layer.device
    for p in layer.theta.values():
        p.grad = None
    # own leaves (``x.to('cpu')`` is ``x`` itself: two steps on the same tensors would
    # accumulate into one ``.grad`` and compare it with itself)
    xx = x.detach().clone().to(dev).requires_grad_(True)
    st = {k: (v.detach().clone().to(dev).requires_grad_(True) if v.is_floating_point()
              else v.clone().to(dev)) for k, v in state.items()}
    y, new = layer(xx, st)
    w = torch.linspace(-1.0, 1.0, y.shape[-1], dtype=y.dtype, device=dev)
    loss = (y * w).sum() + sum((v * v).sum() for k, v in new.items() if v.is_floating_point())
    loss.backward()
    return (y.detach(), xx.grad, {k: v.grad for k, v in st.items() if v.grad is not None},
            {k: p.grad.clone() for k, p in layer.theta.items()})


def warm(layer, dtype, batch=2, n0=60, n=24, amp=0.3):
    """The state after ``n0`` samples of noise of RMS ``amp`` (numba), and the next
    block's input (``n`` samples)."""
    g = torch.Generator().manual_seed(3)
    x0 = amp * torch.randn(batch, n0, generator=g, dtype=dtype)
    with torch.no_grad():
        _, st = layer(x0)
    return amp * torch.randn(batch, n, generator=g, dtype=dtype), st


def compare(ref, got, dtype, min_states=5):
    """Outputs, input, state and parameter gradients of two :func:`step` results equal
    within :data:`TOL`; at least ``min_states`` state entries get a gradient."""
    assert rel(got[0], ref[0]) <= TOL[dtype]
    assert rel(got[1], ref[1]) <= TOL[dtype]
    assert set(got[2]) == set(ref[2]) and len(ref[2]) >= min_states
    for k in ref[2]:
        assert rel(got[2][k], ref[2][k]) <= TOL[dtype], k
    assert set(got[3]) == set(ref[3])
    for k in ref[3]:
        assert rel(got[3][k], ref[3][k]) <= TOL[dtype], k


def no_host(*a, **k):
    """Stands in for :func:`rtamt.nn._autograd.host` where no block may go to the host."""
    raise AssertionError("a block went to the host")


def check_on_device(layer, dtype, monkeypatch, min_states=5):
    """``layer`` bound to the Triton kernels runs every stage on the device and equals
    ``layer`` (:func:`compare`, one :func:`step` after :func:`warm`) with
    :func:`rtamt.nn._autograd.host` made to raise (no block goes to the host)."""
    dl = on_device(layer)
    assert dl.backend == "triton" and dl.host_stages == ()
    assert all(p.on_device for p in dl.parts)
    x, st = warm(layer, dtype)
    ref = step(layer, x, st)
    monkeypatch.setattr(_autograd, "host", no_host)
    got = step(dl, x, st)
    assert got[0].device == got[1].device == dl.device
    compare(ref, got, dtype, min_states)
