"""ANSI S3.4-2007 tables (numbers only) and their look-up, shared by :mod:`rtamt.ear`
(outer/middle-ear filters) and :mod:`rtamt.loudness` (the Moore-Glasberg loudness models).

* Table 1: outer-ear transfer, free field (frontal incidence) and diffuse field to the
  eardrum (``F_OUTER``, ``OUTER_FREE``, ``OUTER_DIFFUSE``);
* Table 2: middle-ear transfer (``F_MIDDLE``; ``MIDDLE_2007``; ``MIDDLE_1997``, the
  Moore, Glasberg & Baer 1997 table as revised in 2006);
* Table 3: excitation at threshold in quiet (``F_THRQ``, ``THRQ``, ``THRQ_500_DB``);
* Table 4: alpha and A of the specific-loudness function against the low-level gain G
  (``G_ALPHA``, ``ALPHA``, ``G_A``, ``A``).

Numbers as transcribed in the Auditory Modeling Toolbox's ``data_moore2002``; provenance in
``tests/data/PROVENANCE.md`` (and, for ``MIDDLE_2007``, ``rtamt/ear/PROVENANCE.md``).
Tables are interpolated with a monotone cubic (PCHIP) in log-frequency
(:func:`interp_logf`).
"""
from __future__ import annotations

import numpy as np
from scipy.interpolate import PchipInterpolator

__all__ = ["F_OUTER", "OUTER_FREE", "OUTER_DIFFUSE", "F_MIDDLE", "MIDDLE_1997", "MIDDLE_2007",
           "MIDDLE_EAR", "F_THRQ", "THRQ", "THRQ_500_DB", "G_A", "A", "G_ALPHA", "ALPHA",
           "FIELDS", "interp_logf", "ear_gain_db"]

#: frequencies of the outer-ear tables (Hz)
F_OUTER = np.array([20, 25, 31.5, 40, 50, 63, 80, 100, 125, 160, 200, 250, 315, 400, 500, 630,
                    750, 800, 1000, 1250, 1500, 1600, 2000, 2500, 3000, 3150, 4000, 5000, 6000,
                    6300, 8000, 9000, 10000, 11200, 12500, 14000, 15000, 16000, 20000.0])
#: free field (frontal incidence) to eardrum, dB (ANSI S3.4-2007 Table 1)
OUTER_FREE = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0.1, 0.3, 0.5, 0.9, 1.4, 1.6, 1.7, 2.5, 2.7, 2.6,
                       2.6, 3.2, 5.2, 6.6, 12, 17, 15.3, 15.2, 14.2, 10.7, 7.1, 6.4, 1.8, -0.9,
                       -1.6, 1.9, 4.9, 2, -2, 2.5, 2.5])
#: diffuse field to eardrum, dB (ANSI S3.4-2007 Table 1)
OUTER_DIFFUSE = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0.1, 0.3, 0.4, 0.5, 1, 1.6, 1.7, 2.2, 2.7, 2.9,
                          3.8, 5.3, 6.8, 7.2, 10.2, 14.9, 14.5, 14.4, 12.7, 10.8, 8.9, 8.7, 8.5,
                          6.2, 5, 4.5, 4, 3.3, 2.6, 2, 2])
#: frequencies of the middle-ear tables (Hz)
F_MIDDLE = np.array([20, 25, 31.5, 40, 50, 63, 80, 100, 125, 160, 200, 250, 315, 400, 500, 630,
                     750, 800, 1000, 1250, 1500, 1600, 2000, 2500, 3000, 3150, 4000, 5000, 6000,
                     6300, 8000, 9000, 10000, 11200, 12500, 14000, 15000, 16000, 18000, 20000.0])
#: middle-ear effective transfer, dB: Moore, Glasberg & Baer (1997) with Glasberg & Moore's
#: 2006 revision (AMT ``tfOuterMiddle1997``), the table of the Glasberg & Moore (2002) model.
MIDDLE_1997 = -np.array([39.6, 32, 25.85, 21.4, 18.5, 15.9, 14.1, 12.4, 11, 9.6, 8.3, 7.4, 6.2,
                         4.8, 3.8, 3.3, 2.9, 2.6, 2.6, 3.2, 4.5, 5.5, 8.5, 10.4, 7.3, 7, 6.6, 7,
                         9.2, 10.2, 12.2, 10.8, 10.1, 12.7, 15, 18.2, 23.8, 32.3, 45.5, 50])
#: ANSI S3.4-2007 middle-ear transfer (Table 2 of the standard): the 1997/2006 table with
#: the standard's values at 1250, 1500 and 1600 Hz (-4.5, -5.4, -6.1 dB instead of -3.2,
#: -4.5, -5.5 dB); provenance in ``rtamt/ear/PROVENANCE.md``.
MIDDLE_2007 = MIDDLE_1997.copy()
MIDDLE_2007[np.searchsorted(F_MIDDLE, [1250.0, 1500.0, 1600.0])] = [-4.5, -5.4, -6.1]
#: middle-ear tables by name
MIDDLE_EAR = {"1997": MIDDLE_1997, "2007": MIDDLE_2007}

#: excitation at threshold in quiet, dB (ANSI S3.4-2007 Table 3); 3.73 dB from 500 Hz up
F_THRQ = np.array([50, 63, 80, 100, 125, 160, 200, 250, 315, 400, 500.0])
THRQ = np.array([28.18, 23.9, 19.2, 15.68, 12.67, 10.09, 8.08, 6.3, 5.3, 4.5, 3.73])
THRQ_500_DB = 3.73
#: A as a function of the low-level gain G (dB) (ANSI S3.4-2007 Table 4), A linear
G_A = -1e-5 * np.array([2454531, 2378397, 2278169, 1978305, 1621055, 1123866, 945902, 738338,
                        589392, 497718, 362882, 250042, 177405, 157745, 124006, 94596, 75663,
                        52501, 35451, 18750, 7845, 2470, 0.0])
A = 1e-5 * np.array([885200, 863150, 835840, 765258, 699954, 610719, 582490, 555322, 536425,
                     525064, 510314, 498203, 490515, 488449, 484918, 481854, 479890, 477494,
                     475736, 474019, 472899, 472349, 472096.0])
#: alpha as a function of G (dB) (ANSI S3.4-2007 Table 4)
G_ALPHA = np.array([-25, -20, -15, -10, -5, 0.0])
ALPHA = 1e-5 * np.array([26692, 25016, 23679, 22228, 21055, 20000.0])

FIELDS = ("free", "diffuse", "eardrum")


def interp_logf(fx, fy, f):
    """Table ``(fx, fy)`` at ``f``: monotone cubic (PCHIP) in log frequency, held beyond
    the table's ends."""
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
    g = interp_logf(F_MIDDLE, MIDDLE_EAR[middle_ear], f)
    if field == "free":
        g = g + interp_logf(F_OUTER, OUTER_FREE, f)
    elif field == "diffuse":
        g = g + interp_logf(F_OUTER, OUTER_DIFFUSE, f)
    return g
