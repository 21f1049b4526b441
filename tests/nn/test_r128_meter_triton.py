import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""rn.R128Meter bound to the Triton kernels (``.to(DEVICE, backend='triton')``: Triton's
interpreter on the CPU, compiled on a GPU under ``python -m latency_bench.gpu``): the
K-weighting, the gating blocks and the true peak run their Triton forward twins and
their rules' Triton adjoints on the block's device, with the host-copy helper of
rtamt.nn made to raise; the gated statistics run on the host (``host_stages`` says so;
their one way there is counted).  Outputs (momentary, short-term, integrated loudness,
true and sample peak) and the gradients of the input and of every differentiable incoming
state entry equal the numba meter's within 1e-12 (float64; 1e-5 float32).  Small sizes:
8 kHz (a step is 800 samples), the state after 3 s of numba, then one block of 420
samples that completes a step with both windows full, quieter (the incoming peaks held)
or louder (new peaks); the Annex 2 true peak (the interpreter runs every kernel operation
as a numpy call; the 'sinc' adjoint is checked kernel against kernel in
tests/loudness/test_meter_grad_triton.py)."""
import copy  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import rtamt.nn as rn  # noqa: E402
from rtamt.nn import _autograd, _meter  # noqa: E402

from _triton import DEVICE  # noqa: E402

FS = 8000.0
TOL = {torch.float64: 1e-12, torch.float32: 1e-5}
DIFF = ["kweighting.zi", "gating.acc", "gating.ring_e", "gating.peak", "statistics.gate_e",
        "truepeak.hist", "truepeak.true_peak", "truepeak.sample_peak"]


def _rel(got, ref) -> float:
    got, ref = got.detach().cpu().to(torch.float64), ref.detach().to(torch.float64)
    assert torch.equal(torch.isfinite(got), torch.isfinite(ref))
    ok = torch.isfinite(ref)
    scale = float(ref[ok].abs().max())
    if scale == 0.0:                    # a gradient the held maximum moved elsewhere
        return float(got[ok].abs().max())
    return float((got[ok] - ref[ok]).abs().max()) / scale


def _step(layer, x, state):
    """Forward + backward of a loss on every differentiable output and the outgoing
    state's float entries; the outputs and the gradients of the input and state."""
    dev = layer.device
    xx = x.to(dev).requires_grad_(True)
    st = {k: (v.to(dev).requires_grad_(True) if k in DIFF else v.to(dev))
          for k, v in state.items()}
    out, new = layer(xx, st)
    loss = sum(torch.nan_to_num(out[k], nan=0.0, neginf=0.0).sum()
               for k in ("momentary", "short_term", "integrated", "true_peak", "sample_peak"))
    loss = loss + sum((new[k] * new[k]).sum() for k in DIFF)
    loss.backward()
    return out, xx.grad, {k: st[k].grad for k in DIFF}


@pytest.mark.parametrize("level, dtype", [(0.05, torch.float64), (0.2, torch.float64),
                                          (0.05, torch.float32)],
                         ids=["peaks-held", "new-peaks", "float32"])
def test_meter_on_device_equals_numba_without_host_copies(level, dtype, monkeypatch):
    layer = rn.R128Meter(FS, 2, truepeak="bs1770")
    dl = copy.deepcopy(layer).to(DEVICE, backend="triton")
    assert dl.backend == "triton" and dl.host_stages == ("statistics",)
    assert all(p.on_device for p in dl.parts) and dl.truepeak.on_device
    rng = np.random.default_rng(4)
    with torch.no_grad():
        _, st = layer(torch.from_numpy(0.1 * rng.standard_normal((2, 2, 24_400))).to(dtype))
    x = torch.from_numpy(level * rng.standard_normal((2, 2, 420))).to(dtype)
    tol = TOL[dtype]
    ref = _step(layer, x, st)
    assert int(ref[0]["step"][0, 0]) == 31          # a step with both windows full
    monkeypatch.setattr(_autograd, "host", lambda t: (_ for _ in ()).throw(
        AssertionError("a block went to the host")))
    calls = []
    real = _meter._to_host
    monkeypatch.setattr(_meter, "_to_host", lambda t: calls.append(t.shape) or real(t))
    got = _step(dl, x, st)
    assert calls                                    # the statistics: on the host
    for k in ("momentary", "short_term", "integrated", "true_peak", "sample_peak"):
        assert _rel(got[0][k], ref[0][k]) <= tol, k
    assert got[1].device == dl.device and got[1].dtype == dtype
    assert _rel(got[1], ref[1]) <= tol
    for k in DIFF:
        assert _rel(got[2][k], ref[2][k]) <= tol, k
    if level < 0.1:         # every incoming entry but the true peak's 11-sample history
        assert [k for k in DIFF if not ref[2][k].any()] == ["truepeak.hist"]
