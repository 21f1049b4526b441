"""Glasberg & Moore (2002) time-varying loudness, streaming at a 1 ms hop.

Glasberg B R, Moore B C J (2002). "A model of loudness applicable to time-varying
sounds", J. Audio Eng. Soc. 50(5), 331-342.

A chain of stages (:mod:`rtamt.loudness.tvl`): the calibration stage (``spl_ref``, the
physical input limit) -> per frame (every 1 ms): multi-resolution spectrum (six Hann
windows 2-64 ms, :mod:`rtamt.loudness.spectrum`) -> outer/middle ear (``field``; the
middle ear of Moore, Glasberg & Baer 1997 as revised in 2006, ``middle_ear="1997"``, the
2002 paper's table) -> excitation pattern on 150 roex filters 1.75-39 Cam in 0.25-Cam steps
(:mod:`rtamt.loudness.excitation`)
-> specific loudness (ANSI S3.4-2007 eqs. 17-19, C = 0.046871,
:mod:`rtamt.loudness.specific_loudness`) -> instantaneous loudness ``N_I = k * 0.25 * sum
N'`` (k = 2 for diotic presentation, the default, 1 for monaural) -> short-term loudness
``STL`` and long-term loudness ``LTL`` by asymmetric one-pole integrators (paper eqs.
5-6, :mod:`rtamt.loudness.agc`) with time constants attack 22 ms / release 50 ms (STL
from N_I) and attack 100 ms / release 2000 ms (LTL from STL), ``alpha = 1 -
exp(-hop/tau)``.

Input: ``(T,)`` or ``(batch, T)``, one signal per row (presented to both ears when
``presentation='diotic'``).  Outputs (time-last, ``F`` frames per block):
``stl``, ``ltl``, ``inst`` ``(..., F)`` sone; ``specific_loudness`` (instantaneous,
sone/Cam) and ``excitation`` (dB) ``(..., 150, F)``; ``frame_time`` ``(F,)`` s.

Deviations from the seed (torch_amt ``Glasberg2002``), each following the paper:

* the seed's ``SpecificLoudness`` applies its formula to excitation in dB
  (``N = C (E_dB - E_thr,dB)^0.2``), which gives ~10 sone for a 40 dB tone; rtamt uses
  the paper's (MGB97 / ANSI S3.4-2007) formula on linear excitation;
* the seed computes STL as the plain sum of specific loudness and LTL with 50/200 ms;
  rtamt uses the paper's two integrators (22/50 ms and 100/2000 ms);
* the seed analyses at a coarse hop; rtamt runs the paper's 1 ms hop, streaming.

Other choices, documented: the excitation uses ANSI S3.4-2007's level-per-ERB rule
for the lower filter slopes (the paper used the component level of MGB97; ANSI 2007
is its standardised successor); spectral compression to 0.1 Cam above ~1.2 kHz
(``comp_cam``, see :mod:`rtamt.loudness.spectrum`; ``comp_cam=0`` for the exact bins).
"""
from __future__ import annotations

import numpy as np

from ..engine.contract import check_time_last, time_last_hint
from ..engine.stage import RtamtInputError
from ..loudness.agc import LoudnessIntegrator
from ..loudness.specific_loudness import InstantaneousLoudness
from ..loudness.tvl import TimeVaryingLoudness

CONFIGS = {"paper": {}}


def _pack(stl, ltl, inst, N, edb, lead) -> dict:
    """The public outputs (time-last) from ``stl``, ``ltl`` (F, R), ``inst`` (R, F) sone and
    ``N``, ``edb`` (R, F, K), numpy arrays or torch tensors alike."""
    R, F, K = N.shape
    shp = tuple(lead)
    return {
        "stl": stl.T.reshape(shp + (F,)),
        "ltl": ltl.T.reshape(shp + (F,)),
        "inst": inst.reshape(shp + (F,)),
        "specific_loudness": N.swapaxes(1, 2).reshape(shp + (K, F)),
        "excitation": edb.swapaxes(1, 2).reshape(shp + (K, F)),
    }


