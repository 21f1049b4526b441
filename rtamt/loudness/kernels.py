"""Compiled per-frame kernels of the loudness models (numba, one source each).

All kernels work on frame-major arrays ``(N, C)`` (N frames or frame x row items,
C channels) and are deterministic per element: a frame's result depends only on
its own inputs and on the carried state, never on how frames were grouped into
blocks.  Same compiler flags as :mod:`rtamt.engine.kernels`.
"""
from __future__ import annotations

import math

from numba import njit

from ..engine.kernels import _JIT

_INL = dict(_JIT, inline="always")


@njit(**_INL)
def roex_w(x):
    """Rounded-exponential weight ``W = (1 + x) exp(-x)`` for ``x >= 0``
    (Patterson et al. 1982; ANSI S3.4-2007 eq. 5, ``x = p|g|``).

    ``exp(-x)`` is evaluated as ``(e^{-x/128})^128``: a degree-13 Taylor polynomial on
    ``[0, 0.79]`` followed by seven squarings (relative error < 1e-10 for x <= 100),
    pure arithmetic so that the compiler vectorises it.  ``x`` is clamped at 100,
    where ``W < 4e-42``.
    """
    x = min(x, 100.0)
    y = x * (1.0 / 128.0)
    p = 1.0 - y * (1.0 - y * (1.0 / 2 - y * (1.0 / 6 - y * (1.0 / 24 - y * (
        1.0 / 120 - y * (1.0 / 720 - y * (1.0 / 5040 - y * (1.0 / 40320 - y * (
            1.0 / 362880 - y * (1.0 / 3628800 - y * (1.0 / 39916800 - y * (
                1.0 / 479001600 - y * (1.0 / 6227020800)))))))))))))
    p = p * p
    p = p * p
    p = p * p
    p = p * p
    p = p * p
    p = p * p
    p = p * p
    return (1.0 + x) * p


@njit(**_JIT)
def lower_skirt(P, s, a, b, i0, seg, E):
    """Add the level-dependent lower skirts of the roex filters to ``E``.

    ANSI S3.4-2007 §3.5: for a component j below the centre of filter i
    (``g = (f_j - fc_i)/fc_i < 0``) the filter's lower slope is
    ``p_l = max(0.1, pu_i (1 - 0.35 (X_j - 51)/p51_1k))``, X_j the component's level
    per ERB.  With ``a_ij = pu_i |g_ij|``, ``b_ij = 0.1 |g_ij|`` and
    ``s_j = 1 - 0.35 (X_j - 51)/p51_1k`` the weight is ``W(max(b_ij, a_ij s_j))``.

    P, s : (N, J) component powers (linear) and slope factors.
    a, b : flat pair tables; component j owns filters ``i0[j] .. nf-1`` at
           ``seg[j] .. seg[j] + nf - i0[j]``.
    E    : (N, nf) excitation, accumulated in place.
    """
    N, J = P.shape
    nf = E.shape[1]
    for n in range(N):
        for j in range(J):
            pj = P[n, j]
            if pj == 0.0:
                continue
            sj = s[n, j]
            k0 = i0[j]
            cnt = nf - k0
            # slices: non-negative loop indices let the compiler vectorise (no wraparound)
            aa = a[seg[j]:seg[j] + cnt]
            bb = b[seg[j]:seg[j] + cnt]
            er = E[n, k0:]
            for q in range(cnt):
                er[q] += roex_w(max(bb[q], aa[q] * sj)) * pj


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
            if e > 1e10:
                v = math.exp(0.2 * math.log(e / 1.0707))
            elif e <= 0.0:
                v = 0.0
            else:
                v = math.exp(alpha[k] * math.log(G[k] * e + A[k])) - A_alpha[k]
                if e < ethrq[k]:
                    r = 2.0 * e / (e + ethrq[k])
                    v *= r * math.sqrt(r)
            out[n, k] = C * v


@njit(**_JIT)
def agc(x, y, aa, ar, out):
    """Asymmetric one-pole smoother per channel, frame by frame (the "automatic gain
    control" of Glasberg & Moore 2002, eqs. 5-6, and Moore et al. 2016):

    ``y[n] = y[n-1] + a (x[n] - y[n-1])`` with ``a = aa`` if ``x[n] > y[n-1]`` (attack)
    else ``ar`` (release).

    x (N, K) input frames; y (K,) state (the last output), advanced in place;
    out (N, K).
    """
    N, K = x.shape
    for n in range(N):
        for k in range(K):
            xv = x[n, k]
            yv = y[k]
            a = aa if xv > yv else ar
            yv = yv + a * (xv - yv)
            y[k] = yv
            out[n, k] = yv


@njit(**_JIT)
def inhibition(sl, sr, p, il, ir):
    """Binaural inhibition factors of Moore & Glasberg (2007, eq. 1):

    ``I_L = 2 / (1 + sech(S_R / S_L)^p)``, ``I_R = 2 / (1 + sech(S_L / S_R)^p)`` with
    ``sech(x) = 2 / (e^x + e^-x)`` and S the spatially smoothed short-term specific
    loudness of each ear.  ``I = 1`` when the other ear is silent, ``I = 1.3333`` for
    equal patterns (p = 1.5978).

    sl, sr (N, K) smoothed patterns; il, ir (N, K) factors out.
    """
    N, K = sl.shape
    for n in range(N):
        for k in range(K):
            l = sl[n, k]
            r = sr[n, k]
            il[n, k] = 2.0 / (1.0 + _sech_pow(r, l, p))
            ir[n, k] = 2.0 / (1.0 + _sech_pow(l, r, p))


@njit(**_INL)
def _sech_pow(num, den, p):
    # sech(num/den)^p, 0 where num/den is huge or den is 0 (the other ear silent -> 1)
    if num <= 0.0:
        return 1.0
    if den <= 0.0:
        return 0.0
    x = num / den
    if x > 700.0:
        return 0.0
    e = math.exp(x)
    return math.exp(p * math.log(2.0 / (e + 1.0 / e)))
