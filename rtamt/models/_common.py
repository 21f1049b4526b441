"""What the filterbank-and-modulation models (Dau1997, Osses2021, King2019, Paulick2024)
share: centre-frequency accessors and the AMT level convention."""
from __future__ import annotations

from ..engine.contract import SplLimit
from ..engine.stage import Chain


class ModulationModel(SplLimit, Chain):
    """A :class:`Chain` ending in a modulation filterbank stage named ``modfb``.

    ``fc_stage`` names the stage whose coefficients hold the auditory centre frequencies.

    Input beyond :attr:`max_spl` (default 200 dB SPL) is rejected like NaN
    (:attr:`input_limit`).

    Calibration: ``spl_ref`` is the dB SPL of a digital RMS of 1.0.  The model scales every
    input block by :attr:`input_gain` before its first stage, so that the stages see the
    AMT convention of the adaptation loops (RMS 1 = 100 dB SPL, AMT ``dboffset``):
    ``input_gain = 10^((spl_ref - 100)/20)`` (models with other internal units override
    :meth:`_calibration_gain`).  Hence ``M(spl_ref=s)(x)`` equals
    ``M(spl_ref=100)(x * 10^((s - 100)/20))``.
    """

    fc_stage = "gammatone"
    spl_ref = 100.0
    identity_fields = ("fs", "config", "spl_ref")

    def __init__(self, stages, backend: str | None = None, device=None):
        super().__init__(stages)
        self.input_gain = self._calibration_gain()
        if backend is not None or device is not None:
            self.to(device, backend=backend)

    def _calibration_gain(self) -> float:
        return 10.0 ** ((self.spl_ref - 100.0) / 20.0)

    @property
    def fc(self):
        """Auditory centre frequencies (C,), Hz."""
        return self[self.fc_stage].coeffs.fc

    @property
    def mfc(self):
        """Modulation centre frequencies, (C, M) NaN-padded, Hz."""
        return self["modfb"].coeffs.mfc_padded
