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


def design(params: CompressionParams, n_in=None) -> CompressionCoeffs:
    e = np.atleast_1d(np.asarray(params.exponent, dtype=np.float64))
    if e.ndim != 1 or np.any(e <= 0):
        raise ValueError(f"exponent must be > 0 (scalar or per channel), got {params.exponent}")
    return CompressionCoeffs(10.0 ** ((params.knee_db - params.spl_ref) / 20.0), e)


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


def _np_dtype(x):
    return x.dtype if type(x) is np.ndarray else np.dtype(str(x.dtype).split(".")[-1])


class BrokenStick(_Compression):
    """Broken-stick compression, ``(…, C, T)`` -> same shape."""

    name = "brokenstick"
    triton_ready = True

    @staticmethod
    def process_tm(coeffs, state, x, out=None):
        dt = _np_dtype(x)
        n = coeffs.exponent.astype(dt)  # broadcasts over the channel (last) axis
        k = dt.type(coeffs.knee)
        if type(x) is not np.ndarray:     # the Triton backend (rtamt.engine.backend)
            import torch
            kt = _B.triton_module("rtamt.nonlinear.compression_triton")
            y = work_buffer(None, tuple(x.shape), None, like=x)
            return kt.broken_stick(x.contiguous(), y, torch.from_numpy(n),
                                   torch.from_numpy(np.asarray(k ** (1 - n))), float(k))
        ax = np.abs(x)
        comp = np.sign(x) * ax ** n * k ** (1 - n)
        return np.where(ax > k, comp, x)


class PowerCompression(_Compression):
    """Power-law compression, ``(…, C, T)`` -> same shape."""

    name = "power"
    triton_ready = True

    @staticmethod
    def process_tm(coeffs, state, x, out=None):
        dt = _np_dtype(x)
        n = coeffs.exponent.astype(dt)
        k = dt.type(coeffs.knee)
        if type(x) is not np.ndarray:
            import torch
            kt = _B.triton_module("rtamt.nonlinear.compression_triton")
            y = work_buffer(None, tuple(x.shape), None, like=x)
            return kt.power_compression(x.contiguous(), y, torch.from_numpy(n), float(k))
        return np.sign(x) * np.abs(x / k) ** n * k
