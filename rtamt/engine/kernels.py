"""Compiled per-sample recursions (numba), one source per recursion.

Every kernel here works on **time-major** arrays ``(B, T, C)`` (batch, time, channel)
so that the innermost loop runs over independent channels or filters: the compiler
vectorises it (AVX2/AVX-512) and the out-of-order core overlaps the independent
recursions.  The public API of rtamt is time-last; the stage wrappers transpose at
the boundary (:mod:`rtamt.engine.stage`).

Each kernel advances its state arrays **in place** and writes its output into a
preallocated array.  The arithmetic applied to sample ``t`` depends only on the
state and on ``x[t]``, never on where a block starts, so any block partition
gives bit-identical results.

Floating point: ``fastmath={'contract'}`` only (FMA contraction, deterministic per
element); no reassociation, no ``nnan``/``ninf`` assumptions.  Denormals are
handled by the calling thread's FTZ/DAZ flags (:mod:`rtamt.engine.denormal`).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .fastexp import exp_f64_short
from .intrinsics import copy8, fma
from .jit import JIT as _JIT

LANES = 32
"""Channel loops run over a lane count rounded up to a multiple of this.  LLVM vectorises
them 32 float64 lanes per iteration (8 per AVX-512 register, 4 registers interleaved)
and runs whatever is left in scalar code, so without padding a bank of 30 channels would
run entirely in the scalar remainder loop.  Padded lanes carry zeros or copies of
channel 0 and are never written out (see :func:`pad_lanes`)."""

STREAMS = 8
"""Streams of a batch that the latency-bound recursions advance together, sample by sample
(their independent chains fill the out-of-order window: a single stream's 32 lanes leave
it waiting on one sample's division chain).  Only the order of independent operations
changes: every lane's arithmetic is the same whatever the batch."""


def pad_lanes(rows: np.ndarray, repeat_first: bool) -> np.ndarray:
    """Per-channel constants ``rows`` (R, C) laid out for a lane kernel: (R, L) float64,
    C-contiguous, L = C rounded up to :data:`LANES`; the padding lanes are 0
    (``repeat_first=False``) or copies of channel 0.  Done once per design (Coeffs)."""
    rows = np.asarray(rows, np.float64)
    C = rows.shape[1]
    L = -(-C // LANES) * LANES
    if repeat_first:
        return np.ascontiguousarray(rows[:, np.r_[np.arange(C), np.zeros(L - C, np.intp)]])
    out = np.zeros((rows.shape[0], L))
    out[:, :C] = rows
    return out


@njit(**_JIT)
def gammatone4(lanes, sr, si, x, y):
    """Cascade of four identical complex one-pole sections per channel.

    Implements ``y = gain * Re( x filtered by 1 / (1 - p z^-1)^4 )`` (the AMT
    all-pole gammatone, Hohmann 2002 / Lyon 1997 form, see
    :mod:`rtamt.filterbank.gammatone`).

    lanes : (3, L)    rows: pole real part, pole imaginary part, real output gain (includes
                      the 2 of 2·Re), on L = C rounded up to :data:`LANES` lanes with zeros
                      past C (``GammatoneCoeffs.lanes``, padded once at design time).
    sr, si : (B, 4, C) section states (real, imag), advanced in place.
    x      : (B, T)    input, one signal per batch item.
    y      : (B, T, C) output, C-contiguous.

    The recursion runs on the ``L`` lanes (a per-call copy of the state; the extra lanes
    have pole and gain 0 and stay 0).  Each sample's ``L`` outputs are written straight
    into the flat output, the lanes past ``C`` landing in the following rows, which are
    written afterwards; only where that would run past the end of ``y`` they go through
    a scratch row.  The states are stored per sample in their own dtype, so the
    padding changes no bit of the result.
    """
    B, T = x.shape
    C = sr.shape[2]
    L = lanes.shape[1]
    ppr = lanes[0]
    ppi = lanes[1]
    pg = lanes[2]
    wr = np.zeros((4, L), sr.dtype)
    wi = np.zeros((4, L), si.dtype)
    row = np.empty(L, y.dtype)
    yf = y.reshape(-1)
    n = yf.shape[0]
    for b in range(B):
        wr[:, :C] = sr[b]
        wi[:, :C] = si[b]
        for t in range(T):
            xv = x[b, t]
            o = (b * T + t) * C
            tail = o + L > n
            dst = row if tail else yf[o:o + L]
            for c in range(L):
                p_r = ppr[c]
                p_i = ppi[c]
                # section 1: z1 = p*z1 + x
                ar = wr[0, c]
                ai = wi[0, c]
                zr = p_r * ar - p_i * ai + xv
                zi = p_r * ai + p_i * ar
                wr[0, c] = zr
                wi[0, c] = zi
                # section 2
                ar = wr[1, c]
                ai = wi[1, c]
                zr2 = p_r * ar - p_i * ai + zr
                zi2 = p_r * ai + p_i * ar + zi
                wr[1, c] = zr2
                wi[1, c] = zi2
                # section 3
                ar = wr[2, c]
                ai = wi[2, c]
                zr3 = p_r * ar - p_i * ai + zr2
                zi3 = p_r * ai + p_i * ar + zi2
                wr[2, c] = zr3
                wi[2, c] = zi3
                # section 4
                ar = wr[3, c]
                ai = wi[3, c]
                zr4 = p_r * ar - p_i * ai + zr3
                zi4 = p_r * ai + p_i * ar + zi3
                wr[3, c] = zr4
                wi[3, c] = zi4
                dst[c] = pg[c] * zr4
            if tail:
                yf[o:] = row[:n - o]
        sr[b] = wr[:, :C]
        si[b] = wi[:, :C]


@njit(**_JIT)
def adaptloop(a, bcoef, lanes, limit_on, s, x, y):
    """Chain of nonlinear adaptation loops (Püschel 1988; Dau et al. 1996a, 1997a).

    Per sample and channel: ``v = max(x, minlvl)``; for each loop k:
    ``v = v / s_k``; if overshoot limiting is on and ``v > 1``:
    ``v = factor_k / (1 + exp(expfac_k (v - 1))) - offset_k`` (Münkner 1993, as in
    AMT ``adaptloop``); ``s_k = a_k s_k + b_k v``.  Output ``(v - corr) * mult``.

    The loop over channels is innermost for each loop k, so the divisions of all
    channels vectorise; the limiter pass runs only in loops where some channel needs it
    (on 70 dB noise: loops 3-5, about 20 of the 150 channel-loops per sample), and LLVM
    turns its ``if`` into AVX-512-masked vector code; the limiter is where most of this
    kernel's time goes.  Its exponential is :func:`rtamt.engine.fastexp.exp_f64_short`
    inlined (within 2 ulp of libm): a libm call would not vectorise and would force the
    live vector registers to be spilled around it.

    a, bcoef : (K,)            RC low-pass coefficients per loop.
    lanes    : (3 + 4K, L)     per-channel constants on L lanes (L = C rounded up to
               :data:`LANES`; the padding lanes repeat channel 0), rows ``minlvl, corr,
               mult, factor[K], expfac[K], offset[K], s0[K]`` (``s0``: the loop dividers
               at the steady state of silence), float64; built once by
               :func:`rtamt.adaptation.adaptloop.design` (``AdaptLoopCoeffs.lanes``).
    limit_on : bool
    s        : (B, K, C)       loop dividers (state), advanced in place.
    x, y     : (B, T, C)

    The channel loops run on all L lanes (a per-call copy of the state, in the state's
    dtype, so a float32 state is rounded to float32 every sample; the padding lanes start
    from ``s0`` and are fed their minimum level, so they stay at the steady state of
    silence, are never written out and cannot reach a real lane: every operation is per
    lane).  Without the padding a channel count that is not a multiple of the vector
    width leaves a scalar remainder (with a branch per channel in the limiter); the
    constants are padded at design time, so a call copies only the state.
    """
    B, T, C = x.shape
    K = a.shape[0]
    L = lanes.shape[1]
    ml = lanes[0]
    cr = lanes[1]
    mu = lanes[2]
    fa = lanes[3:3 + K]
    ef = lanes[3 + K:3 + 2 * K]
    of = lanes[3 + 2 * K:3 + 3 * K]
    s0 = lanes[3 + 3 * K:3 + 4 * K]
    G = min(B, STREAMS)
    v = np.empty((G, L), np.float64)
    sl = np.empty((G, K, L), s.dtype)  # the state keeps its dtype sample by sample
    for b0 in range(0, B, G):
        gn = min(G, B - b0)
        for g in range(gn):
            sl[g, :, C:] = s0[:, C:]
            sl[g, :, :C] = s[b0 + g]
        for t in range(T):
            for g in range(gn):
                xt = x[b0 + g, t]
                vg = v[g]
                for c in range(C):
                    vg[c] = max(xt[c], ml[c])
                for c in range(C, L):
                    vg[c] = ml[c]
            for k in range(K):
                ak = a[k]
                bk = bcoef[k]
                fak = fa[k]
                efk = ef[k]
                ofk = of[k]
                for g in range(gn):
                    vg = v[g]
                    sk = sl[g, k]
                    over = False
                    for c in range(L):
                        q = vg[c] / sk[c]
                        vg[c] = q
                        over |= q > 1.0
                    if limit_on and over:
                        for c in range(L):
                            q = vg[c]
                            if q > 1.0:
                                e = exp_f64_short(efk[c] * (q - 1.0))
                                vg[c] = fak[c] / (1.0 + e) - ofk[c]
                    for c in range(L):
                        sk[c] = ak * sk[c] + bk * vg[c]
            for g in range(gn):
                yt = y[b0 + g, t]
                vg = v[g]
                for c in range(C):
                    yt[c] = (vg[c] - cr[c]) * mu[c]
        for g in range(gn):
            s[b0 + g] = sl[g, :, :C]


@njit(**_JIT)
def sos_shared(sos, rectify, zi, x, y, yoff):
    """Real second-order-section cascade shared by all channels (DF-II transposed).

    Same difference equations as ``scipy.signal.sosfilt`` (Oppenheim & Schafer,
    *Discrete-Time Signal Processing*, 3rd ed., sec. 6.5), optionally after
    half-wave rectification ``max(x, 0)``.

    sos     : (S, 6)       sections [b0 b1 b2 a0 a1 a2], a0 == 1.
    rectify : bool
    zi      : (B, S, 2, C) section states, advanced in place.
    x       : (B, T, C)    input.
    y       : (B, T, Ftot) output; channel c -> column ``yoff + c`` (Ftot = C, yoff = 0
              for a plain (B, T, C) output; y may then be x itself).

    First-order sections (``b2 = a2 = 0``, e.g. the IHC low-passes) take a shorter loop
    that leaves their (always zero) second memory alone.
    """
    for b in range(x.shape[0]):
        sos_rows(sos, rectify, zi[b], x[b], y[b], yoff)


@njit(**_JIT)
def sos_rows(sos, rectify, zi, x, y, yoff):
    """:func:`sos_shared` for one stream: ``zi`` (S, 2, C), ``x`` (T, C), ``y`` (T, Ftot)."""
    T, C = x.shape
    S = sos.shape[0]
    for t in range(T):
        xt = x[t]
        yt = y[t, yoff:yoff + C]
        for c in range(C):
            v = xt[c]
            if rectify:
                v = max(v, 0.0)
            yt[c] = v
        for s_ in range(S):
            b0 = sos[s_, 0]
            b1 = sos[s_, 1]
            b2 = sos[s_, 2]
            a1 = sos[s_, 4]
            a2 = sos[s_, 5]
            z0 = zi[s_, 0]
            z1 = zi[s_, 1]
            if b2 == 0.0 and a2 == 0.0:
                # first-order section: the second memory stays exactly 0 (b2 v - a2 y);
                # skipping it changes no value (at most the sign of a zero)
                for c in range(C):
                    v = yt[c]
                    out = b0 * v + z0[c]
                    z0[c] = b1 * v - a1 * out + z1[c]
                    yt[c] = out
                continue
            for c in range(C):
                v = yt[c]
                out = b0 * v + z0[c]
                z0[c] = b1 * v - a1 * out + z1[c]
                z1[c] = b2 * v - a2 * out
                yt[c] = out


# The modulation bank runs the same step in a 4-sample and a 1-sample path; with automatic
# FMA contraction LLVM may fuse a different product in each (operand order follows whether
# a value comes from memory or a register), so that bank is compiled without it and its
# step spells its fused multiply-adds out (:func:`rtamt.engine.intrinsics.fma`): the same
# roundings in both paths, and the two paths agree to the bit.
_JIT_EXACT = dict(_JIT, fastmath=False)
_INL_EXACT = dict(_JIT_EXACT, inline="always")


@njit(**_INL_EXACT)
def _efilt_step(pr, pi, g, ar, ai, u):
    """One sample of ``w <- p w + g u`` (complex pole ``p = pr + i pi``, real input ``u``);
    returns the new (Re w, Im w).  The only place this recursion is written.

    ``Re: fma(pr, ar, fma(-pi, ai, g u))``, ``Im: fma(pr, ai, pi ar)`` (explicit fused
    multiply-adds: 3 instead of 5 rounded operations for ``Re``), in the dtype of the
    arguments, which is the stream's: float32 streams run in float32 arithmetic (16 lanes
    per AVX-512 register instead of float64 arithmetic with conversions of every value)."""
    return fma(pr, ar, fma(-pi, ai, g * u)), fma(pr, ai, pi * ar)


@njit(**_INL_EXACT)
def _efilt_out(sc, wr, wi, magnitude):
    """Filter output: ``sc |w|`` (Hilbert envelope) or ``sc Re w``, in the arguments' dtype."""
    if magnitude:
        return sc * np.sqrt(fma(wr, wr, wi * wi))
    return sc * wr


@njit(**_INL_EXACT)
def _efilt_lanes4(pr, pi, g, sc, sr, si, u0, u1, u2, u3, y0, y1, y2, y3, magnitude):
    """Four consecutive samples of every filter (lane): the state stays in registers
    over the four samples.  All arguments are 1-D contiguous views starting at lane 0 (a
    loop that starts elsewhere keeps numba's negative-index wrap-around and does not
    vectorise); ``u*``/``y*`` are the input/output rows of the four samples."""
    for f in range(pr.shape[0]):
        p_r = pr[f]
        p_i = pi[f]
        gf = g[f]
        s = sc[f]
        ar, ai = _efilt_step(p_r, p_i, gf, sr[f], si[f], u0[f])
        y0[f] = _efilt_out(s, ar, ai, magnitude)
        ar, ai = _efilt_step(p_r, p_i, gf, ar, ai, u1[f])
        y1[f] = _efilt_out(s, ar, ai, magnitude)
        ar, ai = _efilt_step(p_r, p_i, gf, ar, ai, u2[f])
        y2[f] = _efilt_out(s, ar, ai, magnitude)
        ar, ai = _efilt_step(p_r, p_i, gf, ar, ai, u3[f])
        y3[f] = _efilt_out(s, ar, ai, magnitude)
        sr[f] = ar
        si[f] = ai


@njit(**_INL_EXACT)
def _efilt_lanes1(pr, pi, g, sc, sr, si, u0, y0, magnitude):
    """One sample of every filter (the < 4 samples left at the end of a block)."""
    for f in range(pr.shape[0]):
        ar, ai = _efilt_step(pr[f], pi[f], g[f], sr[f], si[f], u0[f])
        y0[f] = _efilt_out(sc[f], ar, ai, magnitude)
        sr[f] = ar
        si[f] = ai


@njit(**_JIT_EXACT)
def cplx_onepole_bank(runs, nreal, coef, st, x, y, yoff):
    """Bank of complex one-pole filters ('efilt': frequency-shifted 1st-order low-pass).

    ``w[n] = g x_ch[n] + p w[n-1]`` with complex pole ``p`` (Dau et al. 1997a;
    AMT 0.9.10 ``modfilterbank``); output ``scale * Re(w)`` for filters
    ``f < nreal`` and ``scale * |w|`` for the others.

    runs  : (R, 3) int  ``[first filter, first channel, length]``: filters
            ``f0 .. f0+n-1`` read channels ``c0 .. c0+n-1`` (the bank is ordered by
            modulation band, then channel, so a band is one run); rows in increasing
            ``f0``, together covering filters ``0 .. F-1``.
    nreal : int         filters 0..nreal-1 output the real part, the rest the magnitude.
    coef  : (4, F)      rows: Re p, Im p, input gain g, output scale; same dtype as st, x.
    st    : (B, 2, F)   states (real, imag), advanced in place.
    x     : (B, T, C);  y : (B, T, Ftot), filter f -> column ``yoff + f``.

    Samples are taken four at a time (each filter's state stays in registers over the
    four; the lane loop over filters vectorises), the rest one at a time with the same
    step function, so the result does not depend on where a block starts or ends.
    The inputs are gathered by 8-wide vector copies (:func:`rtamt.engine.intrinsics.copy8`)
    rather than element loops over the runs: numba cannot tell LLVM that source and
    destination do not overlap, so an element loop is copied one value at a time.
    """
    B, T, C = x.shape
    F = coef.shape[1]
    # the inputs of four samples, gathered run by run; lane f at uf[j, 8 + f] (8 lanes of
    # slack in front for the vector copies below)
    uf = np.empty((4, F + 8), x.dtype)
    xp = np.zeros(C + 16, x.dtype)  # one input row with 8 values of slack on both sides
    for b in range(B):
        efilt_rows(runs, nreal, coef, st[b], x[b], y[b], yoff, uf, xp)


@njit(**_JIT_EXACT)
def efilt_rows(runs, nreal, coef, st, x, y, yoff, uf, xp):
    """:func:`cplx_onepole_bank` for one stream: ``st`` (2, F), ``x`` (T, C), ``y``
    (T, Ftot); ``uf`` (4, F + 8) and ``xp`` (C + 16, zero) are scratch rows."""
    T, C = x.shape
    F = coef.shape[1]
    a = nreal
    R = runs.shape[0]
    # every lane view is sliced once, outside the sample loop: slices taken per step with a
    # run-time start (``pr[a:]``) left the step loops about twice as slow
    prA = coef[0, :a]
    piA = coef[1, :a]
    gA = coef[2, :a]
    scA = coef[3, :a]
    prB = coef[0, a:]
    piB = coef[1, a:]
    gB = coef[2, a:]
    scB = coef[3, a:]
    srA = st[0, :a]
    siA = st[1, :a]
    srB = st[0, a:]
    siB = st[1, a:]
    u0A = uf[0, 8:8 + a]
    u1A = uf[1, 8:8 + a]
    u2A = uf[2, 8:8 + a]
    u3A = uf[3, 8:8 + a]
    u0B = uf[0, 8 + a:8 + F]
    u1B = uf[1, 8 + a:8 + F]
    u2B = uf[2, 8 + a:8 + F]
    u3B = uf[3, 8 + a:8 + F]
    ya = yoff + a
    ye = yoff + F
    t = 0
    while t < T:
        n = min(4, T - t)
        for j in range(n):
            xt = x[t + j]
            uj = uf[j]
            if C >= 8:
                # 8-wide vector copies (`copy8`): the row into xp, then each run in
                # chunks aligned to its end, last run first, so a chunk reaching in
                # front of its run writes lanes of the run below, copied afterwards
                for c in range(0, C - 8, 8):
                    copy8(xt, c, xp, 8 + c)
                copy8(xt, C - 8, xp, C)
                for r in range(R - 1, -1, -1):
                    m = runs[r, 2]
                    es = 8 + runs[r, 1] + m
                    ed = 8 + runs[r, 0] + m
                    k = 8
                    while k < m + 8:
                        copy8(xp, es - k, uj, ed - k)
                        k += 8
            else:
                for r in range(R):
                    ud = uj[8 + runs[r, 0]:]
                    xs = xt[runs[r, 1]:]
                    for i in range(runs[r, 2]):
                        ud[i] = xs[i]
        if n == 4:
            y0 = y[t]
            y1 = y[t + 1]
            y2 = y[t + 2]
            y3 = y[t + 3]
            _efilt_lanes4(prA, piA, gA, scA, srA, siA, u0A, u1A, u2A, u3A,
                          y0[yoff:ya], y1[yoff:ya], y2[yoff:ya], y3[yoff:ya], False)
            _efilt_lanes4(prB, piB, gB, scB, srB, siB, u0B, u1B, u2B, u3B,
                          y0[ya:ye], y1[ya:ye], y2[ya:ye], y3[ya:ye], True)
        else:
            for j in range(n):
                yj = y[t + j]
                _efilt_lanes1(prA, piA, gA, scA, srA, siA, uf[j, 8:8 + a],
                              yj[yoff:ya], False)
                _efilt_lanes1(prB, piB, gB, scB, srB, siB, uf[j, 8 + a:8 + F],
                              yj[ya:ye], True)
        t += n


@njit(**_JIT)
def modfb_efilt(lp_sos, lp_zi, runs, nreal, coef, st, x, y):
    """The Dau1997-lineage modulation bank in one call, stream by stream: the low-passes
    (:func:`sos_rows`, outputs ``0 .. C-1``) then the band-pass filters
    (:func:`efilt_rows`, outputs ``C ..``) of a stream, so that its output rows
    (2.2 KB per sample for 275 filters) are completed while they are still in cache
    rather than written in two passes over the whole batch.  Same functions, same
    arithmetic as :func:`sos_shared` followed by :func:`cplx_onepole_bank`."""
    B, T, C = x.shape
    F = coef.shape[1]
    uf = np.empty((4, F + 8), x.dtype)
    xp = np.zeros(C + 16, x.dtype)
    for b in range(B):
        sos_rows(lp_sos, False, lp_zi[b], x[b], y[b], 0)
        if F:
            efilt_rows(runs, nreal, coef, st[b], x[b], y[b], C, uf, xp)


@njit(**_JIT)
def cplx_biquad_bank(ch, nreal, bcoef, acoef, scale, st, x, y, yoff):
    """Bank of complex-coefficient biquads (DF-II transposed) on real inputs.

    Used for the frequency-shifted Butterworth modulation filters: a real low-pass
    prototype ``H(z)`` moved to centre ``w0`` by ``H(z e^{-i w0})`` (frequency-shift
    theorem), so ``Re`` is a band-pass and ``|.|`` its envelope.

    ch     : (F,) int input channel per filter;  nreal as in :func:`cplx_onepole_bank`.
    bcoef  : (F, 3, 2) numerator (real, imag);  acoef : (F, 3, 2) denominator, a0 == 1.
    scale  : (F,)
    st     : (B, F, 2, 2) states [z index, real/imag], advanced in place.
    x      : (B, T, C);  y : (B, T, Ftot), filter f -> column ``yoff + f``.
    """
    B, T, C = x.shape
    F = ch.shape[0]
    for b in range(B):
        for t in range(T):
            xt = x[b, t]
            for f in range(F):
                v = xt[ch[f]]
                z = st[b, f]
                bc = bcoef[f]
                ac = acoef[f]
                o_r = bc[0, 0] * v + z[0, 0]
                o_i = bc[0, 1] * v + z[0, 1]
                z[0, 0] = bc[1, 0] * v - (ac[1, 0] * o_r - ac[1, 1] * o_i) + z[1, 0]
                z[0, 1] = bc[1, 1] * v - (ac[1, 0] * o_i + ac[1, 1] * o_r) + z[1, 1]
                z[1, 0] = bc[2, 0] * v - (ac[2, 0] * o_r - ac[2, 1] * o_i)
                z[1, 1] = bc[2, 1] * v - (ac[2, 0] * o_i + ac[2, 1] * o_r)
                if f < nreal:
                    y[b, t, yoff + f] = scale[f] * o_r
                else:
                    y[b, t, yoff + f] = scale[f] * math.sqrt(o_r * o_r + o_i * o_i)


@njit(**_JIT)
def all_within(x, limit):
    """True if every ``|element| <= limit`` (false for NaN; one vectorised pass, no
    temporary).  The physical-limit check of a model's input blocks."""
    a = x.ravel()
    ok = True
    for i in range(a.size):
        ok &= abs(a[i]) <= limit
    return ok


@njit(**_JIT)
def all_finite(x):
    """True if no element of ``x`` is NaN or +-inf (one vectorised pass, no temporary:
    ``|v| <= DBL_MAX`` is false exactly for those).  The input check of every block."""
    a = x.ravel()
    ok = True
    for i in range(a.size):
        ok &= abs(a[i]) <= 1.7976931348623157e308
    return ok
