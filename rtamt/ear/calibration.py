"""The calibration stage: the first stage of every model (``model.stages[0]``).

One mapping from digital samples to sound pressure: ``spl_ref`` is the dB SPL of a
digital signal whose RMS is 1.0 (AMT convention: 100).  A sample stream ``x`` then has
the level ``L = 20 log10(rms(x)) + spl_ref`` dB SPL.  :class:`InputCalibration` multiplies
the input by the gain from ``spl_ref`` into the model's internal units and holds the
input's physical limit; the stages after it carry no ``spl_ref``.

Calibration files (``rtamt calibrate``, ``--calibration FILE``) are read and written by
:mod:`rtamt.io.calibration`, outside the library core.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..engine.backend import Kernels, kernel_method
from ..engine.stage import Stage

__all__ = ["InputCalibration", "CalibrationParams", "CalibrationCoeffs", "CalibratedModel",
           "INTERNAL_SPL_REF", "MAX_SPL", "MODEL_SPL_REF_RANGE", "UNITS", "spl_limit",
           "check_spl_ref", "design"]

#: accepted ``spl_ref`` of a model or stage constructor, dB SPL (the same range as the apps'
#: ``--spl-ref``).  The upper end is the models' input limit (``max_spl``, 200 dB SPL; an RMS
#: pressure of one atmosphere is 194 dB SPL): with a larger ``spl_ref`` a sample of
#: magnitude 1.0 is already beyond a model's input limit.  The lower end admits signals
#: stored as sound pressure in small units: micropascals (``spl_ref`` -26 dB) or multiples
#: of 20 uPa (0 dB).
MODEL_SPL_REF_RANGE = (-50.0, 200.0)

#: dB SPL of an RMS of 1.0 in the models' internal units: every stage after a model's
#: :class:`InputCalibration` works in these units (the AMT convention, ``dboffset`` 100, of
#: the adaptation loops of Dau, Püschel & Kohlrausch 1996, JASA 99, 3615, and Dau et al.
#: 1997a, JASA 102, 2892)
INTERNAL_SPL_REF = 100.0
#: default physical limit of a model's input, dB SPL (a sample whose magnitude, taken as an
#: RMS at the model's ``spl_ref``, would exceed it is rejected); above any real sound (an
#: RMS pressure of one atmosphere is 194 dB SPL)
MAX_SPL = 200.0


def spl_limit(max_spl: float, spl_ref: float) -> float:
    """Largest accepted ``|sample|`` for ``max_spl`` dB SPL when RMS 1 = ``spl_ref`` dB SPL."""
    return 10.0 ** ((float(max_spl) - float(spl_ref)) / 20.0)


def _gain_amt(spl_ref: float) -> float:
    """RMS 1 = ``spl_ref`` dB SPL -> RMS 1 = :data:`INTERNAL_SPL_REF` dB SPL."""
    return 10.0 ** ((spl_ref - INTERNAL_SPL_REF) / 20.0)


def _gain_pa(spl_ref: float) -> float:
    """RMS 1 = ``spl_ref`` dB SPL -> sound pressure in Pa (0 dB SPL = 20 uPa)."""
    return 20e-6 * 10.0 ** (spl_ref / 20.0)


#: the internal units an :class:`InputCalibration` maps to -> its gain for a ``spl_ref``
UNITS = {"amt": _gain_amt, "pa": _gain_pa}


def check_spl_ref(value, who: str) -> float:
    """``value`` as a float if it is a usable ``spl_ref`` (dB SPL of a digital RMS of 1.0):
    a real number within :data:`MODEL_SPL_REF_RANGE`.  Else a ``ValueError`` naming ``who``
    (the model or stage), the parameter and the value.  :class:`InputCalibration` and the
    loudness models call it in their constructors."""
    lo, hi = MODEL_SPL_REF_RANGE
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{who}: spl_ref must be a number (dB SPL of a digital RMS of 1.0), "
                         f"got {value!r}") from None
    if isinstance(value, bool) or not lo <= v <= hi:     # nan fails both comparisons
        raise ValueError(
            f"{who}: spl_ref={value!r} is not a finite level within {lo:g} to {hi:g} dB SPL "
            "(spl_ref is the dB SPL of a digital RMS of 1.0; 100 is the AMT convention)")
    return v


@dataclasses.dataclass(frozen=True)
class CalibrationParams:
    """spl_ref: dB SPL of a digital RMS of 1.0; unit: the internal units (``'amt'`` or
    ``'pa'``, see :data:`UNITS`)."""

    spl_ref: float = INTERNAL_SPL_REF
    unit: str = "amt"


@dataclasses.dataclass(frozen=True)
class CalibrationCoeffs:
    """gain: factor from input samples to internal units (float64); g64, g32: the same as
    a (1,) float64 array and rounded to a (1,) float32 array (what a float64 or float32
    block is multiplied by)."""

    gain: float
    g64: np.ndarray
    g32: np.ndarray


def design(params: CalibrationParams, n_in: int | None = None) -> CalibrationCoeffs:
    """The gain of ``params.unit`` for ``params.spl_ref`` (see :data:`UNITS`)."""
    g = float(UNITS[params.unit](float(params.spl_ref)))
    return CalibrationCoeffs(gain=g, g64=np.array([g]), g32=np.array([g], np.float32))


def scale(x, gain, y):
    """``y = x * gain`` elementwise (time-major signal ``x`` (B, T), ``gain`` a (1,) array
    of ``x``'s dtype, ``y`` an array of ``x``'s shape and dtype): one correctly rounded
    product per sample, numpy's (no recursion to compile).  Returns ``y``."""
    return np.multiply(x, gain, out=y)


