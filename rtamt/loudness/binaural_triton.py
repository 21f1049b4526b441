"""Triton twin of the binaural-inhibition stage's kernel (:mod:`rtamt.loudness.binaural`;
Moore et al. 2016, Moore & Glasberg 2007 eq. 1)."""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_common import _F64, _K10, _LN2, _agc_step, _check


@triton.jit
def _sech_pow(num, den, p):
    """``sech(num/den)^p`` as ``exp(-p ln cosh x)``, ``ln cosh x = x - ln 2 +
    ln(1 + e^{-2x})``; 1 where ``num <= 0``, 0 where ``den <= 0`` (mirrors numba's
    ``_sech_pow``)."""
    x = tl.minimum(num / tl.maximum(den, 1e-300), 1e300)
    lc = x - _LN2 + tl.log(1.0 + tl.exp(-2.0 * x))
    v = tl.exp(-p * lc)
    v = tl.where(den > 0.0, v, 0.0)
    return tl.where(num > 0.0, v, 1.0)


@triton.jit
def _pair_lanes(K, DIOTIC: tl.constexpr, KP: tl.constexpr):
    """This program's ear pair ``b``, its channel lanes ``k`` (mask ``m``: ``k < K``) and
    its rows ``(r0, r1)``: ``(2b, 2b + 1)``, or ``(0, 0)`` for one diotic row."""
    b = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, KP)
    if DIOTIC:
        r0 = b * 0
        r1 = r0
    else:
        r0 = 2 * b
        r1 = r0 + 1
    return b, k, k < K, r0, r1


@triton.jit
def _binaural_kernel(st_ptr, S_ptr, E_ptr, lt_ptr, aa: tl.float64, ar: tl.float64,
                     p: tl.float64, spec_ptr, exc_ptr, ste_ptr, lte_ptr, F, R, K,
                     DIOTIC: tl.constexpr, KP: tl.constexpr):
    aa = tl.full([], aa, tl.float64)
    ar = tl.full([], ar, tl.float64)
    p = tl.full([], p, tl.float64)
    b, k, m, r0, r1 = _pair_lanes(K, DIOTIC, KP)
    lt0 = tl.load(lt_ptr + r0)
    lt1 = tl.load(lt_ptr + r1)
    o0 = (b * 2 * K + k) * F            # spec/exc [b, 0, k, f] = o0 + f
    o1 = o0 + K * F                     # [b, 1, k, f]
    for f in range(F):
        fr0 = (f * R + r0) * K + k
        fr1 = (f * R + r1) * K + k
        sl = tl.load(S_ptr + fr0, mask=m, other=0.0)
        sr = tl.load(S_ptr + fr1, mask=m, other=0.0)
        # inhibition factors I = 2 / (1 + sech(other/own)^p) (Moore & Glasberg 2007 eq. 1)
        il = 2.0 / (1.0 + _sech_pow(sr, sl, p))
        ir = 2.0 / (1.0 + _sech_pow(sl, sr, p))
        v0 = tl.load(st_ptr + fr0, mask=m, other=0.0) / il
        v1 = tl.load(st_ptr + fr1, mask=m, other=0.0) / ir
        tl.store(spec_ptr + o0 + f, v0, mask=m)
        tl.store(spec_ptr + o1 + f, v1, mask=m)
        tot0 = tl.sum(tl.where(m, v0, 0.0), axis=0) * 0.25
        tot1 = tl.sum(tl.where(m, v1, 0.0), axis=0) * 0.25
        lt0 = _agc_step(tot0, lt0, aa, ar)
        if DIOTIC:
            lt1 = lt0
        else:
            lt1 = _agc_step(tot1, lt1, aa, ar)
        so = (b * 2) * F + f
        tl.store(ste_ptr + so, tot0)
        tl.store(ste_ptr + so + F, tot1)
        tl.store(lte_ptr + so, lt0)
        tl.store(lte_ptr + so + F, lt1)
        e0 = tl.load(E_ptr + (r0 * F + f) * K + k, mask=m, other=1.0)
        e1 = tl.load(E_ptr + (r1 * F + f) * K + k, mask=m, other=1.0)
        tl.store(exc_ptr + o0 + f, tl.log(tl.maximum(e0, 1e-10)) * _K10, mask=m)
        tl.store(exc_ptr + o1 + f, tl.log(tl.maximum(e1, 1e-10)) * _K10, mask=m)
    tl.store(lt_ptr + r0, lt0)
    if not DIOTIC:
        tl.store(lt_ptr + r1, lt1)


def binaural_frames(st, S, E, lt, aa_lt, ar_lt, p, spec, exc, ste, lte):
    """Binaural inhibition and loudness of Moore et al. (2016), frame by frame (Triton).

    Mirrors :func:`rtamt.loudness.binaural.binaural_frames`: per ear pair and frame the
    inhibition factors ``I_L = 2 / (1 + sech(S_R/S_L)^p)`` and mirror (Moore & Glasberg
    2007, eq. 1), the inhibited patterns ``st / I``, short-term loudness
    ``0.25 sum_k st/I`` and long-term loudness by the asymmetric one-pole AGC.

    st, S : (F, R, K) float64  short-term specific loudness and its spatially smoothed
                               version (sone/Cam); rows are ear pairs (2b, 2b + 1), or
                               one row (diotic: both ears get it).
    E     : (R, F, K) float64  excitation (linear).
    lt    : (R,) float64       long-term AGC state, advanced in place.
    aa_lt, ar_lt, p : float    long-term AGC coefficients, inhibition exponent.
    spec, exc : (B, 2, K, F) float64  inhibited pattern (sone/Cam) and excitation
                               (dB, ``10 log10 max(E, 1e-10)``), written.
    ste, lte : (B, 2, F) float64  per-ear short- and long-term loudness (sone), written.
    B = R // 2, or 1 when R == 1.

    One program per ear pair, one lane per channel (K rounded up to a power of two);
    the pair's two long-term states are scalars carried over the frames.  The channel
    sum is ``tl.sum`` (a tree), numba's is sequential: relative differences ~1e-16 per
    frame, which the long-term AGC carries on (still far below 1e-12).
    """
    F, R, K = st.shape
    _check(_F64, st=st, S=S, E=E, lt=lt, spec=spec, exc=exc, ste=ste, lte=lte)
    diotic = R == 1
    nb = 1 if diotic else R // 2
    assert diotic or R % 2 == 0
    assert S.shape == (F, R, K) and E.shape == (R, F, K) and lt.shape == (R,)
    assert spec.shape == exc.shape == (nb, 2, K, F) and ste.shape == lte.shape == (nb, 2, F)
    if F == 0 or K == 0:
        return
    _binaural_kernel[(nb,)](st, S, E, lt, float(aa_lt), float(ar_lt), float(p), spec, exc,
                            ste, lte, F, R, K, DIOTIC=diotic,
                            KP=triton.next_power_of_2(K), num_warps=4,
                            enable_fp_fusion=True)
