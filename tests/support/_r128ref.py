"""A reference EBU R128 report computed from the documents' definitions, independent of
rtamt's meter (whole-signal numpy / scipy, at 48 kHz only), for tests with known answers.

* K-weighting: the two biquads published for 48 kHz in ITU-R BS.1770-4 Annex 1, Tables 1
  and 2 (typed here from the Recommendation), run by ``scipy.signal.lfilter`` from rest.
* Block powers (BS.1770-4 eqs. (1)-(2)): channel mean squares weighted by ``G_i`` over
  400 ms (momentary, the gating blocks) and 3 s (short-term) windows ending every 100 ms.
* Integrated loudness (eqs. (3)-(7)): absolute gate -70 LUFS, relative gate -10 LU below
  the loudness of the blocks above it, both strict.
* LRA (EBU Tech 3342 section 3.1 and its MATLAB reference): short-term values at the
  ``hop`` x 100 ms steps, absolute gate -70 LUFS and relative gate -20 LU (``>=``), the
  10th and 95th percentiles the sorted values of rank ``round((n - 1) p)``.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import signal as sps

FS = 48000
PRE = ((1.53512485958697, -2.69169618940638, 1.19839281085285),
       (1.0, -1.69065929318241, 0.73248077421585))      # BS.1770-4 Table 1
RLB = ((1.0, -2.0, 1.0), (1.0, -1.99004745483398, 0.99007225036621))   # Table 2


def lufs(e):
    """BS.1770-4 eq. (2): loudness of a weighted mean square."""
    with np.errstate(divide="ignore"):
        return -0.691 + 10 * np.log10(e)


def step_powers(x, weights=None):
    """``(M, S)``: the 400 ms and 3 s window powers at every 100 ms step ``k = 1..K``
    (NaN where the window is not full) of ``x`` ``(C, T)`` at 48 kHz."""
    x = np.atleast_2d(np.asarray(x, np.float64))
    y = sps.lfilter(*RLB, sps.lfilter(*PRE, x, axis=-1), axis=-1)
    g = np.ones(x.shape[0]) if weights is None else np.asarray(weights, np.float64)
    step = FS // 10
    k = x.shape[1] // step
    sub = (g[:, None] * (y[:, :k * step] ** 2).reshape(x.shape[0], k, step).sum(-1)).sum(0)
    c = np.concatenate([[0.0], np.cumsum(sub)])
    m = np.full(k, np.nan)
    s = np.full(k, np.nan)
    i = np.arange(1, k + 1)
    m[3:] = (c[i[3:]] - c[i[3:] - 4]) / (4 * step)
    s[29:] = (c[i[29:]] - c[i[29:] - 30]) / (30 * step)
    return m, s


def integrated(blocks):
    """``(I, relative gate)`` in LUFS of gating-block powers (``(None, None)`` without a
    block, ``(-inf, None)`` when none passes -70 LUFS)."""
    b = np.asarray(blocks, np.float64)
    b = b[~np.isnan(b)]
    if b.size == 0:
        return None, None
    b = b[lufs(b) > -70.0]
    if b.size == 0:
        return -math.inf, None
    gate = lufs(b.mean()) - 10.0
    return float(lufs(b[lufs(b) > gate].mean())), float(gate)


def lra(short_terms, hop=1):
    """``(LRA, low, high, relative gate)`` (LU, LUFS) of the short-term powers at every
    step (NaN: not full); only those at ``hop`` x 100 ms from the first are taken."""
    s = np.asarray(short_terms, np.float64)
    first = int(np.argmax(~np.isnan(s))) if (~np.isnan(s)).any() else s.size
    v = s[first::hop]
    v = v[lufs(v) >= -70.0]
    if v.size == 0:
        return 0.0, None, None, None
    gate = lufs(v.mean()) - 20.0
    kept = np.sort(lufs(v[lufs(v) >= gate]))
    n = kept.size
    lo = kept[math.floor((n - 1) * 0.10 + 0.5)]
    hi = kept[math.floor((n - 1) * 0.95 + 0.5)]
    return float(hi - lo), float(lo), float(hi), float(gate)


def report(x, hop=1, weights=None) -> dict:
    """Every figure of the R128 report of ``x`` ``(C, T)`` at 48 kHz (peaks: the sample
    peak per channel, dBFS)."""
    m, s = step_powers(x, weights)
    i, gate = integrated(m)
    r, lo, hi, lgate = lra(s, hop)
    ok_m, ok_s = m[~np.isnan(m)], s[~np.isnan(s)]
    sp = 20 * np.log10(np.abs(np.atleast_2d(x)).max(axis=-1))
    return {"integrated": i, "relative_gate": gate, "lra": r if ok_s.size else None,
            "lra_low": lo, "lra_high": hi, "lra_gate": lgate,
            "max_momentary": float(lufs(ok_m.max())) if ok_m.size else None,
            "max_short_term": float(lufs(ok_s.max())) if ok_s.size else None,
            "sample_peak_channels": sp, "momentary": lufs(m), "short_term": lufs(s),
            "blocks": m, "short_terms": s}


def tone(levels_dbfs, seconds, f=1000.0, channels=2, gains=None):
    """Phase-continuous 1 kHz sine segments at per-channel peak levels ``levels_dbfs``
    (``None``: digital silence) of ``seconds`` each, ``(channels, T)``; ``gains``
    scales the channels (linear)."""
    n = [int(round(d * FS)) for d in np.broadcast_to(seconds, (len(levels_dbfs),))]
    amp = np.repeat([0.0 if v is None else 10 ** (v / 20) for v in levels_dbfs], n)
    x = amp * np.sin(2 * np.pi * f * np.arange(amp.size) / FS)
    g = np.ones(channels) if gains is None else np.asarray(gains, np.float64)
    return g[:, None] * x[None]
