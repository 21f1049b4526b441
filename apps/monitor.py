"""``rtamt monitor``: live pyqtgraph monitor of excitation, loudness and modulation spectra.

Panels (all fed by the real-time runtime; the GUI thread never runs a model):

1. **Excitation pattern**: excitation level (dB) of the newest 1 ms frame against
   frequency on the ERB-number (Cam) axis, ticks in Hz, with the excitation at absolute
   threshold (ANSI S3.4-2007 E_THRQ) for reference and the specific loudness (sone/Cam,
   right axis).  Left and right ear for a stereo input.
2. **Loudness**: the last ``--history`` seconds of short- and long-term loudness (sone),
   per-ear curves for a stereo input; STL / LTL, loudness level (phon) and SPL are
   printed large above the plots.
3. **Modulation spectrum**: auditory channel x modulation filter heat map of the
   Dau1997 chain's modulation-filterbank output power (dB re 1 model unit², averaged
   over ``--mod-window`` seconds), colour bar, axes labelled in Hz.
4. **Health**: processing time of every block against the block period (budget),
   queue depth, dropped / skipped frames, PortAudio status flags, real-time factor,
   GUI frame rate.

Controls: source (demo / WAV file / input device), loudness model, freeze (the display
stops, the stream goes on), reset states, calibration (``spl_ref``) display.

The processing thread feeds a :class:`rtamt_apps.feed.MonitorFeed`; a Qt timer
(``--fps``, 30 by default) copies it into preallocated arrays and updates existing items
(``setData`` on curves, ``setImage`` on one ``ImageItem`` with a lookup table): no item is
created per frame.

Headless: ``rtamt monitor --input demo --seconds 3 --screenshot out.png`` renders offscreen
(``QT_QPA_PLATFORM=offscreen`` is chosen when there is no display), saves a PNG of the
window after ``--seconds`` of audio and exits.  Without ``--screenshot``, no display
(``DISPLAY`` / ``WAYLAND_DISPLAY``) and no ``QT_QPA_PLATFORM`` the monitor refuses to
start (exit 2) rather than render a window nobody sees.  Qt and pyqtgraph come with the
``rtamt[monitor]`` extra; without it the command says so in one line (exit 1).
``--json`` prints a final report (GUI frame rate, drops, processing time) as one JSON
object.
"""
from __future__ import annotations

import html
import json
import math
import os
import sys
import time
from dataclasses import dataclass, replace

import numpy as np

from rtamt.io.calibration import CalibrationError, resolve_spl_ref

from .args import (
    FPS_LIMITS,
    FS_LIMITS,
    HISTORY_LIMITS,
    UsageError,
    add_block_arguments,
    float_range,
    int_range,
    positive_float,
    window_size,
)
from .inputs import EXIT_SOURCE_FAULT, add_calibration_arguments, add_source_arguments
from .optional import require_qt

LOUDNESS_MODELS = ("moore2016", "glasberg2002")
MODULATION_MODELS = ("dau1997", "king2019")


@dataclass(frozen=True)
class MonitorSettings:
    """What the monitor runs (the command-line options)."""

    input: str | None = "demo"
    hostapi: str | None = None
    model: str = "moore2016"
    modulation: bool = True
    modulation_model: str = "dau1997"
    fs: float | None = None
    channels: int | None = None
    block: int = 512
    blocksize: int = 256
    spl_ref: float = 100.0
    spl_source: str = "default"
    field: str = "free"
    fps: float = 30.0
    history_s: float = 10.0
    mod_window_s: float = 1.0
    seconds: float | None = None
    loop: bool = False
    max_backlog_s: float = 0.25
    force: bool = False
    source_timeout: float = 1.0
    reconnect: bool = False


def add_arguments(p):
    p.add_argument("--input", default=None,
                   help="'demo', a WAV file, 'default', or an input device (name substring or "
                        "index); default: the default input device, or demo if there is none")
    p.add_argument("--hostapi", default=None, help="host API of the device (e.g. JACK, ALSA)")
    p.add_argument("--model", default="moore2016", choices=LOUDNESS_MODELS,
                   help="loudness model (panels 1 and 2)")
    p.add_argument("--modulation-model", default="dau1997", choices=MODULATION_MODELS,
                   help="chain whose modulation filterbank feeds the modulation panel")
    p.add_argument("--no-modulation", action="store_true",
                   help="do not run a modulation chain (no modulation panel)")
    p.add_argument("--fs", type=float_range(*FS_LIMITS), default=None,
                   help="sample rate for demo / device (default 32000 demo, device default)")
    p.add_argument("--channels", type=int_range(1, 2), default=None,
                   help="device channels (1 or 2)")
    add_block_arguments(p, 512, 256)
    p.add_argument("--seconds", type=positive_float(), default=None,
                   help="stop after this many seconds of audio and exit (default: run until "
                        "the window is closed; 3 with --screenshot)")
    p.add_argument("--loop", action="store_true", help="WAV file: repeat it")
    p.add_argument("--max-backlog", type=positive_float(1.9), default=0.25,
                   help="seconds of input the processing may fall behind before the oldest is "
                        "skipped (at most 1.9: the input ring holds 2 s)")
    add_calibration_arguments(p)
    add_source_arguments(p)
    p.add_argument("--fps", type=float_range(*FPS_LIMITS, lo_open=True), default=30.0,
                   help=f"GUI refresh rate (at most {FPS_LIMITS[1]:g})")
    p.add_argument("--history", type=float_range(*HISTORY_LIMITS, lo_open=True), default=10.0,
                   help=f"seconds of loudness history (at most {HISTORY_LIMITS[1]:g})")
    p.add_argument("--mod-window", type=positive_float(10.0), default=1.0,
                   help="seconds averaged in the modulation spectrum (at most 10)")
    p.add_argument("--size", type=window_size, default="1280x800",
                   help="window size WxH (pixels)")
    p.add_argument("--screenshot", default=None, help="save a PNG of the window at the end")
    p.add_argument("--json", action="store_true", help="print a final report as JSON")


