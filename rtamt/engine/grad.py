"""The gradient rule of a stage: what :mod:`rtamt.nn` needs to differentiate it.

A differentiable stage declares its rule beside itself: the stage class's
:meth:`rtamt.engine.stage.Stage.grad_rule` returns a :class:`StageGrad` subclass, kept
in a module next to the stage (``gammatone_grad.py`` beside ``gammatone.py``) with the
stage's *adjoint* kernels.  :mod:`rtamt.nn` finds the rule through the stage, so a new
differentiable stage needs no edit there.

Adjoint kernels: given the gradient of a loss with respect to a block's output ``gy`` and
to the state the block leaves behind (``mu``, the "terminal adjoint"), they run backwards
in time over the block and return the gradient with respect to the block's input and to
the state it started from.  Chained over blocks (the state's gradient of block ``n + 1``
is the terminal adjoint of block ``n``) they give exactly the gradient of one call on the
concatenated input.  A recursion ``s[t] = A s[t-1] + B u[t]``, ``y[t] = C s[t] + D u[t]``
has the adjoint ``lam[t] = C^T gy[t] + A^T lam[t+1]``, ``gu[t] = B^T lam[t] + D^T gy[t]``,
run from ``t = T-1`` down to 0 with ``lam[T] = mu``; the gradient of the incoming state
is ``A^T lam[0]`` (reverse-mode differentiation of a recursion; Griewank & Walther,
*Evaluating Derivatives*, 2nd ed., SIAM 2008).  Nonlinear recursions are linearised along
the forward trajectory, recomputed from the saved block input and incoming state
(checkpointed every :data:`SEGMENT` samples, so the memory is O(T/SEGMENT + SEGMENT)
states per stream; checkpointing as in the same book).  Arrays are time-major
``(B, T, C)`` as in :mod:`rtamt.engine.kernels`, gradients float64; kernels *add* into
``gx`` (the gradients of several consumers of one input accumulate) and replace ``mu``
by the gradient of the incoming state.

Learnable values (the split of CARFAC's JAX code between fixed design and trainable
weights): a stage with learnable values has a frozen ``...Weights`` dataclass beside its
``Params``, and its ``design(params, n_in=None, weights=None)`` takes them as an optional
input (``None``: the values its params give).  The part of the design that the weights
reach is one function written with array-namespace-agnostic operations (``xp``: numpy,
or torch so that autograd reaches the weights); the design calls it with numpy, the rule
with torch to chain the adjoint's coefficient gradients to the parameters
(:meth:`StageGrad.chain`).

Backends: a rule declares its adjoint kernels as a stage declares its forward kernels
(``kernels``, a :class:`rtamt.engine.backend.Kernels`: the numba adjoints and a function
that imports their Triton twins from ``<stage>_grad_triton.py``, same names, same
arguments, torch tensors on one device); :meth:`StageGrad.bind` binds them once when a
layer is moved to a device (``self.kern``; the class's numba set until then), and the
rule's ``backward``, written once for both backends, calls ``self.kern.<adjoint>`` with
the arrays of the bound backend (float64 numpy arrays, or float64 tensors on the device)
and makes its work arrays with ``self.kern.zeros`` and ``self.kern.coef``.  A rule whose
``backward`` needs no kernel (array operations only) sets ``device_ready = True``.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .backend import Kernels, NumbaKernels, RtamtBackendError, TritonKernels, declare_kernels

__all__ = ["SEGMENT", "StageGrad", "lift"]

#: samples between checkpoints of a recomputed forward trajectory
SEGMENT = 512


def lift(a, like, xp):
    """The constant ``a`` (numpy) in the namespace ``xp`` of ``like``: ``a`` itself for
    numpy, a tensor on ``like``'s device for torch."""
    return a if xp is np else xp.as_tensor(a, device=like.device)


