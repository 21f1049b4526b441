"""King, Varnet & Lorenzi (2019) model, streaming.

King A, Varnet L, Lorenzi C (2019). "Accounting for masking of frequency modulation by
amplitude modulation with the modulation filter-bank concept", JASA 145, 2277-2293
(AMT ``king2019``).

Chain (time-last outputs, input ``(T,)`` or ``(batch, T)``):

1. ``gammatone`` ``(…, C, T)``: 4th-order all-pole gammatone, 1 ERB apart between
   ``flow`` and ``fhigh`` (or ``basef`` ± 2 ERB when ``basef`` is given, as in King 2019);
2. ``compression`` ``(…, C, T)``: broken stick, linear below ``knee_db`` = 30 dB SPL and
   ``|x|^0.3`` above (continuous), or a power law (``compression='power'``);
3. ``ihc`` ``(…, C, T)``: half-wave rectification + low-pass (preset ``king2019``);
4. ``adaptation`` ``(…, C, T)``: 1st-order Butterworth high-pass at 3 Hz;
5. ``modfb`` packed ``(…, M*C, T)``: constant-Q Butterworth modulation band-passes,
   2-150 Hz, Q = 1 (5 filters: 2, 5.24, 13.7, 35.9, 94.0 Hz), optional 150 Hz low-pass
   before them (:mod:`rtamt.modulation.king2019`).

Calibration: ``spl_ref`` is the dB SPL of a digital RMS of 1.0; the model scales its input
to RMS 1 = 100 dB SPL (:class:`~rtamt.models._common.ModulationModel`), and the compression
knee is in dB SPL on that scale (the seed's ``dboffset``).

Deviations from the seed's documented behaviour (torch_amt ``King2019``):

* the compression keeps the sign of the gammatone output, ``sign(x) min(|x|, k^(1-n)|x|^n)``
  (King et al. 2019 compress the basilar-membrane waveform; the seed's formula is written
  on ``|y|``, which would full-wave rectify before the hair cell's half-wave rectifier);
* the modulation filterbank is the exact IIR bank; the seed's ``Fast`` FFT variant (up to
  15 % off) is not offered;
* the IHC low-pass is the seed's ``king2019`` IHC preset (see :mod:`rtamt.ihc.envelope`);
  the seed's model page says 1000 Hz for it, its IHC page the preset's value - the IHC
  preset wins, ``ihc={'cutoff': 1000.0}`` gives the other;
* ``subfs`` (downsampling of the output) is not part of the chain yet.
"""
from __future__ import annotations

from ..adaptation.highpass import AdaptHighpass, AdaptHighpassParams
from ..ear.calibration import InputCalibration
from ..filterbank import Gammatone, GammatoneParams
from ..filterbank.erb import erb_number, erb_to_hz
from ..ihc import IHCEnvelope, IHCEnvelopeParams
from ..modulation.king2019 import KingModFilterbank, KingModFilterbankParams
from ..nonlinear import BrokenStick, PowerCompression
from ..nonlinear.compression import CompressionParams
from ._common import ModulationModel

CONFIGS = {"paper": {}}


class King2019(ModulationModel):
    """Streaming King et al. (2019) model (see module docstring)."""

    name = "king2019"
    outputs = ("gammatone", "compression", "ihc", "adaptation", "modfb")

    def __init__(self, fs: float, config: str = "paper", *, flow: float = 80.0,
                 fhigh: float = 8000.0,
                 basef: float | None = None, fc=None, spl_ref: float = 100.0,
                 compression: str = "brokenstick", knee_db: float = 30.0,
                 exponent: float = 0.3, adapt_cutoff: float = 3.0, adapt_order: int = 1,
                 mflow: float = 2.0, mfhigh: float = 150.0, qfactor: float = 1.0,
                 nmod: int | None = None, lp150: bool = False, ihc: dict | None = None,
                 backend: str | None = None, device=None):
        if config not in CONFIGS:
            raise ValueError(f"unknown King2019 config {config!r}; choose from {sorted(CONFIGS)}")
        self.config = config
        self.fs = float(fs)
        cal = InputCalibration(spl_ref, who="King2019")
        if basef is not None and fc is None:
            e = float(erb_number(basef))
            flow, fhigh = float(erb_to_hz(e - 2.0)), float(erb_to_hz(e + 2.0))
        gt = Gammatone(GammatoneParams(fs=self.fs, flow=flow, fhigh=fhigh, spacing=1.0,
                                       basef=basef, fc=None if fc is None else tuple(fc)))
        # the calibration stage maps spl_ref to the internal units (RMS 1 = 100 dB SPL), in
        # which the compression stage places its knee
        cp = CompressionParams(knee_db=knee_db, exponent=exponent)
        if compression == "brokenstick":
            comp = BrokenStick(cp)
        elif compression == "power":
            comp = PowerCompression(cp)
        else:
            raise ValueError(f"compression must be 'brokenstick' or 'power', got {compression!r}")
        comp.name = "compression"
        ih = IHCEnvelope(IHCEnvelopeParams(fs=self.fs, **({"preset": "king2019"} | (ihc or {}))))
        ad = AdaptHighpass(AdaptHighpassParams(fs=self.fs, cutoff=adapt_cutoff, order=adapt_order))
        mf = KingModFilterbank(KingModFilterbankParams(
            fs=self.fs, fc=tuple(gt.coeffs.fc), mflow=mflow, mfhigh=mfhigh, qfactor=qfactor,
            nmod=nmod, lp150=lp150))
        super().__init__([cal, gt, comp, ih, ad, mf], backend=backend, device=device)
