"""The gradient rule of :class:`rtamt.loudness.kweighting.KWeighting`: the K-weighting
(ITU-R BS.1770-4 Annex 1, two biquads in DF-II transposed form) is a biquad cascade, so
its adjoint is :func:`rtamt.engine.sos_grad.sos_adjoint` (no rectifier), run in float64
for float32 and float64 input alike, as the forward kernel is.  The rule declares that
adjoint's kernels (:data:`rtamt.engine.sos_grad.SOS_ADJOINT`, numba and its Triton twin),
so a Triton-bound layer runs it on the block's device."""
from __future__ import annotations

from ..engine.grad import StageGrad
from ..engine.sos_grad import SOS_ADJOINT


class KWeightingGrad(StageGrad):
    """Input and state (``zi`` ``(B, 2, 2, C)``, the two sections' memories) gradients of
    the K-weighting; the sections are designed from the rate (no learnable parameters)."""

    kernels = SOS_ADJOINT

    def backward(self, coeffs, th, x, state, gy, mu):
        k = self.kern
        gx = k.zeros(x.shape, x)
        k.sos_adjoint(k.coef(coeffs.sos), False, x, gy, mu["zi"], gx)
        return gx, None
