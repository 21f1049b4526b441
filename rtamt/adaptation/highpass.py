"""Adaptation as a Butterworth high-pass (King et al. 2019), streaming.

King, Varnet & Lorenzi (2019), "Accounting for masking of frequency modulation by amplitude
modulation with the modulation filter-bank concept", JASA 145, 2277-2293: instead of the
adaptation loops of Dau et al. (1996), the IHC envelope is high-pass filtered (first-order
Butterworth, 3 Hz), which removes the DC and the slowest fluctuations - a linear stand-in for
adaptation.  Design: ``scipy.signal.butter(order, fc, 'highpass', fs=fs)`` (bilinear
transform with pre-warped cut-off), run as second-order sections (DF-II transposed, the
difference equations of ``scipy.signal.sosfilt``).

Shapes: ``(…, C, T)`` -> same.  State: the section memories ``zi`` (batch, S, 2, C), zero
at stream start (the stream starts from silence).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import signal

from ..engine.sos import SharedSOSStage


@dataclass(frozen=True)
class AdaptHighpassParams:
    """fs (Hz); cutoff (Hz, King et al. 2019: 3); order (1)."""

    fs: float
    cutoff: float = 3.0
    order: int = 1


@dataclass(frozen=True)
class AdaptHighpassCoeffs:
    fs: float
    cutoff: float
    order: int
    sos: np.ndarray  # (S, 6)


def design(params: AdaptHighpassParams, n_in=None) -> AdaptHighpassCoeffs:
    if not 0 < params.cutoff < params.fs / 2:
        raise ValueError(f"high-pass cutoff {params.cutoff} Hz must lie in (0, fs/2)")
    if params.order < 1:
        raise ValueError(f"order must be >= 1, got {params.order}")
    sos = signal.butter(params.order, params.cutoff, btype="highpass", fs=params.fs,
                        output="sos")
    return AdaptHighpassCoeffs(float(params.fs), float(params.cutoff), int(params.order),
                               np.ascontiguousarray(sos))


class AdaptHighpass(SharedSOSStage):
    """Streaming Butterworth high-pass per channel: ``(…, C, T)`` -> same shape."""

    name = "adaptation"
    Params = AdaptHighpassParams
    design = staticmethod(design)

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("adapt-highpass-king2019", dict(fs=48000.0), "envelopes"),)
