"""Triton twins of the modulation-bank kernels of :mod:`rtamt.modulation.modfb`
(``modfb_efilt``, ``cplx_onepole_bank``, ``cplx_biquad_bank``); the low-passes run the
shared SOS twin, :func:`rtamt.engine.sos_triton.sos_shared`.  Lane layout and dtype
semantics in :mod:`rtamt.engine.triton_lanes`.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..engine.sos_triton import sos_shared
from ..engine.triton_lanes import BLOCK
from ..engine.triton_lanes import NUM_WARPS as _NUM_WARPS
from ..engine.triton_lanes import check_contiguous as _contiguous
from ..engine.triton_lanes import grid as _grid
from ..engine.triton_lanes import lanes as _lanes

__all__ = ["modfb_efilt", "cplx_onepole_bank", "cplx_biquad_bank"]


@triton.jit
def _efilt_kernel(coef_ptr, Fb, nreal, ch_ptr, st_ptr, x_ptr, y_ptr, N, T, C, F, yoff,
                  F32: tl.constexpr, BLOCK: tl.constexpr):
    m, b, f = _lanes(N, Fb, BLOCK)
    pr = tl.load(coef_ptr + f, mask=m, other=0.0)
    pi = tl.load(coef_ptr + Fb + f, mask=m, other=0.0)
    g = tl.load(coef_ptr + 2 * Fb + f, mask=m, other=0.0)
    sc = tl.load(coef_ptr + 3 * Fb + f, mask=m, other=0.0)
    ch = tl.load(ch_ptr + f, mask=m, other=0)
    real = f < nreal
    so = b * 2 * Fb + f
    wr = tl.load(st_ptr + so, mask=m, other=0.0)
    wi = tl.load(st_ptr + so + Fb, mask=m, other=0.0)
    xo = b * T * C + ch
    yo = b * T * F + yoff + f
    for t in range(T):
        u = tl.load(x_ptr + xo + t * C, mask=m, other=0.0)
        # w <- p w + g u  (numba's _efilt_step, the same fused multiply-adds)
        nr = tl.fma(pr, wr, tl.fma(-pi, wi, g * u))
        wi = tl.fma(pr, wi, pi * wr)
        wr = nr
        # numba's _efilt_out: sc Re w, or sc |w| with a correctly rounded square root
        # (float32 tl.sqrt may be approximate on the GPU; float64 tl.sqrt is rounded)
        if F32:
            mag = sc * tl.sqrt_rn(tl.fma(wr, wr, wi * wi))
        else:
            mag = sc * tl.sqrt(tl.fma(wr, wr, wi * wi))
        tl.store(y_ptr + yo + t * F, tl.where(real, sc * wr, mag), mask=m)
    tl.store(st_ptr + so, wr, mask=m)
    tl.store(st_ptr + so + Fb, wi, mask=m)


_channels: dict = {}


def _channel_of(runs, F, device):
    """Filter -> input channel (F,) int64 from run rows ``[first filter, first channel,
    length]`` (:func:`rtamt.modulation.modfb.channel_runs`).  Built once per ``runs``
    tensor and device (the stages pass the backend's cached coefficient tensor) and kept
    with a reference to ``runs``, so a later tensor at the same address is not mistaken
    for it."""
    key = (id(runs), F, str(device))
    hit = _channels.get(key)
    if hit is not None and hit[0] is runs:
        return hit[1]
    ch = torch.empty(F, dtype=torch.int64)
    for f0, c0, n in torch.as_tensor(runs).reshape(-1, 3).tolist():
        ch[f0:f0 + n] = torch.arange(c0, c0 + n)
    ch = ch.to(device)
    _channels[key] = (runs, ch)
    return ch


def cplx_onepole_bank(runs, nreal, coef, st, x, y, yoff, channel=None):
    """Bank of complex one-pole filters ('efilt', frequency-shifted 1st-order low-pass;
    Triton).

    Mirrors :func:`rtamt.modulation.modfb.cplx_onepole_bank`: ``w[n] = g x_ch[n] +
    p w[n-1]`` with complex pole ``p`` (Dau, Kollmeier & Kohlrausch 1997a, JASA 102,
    2892; AMT 0.9.10 ``modfilterbank``); output ``scale * Re(w)`` for filters
    ``f < nreal`` and ``scale * |w|`` for the others.

    runs    : (R, 3) int   ``[first filter, first channel, length]`` (only read when
                           ``channel`` is None).
    nreal   : int          filters 0..nreal-1 output the real part, the rest |w|.
    coef    : (4, F)       rows Re p, Im p, input gain g, output scale; the stream's dtype
                           (``bp_coef`` for float64 streams, ``bp_coef32`` for float32).
    st      : (B, 2, F)    states (real, imag), advanced in place.
    x       : (B, T, C);   y : (B, T, Ftot), filter f -> column ``yoff + f``.
    channel : (F,) int64   input channel per filter (``ModFilterbankCoeffs.bp_channel``);
                           derived from ``runs`` when None.

    One lane per (stream, filter).  All arithmetic is in the dtype of ``coef``/``st``/
    ``x`` (float32 streams: float32 arithmetic), with numba's explicit fused
    multiply-adds: ``Re: fma(pr, ar, fma(-pi, ai, g u))``, ``Im: fma(pr, ai, pi ar)``,
    ``|w| = sqrt(fma(wr, wr, wi wi))`` with a correctly rounded square root
    (``tl.sqrt_rn`` in float32, ``tl.sqrt`` in float64).  No product feeds a plain
    addition, and the launch disables FP fusion, so nothing else is fused: compiled for a
    GPU the arithmetic is ``fma.rn``, ``mul.rn`` and ``sqrt.rn`` only.
    """
    B, T, C = x.shape
    Fb = coef.shape[1]
    if channel is None:
        channel = _channel_of(runs, Fb, x.device)
    _contiguous(coef=coef, st=st, x=x, y=y, channel=channel)
    assert coef.dtype == st.dtype == x.dtype == y.dtype, \
        "coef, st, x, y must share the stream's dtype (bp_coef32 for float32 streams)"
    assert coef.shape[0] == 4 and st.shape == (B, 2, Fb) and y.shape[:2] == (B, T)
    assert channel.dtype == torch.int64 and channel.shape == (Fb,)
    F = y.shape[2]
    assert 0 <= yoff and yoff + Fb <= F
    N = B * Fb
    if N == 0:
        return
    _efilt_kernel[_grid(N)](coef, Fb, int(nreal), channel, st, x, y, N, T, C, F, yoff,
                            F32=coef.dtype == torch.float32, BLOCK=BLOCK,
                            num_warps=_NUM_WARPS, enable_fp_fusion=False)


def modfb_efilt(lp_sos, lp_zi, runs, nreal, coef, st, x, y, channel=None):
    """The Dau1997-lineage modulation bank in one call (Triton).

    Mirrors :func:`rtamt.modulation.modfb.modfb_efilt`: the shared low-pass cascade
    (:func:`sos_shared`, no rectification) into ``y[..., :C]``, then the complex one-pole
    band-pass bank (:func:`cplx_onepole_bank`) into ``y[..., C:]`` (Dau, Kollmeier &
    Kohlrausch 1997a, JASA 102, 2892; AMT 0.9.10 ``modfilterbank``).

    lp_sos  : (S, 6) float64;  lp_zi : (B, S, 2, C) low-pass states, in place.
    runs    : (R, 3) int  channel runs (read only when ``channel`` is None).
    nreal   : int;  coef : (4, F) in the stream's dtype;  st : (B, 2, F), in place.
    x       : (B, T, C);  y : (B, T, C + F).
    channel : (F,) int64  filter -> input channel (``ModFilterbankCoeffs.bp_channel``).

    Two launches (low-passes on the (stream, channel) lanes, band-passes on the
    (stream, filter) lanes); both read ``x``, which is not ``y``.
    """
    C = x.shape[2]
    sos_shared(lp_sos, False, lp_zi, x, y, 0)
    if coef.shape[1]:
        cplx_onepole_bank(runs, nreal, coef, st, x, y, C, channel=channel)


@triton.jit
def _cbq_kernel(ch_ptr, nreal, b_ptr, a_ptr, sc_ptr, st_ptr, x_ptr, y_ptr, N, Fb, T, C, F,
                yoff, BLOCK: tl.constexpr):
    m, b, f = _lanes(N, Fb, BLOCK)
    ch = tl.load(ch_ptr + f, mask=m, other=0)
    real = f < nreal
    co = f * 6
    b0r = tl.load(b_ptr + co, mask=m, other=0.0)
    b0i = tl.load(b_ptr + co + 1, mask=m, other=0.0)
    b1r = tl.load(b_ptr + co + 2, mask=m, other=0.0)
    b1i = tl.load(b_ptr + co + 3, mask=m, other=0.0)
    b2r = tl.load(b_ptr + co + 4, mask=m, other=0.0)
    b2i = tl.load(b_ptr + co + 5, mask=m, other=0.0)
    a1r = tl.load(a_ptr + co + 2, mask=m, other=0.0)
    a1i = tl.load(a_ptr + co + 3, mask=m, other=0.0)
    a2r = tl.load(a_ptr + co + 4, mask=m, other=0.0)
    a2i = tl.load(a_ptr + co + 5, mask=m, other=0.0)
    sc = tl.load(sc_ptr + f, mask=m, other=0.0)
    so = (b * Fb + f) * 4
    z0r = tl.load(st_ptr + so, mask=m, other=0.0)
    z0i = tl.load(st_ptr + so + 1, mask=m, other=0.0)
    z1r = tl.load(st_ptr + so + 2, mask=m, other=0.0)
    z1i = tl.load(st_ptr + so + 3, mask=m, other=0.0)
    xo = b * T * C + ch
    yo = b * T * F + yoff + f
    for t in range(T):
        v = tl.load(x_ptr + xo + t * C, mask=m, other=0.0).to(tl.float64)
        o_r = b0r * v + z0r.to(tl.float64)
        o_i = b0i * v + z0i.to(tl.float64)
        n0r = b1r * v - (a1r * o_r - a1i * o_i) + z1r.to(tl.float64)
        n0i = b1i * v - (a1r * o_i + a1i * o_r) + z1i.to(tl.float64)
        z1r = (b2r * v - (a2r * o_r - a2i * o_i)).to(z1r.dtype)
        z1i = (b2i * v - (a2r * o_i + a2i * o_r)).to(z1i.dtype)
        z0r = n0r.to(z0r.dtype)
        z0i = n0i.to(z0i.dtype)
        yv = tl.where(real, sc * o_r, sc * tl.sqrt(o_r * o_r + o_i * o_i))
        tl.store(y_ptr + yo + t * F, yv.to(y_ptr.dtype.element_ty), mask=m)
    tl.store(st_ptr + so, z0r, mask=m)
    tl.store(st_ptr + so + 1, z0i, mask=m)
    tl.store(st_ptr + so + 2, z1r, mask=m)
    tl.store(st_ptr + so + 3, z1i, mask=m)


def cplx_biquad_bank(ch, nreal, bcoef, acoef, scale, st, x, y, yoff):
    """Bank of complex-coefficient biquads (DF-II transposed) on real inputs (Triton).

    Mirrors :func:`rtamt.modulation.modfb.cplx_biquad_bank`, the frequency-shifted
    Butterworth modulation filters of :mod:`rtamt.modulation.modfb`
    (``filter_type='butterworth'``): a real low-pass prototype ``H(z)`` moved to centre
    ``w0`` by ``H(z e^{-i w0})`` (frequency-shift theorem), so ``Re`` is a band-pass and
    ``|.|`` its envelope; DF-II transposed as in Oppenheim & Schafer, sec. 6.5.

    ch     : (F,) int64         input channel per filter.
    nreal  : int                filters 0..nreal-1 output ``scale Re``, the rest
                                ``scale |.|``.
    bcoef  : (F, 3, 2) float64  numerator (real, imag);  acoef : (F, 3, 2), a0 == 1.
    scale  : (F,) float64
    st     : (B, F, 2, 2)       states [z index, real/imag], stream dtype, in place.
    x      : (B, T, C);  y : (B, T, Ftot), filter f -> column ``yoff + f``.

    One lane per (stream, filter).  Every product is formed in float64; the four
    memories are rounded to the state's dtype after every sample, the output to ``y``'s
    dtype, as in numba (``tl.sqrt`` in float64 compiles to ``sqrt.rn.f64``).
    """
    B, T, C = x.shape
    Fb = ch.shape[0]
    _contiguous(ch=ch, bcoef=bcoef, acoef=acoef, scale=scale, st=st, x=x, y=y)
    assert ch.dtype == torch.int64
    assert bcoef.dtype == acoef.dtype == scale.dtype == torch.float64
    assert bcoef.shape == acoef.shape == (Fb, 3, 2) and scale.shape == (Fb,)
    assert st.shape == (B, Fb, 2, 2) and y.shape[:2] == (B, T)
    F = y.shape[2]
    assert 0 <= yoff and yoff + Fb <= F
    N = B * Fb
    if N == 0:
        return
    _cbq_kernel[_grid(N)](ch, int(nreal), bcoef, acoef, scale, st, x, y, N, Fb, T, C, F,
                          yoff, BLOCK=BLOCK, num_warps=_NUM_WARPS, enable_fp_fusion=True)
