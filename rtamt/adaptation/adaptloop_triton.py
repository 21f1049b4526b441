"""Triton twin of the adaptation-loop kernel, :func:`rtamt.adaptation.adaptloop.adaptloop`.

Chain of K nonlinear adaptation loops (Püschel 1988; Dau, Püschel & Kohlrausch 1996a,
JASA 99, 3615; Dau et al. 1997a) with the overshoot limiter of Münkner (1993) as in AMT
``adaptloop``; the design of the constants is :func:`rtamt.adaptation.adaptloop.design`.

One Triton lane per (stream, channel): a lane loads its K loop dividers and its
per-channel constants once, runs the block's T samples in a loop inside the kernel,
writes ``y[b, t, c]`` sample by sample and stores its dividers back at the end.  The
arithmetic of sample t depends only on the state and on ``x[t]`` (T is a loop bound,
never an operand), so any block partition gives bit-identical results.

dtype semantics (those of the numba kernel): the signal ``v`` is float64 throughout;
each divider is rounded to the state's dtype (float32 or float64) after every update
and widened to float64 where it is used; the output is computed in float64 and rounded
to ``y``'s dtype on store.

The K dividers (and the K-row constants factor, expfac, offset and the coefficients
a, b) are held as (KP, BLOCK) register tiles, KP = K rounded up to a power of two;
loop k reads its row with a one-hot masked sum (exact: one non-zero term) and writes
it back with ``tl.where``.  The limiter is applied lane-wise with ``tl.where``; its
exponential gets a 0 argument on the lanes that do not need it, so no overflow occurs
in discarded lanes.

Rounding: on a GPU the float64 ``tl.exp`` is libdevice's ``exp`` and the division is
IEEE-rounded; in Triton's interpreter both are numpy's.  The GPU compiler may contract
``a s + b v`` into an FMA, as numba's ``fastmath={'contract'}`` may: the last bits differ,
within the tolerance of the tests.
"""
from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 32
"""Lanes (stream, channel) per Triton program."""


@triton.jit
def lane_constants(a_ptr, b_ptr, lanes_ptr, L, c, live, kidx, krow, m2, K: tl.constexpr):
    """The constants of lanes ``c``: minlvl, corr, mult (BLOCK,), factor, expfac, offset
    (KP, BLOCK) from the rows of ``lanes`` (3 + 4K, L) (minlvl, corr, mult, factor[K],
    expfac[K], offset[K], s0[K]), and the loop coefficients a, b (KP,).  Also read by the
    adjoint (:mod:`rtamt.adaptation.adaptloop_grad_triton`)."""
    ml = tl.load(lanes_ptr + c, mask=live, other=1.0)
    cr = tl.load(lanes_ptr + L + c, mask=live, other=0.0)
    mu = tl.load(lanes_ptr + 2 * L + c, mask=live, other=0.0)
    rows = kidx[:, None].to(tl.int64) * L + c[None, :]
    fa = tl.load(lanes_ptr + 3 * L + rows, mask=m2, other=0.0)
    ef = tl.load(lanes_ptr + (3 + K) * L + rows, mask=m2, other=0.0)
    of = tl.load(lanes_ptr + (3 + 2 * K) * L + rows, mask=m2, other=0.0)
    av = tl.load(a_ptr + kidx, mask=krow, other=0.0)
    bv = tl.load(b_ptr + kidx, mask=krow, other=0.0)
    return ml, cr, mu, fa, ef, of, av, bv


