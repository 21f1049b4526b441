"""Triton twins of the modulation-bank adjoints of :mod:`rtamt.modulation.modfb_grad`
(:func:`~rtamt.modulation.modfb_grad.efilt_adjoint`,
:func:`~rtamt.modulation.modfb_grad.biquad_bank_adjoint`): the same names, arguments and
meaning, on torch tensors that all lie on one device (float64, as every adjoint).

Work layout: one Triton lane per (stream, filter), :data:`BLOCK` lanes per program, a
grid of ``ceil(B F / BLOCK)`` programs.  A lane runs its filter forward over the block
from the incoming state and keeps the complex trajectory in a float64 scratch tensor
``(B, T, F)`` (real and imaginary part; this replaces numba's checkpoints: device memory
for speed), then runs the adjoint recursion backwards in time.  Several filters read one
input channel, so a lane writes the input-gradient term of its filter to a scratch
``(B, T, F)`` and the launcher adds it to ``gx`` per channel with one matrix product by
the (F, C) filter -> channel incidence matrix; the coefficient gradients (``want``) are
summed per lane and then over streams by torch.  Everything stays on the device; no
value is copied to the host.  The sums over filters and streams run in another order than
numba's, so the results agree with numba to rounding (1e-12 relative), not bit for bit.

On a GPU: a program has exactly one thread per lane (BLOCK = 64 lanes, 2 warps), so the
scratch a lane writes in its forward recomputation and reads backwards is touched by one
thread only, in program order; the launch sets ``num_stages=1`` (no software pipelining
of the loops' loads).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..engine.triton_lanes import BLOCK
from ..engine.triton_lanes import NUM_WARPS as _NUM_WARPS
from ..engine.triton_lanes import check_contiguous as _contiguous
from ..engine.triton_lanes import grid as _grid
from ..engine.triton_lanes import lanes as _lanes

__all__ = ["efilt_adjoint", "biquad_bank_adjoint"]


@triton.jit
def _abs_grad(re_ptr, im_ptr, off, mask, g):
    """``g`` times the gradient of ``|z|`` with respect to ``(Re z, Im z)``, ``z`` loaded at
    ``off`` from ``re_ptr``, ``im_ptr``: ``(g Re z / |z|, g Im z / |z|)``, ``(0, 0)`` where
    ``z = 0`` (the subgradient numba takes)."""
    vr = tl.load(re_ptr + off, mask=mask, other=0.0)
    vi = tl.load(im_ptr + off, mask=mask, other=0.0)
    mag = tl.sqrt(vr * vr + vi * vi)
    nz = mag > 0.0
    safe = tl.where(nz, mag, 1.0)
    return tl.where(nz, g * vr / safe, 0.0), tl.where(nz, g * vi / safe, 0.0)


@triton.jit
def _cplx(ptr, off, m):
    """The complex value ``(ptr[off], ptr[off + 1])`` (real, imaginary) on the lanes ``m``."""
    return tl.load(ptr + off, mask=m, other=0.0), tl.load(ptr + off + 1, mask=m, other=0.0)


@triton.jit
def _efilt_adj_kernel(coef_ptr, nreal, ch_ptr, x_ptr, st_ptr, gy_ptr, gys_b, gys_t, gys_f,
                      mu_ptr, wr_ptr, wi_ptr, gu_ptr, gc_ptr, N, T, C, F,
                      WANT: tl.constexpr, BLOCK: tl.constexpr):
    m, b, f = _lanes(N, F, BLOCK)
    pr = tl.load(coef_ptr + f, mask=m, other=0.0)
    pi = tl.load(coef_ptr + F + f, mask=m, other=0.0)
    g = tl.load(coef_ptr + 2 * F + f, mask=m, other=0.0)
    sc = tl.load(coef_ptr + 3 * F + f, mask=m, other=0.0)
    ch = tl.load(ch_ptr + f, mask=m, other=0)
    env = f >= nreal
    so = b * 2 * F + f
    s_r = tl.load(st_ptr + so, mask=m, other=0.0)
    s_i = tl.load(st_ptr + so + F, mask=m, other=0.0)
    xo = b * T * C + ch
    wo = b * T * F + f
    # forward trajectory w[t] (w <- p w + g u), kept for the envelope filters (and all
    # filters with WANT)
    if WANT:
        keep = m
    else:
        keep = m & env
    ar = s_r
    ai = s_i
    for t in range(T):
        v = g * tl.load(x_ptr + xo + t * C, mask=keep, other=0.0)
        nr = pr * ar - pi * ai + v
        ai = pr * ai + pi * ar
        ar = nr
        tl.store(wr_ptr + wo + t * F, ar, mask=keep)
        tl.store(wi_ptr + wo + t * F, ai, mask=keep)
    # backwards: lam = mu + gout, gu[t] = g Re lam, mu <- conj(p) lam
    m_r = tl.load(mu_ptr + so, mask=m, other=0.0)
    m_i = tl.load(mu_ptr + so + F, mask=m, other=0.0)
    c0 = tl.zeros([BLOCK], dtype=tl.float64)
    c1 = tl.zeros([BLOCK], dtype=tl.float64)
    c2 = tl.zeros([BLOCK], dtype=tl.float64)
    go = b * gys_b + f * gys_f
    for tt in range(T):
        t = T - 1 - tt
        gyv = sc * tl.load(gy_ptr + go + t * gys_t, mask=m, other=0.0)
        er, ei = _abs_grad(wr_ptr, wi_ptr, wo + t * F, keep, gyv)
        lr = m_r + tl.where(env, er, gyv)
        li = m_i + tl.where(env, ei, 0.0)
        tl.store(gu_ptr + wo + t * F, g * lr, mask=m)
        if WANT:
            first = t == 0
            tp = tl.where(first, 0, t - 1)
            qr = tl.where(first, s_r, tl.load(wr_ptr + wo + tp * F, mask=m, other=0.0))
            qi = tl.where(first, s_i, tl.load(wi_ptr + wo + tp * F, mask=m, other=0.0))
            c0 += lr * qr + li * qi
            c1 += li * qr - lr * qi
            c2 += lr * tl.load(x_ptr + xo + t * C, mask=m, other=0.0)
        m_r, m_i = pr * lr + pi * li, pr * li - pi * lr
    tl.store(mu_ptr + so, m_r, mask=m)
    tl.store(mu_ptr + so + F, m_i, mask=m)
    if WANT:
        co = b * 3 * F + f
        tl.store(gc_ptr + co, c0, mask=m)
        tl.store(gc_ptr + co + F, c1, mask=m)
        tl.store(gc_ptr + co + 2 * F, c2, mask=m)


def _add_per_channel(gu, ch, gx):
    """``gx[b, t, ch[f]] += gu[b, t, f]`` summed over the filters of each channel: one
    matrix product of ``gu`` (B, T, F) by the (F, C) incidence matrix of ``ch``."""
    C = gx.shape[2]
    inc = (ch[:, None] == torch.arange(C, device=ch.device)[None, :]).to(torch.float64)
    gx += torch.matmul(gu, inc)


def _scratch(n, shape, device):
    """``n`` uninitialised float64 tensors of ``shape`` on ``device``."""
    return [torch.empty(shape, dtype=torch.float64, device=device) for _ in range(n)]


def _check(x, gy, mu, gx, **tensors):
    B, T, C = x.shape
    _contiguous(x=x, mu=mu, gx=gx, **tensors)
    for name, t in dict(x=x, gy=gy, mu=mu, gx=gx, **tensors).items():
        assert t.dtype == torch.float64, f"{name} must be float64 (the adjoints' dtype)"
        assert t.device == x.device, f"{name} must lie on x's device ({x.device})"
    assert gx.shape == (B, T, C) and gy.shape[:2] == (B, T)


def efilt_adjoint(coef, nreal, ch, x, st, gy, mu, gx, want, gc):
    """Adjoint of the complex one-pole modulation filters (Triton); the arguments and the
    mathematics of the numba :func:`rtamt.modulation.modfb_grad.efilt_adjoint` (Dau et
    al. 1997a, JASA 102, 2892).

    coef : (4, F) float64 rows Re p, Im p, g, sc;  nreal : int (Python);
    ch   : (F,) int64 input channel of each filter;  x : (B, T, C) the bank's input;
    st   : (B, 2, F) incoming state;  gy : (B, T, F) output gradient, any strides (e.g.
           a column slice of the packed output's gradient);
    mu   : (B, 2, F) in: gradient of the outgoing state, out: of the incoming one;
    gx   : (B, T, C) added to;  want : bool (Python);  gc : (3, F) gradients of Re p,
           Im p and g, added to with ``want``.

    All float64 on one device, contiguous except ``gy``.  One launch of
    ``ceil(B F / BLOCK)`` programs, then two torch reductions (module docstring).
    """
    B, T, C = x.shape
    F = coef.shape[1]
    _check(x, gy, mu, gx, coef=coef, st=st, gc=gc)
    _contiguous(ch=ch)
    assert ch.dtype == torch.int64 and ch.shape == (F,) and coef.shape == (4, F)
    assert st.shape == mu.shape == (B, 2, F) and gy.shape[2] == F and gc.shape == (3, F)
    N = B * F
    if N == 0 or T == 0:
        return
    wr, wi, gu = _scratch(3, (B, T, F), x.device)
    gcl, = _scratch(1, (B, 3, F) if want else (1,), x.device)
    _efilt_adj_kernel[_grid(N)](coef, int(nreal), ch, x, st, gy, *gy.stride(), mu, wr, wi,
                                gu, gcl, N, T, C, F, WANT=bool(want), BLOCK=BLOCK,
                                num_warps=_NUM_WARPS, num_stages=1)
    _add_per_channel(gu, ch, gx)
    if want:
        gc += gcl.sum(0)


@triton.jit
def _cbq_adj_kernel(ch_ptr, nreal, b_ptr, a_ptr, sc_ptr, x_ptr, st_ptr, gy_ptr, gys_b,
                    gys_t, gys_f, mu_ptr, or_ptr, oi_ptr, gu_ptr, N, T, C, F,
                    BLOCK: tl.constexpr):
    m, b, f = _lanes(N, F, BLOCK)
    ch = tl.load(ch_ptr + f, mask=m, other=0)
    env = f >= nreal
    keep = m & env
    co = f * 6
    b0r, b0i = _cplx(b_ptr, co, m)
    b1r, b1i = _cplx(b_ptr, co + 2, m)
    b2r, b2i = _cplx(b_ptr, co + 4, m)
    a1r, a1i = _cplx(a_ptr, co + 2, m)
    a2r, a2i = _cplx(a_ptr, co + 4, m)
    sc = tl.load(sc_ptr + f, mask=m, other=0.0)
    so = (b * F + f) * 4
    xo = b * T * C + ch
    oo = b * T * F + f
    # forward outputs o[t] of the envelope filters (DF-II transposed, complex)
    z0r, z0i = _cplx(st_ptr, so, keep)
    z1r, z1i = _cplx(st_ptr, so + 2, keep)
    for t in range(T):
        v = tl.load(x_ptr + xo + t * C, mask=keep, other=0.0)
        o_r = b0r * v + z0r
        o_i = b0i * v + z0i
        z0r, z0i = (b1r * v - (a1r * o_r - a1i * o_i) + z1r,
                    b1i * v - (a1r * o_i + a1i * o_r) + z1i)
        z1r, z1i = b2r * v - (a2r * o_r - a2i * o_i), b2i * v - (a2r * o_i + a2i * o_r)
        tl.store(or_ptr + oo + t * F, o_r, mask=keep)
        tl.store(oi_ptr + oo + t * F, o_i, mask=keep)
    # backwards: go = gout - conj(a1) m0 - conj(a2) m1,
    # gv = Re(conj(b0) go + conj(b1) m0 + conj(b2) m1), m1 <- m0, m0 <- go
    m0r, m0i = _cplx(mu_ptr, so, m)
    m1r, m1i = _cplx(mu_ptr, so + 2, m)
    go = b * gys_b + f * gys_f
    for tt in range(T):
        t = T - 1 - tt
        g = sc * tl.load(gy_ptr + go + t * gys_t, mask=m, other=0.0)
        er, gi = _abs_grad(or_ptr, oi_ptr, oo + t * F, keep, g)
        gr = tl.where(env, er, g)
        gor = gr - (a1r * m0r + a1i * m0i) - (a2r * m1r + a2i * m1i)
        goi = gi - (a1r * m0i - a1i * m0r) - (a2r * m1i - a2i * m1r)
        gv = (b0r * gor + b0i * goi + b1r * m0r + b1i * m0i + b2r * m1r + b2i * m1i)
        tl.store(gu_ptr + oo + t * F, gv, mask=m)
        m1r, m1i = m0r, m0i
        m0r, m0i = gor, goi
    tl.store(mu_ptr + so, m0r, mask=m)
    tl.store(mu_ptr + so + 1, m0i, mask=m)
    tl.store(mu_ptr + so + 2, m1r, mask=m)
    tl.store(mu_ptr + so + 3, m1i, mask=m)


def biquad_bank_adjoint(ch, nreal, bcoef, acoef, scale, x, st, gy, mu, gx):
    """Adjoint of the frequency-shifted Butterworth modulation filters (Triton); the
    arguments and the mathematics of the numba
    :func:`rtamt.modulation.modfb_grad.biquad_bank_adjoint`.

    ch : (F,) int64;  nreal : int (Python);  bcoef, acoef : (F, 3, 2) float64;
    scale : (F,) float64;  x : (B, T, C) the bank's input;  st : (B, F, 2, 2) incoming
    state;  gy : (B, T, F) output gradient, any strides;  mu : (B, F, 2, 2) in: gradient
    of the outgoing state, out: of the incoming one;  gx : (B, T, C) added to.

    All float64 on one device, contiguous except ``gy``.  One launch of
    ``ceil(B F / BLOCK)`` programs, then one torch matrix product (module docstring).
    """
    B, T, C = x.shape
    F = ch.shape[0]
    _check(x, gy, mu, gx, bcoef=bcoef, acoef=acoef, scale=scale, st=st)
    _contiguous(ch=ch)
    assert ch.dtype == torch.int64 and bcoef.shape == acoef.shape == (F, 3, 2)
    assert scale.shape == (F,) and st.shape == mu.shape == (B, F, 2, 2)
    assert gy.shape[2] == F
    N = B * F
    if N == 0 or T == 0:
        return
    o_r, o_i, gu = _scratch(3, (B, T, F), x.device)
    _cbq_adj_kernel[_grid(N)](ch, int(nreal), bcoef, acoef, scale, x, st, gy, *gy.stride(),
                              mu, o_r, o_i, gu, N, T, C, F, BLOCK=BLOCK,
                              num_warps=_NUM_WARPS, num_stages=1)
    _add_per_channel(gu, ch, gx)
