"""Multi-resolution short-time spectrum, 1 ms hop (Glasberg & Moore 2002, §2.1).

Glasberg B R, Moore B C J (2002). "A model of loudness applicable to time-varying
sounds", J. Audio Eng. Soc. 50, 331-342: six Hann-windowed segments of 64, 32, 16,
8, 4 and 2 ms, each zero-padded to one FFT length (2048 points at 32 kHz), are
analysed every 1 ms; each window supplies the spectral components of one frequency
range (20-80, 80-500, 500-1250, 1250-2540, 2540-4050, 4050-15000 Hz).  The six windows
share one temporal centre, the centre of the 64 ms window, so a frame describes the
sound ``nmax/2`` samples (32 ms) before the newest sample it uses.

Only the bins a window contributes are needed, so no FFT is taken.  Each window gets
the cheapest of three exact evaluations of the same zero-padded DFT powers, chosen at
design time from its multiply count (:func:`design_spectrum`):

``direct``
    a real ``(N_w, 2 n_w)`` DFT matrix (window and scaling folded in); a block of frames
    is one matrix product.
``chunk`` (hopping DFT)
    when the window is a whole number ``C`` of hops and ends on a hop boundary, its
    rectangular-window DFT is the sum of the DFTs of its ``C`` hop-long chunks, each
    rotated by its position: ``R(f) = sum_i e^{-j 2 pi f i H} D_i(f)``.  A chunk's DFT is
    computed once, when it enters the window (one matrix product per block), stored
    rotated to its position within its "epoch" of C chunks, and the window's sum is kept
    as two running sums (chunks of the previous and of the current epoch), restarted at
    every epoch so that rounding never accumulates beyond one window (model state,
    derived from the sample history; see :func:`spectrum_chunks`).
    A frame then costs O(bins), not O(chunks x bins).  The Hann window is applied in
    the frequency domain: with ``w(m) = 1/2 - 1/2 cos(2 pi (m + 1/2)/n)``,
    ``X(f) = R(f)/2 - e^{j pi/n} R(f - 1/n)/4 - e^{-j pi/n} R(f + 1/n)/4``
    (Harris 1978, "On the use of windows for harmonic analysis with the DFT",
    Proc. IEEE 66, 51-83, §V), so the chunk DFTs are taken at the bins and at the bins
    shifted by ``+-1/n`` (the same frequencies when ``nfft/n`` is an integer).
``autocorr``
    for short windows with many bins (the 2 ms window: 64 samples, 701 bins), the
    power at ``f`` is ``|X(f)|^2 = r_0 + 2 sum_{d>=1} r_d cos(2 pi f d)`` with ``r_d``
    the autocorrelation of the windowed segment (Wiener-Khinchin), so the bins of a
    compression group collapse into one cosine table: ``P_g = sum_d r_d C_g(d)``.  Its
    rounding floor is ~1e-16 of the segment's energy (-160 dB re the window's power,
    far below threshold); negative rounding results are set to 0.

The matrix products run in :func:`rtamt.engine.rowwise.rowwise_matmul`, which computes
each frame by the same operations however many frames and streams a block holds (a BLAS
product rounds a row differently depending on the row count).

At 32 kHz the 64-4 ms windows use ``chunk`` and the 2 ms window ``autocorr``: about
35 000 multiplies per frame instead of 275 000.  Sample rates whose windows are not whole
hops (44.1 kHz) use ``direct`` for the long windows.

Power scaling: ``P_k = 2 |X_k|^2 / (nfft sum_n w_n^2)``, so that the components of a
sinusoid of mean square ``m`` sum to ``m``; then ``10^(100/10)`` (the input is in the
models' internal units, RMS 1 = :data:`rtamt.calibration.INTERNAL_SPL_REF` = 100 dB SPL:
the model's :class:`rtamt.calibration.InputCalibration` scales digital samples to them)
and the outer/middle-ear gain of the chosen sound field
(:func:`rtamt.loudness.ansi.ear_gain_db`).  Components are in linear intensity units
re 0 dB SPL at the cochlea.

Spectral compression (``comp_cam``): consecutive bins are merged (powers summed, at
their mean frequency) into groups no wider than ``comp_cam`` Cam.  Where the bin
spacing already exceeds it (below ~1.2 kHz for 0.1 Cam) nothing changes.  This is
the "compressed spectrum" of Ward et al. (2015, "Real-time excitation based binaural
loudness meters", DAFx-15), which they show changes loudness by far less than
0.1 phon; ``comp_cam=0`` uses every FFT bin (the paper's exact procedure).

The stage (:class:`Spectrum`) is the frame producer of the loudness models: it owns the
frame clock.  Its state is

* ``hist`` (R, nmax) the last ``nmax`` input samples of each row (64 ms; zeros = the
  silence before the stream),
* ``n`` (1,) int64 samples consumed so far, shared by the rows (frames are due at
  multiples of ``hop``),
* ``ring<w>`` the chunk DFTs of window ``w`` and their running sums (method ``chunk``;
  derived from ``hist``),

so frame ``k`` is computed when sample ``(k+1) hop - 1`` arrives, from the same ``nmax``
samples by the same arithmetic, whatever the block partition.  Frame ``k`` describes the
sound centred at ``frame_time = ((k+1) hop - nmax/2) / fs`` seconds (the windows share
one centre).  On the Triton backend the state arrays are torch tensors on the device,
except the clock ``n`` (a host array).
"""
from __future__ import annotations

