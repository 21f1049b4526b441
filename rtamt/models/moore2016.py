"""Moore, Glasberg, Varathanathan & Schlittenlacher (2016) binaural time-varying
loudness, streaming at a 1 ms hop (the model behind ISO 532-3).

Moore B C J, Glasberg B R, Varathanathan A, Schlittenlacher J (2016). "A loudness model
for time-varying sounds incorporating binaural inhibition", Trends in Hearing 20, 1-16;
binaural inhibition from Moore B C J, Glasberg B R (2007). "Modeling binaural
loudness", J. Acoust. Soc. Am. 121, 1604-1612.

A chain of stages (:mod:`rtamt.loudness.tvl`): the calibration stage (``spl_ref``, the
physical input limit), then per ear and frame (1 ms): multi-resolution spectrum ->
outer/middle ear (ANSI S3.4-2007 tables, ``middle_ear="2007"``) -> excitation
(150 roex filters, 0.25 Cam) -> instantaneous specific loudness (ANSI S3.4-2007 eqs.
17-19 with C = 0.06084, see "Calibration") ->
short-term specific loudness by an asymmetric one-pole per channel (attack
alpha = 0.045, release 0.033 per 1 ms by default; the "AGC") -> binaural inhibition: each ear's
short-term pattern is smoothed over frequency with a Gaussian ``exp(-(0.08 g)^2)``
(g in Cam, |g| <= 18) and the factors ``I_L = 2/(1 + sech(S_R/S_L)^1.5978)`` (and
mirror) divide the patterns -> short-term loudness per ear ``0.25 * sum N'/I`` ->
long-term loudness per ear by an asymmetric one-pole (attack 0.01, release 0.00133
per 1 ms by default) -> STL and LTL = left + right.

Time constants (``constants=``, per-millisecond AGC coefficients, attack / release;
``tau = -1 ms / ln(1 - alpha)``):

* ``'2018'`` (default): short-term 0.045 / 0.033 (tau 21.7 / 29.8 ms), long-term
  0.01 / 0.00133 (99.5 / 751 ms), from Moore B C J, Jervis M, Harries L, Schlittenlacher J
  (2018). "Testing and refining a loudness model for time-varying sounds incorporating
  binaural inhibition", J. Acoust. Soc. Am. 143, 1504-1513 (the values of the Cambridge
  group's loudness program);
* ``'2016'``: short-term 0.045 / 0.02 (21.7 / 49.5 ms), long-term 0.01 / 0.0005
  (99.5 / 2000 ms), from Moore et al. (2016) above.

The raw coefficients ``alpha_st`` / ``alpha_lt`` (attack, release per ms) may be given
instead of a name, not together with one.

Configurations (``config=``):

* ``'paper'`` (default): rtamt's, as described above and below (exact window
  calibration, C = 0.06084, the ear as ANSI S3.4-2007 gains on the spectral components,
  0.1-Cam component groups above ~1.2 kHz).
* ``'tvl2018'``: the choices of the Cambridge group's loudness program (its numpy port,
  MalcolmSlaney/LoudnessModel ``tvl2018.py``), which it reproduces frame by frame (within
  2 % of its STL and LTL on the stored reference signals, ``tests/data/moore2016_ref``):
  the outer/middle ear as a 4097-tap linear-phase FIR on the waveform
  (:class:`rtamt.loudness.tvl2018.EarFIR`: ANSI S3.4-2007 tables interpolated linearly
  in Hz, designed at any fs >= 32 kHz), whose delay (2048 samples) is added to
  :attr:`latency_s` and taken out of ``frame_time``, and no ear gain in the spectrum;
  ``numpy.hanning`` windows corrected by a fixed 3.32 dB scaled by the length ratio
  (``2 10^0.332 / (n nfft)``: the 64 ms window would need 4.26 dB, so every component is
  analysed 0.94-1.01 dB below its level); bins at exactly 500 and 1250 Hz
  in the longer window's band; every FFT bin (``comp_cam = 0``); components not above
  ``max(M, 30 dB SPL) - 60 dB`` dropped, ``M`` the frame's largest over both ears
  (:class:`rtamt.loudness.tvl2018.ComponentFloor`); threshold excitation 3.63 dB from
  500 Hz up (ANSI: 3.73); C = 0.0631.  Its settled 1 kHz loudness is -7.9 to +0.2 % of
  ANSI S3.4-2007 Table 7 from 30 to 100 dB (32-48 kHz; the default: -4.9 to +4.9 %), so
  the default stays rtamt's: use ``'tvl2018'`` to compare with the program's numbers.

Input: ``(T,)`` (diotic: the same signal at both ears), ``(2, T)`` (left, right) or
``(batch, 2, T)``.  Outputs (time-last, F frames per block): ``stl``, ``ltl``,
``stl_left``, ``stl_right``, ``ltl_left``, ``ltl_right`` ``(..., F)`` sone;
``specific_loudness`` (short-term, after inhibition, sone/Cam) and ``excitation``
(dB) ``(..., 2, 150, F)``; ``frame_time`` ``(F,)`` s.

Calibration: Moore & Glasberg (2007) give C = 0.0631 for the steady-state binaural
model.  The time-varying analysis smears a steady tone over its window's main lobe
(16 ms Hann at 1 kHz: about +-1 ERB), which makes the settled loudness of 1 kHz tones
9.1 % higher than ANSI S3.4-2007 Table 7 at 30 dB, falling to 1.1 % lower at 100 dB
(measured with C = 0.0631; the steady-state core alone reproduces Table 7 to 0.7 %).
rtamt scales C by 0.9642 (C = 0.06084), the minimax factor over 30-100 dB at 32, 44.1
and 48 kHz together (with the ANSI S3.4-2007 middle ear), so the model's 1 kHz loudness
function stays within +-4.92 % of Table 7 at each of those rates.  ``C=0.0631`` restores the
published constant.

Binaural design, and the resulting monaural/diotic ratio: with identical patterns
``sech(1)^p = 0.50008``, ``I = 1.33326``; with one ear silent ``I = 1``.  So a tone
heard with both ears is ``1 + sech(1)^p = 1.5001`` times as loud as the same tone in
one ear (the ratio ~1.5 that motivated the 2007 model), and the diotic loudness
equals ANSI S3.4-2007's ``2 x monaural`` loudness times ``C / (0.046871 x 1.33326)``.

Deviations from the seed (torch_amt ``Moore2016``), each following the papers:

* the seed computes ``sech(ln(r))`` instead of ``sech(r)``, which gives no inhibition
  for identical patterns and the measured 1.39 sone for a 40 dB 1 kHz tone; rtamt uses
  the hyperbolic secant of the ratio as in Moore & Glasberg (2007, eq. 1);
* the seed's AGC constants are given per frame of a 62.5 Hz hop; rtamt applies the
  per-millisecond values of Moore et al. (2018) (or of 2016, ``constants='2016'``) at the
  published 1 ms hop (rescaled as
  ``1 - (1 - alpha)^(hop/1 ms)`` at rates where the hop is not exactly 1 ms);
* the long-term AGC runs per ear on the inhibited short-term loudness (per-ear LTL is
  reported), the seed's runs once on the summed loudness; for a steady sound both
  give the same value.
"""
from __future__ import annotations

