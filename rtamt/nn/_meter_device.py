"""The gated statistics of :class:`rtamt.nn.R128Meter` in torch on the block's device (the
Triton-bound meter): the same values as :mod:`rtamt.loudness.gatedstats` and
:mod:`rtamt.loudness.gatedstats_grad` compute on the host, from the same histogram of
0.01 LU bins (:mod:`rtamt.loudness.gating`), with no copy to the host.

* Accumulation: each step's momentary power ``e_M`` enters the gating histogram when it
  passes the absolute gate strictly (``e_M > BIN_BOUNDS[0]``, -70 LUFS; BS.1770-4 eq. (5)),
  each selected short-term power ``e_S`` the loudness-range histogram when ``e_S >=
  BIN_BOUNDS[0]`` (EBU Tech 3342 section 3.1); the bin is ``searchsorted(BIN_BOUNDS, e,
  right) - 1`` (the top bin for louder values), as the host's ``_bin_of``; counts and
  power sums are added by ``index_add_`` in row order (on the CPU the host's order, so the
  same bits; on a GPU in any order, within rounding).
* Integrated loudness: the relative gate and the bin share of
  :func:`rtamt.loudness.gating.hist_gate_parts` (BS.1770-4 eqs. (3)-(7)) as masked
  reductions over the bins; LRA: the percentiles of
  :func:`rtamt.loudness.gating.hist_lra_stats` (Tech 3342, ranks ``round((n - 1) p)``)
  from the cumulative counts above the relative gate (no gradient).
* Gradient: :func:`rtamt.loudness.gatedstats_grad.gated_adjoint` elementwise over the bins
  (the gates' decisions, every block's bin and count held).

The reductions over the 10000 bins are torch's (not the host's sequential sums): the
gates and loudness equal the host's within a few ulps.
"""
from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from ..loudness.gatedstats import LOUDNESS_OFFSET_DB
from ..loudness.gating import (
    _CENTRE_DB,
    BIN_BOUNDS,
    FINE,
    LRA_GATE_LU,
    LRA_HIGH,
    LRA_LOW,
    N_BINS,
    N_MOMENTARY,
    N_SHORT_TERM,
    RELATIVE_GATE_LU,
    RING,
)

__all__ = ["DeviceStatistics"]

_REL = 10.0 ** (RELATIVE_GATE_LU / 10.0)     # the relative gate as a power ratio (-10 LU)
_TABLES: dict = {}


def _tables(dev: torch.device):
    """``(BIN_BOUNDS, _CENTRE_DB, arange(N_BINS))`` on ``dev`` (made once a device)."""
    t = _TABLES.get(dev)
    if t is None:
        t = (torch.from_numpy(BIN_BOUNDS).to(dev), torch.from_numpy(_CENTRE_DB).to(dev),
             torch.arange(N_BINS, device=dev))
        _TABLES[dev] = t
    return t


def _bins(e: torch.Tensor, bounds: torch.Tensor) -> torch.Tensor:
    """The histogram bin of powers ``e`` (``_bin_of``; values below the histogram: 0)."""
    return (torch.searchsorted(bounds, e.contiguous(), right=True) - 1).clamp(0, N_BINS - 1)


def _hist_add(counts, sums, e, ok, bounds) -> None:
    """Add the powers ``e`` ``(B, K)`` where ``ok`` to the histograms ``(B, N_BINS)`` in
    place (the rows of a stream in order; a row not taken adds 0 to bin 0)."""
    ez = torch.where(ok, e, torch.zeros_like(e))
    off = N_BINS * torch.arange(e.shape[0], device=e.device)[:, None]
    flat = (_bins(ez, bounds) + off).reshape(-1)
    counts.view(-1).index_add_(0, flat, ok.to(counts.dtype).reshape(-1))
    sums.view(-1).index_add_(0, flat, ez.reshape(-1))


