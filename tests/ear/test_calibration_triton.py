import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

# The calibration stage's Triton twin (rtamt.ear.calibration_triton.scale) against its
# numpy twin: bit-identical products in float32 and float64, through the stage on the
# Triton backend and alone.

import numpy as np  # noqa: E402

from rtamt.ear.calibration import InputCalibration, scale  # noqa: E402
from rtamt.ear.calibration_triton import scale as scale_triton  # noqa: E402

from _triton import DEVICE, dev, host  # noqa: E402


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_triton_twin_equals_numpy_bit_for_bit(dtype):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((3, 517)) * 0.3).astype(dtype)
    g = np.array([10 ** (-13.7 / 20)], dtype)
    want = scale(x, g, np.empty_like(x))
    y = scale_triton(dev(x), dev(g), dev(np.empty_like(x)))
    assert np.array_equal(host(y), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stage_on_the_triton_backend_equals_numba(dtype):
    x = (np.random.default_rng(8).standard_normal((2, 300)) * 0.1).astype(dtype)
    a = InputCalibration(87.0)
    b = InputCalibration(87.0).to(DEVICE, backend="triton")
    ya, yb = a(x[:, :100]), b(torch.from_numpy(x[:, :100]))
    assert np.array_equal(host(yb), ya)
    assert np.array_equal(host(b(torch.from_numpy(x[:, 100:]))), a(x[:, 100:]))
