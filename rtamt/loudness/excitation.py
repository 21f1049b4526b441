"""Excitation pattern from spectral components, ANSI S3.4-2007 §3.5 (Moore, Glasberg &
Baer 1997; Glasberg & Moore 2002 §2.3).

Filters: rounded-exponential (roex) auditory filters centred at 1.75 ... 39 Cam in
0.25-Cam steps (150 filters, ~50 Hz - 15 kHz).  For a component at ``f_j`` and a
filter at ``fc``, ``g = (f_j - fc)/fc`` and the weight is ``W = (1 + p|g|) e^{-p|g|}``.

* Upper side (``g >= 0``, up to ``g = 2``): ``p = pu = 4 fc / ERB(fc)``, level independent.
* Lower side (``g < 0``): ``p = max(0.1, pu - pl (X_j - 51))``, ``pl = 0.35 pu / p51_1k``,
  ``p51_1k = 4000/ERB(1000)``, where ``X_j`` (dB) is the level per ERB at the
  component: the components' powers weighted by a symmetric roex with
  ``p = 4 f_j/ERB(f_j)`` centred on the component (ANSI S3.4-2007 eq. 4).

``E_i = sum_j W_ij P_j`` (linear, 1.0 = 0 dB).  The level-independent parts are banded
matrix products (:func:`rtamt.loudness.kernels.rowwise_matmul`, frame by frame); the
level-dependent lower skirts run in :func:`rtamt.loudness.kernels.lower_skirt`.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..engine import backend as _B
from .ansi import cam_to_hz, erb_hz
from .kernels import SKIRT_PAD, band_ranges, lower_skirt, matmul_rows

CAM_LO, CAM_HI, CAM_STEP = 1.75, 39.0, 0.25
LOG2E = 1.4426950408889634


@dataclasses.dataclass
class ExcitationCoeffs:
    fc: np.ndarray        # (nf,) filter centres, Hz
    cam: np.ndarray       # (nf,)
    sym_t: np.ndarray     # (J, J) level-per-ERB weights, transposed for P @ sym_t
    up_t: np.ndarray      # (J, nf) upper-side weights, transposed
    a: np.ndarray         # flat lower-skirt tables x log2(e) (float32, see kernels.lower_skirt)
    b: np.ndarray
    i0: np.ndarray        # (J,) first filter above component j
    seg: np.ndarray       # (J,) offset of component j's pairs
    cnt: np.ndarray       # (J,) padded pair count of component j
    c_slope: float        # 0.35 / p51_1k
    sym_rng: np.ndarray   # (J, 2) nonzero column range of each row of sym_t (band_ranges)
    up_rng: np.ndarray    # (J, 2) the same for up_t


def _roex(pg):
    return (1.0 + pg) * np.exp(-pg)


def design_excitation(comp_hz: np.ndarray) -> ExcitationCoeffs:
    fj = np.asarray(comp_hz, dtype=np.float64)
    n = int(round((CAM_HI - CAM_LO) / CAM_STEP)) + 1
    cam = CAM_LO + CAM_STEP * np.arange(n)
    fc = cam_to_hz(cam)
    pu = 4.0 * fc / erb_hz(fc)
    p51_1k = 4000.0 / erb_hz(1000.0)
    # level per ERB at each component (symmetric roex around the component, g <= 2)
    pc = 4.0 * fj / erb_hz(fj)
    g = (fj[None, :] - fj[:, None]) / fj[:, None]  # [j, k]
    sym = np.where(g <= 2.0, _roex(pc[:, None] * np.abs(g)), 0.0)
    # upper side of each filter: components at or above fc, g <= 2
    gi = (fj[None, :] - fc[:, None]) / fc[:, None]  # [i, j]
    up = np.where((gi >= 0) & (gi <= 2.0), _roex(pu[:, None] * np.abs(gi)), 0.0)
    # lower side pairs, grouped by component
    i0 = np.searchsorted(fc, fj, side="right")  # first filter with fc > f_j
    segs, cnts, a_l, b_l, off = [], [], [], [], 0
    for j in range(fj.size):
        ii = np.arange(i0[j], n)
        gg = (fc[ii] - fj[j]) / fc[ii]
        c = -(-ii.size // SKIRT_PAD) * SKIRT_PAD
        a_l.append(np.concatenate([pu[ii] * gg * LOG2E, np.full(c - ii.size, 1e3)]))
        b_l.append(np.concatenate([0.1 * gg * LOG2E, np.full(c - ii.size, 1e3)]))
        segs.append(off)
        cnts.append(c)
        off += c
    sym_t, up_t = np.ascontiguousarray(sym.T), np.ascontiguousarray(up.T)
    return ExcitationCoeffs(
        fc=fc, cam=cam, sym_t=sym_t, up_t=up_t,
        a=np.concatenate(a_l).astype(np.float32), b=np.concatenate(b_l).astype(np.float32),
        i0=i0.astype(np.int64),
        seg=np.asarray(segs, dtype=np.int64), cnt=np.asarray(cnts, dtype=np.int64),
        c_slope=0.35 / p51_1k, sym_rng=band_ranges(sym_t), up_rng=band_ranges(up_t))


def excitation(c: ExcitationCoeffs, P: np.ndarray) -> np.ndarray:
    """Excitation (N, nf), linear, from component powers ``P`` (N, J), linear.  ``P`` a
    torch tensor (float64): the Triton kernels, the result a tensor on its device."""
    if type(P) is not np.ndarray:
        return _excitation_device(c, P)
    # row-wise products (kernels.rowwise_matmul): a frame's bits do not depend on how
    # many frames and streams are computed together
    lvl = matmul_rows(P, c.sym_t, c.sym_rng)
    E = matmul_rows(P, c.up_t, c.up_rng)
    lower_skirt(P, lvl, c.c_slope, c.a, c.b, c.i0, c.seg, c.cnt, E)
    return E


def _excitation_device(c: ExcitationCoeffs, P):
    """:func:`excitation` on the Triton backend: P (N, J) float64 tensor -> (N, nf)."""
    kt = _B.triton_module("rtamt.loudness.kernels_triton")
    coef = _B.coef_adapter(P)
    P = P.contiguous()
    lvl = kt.matmul_rows(P, coef(c.sym_t), coef(c.sym_rng))
    E = kt.matmul_rows(P, coef(c.up_t), coef(c.up_rng))
    kt.lower_skirt(P, lvl, c.c_slope, coef(c.a), coef(c.b), coef(c.i0), coef(c.seg),
                   coef(c.cnt), E)
    return E


def excitation_ref(c: ExcitationCoeffs, comp_hz, P) -> np.ndarray:
    """Slow, direct reference of :func:`excitation` (numpy, for tests)."""
    fj = np.asarray(comp_hz, dtype=np.float64)
    P = np.atleast_2d(P)
    fc = c.fc
    pu = 4.0 * fc / erb_hz(fc)
    lvl = np.maximum(P @ c.sym_t, 1e-10)
    X = 10 * np.log10(lvl)
    out = np.zeros((P.shape[0], fc.size))
    for n in range(P.shape[0]):
        g = (fj[None, :] - fc[:, None]) / fc[:, None]
        pl = np.maximum(0.1, pu[:, None] * (1 - c.c_slope * (X[n][None, :] - 51.0)))
        p = np.where(g < 0, pl, pu[:, None])
        w = np.where(g <= 2.0, _roex(p * np.abs(g)), 0.0)
        out[n] = w @ P[n]
    return out
