"""The gradient rule of a frame stage (:mod:`rtamt.loudness.frames`): what :mod:`rtamt.nn`
needs to differentiate the loudness models.

A frame stage declares its rule as a sample stage does (``grad_rule()`` returns a
:class:`FrameGrad`, a :class:`rtamt.engine.grad.StageGrad` subclass, kept beside the stage
in ``<stage>_grad.py`` with its numba adjoint kernels).  What differs is what flows: a
frame stage reads and writes the block's frames by name (``fr['P']``, ``fr['E']``, ...),
so its backward pass maps the gradients of what it wrote to the gradients of what it read:

``backward(stage, fr, state, g, mu, th) -> (gin, gth)``

* ``stage``: the stage the forward pass ran (:meth:`FrameGrad.stage_for` of ``th``);
* ``fr``: float64 copies of the frames the stage read (its ``reads``), with ``'R'``,
  ``'F'`` (and the spectrum's ``'ends'``) as the forward pass saw them, and under
  ``'out'`` the frames it wrote (by name);
* ``state``: float64 copies of the stage's incoming state (its own layout, rows first);
* ``g``: the gradient of each of its ``writes`` (float64 arrays in the layout the stage
  wrote them, or ``None`` for none);
* ``mu``: the gradient of the outgoing state by key, replaced in place by the gradient of
  the incoming state (a key without a gradient, the frame clock ``n``, is left out);
* ``th``: the stage's learnable vector (``None`` when no parameter gradient is wanted).

It returns ``gin``, the gradient of each of its ``reads`` (by name), and ``gth`` (the
gradient of ``th``, or ``None``).  Chained over the stages of a model in reverse and over
blocks through ``mu``, these give the gradient of one call on the concatenated input
(reverse-mode differentiation; Griewank & Walther, *Evaluating Derivatives*, 2nd ed., SIAM
2008).

Learnable values: a rule with ``n_params > 0`` defines ``weights(th, xp)`` (the physical
values, a frozen dataclass; ``xp`` numpy or torch) and ``params_for(w)`` (the stage's
``Params`` with weights ``w``); :meth:`FrameGrad.stage_for` builds the stage of those
params (``th = 0`` gives the stage's own design bit for bit).  The chain from the weights'
gradients to ``th`` is :meth:`rtamt.engine.grad.StageGrad.chain` (torch's autograd through
``coefficients(weights(th))``).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..engine.backend import Kernels
from ..engine.grad import StageGrad
from ..engine.jit import INLINE as _INL
from ..engine.jit import JIT as _JIT

__all__ = ["FrameGrad", "agc_adjoint", "agc_step_adjoint", "time_constant_coeff",
           "AGC_KERNELS", "zeros_or", "owned", "scalar"]


class FrameGrad(StageGrad):
    """The backward rule of one frame stage (see the module docstring), made once per
    :mod:`rtamt.nn` layer from the stage and the rows of a stream (``rows``)."""

    n_params = 0

    def __init__(self, stage, rows: int = 1):
        super().__init__(stage, stage.coeffs, rows)
        self._stage = (None, stage)

    def params_for(self, w):  # pragma: no cover - defined by rules with parameters
        raise NotImplementedError

    def stage_for(self, th):
        """The stage whose forward pass the layer runs for ``th`` (float64 numpy; ``None``
        or no parameters: the stage itself; the last one is kept)."""
        if th is None or not self.n_params:
            return self.stage
        kern = self.kern
        key = (np.asarray(th, dtype=np.float64).tobytes(), getattr(kern, "backend", None),
               str(getattr(kern, "device", None)))
        if self._stage[0] != key:
            params = self.params_for(self.weights(np.asarray(th, dtype=np.float64)))
            st = type(self.stage)(params)
            if key[1] == "triton":          # the rule is bound to the device: so is its stage
                st.to(kern.device, backend="triton")
            self._stage = (key, st)
        return self._stage[1]

    def backward(self, stage, fr, state, g, mu, th):  # pragma: no cover - per rule
        raise NotImplementedError


def zeros_if_none(g, shape) -> np.ndarray:
    """``g`` as a float64 array, or zeros of ``shape`` for ``None``."""
    return np.zeros(shape) if g is None else np.asarray(g, dtype=np.float64)


def zeros_or(kern, g, shape, like):
    """``g`` (a float64 gradient of the bound backend: numpy, or a tensor on the device)
    made contiguous, or zeros of ``shape`` in ``like``'s dtype and place for ``None``;
    ``kern``: the rule's bound kernel set (:attr:`rtamt.engine.grad.StageGrad.kern`)."""
    return kern.zeros(shape, like) if g is None else kern.contiguous(g)


