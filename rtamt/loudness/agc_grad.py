"""Gradient rules of the loudness integrators (:mod:`rtamt.loudness.agc`): the adjoint of
the asymmetric one-pole (:func:`rtamt.loudness.frames_grad.agc_adjoint`) over the frames
of a block, w.r.t. the input frames, the incoming state and, learnable, the attack and
release time constants (``theta = log(tau / tau0)``, attack then release)."""
from __future__ import annotations

import dataclasses

import numpy as np

from .frames_grad import AGC_KERNELS, FrameGrad, time_constant_coeff, zeros_if_none

__all__ = ["IntegratorWeights", "LoudnessIntegratorGrad", "SpecificLoudnessAGCGrad"]


@dataclasses.dataclass(frozen=True)
class IntegratorWeights:
    """attack, release: the smoother's coefficients per frame (``1 - exp(-1/tau)``, tau in
    frames)."""

    attack: object
    release: object


class _IntegratorGrad(FrameGrad):
    n_params = 2
    kernels = AGC_KERNELS

    def weights(self, th, xp=np):
        p = self.stage.params
        return IntegratorWeights(time_constant_coeff(p.attack, th[0], xp),
                                 time_constant_coeff(p.release, th[1], xp))

    def coefficients(self, w, xp):
        return (w.attack, w.release)

    def params_for(self, w):
        return dataclasses.replace(self.stage.params, attack=float(w.attack),
                                   release=float(w.release))

    def _gth(self, th, ga, gr):
        return None if th is None else self.chain(th, np.float64(ga), np.float64(gr))


class LoudnessIntegratorGrad(_IntegratorGrad):
    """:class:`~rtamt.loudness.agc.LoudnessIntegrator`: ``fr[source]`` (F, R), or (R, F)
    with ``transpose`` -> ``fr[key]`` (F, R); state ``key`` (R,)."""

    def backward(self, stage, fr, state, g, mu, th):
        p = stage.params
        x = fr[p.source]
        x = np.ascontiguousarray(x.T if p.transpose else x)
        gx = np.zeros(x.shape)
        m = mu[p.key]
        ga, gr = self.kern.agc_adjoint(x, state[p.key].copy(), p.attack, p.release,
                             np.ascontiguousarray(zeros_if_none(g[p.key], x.shape)), m, gx)
        return {p.source: gx.T if p.transpose else gx}, self._gth(th, ga, gr)


class SpecificLoudnessAGCGrad(_IntegratorGrad):
    """:class:`~rtamt.loudness.agc.SpecificLoudnessAGC`: ``fr['N']`` (R F, K) ->
    ``fr['st']`` (F, R, K); state ``st`` (R, K)."""

    def backward(self, stage, fr, state, g, mu, th):
        p = stage.params
        R, F, K = int(fr["R"]), int(fr["F"]), p.channels
        x = fr["N"].reshape(R, F, K)
        gst = zeros_if_none(g["st"], (F, R, K))
        # the rows and channels side by side: (F, R K), one smoother each
        x2 = np.ascontiguousarray(x.transpose(1, 0, 2)).reshape(F, R * K)
        gx = np.zeros((F, R * K))
        m = np.ascontiguousarray(mu["st"]).reshape(R * K)
        ga, gr = self.kern.agc_adjoint(x2, state["st"].reshape(R * K).copy(), p.attack, p.release,
                             np.ascontiguousarray(gst).reshape(F, R * K), m, gx)
        mu["st"] = m.reshape(R, K)
        gN = gx.reshape(F, R, K).transpose(1, 0, 2).reshape(R * F, K)
        return {"N": gN}, self._gth(th, ga, gr)