def _qt_platform_for(headless_wanted: bool) -> None:
    """Choose Qt's offscreen platform when there is no display (or a screenshot run)."""
    if os.environ.get("QT_QPA_PLATFORM"):
        return
    if headless_wanted or not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"


def build_pipeline(s: MonitorSettings):
    """Input, chains, runtime and feed for settings ``s`` (nothing started).

    Returns ``(live, feed, loudness_model, modulation_chain)``.  Raises ``ValueError``,
    ``OSError``, ``LookupError`` or ``RuntimeError`` with a message for the user."""
    from rtamt.models import Dau1997, Glasberg2002, King2019, Moore2016
    from rtamt.runtime import Runtime

    from .feed import ModulationPower, MonitorFeed, SoundLevel
    from .inputs import Live, open_input
    from .warm import warm_chains

    inp = open_input(s.input, hostapi=s.hostapi, fs=s.fs, channels=s.channels,
                     blocksize=s.blocksize, realtime=True, seconds=s.seconds,
                     spl_ref=s.spl_ref, loop=s.loop, block=s.block, force=s.force)
    fs, ch = inp.fs, inp.channels
    if s.model == "moore2016":
        lm = Moore2016(fs, spl_ref=s.spl_ref, field=s.field)
    elif s.model == "glasberg2002":
        lm = Glasberg2002(fs, spl_ref=s.spl_ref, field=s.field,
                          presentation="monaural" if ch == 2 else "diotic")
    else:
        raise ValueError(f"unknown loudness model {s.model!r}; choose from {LOUDNESS_MODELS}")
    lm.phon(1.0)                       # tabulate phon before streaming
    chains = {"loudness": lm, "level": SoundLevel()}
    mod = None
    if s.modulation:
        if s.modulation_model not in MODULATION_MODELS:
            raise ValueError(f"unknown modulation model {s.modulation_model!r}; choose from "
                             f"{MODULATION_MODELS}")
        cls = Dau1997 if s.modulation_model == "dau1997" else King2019
        mod = ModulationPower(cls(fs, fhigh=min(8000.0, 0.45 * fs), spl_ref=s.spl_ref))
        chains["modulation"] = mod
    warm_chains(chains, np.float64, ch)     # kernels loaded (or compiled) before streaming
    rt = Runtime(chains, fs, channels=ch, block=s.block, policy="drop-oldest",
                 max_backlog_s=s.max_backlog_s, source_timeout=s.source_timeout)
    feed = MonitorFeed(fs, s.block, lm, mod, channels=ch, spl_ref=s.spl_ref,
                       history_s=s.history_s, mod_window_s=s.mod_window_s)
    rt.subscribe(feed)
    return Live(inp, rt, blocksize=s.blocksize, reconnect=s.reconnect), feed, lm, mod


def _fmt(v, fmt, unit=""):
    return "–" if v is None or not math.isfinite(v) else format(v, fmt) + unit


# Frequencies labelled on the ERB-number and modulation axes (Hz).
_HZ_TICKS = (50, 100, 200, 500, 1000, 2000, 5000, 10000, 15000)


def _hz_label(f: float) -> str:
    return f"{f / 1000:g}k" if f >= 1000 else f"{f:g}"


def _qt_message_filter(mode, context, message):
    # the offscreen platform says this on every label resize; it means nothing here
    if "propagateSizeHints" not in message:
        sys.stderr.write(message + "\n")


def _dash_pen(color, width):
    import pyqtgraph as pg
    from pyqtgraph.Qt import QtCore

    return pg.mkPen(color, width=width, style=QtCore.Qt.PenStyle.DashLine)


def _history_plot(gl, row, col, title, ylabel, history_s):
    """A fixed plot of the last ``history_s`` seconds (time axis -history_s .. 0)."""
    p = gl.addPlot(row=row, col=col, title=title)
    p.setLabel("bottom", "time (s)")
    p.setLabel("left", ylabel)
    p.setXRange(-history_s, 0, padding=0)
    p.setMouseEnabled(x=False, y=False)
    return p


