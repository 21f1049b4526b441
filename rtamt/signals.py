"""Built-in demo signal and audio-file input (calibrated, float; files through soundfile).

Calibration convention (shared by every model): ``spl_ref`` is the dB SPL of a
digital signal with RMS 1.0.  AMT's convention is ``spl_ref = 100``.
"""
from __future__ import annotations

import os
import re

import numpy as np


def rms_for_spl(spl_db: float, spl_ref: float = 100.0) -> float:
    """Digital RMS that corresponds to ``spl_db`` dB SPL: ``10^((spl_db - spl_ref)/20)``."""
    return 10.0 ** ((spl_db - spl_ref) / 20.0)


def demo_signal(fs: float = 48000.0, seconds: float = 2.0, spl_ref: float = 100.0,
                seed: int = 0) -> np.ndarray:
    """Deterministic demo: 1 kHz tone (60 dB SPL, 10 ms raised-cosine ramps, 0-0.5 s),
    4 kHz carrier 100 % AM at 8 Hz (65 dB SPL, 0.5-1.2 s), white noise (70 dB SPL,
    1.2-1.7 s), then silence.  Returns float64 (T,)."""
    n = int(round(seconds * fs))
    t = np.arange(n) / fs
    x = np.zeros(n)
    rng = np.random.default_rng(seed)

    def seg(t0, t1):
        return (t >= t0) & (t < t1)

    def ramp(mask, dur=0.01):
        idx = np.nonzero(mask)[0]
        w = np.ones(idx.size)
        nr = min(int(round(dur * fs)), idx.size // 2)
        if nr > 0:
            r = 0.5 - 0.5 * np.cos(np.pi * np.arange(nr) / nr)
            w[:nr] = r
            w[-nr:] = r[::-1]
        return idx, w

    m = seg(0.0, 0.5)
    idx, w = ramp(m)
    x[idx] = np.sqrt(2) * rms_for_spl(60, spl_ref) * np.sin(2 * np.pi * 1000 * t[idx]) * w
    m = seg(0.5, 1.2)
    idx, w = ramp(m)
    if idx.size:                      # (a demo shorter than 0.5 s has no AM segment)
        am = (1 + np.cos(2 * np.pi * 8 * t[idx])) * np.sin(2 * np.pi * 4000 * t[idx])
        x[idx] = am / np.sqrt(np.mean(am ** 2)) * rms_for_spl(65, spl_ref) * w
    m = seg(1.2, 1.7)
    idx, w = ramp(m)
    x[idx] = rng.standard_normal(idx.size) * rms_for_spl(70, spl_ref) * w
    return x


class AudioFileError(ValueError):
    """An audio file that cannot be read completely: not an audio file, a truncated header
    or data part, a decoding error.  The message is one line naming the file (and, for a
    truncated or damaged file, how many frames could be read)."""


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


class AudioReader:
    """An audio file opened for block-wise reading through ``soundfile`` (libsndfile):
    WAV of every subtype (PCM 8/16/24/32 bit, float, double, A-/mu-law, ...), FLAC, OGG
    Vorbis/Opus, AIFF, and every other format libsndfile reads.

    Samples come as float64 ``(channels, n)`` (integer formats scaled by ``2^-(bits-1)``,
    i.e. a full-scale int16 of 32767 reads as 32767/32768, as libsndfile and scipy scale
    them; float formats as stored).  ``fs`` (Hz), ``channels`` and ``frames`` (the file's
    length) are known once it is open; memory does not depend on the file's length.

    A file whose header announces more data than it holds (a WAV cut short while copying or
    writing) raises :class:`AudioFileError` when opened, with the frames the header
    announces and the frames present; a read that fails or ends early (a damaged FLAC)
    raises it with the number of frames read so far.  NaN or infinite samples raise it too
    (with the frame where they start).  Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, path):
        import soundfile as sf  # imported here, not at start-up (docs/startup.md)

        self.path = str(path)
        try:
            self._f = sf.SoundFile(self.path)
        except (sf.LibsndfileError, RuntimeError, TypeError) as e:
            if not os.path.exists(self.path):
                raise AudioFileError(f"{self.path}: no such file") from None
            if os.path.isdir(self.path):
                raise AudioFileError(f"{self.path}: is a directory, not an audio file") \
                    from None
            msg = _one_line(e).replace(f"Error opening {self.path!r}: ", "")
            raise AudioFileError(f"{self.path}: not a readable audio file ({msg}; a truncated "
                                 "header reads like this too)") from None
        self.fs = float(self._f.samplerate)
        self.channels = int(self._f.channels)
        self.frames = int(self._f.frames)
        self.format = f"{self._f.format}/{self._f.subtype}"
        self.pos = 0
        claimed = self._claimed_frames()
        if claimed is not None and claimed > self.frames:
            self.close()
            raise AudioFileError(
                f"{self.path}: truncated: its header announces {claimed} frames, only "
                f"{self.frames} could be read (nothing processed)")
        if self.frames == 0:
            self.close()
            raise AudioFileError(f"{self.path}: the file has no samples")

    def _claimed_frames(self) -> int | None:
        """Frames the header of a WAV/AIFF announces when libsndfile found fewer bytes
        (its header log says ``data : N (should be M)``), else None."""
        try:
            info = self._f.extra_info
        except Exception:        # pragma: no cover - libsndfile without a log
            return None
        m = re.search(r"^\s*(?:data|SSND)\s*:\s*(\d+)\s*\(should be (\d+)\)", info, re.M)
        if m is None:
            return None
        claimed, present = int(m.group(1)), int(m.group(2))
        if claimed <= present or present == 0:
            return None
        return self.frames * claimed // present

    def read(self, n: int) -> np.ndarray:
        """The next ``n`` frames (fewer at the end of the file) as float64
        ``(channels, n)``; ``(channels, 0)`` at the end."""
        n = min(int(n), self.frames - self.pos)
        if n <= 0:
            return np.zeros((self.channels, 0))
        try:
            d = self._f.read(n, dtype="float64", always_2d=True)
        except Exception as e:   # libsndfile decoding errors (a damaged FLAC/OGG)
            raise AudioFileError(f"{self.path}: damaged or truncated: reading failed after "
                                 f"{self.pos} of {self.frames} frames ({_one_line(e)})") \
                from None
        if d.shape[0] < n:
            got = self.pos + d.shape[0]
            raise AudioFileError(f"{self.path}: truncated: {got} of the {self.frames} frames "
                                 "its header announces could be read")
        bad = ~np.isfinite(d)
        if bad.any():
            raise AudioFileError(f"{self.path}: the file contains NaN or Inf samples (from "
                                 f"frame {self.pos + int(np.argmax(bad.any(axis=1)))})")
        self.pos += n
        return np.ascontiguousarray(d.T)

    def close(self) -> None:
        f = self.__dict__.pop("_f", None)
        if f is not None:
            f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def read_audio(path) -> tuple[float, np.ndarray]:
    """Read a whole audio file (see :class:`AudioReader` for the formats and errors):
    its sample rate (Hz) and float64 ``(channels, T)``."""
    with AudioReader(path) as r:
        x = r.read(r.frames)
    return r.fs, x


def read_wav(path) -> tuple[float, np.ndarray]:
    """:func:`read_audio` under its earlier name (every format libsndfile reads, not only
    WAV): sample rate (Hz) and float64 ``(channels, T)``."""
    return read_audio(path)
