"""Gradients of the modulation filterbank through rtamt.nn (gradcheck in float64 of the
input and every state entry: the efilt bank and the frequency-shifted Butterworth bank,
with and without the 150 Hz pre-filter)."""
import pytest

import rtamt.nn as rn

from _gradcheck import check_layer, noise

FS = 8000
FC = (500.0, 1000.0, 3000.0)


@pytest.mark.parametrize("preset", ["amt0910", "jepsen2008"])
def test_modfb_gradcheck(preset):
    """The efilt bank: low-pass, real-part and envelope filters (amt0910 reaches
    envelope filters at fc = 3 kHz), with the 150 Hz pre-filter in jepsen2008."""
    layer = rn.ModFilterbank(FS, fc=FC, preset=preset)
    c = layer.parts[0].coeffs
    assert 0 < c.bp_nreal < c.bp_channel.size          # both kinds of filter present
    check_layer(layer, noise((1, 3, 25)), warm=noise((1, 3, 20), 1))


@pytest.mark.parametrize("preset", ["amt0910", "jepsen2008"])
def test_modfb_butterworth_gradcheck(preset):
    """The frequency-shifted Butterworth bank: real-part and envelope biquads, with and
    without the pre-filter; input and every state entry.  The envelopes ``|o|`` pass
    close to 0 in this short white-noise block, where they bend sharply: a smaller
    finite-difference step keeps the numerical Jacobian's truncation error below the
    tolerance."""
    layer = rn.ModFilterbank(FS, fc=FC, preset=preset, filter_type="butterworth")
    c = layer.parts[0].coeffs
    assert 0 < c.bp_nreal < c.bp_channel.size
    check_layer(layer, noise((1, 3, 25)), warm=noise((1, 3, 20), 1), eps=1e-7)
