"""The stages that Moore2016's ``config='tvl2018'`` adds to the loudness chain, to
reproduce the Cambridge group's time-varying loudness program (its numpy port,
MalcolmSlaney/LoudnessModel ``tvl2018.py``; Moore, Glasberg, Varathanathan &
Schlittenlacher 2016, Trends in Hearing 20, with the time constants of Moore, Jervis,
Harries & Schlittenlacher 2018, J. Acoust. Soc. Am. 143, 1504-1513):

* :class:`EarFIR`: the outer/middle ear as a linear-phase FIR on the waveform (the ANSI
  S3.4-2007 transfer function of the chosen sound field, 4097 taps at 32 kHz, designed by
  :class:`rtamt.ear.OuterMiddleEarFilter` with ``phase='linear'``): sample rows in, sample
  rows out (``fr['rows']``), between the calibration and the spectrum; its delay
  (``order / 2`` samples) is the model's to report (``latency_s``, ``frame_time``);
* :class:`ComponentFloor`: drops the spectral components of a frame that are not above
  ``max(M, 10^(floor_db/10)) 10^(-range_db/10)``, ``M`` the frame's largest component
  over both ears of a stream (the program keeps components above the maximum minus 60 dB
  and above -30 dB SPL): ``fr['P']`` (R F, J) -> ``fr['P']``.
"""
from __future__ import annotations

import dataclasses
import types

import numpy as np
from numba import njit

from ..data import ansi_s34
from ..ear.filters import OuterMiddleEarFilter, OuterMiddleEarParams
from ..ear.fir import FIR, fir_delay, fir_from_table, make_coeffs, streaming_taps
from ..engine.backend import Kernels
from ..engine.jit import JIT as _JIT
from ..engine.stage import SAMPLES, Stage
from .frames import FrameStage

__all__ = ["EarFIRParams", "EarFIR", "ComponentFloorParams", "ComponentFloor",
           "component_floor"]


def ear_gain_linear_db(f, field: str = "free", middle_ear: str = "2007"):
    """Outer + middle ear gain (dB) at ``f`` Hz from the ANSI S3.4-2007 tables
    (:mod:`rtamt.data.ansi_s34`), interpolated linearly in dB over linear frequency and held
    beyond the tables' ends.  The Cambridge program's 32 kHz filters follow this form: with
    it the pre-ringing of the designed FIR near 1 kHz matches theirs within 0.3 dB, with
    :func:`rtamt.loudness.ansi.ear_gain_db`'s smooth (PCHIP in log frequency) curve it
    decays 4-10 dB faster, the kinks at the table points being what rings."""
    if field not in ansi_s34.FIELDS:
        raise ValueError(f"field must be one of {ansi_s34.FIELDS}, got {field!r}")
    if middle_ear not in ansi_s34.MIDDLE_EAR:
        raise ValueError(f"middle_ear must be one of {sorted(ansi_s34.MIDDLE_EAR)}, got "
                         f"{middle_ear!r}")
    f = np.asarray(f, dtype=np.float64)
    g = np.interp(f, ansi_s34.F_MIDDLE, ansi_s34.MIDDLE_EAR[middle_ear])
    if field != "eardrum":
        outer = ansi_s34.OUTER_FREE if field == "free" else ansi_s34.OUTER_DIFFUSE
        g = g + np.interp(f, ansi_s34.F_OUTER, outer)
    return g


@dataclasses.dataclass(frozen=True)
class EarFIRParams:
    """fs (Hz); field ('free' | 'diffuse' | 'eardrum'); middle_ear ('2007' ANSI S3.4-2007 |
    '1997'); order: FIR order (4096: 4097 taps, as the program at 32 kHz); interp: the
    transfer function between the table points, ``'linear'`` (dB linear in Hz,
    :func:`ear_gain_linear_db`, the program's) or ``'pchip'`` (rtamt's
    :func:`rtamt.loudness.ansi.ear_gain_db`, :class:`rtamt.ear.OuterMiddleEarFilter`)."""

    fs: float = 32000.0
    field: str = "free"
    middle_ear: str = "2007"
    order: int = 4096
    interp: str = "linear"