def _gate_parts(counts, sums, bounds, idx):
    """:func:`rtamt.loudness.gating.hist_gate_parts` per stream, ``(B, N_BINS)`` in:
    ``(n, er, j, frac, cn, ce, cj, sj)`` ``(B,)`` each (``cj``, ``sj``: bin ``j``'s count
    and sum; ``j = -1`` below the histogram; all 0 where ``n = 0``)."""
    cf = counts.to(torch.float64)
    n = counts.sum(1).to(torch.float64)
    er = sums.sum(1) / torch.where(n > 0, n, torch.ones_like(n)) * _REL
    j = torch.where(er < bounds[0], torch.full_like(idx[:1], -1).expand(er.shape[0]),
                    _bins(er, bounds))
    above = idx[None] > j[:, None]
    zero = torch.zeros((), dtype=torch.float64, device=sums.device)
    cn = torch.where(above, cf, zero).sum(1)
    ce = torch.where(above, sums, zero).sum(1)
    jc = j.clamp(min=0)
    cj = cf.gather(1, jc[:, None])[:, 0]
    sj = sums.gather(1, jc[:, None])[:, 0]
    has = (j >= 0) & (cj > 0)
    lo, hi = bounds[jc], bounds[jc + 1]
    mid = torch.log(hi / er) / torch.log(hi / lo)
    top = (sj / torch.where(cj > 0, cj, torch.ones_like(cj)) > er).to(torch.float64)
    frac = torch.where(has, torch.where(j == N_BINS - 1, top, mid), zero)
    cn = torch.where(has, cn + frac * cj, cn)
    ce = torch.where(has, ce + frac * sj, ce)
    return n, er, j, frac, cn, ce, cj, sj


def _gated_power(parts) -> torch.Tensor:
    """``e_I`` of :func:`hist_gates` (0.0 where no block passes the gates)."""
    n, _, _, _, cn, ce, _, _ = parts
    ok = (n > 0) & (cn > 0)
    return torch.where(ok, ce / torch.where(ok, cn, torch.ones_like(cn)),
                       torch.zeros_like(cn))


def _lra(counts, sums, centre_db, idx) -> torch.Tensor:
    """The loudness range (LU) of :func:`hist_lra` per stream (0 where no value passes
    the gates)."""
    n = counts.sum(1).to(torch.float64)
    gate = 10.0 * torch.log10(sums.sum(1) / torch.where(n > 0, n, torch.ones_like(n))) \
        + LRA_GATE_LU
    first = torch.searchsorted(centre_db, gate.contiguous(), right=False)
    cum = torch.where(idx[None] >= first[:, None], counts,
                      torch.zeros_like(counts)).cumsum(1)
    m = cum[:, -1].to(torch.float64)

    def pick(p):
        r = torch.floor((m - 1.0) * p + 0.5).to(torch.int64)
        i = torch.searchsorted(cum, r[:, None].contiguous(), right=True).clamp(max=N_BINS - 1)
        c = counts.gather(1, i).to(torch.float64)[:, 0]
        return torch.where(c > 0, sums.gather(1, i)[:, 0] / torch.where(c > 0, c, 1.0), 0.0)

    lo, hi = pick(LRA_LOW), pick(LRA_HIGH)
    ok = (m > 0) & (lo > 0)
    ratio = torch.where(ok, hi / torch.where(ok, lo, torch.ones_like(lo)),
                        torch.ones_like(lo))
    return torch.where(ok, 10.0 * torch.log10(ratio), torch.zeros_like(lo))


