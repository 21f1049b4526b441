import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""The loudness models' layers on the device: ``rn.Glasberg2002`` (a batch of two mono
streams) and ``rn.Moore2016`` (one stereo stream), every parameter learnable,
bound to the Triton kernels (``.to(DEVICE, backend='triton')``: Triton's interpreter on the
CPU, compiled on a GPU under ``python -m latency_bench.gpu``), equal the numba layers
(outputs, input, incoming-state and parameter gradients; 1e-12 float64, 1e-5 float32)
with rtamt.nn's host-copy helper made to raise: the block, the frames, the float state and
every gradient stay on the device (the frame clock excepted).  Moore2016's
``config='tvl2018'`` (the component floor has no device adjoint) refuses
``backend='triton'``.  The streams are warmed up on numba
(~90 ms of signal) and then run one block of two frames: the interpreter is slow."""
import _nn_device as nd  # noqa: E402
import torch  # noqa: E402

import rtamt.nn as rn  # noqa: E402
from rtamt.engine.backend import RtamtBackendError  # noqa: E402
from rtamt.nn import _autograd  # noqa: E402

FS = 32000.0
#: (layer, one stream's leading shape, state entries with a nonzero gradient at least)
CASES = {"glasberg2002": (rn.Glasberg2002, 2, (), 3), "moore2016": (rn.Moore2016, 1, (2,), 3)}


def _warm(layer, batch, lead, dtype, n0=3000, n=40):
    """The state of ``batch`` streams after ``n0`` samples of noise (numba), and the next
    block (``n`` samples: two frames, 1 ms apart)."""
    g = torch.Generator().manual_seed(5)
    x0 = 0.3 * torch.randn((batch,) + lead + (n0,), generator=g, dtype=dtype)
    with torch.no_grad():
        _, st = layer(x0)
    return 0.3 * torch.randn((batch,) + lead + (n,), generator=g, dtype=dtype), st


@pytest.mark.parametrize("name, dtype", [("glasberg2002", torch.float32),
                                         ("moore2016", torch.float64)],
                         ids=["glasberg2002-f32", "moore2016-f64"])
def test_loudness_layer_on_device_equals_numba(name, dtype, monkeypatch):
    """Each model in one dtype (the Triton interpreter takes 1-3 min a case; both dtypes
    of both models ran once, 2026-11-29, and agreed as asserted here)."""
    make, batch, lead, min_states = CASES[name]
    layer = make(FS, learnable=True)
    x, st = _warm(layer, batch, lead, dtype)
    ref = nd.step(layer, x, st)
    dl = nd.on_device(layer)
    assert dl.backend == "triton" and dl.on_device and dl.host_stages == ()
    monkeypatch.setattr(_autograd, "host", nd.no_host)
    got = nd.step(dl, x, st)
    tol = nd.TOL[dtype]
    assert got[0].device == x.device and got[0].dtype == dtype
    assert nd.rel(got[0], ref[0]) <= tol
    assert nd.rel(got[1], ref[1]) <= tol
    assert set(got[2]) == set(ref[2])
    live = [k for k in ref[2] if float(ref[2][k].abs().max()) > 0]
    assert len(live) >= min_states, live
    for k in ref[2]:
        if k in live:
            assert nd.rel(got[2][k], ref[2][k]) <= tol, k
        else:                        # the spectrum's rings: their gradient is in hist's
            assert float(got[2][k].abs().max()) == 0.0, k
    assert set(got[3]) == set(ref[3]) == set(layer.theta)
    for k in ref[3]:
        assert float(ref[3][k].abs().max()) > 0, k
        assert nd.rel(got[3][k], ref[3][k]) <= tol, k


def test_loudness_forward_on_device_without_gradient(monkeypatch):
    """No gradient wanted: the model's pure ``process`` on the device, outputs and state
    equal the numba layer's (float64) with the host-copy helper made to raise."""
    layer = rn.Glasberg2002(FS, output="all")
    x, st = _warm(layer, 2, (), torch.float64)
    with torch.no_grad():
        y0, s0 = layer(x, st)
        dl = nd.on_device(layer)
        monkeypatch.setattr(_autograd, "host", nd.no_host)
        y1, s1 = dl(x, st)
    assert set(y1) == set(y0)
    for k in y0:
        if k == "frame_time":
            assert torch.equal(y1[k].cpu(), y0[k])
        else:
            assert nd.rel(y1[k], y0[k]) <= nd.TOL[torch.float64], k
    for k in s0:
        if s0[k].is_floating_point() and float(s0[k].abs().max()) > 0:
            assert nd.rel(s1[k], s0[k]) <= nd.TOL[torch.float64], k
        else:
            assert torch.equal(s1[k].cpu(), s0[k]), k


def test_tvl2018_configuration_stays_on_the_host():
    """The component floor has no device adjoint: an explicit Triton binding is refused
    and names it; the layer keeps the numba kernels."""
    layer = rn.Moore2016(FS, config="tvl2018")
    with pytest.raises(RtamtBackendError, match="component_floor|floor"):
        layer.to("cpu", backend="triton")
    assert layer.backend == "numba" and not layer.on_device
