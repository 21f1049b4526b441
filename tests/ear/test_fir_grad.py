"""Gradients of the ear FIRs through rtamt.nn (gradcheck in float64 of the input and the
incoming history)."""
import pytest

import rtamt.nn as rn

from _gradcheck import check_layer, noise

FS = 8000


@pytest.mark.parametrize("kind", ["headphone", "middleear"])
def test_ear_fir_gradcheck(kind):
    """The ear FIRs: input and the incoming history."""
    from rtamt.ear import HeadphoneFilter, HeadphoneParams, MiddleEarFilter, MiddleEarParams

    stage = (HeadphoneFilter(HeadphoneParams(fs=FS)) if kind == "headphone" else
             MiddleEarFilter(MiddleEarParams(fs=FS, preset="jepsen2008")))
    layer = rn.StageLayer(stage)
    assert layer.parts[0].grad is not None
    check_layer(layer, noise((1, 20)), warm=noise((1, 400), 1))