class DeviceStatistics(torch.autograd.Function):
    """``DeviceStatistics.apply(rows, gate_e, gate_n, lra_n, lra_e, n_fine, count, hop)``
    -> ``(I, gate_e', gate_n', lra_n', lra_e', LRA)``: ``_meter._Statistics`` on the
    rows' device (module docstring): the block's gating rows ``(B, K, 3)`` ``(k, e_M,
    e_S)``, the first ``count[b]`` of them a step, added to each stream's histograms
    ``(B, N_BINS)``; ``I`` ``(B,)`` the integrated loudness (LUFS; NaN while ``n_fine <
    40``, -inf while none passes the absolute gate), ``LRA`` ``(B,)`` (LU; NaN while
    ``n_fine < 300``; no gradient).  Backward: the gradient of ``I`` with respect to
    the rows' momentary powers and the incoming sums ``gate_e`` (they pass through)."""

    @staticmethod
    def forward(ctx, rows, gate_e, gate_n, lra_n, lra_e, n_fine, count, hop):
        dev = rows.device
        bounds, centre, idx = _tables(dev)
        r = rows.detach().to(torch.float64)
        k, em, es = r.unbind(2)
        step = torch.arange(r.shape[1], device=dev)[None] < count[:, None]
        b0 = bounds[0]
        ok_m = step & (em > b0)                                 # NaN: False
        ok_s = step & (es >= b0) & (torch.remainder(k.to(torch.int64) - N_SHORT_TERM,
                                                    hop) == 0)
        gn, ge = gate_n.detach().clone(), gate_e.detach().to(torch.float64).clone()
        ln, le = lra_n.detach().clone(), lra_e.detach().to(torch.float64).clone()
        _hist_add(gn, ge, em, ok_m, bounds)
        _hist_add(ln, le, es, ok_s, bounds)
        e_i = _gated_power(_gate_parts(gn, ge, bounds, idx))
        nan = torch.full_like(e_i, math.nan)
        defined = n_fine >= N_MOMENTARY * FINE
        integ = torch.where(defined, LOUDNESS_OFFSET_DB + 10.0 * torch.log10(e_i), nan)
        lra = torch.where(n_fine >= RING, _lra(ln, le, centre, idx), nan)
        ctx.mark_non_differentiable(gn, ln, le, lra)
        ctx.save_for_backward(rows, ge, gn, defined)
        return integ, ge, gn, ln, le, lra

    @staticmethod
    @once_differentiable
    def backward(ctx, g_int, g_sums, *_):
        rows, sums, counts, defined = ctx.saved_tensors
        bounds, _, idx = _tables(rows.device)
        mu = torch.zeros_like(sums) if g_sums is None else g_sums.to(torch.float64).clone()
        if g_int is not None:
            parts = _gate_parts(counts, sums, bounds, idx)
            n, er, j, frac, cn, _, cj, sj = parts
            e_i = _gated_power(parts)
            act = defined & (g_int != 0) & (e_i > 0)
            one = torch.ones_like(cn)
            cn1, e1, n1 = (torch.where(act, v, one) for v in (cn, e_i, n))
            g = torch.where(idx[None] > j[:, None], (1.0 / cn1)[:, None], 0.0)
            g = torch.where(idx[None] == j[:, None], (frac / cn1)[:, None], g)
            jc = j.clamp(min=0, max=N_BINS - 2)
            sl = (j >= 0) & (cj > 0) & (j < N_BINS - 1)
            er1 = torch.where(sl, er, one)
            slope = torch.where(sl, -1.0 / (er1 * torch.log(bounds[jc + 1] / bounds[jc])),
                                0.0)
            via = (sj - e1 * cj) / cn1 * slope * _REL / n1
            g = torch.where((slope != 0.0)[:, None], g + via[:, None], g)
            s = g_int.to(torch.float64) * 10.0 / (math.log(10.0) * e1)
            mu = torch.where(act[:, None], mu + s[:, None] * g, mu)
        em = torch.nan_to_num(rows.detach()[:, :, 1].to(torch.float64), nan=0.0)
        g_em = torch.where(em > bounds[0], mu.gather(1, _bins(em, bounds)), 0.0)
        gx = torch.zeros_like(rows)
        gx[:, :, 1] = g_em.to(rows.dtype)
        return gx, mu, None, None, None, None, None, None


