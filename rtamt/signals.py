"""Built-in demo signal and WAV input (calibrated, float).

Calibration convention (shared by every model): ``spl_ref`` is the dB SPL of a
digital signal with RMS 1.0.  AMT's convention is ``spl_ref = 100``.
"""
from __future__ import annotations

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


def read_wav(path) -> tuple[float, np.ndarray]:
    """Read a WAV file as float64 ``(channels, T)`` in [-1, 1) and its sample rate.

    int16 / int32 (incl. 24-bit, left-justified by scipy) are scaled by
    ``2^-(bits-1)``, uint8 is centred, float32/float64 are taken as is.
    """
    from scipy.io import wavfile  # imported here, not at start-up (docs/startup.md)

    fs, data = wavfile.read(path)
    if data.dtype == np.int16:
        x = data.astype(np.float64) / 32768.0
    elif data.dtype == np.int32:
        x = data.astype(np.float64) / 2147483648.0
    elif data.dtype == np.uint8:
        x = (data.astype(np.float64) - 128.0) / 128.0
    elif data.dtype in (np.float32, np.float64):
        x = data.astype(np.float64)
    else:
        raise ValueError(f"{path}: unsupported WAV sample type {data.dtype}")
    x = x.T if x.ndim == 2 else x[None, :]
    if x.shape[-1] == 0:
        raise ValueError(f"{path}: the file has no samples")
    if not np.isfinite(x).all():
        raise ValueError(f"{path}: the file contains NaN or Inf samples")
    return float(fs), np.ascontiguousarray(x)
