"""Published frequency-response tables of the ear filters (numbers only).

Provenance of every table: ``rtamt/ear/PROVENANCE.md``.  The ANSI S3.4-2007 /
Glasberg-Moore outer- and middle-ear tables (both the 1997/2006 and the 2007 middle ear)
are *not* repeated here: they live in :mod:`rtamt.data.ansi_s34` (shared with
:mod:`rtamt.loudness`) and are used by :mod:`rtamt.ear.filters`.

All arrays are ``(N, 2)`` float64: column 0 frequency (Hz, ascending), column 1 value.
"""
from __future__ import annotations

import numpy as np

__all__ = ["PRALONG1996_FIG1E", "GOODE1994_FIG1_104DB", "LOPEZPOVEDA2001_FIG2B_EXTRAP",
           "JEPSEN2008_STAPES_IMPEDANCE"]

#: Pralong & Carlile (1996), Fig. 1(e): gain (linear amplitude) of the Sennheiser HD 250
#: Linear circumaural headphones measured at the eardrum (headphone + outer ear).
PRALONG1996_FIG1E = np.array([
    [125.0, 1.0],
    [250.0, 1.0],
    [500.0, 1.0],
    [1000.0, 0.994850557],
    [1237.384651, 0.994850557],
    [1531.120775, 0.994850557],
    [1894.585346, 1.114513162],
    [2002.467159, 1.235743262],
    [2344.330828, 1.867671314],
    [2721.273584, 2.822751493],
    [3001.403462, 2.180544843],
    [3589.453635, 1.442755787],
    [4001.342781, 1.173563859],
    [4441.534834, 1.37016005],
    [5004.212211, 1.599690164],
    [5495.887031, 1.37016005],
    [5997.423738, 1.114513162],
    [6800.526258, 0.648125625],
    [6946.931144, 0.631609176],
    [7995.508928, 0.276505667],
    [8414.866811, 0.084335217],
    [9008.422743, 0.084335217],
])

#: Goode et al. (1994), Fig. 1: stapes-footplate peak-to-peak displacement (micrometre)
#: at 104 dB SPL.  Converted to stapes peak velocity at 0 dB SPL as in Lopez-Poveda &
#: Meddis (2001), Fig. 2b (see ``filters._lopezpoveda2001_table``).
GOODE1994_FIG1_104DB = np.array([
    [400.0, 0.19953],
    [600.0, 0.22909],
    [800.0, 0.21878],
    [1000.0, 0.15136],
    [1200.0, 0.10000],
    [1400.0, 0.07943],
    [1600.0, 0.05754],
    [1800.0, 0.04365],
    [2000.0, 0.03311],
    [2200.0, 0.02754],
    [2400.0, 0.02188],
    [2600.0, 0.01820],
    [2800.0, 0.01445],
    [3000.0, 0.01259],
    [3500.0, 0.00900],
    [4000.0, 0.00700],
    [4500.0, 0.00457],
    [5000.0, 0.00500],
    [5500.0, 0.00400],
    [6000.0, 0.00300],
    [6500.0, 0.00275],
])

#: Lopez-Poveda & Meddis (2001), Fig. 2b: extrapolated points (open symbols), stapes
#: peak velocity (m/s) at 0 dB SPL, outside the range of the Goode et al. data.
LOPEZPOVEDA2001_FIG2B_EXTRAP = np.array([
    [100.0, 1.181e-09],
    [200.0, 2.363e-09],
    [7000.0, 8.705e-10],
    [7500.0, 8.000e-10],
    [8000.0, 7.577e-10],
    [8500.0, 7.168e-10],
    [9000.0, 6.781e-10],
    [9500.0, 6.240e-10],
    [10000.0, 6.000e-10],
])

#: Stapes impedance used by the Jepsen et al. (2008) model (arbitrary units; its inverse
#: is taken as the stapes-velocity transfer shape).
JEPSEN2008_STAPES_IMPEDANCE = np.array([
    [50.0, 48046.39731],
    [100.0, 24023.19865],
    [200.0, 12011.59933],
    [400.0, 6005.799663],
    [600.0, 3720.406871],
    [800.0, 2866.404385],
    [1000.0, 3363.247811],
    [1200.0, 4379.228921],
    [1400.0, 4804.639731],
    [1600.0, 5732.808769],
    [1800.0, 6228.236688],
    [2000.0, 7206.959596],
    [2200.0, 9172.494031],
    [2400.0, 9554.681282],
    [2600.0, 10779.64042],
    [2800.0, 12011.59933],
    [3000.0, 14013.53255],
    [3500.0, 16015.46577],
    [4000.0, 18017.39899],
    [4500.0, 23852.82136],
    [5000.0, 21020.29882],
    [5500.0, 22931.23508],
    [6000.0, 28027.06509],
    [6500.0, 28745.70779],
    [7000.0, 32098.9],
    [7500.0, 34504.4],
    [8000.0, 36909.9],
    [8500.0, 39315.4],
    [9000.0, 41720.9],
    [9500.0, 44126.4],
    [10000.0, 46531.9],
])