class StageGrad:
    """The backward rule of one stage, made once per :mod:`rtamt.nn` layer stage from the
    stage, its designed coefficients (``self.coeffs0``) and its input channel count.

    Learnable values: ``n_params`` of them (0: none), a vector ``th`` in an
    unconstrained parametrisation (every real ``th`` gives a stable design; ``th = 0`` is
    the design itself, bit for bit).  A rule with parameters defines
    ``weights(th, xp)``, the stage's ``Weights`` for ``th`` (``xp``: numpy for a float64
    array ``th``, torch for a tensor), and ``coefficients(w, xp)``, the coefficient
    arrays whose gradients its adjoint returns, computed from weights ``w`` by the
    stage's own design function.  :meth:`coeffs_for` designs the coefficients for ``th``
    with the stage's ``design``; :meth:`learned` gives the physical values by name.

    ``backward(coeffs, th, x, state, gy, mu)`` (arrays of the bound backend: numpy, or
    float64 tensors on the device for a Triton-bound rule) gets the coefficients of the forward
    pass, ``th`` (``None`` when no parameter gradient is wanted), the block input ``x``
    (time-major), the incoming ``state`` (float64 numpy copies), the output gradient
    ``gy`` and the gradient of the outgoing state ``mu`` (modified in place into the
    gradient of the incoming state); returns ``(gx, gth)`` (``gth``: gradient of ``th``,
    or ``None``).
    """

    n_params = 0
    #: the rule's adjoint kernels, numba and Triton (``None``: none, or array operations
    #: only, see :attr:`device_ready`)
    kernels: Kernels | None = None
    #: the bound adjoint set: the class's numba set, or the set :meth:`bind` bound
    kern: NumbaKernels | TritonKernels | None = None
    #: the rule's ``backward`` runs on the Triton backend (set from ``kernels``; a rule of
    #: array operations only, written for numpy and torch, says ``True`` itself)
    device_ready = False

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        declare_kernels(cls, "device_ready")

    def __init__(self, stage, coeffs, n_in: int):
        self.stage, self.coeffs0, self.n_in = stage, coeffs, int(n_in)
        self._last = (None, coeffs)

    def bind(self, backend: str, device=None, coef=None) -> None:
        """Bind the adjoint kernels of a resolved ``(backend, device)`` on this rule object
        (``backend='numba'``: back to the class's set).  ``coef``: the coefficient cache
        the Triton set uses (default: the device's shared one).  Raises
        :class:`~rtamt.engine.backend.RtamtBackendError` for a rule without a Triton
        path."""
        if backend == "numba":
            self.__dict__.pop("kern", None)
            return
        if not self.device_ready:
            raise RtamtBackendError(f"the gradient rule {type(self).__name__} has no Triton "
                                    "adjoint yet; use backend='numba'")
        if self.kernels is None:
            self.kern = TritonKernels({}, device)
        else:
            self.kern = self.kernels.bind(backend, device)
        if coef is not None:
            self.kern.coef = coef

    def weights(self, th, xp=np):  # pragma: no cover - defined by rules with parameters
        raise NotImplementedError

    def coefficients(self, w, xp) -> tuple:  # pragma: no cover - as above
        raise NotImplementedError

    def learned(self, th) -> dict:
        """The learnable values for ``th`` (numpy), by name."""
        if not self.n_params:
            return {}
        w = self.weights(np.asarray(th, dtype=np.float64))
        return {f.name: getattr(w, f.name) for f in dataclasses.fields(w)}

    def coeffs_for(self, th):
        """The coefficients for ``th`` (float64 numpy; ``None``: the design), designed by
        the stage's ``design`` from :meth:`weights` (the last one is kept)."""
        if th is None or not self.n_params:
            return self.coeffs0
        key = th.tobytes()
        if self._last[0] != key:
            design = type(self.stage).design
            self._last = (key, design(self.stage.params, self.n_in, weights=self.weights(th)))
        return self._last[1]

    def chain(self, th, *grads) -> np.ndarray:
        """The gradient of ``th`` from the gradients ``grads`` of the arrays of
        :meth:`coefficients` (same shapes), by torch's autograd through
        ``coefficients(weights(th))``."""
        import torch

        t = torch.from_numpy(np.array(th, dtype=np.float64)).requires_grad_(True)
        with torch.enable_grad():
            outs = self.coefficients(self.weights(t, torch), torch)
            g_out = tuple(torch.as_tensor(g).detach().to("cpu", torch.float64)
                          for g in grads)     # numpy (host) or tensors (device) alike
            (g,) = torch.autograd.grad(outs, t, g_out)
        return g.numpy()

    def backward(self, coeffs, th, x, state, gy, mu):  # pragma: no cover - per rule
        raise NotImplementedError
