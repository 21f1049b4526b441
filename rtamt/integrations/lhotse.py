"""rtamt models as a lhotse ``FeatureExtractor`` (extra ``[lhotse]``).

:class:`RtamtExtractor` (registered with lhotse under the feature type ``"rtamt"``) runs one
rtamt model over a recording and pools one of its outputs over frames of
``frame_shift`` seconds, giving a ``(frames, dim)`` float32 matrix as every lhotse extractor
does.  ``CutSet.compute_and_store_features(RtamtExtractor(cfg), path, num_jobs=N)``
(optionally with ``executor=distributed.Client(...)``) then computes a corpus.  The
configuration is :class:`RtamtConfig`, a dataclass that round-trips through
``to_dict``/``from_dict`` and lhotse's YAML.

Frames
------
Frame ``j`` pools the model's output samples that belong to the input samples
``[j*hop, (j+1)*hop)``, ``hop = frame_shift * sampling_rate``; the output is sampled at
its own rate (``output_info()[output]['rate']``: the input rate for the filterbank and
modulation outputs, 1 kHz for the loudness frames), which gives ``h = frame_shift * rate``
output samples per frame.  Both ``hop`` and ``h`` must be whole numbers.  The number of
frames follows lhotse (``lhotse.utils.compute_num_frames_from_samples``:
``(N + hop // 2) // hop`` for ``N`` input samples): a trailing incomplete frame is kept
when it holds at least half a hop of input, pooled over the output samples it has.

Pooling over the ``h`` samples ``x_t`` of one frame, per feature (``pooling=``):

* ``"mean"``: ``(1/h) * sum x_t``;
* ``"power"``: the mean power ``(1/h) * sum x_t^2`` (for the modulation filterbank: the
  power of each modulation filter's output over the frame, the decision variable of the
  envelope power spectrum model, Ewert & Dau 2000, JASA 108, 1181-1196);
* ``"rms"``: ``sqrt`` of the mean power;
* ``"db"``: the level of the mean power, ``10 * log10(P / P0)`` dB with ``P0 = 1`` (model
  units squared), the level of a power quantity of IEC 60027-3 / ISO 80000-3; a power
  below ``10^(db_floor/10)`` is reported as ``db_floor``.

Defaults: the modulation models (Dau1997, King2019, Osses2021, Paulick2024) give
``modfb`` in ``db`` (modulation power per frame, one feature per packed modulation filter,
see :mod:`rtamt.modulation.modfb`); the loudness models (Glasberg2002, Moore2016) give
``specific_loudness`` (sone/Cam) in ``mean``.  Any other output of the model can be
chosen (``adaptloop``, ``excitation``, ``stl``, ``ltl``, ...; not ``frame_time``).

Streaming equals corpus
-----------------------
:meth:`RtamtExtractor.online_inference` takes a recording in blocks of any sizes and
returns the frames completed so far plus a context: the model's state
(``state_dict()``), the partial frame's samples and the stream's counters.  Each frame is
summed by one ``np.add.reduce`` over a ``(frames, h, dim)`` array holding exactly that
frame's samples, whether they arrived in one block or several, and the model is bit-exact
under any partition (:mod:`rtamt.engine.contract`), so the frames of any partition equal
those of :meth:`RtamtExtractor.compute` on the whole recording bit for bit.  ``last=True``
ends the stream and adds the trailing incomplete frame where lhotse counts one.

Channels (lhotse passes ``(channels, samples)``; ``channels=``):

* ``"auto"``: one channel is one stream; for Moore2016 two channels are the left and right
  ears (one channel is diotic); any other count is an error naming the choices below;
* ``"first"``: channel 0 only (what lhotse's Kaldi extractors do);
* ``"mean"``: the mean of the channels;
* ``"stack"``: every channel is its own stream of the model (a batch), the features of
  channel 0 first; ``num_channels`` fixes the count (and so ``feature_dim``).  Not for
  Moore2016, whose two channels are a pair of ears.

Sample rates: the loudness models need 32 kHz or more (``CutSet.resample(32000)``).
"""
from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import LHOTSE_INSTALL_HINT

