"""Osses Vecchi & Kohlrausch (2021) model (Dau1997 lineage with ear filters), streaming.

Osses Vecchi A, Kohlrausch A (2021). "Perceptual similarity between piano notes:
Simulations with a template-based perception model", JASA 149, 3534-3552 (AMT
``osses2021``), building on Dau et al. (1997a) and Jepsen et al. (2008).

Chain (time-last outputs, input ``(T,)`` or ``(batch, T)``):

1. ``headphone`` ``(…, T)``: headphone + outer-ear FIR, Pralong & Carlile (1996) Fig. 1e
   (:class:`rtamt.ear.HeadphoneFilter`);
2. ``middleear`` ``(…, T)``: middle-ear FIR, preset ``jepsen2008``, 0 dB peak gain
   (:class:`rtamt.ear.MiddleEarFilter`);
3. ``gammatone`` ``(…, C, T)``: 4th-order all-pole gammatone, 1 ERB apart from ``flow`` =
   80 Hz up to ``fhigh`` = 8000 Hz;
4. ``ihc`` ``(…, C, T)``: half-wave rectification + five 1st-order 2 kHz low-passes
   (``breebaart2001``, Breebaart et al. 2001);
5. ``adaptloop`` ``(…, C, T)``: five adaptation loops, preset ``osses2021`` (overshoot limit
   5);
6. ``modfb`` packed ``(…, F, T)``: modulation filterbank, preset ``jepsen2008`` (150 Hz
   1st-order pre-filter, upper limit min(fc/4, 150 Hz), 1/sqrt(2) attenuation above 10 Hz;
   see :mod:`rtamt.modulation.modfb`).

Calibration: ``spl_ref`` is the dB SPL of a digital RMS of 1.0; the model scales its input
to the adaptation loops' 100 dB convention itself, as Dau1997 does.

Deviations from the seed's documented behaviour (torch_amt ``Osses2021``):

* the ear filters are minimum-phase only (``phase_type='zero'``, forward-backward
  filtering, needs the future and cannot stream);
* the seed's modulation output is a list of per-channel tensors; rtamt uses the packed
  ``(…, F, T)`` layout of every rtamt modulation stage (``to_padded`` / ``to_ragged``);
* the gammatone grid includes ``flow`` (80 Hz, as the seed's example fc shows) and uses
  the exact 1-ERB spacing (the seed's Dau1997 grid defect - 1.0137 ERB - is not copied).
"""
from __future__ import annotations

from ..adaptation import AdaptLoop, AdaptLoopParams
from ..ear import HeadphoneFilter, HeadphoneParams, MiddleEarFilter, MiddleEarParams
from ..ear.calibration import InputCalibration
from ..filterbank import Gammatone, GammatoneParams
from ..ihc import IHCEnvelope, IHCEnvelopeParams
from ..modulation import ModFilterbank, ModFilterbankParams
from ._common import ModulationModel

CONFIGS = {"paper": {}}


class Osses2021(ModulationModel):
    """Streaming Osses & Kohlrausch (2021) model (see module docstring)."""

    name = "osses2021"
    outputs = ("headphone", "middleear", "gammatone", "ihc", "adaptloop", "modfb")

    def __init__(self, fs: float, config: str = "paper", *, flow: float = 80.0,
                 fhigh: float = 8000.0, spacing: float = 1.0, basef: float | None = None,
                 fc=None, spl_ref: float = 100.0, headphone: dict | None = None,
                 middleear: dict | None = None, ihc: dict | None = None,
                 adapt: dict | None = None, modfb: dict | None = None,
                 backend: str | None = None, device=None):
        if config not in CONFIGS:
            raise ValueError(f"unknown Osses2021 config {config!r}; choose from {sorted(CONFIGS)}")
        self.config = config
        self.fs = float(fs)
        cal = InputCalibration(spl_ref, who="Osses2021")
        hp = HeadphoneFilter(HeadphoneParams(fs=self.fs, **(headphone or {})))
        me = MiddleEarFilter(MiddleEarParams(fs=self.fs, **({"preset": "jepsen2008"} |
                                                             (middleear or {}))))
        gt = Gammatone(GammatoneParams(fs=self.fs, flow=flow, fhigh=fhigh, spacing=spacing,
                                       basef=basef if basef is not None else flow,
                                       fc=None if fc is None else tuple(fc)))
        ih = IHCEnvelope(IHCEnvelopeParams(fs=self.fs, **({"preset": "breebaart2001"} |
                                                           (ihc or {}))))
        ad = AdaptLoop(AdaptLoopParams(fs=self.fs, **({"preset": "osses2021"} | (adapt or {}))))
        mf = ModFilterbank(ModFilterbankParams(fs=self.fs, fc=tuple(gt.coeffs.fc),
                                               **({"preset": "jepsen2008"} | (modfb or {}))))
        super().__init__([cal, hp, me, gt, ih, ad, mf], backend=backend, device=device)
