"""The gradient rule of :class:`rtamt.loudness.gating.GatingBlocks` and its adjoint
kernel :func:`block_powers_adjoint`.

Forward (:func:`rtamt.loudness.gating.block_powers`; ITU-R BS.1770-4 Annex 1 eqs. (1)-(2),
EBU Tech 3341 section 2.2): fine block ``j`` (10 ms) has the weighted energy
``E_j = sum_c G_c (acc_c + sum_t y[t, c]^2)`` (``acc`` only in the block that was open
when the call began); after fine block ``k`` completes, the momentary / short-term window
power is ``e = sum_{j=k-n}^{k-1} E_j / sum_{j=k-n}^{k-1} N_j`` (``n`` = 40 / 300, ``N_j``
the fine block's length, an integer: no gradient); every 10th is an output row.  The
running maxima ``peak`` are ``max(peak_in, e at every fine block)``.

Backward (reverse mode; Griewank & Walther, *Evaluating Derivatives*, 2nd ed., 2008):
``dE_j += g_e / sum N`` for every window that read ``E_j``; the ring's outgoing entries
take the gradient of the outgoing state ``mu_ring`` (the incoming entries that a block
does not overwrite pass it through); ``dy[t, c] = 2 y[t, c] G_c dE_j`` for the samples of
fine block ``j``, ``2 y[t, c] mu_acc[c]`` for those of the block still open at the end.
The clock (which samples form which fine block) and the maxima's decisions are held: the
gradient of an outgoing maximum goes to the window power that set it (the first that
reached it: the forward compares strictly), or to the incoming maximum when none
exceeded it (a subgradient of the max).  Outputs not yet defined (NaN: a window not yet
full, rows after the last step) and the step numbers carry no gradient.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.grad import StageGrad
from ..engine.jit import JIT as _JIT
from .gating import FINE, N_MOMENTARY, RING


@njit(**_JIT)
def block_powers_adjoint(weights, fine_lens, acc, fill, n_fine, ring_e, ring_n, peak, y, gy,
                         mu_acc, mu_ring, mu_peak, gx):
    """Adjoint of :func:`rtamt.loudness.gating.block_powers` (module docstring).

    weights ``(C,)``, fine_lens ``(P,)``: the design; acc ``(B, C)``, fill / n_fine ``(B,)``,
    ring_e / ring_n ``(B, 300)``, peak ``(B, 2)``: the incoming state (read only);
    y ``(B, T, C)`` the K-weighted block; gy ``(B, K, 3)`` the gradient of the output rows
    (column 0, the step numbers, and NaN rows are ignored); mu_acc ``(B, C)``, mu_ring
    ``(B, 300)``, mu_peak ``(B, 2)``: in, the gradients of the outgoing state; out, of the
    incoming one; gx ``(B, T, C)`` the gradient of ``y`` (added to).
    """
    B, T, C = y.shape
    P = fine_lens.shape[0]
    for b in range(B):
        n0 = n_fine[b]
        # the fine blocks completed in this call: their last sample (exclusive)
        nf = 0
        t = 0
        fl = fill[b]
        while t + fine_lens[(n0 + nf) % P] - fl <= T:
            t += fine_lens[(n0 + nf) % P] - fl
            fl = 0
            nf += 1
        ends = np.empty(nf, np.int64)
        # E[i], N[i]: fine block j = n0 - RING + i (the ring's entries, then the new ones),
        # recomputed in the forward kernel's order (the same bits, so the same decisions)
        E = np.zeros(RING + nf)
        N = np.zeros(RING + nf)
        for i in range(RING):
            j = n0 - RING + i
            if j >= 0:
                E[i] = ring_e[b, j % RING]
                N[i] = ring_n[b, j % RING]
        t = 0
        for f in range(nf):
            end = t + fine_lens[(n0 + f) % P] - (fill[b] if f == 0 else 0)
            ends[f] = end
            e = 0.0
            for c in range(C):
                a = acc[b, c] if f == 0 else 0.0
                for i in range(t, end):
                    v = y[b, i, c]
                    a += v * v
                e += weights[c] * a
            E[RING + f] = e
            N[RING + f] = fine_lens[(n0 + f) % P]
            t = end
        # the window powers' gradients: rows of gy, and the maxima (argmax, -1: incoming)
        gw = np.zeros((nf, 2))
        arg = np.full(2, -1, np.int64)
        best = np.empty(2)
        best[0] = peak[b, 0]
        best[1] = peak[b, 1]
        row = 0
        for f in range(nf):
            k = n0 + f + 1
            for w in range(2):
                n = N_MOMENTARY * FINE if w == 0 else RING
                if k >= n:
                    se = 0.0
                    sn = 0.0
                    for j in range(k - n, k):
                        se += E[j - n0 + RING]
                        sn += N[j - n0 + RING]
                    if se / sn > best[w]:
                        best[w] = se / sn
                        arg[w] = f
            if k % FINE == 0:
                for w in range(2):
                    if k >= (N_MOMENTARY * FINE if w == 0 else RING):
                        gw[f, w] += gy[b, row, 1 + w]
                row += 1
        for w in range(2):
            if arg[w] >= 0:
                gw[arg[w], w] += mu_peak[b, w]
                mu_peak[b, w] = 0.0
        # back to the fine blocks' energies
        gE = np.zeros(RING + nf)
        for f in range(nf):
            k = n0 + f + 1
            for w in range(2):
                n = N_MOMENTARY * FINE if w == 0 else RING
                g = gw[f, w]
                if k >= n and g != 0.0:
                    sn = 0.0
                    for j in range(k - n, k):
                        sn += N[j - n0 + RING]
                    for j in range(k - n, k):
                        gE[j - n0 + RING] += g / sn
        # the ring: outgoing entries written here take mu_ring; the others pass it through
        n_end = n0 + nf
        for j in range(max(n0, n_end - RING), n_end):
            gE[j - n0 + RING] += mu_ring[b, j % RING]
        for f in range(min(nf, RING)):
            mu_ring[b, (n0 + f) % RING] = 0.0
        for i in range(RING):
            j = n0 - RING + i
            if j >= 0:
                mu_ring[b, j % RING] += gE[i]
        # back to the samples and the incoming sums (acc: of the first fine block; the
        # samples after the last completed one go to the outgoing acc)
        if nf == 0:
            for c in range(C):
                g = mu_acc[b, c]
                for i in range(T):
                    gx[b, i, c] += 2.0 * g * y[b, i, c]
            continue
        for c in range(C):
            g = mu_acc[b, c]
            for i in range(ends[nf - 1], T):
                gx[b, i, c] += 2.0 * g * y[b, i, c]
            mu_acc[b, c] = weights[c] * gE[RING]
        t = 0
        for f in range(nf):
            g = gE[RING + f]
            for c in range(C):
                gc = 2.0 * weights[c] * g
                for i in range(t, ends[f]):
                    gx[b, i, c] += gc * y[b, i, c]
            t = ends[f]


def _int64(a):
    """``a`` (a float64 copy of an integer state entry) as int64, numpy or torch."""
    return a.astype(np.int64) if isinstance(a, np.ndarray) else a.long()


def _finite(a):
    """``a`` with NaN and infinities replaced by 0 (undefined rows carry no gradient)."""
    if isinstance(a, np.ndarray):
        return np.nan_to_num(a, nan=0.0, posinf=0.0, neginf=0.0)
    return a.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).contiguous()


def _triton():
    """The Triton twin (:mod:`rtamt.loudness.gating_grad_triton`), imported on binding."""
    from . import gating_grad_triton
    return (gating_grad_triton.block_powers_adjoint,)


class GatingGrad(StageGrad):
    """Input and state gradients of the gating blocks: of the momentary and short-term
    window powers (the output rows' columns 1 and 2) and of the state's open-block sums
    ``acc``, ring of fine-block energies ``ring_e`` and maxima ``peak`` (module
    docstring); the clock's integers carry none.  The channel weights ``G_i`` are the
    design's (no learnable parameters).  Adjoint kernels: :func:`block_powers_adjoint`
    and its Triton twin."""

    kernels = Kernels(numba=(block_powers_adjoint,), triton=_triton)

    def backward(self, coeffs, th, x, state, gy, mu):
        k = self.kern
        gx = k.zeros(x.shape, x)
        k.block_powers_adjoint(k.coef(coeffs.weights), k.coef(coeffs.fine_lens),
                               state["acc"], _int64(state["fill"]), _int64(state["n_fine"]),
                               state["ring_e"], _int64(state["ring_n"]), state["peak"], x,
                               _finite(gy), mu["acc"], mu["ring_e"], mu["peak"], gx)
        return gx, None