try:
    from lhotse.features.base import FeatureExtractor, register_extractor
    from lhotse.utils import compute_num_frames_from_samples
except ImportError as e:      # pragma: no cover - exercised by a subprocess test
    raise ModuleNotFoundError(
        f"rtamt.integrations.lhotse needs lhotse: {LHOTSE_INSTALL_HINT}", name="lhotse") from e

from ..ear.calibration import check_spl_ref
from ..models import MODELS

__all__ = ["RtamtConfig", "RtamtExtractor", "POOLINGS", "CHANNEL_MODES", "CHUNK",
           "default_output", "DASK_WORKER_ENVIRON", "dask_config"]

POOLINGS = ("mean", "power", "rms", "db")
CHANNEL_MODES = ("auto", "first", "mean", "stack")
#: the model runs on blocks of at most this many input samples (bounds memory: Dau1997's
#: ``modfb`` holds 275 values per sample); the result does not depend on it
CHUNK = 4096
#: models whose two-channel input is a pair of ears
BINAURAL = ("moore2016",)
_LOUDNESS = ("glasberg2002", "moore2016")
_CONTEXT = "rtamt.lhotse.context"

#: Environment for Dask worker processes running the extractor.  A Dask nanny starts its
#: worker with ``MALLOC_TRIM_THRESHOLD_`` set (distributed's ``nanny.pre-spawn-environ``);
#: an explicit glibc malloc threshold freezes glibc's adaptive mmap threshold at 128 KiB, so
#: every block's model output (a few MB) becomes a fresh ``mmap`` that the kernel
#: zero-fills page by page.  A fixed 32 MiB mmap threshold (glibc's largest) keeps those
#: blocks on the heap, where they are reused (docs/features.md, docs/performance.md).
DASK_WORKER_ENVIRON = {"MALLOC_MMAP_THRESHOLD_": 32 * 1024 * 1024}


def dask_config() -> dict:
    """``dask.config.set(dask_config())`` before creating a cluster (``LocalCluster`` or
    ``dask worker`` processes) gives its workers :data:`DASK_WORKER_ENVIRON`: the keys
    ``distributed.nanny.pre-spawn-environ.<VAR>``."""
    return {f"distributed.nanny.pre-spawn-environ.{k}": v
            for k, v in DASK_WORKER_ENVIRON.items()}


def default_output(model: str) -> str:
    """The output a model's features use unless ``output=`` says otherwise."""
    return "specific_loudness" if model in _LOUDNESS else "modfb"


def _outputs(model: str) -> tuple:
    return tuple(k for k in MODELS[model].outputs if k != "frame_time")


