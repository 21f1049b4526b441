"""Streaming programme-loudness meter after ITU-R BS.1770-4 and EBU R128 (Tech 3341).

The meter is a stateful block processor: its state (K-weighting filter memories, the
current 100 ms sub-block, the last 3 s of sub-block energies and the energies of
all 400 ms gating blocks so far) carries across blocks, so any partition of a
stream into blocks -- down to single samples -- gives bit-identical results to one
call on the whole stream.

Sources and formulas
--------------------
* **K-weighting** (ITU-R BS.1770-4, Annex 1, Tables 1 and 2): two biquads in
  cascade, a high-shelf "pre-filter" (head acoustics, about +4 dB above 2 kHz) and
  the "RLB" high-pass (revised low-frequency B-curve).  The Recommendation publishes
  the coefficients for 48 kHz only; :func:`k_weighting_sos` designs them for any
  sample rate from analog prototypes by the bilinear transform, prewarped at the
  prototype's corner frequency ``f0`` (``K = tan(pi f0 / fs)``).  With the normalised
  Laplace variable ``p = s / (2 pi f0)``:

  - pre-filter (high shelf)  ``H1(p) = (Vh p^2 + Vb p / Q + 1) / (p^2 + p / Q + 1)``
  - RLB (high-pass)          ``H2(p) = g p^2 / (p^2 + p / Q + 1)``

  The prototype parameters (module constants ``SHELF_*`` and ``RLB_*``) were obtained
  by inverting the bilinear transform of the published 48 kHz coefficients exactly
  (``K^2 = D(1)/D(-1)``, ``K/Q = 2 (1 - a2) / D(-1)``, ``Vh = N(-1)/D(-1)``,
  ``Vb = (b0 - b2) / (1 - a2)``, ``g = 1 + K/Q + K^2`` where ``N``/``D`` are the numerator
  and denominator polynomials in ``z``), so the design reproduces Tables 1 and 2 at
  48 kHz to rounding (|error| < 1e-12) and keeps the same analog response at other
  rates.  (The published pre-filter satisfies ``N(1) = D(1)``: unit gain at DC.)
* **Loudness of a block** (BS.1770-4, Annex 1, eqs. (1)-(2)): with ``y_i`` the
  K-weighted channel ``i`` and ``z_i`` its mean square over the block,
  ``L_K = -0.691 + 10 log10( sum_i G_i z_i )``  [LUFS (= LKFS)].
  Channel weights ``G_i`` (Table 3): 1.0 for L, R, C; 1.41 (+1.5 dB) for Ls, Rs;
  the LFE channel is not measured (give it weight 0).
* **Gated (integrated) loudness** (BS.1770-4, Annex 1, eqs. (3)-(7), and Annex 2 for
  its rationale): gating blocks of ``T_g = 400 ms`` overlapping by 75 % (a new block
  every 100 ms); absolute gate ``Gamma_a = -70 LUFS``; relative gate ``Gamma_r`` =
  loudness of the mean energy of the blocks above ``Gamma_a``, minus 10 LU; the
  integrated loudness is ``-0.691 + 10 log10`` of the mean of ``sum_i G_i z_ij`` over
  the blocks ``j`` whose loudness exceeds both gates.  A block exactly at a gate is
  rejected (the gates are strict inequalities, ``l_j > Gamma``).
* **Momentary / short-term loudness** (EBU Tech 3341 v4, section 2.2; EBU R128):
  ungated loudness over a sliding rectangular window of 400 ms (momentary, "M") and
  3 s (short-term, "S"), both updated every 100 ms here.  The loudness range (LRA,
  EBU Tech 3342) is not computed by this module.

Time grid and conventions
-------------------------
The stream is cut into 100 ms sub-blocks; sub-block ``k`` (1-based) ends at sample
``e_k = floor(k fs / 10)`` (exactly ``k * fs / 10`` at the usual rates; computed in
exact rational arithmetic, so rates such as 11025 Hz work too).  When sub-block
``k`` completes, one *step* is emitted at stream time ``t_k = e_k / fs`` seconds:

* momentary ``M_k``  = loudness of samples ``[e_{k-4}, e_k)``, defined for ``k >= 4``;
* short-term ``S_k`` = loudness of samples ``[e_{k-30}, e_k)``, defined for ``k >= 30``;
* gating block ``j = k - 3`` is the momentary window, so the integrated loudness
  changes only at steps.

Samples before the stream start are treated as absent, not as silence: a window is
reported only once it is full.  **Not yet defined** is reported as ``None`` in
scalar fields and as ``NaN`` in step arrays; the loudness of **digital silence** is
``-inf`` LUFS (also the integrated value while no gating block passes the absolute
gate).  :func:`lufs_or_none` maps ``-inf``/``NaN`` to ``None`` for JSON.

Filtering runs in float64 for float32 and float64 input alike (the input dtype
affects only the values handed in, not the arithmetic).
"""
from __future__ import annotations

