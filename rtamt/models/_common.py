"""What the filterbank-and-modulation models (Dau1997, Osses2021, King2019, Paulick2024)
share: the calibration stage at the head of the chain and centre-frequency accessors."""
from __future__ import annotations

from ..ear.calibration import CalibratedModel
from ..engine.stage import Chain


class ModulationModel(CalibratedModel, Chain):
    """A :class:`Chain` headed by an :class:`~rtamt.ear.calibration.InputCalibration` stage
    (``stages[0]``) and ending in a modulation filterbank stage named ``modfb``.

    ``fc_stage`` names the stage whose coefficients hold the auditory centre frequencies.

    Calibration (the first stage, ``stages[0]``, :attr:`calibration`): ``spl_ref`` is the
    dB SPL of a digital RMS of 1.0.  The model scales every input block by :attr:`input_gain` before
    the stages, which work in fixed internal units and carry no ``spl_ref``: the AMT
    convention of the adaptation loops (RMS 1 = 100 dB SPL, AMT ``dboffset``; Dau et al.
    1996a, 1997a), ``input_gain = 10^((spl_ref - 100)/20)``, or sound pressure in Pa for a
    model whose first filter takes it (Paulick2024).  Hence ``M(spl_ref=s)(x)`` equals
    ``M(spl_ref=100)(x * 10^((s - 100)/20))``.  Input beyond :attr:`max_spl` (default 200
    dB SPL, settable per model) is rejected like NaN (:attr:`input_limit`).
    """

    fc_stage = "gammatone"
    identity_fields = ("fs", "config", "spl_ref")

    def __init__(self, stages, backend: str | None = None, device=None):
        super().__init__(stages)
        if backend is not None or device is not None:
            self.to(device, backend=backend)

    @property
    def fc(self):
        """Auditory centre frequencies (C,), Hz."""
        return self[self.fc_stage].coeffs.fc

    @property
    def mfc(self):
        """Modulation centre frequencies, (C, M) NaN-padded, Hz."""
        return self["modfb"].coeffs.mfc_padded
