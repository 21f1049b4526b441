"""Triton twin of the binaural-inhibition adjoint (:func:`rtamt.loudness.binaural_grad.
binaural_adjoint`; Moore et al. 2016, Trends in Hearing 20; Moore & Glasberg 2007, JASA
121, 1604-1612, eq. 1), same name and arguments, torch float64 tensors on one device; the
derivation is in :mod:`rtamt.loudness.binaural_grad`."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .binaural_triton import _pair_lanes, _sech_pow
from .frames_grad_triton import agc_step_adjoint
from .triton_common import _F64, _K10, _LN2, _agc_step, _check

__all__ = ["binaural_adjoint"]


@triton.jit
def _inhibited_sum(st_ptr, S_ptr, f, rs, ro, R, K, k, m, p):
    """``0.25 sum_k st[f, rs, k] / I_k``, ``I = 2 / (1 + sech(S_o / S_s)^p)`` (the
    forward kernel's short-term loudness of ear row ``rs`` against ``ro``)."""
    inh = 2.0 / (1.0 + _sech_pow(tl.load(S_ptr + (f * R + ro) * K + k, mask=m, other=0.0),
                                 tl.load(S_ptr + (f * R + rs) * K + k, mask=m, other=0.0), p))
    v = tl.load(st_ptr + (f * R + rs) * K + k, mask=m, other=0.0) / inh
    return tl.sum(tl.where(m, v, 0.0), axis=0) * 0.25


@triton.jit
def _ear_adjoint(st_ptr, S_ptr, E_ptr, gspec_ptr, gexc_ptr, gst_ptr, gS_ptr, gE_ptr, go,
                 f, rs, ro, R, F, K, k, m, gt, p, gp):
    """One ear's channels in frame ``f`` (row ``rs`` against ``ro``): the gradients of
    ``st``, ``S`` (through ``v = sech(S_o / S_s)^p``) and ``E`` (its dB form) added into,
    the lanes' ``p`` gradient ``gp`` returned; ``gt`` the gradient of the short-term
    loudness, ``go + f`` the offset of ``[b, e, k, f]`` in ``gspec``/``gexc``."""
    fs = (f * R + rs) * K + k
    fo = (f * R + ro) * K + k
    num = tl.load(S_ptr + fo, mask=m, other=0.0)
    den = tl.load(S_ptr + fs, mask=m, other=0.0)
    v = _sech_pow(num, den, p)
    y = tl.load(st_ptr + fs, mask=m, other=0.0)
    gv = tl.load(gspec_ptr + go + f, mask=m, other=0.0) + 0.25 * gt
    tl.store(gst_ptr + fs, tl.load(gst_ptr + fs, mask=m, other=0.0) + gv * 0.5 * (1.0 + v),
             mask=m)
    x = num / tl.where(den > 0.0, den, 1.0)
    ok = (num > 0.0) & (den > 0.0) & (x < 1e300)
    xs = tl.where(ok, x, 1.0)
    gvv = gv * 0.5 * y
    em = tl.exp(-2.0 * xs)
    lc = xs - _LN2 + tl.log(1.0 + em)
    dvdx = -p * ((1.0 - em) / (1.0 + em)) * v                    # -p tanh(x) v
    gp += tl.where(ok, gvv * (-lc * v), 0.0)
    dn = tl.where(ok, den, 1.0)                 # no 0/0 in the lanes not taken
    tl.store(gS_ptr + fo, tl.load(gS_ptr + fo, mask=m, other=0.0)
             + tl.where(ok, gvv * dvdx / dn, 0.0), mask=m)
    tl.store(gS_ptr + fs, tl.load(gS_ptr + fs, mask=m, other=0.0)
             - tl.where(ok, gvv * dvdx * xs / dn, 0.0), mask=m)
    eo = (rs * F + f) * K + k
    er = tl.load(E_ptr + eo, mask=m, other=1.0)
    ge = tl.load(gexc_ptr + go + f, mask=m, other=0.0) * _K10 / tl.maximum(er, 1e-10)
    tl.store(gE_ptr + eo, tl.load(gE_ptr + eo, mask=m, other=0.0)
             + tl.where(er > 1e-10, ge, 0.0), mask=m)
    return gp


@triton.jit
def _binaural_adjoint_kernel(st_ptr, S_ptr, E_ptr, lt_ptr, aa: tl.float64, ar: tl.float64,
                             p: tl.float64, gspec_ptr, gexc_ptr, gste_ptr, glte_ptr, mu_ptr,
                             gst_ptr, gS_ptr, gE_ptr, tot_ptr, ltp_ptr, gpar_ptr, F, R, K,
                             DIOTIC: tl.constexpr, KP: tl.constexpr):
    aa = tl.full([], aa, tl.float64)
    ar = tl.full([], ar, tl.float64)
    p = tl.full([], p, tl.float64)
    b, k, m, r0, r1 = _pair_lanes(K, DIOTIC, KP)
    so = b * 2 * F                      # tot/ltp/gste/glte [b, e, f] = so + e F + f
    lt0 = tl.load(lt_ptr + r0)
    lt1 = tl.load(lt_ptr + r1)
    for f in range(F):                  # the forward pass, as the kernel
        t0 = _inhibited_sum(st_ptr, S_ptr, f, r0, r1, R, K, k, m, p)
        t1 = _inhibited_sum(st_ptr, S_ptr, f, r1, r0, R, K, k, m, p)
        tl.store(tot_ptr + so + f, t0)
        tl.store(tot_ptr + so + F + f, t1)
        tl.store(ltp_ptr + so + f, lt0)
        tl.store(ltp_ptr + so + F + f, lt1)
        lt0 = _agc_step(t0, lt0, aa, ar)
        if not DIOTIC:
            lt1 = _agc_step(t1, lt1, aa, ar)
    lam0 = tl.load(mu_ptr + r0)
    lam1 = tl.load(mu_ptr + r1)
    ga = lam0 * 0.0
    gr = lam0 * 0.0
    gp = tl.zeros([KP], tl.float64)
    o0 = (b * 2 * K + k) * F            # gspec/gexc [b, 0, k, f] = o0 + f
    o1 = o0 + K * F
    for ff in range(F):
        f = F - 1 - ff
        gl = lam0 + tl.load(glte_ptr + so + f)
        if DIOTIC:
            gl += tl.load(glte_ptr + so + F + f)
        dx, lam0, da, dr = agc_step_adjoint(gl, tl.load(tot_ptr + so + f),
                                            tl.load(ltp_ptr + so + f), aa, ar)
        ga += da
        gr += dr
        gt = tl.load(gste_ptr + so + f) + dx
        gp = _ear_adjoint(st_ptr, S_ptr, E_ptr, gspec_ptr, gexc_ptr, gst_ptr, gS_ptr, gE_ptr,
                          o0, f, r0, r1, R, F, K, k, m, gt, p, gp)
        gt = tl.load(gste_ptr + so + F + f)
        if not DIOTIC:
            dx, lam1, da, dr = agc_step_adjoint(lam1 + tl.load(glte_ptr + so + F + f),
                                                tl.load(tot_ptr + so + F + f),
                                                tl.load(ltp_ptr + so + F + f), aa, ar)
            ga += da
            gr += dr
            gt += dx
        gp = _ear_adjoint(st_ptr, S_ptr, E_ptr, gspec_ptr, gexc_ptr, gst_ptr, gS_ptr, gE_ptr,
                          o1, f, r1, r0, R, F, K, k, m, gt, p, gp)
    tl.store(mu_ptr + r0, lam0)
    if not DIOTIC:
        tl.store(mu_ptr + r1, lam1)
    tl.store(gpar_ptr + b * 3, tl.sum(tl.where(m, gp, 0.0), axis=0))
    tl.store(gpar_ptr + b * 3 + 1, ga)
    tl.store(gpar_ptr + b * 3 + 2, gr)


def binaural_adjoint(st, S, E, lt0, aa, ar, p, gspec, gexc, gste, glte, mu, gst, gS, gE):
    """Adjoint of the binaural inhibition (Triton); mirrors
    :func:`rtamt.loudness.binaural_grad.binaural_adjoint`:

    st, S (F, R, K), E (R, F, K), lt0 (R,) as the forward kernel took them (``lt0`` the
    incoming long-term state, not written); aa, ar, p floats; gspec, gexc (B, 2, K, F)
    and gste, glte (B, 2, F) the outputs' gradients; mu (R,) the gradient of the outgoing
    long-term state, replaced by that of the incoming one; gst, gS (F, R, K) and gE
    (R, F, K) added into.  Returns the gradients of ``(p, attack, release)`` as 0-d
    float64 tensors on the device.

    One program per ear pair, one lane per channel (as the forward twin): the short-term
    loudness and the long-term trajectory are recomputed into (B, 2, F) work arrays, then
    the frames run backward with the attack/release switch held.  The channel sums are
    ``tl.sum`` (a tree; numba's are sequential): a few 1e-16 relative.
    """
    F, R, K = st.shape
    _check(_F64, st=st, S=S, E=E, lt0=lt0, gspec=gspec, gexc=gexc, gste=gste, glte=glte,
           mu=mu, gst=gst, gS=gS, gE=gE)
    diotic = R == 1
    nb = 1 if diotic else R // 2
    assert diotic or R % 2 == 0
    assert S.shape == gst.shape == gS.shape == (F, R, K)
    assert E.shape == gE.shape == (R, F, K) and lt0.shape == mu.shape == (R,)
    assert gspec.shape == gexc.shape == (nb, 2, K, F) and gste.shape == glte.shape == (nb, 2, F)
    dev = st.device
    gpar = torch.zeros((nb, 3), dtype=torch.float64, device=dev)
    if F and K:
        tot = torch.empty((nb, 2, F), dtype=torch.float64, device=dev)
        ltp = torch.empty((nb, 2, F), dtype=torch.float64, device=dev)
        _binaural_adjoint_kernel[(nb,)](st, S, E, lt0, float(aa), float(ar), float(p), gspec,
                                        gexc, gste, glte, mu, gst, gS, gE, tot, ltp, gpar,
                                        F, R, K, DIOTIC=diotic, KP=triton.next_power_of_2(K),
                                        num_warps=4, enable_fp_fusion=True)
    s = gpar.sum(dim=0)
    return s[0], s[1], s[2]
