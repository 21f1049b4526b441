"""Live-display feed: what a monitor shows, gathered from a running
:class:`~rtamt.runtime.Runtime` (used by ``rtamt monitor`` and ``rtamt meter``).

::

    processing thread ── Result ──► MonitorFeed.__call__   (subscriber: writes into
                                      preallocated rings, lock held for a few µs)
    GUI thread (timer) ─────────────► MonitorFeed.read(view) (copies the rings, in time
                                      order, into a preallocated FeedView)

Neither side allocates per block / per frame beyond a few small index arrays; the GUI
never runs a model and never holds the lock while drawing.

Chains a monitor runs (names are the keys of the runtime's chain dict):

* ``'loudness'``: a time-varying loudness model (:class:`~rtamt.models.Moore2016` or
  :class:`~rtamt.models.Glasberg2002`): STL / LTL history (sone), per-ear curves,
  the newest excitation pattern (dB) and specific loudness (sone/Cam).
* ``'modulation'``: :class:`ModulationPower` around a model with a packed modulation
  filterbank output (:class:`~rtamt.models.Dau1997`): mean power per (auditory
  channel, modulation filter) over a sliding window.
* ``'level'``: :class:`SoundLevel`: block mean square and sample peak, for dB SPL.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from rtamt.engine.stage import Stateless


class SoundLevel(Stateless):
    """Chain that returns each block's mean square (averaged over channels) and sample
    peak, ``(ms, peak)`` in digital units; stateless, so block partitions do not matter.
    dB SPL = ``10 log10(ms) + spl_ref``."""

    name = "level"
    outputs = ("level",)

    def __call__(self, x):
        a = np.asarray(x, dtype=np.float64)
        return float(np.mean(a * a)), float(np.max(np.abs(a)))


class ModulationPower:
    """Chain wrapper: runs ``model`` (e.g. :class:`~rtamt.models.Dau1997`, whose output is
    the packed modulation-filterbank output ``(…, F, T)``, see
    :mod:`rtamt.modulation.modfb`) and returns per block ``(p, T)``: ``p`` (F,) float64
    is the sum over the block's T samples of the squared output (model units², mean
    over input channels).  The model's full output is not kept (a 30-channel Dau1997
    block of 512 samples is ~1 MB).

    The model applies its own ``spl_ref``.  Mean power over a window = sum of ``p`` / sum
    of ``T``.  Follows the streaming contract by delegating the state to ``model``.
    """

    name = "modulation"
    outputs = ("power",)
    batchable = False

    def __init__(self, model):
        self.model = model
        mf = model["modfb"].coeffs
        self.fc = np.asarray(model.fc, dtype=np.float64)               # (C,) Hz
        self.mfc_padded = np.asarray(mf.mfc_padded, dtype=np.float64)  # (C, M) Hz, NaN pad
        self.filter_channel = np.asarray(mf.filter_channel)
        self.filter_slot = np.asarray(mf.filter_slot)
        self.n_filters = int(self.filter_channel.size)

    def __call__(self, x):
        y = np.asarray(self.model(x))
        T = y.shape[-1]
        y = y.reshape(-1, self.n_filters, T)
        p = np.einsum("bft,bft->f", y, y, dtype=np.float64)
        if y.shape[0] > 1:
            p /= y.shape[0]
        return p, T

    def process_all(self, x):
        return {"power": self(x)}

    @property
    def input_limit(self):
        return self.model.input_limit

    def design_identity(self):
        return self.model.design_identity()

    def output_info(self):
        return {"power": {"rate": None, "channels": self.n_filters}}

    def reset(self):
        self.model.reset()

    def state_dict(self):
        return self.model.state_dict()

    def load_state_dict(self, sd):
        self.model.load_state_dict(sd)


def _put(ring: np.ndarray, w: int, vals: np.ndarray) -> int:
    """Write ``vals`` (..., n) at ring position ``w`` (total written so far) of ``ring``
    (..., N); returns the new total."""
    N = ring.shape[-1]
    n = vals.shape[-1]
    if n > N:
        w += n - N
        vals = vals[..., n - N:]
        n = N
    k = w % N
    m = min(n, N - k)
    ring[..., k:k + m] = vals[..., :m]
    if m < n:
        ring[..., :n - m] = vals[..., m:]
    return w + n


def _unroll(ring: np.ndarray, w: int, out: np.ndarray) -> int:
    """Copy ``ring`` (..., N) into ``out`` oldest first; returns the number of valid
    (written) entries, which are the last ones of ``out``."""
    N = ring.shape[-1]
    k = w % N
    out[..., :N - k] = ring[..., k:]
    out[..., N - k:] = ring[..., :k]
    return min(w, N)


class FeedView:
    """Preallocated arrays a GUI reads into (:meth:`MonitorFeed.read`); the last
    ``n_loud`` / ``n_proc`` entries of the history arrays are valid (oldest first).

    t (H,)                 loudness frame times, stream seconds (the model's frame times
                           moved onto the stream clock: skipped input and resets included)
    stl, ltl (H,)          total short-/long-term loudness, sone
    stl_ears, ltl_ears     (2, H) left/right, sone (NaN unless the model reports ears)
    exc (2, K)             newest excitation pattern, dB (row 1 = row 0 for one ear)
    spec (2, K)            newest specific loudness, sone/Cam
    mod_db (C, M)          mean modulation power over the window, dB re 1 model unit²
                           (NaN where a channel has no such filter)
    proc_t, proc_us (Hb,)  block end time (stream s) and processing time (µs)
    values (dict)          newest scalars: seq, t, stl, ltl, stl_left, stl_right,
                           ltl_left, ltl_right, spl_db, peak_db, gaps, mod_seconds
    """

    def __init__(self, feed: MonitorFeed):
        H, K = feed.loud.shape[1], feed.exc.shape[1]
        self.t = np.full(H, np.nan)
        self.stl = np.full(H, np.nan)
        self.ltl = np.full(H, np.nan)
        self.stl_ears = np.full((2, H), np.nan)
        self.ltl_ears = np.full((2, H), np.nan)
        self._loud = np.full(feed.loud.shape, np.nan)
        self.exc = np.full((2, K), np.nan)
        self.spec = np.full((2, K), np.nan)
        self.mod_db = np.full(feed.mod_shape, np.nan)
        self._mp = np.zeros(feed.mod_p.shape)
        self._mflat = np.zeros(feed.mod_p.shape[1])
        Hb = feed.proc.shape[1]
        self._proc = np.full((2, Hb), np.nan)
        self.proc_t = self._proc[0]
        self.proc_us = self._proc[1]
        self.n_loud = 0
        self.n_proc = 0
        self.values: dict = {}
        self.seq = -1


class MonitorFeed:
    """Subscriber (``runtime.subscribe(feed)``) that keeps what a live display needs.

    fs, block     : the runtime's sample rate (Hz) and processing block (frames).
    loudness      : the loudness model running as chain ``'loudness'`` (or None).
    modulation    : the :class:`ModulationPower` running as chain ``'modulation'`` (or None).
    channels      : input channels; with 2, per-ear loudness is kept (``ears``).
    spl_ref       : dB SPL of a digital RMS of 1.0 (for ``spl_db`` / ``peak_db``).
    history_s     : seconds of loudness / processing-time history.
    mod_window_s  : sliding window of the modulation power average, s.
    spl_window_s  : averaging time of ``spl_db`` (0.125 s, the "fast" time constant of
                    IEC 61672-1 used as a rectangular window), s.
    peak_window_s : window of ``peak_db`` (max |x|), s.
    """

    def __init__(self, fs: float, block: int, loudness=None, modulation=None, *,
                 channels: int = 1, spl_ref: float = 100.0, history_s: float = 10.0,
                 mod_window_s: float = 1.0,
                 spl_window_s: float = 0.125, peak_window_s: float = 1.0):
        self.fs, self.block, self.spl_ref = float(fs), int(block), float(spl_ref)
        self.loudness, self.modulation = loudness, modulation
        bps = self.fs / self.block
        if loudness is not None:
            hop_s = loudness.coeffs.spec.hop / loudness.fs
            K = int(np.asarray(loudness.fc).size)
        else:
            hop_s, K = 1e-3, 1
        H = max(2, int(math.ceil(history_s / hop_s)))
        # rows: t, stl, ltl, stl_left, stl_right, ltl_left, ltl_right
        self.loud = np.full((7, H), np.nan)
        self.w_loud = 0
        self.exc = np.full((2, K), np.nan)
        self.spec = np.full((2, K), np.nan)
        self.ears = int(channels) == 2
        Hb = max(2, int(math.ceil(history_s * bps)))
        self.proc = np.full((2, Hb), np.nan)
        self.w_proc = 0
        nl = max(1, int(math.ceil(peak_window_s * bps)))
        self.n_spl = max(1, min(nl, int(math.ceil(spl_window_s * bps))))
        self.lev = np.zeros((3, nl))      # rows: sum of squares, frames, peak
        self.w_lev = 0
        if modulation is not None:
            nm = max(1, int(math.ceil(mod_window_s * bps)))
            self.mod_p = np.zeros((nm, modulation.n_filters))
            self.mod_T = np.zeros(nm)
            C, M = modulation.mfc_padded.shape
            self.mod_shape = (C, M)
            self.mod_index = (modulation.filter_channel * M
                              + modulation.filter_slot).astype(np.intp)
        else:
            self.mod_p = np.zeros((1, 1))
            self.mod_T = np.zeros(1)
            self.mod_shape = (1, 1)
            self.mod_index = np.zeros(1, np.intp)
        self.w_mod = 0
        self.seq = -1
        self.t = 0.0
        self.gaps = 0
        self.last = dict(stl=math.nan, ltl=math.nan, stl_left=math.nan, stl_right=math.nan,
                         ltl_left=math.nan, ltl_right=math.nan)
        self._clear_at: int | None = None
        self._model_n = 0
        self.lock = threading.Lock()

    # ------------------------------------------------------------ processing thread
    def clear(self, from_seq: int | None = None) -> None:
        """Forget everything shown.  With ``from_seq`` (e.g. what :meth:`Runtime.reset`
        returns), the processing thread clears just before it writes block ``from_seq``, so
        the history starts exactly at the reset, whichever thread calls this."""
        if from_seq is not None:
            self._clear_at = int(from_seq)
            return
        with self.lock:
            self._clear()

    def _clear(self) -> None:
        self.loud[:] = np.nan
        self.w_loud = 0
        self.exc[:] = np.nan
        self.spec[:] = np.nan
        self.mod_p[:] = 0.0
        self.mod_T[:] = 0.0
        self.w_mod = 0
        for k in self.last:
            self.last[k] = math.nan

    def __call__(self, r) -> None:
        out = r.outputs
        if self._clear_at is not None and r.seq >= self._clear_at:
            # first block after a reset of the chains: the models' clocks restart at 0
            with self.lock:
                self._clear_at = None
                self._clear()
            self._model_n = 0
        # the loudness model's frame times count the samples it has seen since its start or
        # reset; skipped input and resets make that differ from the stream's clock
        n0 = self._model_n
        self._model_n += r.frames
        lo = out.get("loudness")
        rows = None
        if lo is not None and lo["stl"].shape[-1]:
            F = lo["stl"].shape[-1]
            stl = np.asarray(lo["stl"], dtype=np.float64).reshape(-1, F)
            ltl = np.asarray(lo["ltl"], dtype=np.float64).reshape(-1, F)
            rows = np.full((7, F), np.nan)
            rows[0] = lo["frame_time"] + (r.start - n0) / self.fs      # stream seconds
            rows[1] = stl.sum(axis=0)
            rows[2] = ltl.sum(axis=0)
            if "stl_left" in lo:
                rows[3] = np.asarray(lo["stl_left"]).reshape(-1, F)[0]
                rows[4] = np.asarray(lo["stl_right"]).reshape(-1, F)[0]
                rows[5] = np.asarray(lo["ltl_left"]).reshape(-1, F)[0]
                rows[6] = np.asarray(lo["ltl_right"]).reshape(-1, F)[0]
            elif stl.shape[0] == 2:                      # one monaural model per channel
                rows[3:5] = stl
                rows[5:7] = ltl
            exc = np.asarray(lo["excitation"])[..., -1].reshape(-1, self.exc.shape[1])
            spec = np.asarray(lo["specific_loudness"])[..., -1].reshape(-1, self.spec.shape[1])
        lev = out.get("level")
        mod = out.get("modulation")
        with self.lock:
            if rows is not None:
                self.w_loud = _put(self.loud, self.w_loud, rows)
                self.exc[:] = exc[:2]
                self.spec[:] = spec[:2]
                self.last.update(stl=rows[1, -1], ltl=rows[2, -1], stl_left=rows[3, -1],
                                 stl_right=rows[4, -1], ltl_left=rows[5, -1],
                                 ltl_right=rows[6, -1])
            if lev is not None:
                k = self.w_lev % self.lev.shape[1]
                self.lev[0, k] = lev[0] * r.frames
                self.lev[1, k] = r.frames
                self.lev[2, k] = lev[1]
                self.w_lev += 1
            if mod is not None:
                k = self.w_mod % self.mod_p.shape[0]
                self.mod_p[k] = mod[0]
                self.mod_T[k] = mod[1]
                self.w_mod += 1
            t_end = (r.start + r.frames) / self.fs
            k = self.w_proc % self.proc.shape[1]
            self.proc[0, k] = t_end
            self.proc[1, k] = 1e6 * r.proc_s
            self.w_proc += 1
            self.seq = r.seq
            self.t = t_end
            self.gaps += bool(r.gap)

    # ------------------------------------------------------------------ GUI thread
    def view(self) -> FeedView:
        """A new :class:`FeedView` sized for this feed (allocate once, read many times)."""
        return FeedView(self)

    def read(self, v: FeedView) -> FeedView:
        """Copy the newest state into ``v`` (no allocation beyond small scalars); the
        lock is held only for the copies."""
        with self.lock:
            v.n_loud = _unroll(self.loud, self.w_loud, v._loud)
            v.exc[:] = self.exc
            v.spec[:] = self.spec
            v._mp[:] = self.mod_p
            mT = float(self.mod_T.sum())
            v.n_proc = _unroll(self.proc, self.w_proc, v._proc)
            n = min(self.w_lev, self.lev.shape[1])
            if n:
                idx = (self.w_lev - 1 - np.arange(min(n, self.n_spl))) % self.lev.shape[1]
                ss, fr = self.lev[0, idx].sum(), self.lev[1, idx].sum()
                pk = self.lev[2, :n].max()
            else:
                ss = fr = pk = 0.0
            v.seq = self.seq
            vals = dict(self.last)
            vals.update(seq=self.seq, t=self.t, gaps=self.gaps, ears=self.ears)
        L = v._loud
        v.t[:] = L[0]
        v.stl[:] = L[1]
        v.ltl[:] = L[2]
        v.stl_ears[:] = L[3:5]
        v.ltl_ears[:] = L[5:7]
        if self.modulation is not None and mT > 0:
            np.sum(v._mp, axis=0, out=v._mflat)
            v._mflat /= mT
            np.maximum(v._mflat, 1e-30, out=v._mflat)
            np.log10(v._mflat, out=v._mflat)
            v._mflat *= 10.0
            v.mod_db.flat[self.mod_index] = v._mflat
        else:
            v.mod_db.fill(np.nan)
        vals["mod_seconds"] = mT / self.fs
        vals["spl_db"] = 10 * math.log10(ss / fr) + self.spl_ref if fr and ss > 0 else math.nan
        vals["peak_db"] = 20 * math.log10(pk) + self.spl_ref if pk > 0 else math.nan
        v.values = vals
        return v
