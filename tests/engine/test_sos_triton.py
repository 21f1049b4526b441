import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")

"""The Triton second-order-section kernel (rtamt.engine.sos_triton.sos_shared) against the
numba kernel (rtamt.engine.sos.sos_shared): first-order, band-pass and mixed sections,
rectified or not, into a column range of a wider output, in place, and with no sections;
float64 and float32, state carried across a random block partition."""
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from scipy import signal  # noqa: E402

from rtamt.engine import sos, sos_triton  # noqa: E402
from rtamt.ihc import envelope  # noqa: E402

from _kernel_twins import DTYPES, TOL, B, T, compare, rel, twin_states  # noqa: E402
from _triton import DEVICE, dev  # noqa: E402

KN = SimpleNamespace(sos_shared=sos.sos_shared)
KT = SimpleNamespace(sos_shared=sos_triton.sos_shared)
FS = 48000.0


def _sos_cases():
    ihc = envelope.design(envelope.IHCEnvelopeParams(FS, preset="breebaart2001")).sos
    band = signal.butter(2, [300.0, 3000.0], btype="band", fs=FS, output="sos")
    mixed = np.vstack([signal.butter(1, 800.0, fs=FS, output="sos"),
                       signal.butter(2, 2000.0, fs=FS, output="sos")])
    return {"ihc_first_order": ihc, "butter_band": band, "mixed_orders": mixed}


SOS = _sos_cases()


def _sos_call(K, st, x, y, sos, rectify, yoff):
    sos = dev(sos) if K is KT else sos
    K.sos_shared(sos, rectify, st["zi"], x, y, yoff)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case,rectify", [("ihc_first_order", True), ("butter_band", False),
                                          ("butter_band", True), ("mixed_orders", False)])
def test_sos_shared(case, rectify, dtype):
    """Every section's second memory starts non-zero: a first-order section adds it every
    sample and leaves it unchanged (numba's shorter loop), a second-order one updates it.
    The output has 3C columns, the filters write columns C..2C-1 (yoff), the others keep
    their sentinel."""
    rng = np.random.default_rng(2)
    sos = np.ascontiguousarray(SOS[case])
    S, C = sos.shape[0], 25
    x = rng.standard_normal((B, T, C)).astype(dtype)
    st0 = {"zi": (1e-3 * rng.standard_normal((B, S, 2, C))).astype(dtype)}
    y0 = np.full((B, T, 3 * C), 7.0, dtype)
    compare(KN, KT, _sos_call, x, st0, y0, rng, dtype, sos=sos, rectify=rectify, yoff=C)
    # first-order sections: the Triton kernel leaves the second memory as it was
    _, st = twin_states(st0)
    _sos_call(KT, st, dev(x), dev(y0.copy()), sos, rectify, C)
    first = (sos[:, 2] == 0) & (sos[:, 5] == 0)
    assert torch.equal(st["zi"][:, first, 1], dev(st0["zi"][:, first, 1]))
    if not first.all():
        assert not torch.equal(st["zi"][:, ~first, 1],
                               dev(st0["zi"][:, ~first, 1]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_sos_shared_in_place_and_no_sections(dtype):
    """y is x (Ftot == C, yoff == 0): same result as into a separate y; with no sections
    the kernel writes the rectified input."""
    rng = np.random.default_rng(3)
    sos = np.ascontiguousarray(SOS["mixed_orders"])
    C = 7
    x = rng.standard_normal((B, 40, C)).astype(dtype)
    zn = np.zeros((B, 2, 2, C), dtype)
    yn = np.empty_like(x)
    KN.sos_shared(sos, True, zn, x, yn, 0)
    xt = dev(x.copy())
    zt = torch.zeros((B, 2, 2, C), dtype=xt.dtype, device=DEVICE)
    KT.sos_shared(dev(sos), True, zt, xt, xt, 0)
    assert rel(xt, yn) <= TOL[dtype]
    assert rel(zt, zn) <= TOL[dtype]
    y = torch.empty_like(xt)
    z0 = torch.zeros((B, 0, 2, C), dtype=xt.dtype, device=DEVICE)
    KT.sos_shared(torch.zeros((0, 6), dtype=torch.float64, device=DEVICE), True, z0, dev(x), y, 0)
    assert torch.equal(y, dev(np.maximum(x, 0)))