import numpy as np

from ..engine.stage import RtamtInputError
from ..loudness.agc import SpecificLoudnessAGC
from ..loudness.binaural import P_INHIBIT, BinauralInhibition
from ..loudness.specific_loudness import ReferenceSpecificLoudnessParams
from ..loudness.spectrum import ReferenceSpectrumParams
from ..loudness.tvl import TimeVaryingLoudness
from ..loudness.tvl2018 import ComponentFloor, EarFIR

#: the configurations (``config=``): ``'paper'`` rtamt's (default), ``'tvl2018'`` the
#: Cambridge loudness program's choices (see the module docstring); each entry holds the
#: defaults of ``C`` and ``comp_cam`` and which of the program's choices it makes
#: (:data:`PARTS`)
CONFIGS = {"paper": {"C": 0.06084, "comp_cam": 0.1, "parts": ()},
           "tvl2018": {"C": 0.0631, "comp_cam": 0.0,
                       "parts": ("calibration", "edges", "fir", "floor", "threshold")}}

#: the Cambridge program's choices, each one switch: ``calibration`` (``numpy.hanning``
#: windows with the fixed 3.32 dB correction; the configuration's ``C`` goes with it),
#: ``edges`` (bins at an edge in the longer window's band), ``fir`` (the ear as a
#: linear-phase FIR on the waveform, no ear gain in the spectrum), ``floor`` (the component
#: floor), ``threshold`` (3.63 dB from 500 Hz up); ``comp_cam`` is a parameter of its own
PARTS = ("calibration", "edges", "fir", "floor", "threshold")

