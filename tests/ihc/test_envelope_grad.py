"""Gradients of the inner-hair-cell envelope through rtamt.nn (gradcheck in float64 of
the input and the incoming state, both presets)."""
import pytest

import rtamt.nn as rn

from _gradcheck import check_layer, noise

FS = 8000


@pytest.mark.parametrize("preset", ["dau1996", "breebaart2001"])
def test_ihc_gradcheck(preset):
    check_layer(rn.IHCEnvelope(FS, 2, preset=preset), noise((2, 2, 30)), warm=noise((2, 2, 20), 1))