# ------------------------------------------------------------------------------- panels
# One class per panel: ``__init__`` builds its items into the GraphicsLayout, ``configure``
# sizes them for a new pipeline, ``update`` sets the newest data (existing items only).

class ExcitationPanel:
    """Panel 1: excitation pattern (dB, per ear) on the ERB-number axis with the threshold
    in quiet, and specific loudness (sone/Cam) on a second y axis (own view box)."""

    def __init__(self, gl):
        import pyqtgraph as pg

        pe = self.plot = gl.addPlot(row=0, col=0, colspan=2, title="Excitation pattern")
        pe.setLabel("bottom", "frequency (Hz, ERB-number scale)")
        pe.setLabel("left", "excitation (dB)")
        pe.setYRange(-10, 110, padding=0)
        pe.setMouseEnabled(x=False, y=False)
        legend = pe.addLegend(offset=(10, 5))      # top left: above the threshold curve
        self.c_thr = pe.plot(pen=_dash_pen((150, 150, 150), 1), name="threshold (E_THRQ)")
        self.c_exc = [pe.plot(pen=pg.mkPen((255, 210, 0), width=2), name="excitation, left / mono"),
                      pe.plot(pen=pg.mkPen((0, 200, 255), width=2), name="excitation, right")]
        pe.showAxis("right")
        pe.setLabel("right", "specific loudness (sone/Cam)")
        pe.getAxis("right").enableAutoSIPrefix(False)
        self.vb_spec = pg.ViewBox()
        pe.scene().addItem(self.vb_spec)
        pe.getAxis("right").linkToView(self.vb_spec)
        self.vb_spec.setXLink(pe)
        self.vb_spec.setMouseEnabled(x=False, y=False)
        self.vb_spec.enableAutoRange(axis="y")       # once: it stays on (no mouse)
        self.c_spec = [pg.PlotDataItem(pen=pg.mkPen((255, 120, 0), width=1)),
                       pg.PlotDataItem(pen=pg.mkPen((0, 120, 255), width=1))]
        # the specific-loudness curves live in their own view box (right axis): the
        # legend names them by hand
        for c, ear in zip(self.c_spec, ("left / mono", "right")):
            self.vb_spec.addItem(c)
            legend.addItem(c, f"specific loudness, {ear} (right axis)")
        pe.vb.sigResized.connect(self._sync_spec_view)
        self.cam = None

    def _sync_spec_view(self):
        pe = self.plot
        self.vb_spec.setGeometry(pe.vb.sceneBoundingRect())
        self.vb_spec.linkedViewChanged(pe.vb, self.vb_spec.XAxis)

    def configure(self, fc):
        """Channel centre frequencies ``fc`` (Hz) of the loudness model."""
        from rtamt.loudness.ansi import hz_to_cam, threshold_excitation_db

        fc = np.asarray(fc, dtype=np.float64)
        self.cam = hz_to_cam(fc)
        self.c_thr.setData(self.cam, threshold_excitation_db(fc))
        self.plot.setXRange(self.cam[0], self.cam[-1], padding=0.01)
        self.plot.getAxis("bottom").setTicks([[(float(hz_to_cam(f)), _hz_label(f))
                                               for f in _HZ_TICKS if fc[0] <= f <= fc[-1]]])

    def update(self, v, two: bool):
        self.c_exc[0].setData(self.cam, v.exc[0], skipFiniteCheck=True)
        self.c_spec[0].setData(self.cam, v.spec[0], skipFiniteCheck=True)
        self.c_exc[1].setVisible(two)
        self.c_spec[1].setVisible(two)
        if two:
            self.c_exc[1].setData(self.cam, v.exc[1], skipFiniteCheck=True)
            self.c_spec[1].setData(self.cam, v.spec[1], skipFiniteCheck=True)


class LoudnessPanel:
    """Panel 2: the last ``history_s`` seconds of STL and LTL (sone), per-ear STL for a
    stereo input."""

    def __init__(self, gl, history_s: float):
        import pyqtgraph as pg
        from pyqtgraph.Qt import QtCore

        pl = self.plot = _history_plot(gl, 0, 2, "Loudness", "loudness (sone)", history_s)
        pl.enableAutoRange(axis="y")
        pl.setAutoVisible(y=True)
        pl.setDownsampling(auto=True, mode="peak")
        pl.setClipToView(True)
        pl.addLegend(offset=(10, 10))
        self.c_stl = pl.plot(pen=pg.mkPen((255, 255, 255), width=1), name="STL")
        self.c_ltl = pl.plot(pen=pg.mkPen((255, 80, 80), width=2), name="LTL")
        dot = QtCore.Qt.PenStyle.DotLine
        self.c_ears = [pl.plot(pen=pg.mkPen((255, 210, 0), width=1, style=dot), name="STL left"),
                       pl.plot(pen=pg.mkPen((0, 200, 255), width=1, style=dot),
                               name="STL right")]
        self._x = None

    def configure(self, view):
        self._x = np.zeros_like(view.t)

    def update(self, v, vals):
        n = v.n_loud
        x = self._x
        np.subtract(v.t, vals["t"], out=x)
        self.c_stl.setData(x[-n:], v.stl[-n:], skipFiniteCheck=True)
        self.c_ltl.setData(x[-n:], v.ltl[-n:], skipFiniteCheck=True)
        for i, c in enumerate(self.c_ears):
            if vals["ears"]:
                c.setData(x[-n:], v.stl_ears[i, -n:], skipFiniteCheck=True)
            c.setVisible(bool(vals["ears"]))


