"""Outer- and middle-ear filters as streaming signal -> signal stages.

All three are FIR filters designed once from a published frequency-response table by
frequency sampling (``scipy.signal.firwin2`` = MATLAB ``fir2``, as in AMT), converted to
**minimum phase** (:func:`rtamt.ear.fir.minimum_phase`; same magnitude, causal, no
look-ahead) and run by a compiled direct-form convolution whose output does not depend
on the block partition (:mod:`rtamt.ear.fir`).

=====================  ==========================================  =====================
stage (``name``)       data                                        used by
=====================  ==========================================  =====================
HeadphoneFilter        Pralong & Carlile (1996) Fig. 1e: HD 250     Osses et al. (2021)
(``headphone``)        headphones measured at the eardrum
MiddleEarFilter        ``lopezpoveda2001``: stapes velocity,        ``jepsen2008``:
(``middleear``)        Lopez-Poveda & Meddis (2001) Fig. 2b from    Osses2021 (0 dB
                       Goode et al. (1994); ``jepsen2008``:         peak); stapes
                       inverse stapes impedance (Jepsen 2008)       velocity for DRNL
OuterMiddleEarFilter   ANSI S3.4-2007 / Glasberg & Moore outer      Glasberg2002,
(``outerear``)         (free / diffuse field) + middle ear;         Moore2016,
                       ``tfOuterMiddle1997`` / ``2007``             Paulick2024
=====================  ==========================================  =====================

``phase='minimum'`` (all three): the zero-phase (forward-backward, ``filtfilt``)
variant of the seed needs the future of the signal, so it cannot stream and is not
offered; neither is the seed's "delay compensation" (dropping the first samples =
a look-ahead).  The minimum-phase group delay is frequency dependent and short (90 %
of the impulse-response energy within a few tens of taps, tested).
:class:`OuterMiddleEarFilter` also streams its linear-phase design (``phase='linear'``):
the zero-phase response delayed by ``order / 2`` samples (:attr:`OuterMiddleEarFilter.delay`;
2048 at order 4096), as the Cambridge loudness program filters its input (Moore2016's
``config='tvl2018'``).

Shapes: ``(T,)`` or ``(batch, T)`` in, the same shape out.  In a
:class:`~rtamt.engine.stage.Chain` an ear filter may be first and be followed by
another ear filter or by the gammatone filterbank (signal stages).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data import ansi_s34
from .data import (
    GOODE1994_FIG1_104DB,
    JEPSEN2008_STAPES_IMPEDANCE,
    LOPEZPOVEDA2001_FIG2B_EXTRAP,
    PRALONG1996_FIG1E,
)
from .fir import (
    FIRSignalStage,
    check_phase,
    fir_delay,
    fir_from_table,
    make_coeffs,
    streaming_taps,
)

__all__ = ["HeadphoneFilter", "HeadphoneParams", "MiddleEarFilter", "MiddleEarParams",
           "OuterMiddleEarFilter", "OuterMiddleEarParams", "MIDDLE_EAR_PRESETS",
           "COMPENSATIONS", "FIELDS", "design_headphone", "design_middle_ear",
           "design_outer_middle_ear", "lopezpoveda2001_table", "jepsen2008_table",
           "outer_middle_ear_db"]

MIDDLE_EAR_PRESETS = ("lopezpoveda2001", "jepsen2008")
COMPENSATIONS = ("tfOuterMiddle1997", "tfOuterMiddle2007")
FIELDS = ("free", "diffuse", "eardrum")

#: reference pressure of the AMT ``lopezpoveda`` middle-ear scaling ("SPL re 20 uPa")
P_REF = 20e-6
#: peak gain of the AMT ``jepsen2008`` middle-ear filter without normalisation:
#: 1e-8 m/s stapes velocity at 0 dB SPL referred to 104 dB SPL (Lopez-Poveda & Meddis
#: 2001, Fig. 1 caption)
JEPSEN2008_PEAK = 1e-8 * 10.0 ** (104.0 / 20.0)


def _check_fs_order(fs, order):
    if not fs > 0:
        raise ValueError(f"fs must be > 0, got {fs}")
    if int(order) != order or order < 2 or order % 2:
        raise ValueError(f"order must be an even integer >= 2, got {order}")


def _peak_gain(h: np.ndarray) -> float:
    """max |H| on a dense grid (>= 64 points per tap)."""
    nfft = 1 << int(np.ceil(np.log2(64 * h.size)))
    return float(np.abs(np.fft.rfft(h, nfft)).max())


def _below_nyquist(table: np.ndarray, fs: float, who: str) -> np.ndarray:
    """Data points at or above fs/2 are dropped (AMT: ``data(:,1) < fs/2``)."""
    t = table[table[:, 0] < fs / 2]
    if t.shape[0] == 0:
        raise ValueError(f"{who}: no data point below fs/2 = {fs / 2} Hz")
    return t


# =================================================================== headphone
@dataclass(frozen=True)
class HeadphoneParams:
    """fs (Hz); order: FIR order (taps - 1, even; AMT default 512); phase: 'minimum'."""

    fs: float
    order: int = 512
    phase: str = "minimum"


def design_headphone(p: HeadphoneParams, n_in=None):
    """Pralong & Carlile (1996) Fig. 1e through ``firwin2`` with 0 gain at DC and at
    fs/2 (AMT ``headphonefilter``); points at/above fs/2 dropped; no scaling."""
    _check_fs_order(p.fs, p.order)
    check_phase(p.phase, ("minimum",))
    t = _below_nyquist(PRALONG1996_FIG1E, p.fs, "headphone")
    freq = np.r_[0.0, t[:, 0], p.fs / 2]
    gain = np.r_[0.0, t[:, 1], 0.0]
    h_min, h_lin = fir_from_table(p.fs, freq, gain, int(p.order))
    return make_coeffs(p.fs, h_min, h_lin, freq, gain, t, 1.0)


class HeadphoneFilter(FIRSignalStage):
    """Headphone (Sennheiser HD 250) + outer-ear response, Pralong & Carlile (1996).

    ``HeadphoneFilter(fs=44100)``; ``(T,)``/``(batch, T)`` -> same shape.  Gain is the
    measured linear amplitude (about +9 dB at 2.7 kHz, 0 dB below 1 kHz, -21.5 dB at
    8.4-9 kHz), falling linearly to 0 at DC and at fs/2 outside the data.
    """

    name = "headphone"
    Params = HeadphoneParams
    design = staticmethod(design_headphone)

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("headphone", dict(fs=48000.0)),)


# =================================================================== middle ear
def lopezpoveda2001_table() -> np.ndarray:
    """Stapes peak velocity (m/s) at 0 dB SPL vs frequency (Hz): Goode et al. (1994)
    displacements converted as in Lopez-Poveda & Meddis (2001) Fig. 2b, framed by their
    extrapolated points below 400 Hz and above 6.5 kHz.

    Conversion (Goode et al. 1994, p. 147): velocity = displacement (p-p, um) * 1e-6 *
    2 pi f; referred from 104 dB to 0 dB SPL (x 10^(-104/20), stapes velocity linear in
    pressure); times sqrt(2) for peak velocity (AMT ``data_lopezpoveda2001``)."""
    g = GOODE1994_FIG1_104DB
    v = g[:, 1] * 1e-6 * 2.0 * np.pi * g[:, 0] * 10.0 ** (-104.0 / 20.0) * np.sqrt(2.0)
    ex = LOPEZPOVEDA2001_FIG2B_EXTRAP
    return np.vstack([ex[ex[:, 0] < g[0, 0]], np.c_[g[:, 0], v], ex[ex[:, 0] > g[-1, 0]]])


def jepsen2008_table() -> np.ndarray:
    """Stapes-velocity shape of the Jepsen et al. (2008) model: 1 / stapes impedance."""
    t = JEPSEN2008_STAPES_IMPEDANCE.copy()
    t[:, 1] = 1.0 / t[:, 1]
    return t


@dataclass(frozen=True)
class MiddleEarParams:
    """fs (Hz); preset: 'lopezpoveda2001' (seed default) or 'jepsen2008' (Osses2021);
    order: FIR order (even, AMT default 512); normalize: True -> 0 dB peak gain (seed
    default, AMT osses2021 ``gaindb(-me_gain_TF)``), False -> the AMT units (see
    :class:`MiddleEarFilter`); phase: 'minimum'."""

    fs: float
    preset: str = "lopezpoveda2001"
    order: int = 512
    normalize: bool = True
    phase: str = "minimum"


def design_middle_ear(p: MiddleEarParams, n_in=None):
    _check_fs_order(p.fs, p.order)
    check_phase(p.phase, ("minimum",))
    if p.preset not in MIDDLE_EAR_PRESETS:
        raise ValueError(f"unknown middle-ear preset {p.preset!r}; choose from "
                         f"{MIDDLE_EAR_PRESETS}")
    nyq = p.fs / 2
    if p.preset == "lopezpoveda2001":
        t = lopezpoveda2001_table()
        if t[-1, 0] >= nyq:
            t = _below_nyquist(t, p.fs, "middleear")
        else:
            # AMT: extend towards fs/2 with one point per 1000 Hz, amplitude / 1.1 each
            rows = [tuple(r) for r in t]
            for _ in range(int(np.floor((nyq - t[-1, 0]) / 1000.0))):
                rows.append((rows[-1][0] + 1000.0, rows[-1][1] / 1.1))
            t = np.array(rows)
        pts = t
        if t[-1, 0] != nyq:  # fir2 needs the last point at fs/2
            pts = np.vstack([t, [nyq, t[-1, 1] / (1.0 + (nyq - t[-1, 0]) * 0.1 / 1000.0)]])
        freq = np.r_[0.0, pts[:, 0]]
        gain = np.r_[0.0, pts[:, 1]]
    else:
        t = _below_nyquist(jepsen2008_table(), p.fs, "middleear")
        freq = np.r_[0.0, t[:, 0], nyq]
        gain = np.r_[0.0, t[:, 1], 0.0]
    h_min, h_lin = fir_from_table(p.fs, freq, gain, int(p.order))
    peak = _peak_gain(h_min)
    if p.normalize:
        scale = 1.0 / peak
    elif p.preset == "lopezpoveda2001":
        scale = 1.0 / P_REF
    else:
        scale = JEPSEN2008_PEAK / peak
    return make_coeffs(p.fs, h_min, h_lin, freq, gain, t, scale)


class MiddleEarFilter(FIRSignalStage):
    """Middle-ear transmission (stapes velocity), AMT ``middleearfilter`` presets.

    * ``normalize=True`` (default): peak gain exactly 0 dB (the osses2021 use, before a
      gammatone filterbank).
    * ``normalize=False``, ``lopezpoveda2001``: ``|H(f)| = v(f) / 20e-6`` with ``v`` the
      stapes peak velocity (m/s) at 0 dB SPL: a pressure input in Pa gives stapes
      velocity in m/s, the input of a DRNL filterbank (AMT ``b / 20e-6``).
    * ``normalize=False``, ``jepsen2008``: peak gain ``1e-8 * 10^(104/20)`` (AMT scaling).
    """

    name = "middleear"
    Params = MiddleEarParams
    design = staticmethod(design_middle_ear)

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("middleear", dict(fs=48000.0)),
                Example("middleear-jepsen2008-amt-units",
                        dict(fs=48000.0, preset="jepsen2008", normalize=False)))


# =================================================================== outer + middle ear
def outer_middle_ear_db(f, compensation: str = "tfOuterMiddle1997", field: str = "free"):
    """Outer + middle ear transfer (dB) at ``f`` Hz from the tables of
    :mod:`rtamt.data.ansi_s34` (PCHIP in log frequency, held beyond the table ends).

    ``tfOuterMiddle1997``: :func:`rtamt.data.ansi_s34.ear_gain_db` with ``middle_ear='1997'``
    (Moore et al. 1997, revised 2006); ``tfOuterMiddle2007``: with ``middle_ear='2007'``
    (ANSI S3.4-2007, which differs at 1250, 1500 and 1600 Hz).  ``field``: 'free',
    'diffuse' or 'eardrum' (middle ear only; checked by ``ear_gain_db``)."""
    if compensation not in COMPENSATIONS:
        raise ValueError(f"unknown compensation {compensation!r}; choose from {COMPENSATIONS}")
    return ansi_s34.ear_gain_db(f, field, "2007" if compensation == "tfOuterMiddle2007" else "1997")


@dataclass(frozen=True)
class OuterMiddleEarParams:
    """fs (Hz); compensation: 'tfOuterMiddle1997' (seed default; Glasberg2002,
    Paulick2024) or 'tfOuterMiddle2007' (Moore2016); field: 'free' (default), 'diffuse'
    or 'eardrum'; order: FIR order (even; seed default 4096, Moore2016 uses 1024);
    flow, fhigh: the transfer function is evaluated on [flow, fhigh] (Hz) and held
    constant outside (fhigh None = fs/2); phase: 'minimum' (the minimum-phase equivalent)
    or 'linear' (the linear-phase design, delay ``order / 2`` samples)."""

    fs: float
    compensation: str = "tfOuterMiddle1997"
    field: str = "free"
    order: int = 4096
    flow: float = 20.0
    fhigh: float | None = None
    phase: str = "minimum"


def design_outer_middle_ear(p: OuterMiddleEarParams, n_in=None):
    """Amplitude target ``10^(tf_dB / 20)`` on ``firwin2``'s own frequency grid
    (``1 + 2^ceil(log2(order + 1))`` points from 0 to fs/2), so that the design
    interpolates nothing itself; table points at/above fs/2 play no part."""
    _check_fs_order(p.fs, p.order)
    check_phase(p.phase)
    nyq = p.fs / 2
    fhigh = nyq if p.fhigh is None else min(float(p.fhigh), nyq)
    if not 0 <= p.flow < fhigh:
        raise ValueError(f"need 0 <= flow < fhigh (<= fs/2), got flow={p.flow}, fhigh={fhigh}")
    outer_middle_ear_db(1000.0, p.compensation, p.field)  # validates the names
    ntaps = int(p.order) + 1
    freq = np.linspace(0.0, nyq, 1 + (1 << int(np.ceil(np.log2(ntaps)))))
    tf = outer_middle_ear_db(np.clip(freq, p.flow, fhigh), p.compensation, p.field)
    gain = 10.0 ** (tf / 20.0)
    fm = ansi_s34.F_MIDDLE
    ft = fm[(fm >= p.flow) & (fm <= fhigh) & (fm < nyq)]
    table = np.c_[ft, 10.0 ** (outer_middle_ear_db(ft, p.compensation, p.field) / 20.0)]
    h_min, h_lin = fir_from_table(p.fs, freq, gain, int(p.order))
    return make_coeffs(p.fs, streaming_taps(p.phase, h_min, h_lin), h_lin, freq, gain,
                       table, 1.0)


class OuterMiddleEarFilter(FIRSignalStage):
    """Outer + middle ear (ANSI S3.4-2007 / Moore, Glasberg & Baer 1997), sound field to
    cochlea: ``20 log10 |H(f)|`` follows the dB transfer function (0 dB at 1 kHz for the
    free field).  Table data imported from :mod:`rtamt.data.ansi_s34`."""

    name = "outerear"
    Params = OuterMiddleEarParams
    design = staticmethod(design_outer_middle_ear)

    @property
    def delay(self) -> float:
        """Constant group delay (samples): ``order / 2`` with ``phase='linear'``, else 0."""
        return fir_delay(self.params.phase, self.coeffs.ntaps)

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("outermiddleear-1024", dict(fs=48000.0, order=1024)),)
