"""Compatibility module: the names ``rtamt.calibration`` held before the calibration
became a stage.

* the calibration stage and the level conventions (:class:`InputCalibration`,
  :data:`INTERNAL_SPL_REF`, :data:`MAX_SPL`, :func:`spl_limit`, :func:`check_spl_ref`,
  ...) live in :mod:`rtamt.ear.calibration` (every model's ``stages[0]``);
* calibration files (:class:`Calibration`, :func:`load`, :func:`save`,
  :func:`measure_tone`, :func:`resolve_spl_ref`, ...) in :mod:`rtamt.io.calibration`.
"""
from __future__ import annotations

from .ear.calibration import (
    INTERNAL_SPL_REF,
    MAX_SPL,
    MODEL_SPL_REF_RANGE,
    UNITS,
    CalibratedModel,
    InputCalibration,
    check_spl_ref,
    spl_limit,
)
from .io.calibration import (
    REFERENCE_DB_RANGE,
    SPL_REF_RANGE,
    Calibration,
    CalibrationError,
    default_path,
    load,
    measure_tone,
    resolve_spl_ref,
    save,
)

__all__ = ["Calibration", "CalibrationError", "REFERENCE_DB_RANGE", "SPL_REF_RANGE",
           "MODEL_SPL_REF_RANGE", "check_spl_ref", "default_path",
           "InputCalibration", "CalibratedModel", "INTERNAL_SPL_REF", "MAX_SPL", "spl_limit",
           "UNITS", "load", "save", "measure_tone", "resolve_spl_ref"]