import dataclasses

import numpy as np
from numba import njit
from numpy.lib.stride_tricks import as_strided

from ..ear.calibration import INTERNAL_SPL_REF
from ..engine.backend import Kernels
from ..engine.jit import JIT as _JIT
from ..engine.rowwise import ROWWISE, band_ranges, product
from ..engine.stage import SAMPLES
from .ansi import ear_gain_db, hz_to_cam
from .frames import FrameStage

WINDOWS_MS = (64.0, 32.0, 16.0, 8.0, 4.0, 2.0)
EDGES_HZ = (20.0, 80.0, 500.0, 1250.0, 2540.0, 4050.0, 15000.0)
METHODS = ("auto", "direct", "chunk", "autocorr")


@dataclasses.dataclass(frozen=True)
class SpectrumParams:
    """fs (Hz, >= 32000 so that 15 kHz < fs/2); hop_ms frame period; field (``free`` |
    ``diffuse`` | ``eardrum``); middle_ear (``'2007'`` ANSI S3.4-2007 | ``'1997'`` Moore et
    al. 1997 revised 2006, see
    :func:`rtamt.loudness.ansi.ear_gain_db`); comp_cam (Cam, 0 = off); method: how each
    window's DFT powers are evaluated (``auto`` = cheapest valid, or force ``direct`` /
    ``chunk`` / ``autocorr`` where valid; all give the same powers)."""

    fs: float = 32000.0
    hop_ms: float = 1.0
    field: str = "free"
    middle_ear: str = "2007"
    comp_cam: float = 0.1
    windows_ms: tuple = WINDOWS_MS
    edges_hz: tuple = EDGES_HZ
    method: str = "auto"


@dataclasses.dataclass(frozen=True)
class ReferenceSpectrumParams(SpectrumParams):
    """:class:`SpectrumParams` plus the choices of the Cambridge loudness program
    (Moore2016 ``config='tvl2018'``; the defaults are that program's):

    window: ``'hanning'`` (``numpy.hanning(n)``, zero at both ends) or ``'hann'`` (rtamt's,
    symmetric about n/2); correction_db: each window's powers ``|X_k|^2`` are scaled by
    ``2 10^(correction_db/10) / (n nfft)`` (``n`` its length) instead of the exact
    ``2 / (nfft sum w^2)``, ``None`` = exact; edges_closed: ``'right'`` puts a bin at
    exactly an edge frequency into the lower band (the longer window), ``'left'`` into the
    upper one (rtamt's); ear_gain: apply the outer/middle-ear gain to the components
    (``False`` when the ear is a filter on the waveform)."""

    comp_cam: float = 0.0
    window: str = "hanning"
    correction_db: float | None = 3.32
    edges_closed: str = "right"
    ear_gain: bool = False


