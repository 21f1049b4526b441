"""Published data and closed-form relations of the Moore-Glasberg loudness family.

Everything here is a pure function of frequency (Hz) or of excitation; no state.

Sources
-------
* ERB and Cam scale: Glasberg B R, Moore B C J (1990) "Derivation of auditory filter
  shapes from notched-noise data", Hear. Res. 47, 103-138:
  ``ERB(f) = 24.673 (4.368 f/1000 + 1)`` Hz,  ``Cam(f) = 21.366 log10(4.368 f/1000 + 1)``.
* Outer-ear (free field and diffuse field to eardrum) and middle-ear transfer
  functions, excitation at threshold, and the alpha(G) / A(G) relations: ANSI
  S3.4-2007 "Procedure for the computation of loudness of steady sounds", Tables 1-4
  (numbers as transcribed in the Auditory Modeling Toolbox's ``data_moore2002``;
  provenance in ``tests/data/PROVENANCE.md``).  Tables are interpolated with a
  monotone cubic (PCHIP) in log-frequency (in G for the alpha/A tables).
* Specific loudness: ANSI S3.4-2007 eqs. (17)-(19), after Moore, Glasberg & Baer
  (1997) "A model for the prediction of thresholds, loudness, and partial loudness",
  J. Audio Eng. Soc. 45, 224-240.
"""
from __future__ import annotations

import numpy as np
from scipy.interpolate import PchipInterpolator

# ---------------------------------------------------------------- ERB / Cam
def erb_hz(f):
    """Equivalent rectangular bandwidth (Hz) of the auditory filter at ``f`` Hz
    (Glasberg & Moore 1990): ``24.673 (4.368 f / 1000 + 1)``."""
    return 24.673 * (4.368e-3 * np.asarray(f, dtype=np.float64) + 1.0)


def hz_to_cam(f):
    """ERB-number (Cam) of ``f`` Hz: ``21.366 log10(4.368 f / 1000 + 1)``."""
    return 21.366 * np.log10(4.368e-3 * np.asarray(f, dtype=np.float64) + 1.0)


def cam_to_hz(c):
    """Inverse of :func:`hz_to_cam` (Hz)."""
    return (10.0 ** (np.asarray(c, dtype=np.float64) / 21.366) - 1.0) / 4.368e-3


# ---------------------------------------------------------------- ANSI S3.4-2007 tables
_F_OUTER = np.array([20, 25, 31.5, 40, 50, 63, 80, 100, 125, 160, 200, 250, 315, 400, 500, 630,
                     750, 800, 1000, 1250, 1500, 1600, 2000, 2500, 3000, 3150, 4000, 5000, 6000,
                     6300, 8000, 9000, 10000, 11200, 12500, 14000, 15000, 16000, 20000.0])
#: free field (frontal incidence) to eardrum, dB (ANSI S3.4-2007 Table 1)
_OUTER_FREE = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0.1, 0.3, 0.5, 0.9, 1.4, 1.6, 1.7, 2.5, 2.7, 2.6,
                        2.6, 3.2, 5.2, 6.6, 12, 17, 15.3, 15.2, 14.2, 10.7, 7.1, 6.4, 1.8, -0.9,
                        -1.6, 1.9, 4.9, 2, -2, 2.5, 2.5])
#: diffuse field to eardrum, dB (ANSI S3.4-2007 Table 1)
_OUTER_DIFFUSE = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0.1, 0.3, 0.4, 0.5, 1, 1.6, 1.7, 2.2, 2.7, 2.9,
                           3.8, 5.3, 6.8, 7.2, 10.2, 14.9, 14.5, 14.4, 12.7, 10.8, 8.9, 8.7, 8.5,
                           6.2, 5, 4.5, 4, 3.3, 2.6, 2, 2])
_F_MIDDLE = np.array([20, 25, 31.5, 40, 50, 63, 80, 100, 125, 160, 200, 250, 315, 400, 500, 630,
                      750, 800, 1000, 1250, 1500, 1600, 2000, 2500, 3000, 3150, 4000, 5000, 6000,
                      6300, 8000, 9000, 10000, 11200, 12500, 14000, 15000, 16000, 18000, 20000.0])
#: middle-ear effective transfer, dB: Moore, Glasberg & Baer (1997) with Glasberg & Moore's
#: 2006 revision (AMT ``tfOuterMiddle1997``), the table of the Glasberg & Moore (2002) model.
_MIDDLE_1997 = -np.array([39.6, 32, 25.85, 21.4, 18.5, 15.9, 14.1, 12.4, 11, 9.6, 8.3, 7.4, 6.2,
                          4.8, 3.8, 3.3, 2.9, 2.6, 2.6, 3.2, 4.5, 5.5, 8.5, 10.4, 7.3, 7, 6.6, 7,
                          9.2, 10.2, 12.2, 10.8, 10.1, 12.7, 15, 18.2, 23.8, 32.3, 45.5, 50])
#: ANSI S3.4-2007 middle-ear transfer (Table 2 of the standard): the 1997/2006 table with
#: the standard's values at 1250, 1500 and 1600 Hz (-4.5, -5.4, -6.1 dB instead of -3.2,
#: -4.5, -5.5 dB); provenance in ``rtamt/ear/PROVENANCE.md``.
_MIDDLE_2007 = _MIDDLE_1997.copy()
_MIDDLE_2007[np.searchsorted(_F_MIDDLE, [1250.0, 1500.0, 1600.0])] = [-4.5, -5.4, -6.1]
#: middle-ear tables by name
MIDDLE_EAR = {"1997": _MIDDLE_1997, "2007": _MIDDLE_2007}

