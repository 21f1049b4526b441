"""The gradient rule of :class:`tests.toy.onepole.OnePole` (rtamt.engine.grad): the adjoint
of ``y[t] = (1 - a) x[t] + a y[t-1]`` is ``lam[t] = gy[t] + a lam[t+1]`` from
``lam[T-1] = gy[T-1] + mu`` (reverse-mode differentiation of a recursion; Griewank & Walther 2008),
``gx = (1 - a) lam``, the incoming state's gradient ``a lam[0]`` and ``dL/da = sum
lam[t] (y[t-1] - x[t])``; ``tau = tau0 exp(th)``."""
from __future__ import annotations

import numpy as np
from scipy import signal

from rtamt.engine.grad import StageGrad, lift

from .onepole import OnePoleWeights, pole


class OnePoleGrad(StageGrad):
    n_params = 1

    def weights(self, th, xp=np):
        return OnePoleWeights(lift(np.float64(self.stage.params.tau), th, xp) * xp.exp(th[0]))

    def coefficients(self, w, xp):
        return (pole(w.tau, self.stage.params.fs, xp),)

    def backward(self, coeffs, th, x, state, gy, mu):
        a = float(coeffs.a[0])
        g = np.array(gy, dtype=np.float64)
        g[:, -1] += mu["y"]                           # the outgoing state is y[T-1]
        lam = signal.lfilter([1.0], [1.0, -a], g[:, ::-1], axis=1)[:, ::-1]
        gx = (1.0 - a) * lam
        y0 = np.array(state["y"], dtype=np.float64)
        mu["y"][:] = a * lam[:, 0]
        if th is None:
            return gx, None
        y = np.empty(x.shape)
        type(self.stage).process_tm(coeffs, {"y": y0.copy()}, np.asarray(x, np.float64), y)
        prev = np.concatenate([y0[:, None], y[:, :-1]], axis=1)
        return gx, self.chain(th, np.sum(lam * (prev - x)))