import copy
import dataclasses
import math
from fractions import Fraction
from typing import Any

import numpy as np
from scipy.signal import sosfilt

from ..engine import contract as _C
from ..engine.contract import Registered, RtamtInputError, check_float_dtype, reject_nonfinite
from ..engine.denormal import ensure_ftz

__all__ = [
    "Params", "Coeffs", "LoudnessMeter", "LoudnessResult", "LoudnessInputError",
    "design", "k_weighting_sos", "default_weights", "lufs_or_none", "loudness_of_energy",
    "BS1770_48K_PREFILTER", "BS1770_48K_RLB",
    "ABSOLUTE_GATE_LUFS", "RELATIVE_GATE_LU",
]

# ---------------------------------------------------------------- constants
#: BS.1770-4 Annex 1, Table 1: pre-filter (high shelf) at 48 kHz, (b, a).
BS1770_48K_PREFILTER = ((1.53512485958697, -2.69169618940638, 1.19839281085285),
                        (1.0, -1.69065929318241, 0.73248077421585))
#: BS.1770-4 Annex 1, Table 2: RLB high-pass at 48 kHz, (b, a).
BS1770_48K_RLB = ((1.0, -2.0, 1.0),
                  (1.0, -1.99004745483398, 0.99007225036621))

# Analog prototypes, from the exact inverse bilinear transform of the tables above.
SHELF_F0_HZ = 1681.9744509555323    #: pre-filter corner frequency (Hz)
SHELF_Q = 0.7071752369554194        #: pre-filter quality factor
SHELF_VH = 1.5848647011308554       #: pre-filter high-frequency gain (linear, +4.0 dB)
SHELF_VB = 1.2587209302325613       #: pre-filter band (s-term) gain (linear)
RLB_F0_HZ = 38.13547087611305       #: RLB corner frequency (Hz)
RLB_Q = 0.5003270373250421          #: RLB quality factor
RLB_GAIN = 1.0049948987146884       #: RLB pass-band gain (linear; published b = [1, -2, 1])

LOUDNESS_OFFSET_DB = -0.691         #: BS.1770-4 eq. (2) constant (dB)
ABSOLUTE_GATE_LUFS = -70.0          #: BS.1770-4 eq. (5), Gamma_a (LUFS)
RELATIVE_GATE_LU = -10.0            #: BS.1770-4 eq. (6), Gamma_r offset (LU)
SURROUND_WEIGHT = 1.41              #: BS.1770-4 Table 3, G for Ls / Rs

N_MOMENTARY = 4                     #: 400 ms = 4 sub-blocks (EBU Tech 3341; BS.1770 T_g)
N_SHORT_TERM = 30                   #: 3 s = 30 sub-blocks (EBU Tech 3341)

_NAME = "bs1770"


class LoudnessInputError(RtamtInputError):
    """A block was rejected before it touched the meter's state (a ``ValueError``).

    The message names the block index in the stream and, for non-finite values,
    the channel and sample of the first offending value.
    """