class ModulationPanel:
    """Panel 3: auditory channel x modulation filter power (dB) as an image with a colour
    bar whose 40 dB range follows the maximum (re-levelled at most once a second)."""

    def __init__(self, gl):
        import pyqtgraph as pg

        pm = self.plot = gl.addPlot(row=1, col=0, title="Modulation spectrum (Dau1997)")
        pm.setLabel("bottom", "modulation frequency (Hz)")
        pm.setLabel("left", "auditory channel (Hz)")
        pm.setMouseEnabled(x=False, y=False)
        self.img = pg.ImageItem(axisOrder="row-major")
        pm.addItem(self.img)
        self.cbar = pg.ColorBarItem(values=(0.0, 40.0), colorMap=pg.colormap.get("viridis"),
                                    label="power (dB)", interactive=False)
        self.cbar.setImageItem(self.img)
        gl.addItem(self.cbar, row=1, col=1)
        self._levels_t = 0.0

    def configure(self, view, mod, model_name: str):
        """``mod``: the :class:`~rtamt_apps.feed.ModulationPower` chain, or None (off)."""
        from pyqtgraph.Qt import QtCore

        pm = self.plot
        pm.setTitle(f"Modulation spectrum ({model_name})" if mod is not None
                    else "Modulation spectrum (off)")
        if mod is None:
            return
        C, M = view.mod_db.shape
        self.img.setImage(view.mod_db, autoLevels=False)
        self.img.setRect(QtCore.QRectF(0, 0, M, C))
        mfc = np.nanmax(mod.mfc_padded, axis=0)
        pm.getAxis("bottom").setTicks([[(j + 0.5, f"{m:.3g}") for j, m in enumerate(mfc)]])
        step = max(1, C // 8)
        pm.getAxis("left").setTicks([[(c + 0.5, _hz_label(round(mod.fc[c], -1)))
                                      for c in range(0, C, step)]])
        pm.setXRange(0, M, padding=0)
        pm.setYRange(0, C, padding=0)

    def update(self, v):
        now = time.perf_counter()
        if now - self._levels_t > 1.0:
            hi = float(np.nanmax(v.mod_db))
            if math.isfinite(hi):
                hi = 5.0 * math.ceil(hi / 5.0)
                self.cbar.setLevels((hi - 40.0, hi))
            self._levels_t = now
        self.img.setImage(v.mod_db, autoLevels=False)


class HealthPanel:
    """Panel 4: processing time of every block (µs) against the block period, and the
    runtime's accounting in the title."""

    def __init__(self, gl, history_s: float):
        import pyqtgraph as pg

        ph = self.plot = _history_plot(gl, 1, 2, "Health", "block processing time (µs)",
                                       history_s)
        self.c_proc = ph.plot(pen=pg.mkPen((120, 255, 120), width=1), name="processing")
        self.budget_line = pg.InfiniteLine(angle=0, pen=_dash_pen((255, 60, 60), 2))
        ph.addItem(self.budget_line)
        self._x = None

    def configure(self, view, budget_us: float):
        self._x = np.zeros_like(view.proc_t)
        self.budget_line.setValue(budget_us)
        self.plot.setYRange(0, 1.25 * budget_us, padding=0)

    def update(self, v, t_now: float):
        n = v.n_proc
        if n:
            x = self._x
            np.subtract(v.proc_t, t_now, out=x)
            self.c_proc.setData(x[-n:], v.proc_us[-n:], skipFiniteCheck=True)

    def set_text(self, st, fps: float):
        flags = ",".join(f"{k}={v}" for k, v in st.status.items() if v) or "none"
        self.plot.setTitle(
            f"Health: queue {st.queue_frames} fr · dropped {st.dropped_frames} · skipped "
            f"{st.skipped_frames} · status {flags}<br>rtf {st.rtf:.3f} · proc p99 "
            f"{st.proc_p99_us / 1e3:.2f} ms of {st.budget_us / 1e3:.1f} ms · "
            f"GUI {fps:.0f} fps"
            + (f"<br><span style='color:#ff5050'>INPUT LOST: {html.escape(st.source_error)}"
               "</span>" if st.source_error else
               f" · input stalls {st.source_stalls}" if st.source_stalls else ""),
            size="9pt")


class Readouts:
    """The large numbers above the plots: STL, LTL, phon, SPL / peak, per-ear values."""

    KEYS = ("stl", "ltl", "phon", "spl", "ears")

    def __init__(self, layout):
        from pyqtgraph.Qt import QtGui, QtWidgets

        big = QtGui.QFont()
        big.setPointSize(18)
        big.setBold(True)
        self.labels = {}
        for key in self.KEYS:
            lab = QtWidgets.QLabel("–")
            lab.setFont(big if key != "ears" else QtGui.QFont())
            lab.setObjectName(key)
            layout.addWidget(lab, 0 if key == "ears" else 1)
            self.labels[key] = lab

    def clear(self):
        for lab in self.labels.values():
            lab.setText("–")

    def update(self, vals, model) -> dict:
        """Show the newest values; returns what is shown (without ``seq``)."""
        stl, ltl = vals["stl"], vals["ltl"]
        phon = float(model.phon(ltl)) if math.isfinite(ltl) else math.nan
        stl_phon = float(model.phon(stl)) if math.isfinite(stl) else math.nan
        lab = self.labels
        lab["stl"].setText(f"STL {_fmt(stl, '.2f', ' sone')}")
        lab["ltl"].setText(f"LTL {_fmt(ltl, '.2f', ' sone')}")
        lab["phon"].setText(f"{_fmt(phon, '.1f', ' phon')} (STL {_fmt(stl_phon, '.1f', ' phon')})")
        lab["spl"].setText(f"SPL {_fmt(vals['spl_db'], '.1f', ' dB')}  peak "
                           f"{_fmt(vals['peak_db'], '.1f', ' dB')}")
        if vals["ears"]:
            lab["ears"].setText(
                f"STL L {_fmt(vals['stl_left'], '.2f', ' sone')} / R "
                f"{_fmt(vals['stl_right'], '.2f', ' sone')}\nLTL L "
                f"{_fmt(vals['ltl_left'], '.2f', ' sone')} / R "
                f"{_fmt(vals['ltl_right'], '.2f', ' sone')}")
        else:
            lab["ears"].setText("")
        return dict(t=vals["t"], stl=stl, ltl=ltl, phon=phon, stl_phon=stl_phon,
                    spl_db=vals["spl_db"], peak_db=vals["peak_db"],
                    mod_seconds=vals["mod_seconds"])


def _frame_report(paint_times, t_start, refresh_s) -> dict:
    """GUI figures of a run: frames, mean and worst-second frame rate, refresh times."""
    pt = np.array(paint_times)
    t_run = (pt[-1] - t_start) if pt.size else 0.0
    per_s = []
    if pt.size and t_run >= 1.0:
        edges = np.arange(t_start, pt[-1] + 1e-9, 1.0)
        per_s = np.histogram(pt, bins=edges)[0][1:]     # whole seconds, first skipped
    rs = np.array(refresh_s) * 1e3
    return dict(
        seconds=round(t_run, 3), frames=int(pt.size),
        fps_mean=round(pt.size / t_run, 2) if t_run > 0 else 0.0,
        fps_min_1s=int(min(per_s)) if len(per_s) else None,
        refresh_p50_ms=round(float(np.percentile(rs, 50)), 3) if rs.size else None,
        refresh_p99_ms=round(float(np.percentile(rs, 99)), 3) if rs.size else None)


# ------------------------------------------------------------------------------- window
class _MonitorControl:
    """What the monitor window does apart from building its widgets: the pipeline (build,
    start, switch, stop), the timer's refresh and the reports.  Mixed into the Qt window
    class by :func:`make_window_class`, which provides the widgets and panels it uses."""

    # --------------------------------------------------------------- pipeline
    def _configure_for_pipeline(self):
        """(Re)size display arrays and static items for the current pipeline."""
        s = self.settings
        self.view = self.feed.view()
        self.excitation.configure(self.model.fc)
        self.loudness.configure(self.view)
        self.budget_us = 1e6 * s.block / self.feed.fs
        self.health.configure(self.view, self.budget_us)
        self.modulation.configure(self.view, self.mod, s.modulation_model)
        self.readouts.clear()
        self.cal_label.setText(f"Calibration: digital RMS 1.0 = {s.spl_ref:.2f} dB SPL · "
                               f"{s.spl_source}")
        self._fill_source_box()

    def _fill_source_box(self):
        box = self.source_box
        box.blockSignals(True)
        box.clear()
        box.addItem("demo", "demo")
        inp = self.live.input
        if inp.kind == "file":
            box.addItem(os.path.basename(inp.label), inp.label)
        try:
            from rtamt.runtime.stream import list_input_devices

            for d in list_input_devices():
                box.addItem(f"{d['name']} [{d['hostapi']}]", str(d["index"]))
        except Exception:
            pass
        box.addItem("Open WAV file…", "__open__")
        want = "demo" if inp.kind == "demo" else inp.label if inp.kind == "file" \
            else str(inp.device)
        i = box.findData(want)
        box.setCurrentIndex(max(i, 0))
        box.blockSignals(False)
        self.model_box.blockSignals(True)
        self.model_box.setCurrentText(self.settings.model)
        self.model_box.blockSignals(False)

    def _source_chosen(self, i):
        data = self.source_box.itemData(i)
        if data == "__open__":
            from pyqtgraph.Qt import QtWidgets

            path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "WAV file", "",
                                                            "WAV files (*.wav)")
            if not path:
                self._fill_source_box()
                return
            data = path
        self.set_source(data)

    def prepare(self):
        """Build the pipeline for the current settings and size the display for it
        (nothing runs yet)."""
        self.live, self.feed, self.model, self.mod = build_pipeline(self.settings)
        self._finishing = False
        self._configure_for_pipeline()
        self._prepared = True
        return self

    def start(self):
        """Build (unless :meth:`prepare` did) and start the pipeline, start the timer.

        The GUI and the processing thread share the GIL: the switch interval is
        lowered to 1 ms so that a block waits at most about that long for the
        interpreter while the GUI draws (fewer budget misses than the default 5 ms)."""
        if not self._prepared:
            self.prepare()
        self._prepared = False
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
        self.live.start()
        self._t_start = time.perf_counter()
        self.timer.start()
        return self

    def _restart(self, **changes):
        old = self.settings
        self.stop_stream()
        self.settings = replace(old, **changes)
        try:
            self.start()
        except (OSError, ValueError, LookupError, RuntimeError) as e:
            # not a modal dialog: the previous input keeps running, the reason is shown
            self.error = str(e)
            self.statusBar().showMessage(f"could not switch: {e}")
            self.settings = old
            self.start()
        else:
            self.error = None
            self.statusBar().clearMessage()

    def set_source(self, inp: str):
        """Switch input (``'demo'``, a WAV path, or a device index / name)."""
        ch = None if inp in ("demo",) or os.path.isfile(str(inp)) else self.settings.channels
        self._restart(input=inp, fs=None if inp != self.settings.input else self.settings.fs,
                      channels=ch)

    def set_model(self, name: str):
        if name != self.settings.model:
            self._restart(model=name)

    def set_paused(self, on: bool):
        """Freeze the display (the stream and the health panel keep running)."""
        self.paused = bool(on)
        self.pause_btn.setChecked(self.paused)

    def reset_states(self):
        """Reset every chain to its initial state (between two blocks) and clear the
        display history from that block on; returns the block's ``seq``."""
        if self.live is not None:
            seq = self.live.runtime.reset()
            self.feed.clear(from_seq=seq)
            return seq

    def stop_stream(self):
        self.timer.stop()
        if self.live is not None:
            self.live.stop("discard")

    # ---------------------------------------------------------------- refresh
    def refresh(self):
        """Timer slot: copy the feed into the view, update the items."""
        t0 = time.perf_counter()
        if t0 - self._stats_t > 0.2 or self._stats is None:
            self._stats = self.live.runtime.stats()
            self._stats_t = t0
            self._update_health_text()
        v = self.feed.read(self.view)
        vals = v.values
        self.health.update(v, vals["t"])
        if not self.paused and v.seq >= 0:
            self._update_data(v, vals)
        self._refresh_s.append(time.perf_counter() - t0)
        if len(self._refresh_s) > 100000:
            del self._refresh_s[:50000]
        self._dirty = True
        err = self.live.poll()
        if err:                        # the input failed (no --reconnect): end, exit 3
            self.source_failure = self.live.failure()
            self.finish_stream()
        elif self.live.done:
            self.finish_stream()

    def finish_stream(self):
        """End of the stream (finite source done, or ``--seconds`` of a device): stop
        the input, drain the runtime, show the final state, emit ``finished``."""
        if self._finishing:
            return
        self._finishing = True
        self.timer.stop()
        self.live.stop("drain")
        v = self.feed.read(self.view)
        if not self.paused and v.seq >= 0:
            self._update_data(v, v.values)
        self._stats = self.live.runtime.stats()
        self._update_health_text()
        self.finished.emit()

    def _update_data(self, v, vals):
        if v.n_loud:
            self.loudness.update(v, vals)
            self.excitation.update(v, bool(vals["ears"]))
        if self.mod is not None and vals["mod_seconds"] > 0:
            self.modulation.update(v)
        self.shown = dict(seq=v.seq, **self.readouts.update(vals, self.model))

    def _update_health_text(self):
        self.health.set_text(self._stats, self.fps())

    # ---------------------------------------------------------------- reports
    def fps(self, window_s: float = 1.0) -> float:
        """Frames painted per second over the last ``window_s`` seconds."""
        pt = self._paint_times
        if len(pt) < 2:
            return 0.0
        now = time.perf_counter()
        k = len(pt)
        while k > 0 and now - pt[k - 1] <= window_s:
            k -= 1
        n = len(pt) - k
        return n / window_s if n else 0.0

    def report(self) -> dict:
        """Frame-rate and runtime figures for the whole run (JSON-friendly)."""
        st = self._stats or self.live.runtime.stats()
        return dict(
            model=self.settings.model, modulation=self.mod is not None,
            input=self.live.input.label, fs=self.feed.fs, block=self.settings.block,
            **_frame_report(self._paint_times, self._t_start, self._refresh_s),
            blocks=st.blocks, dropped_frames=st.dropped_frames,
            skipped_frames=st.skipped_frames, rejected_blocks=st.rejected_blocks,
            status={k: v for k, v in st.status.items() if v}, rtf=round(st.rtf, 4),
            proc_p99_us=round(st.proc_p99_us, 1), budget_us=round(st.budget_us, 1),
            misses=st.misses,
            shown={k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                   for k, v in self.shown.items()})


