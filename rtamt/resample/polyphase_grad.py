"""The gradient rule of :class:`rtamt.resample.polyphase.Resampler` and the adjoint of its
kernel :func:`rtamt.resample.polyphase.polyphase_resample` (the causal polyphase FIR with
its input history and phase)."""
from __future__ import annotations

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.grad import StageGrad
from ..engine.jit import JIT as _JIT


@njit(**_JIT)
def polyphase_adjoint(taps, up, down, offset, gy, mu, gx):
    """Adjoint of :func:`rtamt.resample.polyphase.polyphase_resample` (Crochiere & Rabiner
    1983, *Multirate Digital Signal Processing*, sec. 3.3.3: the polyphase form of
    upsampling by ``up``, FIR filtering and decimating by ``down``).

    Forward, per stream and channel, on ``e = [hist, x]`` (``H = K - 1`` history samples,
    then the ``T`` block samples): output ``i`` is ``y[i] = sum_m taps[p, m] e[H + n0 - m]``
    with ``j = offset + i down``, ``n0 = j // up``, ``p = j % up``; the outgoing history is
    the last ``H`` samples of ``e`` and the phase ``offset`` an integer (no gradient).  The
    map is linear in ``e``, so backwards: ``ge[H + n0 - m] += taps[p, m] gy[i]`` (the output
    gradient correlated with the taps of each output's phase, i.e. the transposed polyphase
    filter: zero-stuff by ``down``, filter, keep every ``up``-th sample), plus ``mu`` on the
    last ``H`` samples of ``e``; the first ``H`` values of ``ge`` are the gradient of the
    incoming history, the rest that of ``x``.

    taps   : (up, K) float64 polyphase taps;  offset : (1,) int64 the block's *incoming*
             phase (read only);
    gy     : (B, n_out, C) output gradient (any strides);
    mu     : (B, K-1, C) in: gradient of the outgoing history, out: of the incoming one;
    gx     : (B, T, C) input gradient (added to).
    """
    B, T, C = gx.shape
    K = taps.shape[1]
    H = K - 1
    nout = gy.shape[1]
    r = offset[0]
    ge = np.empty((H + T, C))
    for b in range(B):
        ge[:] = 0.0
        for i in range(nout):
            j = r + i * down
            n0 = j // up
            p = j - n0 * up
            base = H + n0
            for m in range(K):
                hm = taps[p, m]
                row = ge[base - m]
                for c in range(C):
                    row[c] += hm * gy[b, i, c]
        for t in range(H):
            for c in range(C):
                ge[T + t, c] += mu[b, t, c]
        for t in range(H):
            for c in range(C):
                mu[b, t, c] = ge[t, c]
        for t in range(T):
            for c in range(C):
                gx[b, t, c] += ge[H + t, c]


def _triton():
    """The Triton twin (:mod:`rtamt.resample.polyphase_grad_triton`), imported on first
    binding."""
    from . import polyphase_grad_triton
    return (polyphase_grad_triton.polyphase_adjoint,)


class ResamplerGrad(StageGrad):
    """:class:`rtamt.resample.polyphase.Resampler`, any ``up / down`` (Paulick2024's
    ``1 / D`` for every ``D`` its sample rate selects included): input and incoming history
    by :func:`polyphase_adjoint` with the float64 taps (the float32 forward rounds them;
    the gradient is that of the float64 map).  The phase ``offset`` is an integer and gets
    no gradient.  No learnable parameters."""

    kernels = Kernels(numba=(polyphase_adjoint,), triton=_triton)

    def backward(self, coeffs, th, x, state, gy, mu):
        k = self.kern
        gx = k.zeros(x.shape, x)
        k.polyphase_adjoint(k.coef(coeffs.taps), coeffs.up, coeffs.down,
                            k.int64(state["offset"]), gy, mu["hist"], gx)
        return gx, None
