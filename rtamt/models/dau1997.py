"""Dau, Kollmeier & Kohlrausch (1997a) modulation-filterbank model, streaming.

Dau T, Kollmeier B, Kohlrausch A (1997). "Modeling auditory processing of amplitude
modulation. I. Detection and masking with narrow-band carriers", JASA 102, 2892-2905.

Chain: gammatone (1 ERB) -> IHC envelope (``dau1996``) -> adaptation loops
(``dau1997``) -> modulation filterbank.  Outputs (time-last, input ``(T,)`` or
``(batch, T)``):

* ``gammatone`` ``(…, C, T)``, ``ihc`` ``(…, C, T)``, ``adaptloop`` ``(…, C, T)`` (model units),
* ``modfb`` packed ``(…, F, T)`` (see :mod:`rtamt.modulation.modfb`).

Configurations (``config=``):

* ``'amt0910'`` (**default**): exactly what AMT 0.9.10's ``dau1997_preproc`` computes -
  channels 1 ERB apart anchored at ``basef = 1000`` Hz between 80 and 8000 Hz
  (30 channels at 48 kHz), modulation filters up to ``min(fc/4, 1000 Hz)``, no
  150 Hz pre-filter, no attenuation.  Default because it is the behaviour that
  has ground truth (the AMT reference outputs, reproduced to ~1e-7 in
  ``tests/models/test_amt_reference.py``).
* ``'torch_amt'`` (formerly ``'seed'``, still accepted with a ``DeprecationWarning``):
  torch_amt's documented preset - modulation preset ``dau1997``
  (fixed 150 Hz upper limit, the same 8 filters in every channel) on the same
  1-ERB grid.  The seed's code used 31 channels 1.0137 ERB apart without a
  1 kHz channel and real-only modulation filters; those are known defects and
  are not reproduced.

Every sub-parameter can be overridden (``flow``, ``fhigh``, ``spacing``, ``basef``,
``fc``, ``ihc``, ``adapt``, ``modfb`` keyword dicts).
"""
from __future__ import annotations

import warnings

from ..adaptation import AdaptLoop, AdaptLoopParams
from ..ear.calibration import InputCalibration
from ..filterbank import Gammatone, GammatoneParams
from ..ihc import IHCEnvelope, IHCEnvelopeParams
from ..modulation import ModFilterbank, ModFilterbankParams
from ._common import ModulationModel

CONFIGS = {
    "amt0910": dict(modfb=dict(preset="amt0910")),
    "torch_amt": dict(modfb=dict(preset="dau1997")),
}
#: old configuration names -> current ones
ALIASES = {"seed": "torch_amt"}


class Dau1997(ModulationModel):
    """Streaming Dau et al. (1997a) model (see module docstring)."""

    name = "dau1997"
    outputs = ("gammatone", "ihc", "adaptloop", "modfb")

    def __init__(self, fs: float, config: str = "amt0910", *, flow: float = 80.0,
                 fhigh: float = 8000.0, spacing: float = 1.0, basef: float | None = 1000.0,
                 fc=None, spl_ref: float = 100.0, ihc: dict | None = None,
                 adapt: dict | None = None, modfb: dict | None = None,
                 backend: str | None = None, device=None):
        if config in ALIASES:
            warnings.warn(f"Dau1997 config {config!r} is renamed {ALIASES[config]!r}",
                          DeprecationWarning, stacklevel=2)
            config = ALIASES[config]
        if config not in CONFIGS:
            raise ValueError(f"unknown Dau1997 config {config!r}; choose from {sorted(CONFIGS)}")
        self.fs = float(fs)
        self.config = config
        cal = InputCalibration(spl_ref, who="Dau1997")
        gt = Gammatone(GammatoneParams(fs=self.fs, flow=flow, fhigh=fhigh, spacing=spacing,
                                       basef=basef, fc=None if fc is None else tuple(fc)))
        ih = IHCEnvelope(IHCEnvelopeParams(fs=self.fs, **(ihc or {})))
        ad = AdaptLoop(AdaptLoopParams(fs=self.fs, **(adapt or {"preset": "dau1997"})))
        mkw = dict(CONFIGS[config]["modfb"])
        mkw.update(modfb or {})
        mf = ModFilterbank(ModFilterbankParams(fs=self.fs, fc=tuple(gt.coeffs.fc), **mkw))
        super().__init__([cal, gt, ih, ad, mf], backend=backend, device=device)
