"""Paulick, Relaño-Iborra & Dau (2024) CASP model (revised), streaming.

Paulick L, Relaño-Iborra H, Dau T (2024). "The Computational Auditory Signal Processing and
Perception Model (CASP): A Revised Version", bioRxiv (AMT 1.6 ``paulick2024``); the 2008
version is Jepsen, Ewert & Dau (2008), JASA 124, 422-438.

Chain (time-last outputs, input ``(T,)`` or ``(batch, T)`` digital samples, RMS 1 =
``spl_ref`` dB SPL; the model turns them into pressure in Pa before the first stage):

1. ``headphone`` ``(…, T)``: headphone + outer-ear FIR, Pralong & Carlile (1996);
2. ``middleear`` ``(…, T)``: middle-ear FIR, Lopez-Poveda & Meddis (2001): Pa in, stapes
   velocity (m/s) out;
3. ``drnl`` ``(…, C, T)``: dual-resonance nonlinear filterbank, 50 channels equally spaced
   on the ERB-rate scale from 250 to 8000 Hz, basilar-membrane velocity (m/s)
   (:mod:`rtamt.filterbank.drnl`, preset ``paulick2024``);
4. ``ihc`` ``(…, C, T)``: receptor potential (V, re the pre-charged resting potential) of the
   physiological inner hair cell (:mod:`rtamt.ihc.paulick2024`); pre-charged once at
   stream start;
5. ``adaptloop`` ``(…, C, T)``: five adaptation loops, tau = 7, 31.8, 87.8, 214.3, 500 ms,
   overshoot limit 10, and a **per-channel minimum level**: the linear minimum levels of
   Paulick et al. (2024) (50 values for 250-8000 Hz, :data:`MINLVL`), each channel taking
   the value of the nearest tabulated frequency;
6. ``resample`` ``(…, C, T/D)``: stateful polyphase resampler to ``fs_mod = fs / D``
   (:mod:`rtamt.resample`); the output length after ``n`` input samples is ``ceil(n/D)``;
7. ``modfb`` packed ``(…, F, T/D)``: modulation filterbank at ``fs_mod``, preset
   ``paulick2024`` (150 Hz pre-filter, upper limit min(fc/4, 150 Hz), 1/sqrt(2) attenuation).

The decimation factor ``D`` (``resample_factor``) is by default chosen from ``fs``
(:func:`default_resample_factor`): the largest integer that keeps the modulation stage at or
above :data:`FS_MOD_MIN` = 11025 Hz, the rate of the model's design (AMT 1.6 ``paulick2024``
decimates by a fixed 4, and its experiments run at 44.1 kHz).  So ``D = 4`` at 44.1 and
48 kHz, 2 at 22.05 to 32 kHz, 8 at 88.2 and 96 kHz; below 22.05 kHz, where no factor of at
least 2 keeps 11025 Hz, it is 2 (the smallest the resampler takes) and the modulation stage
runs at ``fs / 2``.  A fixed factor of 4 would run it at 5.5 kHz for 22.05 kHz input.
``resample_factor=4`` gives AMT's fixed factor at any rate.

Deviations from the seed's documented behaviour (torch_amt ``Paulick2024``) and from AMT:

* the IHC is the physiological model the issue and AMT 1.6 use (MET conductance + membrane
  ODE), not the seed overview's rectifier / power law / 1500 Hz low-pass;
* the outer/middle ear is AMT's (headphone + Lopez-Poveda middle ear, Pa -> m/s), not the
  seed's ANSI ``OuterMiddleEarFilter`` (which does not produce the stapes velocity the DRNL
  expects);
* the ear filters are minimum-phase (causal) FIRs; AMT's linear-phase FIRs delay the signal
  by half their length;
* resampling is causal (a Kaiser-window polyphase FIR with a delay of 10 output samples,
  ``Resampler.delay``); AMT's ``resample`` is zero-phase (offline);
* the IHC resting potential is the value the pre-charge reaches, -61.66 mV, not the
  documented -57.03 mV (that is the pre-charge's starting value; see
  :mod:`rtamt.ihc.paulick2024`).
"""
from __future__ import annotations

import numpy as np

from ..adaptation import AdaptLoop, AdaptLoopParams
from ..ear import HeadphoneFilter, HeadphoneParams, MiddleEarFilter, MiddleEarParams
from ..ear.calibration import InputCalibration
from ..filterbank.drnl import DRNL, DRNLParams
from ..filterbank.erb import erb_number, erb_to_hz
from ..ihc.paulick2024 import IHCPaulick2024, IHCPaulick2024Params
from ..modulation import ModFilterbank, ModFilterbankParams
from ..resample import Resampler, ResamplerParams
from ._common import ModulationModel

CONFIGS = {"paper": {}}