def make_window_class():
    """Build the window class (imports Qt only when the monitor is used)."""
    import pyqtgraph as pg
    from pyqtgraph.Qt import QtCore, QtWidgets

    pg.setConfigOptions(antialias=False, useOpenGL=False, background="k", foreground="w")
    QtCore.qInstallMessageHandler(_qt_message_filter)

    class MonitorWindow(_MonitorControl, QtWidgets.QMainWindow):
        """The monitor window; ``start()`` starts the stream, closing the window stops it.

        Attributes used by tests and benchmarks: ``live``, ``feed``, ``view`` (the
        last :class:`~rtamt_apps.feed.FeedView` shown), ``shown`` (the numbers on the
        labels and the ``seq`` of the block they come from), ``panels`` (name -> plot
        item), ``fps()``, ``report()``; the panels' items ``c_exc``, ``c_stl``, ``img``,
        ``c_proc`` and the ``labels``.
        """

        finished = QtCore.Signal()

        def __init__(self, settings: MonitorSettings, parent=None):
            super().__init__(parent)
            self.settings = settings
            self.setWindowTitle("rtamt monitor")
            self.live = self.feed = self.model = self.mod = None
            self.paused = False
            self.shown: dict = {}
            self.error = None
            self._paint_times: list[float] = []
            self._refresh_s: list[float] = []
            self._t_start = None
            self._finishing = False
            self._dirty = False
            self._prepared = False
            self._stats = None
            self._stats_t = 0.0
            self._build_ui()
            self.timer = QtCore.QTimer(self)
            self.timer.setTimerType(QtCore.Qt.TimerType.PreciseTimer)
            self.timer.setInterval(max(1, int(round(1000.0 / settings.fps))))
            self.timer.timeout.connect(self.refresh)

        # -------------------------------------------------------------------- layout
        def _build_ui(self):
            central = QtWidgets.QWidget()
            vbox = QtWidgets.QVBoxLayout(central)
            vbox.setContentsMargins(6, 6, 6, 6)
            vbox.addLayout(self._build_controls())
            row = QtWidgets.QHBoxLayout()
            self.readouts = Readouts(row)
            self.labels = self.readouts.labels
            vbox.addLayout(row)
            self.glw = gl = pg.GraphicsLayoutWidget()
            vbox.addWidget(gl, 1)
            gl.viewport().installEventFilter(self)
            self.setCentralWidget(central)

            hist = self.settings.history_s
            self.excitation = ExcitationPanel(gl)
            self.loudness = LoudnessPanel(gl, hist)
            self.modulation = ModulationPanel(gl)
            self.health = HealthPanel(gl, hist)
            self.panels = {"excitation": self.excitation.plot, "loudness": self.loudness.plot,
                           "modulation": self.modulation.plot, "health": self.health.plot}
            self.c_exc, self.c_stl = self.excitation.c_exc, self.loudness.c_stl
            self.img, self.c_proc = self.modulation.img, self.health.c_proc
            gl.ci.layout.setColumnStretchFactor(0, 3)
            gl.ci.layout.setColumnStretchFactor(2, 3)

        def _build_controls(self):
            """Source and model choosers, freeze, reset, calibration label."""
            ctl = QtWidgets.QHBoxLayout()
            ctl.addWidget(QtWidgets.QLabel("Source"))
            self.source_box = QtWidgets.QComboBox()
            self.source_box.setMinimumWidth(220)
            ctl.addWidget(self.source_box)
            ctl.addWidget(QtWidgets.QLabel("Model"))
            self.model_box = QtWidgets.QComboBox()
            self.model_box.addItems(list(LOUDNESS_MODELS))
            self.model_box.setCurrentText(self.settings.model)
            self.model_box.currentTextChanged.connect(self.set_model)
            self.source_box.currentIndexChanged.connect(self._source_chosen)
            ctl.addWidget(self.model_box)
            self.pause_btn = QtWidgets.QPushButton("Freeze")
            self.pause_btn.setCheckable(True)
            self.pause_btn.toggled.connect(self.set_paused)
            ctl.addWidget(self.pause_btn)
            self.reset_btn = QtWidgets.QPushButton("Reset states")
            self.reset_btn.clicked.connect(self.reset_states)
            ctl.addWidget(self.reset_btn)
            self.cal_label = QtWidgets.QLabel()
            ctl.addWidget(self.cal_label)
            ctl.addStretch(1)
            return ctl

        def closeEvent(self, ev):
            self.stop_stream()
            super().closeEvent(ev)

        def eventFilter(self, obj, ev):
            # a displayed frame = the first paint of the plots after a refresh (one refresh
            # may be painted in several regions; an idle repaint is not a new frame)
            if ev.type() == QtCore.QEvent.Type.Paint and self._dirty:
                self._dirty = False
                self._paint_times.append(time.perf_counter())
                if len(self._paint_times) > 100000:
                    del self._paint_times[:50000]
            return False

        def save_screenshot(self, path) -> bool:
            return self.grab().save(str(path), "PNG")

    return MonitorWindow