@dataclasses.dataclass
class WindowPlan:
    """How one window's components are computed (see the module docstring).

    n: window length (samples); start: first sample relative to the frame's end
    (negative); method; bins: indices of its bins in the concatenated bin list.
    ``direct``: mat (n, 2B) windowed DFT rows (cos | -sin), gain (B,), grp (B,).
    ``chunk``: C chunks, lag = hops between window end and frame end; tab (H, 2 nF)
    chunk DFT table cos | -sin(2 pi phi m); rc, rs (C, nF) rotations, wn (2, nF) the
    rotation by one window length; offs (3,): bin b's
    f, f - 1/n, f + 1/n are ``phi[offs + b]``; cm, cp (2,) Hann coefficients (re, im);
    gain, grp (B,).
    ``autocorr``: win (n,), cg (n, Jw) gain-weighted cosine sums of its Jw consecutive
    groups, the first being g0.
    """

    n: int
    start: int
    method: str
    bins: np.ndarray
    arrays: dict


@dataclasses.dataclass
class SpectrumCoeffs:
    fs: float
    hop: int            # samples per frame
    nmax: int           # longest window (samples) = analysis history
    nfft: int
    plans: list         # per window: WindowPlan
    gains: np.ndarray   # (n_bins,) power scale per bin incl. input level and ear gain
    bin_hz: np.ndarray  # (n_bins,)
    group_of_bin: np.ndarray  # (n_bins,) component index of each bin
    comp_hz: np.ndarray      # (J,) component frequencies

    @property
    def n_comp(self) -> int:
        return int(self.comp_hz.shape[0])

    def ring_shapes(self, R: int) -> dict:
        """Shapes of the chunk-DFT state for R rows: ``{'ring<w>': (R, C + 2, 2 nF)}`` (the
        last C rotated chunk DFTs, then the two epoch sums)."""
        return {f"ring{w}": (R, p.arrays["rc"].shape[0] + 2, p.arrays["tab"].shape[1])
                for w, p in enumerate(self.plans) if p.method == "chunk"}


