"""Multi-resolution short-time spectrum, 1 ms hop (Glasberg & Moore 2002, §2.1).

Glasberg B R, Moore B C J (2002). "A model of loudness applicable to time-varying
sounds", J. Audio Eng. Soc. 50, 331-342: six Hann-windowed segments of 64, 32, 16,
8, 4 and 2 ms, each zero-padded to one FFT length (2048 points at 32 kHz), are
analysed every 1 ms; each window supplies the spectral components of one frequency
range (20-80, 80-500, 500-1250, 1250-2540, 2540-4050, 4050-15000 Hz).  The six windows
share one temporal centre, the centre of the 64 ms window, so a frame describes the
sound ``nmax/2`` samples (32 ms) before the newest sample it uses.

Design (pure): :func:`design_spectrum` returns per window the DFT rows of exactly the
bins it contributes (a real ``(N_w, 2 n_w)`` matrix with the window and the power
scaling folded in), so a block of frames is six small matrix products instead of six
full FFTs per frame (same numbers as the zero-padded FFT; cheaper at 1 ms hop).

Power scaling: ``P_k = 2 |X_k|^2 / (nfft sum_n w_n^2)``, so that the components of a
sinusoid of mean square ``m`` sum to ``m``; then ``10^(spl_ref/10)`` (``spl_ref`` = dB SPL
of a digital RMS of 1.0) and the outer/middle-ear gain of the chosen sound field
(:func:`rtamt.loudness.ansi.ear_gain_db`).  Components are in linear intensity units
re 0 dB SPL at the cochlea.

Spectral compression (``comp_cam``): consecutive bins are merged (powers summed, at
their mean frequency) into groups no wider than ``comp_cam`` Cam.  Where the bin
spacing already exceeds it (below ~1.2 kHz for 0.1 Cam) nothing changes.  This is
the "compressed spectrum" of Ward et al. (2015, "Real-time excitation based binaural
loudness meters", DAFx-15), which they show changes loudness by far less than
0.1 phon; ``comp_cam=0`` uses every FFT bin (the paper's exact procedure).
"""
from __future__ import annotations

import dataclasses

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .ansi import ear_gain_db, hz_to_cam

WINDOWS_MS = (64.0, 32.0, 16.0, 8.0, 4.0, 2.0)
EDGES_HZ = (20.0, 80.0, 500.0, 1250.0, 2540.0, 4050.0, 15000.0)


@dataclasses.dataclass(frozen=True)
class SpectrumParams:
    """fs (Hz, >= 32000 so that 15 kHz < fs/2); hop_ms frame period; spl_ref (dB SPL of
    digital RMS 1.0); field (``free`` | ``diffuse`` | ``eardrum``); middle_ear (``'2007'``
    ANSI S3.4-2007 | ``'1997'`` Moore et al. 1997 revised 2006, see
    :func:`rtamt.loudness.ansi.ear_gain_db`); comp_cam (Cam, 0 = off)."""

    fs: float = 32000.0
    hop_ms: float = 1.0
    spl_ref: float = 100.0
    field: str = "free"
    middle_ear: str = "2007"
    comp_cam: float = 0.1
    windows_ms: tuple = WINDOWS_MS
    edges_hz: tuple = EDGES_HZ


@dataclasses.dataclass
class SpectrumCoeffs:
    fs: float
    hop: int            # samples per frame
    nmax: int           # longest window (samples) = analysis history
    nfft: int
    offsets: list       # per window: start of its segment inside the nmax history
    lengths: list       # per window: N_w
    mats: list          # per window: (N_w, 2 n_w) real DFT rows (cos | -sin), windowed, scaled
    gains: np.ndarray   # (n_bins,) power scale per bin incl. spl_ref and ear gain
    bin_hz: np.ndarray  # (n_bins,)
    group_start: np.ndarray  # (J,) reduceat indices into the bins
    comp_hz: np.ndarray      # (J,) component frequencies