# ---------------------------------------------------------------- design
def default_weights(channels: int) -> tuple[float, ...]:
    """BS.1770-4 Table 3 channel weights ``G_i``.

    A 5-channel layout is taken as L, R, C, Ls, Rs -> ``(1, 1, 1, 1.41, 1.41)``; any
    other channel count gets 1.0 everywhere (pass ``weights`` explicitly for other
    layouts, e.g. 0.0 for an LFE channel, which BS.1770 excludes).
    """
    if channels == 5:
        return (1.0, 1.0, 1.0, SURROUND_WEIGHT, SURROUND_WEIGHT)
    return (1.0,) * channels


@dataclasses.dataclass(frozen=True)
class Params:
    """What a user sets.

    fs: sample rate (Hz), > 2 * 1682 Hz (above the shelf's corner frequency).
    channels: number of input channels ``C`` (blocks are ``(C, T)``; ``(T,)`` if ``C == 1``).
    weights: BS.1770 channel weights ``G_i`` (length ``C``, >= 0); ``None`` ->
        :func:`default_weights`.
    """

    fs: float = 48000.0
    channels: int = 2
    weights: tuple[float, ...] | None = None

    def __post_init__(self):
        fs = float(self.fs)
        if not math.isfinite(fs) or fs <= 2.0 * SHELF_F0_HZ:
            raise ValueError(f"{_NAME}: fs must be a finite rate above {2 * SHELF_F0_HZ:.0f} Hz, "
                             f"got {self.fs!r}")
        if int(self.channels) != self.channels or self.channels < 1:
            raise ValueError(f"{_NAME}: channels must be a positive integer, got {self.channels!r}")
        object.__setattr__(self, "fs", fs)
        object.__setattr__(self, "channels", int(self.channels))
        w = default_weights(self.channels) if self.weights is None else \
            tuple(float(v) for v in self.weights)
        if len(w) != self.channels:
            raise ValueError(f"{_NAME}: {len(w)} weights for {self.channels} channels")
        if not all(math.isfinite(v) and v >= 0.0 for v in w):
            raise ValueError(f"{_NAME}: weights must be finite and >= 0, got {w}")
        object.__setattr__(self, "weights", w)


@dataclasses.dataclass(frozen=True, eq=False)
class Coeffs:
    """Designed once from :class:`Params` by :func:`design`; never changes.

    sos: ``(2, 6)`` float64 K-weighting second-order sections (pre-filter, RLB) in
        :func:`scipy.signal.sosfilt` layout ``[b0, b1, b2, 1, a1, a2]``.
    weights: ``(C,)`` float64 channel weights ``G_i``.
    fs: sample rate (Hz); fs_exact: the same as an exact fraction (sub-block edges).
    max_sub: longest 100 ms sub-block in samples (``ceil(fs / 10)``).
    sub_lens: lengths of one period of the sub-block pattern (``fs / 10`` samples each
        when that is an integer; e.g. 1102, 1103 alternating at 11025 Hz), or ``None``
        when the period is too long to tabulate.
    """

    sos: np.ndarray
    weights: np.ndarray
    fs: float
    fs_exact: Fraction
    channels: int
    max_sub: int
    sub_lens: tuple[int, ...] | None

    def edge(self, k: int) -> int:
        """Sample index where 100 ms sub-block ``k`` ends: ``floor(k fs / 10)``."""
        return math.floor(self.fs_exact * k / 10)

    def sub_len(self, k: int) -> int:
        """Length in samples of sub-block ``k + 1`` (the one after ``k`` completed ones)."""
        if self.sub_lens is not None:
            return self.sub_lens[k % len(self.sub_lens)]
        return self.edge(k + 1) - self.edge(k)


def _bilinear_biquad(num_p, den_p, f0: float, fs: float) -> np.ndarray:
    """Bilinear transform, prewarped at ``f0``, of ``N(p) / D(p)`` with ``p = s / (2 pi f0)``.

    ``num_p`` / ``den_p`` are ``(c2, c1, c0)`` for ``c2 p^2 + c1 p + c0``.  Substituting
    ``p = (1/K) (1 - z^-1) / (1 + z^-1)``, ``K = tan(pi f0 / fs)``, and multiplying by
    ``K^2 (1 + z^-1)^2`` gives the coefficients of ``z^0, z^-1, z^-2``:
    ``c2 + c1 K + c0 K^2``, ``2 (c0 K^2 - c2)``, ``c2 - c1 K + c0 K^2``.
    Returns one normalised sos row ``[b0, b1, b2, 1, a1, a2]``.
    """
    K = math.tan(math.pi * f0 / fs)

    def z_poly(c):
        c2, c1, c0 = c
        return np.array([c2 + c1 * K + c0 * K * K, 2.0 * (c0 * K * K - c2),
                         c2 - c1 * K + c0 * K * K])

    b, a = z_poly(num_p), z_poly(den_p)
    return np.concatenate([b / a[0], a / a[0]])