_WINDOW_CLASS = None


def window_class():
    """The :class:`MonitorWindow` class (built on first use; needs Qt)."""
    global _WINDOW_CLASS
    if _WINDOW_CLASS is None:
        _WINDOW_CLASS = make_window_class()
    return _WINDOW_CLASS


def settings_from_args(args) -> MonitorSettings:
    spl_ref, spl_src = resolve_spl_ref(args.spl_ref, args.calibration)
    seconds = args.seconds
    if seconds is None and args.screenshot:
        seconds = 3.0
    return MonitorSettings(input=args.input, hostapi=args.hostapi, model=args.model,
                           modulation=not args.no_modulation,
                           modulation_model=args.modulation_model, fs=args.fs,
                           channels=args.channels, block=args.block, blocksize=args.blocksize,
                           spl_ref=spl_ref, spl_source=spl_src, field=args.field, fps=args.fps,
                           history_s=args.history, mod_window_s=args.mod_window,
                           seconds=seconds, loop=args.loop, max_backlog_s=args.max_backlog,
                           force=args.force, source_timeout=args.source_timeout,
                           reconnect=args.reconnect)


def _check_display_and_screenshot(args) -> None:
    """Usage errors found before any work: no display to show the window on (and no
    ``--screenshot`` / ``QT_QPA_PLATFORM`` asking for an offscreen run), or a
    ``--screenshot`` path that cannot be written."""
    if args.screenshot:
        path = os.path.abspath(args.screenshot)
        parent = os.path.dirname(path)
        why = ("is a directory" if os.path.isdir(path) else
               f"no such directory {parent}" if not os.path.isdir(parent) else
               "not writable" if not os.access(path if os.path.exists(path) else parent,
                                               os.W_OK) else None)
        if why:
            raise UsageError(f"argument --screenshot: cannot write {args.screenshot}: {why}")
    elif not (os.environ.get("QT_QPA_PLATFORM") or os.environ.get("DISPLAY")
              or os.environ.get("WAYLAND_DISPLAY")):
        raise UsageError("no display (DISPLAY and WAYLAND_DISPLAY are unset): give "
                         "--screenshot FILE to render offscreen, or set QT_QPA_PLATFORM")


