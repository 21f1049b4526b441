"""rtamt.nn against torch_amt 0.2.0's float64 autograd (issue 42 item 5): the gammatone
filterbank, the IHC envelope and the adaptation loops of Dau1997, alone and in a chain.

The reference (forward outputs at every 16th sample, input gradients of a weighted sum of
the outputs, torch_amt's centre frequencies) was made once by
``tests/data/torch_amt_grad/make_reference.py`` in torch_amt's own interpreter (its
README says how, when and with which versions); these tests read only the stored arrays
and never import torch_amt.  Each rtamt layer gets the configuration torch_amt's Dau1997
gives the stage (gammatone at torch_amt's ``fc``, IHC preset ``dau1996``, the adaptation
loops' Dau1997 preset with ``minspl`` 0 dB).  The adaptation loops and the chain are also
put beside central finite differences of rtamt's forward in float64."""
from pathlib import Path

import numpy as np
import pytest
import torch

import rtamt.nn as rn
from rtamt.filterbank.erb import erb_number

DATA = Path(__file__).parents[1] / "data" / "torch_amt_grad" / "reference.npz"


@pytest.fixture(scope="module")
def ref():
    with np.load(DATA) as d:
        return {k: d[k] for k in d.files}


def _rel(a, b) -> float:
    """Relative RMS difference ``|a - b| / |b|``."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _weights(ref, name: str) -> torch.Tensor:
    """The loss weights of ``name`` (one int8 / 100 per ``hold`` samples), full length."""
    w = ref[f"{name}_w"].astype(np.float64) / 100.0
    return torch.from_numpy(np.repeat(w, int(ref["hold"]), axis=-1))


def _fs(ref) -> float:
    return float(ref["fs"])


def _fc(ref) -> tuple:
    return tuple(ref["fc_all"][ref["gt_index"]])


def _x(ref, key: str = "x") -> torch.Tensor:
    return torch.from_numpy(ref[key].astype(np.float64))


def _forward_and_grad(f, x: torch.Tensor, w: torch.Tensor):
    """``y = f(x)``, the loss ``sum(w * y)`` and its gradient w.r.t. ``x`` (numpy)."""
    xg = x.clone().requires_grad_(True)
    y = f(xg)
    loss = (w * y).sum()
    loss.backward()
    return y.detach().numpy(), float(loss.detach()), xg.grad.numpy()


def _layers(ref):
    """rtamt's gammatone (torch_amt's fc), IHC envelope (4 channels) and adaptation
    loops (4 channels) in torch_amt's Dau1997 configuration."""
    fs = _fs(ref)
    return (rn.Gammatone(fs, fc=_fc(ref)), rn.IHCEnvelope(fs, 4, preset="dau1996"),
            rn.AdaptLoop(fs, 4, preset="dau1997", minspl=0.0))


def test_torch_amt_centre_frequencies(ref):
    """torch_amt's Dau1997 grid at 48 kHz: 31 frequencies evenly spaced on rtamt's ERB
    scale (Glasberg & Moore 1990) from 80 Hz to 8 kHz inclusive, 1.014 ERB apart; rtamt's
    Dau1997, as AMT's ``erbspacebw``, spaces them exactly 1 ERB apart through ``basef`` =
    1 kHz.  So the tests pass torch_amt's as ``fc``, which rtamt's gammatone keeps."""
    fc = ref["fc_all"]
    assert (fc.size, fc[0], fc[-1]) == (31, pytest.approx(80.0), pytest.approx(8000.0))
    step = np.diff(erb_number(fc))
    np.testing.assert_allclose(step, step.mean(), rtol=1e-9)
    assert step.mean() == pytest.approx(1.0137, abs=1e-4)
    gt = rn.Gammatone(_fs(ref), fc=_fc(ref)).parts[0].coeffs.fc
    assert np.array_equal(gt, _fc(ref))


def test_gammatone_matches_torch_amt(ref):
    """Forward and input gradient within 1e-4 relative RMS (measured: 5.8e-6 and 6.0e-5;
    torch_amt's filterbank runs in complex64 whatever its dtype, by FFT convolution with
    an impulse response cut where the pole's power reaches e^-10)."""
    gt = _layers(ref)[0]
    y, loss, g = _forward_and_grad(lambda v: gt(v)[0], _x(ref), _weights(ref, "gt"))
    assert _rel(y[..., ::int(ref["every"])], ref["gt_y"]) < 1e-4
    assert _rel(g, ref["gt_grad"]) < 1e-4
    assert loss == pytest.approx(float(ref["gt_loss"]), rel=1e-4)


def test_ihc_envelope_matches_torch_amt(ref):
    """Forward and input gradient within 1e-4 relative RMS on both halves of the
    rectifier (measured: 3e-8 and 2.5e-8, the float32 storage), except at the input's
    exact zeros (the digital silence before the noise and tone bursts): there the
    rectifier ``max(x, 0)`` has no derivative; rtamt takes the subgradient 0,
    ``torch.clamp(x, min=0)`` in torch_amt passes the gradient (1)."""
    ihc = rn.IHCEnvelope(_fs(ref), 2, preset="dau1996")
    y, loss, g = _forward_and_grad(lambda v: ihc(torch.stack([v, -v], 1))[0], _x(ref),
                                   _weights(ref, "ihc"))
    assert _rel(y[..., ::int(ref["every"])], ref["ihc_y"]) < 1e-4
    zero = ref["x"] == 0
    assert 0 < zero.sum() < zero.size // 2
    assert _rel(g[~zero], ref["ihc_grad"][~zero]) < 1e-4
    assert np.all(g[zero] == 0) and np.count_nonzero(ref["ihc_grad"][zero]) > 0.9 * zero.sum()
    assert loss == pytest.approx(float(ref["ihc_loss"]), rel=1e-4)


