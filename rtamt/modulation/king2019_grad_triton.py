"""Triton twin of King2019's modulation-bank adjoint
:func:`rtamt.modulation.king2019_grad.king_bank_adjoint` (King, Varnet & Lorenzi 2019, JASA
145, 2277-2293): the same name, arguments and mathematics (derivation in the numba
docstring), on float64 torch tensors on one device.

Work layout: one Triton lane per (stream, input channel), :data:`BLOCK` lanes per program,
a grid of ``ceil(B C / BLOCK)`` programs.  A lane owns the memories' gradients
``mu[:, b, 0, :, c]`` of all ``M`` filters on its channel and updates them in place, sample
by sample from ``t = T - 1`` down to 0 and filter by filter (``j = 0 .. M-1``), adding each
filter's input gradient to ``gx[b, t, c]`` in numba's order.  With ``want``, the lane first
recomputes every filter's output ``o[t]`` from the incoming state ``st`` and the bank's
input ``u`` into a float64 scratch shaped like the packed output ``(B, T, M C)`` (device
memory instead of numba's checkpoints), and sums the coefficient gradients of its channel
in a scratch ``(B, M, 5, C)``, which the launcher reduces over streams and channels into
``gc`` with torch (another order than numba's: the twins agree to rounding, 1e-12
relative).  Nothing leaves the device.

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
from ..engine.triton_lanes import grid as _grid
from ..engine.triton_lanes import lanes as _lanes

__all__ = ["king_bank_adjoint"]


@triton.jit
def _section(sos_ptr, j):
    """``b0, b1, b2, a1, a2`` of filter ``j``'s section (row ``j`` of the (M, 1, 6) array)."""
    return (tl.load(sos_ptr + j * 6), tl.load(sos_ptr + j * 6 + 1), tl.load(sos_ptr + j * 6 + 2),
            tl.load(sos_ptr + j * 6 + 4), tl.load(sos_ptr + j * 6 + 5))


@triton.jit
def _king_adj_kernel(sos_ptr, gy_ptr, gys_b, gys_t, gys_f, mu_ptr, gx_ptr, u_ptr, st_ptr,
                     o_ptr, gl_ptr, N, B, T, C, M, WANT: tl.constexpr, BLOCK: tl.constexpr):
    m, b, c = _lanes(N, C, BLOCK)
    xo = b * T * C + c
    # memories of filter j on this lane: [j, b, 0, k, c] at ((j B + b) 2 + k) C + c
    zo = b * 2 * C + c
    zs = B * 2 * C
    if WANT:
        # forward outputs o[t] of every filter (DF-II transposed, sos_rows' arithmetic)
        for j in range(M):
            b0, b1, b2, a1, a2 = _section(sos_ptr, j)
            z0 = tl.load(st_ptr + j * zs + zo, mask=m, other=0.0)
            z1 = tl.load(st_ptr + j * zs + zo + C, mask=m, other=0.0)
            for t in range(T):
                v = tl.load(u_ptr + xo + t * C, mask=m, other=0.0)
                out = b0 * v + z0
                z0 = b1 * v - a1 * out + z1
                z1 = b2 * v - a2 * out
                tl.store(o_ptr + (b * T + t) * M * C + j * C + c, out, mask=m)
    go = b * gys_b + c * gys_f
    glo = b * M * 5 * C + c
    for tt in range(T):
        t = T - 1 - tt
        acc = tl.load(gx_ptr + xo + t * C, mask=m, other=0.0)
        if WANT:
            v = tl.load(u_ptr + xo + t * C, mask=m, other=0.0)
        for j in range(M):
            b0, b1, b2, a1, a2 = _section(sos_ptr, j)
            first_order = (b2 == 0.0) & (a2 == 0.0)
            mo = j * zs + zo
            m0 = tl.load(mu_ptr + mo, mask=m, other=0.0)
            m1 = tl.load(mu_ptr + mo + C, mask=m, other=0.0)
            g = tl.load(gy_ptr + go + t * gys_t + j * C * gys_f, mask=m, other=0.0)
            # one sample of the section's adjoint (engine.sos_grad.sos_back)
            gor = g - a1 * m0 - a2 * m1
            acc += b0 * gor + b1 * m0 + b2 * m1
            tl.store(mu_ptr + mo, gor, mask=m)
            tl.store(mu_ptr + mo + C, tl.where(first_order, m0 + m1, m0), mask=m)
            if WANT:
                o = tl.load(o_ptr + (b * T + t) * M * C + j * C + c, mask=m, other=0.0)
                po = glo + j * 5 * C
                tl.store(gl_ptr + po, tl.load(gl_ptr + po, mask=m) + gor * v, mask=m)
                tl.store(gl_ptr + po + C, tl.load(gl_ptr + po + C, mask=m) + m0 * v, mask=m)
                tl.store(gl_ptr + po + 2 * C, tl.load(gl_ptr + po + 2 * C, mask=m) + m1 * v,
                         mask=m)
                tl.store(gl_ptr + po + 3 * C, tl.load(gl_ptr + po + 3 * C, mask=m) - m0 * o,
                         mask=m)
                tl.store(gl_ptr + po + 4 * C, tl.load(gl_ptr + po + 4 * C, mask=m) - m1 * o,
                         mask=m)
        tl.store(gx_ptr + xo + t * C, acc, mask=m)


