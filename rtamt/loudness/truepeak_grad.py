"""The gradient rule of :class:`rtamt.loudness.truepeak.TruePeak` and its adjoint kernel
:func:`true_peak_adjoint`: the true peak's subgradient through its interpolator.

The true peak after a block is a maximum (ITU-R BS.1770-4 Annex 2): of the incoming one
and of the absolute values of the interpolated waveform, ``|sum_k h[p, k] x[t - k]|``.
Its gradient goes to the one value that set it (the first largest in stream order, the
forward's strict comparisons; the incoming peak when none exceeded it): a subgradient of
the max, with the choice held.  That value is a sample (``sign(x) dx``), an interpolated
point (``sign(y) h[p, k]`` on the samples it reads: Annex 2's 4-phase FIR for
``'bs1770'``, the windowed sinc's half-sample phase for ``'sinc'``) or, for ``'sinc'``, a
refined crest: the vertex ``v = g0 + (gp - gm)^2 / (8 d)``, ``d = 2 g0 - gm - gp``, of the
parabola through the fine-grid values ``gm``, ``g0``, ``gp`` where the climb ended
(J. O. Smith, *Spectral Audio Signal Processing*, 2011, quadratic interpolation), with
``dv/dg0 = 1 - r^2 / (4 d^2)``, ``dv/dgp,m = +-r / (4 d) + r^2 / (8 d^2)``, ``r = gp - gm``,
each ``g`` a fine phase's FIR of the samples (the climb's path and the screening held).
The sample peak is ``max |x|``, likewise.  The state ``hist`` (the last samples) passes the
gradient of the outgoing history to the samples it holds.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.grad import StageGrad
from ..engine.jit import JIT as _JIT
from .truepeak import _climb, _fir_peak, _load_channel, _midpoints, _sinc_scan


@njit(**_JIT)
def _fine_grad(h, base, q, g, gw):
    """``gw += g d/dw`` of the interpolated value at fine position ``q``
    (:func:`rtamt.loudness.truepeak._fine_value`)."""
    L, K = h.shape
    n0 = q // L
    p = q - n0 * L
    if p == 0:
        gw[base + n0] += g
        return
    j = base + n0 + K // 2
    for k in range(K):
        gw[j - k] += g * h[p, k]


@njit(**_JIT)
def true_peak_adjoint(h, sinc, hist, tp, sp, x, gy, mu_hist, mu_tp, mu_sp, gx, work):
    """Adjoint of :func:`rtamt.loudness.truepeak.true_peak_sinc` (``sinc``) or
    :func:`~rtamt.loudness.truepeak.true_peak_fir` (module docstring).

    h ``(L, K)``; hist ``(B, H, C)``, tp / sp ``(B, C)``: the incoming state (read only);
    x ``(B, T, C)``; gy ``(B, 2, C)`` the gradient of the output (true, sample peak);
    mu_hist ``(B, H, C)``, mu_tp / mu_sp ``(B, C)``: in, the gradients of the outgoing
    state; out, of the incoming one; gx ``(B, T, C)`` added to; work: float64 scratch of
    ``H + 2 T + 1`` values."""
    B, T, C = x.shape
    L, K = h.shape
    H = hist.shape[1]
    rec = np.zeros(6)
    gw = np.zeros(H + T)
    for b in range(B):
        for c in range(C):
            w = work[:H + T]
            bsp = _load_channel(hist, x, b, c, w, H)
            # what set the outgoing true peak (the forward's own passes, recording):
            # -1 the incoming peak, 0 a sample, 1 a refined crest, 2 a midpoint (sinc),
            # 3 a sample, 4 an Annex 2 phase (bs1770)
            rec[0] = -1.0
            if sinc:
                m = work[K + T:K + 2 * T + 1]
                _midpoints(h[L // 2], w, m, T, K)
                _sinc_scan(h, w, m, T, tp[b, c], rec)
                kind = int(rec[0])
            else:
                btp = _fir_peak(h, work, T, rec[1:3])
                kind = 4
                if bsp > btp:
                    btp = bsp
                    kind = 3
                if not btp > tp[b, c]:
                    kind = -1
            gw[:] = 0.0
            for i in range(H):                    # the outgoing history
                gw[T + i] += mu_hist[b, i, c]
            g = gy[b, 0, c] + mu_tp[b, c]
            mu_tp[b, c] = g if kind == -1 else 0.0
            if kind == 0 or kind == 3:                     # a sample
                t = int(rec[1])
                if kind == 3:
                    t = H
                    while abs(w[t]) != bsp:
                        t += 1
                gw[t] += g if w[t] > 0.0 else -g
            elif kind == 4:                                # an Annex 2 phase p at t
                p, t = int(rec[1]), int(rec[2])
                v = 0.0
                for k in range(K):
                    v += h[p, k] * w[H + t - k]
                sg = g if v > 0.0 else -g
                for k in range(K):
                    gw[H + t - k] += sg * h[p, k]
            elif kind == 2:                                # a midpoint m[i]
                i = int(rec[1])
                sg = g * rec[5]
                hm = h[L // 2]
                for k in range(K // 2):
                    gw[i + K - 1 - k] += sg * hm[k]
                    gw[i + k] += sg * hm[k]
            elif kind == 1:                                # a refined crest
                s = rec[5]
                q, gm, g0, gp, inner = _climb(h, w, K, int(rec[1]), rec[2], rec[3], rec[4], s)
                c0, cm, cp = 1.0, 0.0, 0.0
                if inner:
                    d = 2.0 * g0 - gm - gp
                    if d > 0.0:
                        r = gp - gm
                        c0 = 1.0 - r * r / (4.0 * d * d)
                        cp = r / (4.0 * d) + r * r / (8.0 * d * d)
                        cm = -r / (4.0 * d) + r * r / (8.0 * d * d)
                _fine_grad(h, K, q, g * s * c0, gw)
                if cm != 0.0:
                    _fine_grad(h, K, q - 1, g * s * cm, gw)
                if cp != 0.0:
                    _fine_grad(h, K, q + 1, g * s * cp, gw)
            # the sample peak: the first largest |x| of the block, or the incoming one
            g = gy[b, 1, c] + mu_sp[b, c]
            if bsp > sp[b, c]:
                mu_sp[b, c] = 0.0
                t = H
                while abs(w[t]) != bsp:
                    t += 1
                gw[t] += g if w[t] > 0.0 else -g
            else:
                mu_sp[b, c] = g
            for i in range(H):
                mu_hist[b, i, c] = gw[i]
            for t in range(T):
                gx[b, t, c] += gw[H + t]


def _triton():
    """The Triton twin (:mod:`rtamt.loudness.truepeak_grad_triton`), imported on binding."""
    from . import truepeak_grad_triton
    return (truepeak_grad_triton.true_peak_adjoint,)


class TruePeakGrad(StageGrad):
    """Input and state gradients of the true and sample peak (module docstring): the
    subgradient at the value that set each maximum; either method; no learnable
    parameters.  Adjoint kernels: :func:`true_peak_adjoint` and its Triton twin."""

    kernels = Kernels(numba=(true_peak_adjoint,), triton=_triton)

    def backward(self, coeffs, th, x, state, gy, mu):
        B, T, C = x.shape
        k = self.kern
        gx = k.zeros(x.shape, x)
        work = np.empty(coeffs.history + 2 * T + 1) if k.backend == "numba" else None
        gy = (np.nan_to_num(gy) if isinstance(gy, np.ndarray)
              else gy.nan_to_num())
        k.true_peak_adjoint(k.coef(coeffs.phases), coeffs.method == "sinc", state["hist"],
                            state["true_peak"], state["sample_peak"], x, gy, mu["hist"],
                            mu["true_peak"], mu["sample_peak"], gx, work)
        return gx, None