class Glasberg2002(TimeVaryingLoudness):
    """Glasberg & Moore (2002) time-varying loudness (STL/LTL in sone, 1 ms frames): the
    calibration, spectrum, excitation and specific-loudness stages, then
    :class:`~rtamt.loudness.specific_loudness.InstantaneousLoudness` and two
    :class:`~rtamt.loudness.agc.LoudnessIntegrator` stages (STL, LTL)."""

    name = "glasberg2002"
    outputs = ("stl", "ltl", "inst", "specific_loudness", "excitation", "frame_time")
    C = 0.046871
    fingerprint_fields = TimeVaryingLoudness.fingerprint_fields + (
        "presentation", "ear_factor", "alpha_stl", "alpha_ltl")

    def __init__(self, fs: float, config: str = "paper", *, spl_ref: float = 100.0,
                 field: str = "free", presentation: str = "diotic", comp_cam: float = 0.1,
                 middle_ear: str = "1997", tau_stl=(0.022, 0.050), tau_ltl=(0.100, 2.000),
                 backend: str | None = None, device=None):
        if config not in CONFIGS:
            raise ValueError(
                f"unknown glasberg2002 config {config!r}; choose from {sorted(CONFIGS)}")
        if presentation not in ("diotic", "monaural"):
            raise ValueError("presentation must be 'diotic' or 'monaural'")
        super().__init__(fs, spl_ref=spl_ref, field=field, comp_cam=comp_cam,
                         middle_ear=middle_ear, level_db=True, who="Glasberg2002")
        self.presentation = presentation
        self.ear_factor = 2.0 if presentation == "diotic" else 1.0
        dt = self.hop / self.fs
        self.alpha_stl = tuple(1.0 - np.exp(-dt / t) for t in tau_stl)
        self.alpha_ltl = tuple(1.0 - np.exp(-dt / t) for t in tau_ltl)
        self._set_stages([
            InstantaneousLoudness(ear_factor=self.ear_factor),
            LoudnessIntegrator(attack=float(self.alpha_stl[0]),
                               release=float(self.alpha_stl[1]), source="inst", key="stl",
                               transpose=True),
            LoudnessIntegrator(attack=float(self.alpha_ltl[0]),
                               release=float(self.alpha_ltl[1]), source="stl", key="ltl")],
            backend, device)
    #: set while :meth:`prepare` checks its example block (it declares the batch)
    _declaring = False

    def _layout(self, x, where):
        if x.ndim not in (1, 2):
            raise RtamtInputError(f"{where}: expected shape (T,) or (batch, T), got {x.shape}")
        if x.ndim == 2 and x.shape[1] == 1 and not self._declaring:
            check_time_last(x, where, self._meta is None)
            if self._meta is not None and self._meta[0] != x.shape[:-1]:
                raise RtamtInputError(
                    f"{where}: leading shape {x.shape[:-1]} differs from the stream's "
                    f"{self._meta[0]}{time_last_hint(x)}")
        rows = x.reshape(-1, x.shape[-1])
        return rows, x.shape[:-1], "mono"

    def prepare(self, x) -> None:
        """Create the state of a stream whose blocks look like ``x`` (nothing is processed);
        this declares the layout: a ``(N, 1)`` block is ``N`` streams (a first block of that
        shape is otherwise refused as a (frames, channels) block,
        :func:`~rtamt.engine.contract.check_time_last`)."""
        self._declaring = True
        try:
            super().prepare(x)
        finally:
            del self._declaring

    def _row_name(self, r, mode):
        return f"batch {r}"

    _modes = ("mono",)

    def _batch_dims(self, mode):
        return 0

    def _rows_for(self, lead, mode):
        return int(np.prod(lead)) if lead else 1

    def _pack(self, fr, lead, mode):
        """The public outputs of the block's frames (time-last)."""
        R, F = fr["R"], fr["F"]
        N, edb = fr["N"], fr["E_db"]
        K = N.shape[1]
        return _pack(fr["stl"], fr["ltl"], fr["inst"], N.reshape(R, F, K),
                     edb.reshape(R, F, K), lead)

    def _steady_diotic(self, N):
        return 2.0 * 0.25 * N.sum(axis=-1)