def king_bank_adjoint(sos, gy, mu, gx, want, u, st, gc):
    """Adjoint of King2019's modulation bank (Triton); the arguments of the numba
    :func:`rtamt.modulation.king2019_grad.king_bank_adjoint`.

    sos  : (M, 1, 6) float64 band-pass sections;
    gy   : (B, T, M C) gradient of the packed output (column ``m C + c``), any strides;
    mu   : (M, B, 1, 2, C) in: gradient of the outgoing state ``bp``, out: of the incoming;
    gx   : (B, T, C) input gradient of the bank (added to);
    want : bool (Python);  u : (B, T, C) the bank's input and st : (M, B, 1, 2, C) the
           incoming state (read only with ``want``; may be any float64 tensors otherwise);
    gc   : (M, 5) gradients of ``b0, b1, b2, a1, a2`` of each filter (added to, with want).

    All float64, contiguous except ``gy``, on one device.  One launch of
    ``ceil(B C / BLOCK)`` programs, then (with ``want``) one torch reduction.
    """
    M = sos.shape[0]
    B, T, C = gx.shape
    tens = dict(sos=sos, gy=gy, mu=mu, gx=gx, gc=gc)
    if want:
        tens.update(u=u, st=st)
    for name, t in tens.items():
        assert name == "gy" or t.is_contiguous(), f"king_bank_adjoint: {name} must be contiguous"
        assert t.dtype == torch.float64, f"king_bank_adjoint: {name} is not float64"
        assert t.device == gx.device, f"king_bank_adjoint: {name} is not on gx's device"
    assert sos.shape == (M, 1, 6), "one section per filter"
    assert gy.shape == (B, T, M * C) and mu.shape == (M, B, 1, 2, C) and gc.shape == (M, 5)
    if want:
        assert u.shape == (B, T, C) and st.shape == (M, B, 1, 2, C)
    N = B * C
    if N == 0 or T == 0 or M == 0:
        return
    dev = gx.device
    if want:
        o = torch.empty((B, T, M * C), dtype=torch.float64, device=dev)
        gl = torch.zeros((B, M, 5, C), dtype=torch.float64, device=dev)
    else:
        u = st = o = gl = gx                       # not read
    _king_adj_kernel[_grid(N)](sos, gy, *gy.stride(), mu, gx, u, st, o, gl, N, B, T, C, M,
                               WANT=bool(want), BLOCK=BLOCK, num_warps=_NUM_WARPS,
                               num_stages=1)
    if want:
        gc += gl.sum((0, 3))
