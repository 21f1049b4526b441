"""Gradient rules of the loudness integrators (:mod:`rtamt.loudness.agc`): the adjoint of
the asymmetric one-pole (:func:`rtamt.loudness.frames_grad.agc_adjoint`) over the frames
of a block, w.r.t. the input frames, the incoming state and, learnable, the attack and
release time constants (``theta = log(tau / tau0)``, attack then release)."""
from __future__ import annotations

import dataclasses

import numpy as np

from .frames_grad import AGC_KERNELS, FrameGrad, owned, scalar, time_constant_coeff, zeros_or

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
        return None if th is None else self.chain(th, scalar(self.kern, ga), scalar(self.kern, gr))


class LoudnessIntegratorGrad(_IntegratorGrad):
    """:class:`~rtamt.loudness.agc.LoudnessIntegrator`: ``fr[source]`` (F, R), or (R, F)
    with ``transpose`` -> ``fr[key]`` (F, R); state ``key`` (R,)."""

    def backward(self, stage, fr, state, g, mu, th):
        p = stage.params
        kern = self.kern
        x = fr[p.source]
        x = kern.contiguous(x.T if p.transpose else x)
        gx = kern.zeros(tuple(x.shape), x)
        m = mu[p.key]
        ga, gr = kern.agc_adjoint(x, owned(kern, state[p.key]), p.attack, p.release,
                                  zeros_or(kern, g[p.key], tuple(x.shape), x), m, gx)
        return {p.source: gx.T if p.transpose else gx}, self._gth(th, ga, gr)


class SpecificLoudnessAGCGrad(_IntegratorGrad):
    """:class:`~rtamt.loudness.agc.SpecificLoudnessAGC`: ``fr['N']`` (R F, K) ->
    ``fr['st']`` (F, R, K); state ``st`` (R, K)."""

    def backward(self, stage, fr, state, g, mu, th):
        p = stage.params
        R, F, K = int(fr["R"]), int(fr["F"]), p.channels
        kern = self.kern
        x = fr["N"].reshape(R, F, K)
        gst = zeros_or(kern, g["st"], (F, R, K), x)
        # the rows and channels side by side: (F, R K), one smoother each
        x2 = kern.contiguous(x.swapaxes(0, 1)).reshape(F, R * K)
        gx = kern.zeros((F, R * K), x2)
        m = kern.contiguous(mu["st"]).reshape(R * K)
        ga, gr = kern.agc_adjoint(x2, owned(kern, state["st"]).reshape(R * K), p.attack,
                                  p.release, gst.reshape(F, R * K), m, gx)
        mu["st"] = m.reshape(R, K)
        gN = gx.reshape(F, R, K).swapaxes(0, 1).reshape(R * F, K)
        return {"N": gN}, self._gth(th, ga, gr)