#: Minimum levels of the adaptation loops (linear, receptor-potential units), one per
#: channel of the 50-channel 250-8000 Hz ERB grid (Paulick et al. 2024; numbers as in
#: AMT 1.6 ``paulick2024``).
MINLVL = 1e-6 * np.array([
    114.6010, 112.6388, 110.5593, 115.6323, 122.8003, 128.3473, 129.4167, 130.5499,
    134.9603, 140.6641, 146.7089, 147.9811, 148.9594, 149.9962, 142.9728, 133.7308,
    123.9364, 116.7957, 110.2674, 103.3490, 96.4875, 89.5786, 82.2569, 74.4976, 66.1913,
    57.3802, 48.0427, 42.4791, 40.9715, 39.3738, 37.6163, 31.9073, 25.8572, 19.4456,
    14.2276, 11.9080, 9.4499, 6.8449, 5.6897, 6.3316, 7.0118, 7.7326, 7.1594, 6.2346,
    5.2545, 4.2159, 3.5157, 2.7790, 1.9983, 1.1709])


#: lowest rate (Hz) of the modulation stage that the default decimation keeps: 44.1 kHz / 4,
#: the rate of the model's design (AMT 1.6 ``paulick2024``: factor 4, experiments at 44.1 kHz)
FS_MOD_MIN = 11025.0


def default_resample_factor(fs: float) -> int:
    """The default decimation before the modulation stage: the largest integer ``D >= 2``
    with ``fs / D >= FS_MOD_MIN`` (4 at 44.1 and 48 kHz, 2 at 22.05 kHz, 8 at 96 kHz), or 2
    below 22.05 kHz, where no such factor exists."""
    return max(2, int(float(fs) // FS_MOD_MIN))


def minlvl_grid() -> np.ndarray:
    """Frequencies (Hz) of :data:`MINLVL`: 50 points equally spaced on the ERB-rate scale
    from 250 to 8000 Hz (Glasberg & Moore 1990 ERB number)."""
    return erb_to_hz(np.linspace(erb_number(250.0), erb_number(8000.0), MINLVL.size))


def minlvl_for(fc) -> np.ndarray:
    """Per-channel minimum level: the :data:`MINLVL` entry of the nearest tabulated
    frequency (in Hz) to each centre frequency ``fc``."""
    g = minlvl_grid()
    idx = np.argmin(np.abs(g[None, :] - np.asarray(fc, dtype=np.float64)[:, None]), axis=1)
    return MINLVL[idx]


class Paulick2024(ModulationModel):
    """Streaming CASP (Paulick et al. 2024) model (see module docstring)."""

    name = "paulick2024"
    fc_stage = "drnl"
    outputs = ("headphone", "middleear", "drnl", "ihc", "adaptloop", "resample", "modfb")

    def __init__(self, fs: float = 44100.0, config: str = "paper", *, spl_ref: float = 100.0,
                 flow: float = 250.0, fhigh: float = 8000.0, n_channels: int = 50,
                 subject: str = "NH", resample_factor: int | None = None,
                 drnl: dict | None = None,
                 ihc: dict | None = None, modfb: dict | None = None,
                 backend: str | None = None, device=None):
        if config not in CONFIGS:
            raise ValueError(f"unknown Paulick2024 config {config!r}; choose from "
                             f"{sorted(CONFIGS)}")
        self.config = config
        self.fs = float(fs)
        cal = InputCalibration(spl_ref, who="Paulick2024", unit="pa")
        hp = HeadphoneFilter(HeadphoneParams(fs=self.fs))
        me = MiddleEarFilter(MiddleEarParams(fs=self.fs, preset="lopezpoveda2001",
                                             normalize=False))
        dr = DRNL(DRNLParams(fs=self.fs, **({"preset": "paulick2024", "flow": flow,
                                             "fhigh": fhigh, "n_channels": n_channels,
                                             "subject": subject} | (drnl or {}))))
        fc = dr.coeffs.fc
        ih = IHCPaulick2024(IHCPaulick2024Params(fs=self.fs, **(ihc or {})))
        minspl = tuple(100.0 + 20.0 * np.log10(minlvl_for(fc)))
        ad = AdaptLoop(AdaptLoopParams(fs=self.fs, preset="paulick2024", minspl=minspl))
        self.resample_factor = _resample_factor(self.fs, resample_factor)
        self.fs_mod = self.fs / self.resample_factor
        rs = Resampler(ResamplerParams(fs_in=self.fs, up=1, down=self.resample_factor))
        mf = ModFilterbank(ModFilterbankParams(fs=self.fs_mod, fc=tuple(fc),
                                               **({"preset": "paulick2024"} | (modfb or {}))))
        super().__init__([cal, hp, me, dr, ih, ad, rs, mf], backend=backend, device=device)


def _resample_factor(fs: float, factor) -> int:
    """``factor`` checked (an integer >= 2), or the default for ``fs``."""
    if factor is None:
        return default_resample_factor(fs)
    if isinstance(factor, bool) or not isinstance(factor, (int, np.integer)) or factor < 2:
        raise ValueError(f"Paulick2024: resample_factor must be an integer >= 2 (or None: "
                         f"chosen from fs), got {factor!r}")
    return int(factor)
