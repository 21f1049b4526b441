"""The calibration stage and the outer- and middle-ear filters (signal -> signal).

* :class:`InputCalibration` - every model's first stage (``model.stages[0]``): digital
  samples into internal units (``spl_ref``), with the input's physical limit.
* :class:`HeadphoneFilter` - headphone + outer ear, Pralong & Carlile (1996).
* :class:`MiddleEarFilter` - middle ear, presets ``lopezpoveda2001`` / ``jepsen2008``.
* :class:`OuterMiddleEarFilter` - ANSI S3.4-2007 / Glasberg-Moore outer + middle ear.

See :mod:`rtamt.ear.filters`; data provenance in ``rtamt/ear/PROVENANCE.md``.
"""
from .calibration import CalibrationParams, InputCalibration
from .filters import (
                      COMPENSATIONS,
                      FIELDS,
                      MIDDLE_EAR_PRESETS,
                      HeadphoneFilter,
                      HeadphoneParams,
                      MiddleEarFilter,
                      MiddleEarParams,
                      OuterMiddleEarFilter,
                      OuterMiddleEarParams,
                      design_headphone,
                      design_middle_ear,
                      design_outer_middle_ear,
                      jepsen2008_table,
                      lopezpoveda2001_table,
                      outer_middle_ear_db,
)
from .fir import FIRCoeffs, FIRSignalStage, minimum_phase

__all__ = ["InputCalibration", "CalibrationParams", "HeadphoneFilter", "HeadphoneParams",
           "MiddleEarFilter", "MiddleEarParams",
           "OuterMiddleEarFilter", "OuterMiddleEarParams", "MIDDLE_EAR_PRESETS", "COMPENSATIONS",
           "FIELDS", "design_headphone", "design_middle_ear", "design_outer_middle_ear",
           "lopezpoveda2001_table", "jepsen2008_table", "outer_middle_ear_db", "FIRCoeffs",
           "FIRSignalStage", "minimum_phase"]
