"""The pure functional form ``StageClass.process(coeffs, state, x)`` equals the stateful object."""
import numpy as np
import pytest

from rtamt.adaptation import AdaptLoop, AdaptLoopParams
from rtamt.filterbank import Gammatone, GammatoneParams
from rtamt.ihc import IHCEnvelope, IHCEnvelopeParams
from rtamt.modulation import ModFilterbank, ModFilterbankParams

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