#: excitation at threshold in quiet, dB (ANSI S3.4-2007 Table 3); 3.73 dB from 500 Hz up
_F_THRQ = np.array([50, 63, 80, 100, 125, 160, 200, 250, 315, 400, 500.0])
_THRQ = np.array([28.18, 23.9, 19.2, 15.68, 12.67, 10.09, 8.08, 6.3, 5.3, 4.5, 3.73])
THRQ_500_DB = 3.73
#: A as a function of the low-level gain G (dB) (ANSI S3.4-2007 Table 4), A linear
_G_A = -1e-5 * np.array([2454531, 2378397, 2278169, 1978305, 1621055, 1123866, 945902, 738338,
                         589392, 497718, 362882, 250042, 177405, 157745, 124006, 94596, 75663,
                         52501, 35451, 18750, 7845, 2470, 0.0])
_A = 1e-5 * np.array([885200, 863150, 835840, 765258, 699954, 610719, 582490, 555322, 536425,
                      525064, 510314, 498203, 490515, 488449, 484918, 481854, 479890, 477494,
                      475736, 474019, 472899, 472349, 472096.0])
#: alpha as a function of G (dB) (ANSI S3.4-2007 Table 4)
_G_ALPHA = np.array([-25, -20, -15, -10, -5, 0.0])
_ALPHA = 1e-5 * np.array([26692, 25016, 23679, 22228, 21055, 20000.0])

FIELDS = ("free", "diffuse", "eardrum")


def _pchip_logf(fx, fy, f):
    f = np.clip(np.asarray(f, dtype=np.float64), fx[0], fx[-1])
    return PchipInterpolator(np.log10(fx), fy)(np.log10(f))


def ear_gain_db(f, field: str = "free", middle_ear: str = "2007"):
    """Outer + middle ear gain (dB) from the sound field to the cochlea, at ``f`` Hz.

    ``field``: ``'free'`` (frontal free field, ANSI Table 1 + Table 2), ``'diffuse'``
    (diffuse field) or ``'eardrum'`` (middle ear only: headphones calibrated at the
    eardrum).  ``middle_ear``: ``'2007'`` (ANSI S3.4-2007, default; Moore et al. 2016) or
    ``'1997'`` (Moore, Glasberg & Baer 1997 as revised in 2006; Glasberg & Moore 2002).
    0.0 dB at 1 kHz for the free field by construction of the tables.
    """
    if field not in FIELDS:
        raise ValueError(f"field must be one of {FIELDS}, got {field!r}")
    if middle_ear not in MIDDLE_EAR:
        raise ValueError(f"middle_ear must be one of {sorted(MIDDLE_EAR)}, got {middle_ear!r}")
    g = _pchip_logf(_F_MIDDLE, MIDDLE_EAR[middle_ear], f)
    if field == "free":
        g = g + _pchip_logf(_F_OUTER, _OUTER_FREE, f)
    elif field == "diffuse":
        g = g + _pchip_logf(_F_OUTER, _OUTER_DIFFUSE, f)
    return g


def threshold_excitation_db(f):
    """Excitation at absolute threshold E_THRQ (dB) at ``f`` Hz (ANSI Table 3); constant
    3.73 dB from 500 Hz up, table held below 50 Hz."""
    f = np.asarray(f, dtype=np.float64)
    return np.where(f >= 500.0, THRQ_500_DB, _pchip_logf(_F_THRQ, _THRQ, np.minimum(f, 500.0)))


class SpecificLoudnessCoeffs:
    """Per-channel constants of the specific-loudness function (ANSI S3.4-2007 §3.6).

    ``G = E_THRQ(500 Hz) / E_THRQ(f)`` (low-level gain, linear), ``alpha(G)``, ``A(G)``
    (Table 4), ``ethrq`` linear threshold excitation; ``C`` the scaling constant.
    """

    def __init__(self, fc, C: float):
        fc = np.asarray(fc, dtype=np.float64)
        self.fc = fc
        et_db = threshold_excitation_db(fc)
        g_db = np.minimum(THRQ_500_DB - et_db, 0.0)
        self.ethrq = 10.0 ** (et_db / 10.0)
        self.G = 10.0 ** (g_db / 10.0)
        self.alpha = np.where(g_db >= 0, 0.2,
                              PchipInterpolator(_G_ALPHA, _ALPHA)(np.clip(g_db, -25, 0)))
        self.A = np.where(g_db >= 0, 4.72096,
                          PchipInterpolator(_G_A, _A)(np.clip(g_db, _G_A[0], 0)))
        self.A_alpha = self.A ** self.alpha
        self.C = float(C)


def specific_loudness_ref(E, sl: SpecificLoudnessCoeffs):
    """Reference (numpy) specific loudness N' (sone/Cam) of linear excitation ``E``
    (``(..., channels)``, 1.0 = 0 dB), ANSI S3.4-2007 eqs. (17)-(19):

    * ``E < E_THRQ``: ``N' = C (2E/(E+E_THRQ))^1.5 [(G E + A)^alpha - A^alpha]``
    * ``E_THRQ <= E <= 1e10``: ``N' = C [(G E + A)^alpha - A^alpha]``
    * ``E > 1e10``: ``N' = C (E / 1.0707)^0.2``
    """
    E = np.asarray(E, dtype=np.float64)
    core = (sl.G * E + sl.A) ** sl.alpha - sl.A_alpha
    low = E < sl.ethrq
    core = np.where(low, core * (2 * E / (E + sl.ethrq)) ** 1.5, core)
    core = np.where(E > 1e10, (E / 1.0707) ** 0.2, core)
    return sl.C * core
