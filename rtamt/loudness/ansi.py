"""Published data and closed-form relations of the Moore-Glasberg loudness family.

Everything here is a pure function of frequency (Hz) or of excitation; no state.

Sources
-------
* ERB and Cam scale: Glasberg B R, Moore B C J (1990) "Derivation of auditory filter
  shapes from notched-noise data", Hear. Res. 47, 103-138:
  ``ERB(f) = 24.673 (4.368 f/1000 + 1)`` Hz,  ``Cam(f) = 21.366 log10(4.368 f/1000 + 1)``.
* Outer-ear (free field and diffuse field to eardrum) and middle-ear transfer
  functions, excitation at threshold, and the alpha(G) / A(G) relations: ANSI
  S3.4-2007 "Procedure for the computation of loudness of steady sounds", Tables 1-4,
  kept in :mod:`rtamt.data.ansi_s34` (shared with :mod:`rtamt.ear`; :func:`ear_gain_db`
  is re-exported from there).  Tables are interpolated with a monotone cubic (PCHIP) in
  log-frequency (in G for the alpha/A tables).
* Specific loudness: ANSI S3.4-2007 eqs. (17)-(19), after Moore, Glasberg & Baer
  (1997) "A model for the prediction of thresholds, loudness, and partial loudness",
  J. Audio Eng. Soc. 45, 224-240.
"""
from __future__ import annotations

import numpy as np
from scipy.interpolate import PchipInterpolator

from ..data import ansi_s34 as tables
from ..data.ansi_s34 import FIELDS, MIDDLE_EAR, THRQ_500_DB, ear_gain_db

__all__ = ["erb_hz", "hz_to_cam", "cam_to_hz", "FIELDS", "MIDDLE_EAR", "THRQ_500_DB",
           "ear_gain_db", "threshold_excitation_db", "SpecificLoudnessCoeffs",
           "specific_loudness_ref"]


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


def threshold_excitation_db(f, at_500: float = THRQ_500_DB):
    """Excitation at absolute threshold E_THRQ (dB) at ``f`` Hz (ANSI Table 3); constant
    ``at_500`` (3.73 dB, the table's) from 500 Hz up, table held below 50 Hz.  Another
    ``at_500`` (the Cambridge program's 3.63 dB) replaces the table's 500 Hz point."""
    f = np.asarray(f, dtype=np.float64)
    thrq = tables.THRQ if at_500 == THRQ_500_DB else np.r_[tables.THRQ[:-1], at_500]
    return np.where(f >= 500.0, at_500,
                    tables.interp_logf(tables.F_THRQ, thrq, np.minimum(f, 500.0)))


class SpecificLoudnessCoeffs:
    """Per-channel constants of the specific-loudness function (ANSI S3.4-2007 §3.6).

    ``G = E_THRQ(500 Hz) / E_THRQ(f)`` (low-level gain, linear; ``thrq_500_db`` the
    threshold from 500 Hz up, see :func:`threshold_excitation_db`), ``alpha(G)``, ``A(G)``
    (Table 4), ``ethrq`` linear threshold excitation; ``C`` the scaling constant.
    """

    def __init__(self, fc, C: float, thrq_500_db: float = THRQ_500_DB):
        fc = np.asarray(fc, dtype=np.float64)
        self.fc = fc
        et_db = threshold_excitation_db(fc, thrq_500_db)
        g_db = np.minimum(thrq_500_db - et_db, 0.0)
        self.ethrq = 10.0 ** (et_db / 10.0)
        self.G = 10.0 ** (g_db / 10.0)
        alpha_of_g = PchipInterpolator(tables.G_ALPHA, tables.ALPHA)
        a_of_g = PchipInterpolator(tables.G_A, tables.A)
        self.alpha = np.where(g_db >= 0, 0.2, alpha_of_g(np.clip(g_db, -25, 0)))
        self.A = np.where(g_db >= 0, 4.72096, a_of_g(np.clip(g_db, tables.G_A[0], 0)))
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
