"""Audio from media containers that libsndfile does not read (MP4/M4A/MOV with AAC or ALAC,
MXF, Matroska/WebM, MPEG-TS, AC-3, WMA, ...), decoded by FFmpeg's libraries through PyAV
(the ``rtamt[media]`` extra: ``pip install 'rtamt[media]'``, or ``pip install av``).

:class:`MediaReader` reads the first audio stream of a file block by block with the
interface of :class:`rtamt.signals.AudioReader` opened with ``count=False`` (``fs``,
``channels``, ``format``, ``frames`` (``None`` until the end is reached), ``pos``,
``truncated``, ``read(n)``, ``close()``, a context manager), so a caller that needs no
length up front (``rtamt loudness``) takes either.  Samples come as float64 ``(channels,
n)``: FFmpeg's decoder output at the stream's own rate and channels (no resampling; float
formats as decoded, integer formats scaled by ``2^-(bits-1)``, as libsndfile and
libswresample scale them).  What the decoder gives is what FFmpeg's own
tools give (``ffmpeg -i FILE out.wav``): the encoder delay that the container signals is
removed, the padding at the end is not.

The channel layout (``layout``, ``layout_from``, ``layout_problem``, as
:class:`rtamt.signals.AudioReader` gives them for :mod:`rtamt.loudness.layouts`) is the
channel layout FFmpeg reports for the stream (a 5.1 AAC: ``FL FR FC LFE BL BR``); an
unspecified layout of more than two channels gives none (the meter then asks for one).

The verdicts are :class:`rtamt.signals.AudioReader`'s: a file FFmpeg cannot open, or
without an audio stream, raises :class:`rtamt.signals.AudioFileError` when opened; a
decoding error part way is a truncated file (raised with ``frames_read`` at the end, or,
with ``partial``, the frames before it are the file and :attr:`MediaReader.truncated` says
what was missing); a file without samples and NaN/Inf samples are refused.

"""
from __future__ import annotations

import collections
import os

import numpy as np

from .signals import AudioFileError, _one_line

__all__ = ["MediaReader"]


def _layout_of(layout, channels: int) -> tuple[tuple[str, ...] | None, str]:
    """``(channel names, origin)`` of an FFmpeg channel layout for
    :mod:`rtamt.loudness.layouts` (its WAVE / FFmpeg names), as
    :attr:`rtamt.signals.AudioReader.layout` / ``layout_from``; ``(None, why)`` for an
    unspecified layout of more than 2 channels (1 and 2: mono and stereo) or channels
    whose positions are not known."""
    from .loudness import layouts as L

    names = [c.name for c in layout.channels]
    if "NONE" not in names and len(names) == channels:
        try:
            return L.names(names), f"FFmpeg's channel layout {layout.name!r} of the stream"
        except L.LayoutError as e:
            return None, f"FFmpeg's channel layout {layout.name!r} ({e})"
    if channels <= 2:
        return L.file_layout("", "", channels)
    return None, f"FFmpeg gives no channel layout for the stream ({layout.name})"


#: integer sample formats: (offset, scale) to full-scale float, as libsndfile and
#: libswresample convert them (``(x - offset) / scale``)
_INT_SCALE = {"u8": (128.0, 2.0 ** 7), "s16": (0.0, 2.0 ** 15), "s32": (0.0, 2.0 ** 31),
              "s64": (0.0, 2.0 ** 63)}


def _samples(frame) -> np.ndarray:
    """A decoded PyAV audio frame as float64 ``(channels, samples)``: float formats as
    decoded, integer formats scaled to full scale (:data:`_INT_SCALE`); packed formats
    de-interleaved."""
    a = frame.to_ndarray()
    fmt = frame.format
    if not fmt.is_planar:                       # (1, samples * channels) interleaved
        a = a.reshape(-1, frame.layout.nb_channels).T
    name = fmt.name.rstrip("p")
    if name in _INT_SCALE:
        off, scale = _INT_SCALE[name]
        return (a.astype(np.float64) - off) / scale
    return a.astype(np.float64)


def _why(e: BaseException) -> str:
    """An FFmpeg error in words (its ``strerror`` without the errno and the path)."""
    return getattr(e, "strerror", None) or _one_line(e)


