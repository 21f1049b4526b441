"""The gradient rules of the compressions, :class:`rtamt.nonlinear.compression.BrokenStick`
and :class:`~rtamt.nonlinear.compression.PowerCompression` (pointwise, no state)."""
from __future__ import annotations

import numpy as np

from ..engine.grad import StageGrad, lift
from . import compression


class CompressionGrad(StageGrad):
    """Both laws are ``y = sign(x) |x|^n k^(1-n)`` where they compress (broken stick, as
    in King, Varnet & Lorenzi 2019, JASA 145, 2277-2293: ``|x| > k``, else ``y = x``;
    power law: everywhere), so there ``dy/dk = (1 - n) y / k`` and ``dy/dn = y log(|x| /
    k)``.  ``x``, ``y`` and the knee ``k`` are in the models' internal units (an RMS of 1
    is 100 dB SPL); ``n`` is dimensionless.

    Learnable: ``th = [log(k / k0), log(n / n0) (one per exponent)]``, the
    :class:`~rtamt.nonlinear.compression.CompressionWeights`: the knee and the
    exponent(s) stay positive.

    On the device (a Triton-bound layer) ``backward`` runs the same formulas as torch
    operations on the block's device (:meth:`_backward_torch`; ``device_ready``): the
    rule has no adjoint kernel."""

    device_ready = True

    def __init__(self, stage, coeffs, n_in):
        super().__init__(stage, coeffs, n_in)
        self.n_params = 1 + coeffs.exponent.size

    def weights(self, th, xp=np):
        c = self.coeffs0
        return compression.CompressionWeights(c.knee * xp.exp(th[0]),
                                              lift(c.exponent, th, xp) * xp.exp(th[1:]))

    def coefficients(self, w, xp):
        return w.knee, w.exponent

    def backward(self, coeffs, th, x, state, gy, mu):
        if not isinstance(x, np.ndarray):
            return self._backward_torch(coeffs, th, x, gy)
        n, k, ax = coeffs.exponent, coeffs.knee, np.abs(x)
        gx = gy * self.slope(n, k, ax)
        if th is None:
            return gx, None
        act = self.active(ax, k)
        y = type(self.stage).process_tm(coeffs, {}, x)      # numpy: the numba set
        with np.errstate(divide="ignore", invalid="ignore"):
            gyy = np.where(act, gy * y, 0.0)
            g_n = (gyy * np.log(np.where(act, ax, k) / k)).sum(axis=(0, 1))
        g_k = (1.0 - n) / k * gyy
        g_n = g_n.sum(keepdims=True) if n.size == 1 else g_n
        return gx, self.chain(th, g_k.sum(), g_n)

    def _backward_torch(self, coeffs, th, x, gy):
        """:meth:`backward` on float64 tensors of one device (``x``, ``gy``; the output
        ``y`` that the parameter gradients need is recomputed by :meth:`value`)."""
        import torch

        n, k = self.kern.coef(coeffs.exponent), float(coeffs.knee)
        ax = x.abs()
        gx = gy * self.slope_t(n, k, ax)
        if th is None:
            return gx, None
        act = self.active(ax, k)
        gyy = torch.where(act, gy * self.value(x, ax, n, k), 0.0)
        g_n = (gyy * torch.log(torch.where(act, ax, k) / k)).sum(dim=(0, 1))
        g_k = ((1.0 - n) / k * gyy).sum()
        g_n = g_n.sum().reshape(1) if n.numel() == 1 else g_n
        return gx, self.chain(th, g_k, g_n)


class BrokenStickGrad(CompressionGrad):
    """Below the knee ``y = x`` (slope 1); above, ``dy/dx = n |x|^(n-1) k^(1-n)``."""

    @staticmethod
    def active(ax, k):
        return ax > k

    @staticmethod
    def slope(n, k, ax):
        return np.where(ax > k, n * np.maximum(ax, k) ** (n - 1) * k ** (1 - n), 1.0)

    @staticmethod
    def slope_t(n, k, ax):
        """:meth:`slope` on tensors."""
        import torch

        return torch.where(ax > k, n * ax.clamp(min=k) ** (n - 1) * k ** (1 - n), 1.0)

    @staticmethod
    def value(x, ax, n, k):
        """The output ``y`` on tensors (the kernel's formula)."""
        import torch

        return torch.where(ax > k, torch.sign(x) * ax ** n * k ** (1 - n), x)


class PowerGrad(CompressionGrad):
    """``y = sign(x) |x/k|^n k``: ``dy/dx = n |x/k|^(n-1)`` (infinite at ``x = 0`` for
    ``n < 1``: the gradient there is set to 0)."""

    @staticmethod
    def active(ax, k):
        return ax > 0

    @staticmethod
    def slope(n, k, ax):
        with np.errstate(divide="ignore"):
            return np.where(ax > 0, n * (ax / k) ** (n - 1), 0.0)

    @staticmethod
    def slope_t(n, k, ax):
        """:meth:`slope` on tensors."""
        import torch

        return torch.where(ax > 0, n * (ax / k) ** (n - 1), 0.0)

    @staticmethod
    def value(x, ax, n, k):
        """The output ``y`` on tensors (the kernel's formula)."""
        import torch

        return torch.sign(x) * (ax / k) ** n * k