def owned(kern, a):
    """A new contiguous copy of ``a`` (numpy or a tensor, as ``kern`` takes them) that a
    kernel may write."""
    out = kern.empty(tuple(a.shape), a)
    out[...] = a
    return out


def scalar(kern, v):
    """A kernel's returned coefficient gradient as :meth:`~rtamt.engine.grad.StageGrad.
    chain` takes it: a numba float as ``np.float64`` (a float64 tensor then), a Triton
    twin's 0-d tensor as it is (``kern``: the bound set that ran the kernel)."""
    return v if kern.backend == "triton" else np.float64(v)


def time_constant_coeff(a0: float, th, xp=np):
    """The per-frame coefficient of a one-pole smoother whose time constant is
    ``exp(th)`` times that of coefficient ``a0`` (``a = 1 - exp(-1/tau)``, tau in frames):
    ``a0 expm1(L e^{-th}) / expm1(L)``, ``L = log(1 - a0)``; equal to ``a0`` bit for bit at
    ``th = 0``.  ``xp``: numpy (float ``th``) or torch (a tensor)."""
    L = float(np.log1p(-a0))
    den = float(np.expm1(L))
    return a0 * (xp.expm1(L * xp.exp(-th)) / den)


@njit(**_INL)
def agc_step_adjoint(g, x, yp, aa, ar):
    """Adjoint of one step ``y = yp + a (x - yp)`` (:func:`rtamt.loudness.agc._agc_step`,
    ``a = aa`` where ``x > yp`` else ``ar``, the switch held) for the gradient ``g`` of
    ``y``: the gradients of ``(x, yp, aa, ar)``."""
    d = x - yp
    if x > yp:
        return g * aa, g * (1.0 - aa), g * d, 0.0
    return g * ar, g * (1.0 - ar), 0.0, g * d


@njit(**_JIT)
def agc_adjoint(x, y0, aa, ar, gy, mu, gx):
    """Adjoint of :func:`rtamt.loudness.agc.agc` (``y <- y + a (x - y)``, ``a = aa`` where
    ``x > y`` else ``ar``; Glasberg & Moore 2002, eqs. 5-6) over the frames of a block.

    x (N, K) input frames, y0 (K,) incoming state; gy (N, K) gradient of the outputs;
    mu (K,) gradient of the outgoing state, replaced by that of the incoming state;
    gx (N, K) gradient of the input, added into.  The switch is held (its choice has no
    derivative; at ``x == y`` both branches give the same value, the release branch is
    the one taken).  Returns ``(g_attack, g_release)``, the gradients of the two
    coefficients.
    """
    N, K = x.shape
    yp = np.empty((N, K))
    y = y0.copy()
    for n in range(N):
        for k in range(K):
            yp[n, k] = y[k]
            a = aa if x[n, k] > y[k] else ar
            y[k] = y[k] + a * (x[n, k] - y[k])
    ga = 0.0
    gr = 0.0
    for n in range(N - 1, -1, -1):
        for k in range(K):
            dx, mu[k], da, dr = agc_step_adjoint(mu[k] + gy[n, k], x[n, k], yp[n, k], aa, ar)
            gx[n, k] += dx
            ga += da
            gr += dr
    return ga, gr


def _triton():
    """The Triton twin (:mod:`rtamt.loudness.frames_grad_triton`), imported on first
    binding."""
    from . import frames_grad_triton
    return (frames_grad_triton.agc_adjoint,)


#: the integrators' adjoint, numba and Triton (used by the rules of :mod:`.agc_grad`)
AGC_KERNELS = Kernels(numba=(agc_adjoint,), triton=_triton)
