"""Compiled per-frame kernels of the loudness models (numba, one source each).

All kernels work on frame-major arrays ``(N, C)`` (N frames or frame x row items,
C channels) and are deterministic per element: a frame's result depends only on
its own inputs and on the carried state, never on how frames were grouped into
blocks.  Same compiler flags as :mod:`rtamt.engine.kernels`.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from ..engine.fastexp import exp2_neg_f32, exp_f64, log_f64
from ..engine.jit import INLINE as _INL
from ..engine.jit import JIT as _JIT

_LN2 = math.log(2.0)


SKIRT_PAD = 16      # pair segments are padded to a multiple of this (one AVX-512 vector)
SKIRT_FLUSH = 32    # components summed in float32 before each float64 flush
_LN2_32 = types.float32(math.log(2.0))


@njit(**_JIT)
def lower_skirt(P, lvl, c_slope, a, b, i0, seg, cnt, E):
    """Add the level-dependent lower skirts of the roex filters to ``E``.

    ANSI S3.4-2007 §3.5: for a component j below the centre of filter i
    (``g = (f_j - fc_i)/fc_i < 0``) the filter's lower slope is
    ``p_l = max(0.1, pu_i (1 - 0.35 (X_j - 51)/p51_1k))``, X_j (dB) the component's level
    per ERB, and the weight is the roex ``W = (1 + p_l|g|) e^{-p_l|g|}`` (Patterson et
    al. 1982; ANSI S3.4-2007 eq. 5).  With ``s_j = 1 - c_slope (X_j - 51)``
    (``c_slope = 0.35/p51_1k``) and the tables ``a_ij = pu_i |g_ij| log2(e)``,
    ``b_ij = 0.1 |g_ij| log2(e)``: ``t = max(b_ij, a_ij s_j)`` and
    ``W = (1 + t ln 2) 2^{-t}``.

    Precision: weights and products are float32 (16 per AVX-512 instruction, twice the
    float64 lanes), summed in float32 over at most ``SKIRT_FLUSH`` components and
    then added to the float64 ``E``: the relative error of this term is below
    ``(SKIRT_FLUSH + 3) * 2^-24 = 2e-6`` (all terms are positive), far below the model's
    own accuracy; the result is still a fixed function of the frame (block invariant).

    P   : (N, J) float64 component powers (linear).
    lvl : (N, J) float64 level per ERB at each component (linear; floored at 1e-10).
    a, b : float32 flat pair tables; component j owns filters ``i0[j] ..`` at
           ``seg[j] .. seg[j] + cnt[j]`` (components sorted by frequency), padded with
           ``a = b = 1e3`` (weight 0) to a multiple of ``SKIRT_PAD``.
    E    : (N, nf) float64 excitation, accumulated in place.
    """
    N, J = P.shape
    nf = E.shape[1]
    acc = np.zeros(nf + SKIRT_PAD, np.float32)
    s = np.empty(J, np.float32)
    k10 = 10.0 / math.log(10.0)
    for n in range(N):
        lv = lvl[n]
        for j in range(J):
            s[j] = types.float32(1.0 - c_slope * (k10 * log_f64(max(lv[j], 1e-10)) - 51.0))
        for j0 in range(0, J, SKIRT_FLUSH):
            j1 = min(j0 + SKIRT_FLUSH, J)
            for j in range(j0, j1):
                pj = P[n, j]
                if pj == 0.0:
                    continue
                sj = s[j]
                k0 = i0[j]
                c = cnt[j]
                # slices: non-negative loop indices let the compiler vectorise
                aa = a[seg[j]:seg[j] + c]
                bb = b[seg[j]:seg[j] + c]
                er = acc[k0:k0 + c]
                p32 = types.float32(pj)
                for q in range(c):
                    t = max(bb[q], aa[q] * sj)
                    er[q] += ((types.float32(1.0) + t * _LN2_32) * exp2_neg_f32(t)) * p32
            lo = i0[j0]             # components are sorted: i0 is non-decreasing
            en = E[n]
            for q in range(lo, nf):
                en[q] += acc[q]
            acc[lo:] = 0.0


@njit(**_JIT)
def specific_loudness(E, G, A, alpha, A_alpha, ethrq, C, out):
    """Specific loudness N' (sone/Cam) from linear excitation (ANSI S3.4-2007 eqs. 17-19).

    E (N, K) linear excitation (1.0 = 0 dB); G, A, alpha, A_alpha, ethrq (K,) per channel;
    C scalar; out (N, K).  See :func:`rtamt.loudness.ansi.specific_loudness_ref`.
    """
    N, K = E.shape
    for n in range(N):
        for k in range(K):
            e = E[n, k]
            # branch-free so that the loop vectorises (exp/log from engine.fastexp)
            hi = e > 1e10
            ep = max(e, 1e-300)
            u = ep * (1.0 / 1.0707) if hi else G[k] * ep + A[k]
            v = exp_f64((0.2 if hi else alpha[k]) * log_f64(u)) - (0.0 if hi else A_alpha[k])
            r = 2.0 * e / (e + ethrq[k])
            v = v * (r * math.sqrt(r)) if e < ethrq[k] else v
            out[n, k] = C * v if e > 0.0 else 0.0


@njit(**_INL)
def _agc_step(x, y, aa, ar):
    """One step of the asymmetric one-pole smoother (the "automatic gain control" of
    Glasberg & Moore 2002, eqs. 5-6, and Moore et al. 2016): ``y + a (x - y)`` with
    ``a = aa`` (attack) if ``x > y`` else ``ar`` (release)."""
    return y + (aa if x > y else ar) * (x - y)


@njit(**_JIT)
def agc(x, y, aa, ar, out):
    """:func:`_agc_step` per channel, frame by frame: x (N, K) input frames; y (K,) state
    (the last output), advanced in place; out (N, K)."""
    N, K = x.shape
    for n in range(N):
        for k in range(K):
            y[k] = _agc_step(x[n, k], y[k], aa, ar)
            out[n, k] = y[k]


@njit(**_JIT)
def agc_rows(x, y, aa, ar, out):
    """:func:`agc` for row-major input: x (R, F, K) frames of R rows, y (R, K) state,
    out (F, R, K) (frame-major, ready for the spatial-smoothing product)."""
    R, F, K = x.shape
    for r in range(R):
        yr = y[r]
        for f in range(F):
            xr = x[r, f]
            o = out[f, r]
            for k in range(K):
                yr[k] = _agc_step(xr[k], yr[k], aa, ar)
                o[k] = yr[k]


@njit(**_JIT)
def binaural_frames(st, S, E, lt, aa_lt, ar_lt, p, spec, exc, ste, lte):
    """Binaural inhibition and loudness of Moore et al. (2016), frame by frame.

    Per ear pair: inhibition factors of Moore & Glasberg (2007, eq. 1)
    ``I_L = 2 / (1 + sech(S_R / S_L)^p)`` (and mirror; ``sech(1)^p`` for equal patterns,
    1 when the other ear is silent) from the spatially smoothed short-term patterns S
    -> inhibited pattern ``st / I`` -> short-term loudness ``0.25 sum_k st/I`` ->
    long-term loudness by the asymmetric one-pole AGC (:func:`agc`).

    st, S : (F, R, K) short-term specific loudness and its smoothed version; rows are
            ear pairs (2b, 2b + 1), or one row (diotic: both ears get it).
    E  : (R, F, K) excitation (linear).  lt (R,): long-term AGC state, advanced in place.
    Outputs: spec, exc (B, 2, K, F): inhibited pattern (sone/Cam) and excitation (dB,
    ``10 log10(max(E, 1e-10))``); ste, lte (B, 2, F) per-ear short- and long-term
    loudness (sone).  B = R // 2, or 1 for a single (diotic) row.
    """
    F, R, K = st.shape
    diotic = R == 1
    nb = 1 if diotic else R // 2
    il = np.empty(K)
    ir = np.empty(K)
    x = np.empty(K)
    k10 = 10.0 / math.log(10.0)
    for b in range(nb):
        r0 = 0 if diotic else 2 * b
        r1 = r0 if diotic else r0 + 1
        for f in range(F):
            sl = S[f, r0]
            sr = S[f, r1]
            for k in range(K):
                il[k] = 2.0 / (1.0 + _sech_pow(sr[k], sl[k], p))
                ir[k] = 2.0 / (1.0 + _sech_pow(sl[k], sr[k], p))
            for e in range(2):
                re = r0 if e == 0 else r1
                y = st[f, re]
                inh = il if e == 0 else ir
                tot = 0.0
                for k in range(K):
                    v = y[k] / inh[k]
                    spec[b, e, k, f] = v
                    tot += v
                tot *= 0.25
                ste[b, e, f] = tot
                if e == 0 or not diotic:
                    lt[re] = _agc_step(tot, lt[re], aa_lt, ar_lt)
                    er = E[re, f]
                    for k in range(K):
                        x[k] = k10 * log_f64(max(er[k], 1e-10))
                lte[b, e, f] = lt[re]
                for k in range(K):
                    exc[b, e, k, f] = x[k]


@njit(**_INL)
def _sech_pow(num, den, p):
    # sech(num/den)^p = exp(-p ln cosh x), ln cosh x = x - ln 2 + ln(1 + e^{-2x}) (x >= 0);
    # 1 where num <= 0 (this ear's pattern dominates), 0 where den <= 0 (the other ear
    # is silent) or x is huge; branch-free so that the loop vectorises
    x = min(num / max(den, 1e-300), 1e300)
    lc = x - _LN2 + log_f64(1.0 + exp_f64(-2.0 * x))
    v = exp_f64(-p * lc)
    v = v if den > 0.0 else 0.0
    return v if num > 0.0 else 1.0


@njit(**_JIT)
def spectrum_chunks(D, k0, lag, F, n_prime, rc, rs, wn, ring, offs, cm, cp, gain, grp, P):
    """Hann-windowed DFT powers of one analysis window from hop-long chunk DFTs
    (hopping DFT; see :mod:`rtamt.loudness.spectrum`, method ``chunk``).

    Chunk c (samples ``cH .. cH + H - 1``) has residue ``rho = c mod C`` in its "epoch"
    ``c div C`` (C = chunks per window); its DFT is stored rotated to its epoch
    position, ``Dh_c = D_c e^{-j 2 pi phi rho H}``.  The window of the frame whose
    newest chunk is c covers chunks ``c - C + 1 .. c``: those of the previous epoch
    (sum ``S_A``) and those of the current one (sum ``S_B``).  Relative to the window's
    start (up to one phase common to each bin's three frequencies, which cancels in
    the power) its rectangular-window DFT is ``T = S_A + e^{-j 2 pi phi n} S_B``, or
    ``S_B`` when the window is one whole epoch.  The sums are updated per chunk
    (``S_A -= Dh_leaving``, ``S_B += Dh_new``; at an epoch start ``S_A = S_B - Dh_leaving``,
    ``S_B = Dh_new``), so rounding never accumulates beyond one epoch.

    D (R, n_prime + F, 2 nF): DFTs (re | im, chunk-local phase) of the chunks entering
    in this block, oldest first; the first ``n_prime`` only update the state (stateless
    use), then frame f (absolute index k0 + f) adds chunk ``k0 + f - lag``.
    ring (R, C + 2, 2 nF): ``Dh`` of the last C chunks (slot rho), then S_A, S_B; state,
    advanced in place.  rc, rs (C, nF): ``cos``, ``-sin`` of ``2 pi phi rho H``;
    wn (2, nF): ``e^{-j 2 pi phi n}``.  offs (3,): bin b's frequencies f, f - 1/n,
    f + 1/n are ``phi[offs[0..2] + b]``; cm, cp (2,): Hann coefficients (re, im) of the
    shifted terms for a window starting at an epoch start (the centre one is 1/2);
    otherwise they turn by ``e^{-+j 2 pi rho0 / C}``, ``rho0`` the residue of the
    window's first chunk.  ``P[r F + f, grp[b]] += gain[b] |X_b|^2``.
    """
    R = D.shape[0]
    C, nF = rc.shape
    B = gain.size
    Tr = np.empty(nF)
    Ti = np.empty(nF)
    pw = np.empty(B)
    ar, ai = Tr[offs[0]:offs[0] + B], Ti[offs[0]:offs[0] + B]
    mr, mi = Tr[offs[1]:offs[1] + B], Ti[offs[1]:offs[1] + B]
    pr, pi = Tr[offs[2]:offs[2] + B], Ti[offs[2]:offs[2] + B]
    wr = wn[0]
    wi = wn[1]
    for r in range(R):
        rg = ring[r]
        sa = rg[C]
        sb = rg[C + 1]
        for j in range(n_prime + F):
            rho = (k0 - lag - n_prime + j) % C
            d = D[r, j]
            old = rg[rho]
            cr = rc[rho]
            ci = rs[rho]
            if rho == 0:
                for q in range(nF):
                    hr = cr[q] * d[q] - ci[q] * d[nF + q]
                    hi = cr[q] * d[nF + q] + ci[q] * d[q]
                    sa[q] = sb[q] - old[q]
                    sa[nF + q] = sb[nF + q] - old[nF + q]
                    sb[q] = hr
                    sb[nF + q] = hi
                    old[q] = hr
                    old[nF + q] = hi
            else:
                for q in range(nF):
                    hr = cr[q] * d[q] - ci[q] * d[nF + q]
                    hi = cr[q] * d[nF + q] + ci[q] * d[q]
                    sa[q] -= old[q]
                    sa[nF + q] -= old[nF + q]
                    sb[q] += hr
                    sb[nF + q] += hi
                    old[q] = hr
                    old[nF + q] = hi
            if j < n_prime:
                continue
            if rho == C - 1:
                for q in range(nF):
                    Tr[q] = sb[q]
                    Ti[q] = sb[nF + q]
            else:
                for q in range(nF):
                    Tr[q] = sa[q] + wr[q] * sb[q] - wi[q] * sb[nF + q]
                    Ti[q] = sa[nF + q] + wr[q] * sb[nF + q] + wi[q] * sb[q]
            rho0 = rho + 1 if rho + 1 < C else 0
            # phase of the f -+ 1/n terms relative to f: e^{-+j 2 pi rho0 / C}
            c0 = rc[rho0, offs[0]] * rc[rho0, offs[1]] + rs[rho0, offs[0]] * rs[rho0, offs[1]]
            s0 = rs[rho0, offs[0]] * rc[rho0, offs[1]] - rc[rho0, offs[0]] * rs[rho0, offs[1]]
            cm0 = cm[0] * c0 - cm[1] * s0
            cm1 = cm[0] * s0 + cm[1] * c0
            cp0 = cp[0] * c0 + cp[1] * s0
            cp1 = cp[1] * c0 - cp[0] * s0
            for b in range(B):
                xr = 0.5 * ar[b] + cm0 * mr[b] - cm1 * mi[b] + cp0 * pr[b] - cp1 * pi[b]
                xi = 0.5 * ai[b] + cm0 * mi[b] + cm1 * mr[b] + cp0 * pi[b] + cp1 * pr[b]
                pw[b] = gain[b] * (xr * xr + xi * xi)
            row = P[r * F + j - n_prime]
            for b in range(B):
                row[grp[b]] += pw[b]


@njit(**_JIT)
def autocorr_frames(z, e0, F, H, start, win, out):
    """Autocorrelations of Hann-windowed short segments (Wiener-Khinchin; see
    :mod:`rtamt.loudness.spectrum`, method ``autocorr``).

    Frame f's segment is ``z[r, e0 + f H + start :][:n]``; with ``y = win * segment``,
    ``out[r F + f, d] = r_d = sum_m y_m y_{m+d}`` for ``d = 0 .. n-1``.
    """
    R = z.shape[0]
    n = win.size
    y = np.empty(n)
    for r in range(R):
        x = z[r]
        for f in range(F):
            s = e0 + f * H + start
            for m in range(n):
                y[m] = win[m] * x[s + m]
            ac = out[r * F + f]
            ac[:] = 0.0
            for m in range(n):
                ym = y[m]
                yt = y[m:]
                for d in range(n - m):
                    ac[d] += ym * yt[d]


@njit(**_JIT)
def group_add(pb, gain, grp, P):
    """``P[i, grp[b]] += gain[b] pb[i, b]`` (bin powers into compression groups)."""
    N, B = pb.shape
    for i in range(N):
        row = P[i]
        for b in range(B):
            row[grp[b]] += gain[b] * pb[i, b]


# --- matrix products whose rows do not depend on each other --------------------------------
#
# numpy's ``A @ B`` (BLAS dgemv / dgemm) picks its blocking and summation order from the
# number of rows M, so one row's result can differ in the last bits between M = 1, a few
# rows and M >= 16: a stream's output would depend on the block size and on the batch it
# runs in.  These kernels compute every row with one fixed sequence of operations.

@njit(**_JIT)
def band_ranges(B):
    """``rng (K, 2)``: the columns ``[rng[k, 0], rng[k, 1])`` between the first and the
    last nonzero of each row k of ``B`` (``[0, 0)`` for an all-zero row).  Design-time
    input of :func:`rowwise_matmul`."""
    K, J = B.shape
    rng = np.zeros((K, 2), np.int64)
    for k in range(K):
        j0 = 0
        while j0 < J and B[k, j0] == 0.0:
            j0 += 1
        j1 = J
        while j1 > j0 and B[k, j1 - 1] == 0.0:
            j1 -= 1
        rng[k, 0] = j0
        rng[k, 1] = j1 if j1 > j0 else j0
    return rng


@njit(**_JIT)
def rowwise_matmul(A, B, rng, out):
    """``out[i] = A[i] @ B`` (float64), each row by the same sequence of operations
    whatever the number of rows: ``out[i] = 0``, then for k = 0, 1, ...:
    ``out[i, j] += A[i, k] B[k, j]`` for j in ``rng[k]`` (:func:`band_ranges`; the
    columns outside it add exact zeros).  A row's bits therefore depend only on that row
    of ``A`` (and on ``B``), never on the other rows, so neither the block size nor the
    batch changes them.  Terms with ``A[i, k] == 0`` are skipped (they add +-0 to sums
    that are never -0: same bits).

    A (M, K), B (K, J) C-contiguous; rng (K, 2) int64; out (M, J), overwritten.
    Rows are taken four at a time (each B row is loaded once per four rows); the
    arithmetic of each row is the same as one at a time.
    """
    M, K = A.shape
    i = 0
    while i + 4 <= M:
        o0, o1, o2, o3 = out[i], out[i + 1], out[i + 2], out[i + 3]
        o0[:] = 0.0
        o1[:] = 0.0
        o2[:] = 0.0
        o3[:] = 0.0
        for k in range(K):
            j0 = rng[k, 0]
            n = rng[k, 1] - j0
            b = B[k, j0:j0 + n]
            a0, a1, a2, a3 = A[i, k], A[i + 1, k], A[i + 2, k], A[i + 3, k]
            p0, p1, p2, p3 = o0[j0:j0 + n], o1[j0:j0 + n], o2[j0:j0 + n], o3[j0:j0 + n]
            if a0 != 0.0 and a1 != 0.0 and a2 != 0.0 and a3 != 0.0:
                for j in range(n):
                    bj = b[j]
                    p0[j] += a0 * bj
                    p1[j] += a1 * bj
                    p2[j] += a2 * bj
                    p3[j] += a3 * bj
            else:
                _axpy(a0, b, p0, n)
                _axpy(a1, b, p1, n)
                _axpy(a2, b, p2, n)
                _axpy(a3, b, p3, n)
        i += 4
    while i < M:
        o = out[i]
        o[:] = 0.0
        for k in range(K):
            j0 = rng[k, 0]
            n = rng[k, 1] - j0
            _axpy(A[i, k], B[k, j0:j0 + n], o[j0:j0 + n], n)
        i += 1
    return out


@njit(**_INL)
def _axpy(a, b, p, n):
    # p += a b (skipped for a == 0, see rowwise_matmul)
    if a != 0.0:
        for j in range(n):
            p[j] += a * b[j]


def matmul_rows(A, B, rng=None):
    """``A @ B`` by :func:`rowwise_matmul` (float64; ``rng`` from :func:`band_ranges`,
    computed here if not given)."""
    A = np.ascontiguousarray(A, dtype=np.float64)
    B = np.ascontiguousarray(B, dtype=np.float64)
    if rng is None:
        rng = band_ranges(B)
    out = np.empty((A.shape[0], B.shape[1]))
    return rowwise_matmul(A, B, rng, out)