def k_weighting_sos(fs: float) -> np.ndarray:
    """K-weighting filter (BS.1770-4 Annex 1) for sample rate ``fs`` (Hz) as ``(2, 6)`` sos.

    Row 0 is the pre-filter (high shelf), row 1 the RLB high-pass, both from their
    analog prototypes (module docstring) by the prewarped bilinear transform.  At
    48 kHz the rows equal the published Tables 1 and 2.
    """
    fs = float(fs)
    shelf = _bilinear_biquad((SHELF_VH, SHELF_VB / SHELF_Q, 1.0), (1.0, 1.0 / SHELF_Q, 1.0),
                             SHELF_F0_HZ, fs)
    rlb = _bilinear_biquad((RLB_GAIN, 0.0, 0.0), (1.0, 1.0 / RLB_Q, 1.0), RLB_F0_HZ, fs)
    return np.stack([shelf, rlb])


def design(params: Params) -> Coeffs:
    """Pure design step: :class:`Params` -> :class:`Coeffs` (K-weighting sos, weights, grid)."""
    fs_exact = Fraction(params.fs)
    period = (fs_exact / 10).denominator  # edge(k + period) = edge(k) + period * fs / 10
    lens = None
    if period <= 4096:
        lens = tuple(math.floor(fs_exact * (k + 1) / 10) - math.floor(fs_exact * k / 10)
                     for k in range(period))
    return Coeffs(sos=k_weighting_sos(params.fs),
                  weights=np.asarray(params.weights, dtype=np.float64),
                  fs=params.fs, fs_exact=fs_exact, channels=params.channels,
                  max_sub=math.ceil(fs_exact / 10), sub_lens=lens)


# ---------------------------------------------------------------- helpers
def loudness_of_energy(e):
    """``-0.691 + 10 log10(e)`` (LUFS) for the weighted mean square ``e = sum_i G_i z_i``
    (BS.1770-4 eq. (2)); ``e == 0`` -> ``-inf``.  Scalars give a float, arrays an array."""
    with np.errstate(divide="ignore"):
        out = LOUDNESS_OFFSET_DB + 10.0 * np.log10(np.asarray(e, dtype=np.float64))
    return float(out) if np.ndim(out) == 0 else out


def lufs_or_none(x):
    """JSON-friendly loudness: ``-inf`` / ``NaN`` / ``None`` -> ``None``, finite -> ``float``.

    Arrays (and lists) are mapped element-wise to a list.
    """
    if x is None:
        return None
    if isinstance(x, (np.ndarray, list, tuple)):
        return [lufs_or_none(v) for v in np.asarray(x, dtype=np.float64).ravel()]
    v = float(x)
    return v if math.isfinite(v) else None


def _scalar(v: float) -> float | None:
    return None if math.isnan(v) else v


@dataclasses.dataclass
class LoudnessResult:
    """What one call of :class:`LoudnessMeter` returns (all loudness values in LUFS).

    momentary / short_term: the latest 400 ms / 3 s window loudness (state after
        this block's last completed 100 ms step; ``None`` until the first full window).
    integrated: gated loudness of the whole stream so far (``None`` before the first
        400 ms gating block; ``-inf`` while no block passes the absolute gate).
    step_time: ``(K,)`` float64 stream times (s) of the ``K`` 100 ms steps completed
        in this block (end of each window, ``e_k / fs``).
    step_momentary / step_short_term: ``(K,)`` float64 loudness at those steps
        (``NaN`` where the window is not yet full, ``-inf`` for silence).
    samples: total samples consumed by the stream (per channel), this block included.
    """

    momentary: float | None
    short_term: float | None
    integrated: float | None
    step_time: np.ndarray
    step_momentary: np.ndarray
    step_short_term: np.ndarray
    samples: int

    def to_json(self) -> dict:
        """A JSON-serialisable dict (``-inf`` / ``NaN`` -> ``None``)."""
        return {
            "momentary": lufs_or_none(self.momentary),
            "short_term": lufs_or_none(self.short_term),
            "integrated": lufs_or_none(self.integrated),
            "step_time": [float(t) for t in self.step_time],
            "step_momentary": lufs_or_none(self.step_momentary),
            "step_short_term": lufs_or_none(self.step_short_term),
            "samples": int(self.samples),
        }