class MediaReader:
    """The first audio stream of a media file, decoded block by block through PyAV (see
    the module docstring).  ``MediaReader(path, partial=False)``; raises
    :class:`rtamt.signals.AudioFileError` for a file that cannot be opened and
    ``ModuleNotFoundError`` when PyAV is not installed."""

    def __init__(self, path, *, partial: bool = False):
        import av

        self.path = str(path)
        self.partial = bool(partial)
        self.truncated: str | None = None
        self.frames: int | None = None
        self.claimed = None
        self.pos = 0
        self._queue: collections.deque = collections.deque()   # decoded (C, k) arrays
        self._queued = 0
        self._done = False
        if not os.path.exists(self.path):
            raise AudioFileError(f"{self.path}: no such file")
        if os.path.isdir(self.path):
            raise AudioFileError(f"{self.path}: is a directory, not an audio file")
        try:
            self._c = av.open(self.path)
        except (av.error.FFmpegError, OSError, UnicodeDecodeError, ValueError) as e:
            raise AudioFileError(f"{self.path}: not a readable media file (FFmpeg: "
                                 f"{_why(e)})") from None
        try:
            streams = self._c.streams.audio
            if not streams:
                raise AudioFileError(f"{self.path}: no audio stream (FFmpeg found "
                                     f"{len(self._c.streams)} other stream(s))")
            st = self._stream = streams[0]
            cc = st.codec_context
            self.fs = float(cc.sample_rate or 0)
            self.channels = int(cc.layout.nb_channels if cc.layout is not None else 0)
            if self.fs <= 0 or self.channels <= 0:
                raise AudioFileError(f"{self.path}: the audio stream has no sample rate or "
                                     f"channels ({self.fs:g} Hz, {self.channels} channels)")
            self.format = f"{self._c.format.name}/{cc.name}"
            self.layout, self.layout_from = _layout_of(cc.layout, self.channels)
            #: why the stream's own layout cannot be used (never: FFmpeg's layouts name
            #: their channels; None), as :attr:`rtamt.signals.AudioReader.layout_problem`
            self.layout_problem = None
            self._packets = self._c.demux(st)
            self._error = (av.error.FFmpegError, ValueError)
        except BaseException:
            self.close()
            raise

    def _pull(self) -> bool:
        """Decode the next packet into the queue; False at the end of the stream (the
        end, or a decoding error: then the verdict of :meth:`_end`)."""
        try:
            packet = next(self._packets)
            out = [_samples(fr) for fr in packet.decode()]
        except StopIteration:
            self._end(None)
            return False
        except self._error as e:
            self._end(e)
            return False
        for a in out:
            if a.shape[0] != self.channels:
                raise AudioFileError(f"{self.path}: the audio stream changes from "
                                     f"{self.channels} to {a.shape[0]} channels at frame "
                                     f"{self.pos + self._queued}")
            if a.shape[1]:
                self._queue.append(a)
                self._queued += a.shape[1]
        return True

    def _end(self, err) -> None:
        """The stream ended after ``pos + queued`` frames (``err``: why, early)."""
        self._done = True
        got = self.pos + self._queued
        self.frames = got
        if err is not None:
            msg = (f"{self.path}: damaged or truncated: decoding failed after {got} frames "
                   f"(FFmpeg: {_why(err)})")
            if got == 0 or not self.partial:
                raise AudioFileError(msg, frames_read=got)
            self.truncated = msg
        elif got == 0:
            raise AudioFileError(f"{self.path}: the file has no samples")

    def read(self, n: int) -> np.ndarray:
        """The next ``n`` frames (fewer at the end) as float64 ``(channels, n)``;
        ``(channels, 0)`` at the end."""
        n = int(n)
        while self._queued < n and not self._done:
            self._pull()
        k = min(n, self._queued)
        if k <= 0:
            return np.zeros((self.channels, 0))
        parts, need = [], k
        while need:
            a = self._queue[0]
            if a.shape[1] <= need:
                parts.append(self._queue.popleft())
                need -= a.shape[1]
            else:
                parts.append(a[:, :need])
                self._queue[0] = a[:, need:]
                need = 0
        self._queued -= k
        d = np.ascontiguousarray(np.concatenate(parts, axis=1))
        bad = ~np.isfinite(d)
        if bad.any():
            raise AudioFileError(f"{self.path}: the file contains NaN or Inf samples (from "
                                 f"frame {self.pos + int(np.argmax(bad.any(axis=0)))})")
        self.pos += k
        return d

    def close(self) -> None:
        c = self.__dict__.pop("_c", None)
        if c is not None:
            c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
