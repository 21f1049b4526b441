"""The gradient rule of :class:`rtamt.loudness.kweighting.KWeighting`: the K-weighting
(ITU-R BS.1770-4 Annex 1, two biquads in DF-II transposed form) is a biquad cascade, so
its adjoint is :func:`rtamt.engine.sos_grad.sos_adjoint` (no rectifier), run in float64
for float32 and float64 input alike, as the forward kernel is."""
from __future__ import annotations

import numpy as np

from ..engine.grad import StageGrad
from ..engine.sos_grad import sos_adjoint


class KWeightingGrad(StageGrad):
    """Input and state (``zi`` ``(B, 2, 2, C)``, the two sections' memories) gradients of
    the K-weighting; the sections are designed from the rate (no learnable parameters)."""

    def backward(self, coeffs, th, x, state, gy, mu):
        gx = np.zeros(x.shape)
        sos_adjoint(coeffs.sos, False, x, gy, mu["zi"], gx)
        return gx, None
