"""Gradients of the gammatone filterbank through rtamt.nn (gradcheck in float64 of the
input and the incoming state)."""
import rtamt.nn as rn

from _gradcheck import check_layer, noise

FS = 8000
FC = (500.0, 1000.0, 3000.0)


def test_gammatone_gradcheck():
    """The gammatone's section memories grow to ~1e3 (the gain is applied at the output):
    a linear map, so a larger finite-difference step loses no accuracy and keeps the
    rounding of those large values out of the numerical Jacobian."""
    check_layer(rn.Gammatone(FS, fc=FC[:2]), noise((2, 30), scale=0.3), warm=noise((2, 20), 1),
           eps=1e-3)
