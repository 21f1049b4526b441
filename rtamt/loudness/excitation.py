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
matrix products (:func:`rtamt.engine.rowwise.rowwise_matmul`, frame by frame); the
level-dependent lower skirts run in :func:`lower_skirt`.

The stage (:class:`Excitation`) takes the component powers ``fr['P']`` (R F, J) of the
spectrum stage and adds ``fr['E']`` (R F, nf); with ``level_db`` also ``fr['E_db']``
(``10 log10 max(E, 1e-10)``, dB).  It has no state: each frame's excitation is a fixed
function of that frame's powers.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from numba import njit, types

from ..engine.backend import Kernels
from ..engine.fastexp import exp2_neg_f32, log_f64
from ..engine.jit import JIT as _JIT
from ..engine.rowwise import ROWWISE, band_ranges, product
from .ansi import cam_to_hz, erb_hz
from .frames import FrameStage

CAM_LO, CAM_HI, CAM_STEP = 1.75, 39.0, 0.25
LOG2E = 1.4426950408889634


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


@dataclasses.dataclass
class ExcitationCoeffs:
    fc: np.ndarray        # (nf,) filter centres, Hz
    cam: np.ndarray       # (nf,)
    sym_t: np.ndarray     # (J, J) level-per-ERB weights, transposed for P @ sym_t
    up_t: np.ndarray      # (J, nf) upper-side weights, transposed
    a: np.ndarray         # flat lower-skirt tables x log2(e) (float32, see lower_skirt)
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


def excitation(c: ExcitationCoeffs, P, kern=None):
    """Excitation (N, nf), linear, from component powers ``P`` (N, J), linear, float64.
    ``kern``: the kernels to run (:attr:`Excitation.kern`, bound by the model's ``to()``:
    numpy arrays on numba, torch tensors on Triton), ``c``'s arrays as they take them
    (:attr:`Excitation.kcoeffs`); default the numba set."""
    kern = Excitation.kern if kern is None else kern
    P = kern.contiguous(P)
    # row-wise products (rtamt.engine.rowwise): a frame's bits do not depend on how many
    # frames and streams are computed together
    lvl = product(kern, P, c.sym_t, c.sym_rng)
    E = product(kern, P, c.up_t, c.up_rng)
    kern.lower_skirt(P, lvl, c.c_slope, c.a, c.b, c.i0, c.seg, c.cnt, E)
    return E


def excitation_db(E):
    """``10 log10 max(E, 1e-10)``: excitation level (dB) of linear excitation ``E``."""
    return 10.0 * np.log10(np.maximum(E, 1e-10))


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


@dataclasses.dataclass(frozen=True)
class ExcitationParams:
    """comp_hz: the spectral components' frequencies (Hz, the spectrum's ``comp_hz``);
    level_db: also give the excitation in dB (``fr['E_db']``)."""

    comp_hz: tuple = ()
    level_db: bool = False


def _triton():
    from . import excitation_triton as t

    return (t.lower_skirt, t.excitation_db)


class Excitation(FrameStage):
    """Excitation pattern (ANSI S3.4-2007 §3.5) as a frame stage: ``fr['P']`` (R F, J) ->
    ``fr['E']`` (R F, nf) linear (and ``fr['E_db']`` dB with ``level_db``)."""

    name = "excitation"
    Params = ExcitationParams
    kernels = Kernels(numba=(lower_skirt, excitation_db), triton=_triton, uses=(ROWWISE,))
    reads = ("P",)

    @property
    def writes(self) -> tuple:
        return ("E", "E_db") if self.params.level_db else ("E",)

    @staticmethod
    def design(params: ExcitationParams) -> ExcitationCoeffs:
        return design_excitation(np.asarray(params.comp_hz, dtype=np.float64))

    def process_tm(self, fr: dict, state: dict) -> None:
        E = fr["E"] = excitation(self.kc, fr["P"], self.kern)
        if self.params.level_db:
            fr["E_db"] = self.kern.excitation_db(E)

    @classmethod
    def grad_rule(cls):
        """The gradient rule (:class:`rtamt.loudness.excitation_grad.ExcitationGrad`)."""
        from .excitation_grad import ExcitationGrad

        return ExcitationGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("excitation", dict(comp_hz=(62.5, 125.0, 250.0, 500.0, 1000.0)), "frames"),)