@triton.jit
def _adaptloop_kernel(a_ptr, b_ptr, lanes_ptr, s_ptr, x_ptr, y_ptr,
                      n_lanes, T, C, L,
                      K: tl.constexpr, KP: tl.constexpr, LIMIT_ON: tl.constexpr,
                      BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    lane = pid * BLOCK + tl.arange(0, BLOCK)
    live = lane < n_lanes
    b = (lane // C).to(tl.int64)
    c = (lane % C).to(tl.int64)
    kidx = tl.arange(0, KP)
    krow = kidx < K
    m2 = krow[:, None] & live[None, :]

    ml, cr, mu, fa, ef, of, av, bv = lane_constants(a_ptr, b_ptr, lanes_ptr, L, c, live,
                                                    kidx, krow, m2, K)

    # dividers (KP, BLOCK) in the state's dtype; masked lanes hold 1 (no 0/0)
    s_off = (b[None, :] * K + kidx[:, None]) * C + c[None, :]
    S = tl.load(s_ptr + s_off, mask=m2, other=1.0)
    sdt = s_ptr.dtype.element_ty
    ydt = y_ptr.dtype.element_ty

    xy = b * T * C + c
    for t in range(T):
        xt = tl.load(x_ptr + xy + t * C, mask=live, other=0.0).to(tl.float64)
        v = tl.maximum(xt, ml)
        for k in tl.static_range(K):
            sel = kidx[:, None] == k
            sk = tl.sum(tl.where(sel, S, 0.0), axis=0).to(tl.float64)
            q = v / sk
            if LIMIT_ON:
                fak = tl.sum(tl.where(sel, fa, 0.0), axis=0)
                efk = tl.sum(tl.where(sel, ef, 0.0), axis=0)
                ofk = tl.sum(tl.where(sel, of, 0.0), axis=0)
                hi = q > 1.0
                e = tl.exp(tl.where(hi, efk * (q - 1.0), 0.0))
                q = tl.where(hi, fak / (1.0 + e) - ofk, q)
            v = q
            ak = tl.sum(tl.where(kidx == k, av, 0.0), axis=0)
            bk = tl.sum(tl.where(kidx == k, bv, 0.0), axis=0)
            snew = (ak * sk + bk * v).to(sdt)
            S = tl.where(sel, snew[None, :], S)
        tl.store(y_ptr + xy + t * C, ((v - cr) * mu).to(ydt), mask=live)

    tl.store(s_ptr + s_off, S, mask=m2)


def adaptloop(a, bcoef, lanes, limit_on, s, x, y):
    """Adaptation loops on torch tensors; same arguments as the numba kernel.

    Per sample and channel: ``v = max(x, minlvl)``; for each loop k: ``v = v / s_k``;
    if ``limit_on`` and ``v > 1``: ``v = factor_k / (1 + exp(expfac_k (v - 1))) -
    offset_k`` (Münkner 1993, as in AMT ``adaptloop``); ``s_k = a_k s_k + b_k v``
    (Dau et al. 1996a, 1997a).  Output ``y = (v - corr) * mult`` (model units).

    a, bcoef : (K,) float64          RC low-pass coefficients per loop.
    lanes    : (3 + 4K, L) float64   rows ``minlvl, corr, mult, factor[K], expfac[K],
               offset[K], s0[K]`` on L >= C lanes (only the first C are read).
    limit_on : bool                  overshoot limiter on.
    s        : (B, K, C)             loop dividers, stream dtype, advanced in place.
    x, y     : (B, T, C)             input (IHC envelope, model units) and output, stream
               dtype; ``y`` may be ``x``.

    All tensors contiguous and on one device.  The grid is ceil(B C / BLOCK) programs.
    """
    B, T, C = x.shape
    K = a.shape[0]
    for name, tns in (("a", a), ("bcoef", bcoef), ("lanes", lanes), ("s", s), ("x", x),
                      ("y", y)):
        assert tns.is_contiguous(), f"adaptloop: {name} must be contiguous"
    assert bcoef.shape == (K,) and lanes.shape[0] == 3 + 4 * K and lanes.shape[1] >= C
    assert s.shape == (B, K, C) and y.shape == x.shape
    n = B * C
    if n == 0 or T == 0:
        return
    KP = triton.next_power_of_2(K)
    grid = (triton.cdiv(n, BLOCK),)
    _adaptloop_kernel[grid](a, bcoef, lanes, s, x, y, n, T, C, lanes.shape[1],
                            K=K, KP=KP, LIMIT_ON=bool(limit_on), BLOCK=BLOCK)
