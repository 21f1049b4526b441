"""ERB scale of Glasberg & Moore (1990), as used by AMT.

* ``erb(f) = 24.7 + f / 9.265`` Hz - equivalent rectangular bandwidth
  (Glasberg & Moore 1990, Hear. Res. 47, eq. 3; AMT ``audfiltbw``).
* ``erb_number(f) = 9.2645 * ln(1 + 0.00437 f)`` - ERB-rate (Cams)
  (Glasberg & Moore 1990 eq. 4 in natural-log form; AMT ``freqtoerb``).
"""
from __future__ import annotations

import numpy as np

_A = 9.2645
_B = 0.00437


def erb(f, xp=np):
    """Equivalent rectangular bandwidth in Hz at frequency ``f`` (Hz).  ``xp``: the array
    namespace, numpy (``f`` is converted to float64) or torch (``f`` a float64 tensor,
    used as given, so autograd reaches it)."""
    if xp is np:
        f = np.asarray(f, dtype=np.float64)
    return 24.7 + f / 9.265


def erb_number(f):
    """ERB-rate (ERB number, 'Cam') of frequency ``f`` in Hz."""
    f = np.asarray(f, dtype=np.float64)
    return _A * np.sign(f) * np.log1p(np.abs(f) * _B)


def erb_to_hz(e):
    """Inverse of :func:`erb_number`: frequency in Hz of ERB-rate ``e``."""
    e = np.asarray(e, dtype=np.float64)
    return np.sign(e) * np.expm1(np.abs(e) / _A) / _B


def erb_space(flow: float, fhigh: float, spacing: float = 1.0, basef: float | None = None):
    """Centre frequencies (Hz) spaced ``spacing`` ERB-numbers apart in [flow, fhigh].

    With ``basef``: every ``E(basef) + k*spacing`` (integer k) inside
    ``[E(flow), E(fhigh)]``, so one channel sits exactly on ``basef``
    (AMT ``erbspacebw`` with 'basef').  Without: the largest such grid that fits,
    centred in the range (AMT ``erbspacebw``).
    """
    if not (0 < flow < fhigh):
        raise ValueError(f"need 0 < flow < fhigh, got flow={flow}, fhigh={fhigh}")
    if spacing <= 0:
        raise ValueError(f"spacing must be > 0 ERB, got {spacing}")
    elo, ehi = erb_number(flow), erb_number(fhigh)
    if basef is not None:
        eb = erb_number(basef)
        k0 = int(np.ceil((elo - eb) / spacing - 1e-9))
        k1 = int(np.floor((ehi - eb) / spacing + 1e-9))
        pts = eb + spacing * np.arange(k0, k1 + 1)
    else:
        n = int(np.floor((ehi - elo) / spacing + 1e-9))
        rem = (ehi - elo) - n * spacing
        pts = elo + rem / 2 + spacing * np.arange(n + 1)
    return erb_to_hz(pts)
