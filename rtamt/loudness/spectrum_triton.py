"""Triton twins of the spectrum stage's kernels (:mod:`rtamt.loudness.spectrum`): the
hopping-DFT chunk recursion, the autocorrelations of the short windows, the sums of bin
powers into compression groups (Glasberg & Moore 2002 §2.1; Hann window in the frequency
domain after Harris 1978 §V; spectral compression of Ward et al. 2015), and the two array
operations of the frame clock (the analysis history and the frames' segments of a
``direct`` window) on torch tensors."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_common import _F64, _NUM_WARPS, BLOCK, _check, _check_index, _grid, _lane_ids, _pymod


def concat_history(hist, rows):
    """``hist`` (R, L) and ``rows`` (R, T) side by side: the signal (R, L + T) the frames of
    a block are analysed from (mirrors :func:`rtamt.loudness.spectrum.concat_history`)."""
    return torch.cat([hist, rows], dim=1)


def clamp_negative(x):
    """``x = max(x, 0)`` in place (mirrors :func:`rtamt.loudness.spectrum.clamp_negative`)."""
    x.clamp_min_(0.0)


def window_frames(z, st, F, hop, n):
    """The ``F`` segments ``z[:, st + f hop:][:n]`` of each row as (R F, n) (mirrors
    :func:`rtamt.loudness.spectrum.window_frames`)."""
    R = z.shape[0]
    return z[:, st:st + (F - 1) * hop + n].unfold(1, n, hop).reshape(R * F, n)


@triton.jit
def _chunk_ring_kernel(D_ptr, k0, lag, n_prime, F, rc_ptr, rs_ptr, wn_ptr, ring_ptr, T_ptr,
                       R, C, nF, BLOCK: tl.constexpr):
    i = _lane_ids(BLOCK)
    m = i < R * nF
    r = i // nF
    q = i - r * nF
    W = 2 * nF
    rg = r * (C + 2) * W + q                  # ring[r, slot, q] = rg + slot W
    sar = tl.load(ring_ptr + rg + C * W, mask=m, other=0.0)
    sai = tl.load(ring_ptr + rg + C * W + nF, mask=m, other=0.0)
    sbr = tl.load(ring_ptr + rg + (C + 1) * W, mask=m, other=0.0)
    sbi = tl.load(ring_ptr + rg + (C + 1) * W + nF, mask=m, other=0.0)
    wr = tl.load(wn_ptr + q, mask=m, other=0.0)
    wi = tl.load(wn_ptr + nF + q, mask=m, other=0.0)
    n_all = n_prime + F
    for j in range(n_all):
        rho = _pymod(k0 - lag - n_prime + j, C)
        dof = (r * n_all + j) * W + q
        dr = tl.load(D_ptr + dof, mask=m, other=0.0)
        di = tl.load(D_ptr + dof + nF, mask=m, other=0.0)
        cr = tl.load(rc_ptr + rho * nF + q, mask=m, other=0.0)
        ci = tl.load(rs_ptr + rho * nF + q, mask=m, other=0.0)
        slot = ring_ptr + rg + rho * W
        oldr = tl.load(slot, mask=m, other=0.0)
        oldi = tl.load(slot + nF, mask=m, other=0.0)
        # the chunk's DFT rotated to its position in the epoch
        hr = cr * dr - ci * di
        hi = cr * di + ci * dr
        # running sums of the previous (A) and current (B) epoch; restart at rho == 0
        start = rho == 0
        sar = tl.where(start, sbr, sar) - oldr
        sai = tl.where(start, sbi, sai) - oldi
        sbr = tl.where(start, hr, sbr + hr)
        sbi = tl.where(start, hi, sbi + hi)
        tl.store(slot, hr, mask=m)
        tl.store(slot + nF, hi, mask=m)
        # rectangular-window DFT of the frame whose newest chunk this is
        whole = rho == C - 1
        tr = tl.where(whole, sbr, sar + wr * sbr - wi * sbi)
        ti = tl.where(whole, sbi, sai + wr * sbi + wi * sbr)
        fo = tl.maximum(j - n_prime, 0)
        out = (r * F + fo) * W + q
        emit = tl.where(j >= n_prime, m, False)
        tl.store(T_ptr + out, tr, mask=emit)
        tl.store(T_ptr + out + nF, ti, mask=emit)
    tl.store(ring_ptr + rg + C * W, sar, mask=m)
    tl.store(ring_ptr + rg + C * W + nF, sai, mask=m)
    tl.store(ring_ptr + rg + (C + 1) * W, sbr, mask=m)
    tl.store(ring_ptr + rg + (C + 1) * W + nF, sbi, mask=m)


@triton.jit
def _chunk_power_kernel(T_ptr, k0, lag, F, rc_ptr, rs_ptr, offs_ptr, cm_ptr, cp_ptr,
                        gain_ptr, pw_ptr, RF, Bn, C, nF, BLOCK: tl.constexpr):
    lane = _lane_ids(BLOCK)
    m = lane < RF * Bn
    i = lane // Bn                        # row r F + f of P
    b = lane - i * Bn
    f = i % F
    of0 = tl.load(offs_ptr)
    of1 = tl.load(offs_ptr + 1)
    of2 = tl.load(offs_ptr + 2)
    rho = _pymod(k0 - lag + f, C)
    rho0 = tl.where(rho + 1 < C, rho + 1, 0)
    # phase of the f -+ 1/n terms relative to f: e^{-+j 2 pi rho0 / C}
    c00 = tl.load(rc_ptr + rho0 * nF + of0, mask=m, other=0.0)
    c01 = tl.load(rc_ptr + rho0 * nF + of1, mask=m, other=0.0)
    s00 = tl.load(rs_ptr + rho0 * nF + of0, mask=m, other=0.0)
    s01 = tl.load(rs_ptr + rho0 * nF + of1, mask=m, other=0.0)
    c0 = c00 * c01 + s00 * s01
    s0 = s00 * c01 - c00 * s01
    cma = tl.load(cm_ptr)
    cmb = tl.load(cm_ptr + 1)
    cpa = tl.load(cp_ptr)
    cpb = tl.load(cp_ptr + 1)
    cm0 = cma * c0 - cmb * s0
    cm1 = cma * s0 + cmb * c0
    cp0 = cpa * c0 + cpb * s0
    cp1 = cpb * c0 - cpa * s0
    W = 2 * nF
    t = T_ptr + i * W + b
    ar = tl.load(t + of0, mask=m, other=0.0)
    ai = tl.load(t + of0 + nF, mask=m, other=0.0)
    mr = tl.load(t + of1, mask=m, other=0.0)
    mi = tl.load(t + of1 + nF, mask=m, other=0.0)
    pr = tl.load(t + of2, mask=m, other=0.0)
    pi = tl.load(t + of2 + nF, mask=m, other=0.0)
    # Hann window in the frequency domain (Harris 1978, §V)
    xr = 0.5 * ar + cm0 * mr - cm1 * mi + cp0 * pr - cp1 * pi
    xi = 0.5 * ai + cm0 * mi + cm1 * mr + cp0 * pi + cp1 * pr
    g = tl.load(gain_ptr + b, mask=m, other=0.0)
    tl.store(pw_ptr + lane, g * (xr * xr + xi * xi), mask=m)


def spectrum_chunks(D, k0, lag, F, n_prime, rc, rs, wn, ring, offs, cm, cp, gain, grp, P):
    """Hann-windowed DFT powers of one analysis window from hop-long chunk DFTs (hopping
    DFT; Triton).

    Mirrors :func:`rtamt.loudness.spectrum.spectrum_chunks` (see
    :mod:`rtamt.loudness.spectrum`, method ``chunk``; Glasberg & Moore 2002 §2.1, Hann
    window applied in the frequency domain after Harris 1978, §V).

    D     : (R, n_prime + F, 2 nF) float64  chunk DFTs (re | im), oldest first.
    k0, lag, F, n_prime : int  absolute index of the first frame, hops between window
                               end and frame end, frames, priming chunks.
    rc, rs : (C, nF) float64   ``cos``, ``-sin`` of the epoch rotations; wn (2, nF).
    ring  : (R, C + 2, 2 nF) float64  rotated chunk DFTs and the two epoch sums (state),
                               advanced in place.
    offs  : (3,) int64;  cm, cp : (2,) float64;  gain : (B,) float64;  grp : (B,) int64.
    P     : (R F, J) float64   ``P[r F + f, grp[b]] += gain[b] |X_b|^2``, in place.

    Three launches: (1) one lane per (row, frequency) runs the chunk recursion (epoch
    sums in registers, ring slots in memory) and writes each frame's rectangular-window
    DFT to a scratch (R, F, 2 nF); (2) one lane per (row-frame, bin) forms the windowed
    power; (3) :func:`group_add` adds the powers into ``P`` in bin order.  Same
    operations per element as numba.
    """
    R = D.shape[0]
    C, nF = rc.shape
    Bn = gain.shape[0]
    _check(_F64, D=D, rc=rc, rs=rs, wn=wn, ring=ring, cm=cm, cp=cp, gain=gain, P=P)
    _check_index(offs=offs, grp=grp)
    assert D.shape == (R, n_prime + F, 2 * nF) and rs.shape == (C, nF) and wn.shape == (2, nF)
    assert ring.shape == (R, C + 2, 2 * nF) and grp.shape == (Bn,) and P.shape[0] == R * F
    if R == 0 or n_prime + F == 0 or nF == 0:
        return
    T = torch.empty((R, max(F, 1), 2 * nF), dtype=_F64, device=D.device)
    _chunk_ring_kernel[_grid(R * nF)](D, int(k0), int(lag), int(n_prime), int(F), rc, rs, wn,
                                      ring, T, R, C, nF, BLOCK=BLOCK, num_warps=_NUM_WARPS,
                                      enable_fp_fusion=True)
    if F == 0 or Bn == 0:
        return
    pw = torch.empty((R * F, Bn), dtype=_F64, device=D.device)
    _chunk_power_kernel[_grid(R * F * Bn)](T, int(k0), int(lag), int(F), rc, rs, offs, cm, cp,
                                           gain, pw, R * F, Bn, C, nF, BLOCK=BLOCK,
                                           num_warps=_NUM_WARPS, enable_fp_fusion=True)
    _group_add_launch(pw, gain, grp, P, with_gain=False)


@triton.jit
def _autocorr_kernel(z_ptr, L, e0, F, H, start, win_ptr, out_ptr, RFn, n,
                     BLOCK: tl.constexpr):
    lane = _lane_ids(BLOCK)
    m = lane < RFn
    i = lane // n                          # row r F + f of out
    d = lane - i * n                       # lag
    r = i // F
    f = i - r * F
    seg = z_ptr + r * L + e0 + f * H + start
    ac = tl.zeros([BLOCK], tl.float64)
    for mm in range(n):
        v = m & (mm + d < n)
        ym = tl.load(win_ptr + mm) * tl.load(seg + mm, mask=m, other=0.0)
        yd = tl.load(win_ptr + mm + d, mask=v, other=0.0) * tl.load(seg + mm + d, mask=v,
                                                                     other=0.0)
        ac = tl.where(v, ac + ym * yd, ac)
    tl.store(out_ptr + lane, ac, mask=m)


def autocorr_frames(z, e0, F, H, start, win, out):
    """Autocorrelations of Hann-windowed short segments (Triton); mirrors
    :func:`rtamt.loudness.spectrum.autocorr_frames` (Wiener-Khinchin, method ``autocorr``
    of :mod:`rtamt.loudness.spectrum`).

    z     : (R, L) float64  signal rows (history + block).
    e0, F, H, start : int   end of the first frame's history in z, frames, hop
                            (samples), segment start relative to a frame's end (< 0).
    win   : (n,) float64    window.
    out   : (R F, n) float64  ``out[r F + f, d] = sum_m y_m y_{m+d}``, ``y = win *
                            z[r, e0 + f H + start:][:n]``, written.

    One lane per (row-frame, lag d); the lane sums over m in increasing order, as numba.
    """
    R, L = z.shape
    n = win.shape[0]
    _check(_F64, z=z, win=win, out=out)
    assert out.shape == (R * F, n)
    if R * F * n == 0:
        return
    _autocorr_kernel[_grid(R * F * n)](z, L, int(e0), int(F), int(H), int(start), win, out,
                                       R * F * n, n, BLOCK=BLOCK, num_warps=_NUM_WARPS,
                                       enable_fp_fusion=True)


@triton.jit
def _group_add_kernel(pb_ptr, gain_ptr, grp_ptr, P_ptr, N, Bn, J, WITH_GAIN: tl.constexpr,
                      BLOCK: tl.constexpr):
    i = _lane_ids(BLOCK)
    m = i < N
    for b in range(Bn):
        g = tl.load(grp_ptr + b)
        v = tl.load(pb_ptr + i * Bn + b, mask=m, other=0.0)
        if WITH_GAIN:
            v = tl.load(gain_ptr + b) * v
        dst = P_ptr + i * J + g
        tl.store(dst, tl.load(dst, mask=m, other=0.0) + v, mask=m)


def _group_add_launch(pb, gain, grp, P, with_gain):
    N, Bn = pb.shape
    if N == 0 or Bn == 0:
        return
    _group_add_kernel[_grid(N)](pb, gain, grp, P, N, Bn, P.shape[1], WITH_GAIN=with_gain,
                                BLOCK=BLOCK, num_warps=_NUM_WARPS, enable_fp_fusion=True)


def group_add(pb, gain, grp, P):
    """``P[i, grp[b]] += gain[b] pb[i, b]``, bin powers into compression groups (Triton);
    mirrors :func:`rtamt.loudness.spectrum.group_add` (spectral compression of Ward et al.
    2015, see :mod:`rtamt.loudness.spectrum`).

    pb   : (N, B) float64  bin powers.      gain : (B,) float64.
    grp  : (B,) int64      column of P of each bin.
    P    : (N, J) float64  accumulated in place.

    One lane per row i, looping over the bins in order (read-modify-write of ``P[i, .]``
    by that lane only): the same sequence of additions as numba, for any ``grp``.
    """
    N, Bn = pb.shape
    _check(_F64, pb=pb, gain=gain, P=P)
    _check_index(grp=grp)
    assert gain.shape == grp.shape == (Bn,) and P.shape[0] == N
    _group_add_launch(pb, gain, grp, P, with_gain=True)
