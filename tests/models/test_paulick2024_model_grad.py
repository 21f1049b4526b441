"""Gradients of every stage of Paulick2024 in the model's own configuration (issue 42
item 1): the headphone and ``lopezpoveda2001`` middle-ear FIRs, the ``paulick2024`` DRNL,
the physiological IHC, the adaptation loops with the model's per-channel minimum levels,
the resampler by the factor the sample rate selects and the ``paulick2024`` modulation
bank at the reduced rate.  Each stage is taken from the model's layer and fed what the
stages before it give for a calibrated noise (so its input is in the model's units, e.g.
some IHC outputs below their channel's minimum level); gradcheck in float64 w.r.t. the
block input and every floating-point entry of the incoming state; the learnable stages
(adaptation loops, modulation bank) also w.r.t. their ``theta``."""
import numpy as np
import pytest
import torch

import rtamt.nn as rn

from _gradcheck import check_layer, check_params, noise

FS = 16000
KW = dict(n_channels=3, fhigh=4000.0)
WARM, BLOCK = 301, 20      # samples at fs; the warm-up ends inside a decimation phase


def _stage_signals():
    """The stages of Paulick2024's layer (after the calibration) with the signal each one
    gets and gives, time-last: ``{name: (part, x, y)}``."""
    layer = rn.Paulick2024(FS, **KW)
    x = noise((1, WARM + 3 * BLOCK), 1, scale=0.3)
    out = {}
    with torch.no_grad():
        for p in layer.parts:
            y, _ = rn.StageLayer(p.stage, n_in=p.n_in)(x)
            out[p.name] = (p, x, y)
            x = y
    return out


@pytest.mark.parametrize("name", ["headphone", "middleear", "drnl", "ihc", "adaptloop",
                                  "resample", "modfb"])
def test_paulick2024_stage_gradcheck(name):
    """Input and incoming state of stage ``name`` as Paulick2024 builds it, after a
    warm-up on the model's own signal at that point; the block's last samples (10 at the
    modulation bank's rate, fs / 2), finite differences and tolerance scaled to the
    stage's units (its output's range over its input's)."""
    p, x, y = _stage_signals()[name]
    layer = rn.StageLayer(p.stage, n_in=p.n_in)
    assert layer.parts[0].grad is not None
    k = x.shape[-1] - (BLOCK if name != "modfb" else BLOCK // 2)
    warm, blk = x[..., :k].contiguous(), x[..., k:].contiguous()
    if name == "adaptloop":      # the minimum levels act on some channels of the block
        minlvl = torch.as_tensor(np.asarray(p.coeffs.lanes[0][:p.n_in]))
        assert (blk < minlvl[:, None]).any() and (blk > minlvl[:, None]).any()
    xs, ys = float(blk.abs().max()), float(y.abs().max())
    check_layer(layer, blk, warm=warm, eps=1e-6 * xs, atol=1e-6 * ys / xs)


@pytest.mark.parametrize("name", ["adaptloop", "modfb"])
def test_paulick2024_learnable_stage_gradcheck(name):
    """``theta`` of each learnable stage as Paulick2024 builds it, away from the design,
    from the state after a warm-up on the model's own signal at that point: the
    adaptation loops' log time constants with the model's per-channel minimum levels
    (some channels of the block below theirs), the ``paulick2024`` modulation bank's log
    centre frequencies and log Q at the reduced rate (fs / 2: its 150 Hz pre-filter,
    2.5 Hz low-pass and band-passes up to a quarter of each channel's centre frequency).
    The block input's gradient is checked above (its units differ from theta's)."""
    p, x, _ = _stage_signals()[name]
    layer = rn.StageLayer(p.stage, n_in=p.n_in, learnable=True)
    n = layer.theta[name].numel()
    k = x.shape[-1] - (BLOCK if name != "modfb" else BLOCK // 2)
    if name == "adaptloop":
        minlvl = np.asarray(p.coeffs.minlvl)[:, None]
        assert n == 5 and np.unique(minlvl).size == p.n_in
        blk = x[..., k:].numpy()
        assert (blk < minlvl).any() and (blk > minlvl).any()
    else:
        c = p.coeffs
        assert p.stage.params.preset == "paulick2024" and c.fs == FS / 2
        assert n == c.filter_mfc.size - c.fc.size + 1
    th = 0.1 * np.random.default_rng(3).standard_normal(n)
    check_params(layer, name, th, x[..., k:].contiguous(), warm=x[..., :k].contiguous(),
                 wrt_input=False)
