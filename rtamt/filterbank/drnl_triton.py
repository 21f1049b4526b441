"""Triton kernel of the DRNL filterbank; mirrors :func:`rtamt.filterbank.drnl.drnl_kernel`.

The dual-resonance nonlinear filter of Meddis, O'Mard & Lopez-Poveda (2001, JASA 109,
2852) and Lopez-Poveda & Meddis (2001, JASA 110, 3107), with the cascade lengths and
constants of Jepsen, Ewert & Dau (2008, JASA 124, 422) / Paulick et al. (2024): per
channel, the stapes velocity (m/s) drives

* a linear path: gain ``g``, ``n_gl`` gammatone biquads, ``n_ll`` Butterworth low-pass
  biquads;
* a nonlinear path: ``n_gb`` gammatone biquads, the broken stick
  ``sign(u) min(a |u|, b |u|^c)``, ``n_ga`` gammatone biquads, ``n_ln`` low-pass biquads;

and the output (basilar-membrane velocity, m/s) is the sum of the two.  The section
coefficients come from :func:`rtamt.filterbank.drnl.design`; every section is a biquad in
transposed direct form II.

Work layout: one Triton lane per (stream, channel), :data:`BLOCK` lanes per program (the
tail masked).  A lane loads its coefficients and the two memories of every section once,
runs the block's ``T`` samples in a ``for t in range(T)`` loop inside the kernel, writes
``y[b, t, c]`` sample by sample and stores the memories back at the end.  ``T`` is only a
loop bound, so the arithmetic applied to sample ``t`` depends only on the state and on
``x[b, t]``: any block partition gives bit-identical results.

The memories of a path's sections are held as two (KP, BLOCK) register tiles (rows =
sections in cascade order, KP = the section count rounded up to a power of two, as
``tl.arange`` needs).  The cascade lengths are ``tl.constexpr``, so the cascade is
unrolled with ``tl.static_range``; section ``k`` reads its row with a one-hot masked
``tl.sum`` (exact: one term, the others are zeros) and writes it back with ``tl.where``.

dtype semantics (those of the numba kernel): everything runs in the stream's dtype.  The
coefficients are the design's arrays rounded to that dtype (``DRNLCoeffs.sections``), the
products and sums of every biquad are formed in that dtype, and the memories are stored
in it; no float64 intermediate exists for float32 streams.  Exceptions, as in numba:
``|u|^(1/4)`` is ``sqrt(sqrt(|u|))`` with correctly rounded square roots (``tl.sqrt_rn``
in float32, ``tl.sqrt`` in float64); a general exponent ``c`` is evaluated as
``exp(c log|u|)`` in float64 and rounded to the stream dtype (numba calls ``pow`` in the
stream dtype: both are within about one unit in the last place of the stream dtype).
The minimum of the broken stick and the sign are taken with the comparisons numba uses
(``q < r``, ``u >= 0``), so ties and signed zeros go the same way.

Fused multiply-adds: numba compiles the kernel with ``fastmath={'contract'}``; on x86-64
with FMA, LLVM turns each biquad into ``out = fma(b0, v, s1)``,
``s1 <- fma(b1, v, -(a1 out)) + s2`` and ``s2 <- fma(b2, v, -(a2 out))`` (read in the
kernel's assembly: ``vfmadd213`` / ``vmul`` + ``vfmsub231`` + ``vadd`` / ``vmul`` +
``vfmsub231`` per section, scalar and vector loops alike).  The Triton kernel spells
exactly these with ``tl.fma`` and leaves no other multiply-add pair, and is launched with
``enable_fp_fusion=False`` so the GPU compiler adds no contraction of its own.  In the
interpreter the result is then bit-identical to numba's for c = 1/4 (all presets), float32
and float64.  A numba build without FMA (a CPU without it) rounds each product
separately and differs in the last bits.

On a GPU the kernel relies on:

* ``tl.fma`` lowering to one ``fma.rn`` instruction (the interpreter uses a correctly
  rounded fused multiply-add, as x86's ``vfmadd``/``vfmsub``);
* the float32 ``tl.sqrt_rn`` lowering to ``sqrt.rn.f32`` and the float64 ``tl.sqrt`` to
  ``sqrt.rn.f64`` (the interpreter uses numpy's correctly rounded square root);
* float64 ``tl.exp``/``tl.log`` (general exponent only, not the presets') being
  libdevice's ``exp``/``log``, within an ulp or two (the interpreter uses numpy's);
* the one-hot ``tl.sum`` over a (KP, BLOCK) tile and the tile ``tl.where``, exact by
  construction whatever register layout the compiler picks.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["BLOCK", "drnl_kernel"]

BLOCK = 32
"""Lanes (stream, channel) per Triton program; a power of two (``tl.arange``)."""

_NUM_WARPS = 1
"""Warps per program: 32 threads for the :data:`BLOCK` = 32 lanes (ignored by the
interpreter)."""


@triton.jit
def _coef5(ptr, C, c, m):
    """Row ``[b0 b1 b2 a1 a2]`` of a (5, C) section array at channels ``c`` (lanes)."""
    b0 = tl.load(ptr + c, mask=m, other=0.0)
    b1 = tl.load(ptr + C + c, mask=m, other=0.0)
    b2 = tl.load(ptr + 2 * C + c, mask=m, other=0.0)
    a1 = tl.load(ptr + 3 * C + c, mask=m, other=0.0)
    a2 = tl.load(ptr + 4 * C + c, mask=m, other=0.0)
    return b0, b1, b2, a1, a2


@triton.jit
def _stick(bs_ptr, C, c, m):
    """The broken stick's ``a``, ``b``, ``c`` and knee test at channels ``c`` (lanes), from
    the (4, C) array ``bs``."""
    ba = tl.load(bs_ptr + c, mask=m, other=0.0)
    bb = tl.load(bs_ptr + C + c, mask=m, other=0.0)
    bc = tl.load(bs_ptr + 2 * C + c, mask=m, other=0.0)
    bk = tl.load(bs_ptr + 3 * C + c, mask=m, other=0.0)
    return ba, bb, bc, bk


@triton.jit
def _memories(p1, p2, b, c, m, C, S: tl.constexpr, KP: tl.constexpr):
    """The two memories of a path's ``S`` sections on lanes (stream ``b``, channel ``c``),
    from (B, S, C) arrays ``p1``, ``p2``: the row index (KP, 1), the tile mask and the
    offsets (KP, BLOCK) and the two (KP, BLOCK) tiles (rows ``>= S`` zero)."""
    r = tl.arange(0, KP)[:, None]
    msk = (r < S) & m[None, :]
    off = (b[None, :] * S + r) * C + c[None, :]
    return r, msk, off, tl.load(p1 + off, mask=msk, other=0.0), tl.load(p2 + off, mask=msk,
                                                                         other=0.0)


@triton.jit
def _biquad(v, S1, S2, sel, b0, b1, b2, a1, a2):
    """One sample of the transposed-direct-form-II biquad whose memories are row ``sel``
    ((KP, 1) one-hot) of the tiles ``S1``, ``S2`` (KP, BLOCK):
    ``out = b0 v + s1;  s1 <- b1 v - a1 out + s2;  s2 <- b2 v - a2 out``, in the stream
    dtype, with the fused multiply-adds of the numba build (module docstring).  Returns
    ``out`` and the updated tiles."""
    s1 = tl.sum(tl.where(sel, S1, 0.0), axis=0)
    s2 = tl.sum(tl.where(sel, S2, 0.0), axis=0)
    out = tl.fma(b0, v, s1)
    n1 = tl.fma(b1, v, -(a1 * out)) + s2
    n2 = tl.fma(b2, v, -(a2 * out))
    S1 = tl.where(sel, n1[None, :], S1)
    S2 = tl.where(sel, n2[None, :], S2)
    return out, S1, S2


@triton.jit
def _drnl_kernel(scale_ptr, gain_ptr, gtl_ptr, lpl_ptr, gtn_ptr, lpn_ptr, bs_ptr,
                 l1_ptr, l2_ptr, n1_ptr, n2_ptr, x_ptr, y_ptr, N, T, C,
                 N_GL: tl.constexpr, N_LL: tl.constexpr, N_GB: tl.constexpr,
                 N_GA: tl.constexpr, N_LN: tl.constexpr, KL: tl.constexpr,
                 KN: tl.constexpr, QUARTER: tl.constexpr, DO_LIN: tl.constexpr,
                 DO_NLIN: tl.constexpr, F32: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    b = i // C
    c = i - b * C
    ydt = y_ptr.dtype.element_ty
    SL: tl.constexpr = N_GL + N_LL
    SN: tl.constexpr = N_GB + N_GA + N_LN
    s = tl.load(scale_ptr)
    if DO_LIN:
        g = tl.load(gain_ptr + c, mask=m, other=0.0)
        gl0, gl1, gl2, gl3, gl4 = _coef5(gtl_ptr, C, c, m)
        ll0, ll1, ll2, ll3, ll4 = _coef5(lpl_ptr, C, c, m)
        rl, ml, ol, L1, L2 = _memories(l1_ptr, l2_ptr, b, c, m, C, SL, KL)
    if DO_NLIN:
        gn0, gn1, gn2, gn3, gn4 = _coef5(gtn_ptr, C, c, m)
        ln0, ln1, ln2, ln3, ln4 = _coef5(lpn_ptr, C, c, m)
        ba, bb, bc, bk = _stick(bs_ptr, C, c, m)
        rn, mn, on, M1, M2 = _memories(n1_ptr, n2_ptr, b, c, m, C, SN, KN)

    xo = b * T
    yo = b * T * C + c
    for t in range(T):
        xv = tl.load(x_ptr + xo + t, mask=m, other=0.0) * s
        if DO_LIN:
            v = g * xv
            for k in tl.static_range(N_GL):
                v, L1, L2 = _biquad(v, L1, L2, rl == k, gl0, gl1, gl2, gl3, gl4)
            for k in tl.static_range(N_LL):
                v, L1, L2 = _biquad(v, L1, L2, rl == N_GL + k, ll0, ll1, ll2, ll3, ll4)
        if DO_NLIN:
            w = xv
            for k in tl.static_range(N_GB):
                w, M1, M2 = _biquad(w, M1, M2, rn == k, gn0, gn1, gn2, gn3, gn4)
            # broken stick: sign(w) * min(a|w|, b|w|^c)
            au = tl.abs(w)
            r = ba * au
            if QUARTER:
                if F32:
                    q = bb * tl.sqrt_rn(tl.sqrt_rn(au))
                else:
                    q = bb * tl.sqrt(tl.sqrt(au))
                r = tl.where(q < r, q, r)
            else:
                # |w|^c only above the knee test (au > bk >= 0, so the log is finite)
                above = au > bk
                a64 = tl.where(above, au, 1.0).to(tl.float64)
                p = tl.exp(bc.to(tl.float64) * tl.log(a64)).to(au.dtype)
                q = bb * p
                r = tl.where(above & (q < r), q, r)
            w = tl.where(w >= 0, r, -r)
            for k in tl.static_range(N_GA):
                w, M1, M2 = _biquad(w, M1, M2, rn == N_GB + k, gn0, gn1, gn2, gn3, gn4)
            for k in tl.static_range(N_LN):
                w, M1, M2 = _biquad(w, M1, M2, rn == N_GB + N_GA + k, ln0, ln1, ln2, ln3,
                                    ln4)
        if DO_LIN and DO_NLIN:
            out = v + w
        elif DO_LIN:
            out = v
        elif DO_NLIN:
            out = w
        else:
            out = tl.zeros([BLOCK], dtype=ydt)
        tl.store(y_ptr + yo + t * C, out.to(ydt), mask=m)

    if DO_LIN:
        tl.store(l1_ptr + ol, L1, mask=ml)
        tl.store(l2_ptr + ol, L2, mask=ml)
    if DO_NLIN:
        tl.store(n1_ptr + on, M1, mask=mn)
        tl.store(n2_ptr + on, M2, mask=mn)


def drnl_kernel(scale, gain, gtl, lpl, gtn, lpn, bs, quarter, n_gl, n_ll, n_gb, n_ga, n_ln,
                do_lin, do_nlin, l1, l2, n1, n2, x, y, v=None, w=None):
    """DRNL of Lopez-Poveda & Meddis (2001) on torch tensors (Triton); same arguments as
    the numba :func:`rtamt.filterbank.drnl.drnl_kernel`.

    scale        : (1,)   input scale to stapes velocity (m/s per input unit).
    gain         : (C,)   linear-path gain g.
    gtl, lpl     : (5, C) linear-path gammatone and low-pass sections ``[b0 b1 b2 a1 a2]``.
    gtn, lpn     : (5, C) nonlinear-path gammatone section (before and after the stick)
                   and low-pass section.
    bs           : (4, C) broken stick a, b (in (m/s)^(1-c)), c and the knee test (m/s):
                   ``b|u|^c`` is evaluated only where ``|u|`` exceeds it.
    quarter      : bool, every c == 0.25: ``|u|^c = sqrt(sqrt(|u|))``.
    n_gl, n_ll, n_gb, n_ga, n_ln : cascade lengths (GT lin, LP lin, GT before, GT after,
                   LP nlin), Python ints.
    do_lin, do_nlin : which paths contribute (bools).
    l1, l2       : (B, n_gl + n_ll, C) linear-path section memories, advanced in place.
    n1, n2       : (B, n_gb + n_ga + n_ln, C) nonlinear-path section memories, in place.
    x            : (B, T) input;  y : (B, T, C) output, BM velocity (m/s).
    v, w         : ignored (the numba kernel's (C,) scratch rows; here every lane keeps
                   its values in registers).  May be None.

    Every tensor has the stream's dtype (float32 or float64; the coefficients rounded to
    it, ``DRNLCoeffs.sections[dtype]``), is contiguous and lies on one device.  One lane
    per (stream, channel); the grid is ceil(B C / BLOCK) programs.
    """
    B, T = x.shape
    C = gain.shape[0]
    SL, SN = n_gl + n_ll, n_gb + n_ga + n_ln
    for name, t in (("scale", scale), ("gain", gain), ("gtl", gtl), ("lpl", lpl),
                    ("gtn", gtn), ("lpn", lpn), ("bs", bs), ("l1", l1), ("l2", l2),
                    ("n1", n1), ("n2", n2), ("x", x), ("y", y)):
        assert t.is_contiguous(), f"drnl_kernel: {name} must be contiguous"
        assert t.dtype == x.dtype, f"drnl_kernel: {name} is {t.dtype}, x is {x.dtype}"
    assert x.dtype in (torch.float32, torch.float64)
    assert scale.shape == (1,) and bs.shape == (4, C)
    assert gtl.shape == lpl.shape == gtn.shape == lpn.shape == (5, C)
    assert l1.shape == l2.shape == (B, SL, C) and n1.shape == n2.shape == (B, SN, C)
    assert y.shape == (B, T, C)
    N = B * C
    if N == 0 or T == 0:
        return
    _drnl_kernel[(triton.cdiv(N, BLOCK),)](
        scale, gain, gtl, lpl, gtn, lpn, bs, l1, l2, n1, n2, x, y, N, T, C,
        N_GL=int(n_gl), N_LL=int(n_ll), N_GB=int(n_gb), N_GA=int(n_ga), N_LN=int(n_ln),
        KL=triton.next_power_of_2(max(SL, 1)), KN=triton.next_power_of_2(max(SN, 1)),
        QUARTER=bool(quarter), DO_LIN=bool(do_lin), DO_NLIN=bool(do_nlin),
        F32=x.dtype == torch.float32, BLOCK=BLOCK, num_warps=_NUM_WARPS,
        enable_fp_fusion=False)
