"""Instantaneous compression stages (stateless; per-channel exponents allowed).

* Broken stick (e.g. King et al. 2019, JASA 145, 2277; Lopez-Poveda & Meddis 2001
  for the broken-stick I/O idea): ``y = x`` for ``|x| <= knee``, else
  ``y = sign(x) |x|^n knee^(1-n)`` (continuous at the knee).
* Power: ``y = sign(x) |x / knee|^n knee``.

``knee = 10^((knee_db - 100)/20)`` (knee in dB SPL; the input is in the models' internal
units, RMS 1 = 100 dB SPL, see :mod:`rtamt.ear.calibration`).  ``exponent`` is a scalar or
one value per channel.
These stages have no state; they still follow the stage contract so they compose.

Kernels: :func:`broken_stick` and :func:`power_compression` (numpy, here: no recursion to
compile) and their Triton twins in :mod:`rtamt.nonlinear.compression_triton`; the gradient
rules are in :mod:`rtamt.nonlinear.compression_grad`.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from ..ear.calibration import INTERNAL_SPL_REF
from ..engine.backend import Kernels, kernel_method
from ..engine.stage import RtamtInputError, Stage


@dataclass(frozen=True)
class CompressionParams:
    """knee_db (dB SPL of the internal units, RMS 1 = 100 dB SPL), exponent (scalar or
    per-channel tuple)."""

    knee_db: float = 30.0
    exponent: float | tuple = 0.3


@dataclass(frozen=True)
class CompressionCoeffs:
    knee: float
    exponent: np.ndarray  # (1,) or (C,)


@dataclass(frozen=True)
class CompressionWeights:
    """The learnable values of the design (:mod:`rtamt.nn`): the ``knee`` in the model's
    linear units and the ``exponent`` (1,) or (C,) (numpy, or torch tensors where a
    gradient must reach them).  They are the coefficients themselves."""

    knee: float
    exponent: np.ndarray


def design(params: CompressionParams, n_in=None,
           weights: CompressionWeights | None = None) -> CompressionCoeffs:
    """The coefficients of ``params``; ``weights`` (optional) replaces the knee and the
    exponent(s) the params give."""
    e = np.atleast_1d(np.asarray(params.exponent, dtype=np.float64))
    if e.ndim != 1 or np.any(e <= 0):
        raise ValueError(f"exponent must be > 0 (scalar or per channel), got {params.exponent}")
    if weights is None:
        weights = CompressionWeights(10.0 ** ((params.knee_db - INTERNAL_SPL_REF) / 20.0), e)
    elif np.shape(weights.exponent) != e.shape:
        raise ValueError(f"weights.exponent has shape {np.shape(weights.exponent)}, the "
                         f"params give {e.shape}")
    return CompressionCoeffs(weights.knee, weights.exponent)


_TABLES: dict = {}


def _tables(coeffs, dt: np.dtype):
    """``(exponent, knee^(1 - exponent), [knee])`` in dtype ``dt``, once per design and
    dtype (kept while ``coeffs`` lives), so that every block hands the kernels the same
    arrays (the Triton backend's coefficient cache keeps one device copy of each)."""
    key = (id(coeffs), dt.str)
    hit = _TABLES.get(key)
    if hit is None or hit[0]() is not coeffs:
        n = coeffs.exponent.astype(dt)
        k = dt.type(coeffs.knee)
        hit = _TABLES[key] = (weakref.ref(coeffs), n, np.asarray(k ** (1 - n)),
                              np.array([k], dt))
        weakref.finalize(coeffs, _TABLES.pop, key, None)
    return hit[1:]


def broken_stick(x, y, exponent, factor, knee):
    """Broken-stick compression of time-major ``x`` (…, C): ``x`` where ``|x| <= k``,
    else ``sign(x) |x|^n factor`` (``factor = k^(1-n)``); ``exponent``, ``factor``: (1,)
    or (C,), ``knee``: (1,), all in ``x``'s dtype.  Returns a new array (``y`` is
    ignored: numpy makes its own result)."""
    k = knee[0]
    ax = np.abs(x)
    comp = np.sign(x) * ax ** exponent * factor
    return np.where(ax > k, comp, x)


def power_compression(x, y, exponent, knee):
    """Power-law compression ``sign(x) |x/k|^n k`` of time-major ``x`` (arrays as in
    :func:`broken_stick`; a new array is returned)."""
    k = knee[0]
    return np.sign(x) * np.abs(x / k) ** exponent * k


def _triton():
    """The Triton twins (:mod:`rtamt.nonlinear.compression_triton`), imported on first
    binding."""
    from . import compression_triton
    return (compression_triton.broken_stick, compression_triton.power_compression)


#: both compression laws, numpy and Triton
COMPRESSION = Kernels(numba=(broken_stick, power_compression), triton=_triton)


class _Compression(Stage):
    Params = CompressionParams
    design = staticmethod(design)
    kernels = COMPRESSION

    def _coeffs_for(self, n_in):
        n = self.coeffs.exponent.size
        if n not in (1, n_in):
            raise RtamtInputError(f"{self.name}: {n} exponents for {n_in} channels")
        return self.coeffs

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        return {}

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        k = stage.kern
        x = k.contiguous(x)
        n, f, kn = _tables(coeffs, k.dtype(x))
        c = k.coef
        if stage.broken:
            return k.broken_stick(x, None, c(n), c(f), c(kn))
        return k.power_compression(x, None, c(n), c(kn))

    @classmethod
    def examples(cls):
        return ()                            # a base class: its subclasses run


class BrokenStick(_Compression):
    """Broken-stick compression, ``(…, C, T)`` -> same shape."""

    name = "brokenstick"
    broken = True

    @classmethod
    def grad_rule(cls):
        from .compression_grad import BrokenStickGrad
        return BrokenStickGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("brokenstick-per-channel", {}, "bands",
                        per_channel={"exponent": (0.2, 0.8)}),)


class PowerCompression(_Compression):
    """Power-law compression, ``(…, C, T)`` -> same shape."""

    name = "power"
    broken = False

    @classmethod
    def grad_rule(cls):
        from .compression_grad import PowerGrad
        return PowerGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("power-per-channel", {}, "bands",
                        per_channel={"exponent": (0.2, 0.8)}),)