def design_spectrum(p: SpectrumParams) -> SpectrumCoeffs:
    fs = float(p.fs)
    if fs < 2.0 * p.edges_hz[-1] + 1.0:
        raise ValueError(
            f"sample rate {fs:g} Hz is too low for the loudness models: they analyse up to "
            f"{p.edges_hz[-1]:g} Hz and need fs >= {int(2 * p.edges_hz[-1]) + 2000} Hz "
            "(32 kHz or more)")
    hop = int(round(fs * p.hop_ms / 1000.0))
    if hop < 1:
        raise ValueError("hop_ms too small for this sample rate")
    lengths = [int(round(fs * w / 1000.0)) for w in p.windows_ms]
    nmax = max(lengths)
    nfft = 1 << int(np.ceil(np.log2(nmax)))
    mats, gains, freqs, offsets = [], [], [], []
    for w, n in enumerate(lengths):
        lo, hi = p.edges_hz[w], p.edges_hz[w + 1]
        k = np.arange(int(np.ceil(lo * nfft / fs)), int(np.floor(hi * nfft / fs)) + 1)
        k = k[(k * fs / nfft >= lo) & (k * fs / nfft < hi)] if w < len(lengths) - 1 else \
            k[(k * fs / nfft >= lo) & (k * fs / nfft <= hi)]
        win = 0.5 - 0.5 * np.cos(2 * np.pi * (np.arange(n) + 0.5) / n)  # Hann, symmetric about n/2
        ph = 2 * np.pi * np.outer(np.arange(n), k) / nfft
        m = np.concatenate([win[:, None] * np.cos(ph), -win[:, None] * np.sin(ph)], axis=1)
        mats.append(np.ascontiguousarray(m))
        f = k * fs / nfft
        gains.append(np.full(k.size, 2.0 / (nfft * np.sum(win ** 2))))
        freqs.append(f)
        offsets.append((nmax - n) // 2)
    bin_hz = np.concatenate(freqs)
    ear_db = ear_gain_db(bin_hz, p.field, p.middle_ear)
    g = np.concatenate(gains) * 10.0 ** (p.spl_ref / 10.0) * 10.0 ** (ear_db / 10.0)
    # spectral compression into groups <= comp_cam wide
    cams = hz_to_cam(bin_hz)
    starts = [0]
    if p.comp_cam > 0:
        for i in range(1, bin_hz.size):
            if cams[i] - cams[starts[-1]] >= p.comp_cam - 1e-12:
                starts.append(i)
    else:
        starts = list(range(bin_hz.size))
    starts = np.asarray(starts, dtype=np.intp)
    ends = np.append(starts[1:], bin_hz.size)
    comp_hz = np.array([bin_hz[a:b].mean() for a, b in zip(starts, ends)])
    return SpectrumCoeffs(fs, hop, nmax, nfft, offsets, lengths, mats, g, bin_hz, starts, comp_hz)


def frame_powers(c: SpectrumCoeffs, z: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Component powers of the frames whose analysis history ends at ``ends``.

    z    : (R, L) float64 signal rows (history + block).
    ends : (F,) exclusive end index in z of each frame's newest sample (>= nmax), ``c.hop`` apart.
    Returns (R*F, J) row-major (row r, frame f at ``r*F + f``).
    """
    R = z.shape[0]
    F = ends.size
    z = np.ascontiguousarray(z)
    rs, es = z.strides
    parts = []
    for off, n, m in zip(c.offsets, c.lengths, c.mats):
        st = int(ends[0]) - c.nmax + off
        # frames are hop apart: a strided view (R, F, n) of z, copied once for the GEMM
        view = as_strided(z[:, st:], shape=(R, F, n), strides=(rs, c.hop * es, es), writeable=False)
        y = np.ascontiguousarray(view).reshape(R * F, n) @ m
        h = m.shape[1] // 2
        parts.append(y[:, :h] ** 2 + y[:, h:] ** 2)
    pb = np.concatenate(parts, axis=1)
    pb *= c.gains
    if c.group_start.size == pb.shape[1]:
        return pb
    return np.add.reduceat(pb, c.group_start, axis=1)
