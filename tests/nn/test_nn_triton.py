import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""rtamt.nn on the device: a ChainLayer bound to the Triton kernels (``.to(DEVICE,
backend='triton')``: Triton's interpreter on the CPU, compiled on a GPU under
``python -m latency_bench.gpu``) runs its stages' Triton forward twins and their rules'
Triton adjoints, and equals the numba layer: outputs, input, state and parameter gradients
(1e-12 float64, 1e-5 float32), with the host-copy helper of rtamt.nn made to raise (no
block, state or gradient goes to the host).  Also: binding back to numba, a stage whose
rule has no Triton adjoint running on the host, the input check on the device.  The chain
is Dau1997's sample stages (ear FIR, gammatone, IHC envelope, adaptation loops) with a
broken-stick compression, learnable where the rules allow; sizes are small (the
interpreter is slow)."""
import copy  # noqa: E402

import _nn_device as nd  # noqa: E402
import torch  # noqa: E402

import rtamt.nn as rn  # noqa: E402
from rtamt.adaptation.adaptloop import AdaptLoop, AdaptLoopParams  # noqa: E402
from rtamt.ear import HeadphoneFilter  # noqa: E402
from rtamt.engine.contract import RtamtInputError  # noqa: E402
from rtamt.filterbank.gammatone import Gammatone, GammatoneParams  # noqa: E402
from rtamt.ihc.envelope import IHCEnvelope, IHCEnvelopeParams  # noqa: E402
from rtamt.nn import _autograd  # noqa: E402
from rtamt.nonlinear.compression import BrokenStick, CompressionParams, PowerCompression  # noqa: E402

from _triton import DEVICE  # noqa: E402

FS = 8000.0
FC = (500.0, 1500.0)


def _chain(learnable=True):
    stages = [HeadphoneFilter(fs=FS), Gammatone(GammatoneParams(FS, fc=FC)),
              BrokenStick(CompressionParams(knee_db=30.0, exponent=0.3)),
              IHCEnvelope(IHCEnvelopeParams(fs=FS)), AdaptLoop(AdaptLoopParams(fs=FS))]
    return rn.ChainLayer(stages, name="dau-like", learnable=learnable)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_chain_on_device_equals_numba_without_host_copies(dtype, monkeypatch):
    layer = _chain()
    assert set(layer.theta) == {"gammatone", "brokenstick", "adaptloop"}
    nd.check_on_device(layer, dtype, monkeypatch)


def test_bound_back_to_numba_is_the_numba_layer():
    layer = _chain(learnable=False)
    bound = nd.on_device(layer)
    copied = copy.deepcopy(bound)                  # a copy of a bound layer stays bound
    assert copied.backend == "triton" and all(p.on_device for p in copied.parts)
    x, st = nd.warm(layer, torch.float64)
    with torch.no_grad():
        y_ref, _ = layer(x, st)
        y_cp, _ = copied(x.to(copied.device), {k: v.to(copied.device) for k, v in st.items()})
    assert nd.rel(y_cp, y_ref) <= nd.TOL[torch.float64]
    dl = bound.to("cpu", backend="numba")
    assert dl.backend == "numba" and not any(p.on_device for p in dl.parts)
    ref, got = nd.step(layer, x, st), nd.step(dl, x, st)
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
    for k in ref[2]:
        assert torch.equal(got[2][k], ref[2][k]), k


def test_stage_without_triton_adjoint_runs_on_the_host(monkeypatch):
    """A rule without Triton adjoints (here: the adaptation loops', declared so on the
    rule object) keeps its stage on the host; the others stay on the device, and the
    gradients are those of the numba layer."""
    layer = _chain()
    dl = copy.deepcopy(layer)
    dl["adaptloop"].grad.device_ready = False
    dl.to(DEVICE, backend="triton")
    assert dl.host_stages == ("adaptloop",)
    calls = []
    real = _autograd.host
    monkeypatch.setattr(_autograd, "host", lambda t: calls.append(1) or real(t))
    x, st = nd.warm(layer, torch.float64)
    nd.compare(nd.step(layer, x, st), nd.step(dl, x, st), torch.float64)
    assert calls                                   # the adaptation loops went to the host


def test_power_compression_rule_on_device(monkeypatch):
    """The compression rules' torch form (no adjoint kernel) against their numpy form,
    the parameter gradients included, on both sides of the zero of the power law."""
    layer = rn.StageLayer(PowerCompression(CompressionParams(knee_db=30.0,
                                                             exponent=(0.3, 0.6))),
                          n_in=2, learnable=True)
    dl = nd.on_device(layer)
    x = torch.linspace(-0.5, 0.5, 2 * 2 * 11, dtype=torch.float64).reshape(2, 2, 11)
    ref = nd.step(layer, x, layer.initial_state(2, dtype=torch.float64))
    monkeypatch.setattr(_autograd, "host", nd.no_host)
    got = nd.step(dl, x, dl.initial_state(2, dtype=torch.float64))
    assert nd.rel(got[0], ref[0]) <= 1e-12 and nd.rel(got[1], ref[1]) <= 1e-12
    assert nd.rel(got[3]["power"], ref[3]["power"]) <= 1e-12


def test_input_check_on_device_names_the_sample():
    layer = _chain(learnable=False)
    dl = nd.on_device(layer)
    x = torch.zeros(2, 16, dtype=torch.float64)
    x[1, 5] = float("nan")
    with pytest.raises(RtamtInputError) as ref:
        layer(x)
    with pytest.raises(RtamtInputError) as got:
        dl(x.to(dl.device))
    assert str(got.value) == str(ref.value) and "batch 1, sample 5" in str(got.value)
