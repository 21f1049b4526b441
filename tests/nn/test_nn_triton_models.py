import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""The models' stages on the device: Paulick2024's (DRNL, its IHC, the adaptation loops
with per-channel minimum levels, the resampler, the modulation bank with its pre-filter)
and King2019's (gammatone, broken stick, IHC envelope, adaptation high-pass, its
modulation bank with the 150 Hz pre-filter) in small chains bound to the Triton kernels
(``.to(DEVICE, backend='triton')``: Triton's interpreter on the CPU, compiled on a GPU
under ``python -m latency_bench.gpu``) equal the numba layers (outputs, input, state and
parameter gradients; 1e-12 float64, 1e-5 float32) with rtamt.nn's host-copy helper made
to raise; and every stage of the full Dau1997, Osses2021, King2019 and Paulick2024
layers runs on the device once bound (``host_stages`` empty).  Sizes are small: the
interpreter is slow."""
import _nn_device as nd  # noqa: E402
import torch  # noqa: E402

import rtamt.models as rm  # noqa: E402
import rtamt.nn as rn  # noqa: E402
from rtamt.modulation.modfb import ModFilterbank, ModFilterbankParams  # noqa: E402
from rtamt.nn import _autograd  # noqa: E402

from _triton import DEVICE  # noqa: E402

DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])


def _paulick_like():
    """Paulick2024's stages after the ear (DRNL, IHC, adaptation loops, resampler by 4,
    modulation bank at 4 kHz) for two channels at 16 kHz; learnable: the loops' time
    constants and the modulation filters."""
    m = rm.Paulick2024(fs=16000.0, flow=500.0, fhigh=1500.0, n_channels=2,
                       resample_factor=4)
    stages = [s for s in m.stages if s.name in ("drnl", "ihc", "adaptloop", "resample",
                                                  "modfb")]
    return rn.ChainLayer(stages, name="paulick-like", learnable=True)


def _king_like():
    """King2019 for two channels at 8 kHz, two modulation filters after the 150 Hz
    low-pass; learnable: gammatone, broken stick and modulation filters."""
    return rn.King2019(fs=8000.0, flow=500.0, fhigh=1500.0, nmod=2, lp150=True,
                       learnable=True)


@DTYPES
def test_paulick_like_chain_on_device_equals_numba(dtype, monkeypatch):
    layer = _paulick_like()
    assert set(layer.theta) == {"adaptloop", "modfb"}
    assert layer["modfb"].coeffs.pre_sos is not None        # the pre-filter is checked
    nd.check_on_device(layer, dtype, monkeypatch, min_states=9)


@DTYPES
def test_king_like_chain_on_device_equals_numba(dtype, monkeypatch):
    layer = _king_like()
    assert set(layer.theta) == {"gammatone", "compression", "modfb"}
    assert layer["modfb"].coeffs.pre_sos is not None
    nd.check_on_device(layer, dtype, monkeypatch, min_states=6)


@pytest.mark.parametrize("name", ["Dau1997", "Osses2021", "King2019", "Paulick2024"])
def test_every_stage_of_the_model_runs_on_the_device(name):
    layer = getattr(rn, name)(fs=44100.0, learnable=True)
    assert layer.host_stages == ()                           # numba: none
    layer.to(DEVICE, backend="triton")
    assert layer.backend == "triton"
    assert layer.host_stages == (), f"{name}: on the host: {layer.host_stages}"
    assert all(p.on_device for p in layer.parts)
    assert all(p.grad is None or p.grad.kern.backend == "triton" for p in layer.parts)


@DTYPES
def test_butterworth_modulation_bank_on_device_equals_numba(dtype, monkeypatch):
    """The frequency-shifted Butterworth bank (input and state gradients; its adjoint
    ``biquad_bank_adjoint``), real-part and envelope outputs, after a pre-filter."""
    st = ModFilterbank(ModFilterbankParams(fs=8000.0, fc=(500.0, 1500.0),
                                           filter_type="butterworth", prefilter_hz=150.0))
    layer = rn.StageLayer(st, n_in=2)
    co = layer["modfb"].coeffs
    assert co.filter_type == "butterworth" and co.pre_sos is not None
    assert 0 < co.bp_nreal < co.bp_channel.size                # both kinds of output
    x = 0.3 * torch.randn(2, 2, 40, generator=torch.Generator().manual_seed(5),
                          dtype=dtype).abs()
    with torch.no_grad():
        _, s0 = layer(x)
    dl = nd.on_device(layer)
    assert dl.host_stages == ()
    ref = nd.step(layer, x, s0)
    monkeypatch.setattr(_autograd, "host", nd.no_host)
    nd.compare(ref, nd.step(dl, x, s0), dtype, min_states=3)
