"""The time-varying loudness models as a chain of frame stages.

:class:`TimeVaryingLoudness` is the base of :class:`rtamt.models.Glasberg2002` and
:class:`rtamt.models.Moore2016`: a composite that follows the streaming contract of
:mod:`rtamt.engine.contract` (checked input, state that stacks and splits by stream,
versioned snapshots, ``to()``, ``prepare``, ``reset``) and runs

    InputCalibration -> Spectrum -> Excitation -> SpecificLoudness -> <model's stages>

* :class:`rtamt.calibration.InputCalibration` (``model.calibration``): digital samples
  (RMS 1 = ``spl_ref`` dB SPL) times its gain into the internal units of the stages (RMS
  1 = 100 dB SPL), with the input's physical limit (``max_spl``);
* the frame stages (:mod:`rtamt.loudness.frames`): :class:`~rtamt.loudness.spectrum.Spectrum`
  owns the frame clock and turns a sample block into the frames completed in it; the
  stages after it work on those frames (:mod:`.excitation`, :mod:`.specific_loudness`,
  :mod:`.agc`, :mod:`.binaural`).

A model consumes audio blocks of any length and emits loudness frames every ``hop``
samples (1 ms).  Its state is the union of its stages' states (keys unique across the
stages): ``hist``, ``n`` and ``ring<w>`` of the spectrum (the frame clock, see
:mod:`.spectrum`), then the integrators' states (``stl``, ``ltl`` of Glasberg2002; ``st``,
``lt`` of Moore2016); every array but ``n`` has the row first.  Any block partition
yields exactly the same frames as one call on the whole signal.

On the Triton backend (``backend='triton'``, :meth:`TimeVaryingLoudness.to`) each stage
runs the Triton twins of its kernels, bound once; the state arrays are torch tensors on
the model's device, except the frame clock ``n`` (a host array); blocks are validated on
the host and the outputs are tensors on the device.  Snapshots are numpy on both
backends.

Outputs of a block are the frames completed in it: arrays ``(..., F)`` with ``F``
between ``floor(T/hop)`` and ``ceil(T/hop)`` (possibly 0).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..calibration import INTERNAL_SPL_REF, CalibratedModel, InputCalibration
from ..engine import backend as _B
from ..engine import contract as _C
from ..engine.contract import Registered, RtamtInputError, check_float_dtype, reject_nonfinite
from ..engine.denormal import ensure_ftz
from ..engine.stage import as_numpy_block
from .ansi import SpecificLoudnessCoeffs
from .excitation import Excitation, excitation
from .frames import state_on
from .specific_loudness import SpecificLoudness, specific_loudness
from .spectrum import Spectrum, SpectrumParams, design_spectrum, frame_powers

_FLOATS = _C.FLOATS


@dataclasses.dataclass
class TVLCoeffs:
    """The designs of the first three stages (spectrum, excitation, specific loudness)."""

    spec: object
    exc: object
    sl: SpecificLoudnessCoeffs


class TimeVaryingLoudness(CalibratedModel, Registered):
    """Base of :class:`rtamt.models.Glasberg2002` and :class:`rtamt.models.Moore2016`
    (see the module docstring).

    Subclasses define ``name``, ``outputs``, ``_layout(arr)`` (input shape -> rows), the
    stages after specific loudness (:meth:`_set_stages`) and ``_pack`` (the frames of a
    block -> the public outputs).
    """

    name = "tvl"
    outputs: tuple = ()
    C = 0.046871
    config = "paper"
    batchable = True
    identity_fields = ("fs", "config", "spl_ref")
    #: the public attributes the design fingerprint covers (those of the earlier
    #: monolithic models, so that their snapshots still load)
    fingerprint_fields: tuple = ("fs", "spl_ref", "field", "middle_ear", "coeffs", "hop",
                                 "frame_rate")

    #: compute backend ('numba' | 'triton') and torch device (see :meth:`to`)
    _backend = "numba"
    _device = None

    def __init__(self, fs: float, *, spl_ref: float = 100.0, field: str = "free",
                 comp_cam: float = 0.1, middle_ear: str = "2007", C: float | None = None,
                 level_db: bool = False, who: str = "model"):
        self.fs = float(fs)
        self.calibration = InputCalibration(spl_ref, who=who)
        self.field = field
        self.middle_ear = middle_ear
        if C is not None:
            self.C = float(C)
        self.spectrum = Spectrum(SpectrumParams(fs=self.fs, field=field,
                                                middle_ear=middle_ear, comp_cam=comp_cam))
        sp = self.spectrum.coeffs
        self.excitation = Excitation(comp_hz=tuple(sp.comp_hz), level_db=level_db)
        ex = self.excitation.coeffs
        self.specific = SpecificLoudness(fc=tuple(ex.fc), C=self.C)
        self.coeffs = TVLCoeffs(sp, ex, self.specific.coeffs)
        self.hop = self.spectrum.hop
        self.frame_rate = self.fs / self.hop
        self.stages = [self.spectrum, self.excitation, self.specific]
        self._state = None
        self._meta = None
        self._block = 0
        self._phon_table = None

    def _set_stages(self, stages: list, backend=None, device=None) -> None:
        """The model's stages after specific loudness; then ``to(device, backend)`` if
        either is given."""
        self.stages = [self.spectrum, self.excitation, self.specific, *stages]
        if backend is not None or device is not None:
            self.to(device, backend=backend)

    # ------------------------------------------------------------------ calibration
    @property
    def input_limit(self) -> float:
        """Largest accepted ``|sample|``: ``10^((max_spl - spl_ref)/20)``."""
        return self.calibration.limit

    def _limit_text(self) -> str:
        return self.calibration.limit_text()

    # ------------------------------------------------------------------ info
    @property
    def fc(self) -> np.ndarray:
        """Centre frequencies of the 150 excitation channels (Hz), 1.75-39 Cam."""
        return self.coeffs.exc.fc

    @property
    def latency_s(self) -> float:
        """Delay of a frame's centre behind its newest input sample (s)."""
        return self.spectrum.latency_s

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
    def _init_state(self, R: int, mode=None) -> dict:
        """The initial state of ``R`` rows (numpy): the union of the stages' states (the
        same for every ``mode``)."""
        st: dict = {}
        for s in self.stages:
            st.update(s.init_state(R))
        return st

    def _new_state(self, R: int) -> dict:
        """The initial state on this model's backend."""
        return self._state_to(self._init_state(R), self._backend, self._device)

    def reset(self) -> None:
        """Forget the stream (silence before the next block); block counter back to 0."""
        self._state = None
        self._meta = None
        self._block = 0

    @property
    def state(self):
        return self._state

    # ------------------------------------------------------------------ backend
    @property
    def backend(self) -> str:
        """``'numba'`` (numpy state and outputs) or ``'triton'`` (torch tensors on
        :attr:`device`)."""
        return self._backend

    @property
    def device(self):
        """The torch device of the Triton backend (``None`` on numba)."""
        return self._device

    def _state_to(self, st: dict, backend: str, device) -> dict:
        """``st`` with its arrays on ``backend``/``device`` (new arrays, values exact); the
        frame clock ``n`` stays a host numpy array on both backends."""
        return state_on(st, backend, device)

    def to(self, device=None, *, backend: str | None = None):
        """Run on ``backend`` ('numba' or 'triton') and ``device`` (see
        :func:`rtamt.engine.backend.resolve`: ``device='cuda'`` implies Triton), as
        :meth:`rtamt.engine.stage.Chain.to`: every stage binds its kernels once.  The
        stream's state moves along exactly (float64 values copied) and the stream
        continues; all or nothing (the new state is built before anything changes).
        Returns self."""
        backend, device = _B.resolve(backend, device)
        missing = [s.name for s in self.stages if backend == "triton" and not s.triton_ready]
        if missing:
            raise _B.RtamtBackendError(
                f"{self.name}: no Triton kernel for stage(s) {missing}; use backend='numba'")
        st = None if self._state is None else self._state_to(self._state, backend, device)
        for s in self.stages:
            s.bind(backend, device)
        self._state, self._backend, self._device = st, backend, device
        return self

    # ------------------------------------------------------------------ contract
    #: state keys shared by all streams of a batch (the frame clock)
    shared_state = Spectrum.shared_state

    def design_identity(self) -> dict:
        """``{'name', 'fs', 'config', 'spl_ref', 'fingerprint'}``; the fingerprint covers
        the designed coefficients and the public parameters of the model
        (:attr:`fingerprint_fields`), as the earlier versions computed it: their spectrum
        gains held ``spl_ref``, which the calibration stage holds now, so for another
        ``spl_ref`` than 100 the fingerprint takes the spectrum designed at that level."""
        fp = self.__dict__.get("_fp")
        if fp is None:
            pub = {k: getattr(self, k) for k in self.fingerprint_fields}
            if self.spl_ref != INTERNAL_SPL_REF:
                spec = design_spectrum(self.spectrum.params, level_db=self.spl_ref)
                pub["coeffs"] = TVLCoeffs(spec, self.coeffs.exc, self.coeffs.sl)
            fp = self._fp = _C.fingerprint(type(self).__name__, pub)
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

    def state_dict(self) -> dict:
        """Deep copy of the state in the contract's schema (:mod:`rtamt.engine.contract`):
        ``arrays`` the union of the stages' states (see the module docstring)."""
        return _C.header(self, self._block, self._stream_meta(),
                         arrays=None if self._state is None else
                         {k: _B.to_numpy(v) for k, v in self._state.items()})

    def load_state_dict(self, sd: dict) -> None:
        """Restore a snapshot (checked: kind, design identity, layout, arrays, finite)."""
        _C.check_identity(self.name, sd, self)
        st = sd.get("stream")
        if st is None:
            self.reset()
            self._block = int(sd["block"])
            return
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
        ref = self._init_state(self._rows_for(lead, mode))
        st = _C.check_state_arrays(self.name, sd.get("arrays"), ref)
        self._state = self._state_to(st, self._backend, self._device)
        self._meta = (lead, mode, dt)
        self._block = int(sd["block"])

    @classmethod
    def stack_state_dicts(cls, states: list) -> dict:
        """Batched state of several streams (rows stacked; the frame clock ``n`` must be
        equal: frames of a batch fall due together)."""
        for i, s in enumerate(states):
            if s.get("stream") is not None and not cls._mode_batches(s["stream"]["mode"]):
                raise RtamtInputError(
                    f"{cls.__name__}: state {i} is a {s['stream']['mode']} stream, which does "
                    "not batch (see the class docstring)")
        return _C.stack_leaves(cls.__name__, states, {}, cls.shared_state)

    @classmethod
    def split_state_dict(cls, state: dict, i: int) -> dict:
        st = state.get("stream") or {}
        rows = cls._rows_per_stream(st.get("mode"))
        return _C.split_leaf(cls.__name__, state, i, {}, cls.shared_state, rows)

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

    def prepare(self, x) -> None:
        """Create the initial state of a stream whose blocks look like ``x`` (checked like
        a block; nothing is processed).  Does nothing if the state exists."""
        arr, _ = as_numpy_block(x)
        rows, lead, mode = self._check(arr)
        if self._state is None:
            self._state = self._new_state(rows.shape[0])
            self._meta = (lead, mode, arr.dtype)

    def _state_leaves(self):
        st = self._state
        if st is None or not self._mode_batches(self._meta[1]):
            return None if st is not None else []
        return [(st, k, None if k in self.shared_state else 0) for k in st]

    def _bump(self, k: int = 1) -> None:
        self._block += k

    def __call__(self, x) -> dict:
        """Process one block; returns ``{output name: array}`` for the frames completed
        in it (time-last, input's library and dtype)."""
        return self.process_all(x)

    def process_all(self, x) -> dict:
        ensure_ftz()
        arr, back = as_numpy_block(x)
        rows, lead, mode = self._check(arr)
        if self._state is None:
            self._state = self._new_state(rows.shape[0])
            self._meta = (lead, mode, arr.dtype)
        dt = arr.dtype
        if self._backend == "triton":       # validated on the host; processed on the device
            import torch

            r64 = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float64))
            out = self.process(self.coeffs, self._state, r64.to(self._device), lead, mode)
            self._block += 1
            tdt = torch.float32 if dt == np.float32 else torch.float64
            return {k: (v.to(tdt) if k != "frame_time" else
                        torch.from_numpy(v).to(self._device)) for k, v in out.items()}
        out = self.process(self.coeffs, self._state, rows.astype(np.float64, copy=False), lead,
                           mode)
        self._block += 1
        return {k: back(v.astype(dt) if k != "frame_time" else v) for k, v in out.items()}

    def process(self, coeffs, state: dict, rows, lead=(), mode=None) -> dict:
        """Pure form: advance ``state`` over ``rows`` (R, T) float64 digital samples (no
        validation): the calibration gain into internal units, then the stages; returns the
        outputs of the completed frames (float64).  On the Triton backend ``rows`` is a
        tensor on the model's device, the state holds tensors there (the frame clock ``n``
        a host array) and the outputs are tensors there, ``frame_time`` (F,) a host numpy
        array (s).  ``coeffs`` is :attr:`coeffs` (the stages hold their designs)."""
        fr = {"rows": self.calibration.apply(rows, on_device=self._backend == "triton")}
        for s in self.stages:
            s.process_tm(fr, state)
        out = self._pack(fr, lead, mode)
        out["frame_time"] = self.spectrum.frame_time(fr["ends"])
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
