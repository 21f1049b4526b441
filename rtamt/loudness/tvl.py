"""The time-varying loudness models as a chain of frame stages.

:class:`TimeVaryingLoudness` is the base of :class:`rtamt.models.Glasberg2002` and
:class:`rtamt.models.Moore2016`: a composite that follows the streaming contract of
:mod:`rtamt.engine.contract` (checked input, state that stacks and splits by stream,
versioned snapshots, ``to()``, ``prepare``, ``reset``) and runs

    InputCalibration -> Spectrum -> Excitation -> SpecificLoudness -> <model's stages>

* :class:`rtamt.ear.calibration.InputCalibration` (``model.stages[0]``, also
  ``model.calibration`` and ``model['calibration']``): digital samples (RMS 1 = ``spl_ref``
  dB SPL, converted to float64) times its gain into the internal units of the stages (RMS
  1 = 100 dB SPL), with the input's physical limit (``max_spl``, the model's
  ``input_limit``);
* the frame stages (:mod:`rtamt.loudness.frames`): :class:`~rtamt.loudness.spectrum.Spectrum`
  owns the frame clock and turns a sample block into the frames completed in it; the
  stages after it work on those frames (:mod:`.excitation`, :mod:`.specific_loudness`,
  :mod:`.agc`, :mod:`.binaural`).

A model consumes audio blocks of any length and emits loudness frames every ``hop``
samples (1 ms).  It is a :class:`rtamt.engine.stage.Chain` that ends on frames
(``frame_outputs``): one ``to()``, one input check, and a state that is its stages' states
nested by stage name (``children``: the calibration's, empty; ``hist``, ``n`` and
``ring<w>`` of the spectrum, the frame clock, see :mod:`.spectrum`; the integrators'
states, ``stl_integrator``/``ltl_integrator`` of Glasberg2002, ``specific_loudness_agc``
and ``binaural_inhibition`` of Moore2016), each with the row first (but ``n``), loaded all
or none.  Snapshots of earlier releases (one flat ``arrays`` dict, or no ``calibration``
child) are migrated on load (:mod:`.migrate`).  Any block partition yields exactly the
same frames as one call on the whole signal.

On the Triton backend (``backend='triton'``, :meth:`TimeVaryingLoudness.to`) each stage
runs the Triton twins of its kernels, bound once; the state arrays are torch tensors on
the model's device, except the frame clock ``n`` (a host array); blocks are validated on
the host and the outputs are tensors on the device.  What a block needs at the boundary
(the input as a numpy array to validate, the float64 rows on the backend's device, the
outputs in the input's dtype and library) is chosen by ``to()`` too
(:func:`rtamt.engine.backend.rows_io`), so that the block path never looks at an array's
type.  Snapshots are numpy on both backends.

Outputs of a block are the frames completed in it: arrays ``(..., F)`` with ``F``
between ``floor(T/hop)`` and ``ceil(T/hop)`` (possibly 0).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ear.calibration import INTERNAL_SPL_REF, CalibratedModel, InputCalibration
from ..engine import contract as _C
from ..engine.backend import HostRows, rows_io
from ..engine.contract import RtamtInputError, check_float_dtype, reject_nonfinite
from ..engine.denormal import ensure_ftz
from ..engine.stage import Chain
from .ansi import SpecificLoudnessCoeffs
from .excitation import Excitation, excitation
from .specific_loudness import SpecificLoudness, specific_loudness
from .spectrum import Spectrum, SpectrumParams, frame_powers

_FLOATS = _C.FLOATS


@dataclasses.dataclass
class TVLCoeffs:
    """The designs of the first three stages (spectrum, excitation, specific loudness)."""

    spec: object
    exc: object
    sl: SpecificLoudnessCoeffs


class TimeVaryingLoudness(CalibratedModel, Chain):
    """Base of :class:`rtamt.models.Glasberg2002` and :class:`rtamt.models.Moore2016`
    (see the module docstring): a :class:`~rtamt.engine.stage.Chain` of the calibration
    (``stages[0]``) and the frame stages, ending on frames.

    Subclasses define ``name``, ``outputs``, ``_layout(arr)`` (input shape -> rows), the
    stages after specific loudness (:meth:`_set_stages`) and ``_pack`` (the frames of a
    block -> the public outputs).
    """

    name = "tvl"
    outputs: tuple = ()
    frame_outputs = True
    #: the block boundary of the backend the model is bound to (:meth:`_rebound`)
    _io = HostRows()
    C = 0.046871
    config = "paper"
    batchable = True
    identity_fields = ("fs", "config", "spl_ref")
    #: the public attributes the design fingerprint of the earlier releases covered (their
    #: snapshots are migrated, :mod:`.migrate`)
    fingerprint_fields: tuple = ("fs", "spl_ref", "field", "middle_ear", "coeffs", "hop",
                                 "frame_rate")

    def __init__(self, fs: float, *, spl_ref: float = 100.0, field: str = "free",
                 comp_cam: float = 0.1, middle_ear: str = "2007", C: float | None = None,
                 level_db: bool = False, who: str = "model", spectrum_params=None,
                 ear_fir=None, floor=None, specific_params=None):
        """``spectrum_params`` (a :class:`SpectrumParams`, e.g. a
        :class:`~rtamt.loudness.spectrum.ReferenceSpectrumParams`) replaces the one made from
        ``field``, ``middle_ear``, ``comp_cam``; ``ear_fir`` (a sample stage,
        :class:`rtamt.loudness.tvl2018.EarFIR`) runs between the calibration and the
        spectrum, ``floor`` (a frame stage on ``'P'``) after the spectrum;
        ``specific_params`` replaces the specific loudness stage's params."""
        self.fs = float(fs)
        cal = InputCalibration(spl_ref, who=who)
        self.field = field
        self.middle_ear = middle_ear
        if C is not None:
            self.C = float(C)
        if spectrum_params is None:
            spectrum_params = SpectrumParams(fs=self.fs, field=field, middle_ear=middle_ear,
                                             comp_cam=comp_cam)
        self.spectrum = Spectrum(spectrum_params)
        sp = self.spectrum.coeffs
        self.excitation = Excitation(comp_hz=tuple(sp.comp_hz), level_db=level_db)
        ex = self.excitation.coeffs
        self.specific = (SpecificLoudness(fc=tuple(ex.fc), C=self.C) if specific_params is None
                         else SpecificLoudness(dataclasses.replace(
                             specific_params, fc=tuple(ex.fc), C=self.C)))
        self.coeffs = TVLCoeffs(sp, ex, self.specific.coeffs)
        self.hop = self.spectrum.hop
        self.frame_rate = self.fs / self.hop
        self.ear_fir = ear_fir
        #: the delay (s) of the waveform stages before the spectrum (the linear-phase ear)
        self.pre_delay_s = 0.0 if ear_fir is None else ear_fir.delay / self.fs
        # the head of the chain; the subclass completes it (_set_stages)
        self.stages = [cal, *([] if ear_fir is None else [ear_fir]), self.spectrum,
                       *([] if floor is None else [floor]), self.excitation, self.specific]
        self._n_head = len(self.stages)
        self._meta = None
        self._block = 0
        self._phon_table = None

    def _set_stages(self, stages: list, backend=None, device=None) -> None:
        """The model's stages after specific loudness; the chain is built
        (:class:`~rtamt.engine.stage.Chain`: the calibration first, flows checked: samples
        into the spectrum, then the frames each stage reads written before it, names
        unique); then ``to(device, backend)`` if either is given."""
        Chain.__init__(self, [*self.stages[:self._n_head], *stages])
        if backend is not None or device is not None:
            self.to(device, backend=backend)

    def _rebound(self) -> None:
        """After ``to()``, ``reset()`` and a load: the block boundary of the backend
        (:func:`rtamt.engine.backend.rows_io`)."""
        super()._rebound()
        self._io = rows_io(self.backend, self.device)

    # ------------------------------------------------------------------ info
    @property
    def fc(self) -> np.ndarray:
        """Centre frequencies of the 150 excitation channels (Hz), 1.75-39 Cam."""
        return self.coeffs.exc.fc

    @property
    def latency_s(self) -> float:
        """Delay of a frame's centre behind its newest input sample (s): the spectrum's
        (half the longest window) plus that of a linear-phase ear filter."""
        return self.spectrum.latency_s + self.pre_delay_s

    # ------------------------------------------------------------------ input
    def _layout(self, x: np.ndarray, where: str):  # pragma: no cover - abstract
        """-> (rows (R, T) view, lead shape, mode)"""
        raise NotImplementedError

    def _check(self, x: np.ndarray):
        where = f"{self.name}: block {self._block}"
        check_float_dtype(x, where)
        rows, lead, mode = self._layout(x, where)
        if rows.shape[-1] == 0:
            raise RtamtInputError(f"{where}: empty block (0 samples); blocks need >= 1 sample")
        if self._meta is not None and (lead, mode, x.dtype) != self._meta:
            raise RtamtInputError(
                f"{where}: shape {x.shape} / dtype {x.dtype} differs from the stream's "
                f"(lead {self._meta[0]}, {self._meta[1]}, {self._meta[2]}); call reset() first")
        reject_nonfinite(rows, where, lambda b: f"{self._row_name(b[0], mode)}, sample {b[1]}",
                         limit=self.input_limit,
                         limit_text=self._limit_text)
        return rows, lead, mode

    def _row_name(self, r: int, mode) -> str:
        return f"row {r}"

    # ------------------------------------------------------------------ state
    def _calibration_lead(self, lead, mode) -> tuple:
        """The calibration's stream layout in a model stream of ``lead``, ``mode``: its
        leading shape is the model's batch of streams (``(B,)``, or ``()`` for one stream),
        so that its (empty) state stacks and splits with the model's; it scales the float64
        rows of every stream."""
        return (lead[0],) if len(lead) > self._batch_dims(mode) else ()

    def _start(self, R: int, lead, mode, dtype) -> None:
        """Every stage's initial state for ``R`` rows of a stream of layout ``mode``, all
        or none; the model's stream layout ``(lead, mode, dtype)``."""
        rps = self._rows_per_stream(mode)
        cal, *frames = self.stages
        try:
            cal._ensure_state(self._calibration_lead(lead, mode), 1, np.dtype(np.float64))
            for s in frames:
                s._start(R, rps)
        except Exception:
            for s in self.stages:
                s.reset()
            raise
        self._meta = (lead, mode, dtype)

    def reset(self) -> None:
        """Forget the stream (silence before the next block); block counter back to 0."""
        super().reset()
        self._meta = None
        self._block = 0

    @property
    def state(self):
        """``{stage name: its state arrays}`` (``None`` before the first block)."""
        if self._meta is None:
            return None
        return {s.name: s.state for s in self.stages}

    # ------------------------------------------------------------------ contract
    def design_identity(self) -> dict:
        """``{'name', 'fs', 'config', 'spl_ref', 'fingerprint'}``; the fingerprint covers
        the calibration's gain and the design fingerprint (params and designed
        coefficients) of every stage after it: the fingerprint of the release before the
        calibration was ``stages[0]``, so that its snapshots load unchanged."""
        fp = self.__dict__.get("_fp")
        if fp is None:
            cal, *frames = self.stages
            fp = self._fp = _C.fingerprint(
                type(self).__name__, float(cal.gain),
                [s.design_identity()["fingerprint"] for s in frames])
        return _C.identity(self, self.identity_fields, fp)

    def output_info(self) -> dict:
        """``{output name: {'rate': frame rate (Hz), 'channels': excitation channels or
        None}}``; ``frame_time`` is each frame's centre time (s)."""
        K = int(self.fc.size)
        return {k: {"rate": self.frame_rate,
                    "channels": K if k in ("specific_loudness", "excitation") else None}
                for k in self.outputs}

    #: no modulation analysis (the attribute exists on every model)
    mfc = None

    def _batch_dims(self, mode) -> int:
        """How many leading dims of a block a stream of ``mode`` has without a batch axis."""
        raise NotImplementedError  # pragma: no cover - abstract

    def _stream_meta(self):
        if self._meta is None:
            return None
        lead, mode, dt = self._meta
        batched = len(lead) > self._batch_dims(mode)
        return _C.stream_meta(lead[0] if batched else None, lead[1:] if batched else lead,
                              dt, mode=mode)

    def _parse_stream(self, st) -> tuple:
        """``(lead, mode, dtype)`` of a snapshot's model ``stream`` entry (checked)."""
        try:
            lead = tuple(int(v) for v in st["lead"])
            if st["batch"] is not None:
                lead = (int(st["batch"]),) + lead
            mode, dt = st["mode"], np.dtype(st["dtype"])
        except (KeyError, TypeError, ValueError):
            raise RtamtInputError(f"{self.name}: malformed stream entry {st!r}") from None
        if dt not in _FLOATS or mode not in self._modes:
            raise RtamtInputError(f"{self.name}: snapshot layout {st!r} is not one of this "
                                  f"model's (modes {self._modes}, float32/float64)")
        return lead, mode, dt

    def state_dict(self) -> dict:
        """Deep copy of the state in the contract's schema (:mod:`rtamt.engine.contract`):
        the model's stream layout and ``children``, each stage's own snapshot."""
        return _C.header(self, self._block, self._stream_meta(),
                         children=self._children_state())

    def load_state_dict(self, sd: dict) -> None:
        """Restore a snapshot (checked: kind, design identity, layout, every stage's arrays,
        finite) all or none; a snapshot of an earlier release is migrated first
        (:func:`rtamt.loudness.migrate.model_snapshot`)."""
        from .migrate import model_snapshot

        sd = model_snapshot(self, sd)
        _C.check_identity(self.name, sd, self)
        st, ch = sd.get("stream"), sd.get("children")
        meta = None
        if st is not None:
            meta = self._parse_stream(st)
            lead, mode = meta[:2]
            R, rps = self._rows_for(lead, mode), self._rows_per_stream(mode)
            f64 = np.dtype(np.float64)
            for s in self.stages:
                want = ((self._calibration_lead(lead, mode), 1, f64) if s is self.stages[0]
                        else (R, rps, f64))
                c = ch.get(s.name) if isinstance(ch, dict) else None
                cst = c.get("stream") if isinstance(c, dict) else None
                if cst is None or s._meta_from(cst) != want:
                    raise RtamtInputError(
                        f"{self.name}: stage {s.name!r}'s state has layout {cst!r}, the "
                        f"stream's {st!r} has {R} rows, {rps} per stream")
        self._load_children(ch)
        self._meta, self._block = meta, int(sd["block"])

    @classmethod
    def stack_state_dicts(cls, states: list) -> dict:
        """Batched state of several streams: every stage's states stacked (rows; the frame
        clock ``n`` must be equal: frames of a batch fall due together)."""
        s0 = states[0]
        for i, s in enumerate(states):
            if "children" not in s or set(s["children"]) != set(s0.get("children", ())):
                raise RtamtInputError(
                    f"{cls.__name__}: state {i} is an earlier release's snapshot or has "
                    "other stages than state 0; load each into a model first "
                    "(load_state_dict migrates it)")
            if s.get("stream") is None:
                raise RtamtInputError(
                    f"{cls.__name__}: state {i} has not processed a block yet; start every "
                    "stream first")
            if not cls._mode_batches(s["stream"]["mode"]):
                raise RtamtInputError(
                    f"{cls.__name__}: state {i} is a {s['stream']['mode']} stream, which does "
                    "not batch (see the class docstring)")
            a, b = dict(s["stream"]), dict(s0["stream"])
            a.pop("batch"), b.pop("batch")
            if a != b:
                raise RtamtInputError(
                    f"{cls.__name__}: state {i} has stream layout {a}, state 0 has {b}")
        out = _C.stack_children(cls.__name__, states)
        out["stream"] = _C.deep(s0["stream"])
        out["stream"]["batch"] = sum(1 if s["stream"]["batch"] is None else
                                     s["stream"]["batch"] for s in states)
        out["block"] = max(int(s["block"]) for s in states)
        return out

    @classmethod
    def split_state_dict(cls, state: dict, i: int) -> dict:
        """Stream ``i`` of a batched state (each stage's rows of that stream)."""
        out = _C.split_children(state, i)
        out["stream"] = _C.deep(state["stream"])
        out["stream"]["batch"] = None
        return out

    @classmethod
    def _mode_batches(cls, mode) -> bool:
        return True

    @classmethod
    def _rows_per_stream(cls, mode) -> int:
        return 1

    def _rows_for(self, lead, mode) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------------ processing
    #: the frame times are the same for every stream of one call (no batch axis)
    unbatched_outputs = ("frame_time",)
    #: the outputs the model computes on the host in float64 on either backend
    _host_outputs = ("frame_time",)

    def prepare(self, x) -> None:
        """Create the initial state of a stream whose blocks look like ``x`` (checked like
        a block; nothing is processed).  Does nothing if the state exists."""
        arr, _ = self._io.take(x)
        rows, lead, mode = self._check(arr)
        if self._meta is None:
            self._start(rows.shape[0], lead, mode, arr.dtype)

    def state_leaves(self):
        if self._meta is None:
            return []
        if not self._mode_batches(self._meta[1]):
            return None
        return super().state_leaves()

    def advance_blocks(self, k: int = 1) -> None:
        super().advance_blocks(k)
        self._block += k

    def __call__(self, x) -> dict:
        """Process one block; returns ``{output name: array}`` for the frames completed
        in it (time-last, input's library and dtype)."""
        return self.process_all(x)

    def process_all(self, x) -> dict:
        """Process one block (see :meth:`__call__`).  The block boundary is the one
        ``to()`` bound (``self._io``): the block as a numpy array to validate, the float64
        rows on the backend's device, the outputs in the input's dtype and library (tensors
        on the device on Triton)."""
        ensure_ftz()
        io = self._io
        arr, back = io.take(x)
        rows, lead, mode = self._check(arr)
        if self._meta is None:
            self._start(rows.shape[0], lead, mode, arr.dtype)
        state = {s.name: s._state for s in self.stages}
        out = self.process(self.coeffs, state, io.rows(rows), lead, mode)
        self.advance_blocks()
        return io.hand_out(out, arr.dtype, back, self._host_outputs)

    def process(self, coeffs, state: dict, rows, lead=(), mode=None) -> dict:
        """Pure form: advance ``state`` (``{stage name: that stage's state}``, the
        calibration's empty) over ``rows`` (R, T) float64 digital samples (no validation):
        the calibration stage (``stages[0]``: the gain into internal units, one float64
        product per sample), then the frame stages; returns the outputs of the completed
        frames (float64).  On the Triton backend ``rows`` is a tensor on the model's
        device, the state holds tensors there (the frame clock ``n`` a host array) and the
        outputs are tensors there, ``frame_time`` (F,) a host numpy array (s).  ``coeffs``
        is :attr:`coeffs` (the stages hold their designs)."""
        cal, *frames = self.stages
        fr = {"rows": cal.process_tm(cal.coeffs, state[cal.name], rows)}
        for s in frames:
            s.process_tm(fr, state[s.name])
        out = self._pack(fr, lead, mode)
        ft = self.spectrum.frame_time(fr["ends"])
        out["frame_time"] = ft - self.pre_delay_s if self.pre_delay_s else ft
        return out

    def _pack(self, fr: dict, lead, mode) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------------ phon
    def steady_tone_loudness(self, levels_db, freq: float = 1000.0) -> np.ndarray:
        """The model's settled loudness (sone) of a steady diotic tone at ``levels_db``
        dB SPL: the component powers of 16 consecutive frames of the tone (averaged) are
        scaled to each level and run through excitation, specific loudness and the
        model's binaural rule (numba kernels, numpy).  Used for :meth:`phon`."""
        sp = self.coeffs.spec
        lv = np.atleast_1d(np.asarray(levels_db, dtype=np.float64))
        n = sp.nmax + 16 * sp.hop
        t = np.arange(n) / self.fs
        x = np.sqrt(2.0) * np.sin(2 * np.pi * freq * t)[None, :]  # RMS 1 = 100 dB SPL
        ends = sp.nmax + sp.hop * np.arange(1, 17)
        P1 = frame_powers(sp, x, ends).mean(axis=0)
        if self.ear_fir is not None:        # the ear is a filter on the waveform
            P1 = P1 * self.ear_fir.coeffs.response(freq) ** 2
        P = P1[None, :] * 10.0 ** ((lv[:, None] - INTERNAL_SPL_REF) / 10.0)
        E = excitation(self.coeffs.exc, P)
        N = np.empty_like(E)
        sl = self.coeffs.sl
        specific_loudness(E, sl.G, sl.A, sl.alpha, sl.A_alpha, sl.ethrq, sl.C, N)
        return self._steady_diotic(N)

    def _steady_diotic(self, N: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def phon(self, sone):
        """Loudness level (phon) of a loudness (sone): the level of the 1 kHz diotic tone
        that this model gives the same loudness (inverse of :meth:`steady_tone_loudness`,
        tabulated from -10 to 130 dB in 0.1 dB steps, linear interpolation in log sone;
        clamped to that range; 0 sone -> -10 phon)."""
        if self._phon_table is None:
            lv = np.arange(-10.0, 130.0 + 1e-9, 0.1)
            s = self.steady_tone_loudness(lv)
            s = np.maximum.accumulate(np.maximum(s, 1e-12))
            self._phon_table = (np.log(s), lv)
        ls, lv = self._phon_table
        v = np.log(np.maximum(np.asarray(sone, dtype=np.float64), 1e-12))
        return np.interp(v, ls, lv)
