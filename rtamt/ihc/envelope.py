"""Inner-hair-cell envelope extraction: half-wave rectification + low-pass (streaming).

``y = LP(max(x, 0))`` where LP is ``iterations`` cascaded Butterworth low-passes of
``order`` (bilinear design, ``scipy.signal.butter``).  Presets (AMT ``ihcenvelope``):

=================  ==========  =====  ==========  ===============================
preset             cutoff Hz   order  iterations  reference
=================  ==========  =====  ==========  ===============================
``dau1996``        1000        1      1           Dau et al. 1996a (AMT 'ihc_dau')
``breebaart2001``  2000        1      5           Breebaart et al. 2001 (~770 Hz)
``king2019``       1500        1      1           King et al. 2019
``lindemann``      800         1      1           Lindemann 1986
=================  ==========  =====  ==========  ===============================

State: the SOS memories ``zi`` (batch, sections, 2, C).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import signal

from ..engine.sos import SharedSOSStage

PRESETS = {
    "dau1996": (1000.0, 1, 1),
    "breebaart2001": (2000.0, 1, 5),
    "king2019": (1500.0, 1, 1),
    "lindemann": (800.0, 1, 1),
}


@dataclass(frozen=True)
class IHCEnvelopeParams:
    """fs (Hz); preset (see module table); cutoff (Hz), order, iterations override it."""

    fs: float
    preset: str = "dau1996"
    cutoff: float | None = None
    order: int | None = None
    iterations: int | None = None


@dataclass(frozen=True)
class IHCEnvelopeCoeffs:
    """``sos`` (S, 6) = ``iterations`` copies of the Butterworth low-pass sections."""

    fs: float
    cutoff: float
    order: int
    iterations: int
    sos: np.ndarray


def design(params: IHCEnvelopeParams, n_in=None) -> IHCEnvelopeCoeffs:
    if params.preset not in PRESETS:
        raise ValueError(f"unknown IHC preset {params.preset!r}; choose from {sorted(PRESETS)}")
    fc0, n0, it0 = PRESETS[params.preset]
    fc = params.cutoff if params.cutoff is not None else fc0
    n = params.order if params.order is not None else n0
    it = params.iterations if params.iterations is not None else it0
    if not 0 < fc < params.fs / 2:
        raise ValueError(f"IHC cutoff {fc} Hz must lie in (0, fs/2 = {params.fs / 2})")
    if n < 1 or it < 1:
        raise ValueError(f"order and iterations must be >= 1, got {n}, {it}")
    sos1 = signal.butter(n, fc, btype="low", fs=params.fs, output="sos")
    sos = np.ascontiguousarray(np.tile(sos1, (it, 1)))
    return IHCEnvelopeCoeffs(params.fs, float(fc), int(n), int(it), sos)


class IHCEnvelope(SharedSOSStage):
    """Streaming IHC envelope: ``(…, C, T)`` -> same shape."""

    name = "ihc"
    Params = IHCEnvelopeParams
    design = staticmethod(design)
    rectify = True

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (*(Example(f"ihc-{p}", dict(fs=48000.0, preset=p), "bands")
                  for p in ("dau1996", "breebaart2001", "king2019", "lindemann")),
                Example("ihc-custom", dict(fs=48000.0, cutoff=500.0, order=3, iterations=2),
                        "bands"))
