"""The EBU R128 / ITU-R BS.1770-4 loudness meter as a differentiable layer,
:class:`R128Meter`: a :class:`rtamt.nn.ChainLayer` of the meter's two sample stages
(K-weighting, then the gating blocks' momentary and short-term window powers) with the
gated statistics of :class:`rtamt.loudness.gatedstats.GatedStatistics` after them, their
histograms carried per stream in the layer's state.

Every value is computed by the streaming meter's own kernels and functions, so the
outputs equal :class:`rtamt.loudness.bs1770.LoudnessMeter`'s bit for bit and any block
partition equals one call.  Gradients: each stage's rule, found through the stage
(``type(stage).grad_rule()``); the loudness in LUFS is ``-0.691 + 10 log10(e)``
(BS.1770-4 eq. (2)) of a power ``e``, with the derivative ``10 / (e ln 10)``.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from ..engine.backend import resolve
from ..engine.contract import fingerprint
from ..loudness import bs1770
from ..loudness.bs1770 import _dbtp_row
from ..loudness.gatedstats import (
    LOUDNESS_OFFSET_DB,
    GatedStatistics,
    StatisticsParams,
    _add,
    _loudness,
)
from ..loudness.gating import (
    FINE,
    N_BINS,
    N_MOMENTARY,
    RING,
    GatingBlocks,
    GatingParams,
    hist_gates,
    hist_lra_stats,
)
from ..loudness.kweighting import KWeighting, KWeightingParams
from ..loudness.truepeak import TruePeak, TruePeakParams
from ._autograd import grad_rule
from ._base import Part
from .layers import ChainLayer

__all__ = ["R128Meter"]

#: the statistics' state entries (batch-first ``(B, N_BINS)``: counts int64, sums float64)
_STATS = ("gate_n", "gate_e", "lra_n", "lra_e")
_PREFIX = "statistics."


def _to_host(t: torch.Tensor) -> np.ndarray:
    """A float64 host copy of ``t`` that may be written: the statistics' one way to the
    host (they run there on every backend: their histograms, ``(batch, 10000)`` each, and
    the block's gating rows ``(batch, K, 3)``)."""
    return np.array(t.detach().cpu().numpy(), dtype=np.float64, copy=True)


def _lufs_t(e: torch.Tensor) -> torch.Tensor:
    """:func:`_lufs` in torch on ``e``'s device (the Triton-bound meter)."""
    return LOUDNESS_OFFSET_DB + 10.0 * torch.log10(e)


def _dbtp_t(p: torch.Tensor) -> torch.Tensor:
    """:func:`_dbtp` in torch on ``p``'s device (the Triton-bound meter)."""
    return 20.0 * torch.log10(p)


def _lufs(e: np.ndarray) -> np.ndarray:
    """Loudness (LUFS) of powers ``e``: the meter's own function (NaN stays, 0: -inf)."""
    return np.asarray(_loudness(e), np.float64)


def _dbtp(p: np.ndarray) -> np.ndarray:
    """``20 log10`` of linear peaks ``p`` ``(B, C)``, as the meter's report (0: -inf)."""
    return np.stack([_dbtp_row(row) for row in p]).reshape(p.shape)


class _Log(torch.autograd.Function):
    """``_Log.apply(e, fn, scale, tfn)``: ``fn(e)`` computed by the meter's own function
    (``-0.691 + 10 log10(e)`` for a power, BS.1770-4 eq. (2); ``20 log10(p)`` for a peak),
    or ``tfn(e)``, the same formula in torch on ``e``'s device, when ``tfn`` is given (the
    Triton-bound meter: within an ulp of ``fn``); the derivative ``scale / (e ln 10)``
    where ``e > 0`` is finite, else 0."""

    @staticmethod
    def forward(ctx, e, fn, scale, tfn=None):
        ctx.save_for_backward(e)
        ctx.scale = scale
        if tfn is not None:
            return tfn(e.detach())
        return torch.from_numpy(fn(e.detach().cpu().numpy())).to(e.device)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (e,) = ctx.saved_tensors
        ok = torch.isfinite(e) & (e > 0)
        scale = ctx.scale / (math.log(10.0) * torch.where(ok, e, torch.ones_like(e)))
        return torch.where(ok, g * scale, torch.zeros_like(g)), None, None, None


class _Statistics(torch.autograd.Function):
    """``_Statistics.apply(part, rows, gate_e, gate_n, lra_n, lra_e, n_fine)`` -> ``(I,
    gate_e', gate_n', lra_n', lra_e', LRA)``: the block's gating rows ``(B, K, 3)``
    added to each stream's histograms by the meter's own ``_add``; ``I`` ``(B,)`` the
    integrated loudness (LUFS; NaN before the first gating block, ``n_fine < 40``; -inf
    while none passes the absolute gate), ``LRA`` ``(B,)`` the loudness range (LU; NaN
    before the first short-term value; no gradient).  Backward: the statistics' rule
    (:meth:`GatedStatistics.grad_rule`) with respect to the rows and the incoming sums."""

    @staticmethod
    def forward(ctx, part, rows, gate_e, gate_n, lra_n, lra_e, n_fine, count):
        r = _to_host(rows)
        out = {k: np.array(v.detach().cpu().numpy(), copy=True)      # counts stay int64
               for k, v in zip(_STATS, (gate_n, gate_e, lra_n, lra_e))}
        nf, cnt = n_fine.cpu().numpy(), count.cpu().numpy()
        B = r.shape[0]
        integ, lra = np.full(B, np.nan), np.full(B, np.nan)
        for b in range(B):               # one programme a stream (per block, not per sample)
            st = {k: out[k][b] for k in _STATS}
            st["summary"] = np.zeros(6)
            n = int(cnt[b])
            if n:
                _add(part.coeffs, st, r[b, :n, 0], r[b, :n, 1], r[b, :n, 2], False)
            if nf[b] >= N_MOMENTARY * FINE:
                integ[b] = _loudness(hist_gates(st["gate_n"], st["gate_e"])[0])
            if nf[b] >= RING:
                lo, hi, _ = hist_lra_stats(st["lra_n"], st["lra_e"])
                lra[b] = 10.0 * math.log10(hi / lo) if lo > 0.0 else 0.0
        dev = rows.device
        res = [torch.from_numpy(integ).to(dev)] + [torch.from_numpy(out[k]).to(dev)
                                                   for k in ("gate_e", "gate_n", "lra_n",
                                                             "lra_e")]
        res.append(torch.from_numpy(lra).to(dev))
        ctx.part, ctx.defined = part, nf >= N_MOMENTARY * FINE
        ctx.mark_non_differentiable(*res[2:])
        ctx.save_for_backward(rows, res[1], res[2])
        return tuple(res)

    @staticmethod
    @once_differentiable
    def backward(ctx, g_int, g_sums, *_):
        rows, sums, counts = ctx.saved_tensors
        B = rows.shape[0]
        mu = {"gate_e": np.zeros((B, N_BINS)) if g_sums is None else _to_host(g_sums)}
        gy = np.zeros(B) if g_int is None else _to_host(g_int)
        state = {"gate_n": counts.cpu().numpy(), "gate_e": _to_host(sums),
                 "defined": ctx.defined}
        gx, _ = ctx.part.grad.backward(ctx.part.coeffs, None, _to_host(rows), state, gy, mu)
        back = torch.from_numpy(gx).to(rows.device, rows.dtype)
        return (None, back, torch.from_numpy(mu["gate_e"]).to(rows.device), None, None, None,
                None, None)


class _StatsPart:
    """The statistics stage of the layer: its stage, params (its coeffs) and rule."""

    def __init__(self, stage: GatedStatistics):
        self.stage, self.name, self.coeffs = stage, stage.name, stage.coeffs
        self.grad = grad_rule(stage, self.coeffs, 3)


class R128Meter(ChainLayer):
    """The BS.1770-4 / EBU R128 loudness meter as a layer (histogram mode):
    ``out, state = meter(x, state=None)``.

    ``R128Meter(fs=48000.0, channels=2, *, weights=None, layout=None, lra_hop=1,
    truepeak='sinc')``: the arguments of :class:`rtamt.loudness.bs1770.LoudnessMeter`
    (its ``mode='histogram'``).  Input ``x`` ``(batch, channels, T)`` float32/float64,
    full-scale units; each stream of the batch is one programme.  ``out`` is a dict:

    * ``'step'`` ``(batch, K)``: the numbers ``k`` of the 100 ms steps the block completed,
      ``-1`` in the rows after a stream's last (``K = T // floor(fs / 10) + 1``);
    * ``'momentary'``, ``'short_term'`` ``(batch, K)``: their loudness (LUFS; NaN where the
      400 ms / 3 s window is not yet full and in the unused rows; -inf for silence), the
      meter's ``step_momentary`` / ``step_short_term``;
    * ``'integrated'`` ``(batch,)``: the integrated loudness after the block (LUFS; NaN
      before the first 400 ms gating block, -inf while none passes the absolute gate);
    * ``'loudness_range'`` ``(batch,)``: LRA (LU, EBU Tech 3342; NaN before the first
      short-term value), no gradient;
    * ``'true_peak'``, ``'sample_peak'`` ``(batch, channels)``: the running maxima per
      channel (dB TP, dBFS; -inf for silence), the meter's ``true_peak_channels`` /
      ``sample_peak_channels``.

    The state holds the stages' states (``kweighting.*``, ``gating.*``, ``truepeak.*``)
    and the statistics' histograms ``statistics.gate_n`` / ``gate_e`` / ``lra_n`` /
    ``lra_e`` ``(batch, 10000)``.
    Gradients (docs/nn.md): the momentary, short-term and integrated loudness and the
    peaks with respect to the input, the incoming filter, window and peak state and the
    incoming power sums ``statistics.gate_e``, with the gates' decisions held (the peaks:
    a subgradient at the value that set the maximum)."""

    def __init__(self, fs: float = 48000.0, channels: int = 2, *, weights=None, layout=None,
                 lra_hop: int = 1, truepeak: str = "sinc"):
        params = bs1770.Params(fs=fs, channels=channels, weights=weights, layout=layout,
                               mode="histogram", lra_hop=lra_hop, truepeak=truepeak)
        self.params = params
        super().__init__([KWeighting(KWeightingParams(params.fs)),
                          GatingBlocks(GatingParams(params.fs, params.weights))],
                         name="r128", n_in=params.channels)
        self._chain = {p.name for p in self.parts}
        self.stats = _StatsPart(GatedStatistics(StatisticsParams("histogram",
                                                                 params.lra_hop)))
        #: the true peak, run on the input beside the chain (not one of ``parts``)
        self.truepeak = Part(TruePeak(TruePeakParams(params.fs, method=params.truepeak)),
                             params.channels)
        self._tag = int(fingerprint("rtamt.nn", self._tag, params.lra_hop,
                                    self.truepeak.fingerprint)[:15], 16)

    def _initial_np(self, batch, dtype):
        st = super()._initial_np(batch, dtype)
        one = GatedStatistics.init_state(self.stats.coeffs)
        st.update({_PREFIX + k: np.repeat(one[k][None], batch, axis=0) for k in _STATS})
        tp = self.truepeak
        st.update({f"{tp.name}.{k}": v for k, v in tp.initial(batch, dtype).items()})
        return st

    def _run(self, x, state, start):
        body = {k: v for k, v in state.items() if k.split(".")[0] in self._chain}
        y, new = super()._run(x, body, start)
        rows = y.permute(0, 2, 1)                       # (B, K, 3) rows (k, e_M, e_S)
        integ, ge, gn, ln, le, lra = _Statistics.apply(
            self.stats, rows, *(state[_PREFIX + k] for k in ("gate_e", "gate_n", "lra_n",
                                                              "lra_e")),
            new["gating.n_fine"], new["gating.count"])
        new.update({_PREFIX + "gate_e": ge, _PREFIX + "gate_n": gn, _PREFIX + "lra_n": ln,
                    _PREFIX + "lra_e": le})
        dev = self.on_device
        lt, dt = (_lufs_t, _dbtp_t) if dev else (None, None)
        out = {"step": rows[:, :, 0].detach(),
               "momentary": _Log.apply(rows[:, :, 1], _lufs, 10.0, lt),
               "short_term": _Log.apply(rows[:, :, 2], _lufs, 10.0, lt), "integrated": integ,
               "loudness_range": lra}
        # the true peak, on the input beside the chain (BS.1770-4 Annex 2)
        tp = self.truepeak
        st = {k: state[f"{tp.name}.{k}"] for k in tp.keys}
        need = torch.is_grad_enabled() and (x.requires_grad or any(v.requires_grad
                                                                    for v in st.values()))
        peaks, ns = tp.run(x.permute(0, 2, 1).contiguous(), st, None, need)   # (B, 2, C)
        new.update({f"{tp.name}.{k}": v for k, v in ns.items()})
        out["true_peak"] = _Log.apply(peaks[:, 0], _dbtp, 20.0, dt)
        out["sample_peak"] = _Log.apply(peaks[:, 1], _dbtp, 20.0, dt)
        return out, new

    # -- the device: the true peak is bound with the chain; the statistics stay on the host
    def bind_kernels(self, backend: str | None = None, implicit: bool = False) -> None:
        """:meth:`ChainLayer.bind_kernels` for the chain and the true peak beside it."""
        super().bind_kernels(backend, implicit)
        if self.backend == "triton":
            self.truepeak.bind("triton", resolve("triton", self.device)[1])
        else:
            self.truepeak.bind("numba", None)

    @property
    def host_stages(self) -> tuple:
        """:attr:`ChainLayer.host_stages`, the true peak included, and ``'statistics'``
        on the Triton backend: the gated statistics run on the host on every backend
        (their histograms and the block's gating rows go there and back each call)."""
        if self.backend != "triton":
            return ()
        tp = () if self.truepeak.on_device else (self.truepeak.name,)
        return super().host_stages + tp + ("statistics",)
