"""Gradient rule of :class:`~rtamt.loudness.spectrum.Spectrum`: the adjoint of the
windowed DFT powers (Glasberg & Moore 2002, §2.1) w.r.t. the sample rows and the sample
history.

Each component's power is ``P_g = sum_{b in g} gain_b |X_b|^2`` with
``X_b = sum_m w_m z[s + m] e^{-j 2 pi k_b m / nfft}`` (``gain_b``: the power scaling, the
input level and the outer/middle-ear gain; ``g``: the bin grouping of the spectral
compression), so ``dP_g/dz[s + m] = sum_b 2 gain_b w_m (Re X_b cos phi_bm - Im X_b sin
phi_bm)``: per window and frame a dense windowed DFT (``direct``'s, whatever
method the forward pass chose: all evaluate the same powers) and its transpose, the
segments' gradients added where the frames overlap (:func:`dft_power_adjoint`).  The
rounding clamp of the ``autocorr`` method (tiny negative powers set to 0) is not
differentiated (the true power there is ~0).

State: the gradient flows through the history ``hist``; the chunk-DFT rings (``ring<w>``)
are a function of that history (:mod:`rtamt.loudness.spectrum`), so their gradient is
counted in ``hist``'s and theirs is 0; the frame clock ``n`` has none.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.jit import JIT as _JIT
from .frames_grad import FrameGrad, zeros_or
from .spectrum import _window

__all__ = ["dft_power_adjoint", "SpectrumGrad"]


@njit(**_JIT)
def dft_power_adjoint(z, st, F, H, mat, mat_t, gain, grp, gP, gz):
    """Adjoint of one window's powers ``P[r F + f, grp[b]] += gain[b] |X_b|^2`` with
    ``[Re X | Im X] = z[r, st + f H:][:n] @ mat`` (``mat`` (n, 2B): the window times
    ``cos | -sin`` of the bins' phases): ``gz[r, st + f H + m] += sum_b 2 gain[b]
    gP[r F + f, grp[b]] (Re X_b mat[m, b] + Im X_b mat[m, B + b])``, for the ``F`` frames
    of each row (``H`` apart) of z (R, L), added into gz (R, L); ``mat_t`` is ``mat.T``
    (contiguous: both passes run along contiguous rows, vectorised)."""
    R = z.shape[0]
    n, B2 = mat.shape
    B = B2 // 2
    y = np.empty(B2)
    G = np.empty(B2)
    for r in range(R):
        for f in range(F):
            s = st + f * H
            y[:] = 0.0
            for m in range(n):
                v = z[r, s + m]
                row = mat[m]
                for q in range(B2):
                    y[q] += v * row[q]
            grow = gP[r * F + f]
            for b in range(B):
                w = 2.0 * gain[b] * grow[grp[b]]
                G[b] = w * y[b]
                G[B + b] = w * y[B + b]
            out = gz[r, s:s + n]
            for q in range(B2):
                gq = G[q]
                col = mat_t[q]
                for m in range(n):
                    out[m] += gq * col[m]


def _triton():
    """The Triton twin (:mod:`rtamt.loudness.spectrum_grad_triton`), imported on first
    binding."""
    from . import spectrum_grad_triton
    return (spectrum_grad_triton.dft_power_adjoint,)


class SpectrumGrad(FrameGrad):
    """``fr['rows']`` (R, T) -> ``fr['P']`` (R F, J); state ``hist`` (R, nmax)."""

    kernels = Kernels(numba=(dft_power_adjoint,), triton=_triton)

    def __init__(self, stage, rows: int = 1):
        super().__init__(stage, rows)
        c = stage.coeffs
        kind = getattr(stage.params, "window", "hann")
        self.windows = []
        for pl in c.plans:
            k = np.rint(c.bin_hz[pl.bins] * c.nfft / c.fs)
            win = _window(kind, pl.n)
            ph = 2.0 * np.pi * np.outer(np.arange(pl.n), k) / c.nfft
            mat = np.concatenate([win[:, None] * np.cos(ph), -win[:, None] * np.sin(ph)],
                                 axis=1)
            self.windows.append((pl.n, pl.start, np.ascontiguousarray(mat),
                                 np.ascontiguousarray(mat.T), c.gains[pl.bins],
                                 c.group_of_bin[pl.bins]))

    def backward(self, stage, fr, state, g, mu, th):
        c, kern = stage.coeffs, self.kern
        L, H = c.nmax, c.hop
        rows = fr["rows"]
        R, T = rows.shape
        ends = fr["out"]["ends"]                 # the frames the block completed (host)
        F = int(ends.size)
        z = kern.empty((R, L + T), rows)          # the history, then the block
        z[:, :L] = state["hist"]
        z[:, L:] = rows
        gz = kern.zeros((R, L + T), rows)
        gz[:, -L:] += mu["hist"]
        if F:
            gP = zeros_or(kern, g["P"], (R * F, c.comp_hz.size), rows)
            e0 = int(ends[0]) - int(state["n"][0]) + L     # the frame clock: a host array
            co = kern.coef
            for _, start, mat, mat_t, gain, grp in self.windows:
                kern.dft_power_adjoint(z, e0 + start, F, H, co(mat), co(mat_t), co(gain),
                                       co(grp), gP, gz)
        mu["hist"] = kern.contiguous(gz[:, :L])
        for k in mu:
            if k.startswith("ring"):
                mu[k] = kern.zeros(tuple(mu[k].shape), rows)
        return {"rows": kern.contiguous(gz[:, L:])}, None