def _triton():
    """The Triton twin (:mod:`rtamt.ear.calibration_triton`), imported on first binding."""
    from . import calibration_triton
    return (calibration_triton.scale,)


class InputCalibration(Stage):
    """The first stage of a model: digital samples (RMS 1 = ``spl_ref`` dB SPL) times
    :attr:`gain` into the model's internal units, with the input's physical limit.
    Stateless; ``(T,)`` / ``(batch, T)`` -> the same shape.

    ``unit``: ``'amt'`` (RMS 1 = :data:`INTERNAL_SPL_REF` = 100 dB SPL, gain
    ``10^((spl_ref - 100)/20)``), or ``'pa'`` (sound pressure in Pa, gain
    ``20e-6 * 10^(spl_ref/20)``).  The stages after it carry no ``spl_ref``: their designs
    use the internal units.

    Physical limit: a block with a sample beyond :attr:`limit` (= :attr:`input_limit`)
    ``= 10^((max_spl - spl_ref)/20)`` (``max_spl`` dB SPL, default :data:`MAX_SPL`,
    settable; not part of the design) is rejected by the model's input check like NaN,
    naming the block and channel.  A chain headed by this stage takes its input limit from
    it (``Chain.input_limit``).

    The product is taken in the block's dtype (``float32(x) * float32(gain)`` for float32
    input), into the chain's work buffer; with a gain of 1 the block itself is passed on
    (never written).  It is not one of a chain's outputs (:attr:`internal`).  ``who``
    names the model in the error for a bad ``spl_ref`` (see :func:`check_spl_ref`).
    """

    name = "calibration"
    in_kind = "signal"
    Params = CalibrationParams
    design = staticmethod(design)
    kernels = Kernels(numba=(scale,), triton=_triton)
    #: a chain's outputs leave this stage out (its output is the chain's input, scaled)
    internal = True

    def __init__(self, spl_ref: float = INTERNAL_SPL_REF, *, who: str = "model",
                 unit: str = "amt", max_spl: float = MAX_SPL):
        v = check_spl_ref(spl_ref, who)
        if unit not in UNITS:
            raise ValueError(f"{who}: calibration unit must be one of {sorted(UNITS)}, "
                             f"got {unit!r}")
        super().__init__(CalibrationParams(spl_ref=v, unit=unit))
        self.max_spl = max_spl

    def __repr__(self):
        return (f"InputCalibration(spl_ref={self.spl_ref:g}, unit={self.unit!r}, "
                f"max_spl={self.max_spl:g})")

    @property
    def spl_ref(self) -> float:
        """dB SPL of a digital RMS of 1.0."""
        return self.params.spl_ref

    @property
    def unit(self) -> str:
        return self.params.unit

    @property
    def gain(self) -> float:
        """Factor from input samples to internal units (float64)."""
        return self.coeffs.gain

    @property
    def limit(self) -> float:
        """Largest accepted ``|sample|`` of the input: ``10^((max_spl - spl_ref)/20)``."""
        return spl_limit(self.max_spl, self.params.spl_ref)

    input_limit = limit

    def limit_text(self) -> str:
        """What the limit is, for the message of a rejected block."""
        return f"max_spl {self.max_spl:g} dB SPL at spl_ref {self.params.spl_ref:g}"

    @staticmethod
    def init_state(*layout) -> dict:
        """No state, whatever the layout (``(coeffs, batch, n_in, dtype)`` in a sample
        chain, ``(rows,)`` where a loudness model asks it like its frame stages)."""
        return {}

    @kernel_method
    def process_tm(stage, coeffs, state, x, out=None):
        """``x`` (B, T) times the gain in ``x``'s dtype, into ``out`` where it fits; ``x``
        itself for a gain of 1."""
        if coeffs.gain == 1.0:
            return x
        k = stage.kern
        g = k.coef(coeffs.g64 if k.is64(x) else coeffs.g32)
        return k.scale(x, g, k.buffer(out, x.shape, x))

    def _to_public(self, yt, lead):
        """A chain's outputs go public through its first stage: a signal stage's (B, T)
        output as ``lead + (T,)`` (a view), a channel stage's (B, T, C) as the base does."""
        if yt.ndim == 2:
            return yt.reshape(tuple(lead) + (yt.shape[-1],))
        return super()._to_public(yt, lead)

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("calibration-94dB", dict(spl_ref=94.0)),)


class CalibratedModel:
    """Mixin of the models headed by an :class:`InputCalibration` (``self.calibration``):
    their ``spl_ref`` and ``max_spl`` are the calibration stage's."""

    calibration: InputCalibration

    @property
    def spl_ref(self) -> float:
        """dB SPL of a digital RMS of 1.0 (the calibration stage's)."""
        return self.calibration.spl_ref

    @property
    def max_spl(self) -> float:
        """Physical limit of the input, dB SPL (not part of the design)."""
        return self.calibration.max_spl

    @max_spl.setter
    def max_spl(self, value: float) -> None:
        self.calibration.max_spl = value

