"""The pure functional form ``StageClass.process(coeffs, state, x)`` equals the stateful object
(for a chain of stages, and for every stage example, found)."""
import numpy as np
import pytest

from rtamt.adaptation import AdaptLoop, AdaptLoopParams
from rtamt.filterbank import Gammatone, GammatoneParams
from rtamt.ihc import IHCEnvelope, IHCEnvelopeParams
from rtamt.modulation import ModFilterbank, ModFilterbankParams

from _examples import cases, example_input, make, on_samples

FS = 16000.0


def _x(n=3000, seed=0):
    return np.random.default_rng(seed).standard_normal((2, n)) * 0.03


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pure_process_matches_stateful_chain_of_stages(dtype):
    x = _x().astype(dtype)
    gp = GammatoneParams(fs=FS, basef=1000.0)
    gc = Gammatone.design(gp)
    C = gc.fc.size
    specs = [
        (Gammatone, gp, 1),
        (IHCEnvelope, IHCEnvelopeParams(fs=FS), C),
        (AdaptLoop, AdaptLoopParams(fs=FS), C),
        (ModFilterbank, ModFilterbankParams(fs=FS, fc=tuple(gc.fc)), C),
    ]
    y_pure, y_obj = x, x
    for cls, params, n_in in specs:
        coeffs = cls.design(params, n_in if cls is AdaptLoop else None)
        state = cls.init_state(coeffs, 2, n_in, np.dtype(dtype))
        halves = [cls.process(coeffs, state, y_pure[..., :1234]),
                  cls.process(coeffs, state, y_pure[..., 1234:])]
        y_pure = np.concatenate(halves, axis=-1)
        y_obj = cls(params)(y_obj)
        assert y_pure.dtype == dtype
        np.testing.assert_array_equal(y_pure, y_obj)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("cls, ex", cases(
    where=lambda cls, ex: on_samples(cls, ex) and ex.streamed))
def test_pure_process_matches_the_stage(cls, ex, dtype):
    """Every stage example whose output is a stream (found: tests/support/_examples.py):
    ``cls.process(coeffs, state, x)`` over two blocks, from ``init_state``, equals the
    stateful stage on the whole input, bit for bit."""
    if not ex.takes(dtype):
        pytest.skip(f"{ex.id}: the stage does not take {np.dtype(dtype).name}")
    x = example_input(ex, 3000, dtype, start=300)
    st = make(cls, ex)
    xb = x[None] if st.in_kind == "channels" or x.ndim == 1 else x   # (B, T) / (B, C, T)
    n_in = xb.shape[1] if st.in_kind == "channels" else 1
    st.prepare(x)                                   # the design for n_in channels
    state = cls.init_state(st.coeffs, xb.shape[0], n_in, np.dtype(dtype))
    y_pure = np.concatenate([cls.process(st.coeffs, state, xb[..., :1234]),
                             cls.process(st.coeffs, state, xb[..., 1234:])], axis=-1)
    y_obj = np.asarray(make(cls, ex)(x))
    assert y_pure.dtype == y_obj.dtype and y_pure.size == y_obj.size
    np.testing.assert_array_equal(y_pure.reshape(y_obj.shape), y_obj)