def run(args) -> int:
    require_qt()                       # without the rtamt[monitor] extra: what to install
    _check_display_and_screenshot(args)
    try:
        s = settings_from_args(args)
    except CalibrationError as e:
        print(f"rtamt monitor: {e}", file=sys.stderr)
        return 2
    w, h = args.size
    _qt_platform_for(bool(args.screenshot))
    from pyqtgraph.Qt import QtCore, QtWidgets

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(["rtamt monitor"])
    win = window_class()(s)
    win.resize(w, h)
    try:
        win.start()
    except (OSError, ValueError, LookupError, RuntimeError) as e:
        print(f"rtamt monitor: {e}", file=sys.stderr)
        return 2
    win.show()
    done = {"ok": True}

    def finish():
        if args.screenshot:
            app.processEvents()
            done["ok"] = win.save_screenshot(args.screenshot)
            if not done["ok"]:
                print(f"rtamt monitor: could not write {args.screenshot}", file=sys.stderr)
        report = win.report()
        win.close()
        if args.json:
            print(json.dumps(report), flush=True)
        elif args.screenshot and done["ok"]:
            print(f"rtamt monitor: wrote {args.screenshot} ({report['frames']} frames, "
                  f"{report['fps_mean']} fps, dropped {report['dropped_frames']}, skipped "
                  f"{report['skipped_frames']})", flush=True)
        app.quit()

    win.finished.connect(finish)
    if s.seconds is not None and win.live.input.source is None:
        # a device has no end: stop after --seconds of wall-clock time
        QtCore.QTimer.singleShot(int(1000 * s.seconds), win.finish_stream)
    app.exec()
    win.deleteLater()
    app.processEvents()
    failure = getattr(win, "source_failure", None) or win.live.failure()
    if failure:
        print(f"rtamt monitor: {failure}", file=sys.stderr, flush=True)
        return EXIT_SOURCE_FAULT
    return 0 if done["ok"] else 1