@dataclass
class RtamtConfig:
    """What an :class:`RtamtExtractor` computes (see the module docstring).

    model : a key of :data:`rtamt.MODELS` (``"dau1997"``, ``"moore2016"``, ...).
    model_kwargs : keyword arguments of the model's constructor (``config``, ``flow``, ...;
        plain YAML values: lists, not tuples).
    spl_ref : dB SPL of a digital RMS of 1.0.
    dtype : ``"float64"`` or ``"float32"``: the model's and the pooling's precision
        (:meth:`RtamtExtractor.extract` always returns float32, as lhotse stores it).
    output : the model output to pool (default :func:`default_output`).
    pooling : ``"mean"``, ``"power"``, ``"rms"`` or ``"db"`` (default ``"db"`` for
        ``modfb``, ``"mean"`` otherwise).
    frame_shift : s; ``frame_shift * sampling_rate`` and ``frame_shift * output rate``
        must be whole numbers.
    db_floor : dB, the smallest level ``"db"`` pooling reports.
    channels, num_channels : multi-channel handling (``"auto"``, ``"first"``, ``"mean"``,
        ``"stack"``; ``num_channels`` for ``"stack"``).
    sampling_rate : Hz, optional: when set, :meth:`RtamtExtractor.extract` refuses other
        rates and :meth:`RtamtExtractor.online_inference` uses it.
    """

    model: str = "dau1997"
    model_kwargs: dict = field(default_factory=dict)
    spl_ref: float = 100.0
    dtype: str = "float64"
    output: str | None = None
    pooling: str | None = None
    frame_shift: float = 0.01
    db_floor: float = -120.0
    channels: str = "auto"
    num_channels: int = 1
    sampling_rate: int | None = None

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"RtamtConfig: unknown model {self.model!r}; expected one of "
                             f"{', '.join(sorted(MODELS))}")
        if not isinstance(self.model_kwargs, dict):
            raise ValueError(f"RtamtConfig: model_kwargs must be a dict, got "
                             f"{type(self.model_kwargs).__name__}")
        if self.output is None:
            self.output = default_output(self.model)
        if self.output not in _outputs(self.model):
            raise ValueError(f"RtamtConfig: {self.model} has no output {self.output!r}; "
                             f"expected one of {', '.join(_outputs(self.model))}")
        if self.pooling is None:
            self.pooling = "db" if self.output == "modfb" else "mean"
        if self.pooling not in POOLINGS:
            raise ValueError(f"RtamtConfig: pooling {self.pooling!r}; expected one of "
                             f"{', '.join(POOLINGS)}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"RtamtConfig: dtype {self.dtype!r}; expected float32 or float64")
        for name in ("spl_ref", "frame_shift", "db_floor"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"RtamtConfig: {name} must be a finite number, got {v!r}")
            setattr(self, name, float(v))
        self.spl_ref = check_spl_ref(self.spl_ref, "RtamtConfig")
        if self.frame_shift <= 0:
            raise ValueError(f"RtamtConfig: frame_shift must be > 0 s, got {self.frame_shift}")
        if self.channels not in CHANNEL_MODES:
            raise ValueError(f"RtamtConfig: channels {self.channels!r}; expected one of "
                             f"{', '.join(CHANNEL_MODES)}")
        if self.channels == "stack" and self.model in BINAURAL:
            raise ValueError(f"RtamtConfig: channels='stack' is not for {self.model} (its two "
                             "channels are the left and right ears); use 'auto'")
        if isinstance(self.num_channels, bool) or not isinstance(self.num_channels, int) \
                or self.num_channels < 1:
            raise ValueError(f"RtamtConfig: num_channels must be an integer >= 1, got "
                             f"{self.num_channels!r}")
        if self.sampling_rate is not None:
            if isinstance(self.sampling_rate, bool) or int(self.sampling_rate) <= 0 \
                    or int(self.sampling_rate) != self.sampling_rate:
                raise ValueError(f"RtamtConfig: sampling_rate must be a positive integer (Hz) "
                                 f"or None, got {self.sampling_rate!r}")
            self.sampling_rate = int(self.sampling_rate)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (YAML-safe when ``model_kwargs`` is)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RtamtConfig:
        """The inverse of :meth:`to_dict`; unknown keys are an error naming them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"RtamtConfig: unknown field(s) {', '.join(unknown)}; expected "
                             f"{', '.join(sorted(known))}")
        return cls(**data)


def _whole(v: float, what: str) -> int:
    n = round(v)
    if n < 1 or abs(v - n) > 1e-9 * max(1.0, abs(v)):
        raise ValueError(what)
    return int(n)


class _Geometry:
    """Frame sizes of one extractor at one sampling rate: ``hop`` input samples and ``h``
    output samples per frame, ``rate`` Hz of the output, ``dim`` features per frame."""

    def __init__(self, cfg: RtamtConfig, model, fs: int):
        self.rate = float(model.output_info()[cfg.output]["rate"] or fs)
        self.hop = _whole(cfg.frame_shift * fs,
                          f"frame_shift {cfg.frame_shift:g} s is not a whole number of samples "
                          f"at {fs} Hz")
        self.h = _whole(cfg.frame_shift * self.rate,
                        f"frame_shift {cfg.frame_shift:g} s is not a whole number of "
                        f"{cfg.model} {cfg.output!r} samples ({self.rate:g} Hz)")
        if self.h < 2 and self.rate != fs:
            raise ValueError(f"frame_shift {cfg.frame_shift:g} s holds {self.h} {cfg.output!r} "
                             f"sample ({self.rate:g} Hz); give at least 2")


class _Stream:
    """One recording in progress: the model (its state lives in the model object), the
    transformed samples of the incomplete frame ``buf`` ``(k, dim)``, input samples seen
    and frames emitted."""

    def __init__(self, ext: RtamtExtractor, model, geo: _Geometry, channels: int | None,
                 buf=None, samples: int = 0, frames: int = 0):
        self.ext, self.model, self.geo = ext, model, geo
        self.channels, self.buf, self.samples, self.frames = channels, buf, samples, frames

    def feed(self, x: np.ndarray) -> np.ndarray:
        """Process ``(channels, n)`` input; return the sums of the frames it completes
        ``(frames, dim)``."""
        xin = self.ext._layout(x, self)
        cfg, h = self.ext.config, self.geo.h
        sums = []
        n = xin.shape[-1]
        for i in range(0, n, CHUNK):
            y = np.asarray(self.model.process_all(xin[..., i:i + CHUNK])[cfg.output])
            t = y.shape[-1]
            if t == 0:
                continue
            a = np.moveaxis(y, -1, 0).reshape(t, -1)          # (T, dim), time-major
            if cfg.pooling != "mean":   # the model's output is new memory for every block
                a = np.square(a, out=a) if a.flags.writeable else np.square(a)
            if self.buf is not None:                          # complete the frame in progress
                need = h - self.buf.shape[0]
                part = np.concatenate([self.buf, a[:need]], axis=0)
                a = a[need:]
                if part.shape[0] == h:
                    sums.append(np.add.reduce(part[None], axis=1))
                    self.buf = None
                else:
                    self.buf = part
                    continue
            nf = a.shape[0] // h
            if nf:
                sums.append(np.add.reduce(a[:nf * h].reshape(nf, h, -1), axis=1))
            if a.shape[0] > nf * h:
                self.buf = np.array(a[nf * h:])               # a copy, not a view
        self.samples += n
        out = (np.concatenate(sums, axis=0) if sums
               else np.empty((0, self.geo.dim), dtype=cfg.dtype))
        self.frames += out.shape[0]
        return self.ext._finish(out, h)

    def finish(self) -> np.ndarray:
        """The trailing incomplete frame, if lhotse counts one (``(0 or 1, dim)``)."""
        expected = compute_num_frames_from_samples(self.samples, self.ext.frame_shift,
                                                   self.ext._fs(self))
        missing = expected - self.frames
        dim = self.geo.dim
        if missing <= 0:
            return np.empty((0, dim), dtype=self.ext.config.dtype)
        if missing > 1 or self.buf is None:
            raise ValueError(f"rtamt: {self.samples} samples give {expected} frames by lhotse's "
                             f"count, the model's output only {self.frames} complete ones")
        k = self.buf.shape[0]
        last = self.ext._finish(np.add.reduce(self.buf[None], axis=1), k)
        self.buf, self.frames = None, self.frames + 1
        return last


@register_extractor
class RtamtExtractor(FeatureExtractor):
    """An rtamt model as a lhotse feature extractor (see the module docstring).

    The extractor builds one model per sampling rate (and thread) on first use; pickling it
    (for a process pool or Dask) sends only the configuration.
    """

    name = "rtamt"
    config_type = RtamtConfig

    def __init__(self, config: RtamtConfig | None = None):
        super().__init__(config)
        self._cache: dict = {}
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"config": self.config}

    def __setstate__(self, state):
        self.__init__(state["config"])

    @property
    def frame_shift(self) -> float:
        """Frame shift, s."""
        return self.config.frame_shift

    # -------------------------------------------------------------- model per rate
    def model(self, sampling_rate: int):
        """The model of this configuration at ``sampling_rate`` Hz, with its frame geometry
        (cached per rate and thread; its state is whatever the last stream left)."""
        key = (int(sampling_rate), threading.get_ident())
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        cfg = self.config
        if cfg.sampling_rate is not None and int(sampling_rate) != cfg.sampling_rate:
            raise ValueError(f"RtamtExtractor was configured for {cfg.sampling_rate} Hz, got "
                             f"{sampling_rate} Hz (resample the cuts: CutSet.resample)")
        if int(sampling_rate) != sampling_rate or sampling_rate <= 0:
            raise ValueError(f"sampling_rate must be a positive integer (Hz), got "
                             f"{sampling_rate!r}")
        try:
            model = MODELS[cfg.model](float(sampling_rate), spl_ref=cfg.spl_ref,
                                      **cfg.model_kwargs)
        except TypeError as e:
            raise ValueError(f"{cfg.model}: bad model_kwargs {cfg.model_kwargs!r}: {e}") from None
        geo = _Geometry(cfg, model, int(sampling_rate))
        geo.dim = self._probe_dim(model, geo)
        with self._lock:
            self._cache[key] = (model, geo)
        return model, geo

    def _probe_dim(self, model, geo) -> int:
        """Features per frame: the output's shape on a fresh stream of zeros (at least one
        frame and two output samples long; the model is reset afterwards)."""
        n = max(geo.hop, 2 * int(math.ceil(model.fs / geo.rate)))
        model.reset()
        y = np.asarray(model.process_all(np.zeros(n, dtype=self.config.dtype))
                       [self.config.output])
        model.reset()
        per = int(np.prod(y.shape[:-1], dtype=np.int64))
        return per * (self.config.num_channels if self.config.channels == "stack" else 1)

    def feature_dim(self, sampling_rate: int) -> int:
        """Features per frame at ``sampling_rate`` Hz (e.g. Dau1997 ``modfb``: the number of
        modulation filters of all auditory channels; Moore2016 ``specific_loudness``: 2 ears
        x 150 Cam channels; ``stl``: 1)."""
        return self.model(sampling_rate)[1].dim

    # -------------------------------------------------------------- channels
    def _fs(self, stream: _Stream) -> int:
        return int(round(stream.model.fs))

    def check_channels(self, channels: int) -> None:
        """Raise ``ValueError`` (naming the choices) when a recording of ``channels``
        channels cannot be computed under this configuration's ``channels=`` mode: more
        than one channel with ``"auto"`` (two for Moore2016), or another count than
        ``num_channels`` with ``"stack"``.  Lets a caller refuse a corpus before computing
        it."""
        cfg = self.config
        c = int(channels)
        if cfg.channels == "auto" and not (c == 1 or (c == 2 and cfg.model in BINAURAL)):
            raise ValueError(
                f"RtamtExtractor: {c} channels for {cfg.model}; choose channels='first', "
                f"'mean' or 'stack' (with num_channels={c})"
                + (" (moore2016 takes 1 (diotic) or 2 (left, right))"
                   if cfg.model in BINAURAL else ""))
        if cfg.channels == "stack" and c != cfg.num_channels:
            raise ValueError(f"RtamtExtractor: channels='stack' with num_channels="
                             f"{cfg.num_channels}, got {c} channels")

    def _layout(self, x: np.ndarray, stream: _Stream) -> np.ndarray:
        """The model input for ``(C, n)`` samples under ``channels=``: ``(n,)`` for one
        stream, ``(C, n)`` for Moore2016's two ears or ``"stack"``."""
        c = x.shape[0]
        if stream.channels is None:
            stream.channels = c
        elif c != stream.channels:
            raise ValueError(f"RtamtExtractor: a block of {c} channels continues a stream of "
                             f"{stream.channels}")
        self.check_channels(c)
        mode = self.config.channels
        if mode == "auto":
            return x[0] if c == 1 else x
        if mode == "first":
            return x[0]
        if mode == "mean":
            return x.mean(axis=0) if c > 1 else x[0]
        return x

    def _samples(self, samples) -> np.ndarray:
        x = np.asarray(samples)
        if x.ndim == 1:
            x = x[None]
        if x.ndim != 2:
            raise ValueError(f"RtamtExtractor: expected samples of shape (samples,) or "
                             f"(channels, samples), got {x.shape}")
        if x.dtype.kind != "f":
            raise ValueError(f"RtamtExtractor: expected float samples in [-1, 1], got "
                             f"{x.dtype}")
        return np.ascontiguousarray(x, dtype=self.config.dtype)

    def _finish(self, sums: np.ndarray, count: int) -> np.ndarray:
        """Frame values from sums over ``count`` samples (see the module docstring)."""
        m = sums / sums.dtype.type(count)
        p = self.config.pooling
        if p == "rms":
            return np.sqrt(m)
        if p == "db":
            floor = m.dtype.type(10.0 ** (self.config.db_floor / 10.0))
            return m.dtype.type(10.0) * np.log10(np.maximum(m, floor))
        return m

    # -------------------------------------------------------------- lhotse API
    def compute(self, samples, sampling_rate: int) -> np.ndarray:
        """Frames of a whole recording in the configured dtype, ``(frames, dim)``.
        ``samples``: ``(samples,)`` or ``(channels, samples)`` floats in [-1, 1]."""
        x = self._samples(samples)
        model, geo = self.model(sampling_rate)
        model.reset()
        s = _Stream(self, model, geo, None)
        frames = s.feed(x)
        last = s.finish()
        return np.concatenate([frames, last], axis=0) if last.shape[0] else frames

    def extract(self, samples, sampling_rate: int) -> np.ndarray:
        """lhotse's ``extract``: :meth:`compute` as float32 ``(frames, dim)``."""
        return self.compute(samples, sampling_rate).astype(np.float32)

    def online_inference(self, x, context: dict | None = None, *,
                         sampling_rate: int | None = None, last: bool = False):
        """Frames of one more block of a stream, lhotse's streaming convention.

        ``x``: ``(samples,)`` or ``(channels, samples)`` (may be empty); ``context``: what
        the previous call returned, ``None`` for a new stream; ``sampling_rate``: Hz, needed
        on the first call unless the configuration sets it; ``last=True`` ends the stream
        (adds the trailing frame lhotse counts).  Returns ``(frames, context)``: the frames
        completed by this block ``(n, dim)`` in the configured dtype, and a new context
        (the given one is not modified).  Concatenated over any partition, the frames
        equal :meth:`compute` of the whole recording bit for bit.
        """
        if context is None:
            fs = sampling_rate if sampling_rate is not None else self.config.sampling_rate
            if fs is None:
                raise ValueError("online_inference: give sampling_rate= on the first call "
                                 "(or set it in RtamtConfig)")
        else:
            if not isinstance(context, dict) or context.get("schema") != _CONTEXT:
                raise ValueError("online_inference: context must be what an earlier "
                                 "online_inference call returned (or None)")
            if context["done"]:
                raise ValueError("online_inference: this stream was ended by last=True; "
                                 "start a new one with context=None")
            fs = context["sampling_rate"]
            if sampling_rate is not None and int(sampling_rate) != fs:
                raise ValueError(f"online_inference: sampling_rate {sampling_rate} Hz, the "
                                 f"stream is at {fs} Hz")
        model, geo = self.model(fs)
        if context is None:
            model.reset()
            s = _Stream(self, model, geo, None)
        else:
            model.load_state_dict(context["model"])
            buf = context["buf"]
            s = _Stream(self, model, geo, context["channels"],
                        None if buf is None else np.array(buf), context["samples"],
                        context["frames"])
        xs = self._samples(x)
        frames = s.feed(xs) if xs.shape[-1] else np.empty(
            (0, geo.dim), dtype=self.config.dtype)
        if last:
            tail = s.finish()
            if tail.shape[0]:
                frames = np.concatenate([frames, tail], axis=0)
        ctx = {"schema": _CONTEXT, "sampling_rate": int(fs), "model": model.state_dict(),
               "buf": s.buf, "channels": s.channels, "samples": s.samples,
               "frames": s.frames, "done": bool(last)}
        return frames, ctx