#: the AGCs' per-millisecond coefficients by paper: ``{name: ((attack, release) short-term,
#: (attack, release) long-term)}`` (see the module docstring)
CONSTANTS = {
    "2018": ((0.045, 0.033), (0.01, 0.00133)),   # Moore, Jervis, Harries & Schlittenlacher 2018
    "2016": ((0.045, 0.02), (0.01, 0.0005)),     # Moore, Glasberg, Varathanathan & S. 2016
}


def _program_stages(parts, fs, field, middle_ear, comp_cam) -> dict:
    """The keyword arguments of :class:`~rtamt.loudness.tvl.TimeVaryingLoudness` that make
    the Cambridge program's choices ``parts`` (:data:`PARTS`); ``{}`` for none (rtamt's
    stages, designs and fingerprints unchanged)."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    if not parts:
        return {}
    cal = "calibration" in parts
    out = {"spectrum_params": ReferenceSpectrumParams(
        fs=fs, field=field, middle_ear=middle_ear, comp_cam=comp_cam,
        window="hanning" if cal else "hann", correction_db=3.32 if cal else None,
        edges_closed="right" if "edges" in parts else "left",
        ear_gain="fir" not in parts)}
    if "fir" in parts:
        out["ear_fir"] = EarFIR(fs=fs, field=field, middle_ear=middle_ear)
    if "floor" in parts:
        out["floor"] = ComponentFloor()
    if "threshold" in parts:
        out["specific_params"] = ReferenceSpecificLoudnessParams()
    return out


def sech_pow_equal(p: float = P_INHIBIT) -> float:
    """``sech(1)^p``: the inhibition term for identical patterns in both ears."""
    return (2.0 / (np.e + 1.0 / np.e)) ** p


class Moore2016(TimeVaryingLoudness):
    """Moore et al. (2016) binaural time-varying loudness (STL/LTL per ear, 1 ms frames):
    the calibration, spectrum, excitation and specific-loudness stages, then
    :class:`~rtamt.loudness.agc.SpecificLoudnessAGC` (short-term specific loudness) and
    :class:`~rtamt.loudness.binaural.BinauralInhibition` (inhibition, per-ear short- and
    long-term loudness).

    Streams are ``(2, T)`` left/right blocks (``(batch, 2, T)`` for a batch) or ``(T,)``
    diotic blocks; states of stereo streams stack into batches
    (:func:`rtamt.stack_states`), a diotic stream's state does not (a diotic block has no
    batch form).
    """

    name = "moore2016"
    #: the configurations this class offers (:data:`CONFIGS`)
    configs = CONFIGS
    outputs = ("stl", "ltl", "stl_left", "stl_right", "ltl_left", "ltl_right",
               "specific_loudness", "excitation", "frame_time")
    C = 0.06084
    fingerprint_fields = TimeVaryingLoudness.fingerprint_fields + (
        "C", "alpha_st", "alpha_lt", "p", "smooth", "smooth_rng")

    def __init__(self, fs: float, config: str = "paper", *, spl_ref: float = 100.0,
                 field: str = "free", comp_cam: float | None = None,
                 middle_ear: str = "2007", C: float | None = None,
                 constants: str | None = None,
                 alpha_st=None, alpha_lt=None, sigma: float = 0.08, width_cam: float = 18.0,
                 p: float = 1.5978, backend: str | None = None, device=None):
        if config not in self.configs:
            raise ValueError(f"unknown moore2016 config {config!r}; choose from "
                             f"{sorted(self.configs)}")
        alpha_st, alpha_lt = self._time_constants(constants, alpha_st, alpha_lt)
        self.config = config
        cfg = self.configs[config]
        C = cfg["C"] if C is None else C
        comp_cam = cfg["comp_cam"] if comp_cam is None else comp_cam
        super().__init__(fs, spl_ref=spl_ref, field=field, comp_cam=comp_cam,
                         middle_ear=middle_ear, C=C, who="Moore2016",
                         **_program_stages(cfg["parts"], float(fs), field, middle_ear,
                                           comp_cam))
        r = self.hop / self.fs / 1e-3
        self.alpha_st = tuple(1.0 - (1.0 - a) ** r for a in alpha_st)
        self.alpha_lt = tuple(1.0 - (1.0 - a) ** r for a in alpha_lt)
        self.p = float(p)
        K = self.coeffs.exc.fc.size
        self.binaural = BinauralInhibition(cam=tuple(self.coeffs.exc.cam), sigma=sigma,
                                           width_cam=width_cam, p=self.p,
                                           attack=self.alpha_lt[0], release=self.alpha_lt[1])
        self._set_stages([SpecificLoudnessAGC(attack=self.alpha_st[0],
                                              release=self.alpha_st[1], channels=K),
                          self.binaural], backend, device)

    def _time_constants(self, constants, alpha_st, alpha_lt) -> tuple:
        """The per-ms AGC coefficients ``(alpha_st, alpha_lt)`` from a name of
        :data:`CONSTANTS` or the raw values (not both); sets :attr:`constants` (the name,
        or ``None`` for raw values)."""
        raw = alpha_st is not None or alpha_lt is not None
        if constants is not None and raw:
            raise ValueError(
                f"Moore2016: give the time constants by name (constants={constants!r}) or as "
                "raw per-ms coefficients (alpha_st, alpha_lt), not both")
        if raw:
            self.constants = None
            st, lt = CONSTANTS["2018"]
            return (st if alpha_st is None else tuple(alpha_st),
                    lt if alpha_lt is None else tuple(alpha_lt))
        name = "2018" if constants is None else str(constants)
        if name not in CONSTANTS:
            raise ValueError(f"Moore2016: unknown constants {constants!r}; choose from "
                             f"{sorted(CONSTANTS)} (Moore et al. 2018 / 2016)")
        self.constants = name
        return CONSTANTS[name]

    @property
    def smooth(self) -> np.ndarray:
        """(K, K) the spatial smoothing weights of the binaural inhibition."""
        return self.binaural.coeffs.smooth

    @property
    def smooth_rng(self) -> np.ndarray:
        """(K, 2) the nonzero band of each row of :attr:`smooth`."""
        return self.binaural.coeffs.smooth_rng

    # input: (T,) diotic | (2, T) | (B, 2, T)
    def _layout(self, x, where):
        if x.ndim == 1:
            return x.reshape(1, -1), (), "diotic"
        if x.ndim in (2, 3) and x.shape[-2] == 2:
            return x.reshape(-1, x.shape[-1]), x.shape[:-1], "stereo"
        hint = "" if x.ndim != 2 or x.shape[1] > 2 else (
            "; time is the last axis: pass x[:, 0] for one channel (diotic), or x.T for a "
            "(frames, 2) block" if x.shape[1] == 1 else "; time is the last axis: pass x.T "
            "for a (frames, 2) block (left, right)")
        raise RtamtInputError(
            f"{where}: expected shape (T,) (diotic), (2, T) (left, right) or (batch, 2, T), "
            f"got {x.shape}{hint}")

    def _row_name(self, r, mode):
        if mode == "diotic" or r is None:
            return "the diotic channel"
        return f"batch {r // 2}, {'left' if r % 2 == 0 else 'right'} ear"

    def _rows_for(self, lead, mode):
        return 1 if mode == "diotic" else int(np.prod(lead))

    _modes = ("diotic", "stereo")

    def _batch_dims(self, mode):
        return 0 if mode == "diotic" else 1

    @classmethod
    def _mode_batches(cls, mode) -> bool:
        return mode == "stereo"      # a diotic (T,) block has no batch form

    @classmethod
    def _rows_per_stream(cls, mode) -> int:
        return 1 if mode == "diotic" else 2

    def _pack(self, fr, lead, mode) -> dict:
        """The public outputs (time-last) from ``fr['ste']``, ``fr['lte']`` (B, 2, F) sone
        and ``fr['spec']``, ``fr['exc']`` (B, 2, K, F), numpy arrays or torch tensors alike."""
        ste, lte, spec, exc = fr["ste"], fr["lte"], fr["spec"], fr["exc"]
        B, _, K, F = spec.shape
        shp = () if mode == "diotic" else tuple(lead[:-1])
        return {
            "stl": (ste[:, 0] + ste[:, 1]).reshape(shp + (F,)),
            "ltl": (lte[:, 0] + lte[:, 1]).reshape(shp + (F,)),
            "stl_left": ste[:, 0].reshape(shp + (F,)), "stl_right": ste[:, 1].reshape(shp + (F,)),
            "ltl_left": lte[:, 0].reshape(shp + (F,)), "ltl_right": lte[:, 1].reshape(shp + (F,)),
            "specific_loudness": spec.reshape(shp + (2, K, F)),
            "excitation": exc.reshape(shp + (2, K, F)),
        }

    def _steady_diotic(self, N):
        i_eq = 2.0 / (1.0 + sech_pow_equal(self.p))
        return 2.0 * 0.25 * N.sum(axis=-1) / i_eq
