"""rn.R128Meter, the BS.1770-4 / EBU R128 meter as a layer (rtamt/nn/_meter.py): forward
bit-exact with LoudnessMeter for any block partition and either dtype; gradients of the
momentary, short-term and integrated loudness and the peaks (gradcheck w.r.t. the input and every
differentiable state entry; two blocks with carried state give the gradient of one call,
including a block that completes no gating block); a gradient through the state only."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

import rtamt.nn as rn
from rtamt.engine.contract import RtamtInputError
from rtamt.loudness.bs1770 import LoudnessMeter

from _gradcheck import noise

#: the differentiable state entries (the rest: the clock's integers, the histograms'
#: counts and the loudness range's histogram, which has no gradient)
DIFF = ["kweighting.zi", "gating.acc", "gating.ring_e", "gating.peak", "statistics.gate_e",
        "truepeak.hist", "truepeak.true_peak", "truepeak.sample_peak"]


def _programme(C, n, fs, seed):
    """A noise programme whose level rises by 40 dB: every gate has blocks on both sides."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((C, n)) * np.geomspace(0.003, 0.3, n)


def _same(a, b) -> bool:
    """Equal values, NaN equal to NaN (None: NaN)."""
    b = math.nan if b is None else b
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("fs, C, dtype, tp", [(48000.0, 2, torch.float64, "sinc"),
                                              (44100.0, 1, torch.float32, "bs1770"),
                                              (48000.0, 6, torch.float32, "sinc")])
def test_forward_is_the_meter_bit_for_bit(fs, C, dtype, tp):
    n = int(3.7 * fs)
    x = np.stack([_programme(C, n, fs, s) for s in (1, 2)]).astype(
        np.float32 if dtype == torch.float32 else np.float64)
    layer = rn.R128Meter(fs, C, truepeak=tp)
    cuts = [0, 1000, 19_000, 19_005, int(3.05 * fs), n]
    st, outs = None, []
    for a, b in zip(cuts[:-1], cuts[1:]):
        o, st = layer(torch.from_numpy(np.ascontiguousarray(x[..., a:b])), st)
        outs.append(o)
    for i in range(2):
        meter = LoudnessMeter(fs=fs, channels=C, truepeak=tp)
        for (a, b), o in zip(zip(cuts[:-1], cuts[1:]), outs):
            r = meter(x[i, :, a:b] if C > 1 else x[i, 0, a:b])
            k = r.step_time.size
            assert o["step"][i, :k].tolist() == [round(t * 10) for t in r.step_time]
            assert bool((o["step"][i, k:] == -1).all())
            np.testing.assert_array_equal(o["momentary"][i, :k].numpy(), r.step_momentary)
            np.testing.assert_array_equal(o["short_term"][i, :k].numpy(), r.step_short_term)
            assert bool(o["momentary"][i, k:].isnan().all())
            assert _same(float(o["integrated"][i]), r.integrated)
            assert _same(float(o["loudness_range"][i]), r.loudness_range)
            np.testing.assert_array_equal(o["true_peak"][i].numpy(), r.true_peak_channels)
            np.testing.assert_array_equal(o["sample_peak"][i].numpy(), r.sample_peak_channels)
        assert r.integrated is not None and r.loudness_range is not None
    # one call: the same as the blocks
    o1, st1 = layer(torch.from_numpy(x))
    assert torch.equal(o1["integrated"], outs[-1]["integrated"])
    for k in st1:
        if k != "gating.count":                     # steps of the last block only
            assert torch.equal(st1[k], st[k]), k


def test_silence_and_too_short():
    layer = rn.R128Meter(48000.0, 1)
    o, _ = layer(torch.zeros(1, 1, 1000, dtype=torch.float64))
    assert math.isnan(float(o["integrated"]))
    o, _ = layer(torch.zeros(1, 1, 20_000, dtype=torch.float64))
    assert float(o["integrated"]) == -math.inf
    x = torch.zeros(1, 1, 20_000, dtype=torch.float64, requires_grad=True)
    o, _ = layer(x)
    o["integrated"].sum().backward()                   # -inf: no gradient, no NaN
    assert not x.grad.any()