def _fd_points(x: np.ndarray, n: int, seed: int) -> list:
    """``n`` sample positions per stream of ``x`` (B, ..., T) where the input is on
    (|x| above 1e-4): the first 20 after each stream's onset and the rest at random."""
    rng = np.random.default_rng(seed)
    pts = []
    for b in range(x.shape[0]):
        on = np.flatnonzero(np.abs(x[b].reshape(-1, x.shape[-1])[0]) > 1e-4)
        pick = np.concatenate([on[:20], rng.choice(on[20:], n - 20, replace=False)])
        pts += [(b, int(t)) for t in np.sort(pick)]
    return pts


def _central_differences(f, x: torch.Tensor, w: torch.Tensor, pts, rel_step=1e-5):
    """Central finite differences of ``sum(w[b] * f(x[b]))`` w.r.t. ``x[b, ..., t]`` (the
    first channel of a channel input) for each ``(b, t)`` of ``pts``, all in one batched
    float64 forward call of ``f``; the step is ``rel_step`` times the sample (at least
    1e-3 of it: 1e-5 balances truncation and rounding here, to about 3e-8 relative)."""
    rows, steps = [], []
    for b, t in pts:
        h = rel_step * max(abs(float(x[b].reshape(-1, x.shape[-1])[0, t])), 1e-3)
        for s in (h, -h):
            r = x[b].clone()
            r.reshape(-1, x.shape[-1])[0, t] += s
            rows.append(r)
        steps.append(h)
    with torch.no_grad():
        y = f(torch.stack(rows))
    ww = w[[b for b, _ in pts]]
    d = (ww * (y[0::2] - y[1::2])).reshape(len(pts), -1).sum(1)
    return (d / (2 * torch.tensor(steps, dtype=torch.float64))).numpy()


def _at(g: np.ndarray, pts) -> np.ndarray:
    """``g[b, ..., t]`` (first channel) at each point."""
    return np.array([g[b].reshape(-1, g.shape[-1])[0, t] for b, t in pts])


def test_adaptloop_matches_torch_amt_and_finite_differences(ref):
    """The adaptation loops alone on the same input (torch_amt's IHC envelope of the
    signals, float32-rounded): forward and input gradient equal torch_amt's to the
    float32 storage (measured 2.5e-8 and 2.4e-8 relative RMS; 2e-13 and 3e-14 before
    rounding).  Beside central finite differences of rtamt's float64 forward at 100
    points per signal (the 20 samples after each onset, where the overshoot limiter
    acts, and 80 more): rtamt's gradient within 1e-6 relative RMS (measured 4.3e-8),
    torch_amt's too (4.5e-8): alone, on the same input, the stage has no difference."""
    fs = _fs(ref)
    loops = rn.AdaptLoop(fs, 1, preset="dau1997", minspl=0.0)
    x, w = _x(ref, "adapt_in"), _weights(ref, "adapt")
    y, loss, g = _forward_and_grad(lambda v: loops(v)[0], x, w)
    assert _rel(y[..., ::int(ref["every"])], ref["adapt_y"]) < 1e-6
    assert _rel(g, ref["adapt_grad"]) < 1e-6
    assert loss == pytest.approx(float(ref["adapt_loss"]), rel=1e-9)
    pts = _fd_points(ref["adapt_in"], 100, 1)
    fd = _central_differences(lambda v: loops(v)[0], x, w, pts)
    assert _rel(_at(g, pts), fd) < 1e-6
    assert _rel(_at(ref["adapt_grad"], pts), fd) < 1e-6


def test_chain_beside_finite_differences(ref):
    """Gammatone, IHC envelope and adaptation loops in a chain, as in Dau1997 (each
    library's stage fed its own output of the stage before): the input gradient of
    rtamt's chain matches central finite differences of its float64 forward within 1e-6
    relative RMS at 100 points per signal (measured 2.5e-8); torch_amt's departs from
    them by over 100 times as much and under 1e-3 (measured 1.1e-4 there, 4.0e-4 from
    rtamt's over the whole gradient): its gammatone's error (complex64 arithmetic, cut
    impulse response), which the adaptation loops' high gain at low levels amplifies."""
    gt, ihc, loops = _layers(ref)

    def chain(v):
        return loops(ihc(gt(v)[0])[0])[0]

    x, w = _x(ref), _weights(ref, "gt")
    _, loss, g = _forward_and_grad(chain, x, w)
    pts = _fd_points(ref["x"], 100, 2)
    fd = _central_differences(chain, x, w, pts)
    mine, theirs = _rel(_at(g, pts), fd), _rel(_at(ref["chain_grad"], pts), fd)
    assert mine < 1e-6
    assert 100 * mine < theirs < 1e-3
    assert loss == pytest.approx(float(ref["chain_loss"]), rel=1e-3)
