import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")

"""The Triton modulation-filterbank kernels (rtamt.modulation.modfb_triton: modfb_efilt and
cplx_biquad_bank) against the numba kernels beside their stage, on ragged banks designed by
the stage (amt0910 and jepsen2008, efilt and Butterworth): float64 and float32, state
carried across a random block partition; the efilt band-passes bit-identical."""
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from rtamt.modulation import modfb, modfb_triton  # noqa: E402

from _kernel_twins import DTYPES, B, T, compare  # noqa: E402
from _triton import dev, host  # noqa: E402

KN = SimpleNamespace(modfb_efilt=modfb.modfb_efilt, cplx_biquad_bank=modfb.cplx_biquad_bank)
KT = SimpleNamespace(modfb_efilt=modfb_triton.modfb_efilt,
                     cplx_biquad_bank=modfb_triton.cplx_biquad_bank)
FS = 48000.0


def _mfb(preset, filter_type):
    # ragged banks: the channels reach different upper modulation frequencies
    return modfb.design(modfb.ModFilterbankParams(FS, fc=(150.0, 400.0, 1000.0, 4000.0),
                                                  preset=preset, filter_type=filter_type))


def _efilt_call(K, st, x, y, co, coef, channel):
    if K is KT:
        KT.modfb_efilt(dev(co.lp_sos), st["lp"], dev(co.bp_runs),
                       co.bp_nreal, dev(coef), st["bp"], x, y,
                       channel=None if channel is None else dev(channel))
    else:
        KN.modfb_efilt(co.lp_sos, st["lp"], co.bp_runs, co.bp_nreal, coef, st["bp"], x, y)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("preset,with_channel", [("amt0910", True), ("jepsen2008", False)])
def test_modfb_efilt(preset, with_channel, dtype):
    """with_channel=False: the filter -> channel map is derived from ``runs``."""
    rng = np.random.default_rng(4)
    co = _mfb(preset, "efilt")
    C, Fb = co.fc.size, co.bp_channel.size
    assert 0 < co.bp_nreal < Fb and len(co.bp_runs) > 1
    if preset == "jepsen2008":
        assert np.any(co.bp_scale != 1.0)
    coef = co.bp_coef if dtype == np.float64 else co.bp_coef32
    x = (1.0 + rng.standard_normal((B, T, C))).astype(dtype)
    st0 = {"lp": (1e-3 * rng.standard_normal((B, co.lp_sos.shape[0], 2, C))).astype(dtype),
           "bp": (1e-3 * rng.standard_normal((B, 2, Fb))).astype(dtype)}
    y0 = np.zeros((B, T, C + Fb), dtype)
    ch = co.bp_channel if with_channel else None
    _, (yn, yt, sn, st) = compare(KN, KT, _efilt_call, x, st0, y0, rng, dtype, co=co, coef=coef,
                                   channel=ch)
    # the band-pass bank is built without FMA contraction on both sides and spells out the
    # same fused multiply-adds and a correctly rounded square root: bit-identical
    assert np.array_equal(yt[..., C:], yn[..., C:])
    assert np.array_equal(host(st["bp"]), sn["bp"])


def _cbq_call(K, st, x, y, co):
    args = (co.bp_channel, co.bp_nreal, co.bp_b, co.bp_a, co.bp_scale)
    if K is KT:
        args = tuple(dev(a) if isinstance(a, np.ndarray) else a for a in args)
    K.cplx_biquad_bank(*args, st["bp"], x, y, co.fc.size)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cplx_biquad_bank(dtype):
    """The Butterworth-type bank (filter_type='butterworth'; no model preset uses it) into
    columns C.. of the packed output; columns 0..C-1 keep their sentinel."""
    rng = np.random.default_rng(5)
    co = _mfb("jepsen2008", "butterworth")
    C, Fb = co.fc.size, co.bp_channel.size
    assert 0 < co.bp_nreal < Fb and co.bp_b is not None
    x = (1.0 + rng.standard_normal((B, T, C))).astype(dtype)
    st0 = {"bp": (1e-3 * rng.standard_normal((B, Fb, 2, 2))).astype(dtype)}
    y0 = np.full((B, T, C + Fb), 7.0, dtype)
    compare(KN, KT, _cbq_call, x, st0, y0, rng, dtype, co=co)