# ---------------------------------------------------------------- the meter
class LoudnessMeter(Registered):
    """Streaming BS.1770-4 / EBU R128 loudness meter.

    ``LoudnessMeter(fs=48000, channels=2, weights=None)`` or ``LoudnessMeter(Params(...))``.

    ``meter(block)`` takes a float32/float64 numpy block of shape ``(channels, T)``
    (or ``(T,)`` when ``channels == 1``), ``T >= 1``, finite values in full-scale units
    (a full-scale sine has peak amplitude 1.0), and returns a :class:`LoudnessResult`.
    Invalid blocks raise :class:`LoudnessInputError` (a ``ValueError``) and leave the
    state untouched.  ``reset()`` forgets the stream; ``state_dict()`` /
    ``load_state_dict()`` snapshot and restore it (deep copies; bit-exact continuation).

    State (``state_dict()["state"]``):

    * ``zi``      ``(2, C, 2)`` sosfilt memories of the two K-weighting sections;
    * ``buf``     ``(C, max_sub)`` K-weighted samples of the current, incomplete
      100 ms sub-block (its first ``fill`` columns); its energy is summed only when the
      sub-block completes, so the sum is independent of block boundaries;
    * ``ring_e``  ``(30,)`` weighted sums of squares ``sum_i G_i sum_t y_i^2`` of the
      last 30 sub-blocks (oldest first), ``ring_n`` ``(30,)`` their lengths in samples;
    * ``gate_e``  ``(J,)`` weighted mean squares of all 400 ms gating blocks so far;
    * counters ``fill``, ``n_sub`` (completed sub-blocks), ``samples``, ``block``.
    """

    name = _NAME

    def __init__(self, params: Params | None = None, **kwargs):
        if params is None:
            params = Params(**kwargs)
        elif kwargs:
            params = dataclasses.replace(params, **kwargs)
        self.params = params
        self.coeffs = design(params)
        self.reset()

    def __repr__(self):
        return f"{type(self).__name__}({self.params!r})"

    # -- state ------------------------------------------------------------------------
    def _initial_state(self) -> dict:
        C = self.coeffs.channels
        return {
            "zi": np.zeros((2, C, 2)),
            "buf": np.zeros((C, self.coeffs.max_sub)),
            "fill": 0,
            "ring_e": np.zeros(N_SHORT_TERM),
            "ring_n": np.zeros(N_SHORT_TERM, dtype=np.int64),
            "n_sub": 0,
            "samples": 0,
            "block": 0,
            "momentary": math.nan,
            "short_term": math.nan,
            "integrated": math.nan,
        }

    def reset(self) -> None:
        """Forget the stream: the next block is the first one (empty history, filters at rest)."""
        self._s = self._initial_state()
        self._gate = np.zeros(64)  # capacity buffer behind state["gate_e"]
        self._n_gate = 0

    # -- the streaming contract ---------------------------------------------------------
    batchable = False      # one programme per meter: its channels are summed (BS.1770 eq. 2)
    input_limit = math.inf
    outputs = ("momentary", "short_term", "integrated")

    def process_all(self, x) -> dict:
        """``{'momentary', 'short_term', 'integrated'}`` (LUFS or ``None``) after the block."""
        r = self(x)
        return {"momentary": r.momentary, "short_term": r.short_term,
                "integrated": r.integrated}

    def output_info(self) -> dict:
        """Loudness values (LUFS) updated every 100 ms sub-block (EBU Tech 3341)."""
        return {k: {"rate": 10.0, "channels": None} for k in self.outputs}

    def design_identity(self) -> dict:
        """``{'name', 'fs', 'channels', 'fingerprint'}`` (params and K-weighting design)."""
        fp = self.__dict__.get("_fp")
        if fp is None:
            fp = self._fp = _C.fingerprint(self.params, self.coeffs)
        return {"name": self.name, "fs": float(self.params.fs),
                "channels": int(self.coeffs.channels), "fingerprint": fp}

    def state_dict(self) -> dict:
        """Deep copy of the meter's state in the contract's schema; ``arrays`` holds the
        state listed in the class docstring (counters as 0-d values)."""
        s = dict(self._s)
        s["gate_e"] = self._gate[:self._n_gate]
        return _C.header(self, self._s["block"],
                         _C.stream_meta(None, [self.coeffs.channels], np.float64),
                         arrays=copy.deepcopy(s))

    def load_state_dict(self, sd: dict) -> None:
        """Restore a snapshot from :meth:`state_dict` (checked before anything changes)."""
        try:
            _C.check_identity(self.name, sd, self)
        except RtamtInputError as e:
            raise LoudnessInputError(str(e)) from None
        ref = self._initial_state()
        st = sd.get("arrays")
        if not isinstance(st, dict) or set(st) != set(ref) | {"gate_e"}:
            raise LoudnessInputError(
                f"{self.name}: state keys {sorted(st) if isinstance(st, dict) else st} != "
                f"{sorted(set(ref) | {'gate_e'})}")
        for k, v in ref.items():
            a = np.asarray(st[k])
            if isinstance(v, np.ndarray) and (a.shape != v.shape or a.dtype != v.dtype):
                raise LoudnessInputError(
                    f"{self.name}: state array {k!r} has shape {a.shape} {a.dtype}, "
                    f"expected {v.shape} {v.dtype}")
            if k in ("zi", "buf", "ring_e") and not np.isfinite(a).all():
                raise LoudnessInputError(f"{self.name}: state array {k!r} holds a non-finite "
                                         "value; refused")
        gate = np.array(st["gate_e"], dtype=np.float64, copy=True).ravel()
        self._s = copy.deepcopy({k: v for k, v in st.items() if k != "gate_e"})
        self._n_gate = gate.size
        self._gate = np.zeros(max(64, 2 * gate.size))
        self._gate[:gate.size] = gate

    @classmethod
    def stack_state_dicts(cls, states):
        raise RtamtInputError(
            f"{cls.__name__}: meter states do not stack (one programme per meter; its "
            "channels are one loudness); run one meter per programme")

    @classmethod
    def split_state_dict(cls, state, i):
        raise RtamtInputError(f"{cls.__name__}: meter states hold one programme, no batch")

    @property
    def blocks_processed(self) -> int:
        """Number of blocks accepted since the last reset."""
        return self._s["block"]

    @property
    def samples_processed(self) -> int:
        """Samples (per channel) accepted since the last reset."""
        return self._s["samples"]

    @property
    def momentary(self) -> float | None:
        """Latest momentary loudness (LUFS), ``None`` until 400 ms have been heard."""
        return _scalar(self._s["momentary"])

    @property
    def short_term(self) -> float | None:
        """Latest short-term loudness (LUFS), ``None`` until 3 s have been heard."""
        return _scalar(self._s["short_term"])

    @property
    def integrated(self) -> float | None:
        """Gated integrated loudness so far (LUFS); ``None`` before the first gating block."""
        return _scalar(self._s["integrated"])

    # -- validation ---------------------------------------------------------------------
    def _check(self, x: Any) -> np.ndarray:
        """Return the block as a ``(C, T)`` array, or raise before anything changes."""
        C = self.coeffs.channels
        where = f"{self.name}: block {self._s['block']}"
        if not isinstance(x, np.ndarray):
            raise LoudnessInputError(f"{where}: expected a numpy array, got {type(x).__name__}")
        check_float_dtype(x, where, LoudnessInputError)
        if x.ndim == 1 and C == 1:
            x = x[None, :]
        elif x.ndim != 2:
            want = "(T,) or (1, T)" if C == 1 else f"({C}, T)"
            raise LoudnessInputError(
                f"{where}: expected shape {want}, got ndim={x.ndim} shape {x.shape}")
        if x.shape[0] != C:
            raise LoudnessInputError(
                f"{where}: got {x.shape[0]} channels (shape {x.shape}), the meter measures {C}")
        if x.shape[1] == 0:
            raise LoudnessInputError(f"{where}: empty block (0 samples); blocks need >= 1 sample")
        reject_nonfinite(np.ascontiguousarray(x), where,
                         lambda b: f"channel {b[0]}, sample {b[1]}", LoudnessInputError)
        return x

    # -- processing ---------------------------------------------------------------------
    def __call__(self, x: np.ndarray) -> LoudnessResult:
        """Measure one block; returns a :class:`LoudnessResult` (see class docstring)."""
        x = self._check(x)
        ensure_ftz()
        c, s = self.coeffs, self._s
        y, zf = sosfilt(c.sos, x.astype(np.float64, copy=False), axis=-1, zi=s["zi"])
        T = y.shape[1]
        buf, fill, n_sub = s["buf"], s["fill"], s["n_sub"]
        ring_e, ring_n = s["ring_e"], s["ring_n"]
        times, mom, sht = [], [], []
        pos = 0
        while pos < T:
            length = c.sub_len(n_sub)
            take = min(length - fill, T - pos)
            buf[:, fill:fill + take] = y[:, pos:pos + take]
            fill += take
            pos += take
            if fill < length:
                break
            # sub-block n_sub + 1 complete: its weighted sum of squares (BS.1770 eq. (1)-(2))
            sub = buf[:, :length]
            e_sub = float(np.sum(c.weights * np.sum(sub * sub, axis=1)))
            ring_e[:-1] = ring_e[1:]
            ring_n[:-1] = ring_n[1:]
            ring_e[-1] = e_sub
            ring_n[-1] = length
            fill = 0
            n_sub += 1
            m = st = math.nan
            if n_sub >= N_MOMENTARY:
                e_m = float(np.sum(ring_e[-N_MOMENTARY:])) / int(np.sum(ring_n[-N_MOMENTARY:]))
                m = loudness_of_energy(e_m)
                self._push_gate(e_m)
            if n_sub >= N_SHORT_TERM:
                st = loudness_of_energy(float(np.sum(ring_e)) / int(np.sum(ring_n)))
            times.append(c.edge(n_sub) / c.fs)
            mom.append(m)
            sht.append(st)
        s["zi"] = zf
        s["fill"] = fill
        s["n_sub"] = n_sub
        s["samples"] += T
        s["block"] += 1
        if mom:
            s["momentary"], s["short_term"] = mom[-1], sht[-1]
            if not math.isnan(mom[-1]):
                s["integrated"] = self._gated()
        return LoudnessResult(
            momentary=_scalar(s["momentary"]), short_term=_scalar(s["short_term"]),
            integrated=_scalar(s["integrated"]),
            step_time=np.asarray(times, dtype=np.float64),
            step_momentary=np.asarray(mom, dtype=np.float64),
            step_short_term=np.asarray(sht, dtype=np.float64),
            samples=s["samples"])

    def _push_gate(self, e: float) -> None:
        if self._n_gate == self._gate.size:
            grown = np.zeros(2 * self._gate.size)
            grown[:self._n_gate] = self._gate
            self._gate = grown
        self._gate[self._n_gate] = e
        self._n_gate += 1

    def _gated(self) -> float:
        """Integrated loudness over all gating blocks so far (BS.1770-4 eqs. (3)-(7))."""
        e = self._gate[:self._n_gate]
        lk = loudness_of_energy(e)
        above_abs = lk > ABSOLUTE_GATE_LUFS
        if not above_abs.any():
            return -math.inf
        gamma_r = loudness_of_energy(float(np.mean(e[above_abs]))) + RELATIVE_GATE_LU
        return loudness_of_energy(float(np.mean(e[above_abs & (lk > gamma_r)])))
