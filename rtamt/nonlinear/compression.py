"""Instantaneous compression stages (stateless; per-channel exponents allowed).

* Broken stick (e.g. King et al. 2019, JASA 145, 2277; Lopez-Poveda & Meddis 2001
  for the broken-stick I/O idea): ``y = x`` for ``|x| <= knee``, else
  ``y = sign(x) |x|^n knee^(1-n)`` (continuous at the knee).
* Power: ``y = sign(x) |x / knee|^n knee``.

``knee = 10^((knee_db - spl_ref)/20)`` (knee in dB SPL, ``spl_ref`` = dB SPL of a
digital RMS of 1).  ``exponent`` is a scalar or one value per channel.
These stages have no state; they still follow the stage contract so they compose.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine import backend as _B
from ..engine.stage import RtamtInputError, Stage, work_buffer


@dataclass(frozen=True)
class CompressionParams:
    """knee_db (dB SPL), exponent (scalar or per-channel tuple), spl_ref (dB SPL)."""

    knee_db: float = 30.0
    exponent: float | tuple = 0.3
    spl_ref: float = 100.0


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
        weights = CompressionWeights(10.0 ** ((params.knee_db - params.spl_ref) / 20.0), e)
    elif np.shape(weights.exponent) != e.shape:
        raise ValueError(f"weights.exponent has shape {np.shape(weights.exponent)}, the "
                         f"params give {e.shape}")
    return CompressionCoeffs(weights.knee, weights.exponent)


class _Compression(Stage):
    Params = CompressionParams
    design = staticmethod(design)

    def _coeffs_for(self, n_in):
        n = self.coeffs.exponent.size
        if n not in (1, n_in):
            raise RtamtInputError(f"{self.name}: {n} exponents for {n_in} channels")
        return self.coeffs

    @staticmethod
    def init_state(coeffs, batch, n_in, dtype):
        return {}


_TABLES: dict = {}


def _tables(coeffs, dt: np.dtype):
    """``(exponent, knee^(1 - exponent), [knee])`` in dtype ``dt``, computed as the numpy
    path computes them, once per design and dtype (kept with a reference to ``coeffs``),
    so that the Triton path hands the backend's coefficient cache the same arrays every
    block."""
    key = (id(coeffs), dt.str)
    hit = _TABLES.get(key)
    if hit is None or hit[0] is not coeffs:
        n = coeffs.exponent.astype(dt)
        k = dt.type(coeffs.knee)
        hit = _TABLES[key] = (coeffs, n, np.asarray(k ** (1 - n)), np.array([k], dt))
    return hit[1:]


def _triton(coeffs, x, broken: bool):
    """The Triton backend's compression of time-major tensor ``x``
    (:mod:`rtamt.nonlinear.compression_triton`)."""
    n, f, k = _tables(coeffs, np.dtype(str(x.dtype).removeprefix("torch.")))
    c = _B.coef_adapter(x)
    kt = _B.triton_module("rtamt.nonlinear.compression_triton")
    y = work_buffer(None, tuple(x.shape), None, like=x)
    x = x.contiguous()
    if broken:
        return kt.broken_stick(x, y, c(n), c(f), c(k))
    return kt.power_compression(x, y, c(n), c(k))


class BrokenStick(_Compression):
    """Broken-stick compression, ``(…, C, T)`` -> same shape."""

    name = "brokenstick"
    triton_ready = True

    @classmethod
    def grad_rule(cls):
        from .compression_grad import BrokenStickGrad
        return BrokenStickGrad

    @staticmethod
    def process_tm(coeffs, state, x, out=None):
        if type(x) is not np.ndarray:     # the Triton backend (rtamt.engine.backend)
            return _triton(coeffs, x, True)
        n = coeffs.exponent.astype(x.dtype)  # broadcasts over the channel (last) axis
        k = x.dtype.type(coeffs.knee)
        ax = np.abs(x)
        comp = np.sign(x) * ax ** n * k ** (1 - n)
        return np.where(ax > k, comp, x)


class PowerCompression(_Compression):
    """Power-law compression, ``(…, C, T)`` -> same shape."""

    name = "power"
    triton_ready = True

    @classmethod
    def grad_rule(cls):
        from .compression_grad import PowerGrad
        return PowerGrad

    @staticmethod
    def process_tm(coeffs, state, x, out=None):
        if type(x) is not np.ndarray:
            return _triton(coeffs, x, False)
        n = coeffs.exponent.astype(x.dtype)
        k = x.dtype.type(coeffs.knee)
        return np.sign(x) * np.abs(x / k) ** n * k