def test_bad_input_is_refused():
    layer = rn.R128Meter(48000.0, 2)
    with pytest.raises(RtamtInputError, match="expected shape"):
        layer(torch.zeros(1, 3, 100, dtype=torch.float64))
    with pytest.raises(RtamtInputError, match="another layer or design"):
        layer(torch.zeros(1, 2, 100, dtype=torch.float64),
              rn.R128Meter(48000.0, 2, lra_hop=10).initial_state(1, dtype=torch.float64))


def _fn(layer, st):
    """The outputs with a gradient and the differentiable outgoing state, as a function of
    the block and the differentiable incoming state (NaN outputs, not defined, as 0)."""
    fixed = {k: v for k, v in st.items() if k not in DIFF}

    def f(x, *vals):
        o, new = layer(x, dict(zip(DIFF, vals), **fixed))
        return (torch.nan_to_num(o["momentary"]), torch.nan_to_num(o["short_term"]),
                o["integrated"], o["true_peak"], o["sample_peak"]) + tuple(new[k] for k in DIFF)
    return f


@pytest.mark.parametrize("n_warm, T", [(1_000, 900), (12_010, 30), (12_010, 1_750)])
def test_meter_gradcheck(n_warm, T):
    """gradcheck (float64) at 4 kHz (a 400 ms gating block is 1600 samples): a block that
    completes the first gating blocks, one that completes no fine block, one that adds
    gating blocks to a histogram that holds some (integrated loudness w.r.t. the power
    sums) and completes short-term windows."""
    layer = rn.R128Meter(4000.0, 2)
    _, st = layer(torch.from_numpy(_programme(2, n_warm, 4000.0, 3)[None] * 0.5))
    f = _fn(layer, st)
    x = torch.from_numpy(_programme(2, T, 4000.0, 4)[None]).requires_grad_(True)
    vals = [st[k].detach().clone().requires_grad_(True) for k in DIFF]
    o = f(x, *vals)
    if n_warm > 2000:
        assert math.isfinite(float(o[2].detach()))
    assert gradcheck(f, (x, *vals), eps=1e-7, atol=1e-5, rtol=1e-4, fast_mode=True)


def test_two_blocks_give_the_gradient_of_one_call():
    """The gradient of a loss on every step's momentary and short-term loudness and on the
    final integrated loudness and peaks, w.r.t. the input: blocks with carried state (one completes
    no gating block, one no fine block) give that of one call within 1e-10."""
    fs = 4000.0
    x = torch.from_numpy(_programme(2, 14_444, fs, 5)[None].repeat(2, 0) * [[[1.0]], [[0.3]]])
    w = noise((2, 2, 40), 6)

    def grad(cuts):
        xs = x.clone().requires_grad_(True)
        st, loss = None, 0.0
        for a, b in zip(cuts[:-1], cuts[1:]):
            o, st = layer(xs[..., a:b], st)
            k = o["step"].long().clamp(min=0)
            for j, key in enumerate(("momentary", "short_term")):
                v = o[key]
                loss = loss + torch.where(torch.isfinite(v), v * w[:, j].gather(1, k), 0.0).sum()
        loss = loss + 3.0 * o["integrated"].sum() + o["true_peak"].sum() + o["sample_peak"].sum()
        loss.backward()
        return xs.grad

    layer = rn.R128Meter(fs, 2)
    one = grad([0, x.shape[-1]])
    assert bool((one != 0).any())
    for cuts in ([0, 1_000, 12_345, x.shape[-1]], [0, 12_401, 12_421, 13_000, x.shape[-1]]):
        two = grad(cuts)
        assert torch.allclose(two, one, rtol=1e-10, atol=1e-10 * float(one.abs().max()))


def test_a_gradient_through_the_state_only():
    """Only the incoming power sums require a gradient: the statistics alone record it,
    and it reaches them (the integrated loudness of the histogram held so far)."""
    layer = rn.R128Meter(4000.0, 1)
    _, st = layer(torch.from_numpy(_programme(1, 3000, 4000.0, 7)[None]))
    ge = st["statistics.gate_e"].clone().requires_grad_(True)
    o, _ = layer(torch.from_numpy(_programme(1, 500, 4000.0, 8)[None]),
                 dict(st, **{"statistics.gate_e": ge}))
    (g,) = torch.autograd.grad(o["integrated"].sum(), ge)
    assert bool((g[st["statistics.gate_n"] > 0] != 0).any())
