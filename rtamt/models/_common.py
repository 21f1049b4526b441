"""What the filterbank-and-modulation models (Dau1997, Osses2021, King2019, Paulick2024)
share: centre-frequency accessors and the AMT level convention."""
from __future__ import annotations

from ..engine.stage import Chain


class ModulationModel(Chain):
    """A :class:`Chain` ending in a modulation filterbank stage named ``modfb``.

    ``fc_stage`` names the stage whose coefficients hold the auditory centre frequencies.
    :meth:`calibrate` maps digital samples (RMS 1 = ``self.spl_ref`` dB SPL) to the AMT
    convention of the adaptation loops (RMS 1 = 100 dB SPL, AMT ``dboffset``):
    ``x * 10^((spl_ref - 100)/20)``; models with other input units override it.
    """

    fc_stage = "gammatone"
    spl_ref = 100.0

    @property
    def fc(self):
        """Auditory centre frequencies (C,), Hz."""
        return self[self.fc_stage].coeffs.fc

    @property
    def mfc(self):
        """Modulation centre frequencies, (C, M) NaN-padded, Hz."""
        return self["modfb"].coeffs.mfc_padded

    def calibrate(self, x):
        g = 10.0 ** ((self.spl_ref - 100.0) / 20.0)
        return x if g == 1.0 else x * g
