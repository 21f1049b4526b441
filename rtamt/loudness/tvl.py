"""Shared streaming machinery of the time-varying loudness models.

A model here consumes audio blocks of any length and emits loudness frames every
``hop`` samples (1 ms).  Its state is

* ``hist``  (R, nmax) the last ``nmax`` input samples of each row (64 ms; zeros = the
  silence before the stream),
* ``n``     (1,) int64 samples consumed so far (frames are due at multiples of ``hop``),
* ``ring<w>`` the DFTs of the last hop-long chunks of window ``w`` and their running
  sums (windows evaluated by the hopping DFT, see :mod:`.spectrum`; derived from
  ``hist``),
* the model's integrator states (AGC outputs),

so any block partition yields exactly the same frames as one call on the whole
signal: frame ``k`` is computed when sample ``(k+1) hop - 1`` arrives, from the same
``nmax`` samples, by the same arithmetic.  Frame ``k`` describes the sound centred at
``frame_time = ((k+1) hop - nmax/2) / fs`` seconds (the windows share one centre).

On the Triton backend (``backend='triton'``, :meth:`TimeVaryingLoudness.to`) the state
arrays are torch tensors on the model's device, except the frame clock ``n`` (a host
array); blocks are validated on the host, processed by :mod:`.kernels_triton` and the
outputs are tensors on the device.  Snapshots are numpy on both backends.

Outputs of a block are the frames completed in it: arrays ``(..., F)`` with ``F``
between ``floor(T/hop)`` and ``ceil(T/hop)`` (possibly 0).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..engine import backend as _B
from ..engine import contract as _C
from ..engine.contract import Registered, RtamtInputError, check_float_dtype, reject_nonfinite
from ..engine.denormal import ensure_ftz
from ..engine.stage import as_numpy_block
from .ansi import SpecificLoudnessCoeffs
from .excitation import design_excitation, excitation
from .kernels import specific_loudness
from .spectrum import SpectrumParams, design_spectrum, frame_powers, new_rings

_FLOATS = _C.FLOATS


@dataclasses.dataclass
class TVLCoeffs:
    spec: object
    exc: object
    sl: SpecificLoudnessCoeffs


def _clock(sp, state: dict, T: int):
    """The frames due in a block of ``T`` samples: ``(n0, hop, L, ends, F)`` with ``n0``
    the samples consumed before it, ``hop`` and ``L = nmax`` (samples), ``ends`` (F,) int64
    the absolute end sample of each frame's history."""
    n0 = int(state["n"][0])
    hop, L = sp.hop, sp.nmax
    first = (n0 // hop + 1) * hop
    ends = np.arange(first, n0 + T + 1, hop, dtype=np.int64)
    return n0, hop, L, ends, ends.size


class TimeVaryingLoudness(_C.SplLimit, Registered):
    """Base of :class:`rtamt.models.Glasberg2002` and :class:`rtamt.models.Moore2016`.

    Subclasses define ``name``, ``outputs``, ``C`` (specific-loudness constant),
    ``_layout(arr)`` (input shape -> rows), ``_init_model_state`` and ``_frames``.
    """

    name = "tvl"
    outputs: tuple = ()
    C = 0.046871
    config = "paper"
    batchable = True
    identity_fields = ("fs", "config", "spl_ref")

    #: compute backend ('numba' | 'triton') and torch device (see :meth:`to`); kept in
    #: private attributes so that they stay out of the design fingerprint
    _backend = "numba"
    _device = None

    def __init__(self, fs: float, *, spl_ref: float = 100.0, field: str = "free",
                 comp_cam: float = 0.1, middle_ear: str = "2007",
                 backend: str | None = None, device=None):
        self.fs = float(fs)
        self.spl_ref = float(spl_ref)
        self.field = field
        self.middle_ear = middle_ear
        sp = design_spectrum(SpectrumParams(fs=self.fs, spl_ref=self.spl_ref, field=field,
                                            middle_ear=middle_ear, comp_cam=comp_cam))
        ex = design_excitation(sp.comp_hz)
        self.coeffs = TVLCoeffs(sp, ex, SpecificLoudnessCoeffs(ex.fc, self.C))
        self.hop = sp.hop
        self.frame_rate = self.fs / sp.hop
        self._state = None
        self._meta = None
        self._block = 0
        self._phon_table = None
        if backend is not None or device is not None:
            self.to(device, backend=backend)

    # ------------------------------------------------------------------ info
    @property
    def fc(self) -> np.ndarray:
        """Centre frequencies of the 150 excitation channels (Hz), 1.75-39 Cam."""
        return self.coeffs.exc.fc

    @property
    def latency_s(self) -> float:
        """Delay of a frame's centre behind its newest input sample (s)."""
        return self.coeffs.spec.nmax / 2 / self.fs

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
    def _init_state(self, R: int, mode) -> dict:
        st = {"hist": np.zeros((R, self.coeffs.spec.nmax)), "n": np.zeros(1, np.int64)}
        st.update(new_rings(self.coeffs.spec, R))
        st.update(self._init_model_state(R, mode))
        return st

    def _new_state(self, R: int, mode) -> dict:
        """The initial state on this model's backend."""
        st = self._init_state(R, mode)
        return st if self._backend == "numba" else self._state_to(st, self._backend,
                                                                    self._device)

    def _init_model_state(self, R: int, mode) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

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
        if backend != "triton":
            return {k: _B.to_numpy(v) for k, v in st.items()}
        import torch

        return {k: (_B.to_numpy(v) if k == "n" else
                    torch.from_numpy(np.ascontiguousarray(_B.to_numpy(v))).to(device))
                for k, v in st.items()}

    def to(self, device=None, *, backend: str | None = None):
        """Run on ``backend`` ('numba' or 'triton') and ``device`` (see
        :func:`rtamt.engine.backend.resolve`: ``device='cuda'`` implies Triton), as
        :meth:`rtamt.engine.stage.Chain.to`.  The stream's state moves along exactly
        (float64 values copied) and the stream continues; all or nothing (the new state
        is built before anything changes).  Returns self."""
        backend, device = _B.resolve(backend, device)
        st = None if self._state is None else self._state_to(self._state, backend, device)
        self._state, self._backend, self._device = st, backend, device
        return self

    # ------------------------------------------------------------------ contract
    #: state keys shared by all streams of a batch (the frame clock)
    shared_state = ("n",)

    def design_identity(self) -> dict:
        """``{'name', 'fs', 'config', 'spl_ref', 'fingerprint'}``; the fingerprint covers
        the designed coefficients and every public parameter of the model."""
        fp = self.__dict__.get("_fp")
        if fp is None:
            # the input limit is a check, not part of the design (a state is valid under any)
            pub = {k: v for k, v in vars(self).items()
                   if not k.startswith("_") and k != "max_spl"}
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
        """Deep copy of the state in the contract's schema (:mod:`rtamt.engine.contract`);
        arrays as listed in the module docstring."""
        return _C.header(self, self._block, self._stream_meta(),
                         arrays=None if self._state is None else
                         {k: v.copy() if type(v) is np.ndarray else _B.to_numpy(v)
                          for k, v in self._state.items()})

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
        ref = self._init_state(self._rows_for(lead, mode), mode)
        st = _C.check_state_arrays(self.name, sd.get("arrays"), ref)
        self._state = st if self._backend == "numba" else self._state_to(st, self._backend,
                                                                          self._device)
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
            self._state = self._new_state(rows.shape[0], mode)
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
            self._state = self._new_state(rows.shape[0], mode)
            self._meta = (lead, mode, arr.dtype)
        if self._backend == "triton":       # validated on the host; processed on the device
            return self._process_all_device(rows, lead, mode, arr.dtype)
        out = self.process(self.coeffs, self._state, rows.astype(np.float64, copy=False), lead,
                           mode)
        self._block += 1
        dt = arr.dtype
        return {k: back(v.astype(dt) if k != "frame_time" else v) for k, v in out.items()}

    def _process_all_device(self, rows: np.ndarray, lead, mode, dt) -> dict:
        """The Triton backend's :meth:`process_all` after validation: ``rows`` (R, T) (host
        numpy, checked) go to the device as float64; returns torch tensors on the device
        in the input's dtype (``frame_time`` float64)."""
        import torch

        r64 = np.ascontiguousarray(rows, dtype=np.float64)
        rt = torch.from_numpy(r64).to(self._device)
        out = self.process(self.coeffs, self._state, rt, lead, mode)
        self._block += 1
        tdt = torch.float32 if dt == np.float32 else torch.float64
        return {k: (v.to(tdt) if k != "frame_time" else
                    torch.from_numpy(v).to(self._device)) for k, v in out.items()}

    def process(self, coeffs, state: dict, rows: np.ndarray, lead=(), mode=None) -> dict:
        """Pure form: advance ``state`` over ``rows`` (R, T) float64 (no validation);
        returns the outputs of the completed frames (float64).  ``rows`` a torch tensor
        (the Triton backend): ``state`` holds tensors on its device (the frame clock
        ``n`` a host array) and the outputs are tensors there, ``frame_time`` (F,) a
        host numpy array (s)."""
        if type(rows) is not np.ndarray:
            return self._process_device(coeffs, state, rows, lead, mode)
        sp = coeffs.spec
        R, T = rows.shape
        n0, hop, L, ends, F = _clock(sp, state, T)
        if F:
            z = np.concatenate([state["hist"], rows], axis=1)
            rings = {k: v for k, v in state.items() if k.startswith("ring")}
            P = frame_powers(sp, z, ends - n0 + L, rings, n0 // hop)
            E = excitation(coeffs.exc, P)
            N = np.empty_like(E)
            sl = coeffs.sl
            specific_loudness(E, sl.G, sl.A, sl.alpha, sl.A_alpha, sl.ethrq, sl.C, N)
            state["hist"][:] = z[:, -L:]
        else:
            E = N = np.zeros((0, coeffs.exc.fc.size))
            if T >= L:
                state["hist"][:] = rows[:, -L:]
            else:
                state["hist"][:, :L - T] = state["hist"][:, T:]
                state["hist"][:, L - T:] = rows
        state["n"][0] = n0 + T
        K = coeffs.exc.fc.size
        out = self._frames(state, E.reshape(R, F, K), N.reshape(R, F, K), lead, mode)
        out["frame_time"] = (ends - L / 2.0) / self.fs
        return out

    def _process_device(self, coeffs, state: dict, rows, lead, mode) -> dict:
        """:meth:`process` on the Triton backend: the same steps on torch tensors, the
        kernels of :mod:`rtamt.loudness.kernels_triton`."""
        import torch

        sp = coeffs.spec
        R, T = rows.shape
        n0, hop, L, ends, F = _clock(sp, state, T)
        K = coeffs.exc.fc.size
        hist = state["hist"]
        if F:
            kt = _B.triton_module("rtamt.loudness.kernels_triton")
            coef = _B.coef_adapter(rows)
            z = torch.cat([hist, rows], dim=1)                              # (R, L + T)
            rings = {k: v for k, v in state.items() if k.startswith("ring")}
            P = frame_powers(sp, z, ends - n0 + L, rings, n0 // hop)
            E = excitation(coeffs.exc, P)                                   # (R F, K)
            N = torch.empty_like(E)
            sl = coeffs.sl
            kt.specific_loudness(E, coef(sl.G), coef(sl.A), coef(sl.alpha), coef(sl.A_alpha),
                                 coef(sl.ethrq), sl.C, N)
            hist.copy_(z[:, -L:])
        else:
            E = N = torch.zeros((0, K), dtype=torch.float64, device=rows.device)
            if T >= L:
                hist.copy_(rows[:, -L:])
            else:
                hist[:, :L - T] = hist[:, T:].clone()
                hist[:, L - T:] = rows
        state["n"][0] = n0 + T
        out = self._frames(state, E.reshape(R, F, K), N.reshape(R, F, K), lead, mode)
        out["frame_time"] = (ends - L / 2.0) / self.fs
        return out

    def _frames(self, state, E, N, lead, mode) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------------ phon
    def steady_tone_loudness(self, levels_db, freq: float = 1000.0) -> np.ndarray:
        """The model's settled loudness (sone) of a steady diotic tone at ``levels_db``
        dB SPL: the component powers of 16 consecutive frames of the tone (averaged) are
        scaled to each level and run through excitation, specific loudness and the
        model's binaural rule.  Used for :meth:`phon`."""
        sp = self.coeffs.spec
        lv = np.atleast_1d(np.asarray(levels_db, dtype=np.float64))
        n = sp.nmax + 16 * sp.hop
        t = np.arange(n) / self.fs
        x = np.sqrt(2.0) * np.sin(2 * np.pi * freq * t)[None, :]  # RMS 1 = spl_ref dB SPL
        ends = sp.nmax + sp.hop * np.arange(1, 17)
        P1 = frame_powers(sp, x, ends).mean(axis=0)
        P = P1[None, :] * 10.0 ** ((lv[:, None] - self.spl_ref) / 10.0)
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