def _costs(n, B, Jw, hop, chunk_ok, nF):
    c = {"direct": 2 * n * B, "autocorr": n * (n + 1) // 2 + n * Jw}
    if chunk_ok:
        c["chunk"] = 2 * hop * nF + 4 * (n // hop) * nF + 8 * B
    return c


def design_spectrum(p: SpectrumParams, level_db: float = INTERNAL_SPL_REF) -> SpectrumCoeffs:
    """The spectrum's coefficients for ``p``; ``level_db``: the dB SPL of an input RMS of 1
    (the internal units, :data:`rtamt.calibration.INTERNAL_SPL_REF`; the loudness models
    pass another value only to rebuild the design fingerprint of their earlier versions,
    which folded ``spl_ref`` into the gains)."""
    fs = float(p.fs)
    if fs < 2.0 * p.edges_hz[-1] + 1.0:
        raise ValueError(
            f"sample rate {fs:g} Hz is too low for the loudness models: they analyse up to "
            f"{p.edges_hz[-1]:g} Hz and need fs >= {int(2 * p.edges_hz[-1]) + 2000} Hz "
            "(32 kHz or more)")
    if p.method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {p.method!r}")
    hop = int(round(fs * p.hop_ms / 1000.0))
    if hop < 1:
        raise ValueError("hop_ms too small for this sample rate")
    lengths = [int(round(fs * w / 1000.0)) for w in p.windows_ms]
    nmax = max(lengths)
    nfft = 1 << int(np.ceil(np.log2(nmax)))
    wkind = getattr(p, "window", "hann")
    corr = getattr(p, "correction_db", None)
    right = getattr(p, "edges_closed", "left") == "right"
    if wkind not in WINDOWS or getattr(p, "edges_closed", "left") not in ("left", "right"):
        raise ValueError(f"window must be one of {WINDOWS} and edges_closed 'left' or "
                         f"'right', got {wkind!r}, {getattr(p, 'edges_closed', 'left')!r}")
    ks, gains, freqs = [], [], []
    for w, n in enumerate(lengths):
        lo, hi = p.edges_hz[w], p.edges_hz[w + 1]
        k = np.arange(int(np.ceil(lo * nfft / fs)), int(np.floor(hi * nfft / fs)) + 1)
        f = k * fs / nfft
        if right:          # (lo, hi]: a bin exactly at an edge goes to the longer window
            k = k[(f > lo) & (f <= hi)]
        else:
            k = k[(f >= lo) & (f < hi)] if w < len(lengths) - 1 else k[(f >= lo) & (f <= hi)]
        win = _window(wkind, n)
        ks.append(k)
        if corr is None:
            gains.append(np.full(k.size, 2.0 / (nfft * np.sum(win ** 2))))
        else:
            # the Cambridge program: |X/N|^2 x 2 (one-sided) x 2 (power of a sine's
            # amplitude) / 2 x 10^(c/10) x N/n at N = nfft = nmax (32 kHz), i.e.
            # 2 10^(c/10) / (n nfft); c = 3.32 dB (the 64 ms Hann window needs 4.26 dB)
            gains.append(np.full(k.size, 2.0 * 10.0 ** (corr / 10.0) / (n * nfft)))
        freqs.append(k * fs / nfft)
    bin_hz = np.concatenate(freqs)
    ear_db = (ear_gain_db(bin_hz, p.field, p.middle_ear) if getattr(p, "ear_gain", True)
              else np.zeros_like(bin_hz))
    g = np.concatenate(gains) * 10.0 ** (level_db / 10.0) * 10.0 ** (ear_db / 10.0)
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
    grp = np.repeat(np.arange(starts.size), ends - starts).astype(np.int64)

    plans, b0 = [], 0
    for w, n in enumerate(lengths):
        k = ks[w]
        bins = np.arange(b0, b0 + k.size)
        b0 += k.size
        start = -nmax + (nmax - n) // 2
        tail = -(start + n)                      # samples between window end and frame end
        # the hopping DFT applies rtamt's Hann window in the frequency domain
        chunk_ok = n % hop == 0 and tail % hop == 0 and wkind == "hann"
        gw, grw = g[bins], grp[bins]
        Jw = np.unique(grw).size
        # chunk frequencies k/nfft and k/nfft -+ 1/n (as integers over nfft*n): one
        # contiguous run k_lo - d .. k_hi + d when d = nfft/n is an integer, else the
        # three runs side by side; bin b then sits at offs + b in all three
        if nfft % n == 0:
            d = nfft // n
            num = np.arange(k[0] - d, k[-1] + d + 1) * n
            offs = np.array([d, 0, 2 * d], dtype=np.int64)
        else:
            num = np.concatenate([k * n, k * n - nfft, k * n + nfft])
            offs = np.array([0, k.size, 2 * k.size], dtype=np.int64)
        costs = _costs(n, k.size, Jw, hop, chunk_ok, num.size)
        if p.method == "auto":
            method = min(costs, key=costs.get)
        elif p.method in costs:
            method = p.method
        else:
            method = "direct"
        plans.append(WindowPlan(n, start, method, bins,
                                _plan_arrays(method, n, k, nfft, hop, tail, gw, grw,
                                             num, offs, wkind)))
    return SpectrumCoeffs(fs, hop, nmax, nfft, plans, g, bin_hz, grp, comp_hz)


def _hann(n):
    # Hann window symmetric about n/2 (periodic form shifted by half a sample)
    return 0.5 - 0.5 * np.cos(2 * np.pi * (np.arange(n) + 0.5) / n)


#: the analysis windows: rtamt's Hann (``hann``, symmetric about n/2, nonzero ends) and
#: ``numpy.hanning`` (``hanning``, zero at both ends; the Cambridge program's)
WINDOWS = ("hann", "hanning")


def _window(kind, n):
    return _hann(n) if kind == "hann" else np.hanning(n)


def _plan_arrays(method, n, k, nfft, hop, tail, gw, grw, num, offs, wkind="hann"):
    if method == "direct":
        win = _window(wkind, n)
        ph = 2 * np.pi * np.outer(np.arange(n), k) / nfft
        mat = np.concatenate([win[:, None] * np.cos(ph), -win[:, None] * np.sin(ph)], axis=1)
        mat = np.ascontiguousarray(mat)
        return {"mat": mat, "mat_rng": band_ranges(mat), "gain": gw, "grp": grw}
    if method == "autocorr":
        win = _window(wkind, n)
        gids = np.unique(grw)
        d = np.arange(n)
        cg = np.zeros((n, gids.size))
        for col, gid in enumerate(gids):
            sel = grw == gid
            cg[:, col] = (gw[sel][None, :] * np.cos(2 * np.pi * np.outer(d, k[sel]) / nfft)).sum(1)
        cg[1:] *= 2.0
        assert np.all(np.diff(gids) == 1)     # a window's groups are consecutive
        cg = np.ascontiguousarray(cg)
        return {"win": win, "cg": cg, "cg_rng": band_ranges(cg), "g0": int(gids[0])}
    # chunk
    phi = num / float(nfft * n)                  # cycles per sample
    C = n // hop
    m = np.arange(hop)
    ang = 2 * np.pi * np.outer(m, phi)
    rot = 2 * np.pi * np.outer(np.arange(C) * hop, phi)
    wn = 2 * np.pi * phi * n
    tab = np.ascontiguousarray(np.concatenate([np.cos(ang), -np.sin(ang)], axis=1))
    return {"tab": tab, "tab_rng": band_ranges(tab),
            "rc": np.ascontiguousarray(np.cos(rot)), "rs": np.ascontiguousarray(-np.sin(rot)),
            "wn": np.stack([np.cos(wn), -np.sin(wn)]),
            "offs": offs,
            "cm": -0.25 * np.array([np.cos(np.pi / n), np.sin(np.pi / n)]),
            "cp": -0.25 * np.array([np.cos(np.pi / n), -np.sin(np.pi / n)]),
            "lag": tail // hop, "gain": gw, "grp": grw}


def new_rings(c: SpectrumCoeffs, R: int) -> dict:
    """Zeroed chunk-DFT rings for R rows (consistent with an all-zero history)."""
    return {k: np.zeros(s) for k, s in c.ring_shapes(R).items()}


@njit(**_JIT)
def spectrum_chunks(D, k0, lag, F, n_prime, rc, rs, wn, ring, offs, cm, cp, gain, grp, P):
    """Hann-windowed DFT powers of one analysis window from hop-long chunk DFTs
    (hopping DFT; see :mod:`rtamt.loudness.spectrum`, method ``chunk``).

    Chunk c (samples ``cH .. cH + H - 1``) has residue ``rho = c mod C`` in its "epoch"
    ``c div C`` (C = chunks per window); its DFT is stored rotated to its epoch
    position, ``Dh_c = D_c e^{-j 2 pi phi rho H}``.  The window of the frame whose
    newest chunk is c covers chunks ``c - C + 1 .. c``: those of the previous epoch
    (sum ``S_A``) and those of the current one (sum ``S_B``).  Relative to the window's
    start (up to one phase common to each bin's three frequencies, which cancels in
    the power) its rectangular-window DFT is ``T = S_A + e^{-j 2 pi phi n} S_B``, or
    ``S_B`` when the window is one whole epoch.  The sums are updated per chunk
    (``S_A -= Dh_leaving``, ``S_B += Dh_new``; at an epoch start ``S_A = S_B - Dh_leaving``,
    ``S_B = Dh_new``), so rounding never accumulates beyond one epoch.

    D (R, n_prime + F, 2 nF): DFTs (re | im, chunk-local phase) of the chunks entering
    in this block, oldest first; the first ``n_prime`` only update the state (stateless
    use), then frame f (absolute index k0 + f) adds chunk ``k0 + f - lag``.
    ring (R, C + 2, 2 nF): ``Dh`` of the last C chunks (slot rho), then S_A, S_B; state,
    advanced in place.  rc, rs (C, nF): ``cos``, ``-sin`` of ``2 pi phi rho H``;
    wn (2, nF): ``e^{-j 2 pi phi n}``.  offs (3,): bin b's frequencies f, f - 1/n,
    f + 1/n are ``phi[offs[0..2] + b]``; cm, cp (2,): Hann coefficients (re, im) of the
    shifted terms for a window starting at an epoch start (the centre one is 1/2);
    otherwise they turn by ``e^{-+j 2 pi rho0 / C}``, ``rho0`` the residue of the
    window's first chunk.  ``P[r F + f, grp[b]] += gain[b] |X_b|^2``.
    """
    R = D.shape[0]
    C, nF = rc.shape
    B = gain.size
    Tr = np.empty(nF)
    Ti = np.empty(nF)
    pw = np.empty(B)
    ar, ai = Tr[offs[0]:offs[0] + B], Ti[offs[0]:offs[0] + B]
    mr, mi = Tr[offs[1]:offs[1] + B], Ti[offs[1]:offs[1] + B]
    pr, pi = Tr[offs[2]:offs[2] + B], Ti[offs[2]:offs[2] + B]
    wr = wn[0]
    wi = wn[1]
    for r in range(R):
        rg = ring[r]
        sa = rg[C]
        sb = rg[C + 1]
        for j in range(n_prime + F):
            rho = (k0 - lag - n_prime + j) % C
            d = D[r, j]
            old = rg[rho]
            cr = rc[rho]
            ci = rs[rho]
            if rho == 0:
                for q in range(nF):
                    hr = cr[q] * d[q] - ci[q] * d[nF + q]
                    hi = cr[q] * d[nF + q] + ci[q] * d[q]
                    sa[q] = sb[q] - old[q]
                    sa[nF + q] = sb[nF + q] - old[nF + q]
                    sb[q] = hr
                    sb[nF + q] = hi
                    old[q] = hr
                    old[nF + q] = hi
            else:
                for q in range(nF):
                    hr = cr[q] * d[q] - ci[q] * d[nF + q]
                    hi = cr[q] * d[nF + q] + ci[q] * d[q]
                    sa[q] -= old[q]
                    sa[nF + q] -= old[nF + q]
                    sb[q] += hr
                    sb[nF + q] += hi
                    old[q] = hr
                    old[nF + q] = hi
            if j < n_prime:
                continue
            if rho == C - 1:
                for q in range(nF):
                    Tr[q] = sb[q]
                    Ti[q] = sb[nF + q]
            else:
                for q in range(nF):
                    Tr[q] = sa[q] + wr[q] * sb[q] - wi[q] * sb[nF + q]
                    Ti[q] = sa[nF + q] + wr[q] * sb[nF + q] + wi[q] * sb[q]
            rho0 = rho + 1 if rho + 1 < C else 0
            # phase of the f -+ 1/n terms relative to f: e^{-+j 2 pi rho0 / C}
            c0 = rc[rho0, offs[0]] * rc[rho0, offs[1]] + rs[rho0, offs[0]] * rs[rho0, offs[1]]
            s0 = rs[rho0, offs[0]] * rc[rho0, offs[1]] - rc[rho0, offs[0]] * rs[rho0, offs[1]]
            cm0 = cm[0] * c0 - cm[1] * s0
            cm1 = cm[0] * s0 + cm[1] * c0
            cp0 = cp[0] * c0 + cp[1] * s0
            cp1 = cp[1] * c0 - cp[0] * s0
            for b in range(B):
                xr = 0.5 * ar[b] + cm0 * mr[b] - cm1 * mi[b] + cp0 * pr[b] - cp1 * pi[b]
                xi = 0.5 * ai[b] + cm0 * mi[b] + cm1 * mr[b] + cp0 * pi[b] + cp1 * pr[b]
                pw[b] = gain[b] * (xr * xr + xi * xi)
            row = P[r * F + j - n_prime]
            for b in range(B):
                row[grp[b]] += pw[b]


@njit(**_JIT)
def autocorr_frames(z, e0, F, H, start, win, out):
    """Autocorrelations of Hann-windowed short segments (Wiener-Khinchin; see
    :mod:`rtamt.loudness.spectrum`, method ``autocorr``).

    Frame f's segment is ``z[r, e0 + f H + start :][:n]``; with ``y = win * segment``,
    ``out[r F + f, d] = r_d = sum_m y_m y_{m+d}`` for ``d = 0 .. n-1``.
    """
    R = z.shape[0]
    n = win.size
    y = np.empty(n)
    for r in range(R):
        x = z[r]
        for f in range(F):
            s = e0 + f * H + start
            for m in range(n):
                y[m] = win[m] * x[s + m]
            ac = out[r * F + f]
            ac[:] = 0.0
            for m in range(n):
                ym = y[m]
                yt = y[m:]
                for d in range(n - m):
                    ac[d] += ym * yt[d]


@njit(**_JIT)
def group_add(pb, gain, grp, P):
    """``P[i, grp[b]] += gain[b] pb[i, b]`` (bin powers into compression groups)."""
    N, B = pb.shape
    for i in range(N):
        row = P[i]
        for b in range(B):
            row[grp[b]] += gain[b] * pb[i, b]


def concat_history(hist, rows):
    """``hist`` (R, L) and ``rows`` (R, T) side by side: the signal (R, L + T) the frames of
    a block are analysed from."""
    return np.concatenate([hist, rows], axis=1)


def clamp_negative(x):
    """``x = max(x, 0)`` in place (rounding leaves tiny negative powers where the true
    power is ~0)."""
    np.maximum(x, 0.0, out=x)


def window_frames(z, st, F, hop, n):
    """The ``F`` segments ``z[:, st + f hop:][:n]`` of each row as (R F, n) (a copy)."""
    R = z.shape[0]
    rs, es = z.strides
    view = as_strided(z[:, st:], shape=(R, F, n), strides=(rs, hop * es, es), writeable=False)
    return view.reshape(R * F, n)


def _plan_args(c: SpectrumCoeffs) -> tuple:
    """Per window ``(w, method, n, start, arguments)``: what :func:`frame_powers` passes to
    its kernels, taken from the plans once."""
    out = []
    for w, pl in enumerate(c.plans):
        a = pl.arrays
        if pl.method == "chunk":
            args = (a["tab"], a["tab_rng"], a["lag"], a["rc"].shape[0], a["rc"], a["rs"],
                    a["wn"], a["offs"], a["cm"], a["cp"], a["gain"], a["grp"])
        elif pl.method == "autocorr":
            args = (a["win"], a["cg"], a["cg_rng"], a["g0"])
        else:
            args = (a["mat"], a["mat_rng"], a["gain"], a["grp"])
        out.append((w, pl.method, pl.n, pl.start, args))
    return tuple(out)


def frame_powers(c: SpectrumCoeffs, z, ends: np.ndarray, rings: dict | None = None,
                 k0: int = 0, kern=None, plans=None):
    """Component powers of the frames whose analysis history ends at ``ends``.

    z     : (R, L) float64 signal rows (history + block).
    ends  : (F,) exclusive end index in z of each frame's newest sample (>= nmax), ``c.hop``
            apart.
    rings : chunk-DFT rings and running sums (state, see :func:`new_rings`) as left by
            the frame before ``ends[0]``, advanced in place; ``None`` = stateless (the rings
            are filled from ``z``, which then needs ``nmax`` samples before ``ends[0]``).
    k0    : absolute index of the first frame (ring slot = chunk index mod C).
    kern  : the kernels to run (:attr:`Spectrum.kern`, bound by the model's ``to()``:
            numpy arrays on numba, torch tensors on Triton); default the numba set.  ``c``'s
            arrays must be as ``kern`` takes them (:attr:`Spectrum.kcoeffs`).
    plans : ``_plan_args(c)``, if the caller keeps it.
    Tested against ``numpy.fft.rfft`` of the windowed, zero-padded segments
    (``tests/loudness/test_spectrum.py``).
    Returns (R*F, J) row-major (row r, frame f at ``r*F + f``), linear power.
    """
    kern = Spectrum.kern if kern is None else kern
    R = z.shape[0]
    F = ends.size
    z = kern.contiguous(z)
    P = kern.zeros((R * F, c.comp_hz.shape[0]), z)
    if F == 0:
        return P
    e0 = int(ends[0])
    H = c.hop
    prime = rings is None
    if prime:
        rings = {k: kern.zeros(shape, z) for k, shape in c.ring_shapes(R).items()}
    for w, method, n, start, a in (_plan_args(c) if plans is None else plans):
        if method == "chunk":
            # the chunks entering the window in this block are contiguous in z: their
            # DFTs are one matrix product (chunk-local phase), the rest is compiled
            tab, tab_rng, lag, C, rc, rs, wn, offs, cm, cp, gain, grp = a
            n_new = F + (C - 1 if prime else 0)
            st = e0 - (lag + 1) * H - (n_new - F) * H     # first sample of the new chunks
            seg = z[:, st:st + n_new * H].reshape(R * n_new, H)
            D = product(kern, seg, tab, tab_rng).reshape(R, n_new, -1)
            kern.spectrum_chunks(D, k0, lag, F, n_new - F, rc, rs, wn, rings[f"ring{w}"], offs,
                                 cm, cp, gain, grp, P)
        elif method == "autocorr":
            win, cg, cg_rng, g0 = a
            ac = kern.empty((R * F, n), z)
            kern.autocorr_frames(z, e0, F, H, start, win, ac)
            # |X(f)|^2 = r_0 + 2 sum_d r_d cos(2 pi f d), summed per group; rounding can
            # leave tiny negative values where the true power is ~0
            pg = product(kern, ac, cg, cg_rng)
            kern.clamp_negative(pg)
            P[:, g0:g0 + pg.shape[1]] += pg
        else:
            mat, mat_rng, gain, grp = a
            seg = kern.window_frames(z, e0 + start, F, H, n)
            y = product(kern, seg, mat, mat_rng)
            h = y.shape[1] // 2
            kern.group_add(y[:, :h] ** 2 + y[:, h:] ** 2, gain, grp, P)
    return P


def _triton():
    from . import spectrum_triton as t

    return (t.spectrum_chunks, t.autocorr_frames, t.group_add, t.concat_history,
            t.window_frames, t.clamp_negative)


class Spectrum(FrameStage):
    """The multi-resolution spectrum as the loudness models' first frame stage (the frame
    producer): ``fr['rows']`` (R, T) float64 samples in internal units -> ``fr['P']``
    (R F, J) component powers (linear, re 0 dB SPL at the cochlea) of the ``F`` frames
    completed in the block, ``fr['ends']`` (F,) the absolute end sample of each frame's
    history, ``fr['R']``, ``fr['F']``.  Owns the frame clock (see the module docstring)."""

    name = "spectrum"
    Params = SpectrumParams
    kernels = Kernels(numba=(spectrum_chunks, autocorr_frames, group_add, concat_history,
                             window_frames, clamp_negative), triton=_triton, uses=(ROWWISE,))
    shared_state = ("n",)
    reads = ("rows",)
    writes = ("P", "ends")
    #: the frame producer: sample rows in, frames out
    flow_in = SAMPLES

    @staticmethod
    def design(params: SpectrumParams) -> SpectrumCoeffs:
        return design_spectrum(params)

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._ring_keys = tuple(self.coeffs.ring_shapes(1))
        self._plans = _plan_args(self.kc)

    def _set_backend(self, backend: str, device, kern=False) -> None:
        super()._set_backend(backend, device, kern)
        self._plans = _plan_args(self.kc)

    # ------------------------------------------------------------------ the frame clock
    @property
    def hop(self) -> int:
        """Samples per frame."""
        return self.coeffs.hop

    @property
    def nmax(self) -> int:
        """Samples of history a frame is analysed from (the longest window)."""
        return self.coeffs.nmax

    @property
    def frame_rate(self) -> float:
        """Frames per second."""
        return self.coeffs.fs / self.coeffs.hop

    @property
    def latency_s(self) -> float:
        """Delay of a frame's centre behind its newest input sample (s)."""
        return self.coeffs.nmax / 2 / self.coeffs.fs

    def frame_ends(self, n0: int, T: int) -> np.ndarray:
        """(F,) int64: the absolute end sample of the history of each frame due in a block
        of ``T`` samples after ``n0`` samples."""
        hop = self.coeffs.hop
        return np.arange((n0 // hop + 1) * hop, n0 + T + 1, hop, dtype=np.int64)

    def frame_time(self, ends: np.ndarray) -> np.ndarray:
        """(F,) float64: the centre time (s) of the frames ending at ``ends``."""
        return (ends - self.coeffs.nmax / 2.0) / self.coeffs.fs

    # ------------------------------------------------------------------ stage
    def init_state(self, R: int) -> dict:
        st = {"hist": np.zeros((R, self.coeffs.nmax)), "n": np.zeros(1, np.int64)}
        st.update(new_rings(self.coeffs, R))
        return st

    def process_tm(self, fr: dict, state: dict) -> None:
        rows = fr["rows"]
        R, T = rows.shape
        c = self.coeffs
        hop, L = c.hop, c.nmax
        n0 = int(state["n"][0])
        ends = np.arange((n0 // hop + 1) * hop, n0 + T + 1, hop, dtype=np.int64)  # frame_ends
        F = ends.size
        z = self.kern.concat_history(state["hist"], rows)
        rings = {k: state[k] for k in self._ring_keys}
        P = frame_powers(self.kc, z, ends - n0 + L, rings, n0 // hop, self.kern, self._plans)
        state["hist"][...] = z[:, -L:]
        state["n"][0] = n0 + T
        fr.update(P=P, ends=ends, R=R, F=F)

    @classmethod
    def grad_rule(cls):
        """The gradient rule (:class:`rtamt.loudness.spectrum_grad.SpectrumGrad`)."""
        from .spectrum_grad import SpectrumGrad

        return SpectrumGrad

    @classmethod
    def examples(cls):
        from ..engine.examples import Example

        return (Example("spectrum", dict(fs=32000.0), "frames"),)