class EarFIR(FrameStage):
    """The outer/middle ear as a linear-phase FIR on each sample row (see the module
    docstring): ``fr['rows']`` (R, T) float64 -> ``fr['rows']`` (R, T), delayed by
    :attr:`delay` samples.  State ``hist`` (R, ntaps - 1): the last input samples of each
    row.  The kernel is the ear filters' (:func:`rtamt.ear.fir.fir_tm`, any partition gives
    the same bits; its Triton twin :func:`rtamt.ear.fir_triton.fir_tm`)."""

    name = "ear_fir"
    Params = EarFIRParams
    kernels = FIR
    flow_in = SAMPLES
    flow_out = SAMPLES
    reads = ("rows",)
    writes = ("rows",)

    @staticmethod
    def design(params: EarFIRParams):
        """The linear-phase FIR: ``'pchip'`` is :class:`rtamt.ear.OuterMiddleEarFilter`'s
        design (``phase='linear'``); ``'linear'`` the same frequency-sampling design
        (``scipy.signal.firwin2`` on its grid of ``1 + 2^ceil(log2(ntaps))`` points, Hamming
        window) of :func:`ear_gain_linear_db`."""
        if params.interp not in ("linear", "pchip"):
            raise ValueError(f"interp must be 'linear' or 'pchip', got {params.interp!r}")
        if params.interp == "pchip":
            comp = "tfOuterMiddle2007" if params.middle_ear == "2007" else "tfOuterMiddle1997"
            return OuterMiddleEarFilter(OuterMiddleEarParams(
                fs=float(params.fs), compensation=comp, field=params.field,
                order=int(params.order), phase="linear")).coeffs
        fs, order = float(params.fs), int(params.order)
        freq = np.linspace(0.0, fs / 2, 1 + (1 << int(np.ceil(np.log2(order + 1)))))
        gain = 10.0 ** (ear_gain_linear_db(freq, params.field, params.middle_ear) / 20.0)
        ft = ansi_s34.F_MIDDLE[ansi_s34.F_MIDDLE < fs / 2]
        table = np.c_[ft, 10.0 ** (ear_gain_linear_db(ft, params.field,
                                                      params.middle_ear) / 20.0)]
        _, h_lin = fir_from_table(fs, freq, gain, order)
        return make_coeffs(fs, streaming_taps("linear", None, h_lin), h_lin, freq, gain,
                           table, 1.0)

    @property
    def delay(self) -> float:
        """The filter's constant delay (samples): ``order / 2``."""
        return fir_delay("linear", self.coeffs.ntaps)

    def _set_backend(self, backend: str, device, kern=False) -> None:
        """The taps as the bound kernel takes them (:attr:`kcoeffs`: ``h``, a float64 array
        on numba, a tensor on the device on Triton); the design itself is frozen."""
        Stage._set_backend(self, backend, device, kern)
        k = self.__dict__.get("kern")
        self.kc = self.coeffs if k is None else types.SimpleNamespace(h=k.coef(self.coeffs.h))

    def init_state(self, R: int) -> dict:
        return {"hist": np.zeros((R, self.coeffs.ntaps - 1))}

    def process_tm(self, fr: dict, state: dict) -> None:
        x = fr["rows"]
        R, T = x.shape
        k = self.kern
        y = k.empty((R, T), x)
        h = state["hist"]
        k.fir_tm(self.kc.h, h.reshape(R, h.shape[1], 1), k.contiguous(x).reshape(R, T, 1),
                 y.reshape(R, T, 1))
        fr["rows"] = y

    @classmethod
    def grad_rule(cls):
        """The gradient rule (:class:`rtamt.loudness.tvl2018_grad.EarFIRGrad`)."""
        from .tvl2018_grad import EarFIRGrad

        return EarFIRGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("ear-fir", dict(fs=32000.0, order=64), "frames"),)


@njit(**_JIT)
def component_floor(P, R, F, pair, thr_min, rel):
    """Zero the components of each frame not above ``max(M, thr_min) / rel``, ``M`` the
    frame's largest component over the ``pair`` rows of its stream (2: rows (2b, 2b + 1),
    1: each row alone).  P (R F, J) linear powers, row r frame f at ``r F + f``, in place."""
    J = P.shape[1]
    for b in range(R // pair):
        for f in range(F):
            m = thr_min
            for e in range(pair):
                row = P[(b * pair + e) * F + f]
                for j in range(J):
                    if row[j] > m:
                        m = row[j]
            thr = m / rel
            for e in range(pair):
                row = P[(b * pair + e) * F + f]
                for j in range(J):
                    if not row[j] > thr:
                        row[j] = 0.0


def _triton():
    from . import tvl2018_triton as t

    return (t.component_floor,)


@dataclasses.dataclass(frozen=True)
class ComponentFloorParams:
    """range_db: components not more than this far below the frame's maximum are dropped
    (60 dB); floor_db: nor those below this level (dB SPL at the cochlea, -30 dB); the
    program's ``max(M, 10^3) / 10^6``."""

    range_db: float = 60.0
    floor_db: float = -30.0


class ComponentFloor(FrameStage):
    """The program's component floor (see the module docstring): ``fr['P']`` (R F, J) ->
    ``fr['P']`` with the dropped components 0; no state.  The rows of a stereo stream are
    ear pairs (2b, 2b + 1) whose frames share one maximum; a single row (a diotic stream)
    is its own pair."""

    name = "component_floor"
    Params = ComponentFloorParams
    kernels = Kernels(numba=(component_floor,), triton=_triton)
    reads = ("P",)
    writes = ("P",)
    rows_per_stream = 2

    @staticmethod
    def design(params: ComponentFloorParams) -> tuple:
        rel = 10.0 ** (params.range_db / 10.0)
        return (10.0 ** ((params.floor_db + params.range_db) / 10.0), rel)

    def process_tm(self, fr: dict, state: dict) -> None:
        R, F = int(fr["R"]), int(fr["F"])
        thr_min, rel = self.coeffs
        self.kern.component_floor(fr["P"], R, F, 2 if R % 2 == 0 else 1, thr_min, rel)

    @classmethod
    def grad_rule(cls):
        """The gradient rule (:class:`rtamt.loudness.tvl2018_grad.ComponentFloorGrad`)."""
        from .tvl2018_grad import ComponentFloorGrad

        return ComponentFloorGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("component-floor", {}, "frames"),)
