import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")

"""The Triton gammatone kernel (rtamt.filterbank.gammatone_triton.gammatone4) against the
numba kernel beside its stage, on the coefficients its stage designs: random input, a batch
of 3 streams, float64 and float32, state carried across a random block partition, and the
Triton kernel on one call against that partition (bit-identical)."""
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from rtamt.filterbank import gammatone, gammatone_triton  # noqa: E402

from _kernel_twins import DTYPES, B, T, compare  # noqa: E402
from _triton import dev  # noqa: E402

KN = SimpleNamespace(gammatone4=gammatone.gammatone4)
KT = SimpleNamespace(gammatone4=gammatone_triton.gammatone4)
FS = 48000.0


def _gt_call(K, st, x, y, lanes):
    lanes = dev(lanes) if K is KT else lanes
    K.gammatone4(lanes, st["sr"], st["si"], x, y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gammatone4(dtype):
    rng = np.random.default_rng(1)
    fc = tuple(np.geomspace(80.0, 20000.0, 25))  # 75 lanes: two programs, a masked tail
    co = gammatone.design(gammatone.GammatoneParams(FS, fc=fc))
    C = len(fc)
    x = rng.standard_normal((B, T)).astype(dtype)
    st0 = {k: (1e-3 * rng.standard_normal((B, 4, C))).astype(dtype) for k in ("sr", "si")}
    y0 = np.zeros((B, T, C), dtype)
    compare(KN, KT, _gt_call, x, st0, y0, rng, dtype, lanes=co.lanes)
