"""The live monitor: its data feed (no Qt) and its window (real Qt, offscreen, pytest-qt).

Feed tests check that what a GUI reads (:class:`rtamt_apps.feed.MonitorFeed`) is exactly
what the runtime produced.  Window tests run the real window on the real-time demo source
(and a WAV file): panels filled within 1 s of the stream start, labels equal to the
runtime's values, controls (freeze, reset, model, source), clean shutdown.  The screenshot
test runs ``rtamt monitor --screenshot`` as a user would and checks pixel statistics per
panel against a screenshot of the same window before any data arrived.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from scipy.io import wavfile

from rtamt.models import Dau1997, Moore2016
from rtamt.runtime import ArraySource, Runtime
from rtamt.signals import demo_signal, rms_for_spl
from rtamt_apps.feed import ModulationPower, MonitorFeed, SoundLevel, _put, _unroll

from _helpers import random_partition

pytestmark = pytest.mark.timeout(300)
FS = 16000.0


# --------------------------------------------------------------------------- feed (no Qt)
def test_ring_put_and_unroll_keep_time_order():
    rng = np.random.default_rng(3)
    N = 37
    ring = np.full((2, N), np.nan)
    w = 0
    ref = []
    out = np.empty((2, N))
    for n in list(rng.integers(1, 20, 30)) + [N, N + 5, 1, 100]:
        vals = np.arange(len(ref), len(ref) + n, dtype=float)
        ref.extend(vals)
        w = _put(ring, w, np.vstack([vals, -vals]))
        k = _unroll(ring, w, out)
        assert k == min(len(ref), N) and w == len(ref)
        np.testing.assert_array_equal(out[0, N - k:], ref[-k:])
        np.testing.assert_array_equal(out[1, N - k:], -np.asarray(ref[-k:]))
        assert np.isnan(out[:, :N - k]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_modulation_power_is_block_size_invariant(dtype):
    """Sum over blocks of ModulationPower's p = sum of squares of one call's Dau1997 output,
    for blocks of 1 sample, random partitions, one block; float32 and float64."""
    x = demo_signal(FS, 1.0)[4000:12600].astype(dtype)   # tone end + AM onset
    ref, T_ref = ModulationPower(Dau1997(FS, spl_ref=94.0))(x)
    assert T_ref == x.size and ref.dtype == np.float64 and (ref > 0).all()
    for sizes in ([1] * 300 + [x.size - 300], random_partition(x.size, seed=5, big=4096), [x.size]):
        mp = ModulationPower(Dau1997(FS, spl_ref=94.0))
        tot = np.zeros(mp.n_filters)
        T = 0
        i = 0
        for n in sizes:
            p, t = mp(x[i:i + n])
            tot += p
            T += t
            i += n
        assert T == x.size
        tol = 1e-12 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(tot, ref, rtol=tol, atol=tol * ref.max())


def test_modulation_power_state_dict_and_reset():
    x = 0.05 * demo_signal(FS, 0.2)
    mp = ModulationPower(Dau1997(FS))
    mp(x[:1000])
    sd = mp.state_dict()
    a = mp(x[1000:])[0]
    mp.load_state_dict(sd)
    np.testing.assert_array_equal(mp(x[1000:])[0], a)
    mp.reset()
    b = mp(x)[0]
    np.testing.assert_allclose(b, ModulationPower(Dau1997(FS))(x)[0], rtol=1e-13)


def _run_fast(chains, x, fs, block, feed_kw, channels):
    """Run ``chains`` over ``x`` (frames, channels) through a Runtime (as fast as possible,
    nothing dropped); returns (feed, list of results)."""
    rt = Runtime(chains, fs, channels=channels, block=block, policy="drop-newest",
                 sample_dtype="float64", history=4)
    feed = MonitorFeed(fs, block, chains.get("loudness"), chains.get("modulation"),
                       channels=channels, **feed_kw)
    results = []
    rt.subscribe(feed)
    rt.subscribe(results.append)
    rt.start()
    src = ArraySource(x, fs, blocksize=[100, 333, 7], realtime=False).start(rt)
    assert src.join(60)
    rt.stop("drain")
    return feed, results


def test_feed_view_equals_the_runtime_results():
    """Stereo Moore2016 + Dau1997 + level: every array a GUI reads equals the runtime's
    per-block outputs (history order, per-ear curves, newest excitation, windowed
    modulation power, SPL over the last blocks, processing times)."""
    fs, block = 32000.0, 512
    n = int(1.3 * fs)
    t = np.arange(n) / fs
    left = rms_for_spl(70) * np.sqrt(2) * np.sin(2 * np.pi * 1000 * t)
    right = (rms_for_spl(60) * np.sqrt(2) * np.sin(2 * np.pi * 2000 * t)
             * (1 + np.sin(2 * np.pi * 8 * t)) / 1.5)
    x = np.stack([left, right], axis=1)
    lm = Moore2016(fs)
    mp = ModulationPower(Dau1997(fs, fhigh=6000.0))
    chains = {"loudness": lm, "modulation": mp, "level": SoundLevel()}
    feed, res = _run_fast(chains, x, fs, block, dict(history_s=0.5, mod_window_s=0.1,
                                                    spl_window_s=0.05, peak_window_s=0.2), 2)
    v = feed.read(feed.view())
    lo = [r.outputs["loudness"] for r in res]
    stl = np.concatenate([o["stl"] for o in lo])
    ltl = np.concatenate([o["ltl"] for o in lo])
    ft = np.concatenate([o["frame_time"] for o in lo])
    H = v.t.size
    assert H == 500 and v.n_loud == H and stl.size > H
    np.testing.assert_array_equal(v.stl, stl[-H:])
    np.testing.assert_array_equal(v.ltl, ltl[-H:])
    np.testing.assert_array_equal(v.t, ft[-H:])
    np.testing.assert_array_equal(v.stl_ears[0], np.concatenate([o["stl_left"] for o in lo])[-H:])
    np.testing.assert_array_equal(v.ltl_ears[1], np.concatenate([o["ltl_right"] for o in lo])[-H:])
    last = [o for o in lo if o["stl"].shape[-1]][-1]
    np.testing.assert_array_equal(v.exc, last["excitation"][..., -1])
    np.testing.assert_array_equal(v.spec, last["specific_loudness"][..., -1])
    assert v.values["ears"] and v.values["stl"] == stl[-1] and v.values["ltl_right"] == \
        last["ltl_right"][-1]
    # modulation power over the last ceil(0.1 s / block) blocks
    W = math.ceil(0.1 * fs / block)
    P = sum(r.outputs["modulation"][0] for r in res[-W:])
    T = sum(r.outputs["modulation"][1] for r in res[-W:])
    C, M = mp.mfc_padded.shape
    want = np.full((C, M), np.nan)
    want[mp.filter_channel, mp.filter_slot] = 10 * np.log10(P / T)
    np.testing.assert_allclose(v.mod_db, want, rtol=1e-12)
    assert np.array_equal(np.isnan(v.mod_db), np.isnan(mp.mfc_padded))
    assert v.values["mod_seconds"] == pytest.approx(T / fs)
    # SPL over the last ceil(0.05 s / block) blocks, peak over the last 0.2 s
    S = math.ceil(0.05 * fs / block)
    ss = sum(r.outputs["level"][0] * r.frames for r in res[-S:])
    fr = sum(r.frames for r in res[-S:])
    assert v.values["spl_db"] == pytest.approx(10 * np.log10(ss / fr) + 100, abs=1e-9)
    pk = max(r.outputs["level"][1] for r in res[-math.ceil(0.2 * fs / block):])
    assert v.values["peak_db"] == pytest.approx(20 * np.log10(pk) + 100, abs=1e-9)
    np.testing.assert_allclose(v.values["peak_db"], 70 + 3.0103, atol=0.01)   # left ear 70 dB sine
    # processing times, in block order
    k = v.n_proc
    np.testing.assert_allclose(v.proc_us[-k:], [1e6 * r.proc_s for r in res[-k:]])
    np.testing.assert_allclose(v.proc_t[-k:], [(r.start + r.frames) / fs for r in res[-k:]])
    assert v.seq == res[-1].seq
    # clear(): nothing shown until new data
    feed.clear()
    v = feed.read(v)
    assert v.n_loud == 0 and np.isnan(v.exc).all() and np.isnan(v.mod_db).all()


# ------------------------------------------------------------------------------ window
qt = pytest.importorskip("pyqtgraph.Qt")


def _threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("rtamt")]


@pytest.fixture
def make_window(qtbot):
    from rtamt_apps.monitor import MonitorSettings, window_class

    made = []

    def make(start=True, size=(1280, 800), **kw):
        kw.setdefault("input", "demo")
        win = window_class()(MonitorSettings(**kw))
        qtbot.addWidget(win)
        win.resize(*size)
        win.show()
        qtbot.waitExposed(win)
        if start:
            win.start()
        made.append(win)
        return win

    yield make
    for w in made:
        w.close()


def _panels_filled(win):
    _, y = win.c_exc[0].getData()
    _, s = win.c_stl.getData()
    _, p = win.c_proc.getData()
    img = win.img.image
    return (y is not None and np.isfinite(y).all() and s is not None and s.size > 0
            and p is not None and p.size > 0 and img is not None and np.isfinite(img).any())


def test_window_panels_receive_data_within_1s(make_window, qtbot):
    win = make_window()
    t0 = time.perf_counter()                  # the stream runs from here (warm-up done)
    qtbot.waitUntil(lambda: _panels_filled(win), timeout=1000)
    dt = time.perf_counter() - t0
    print(f"\nall panels filled {1e3 * dt:.0f} ms after the stream started")
    assert win.labels["ltl"].text().startswith("LTL ") and "sone" in win.labels["ltl"].text()
    assert "dB" in win.labels["spl"].text() and "phon" in win.labels["phon"].text()
    assert "Health" in win.panels["health"].titleLabel.text
    assert "100.00 dB SPL" in win.cal_label.text()


def test_labels_equal_the_runtime_values(make_window, qtbot):
    """The numbers printed are the model's own outputs for the block shown (while
    streaming), and the runtime's latest result at the end of a finite stream."""
    win = make_window(start=False, seconds=1.5)
    win.prepare()
    got = {}

    def grab(r):
        lo = r.outputs["loudness"]
        if lo["ltl"].shape[-1]:
            got[r.seq] = (float(lo["stl"][-1]), float(lo["ltl"][-1]))
    win.live.runtime.subscribe(grab)
    checked = []

    def during():
        s = win.shown
        if s.get("seq", -1) in got:
            stl, ltl = got[s["seq"]]
            assert s["ltl"] == ltl and s["stl"] == stl
            assert win.labels["ltl"].text() == f"LTL {ltl:.2f} sone"
            assert win.labels["stl"].text() == f"STL {stl:.2f} sone"
            assert win.labels["phon"].text().startswith(f"{float(win.model.phon(ltl)):.1f} phon")
            checked.append(s["seq"])
    win.timer.timeout.connect(during)
    with qtbot.waitSignal(win.finished, timeout=10000):
        win.start()
    assert len(set(checked)) >= 10, checked
    last = win.live.runtime.latest()
    assert last.start + last.frames == int(1.5 * win.feed.fs)      # drained to the end
    lo = [r.outputs["loudness"] for r in win.live.runtime.history() if r.outputs["loudness"]
          ["ltl"].shape[-1]][-1]
    assert win.shown["ltl"] == float(lo["ltl"][-1])
    assert win.labels["ltl"].text() == f"LTL {float(lo['ltl'][-1]):.2f} sone"
    assert not win.live.runtime.running and not _threads()


def test_closing_stops_stream_and_threads(make_window, qtbot):
    win = make_window()
    qtbot.waitUntil(lambda: _panels_filled(win), timeout=2000)
    rt = win.live.runtime
    assert rt.running and "rtamt-worker-0" in _threads() and "rtamt-source" in _threads()
    win.close()
    qtbot.waitUntil(lambda: not _threads(), timeout=2000)
    assert not rt.running and not win.timer.isActive()
    st = rt.stats()
    assert st.dropped_frames == 0 and st.rejected_blocks == 0 and st.last_error is None


def test_freeze_reset_and_model_switch(make_window, qtbot):
    win = make_window()
    qtbot.waitUntil(lambda: win.shown.get("t", 0) > 0.7, timeout=3000)
    # freeze: the display keeps its numbers while the stream goes on
    win.pause_btn.click()
    assert win.paused
    seq, text = win.shown["seq"], win.labels["ltl"].text()
    blocks = win.live.runtime.stats().blocks
    qtbot.wait(300)
    assert win.live.runtime.stats().blocks > blocks + 5
    assert win.shown["seq"] == seq and win.labels["ltl"].text() == text
    win.pause_btn.click()
    qtbot.waitUntil(lambda: win.shown["seq"] > seq + 5, timeout=2000)
    # reset: chain states back to initial (LTL starts again from zero), history cleared from
    # the first block processed after the reset on
    ltl_before = win.shown["ltl"]
    assert ltl_before > 1.0
    seq0 = win.reset_states()
    qtbot.waitUntil(lambda: win.shown.get("seq", -1) >= seq0 + 2 and win.view.n_loud > 0,
                    timeout=10000)
    v = win.view
    n = v.n_loud
    t_reset = seq0 * win.settings.block / win.feed.fs          # stream time of block seq0
    assert v.t[-n] > t_reset - 0.064                            # nothing from before the reset
    assert v.ltl[-n] < 0.05 * ltl_before                        # LTL restarted from zero
    # model switch: a new pipeline, the old threads gone
    old = win.live.runtime
    win.model_box.setCurrentText("glasberg2002")
    assert type(win.model).__name__ == "Glasberg2002" and not old.running
    qtbot.waitUntil(lambda: _panels_filled(win) and win.shown.get("t", 0) > 0.2, timeout=10000)
    assert _threads().count("rtamt-worker-0") == 1


def test_wav_input_matches_the_model_offline(make_window, qtbot, tmp_path):
    """A WAV file through the monitor (real-time pace) ends with exactly the loudness the
    model computes offline on the whole file, and the SPL of the tone."""
    fs = 32000
    t = np.arange(int(1.2 * fs)) / fs
    x = np.sqrt(2) * rms_for_spl(60.0, 90.0) * np.sin(2 * np.pi * 1000 * t)
    x16 = np.round(x * 32767).astype(np.int16)
    path = tmp_path / "tone.wav"
    wavfile.write(path, fs, x16)
    # a backlog of up to 1.5 s is worked off rather than skipped (a loaded machine must not
    # turn this exactness check into a load test)
    win = make_window(start=False, input=str(path), spl_ref=90.0, modulation=False,
                      max_backlog_s=1.5)
    with qtbot.waitSignal(win.finished, timeout=10000):
        win.start()
    ref = Moore2016(fs, spl_ref=90.0).process_all(x16 / 32768.0)
    assert win.shown["ltl"] == pytest.approx(float(ref["ltl"][-1]), rel=1e-12)
    assert win.shown["spl_db"] == pytest.approx(60.0, abs=0.05)
    assert win.live.input.kind == "file" and win.mod is None
    assert win.source_box.currentData() == str(path)
    rep = win.report()
    assert rep["dropped_frames"] == 0 and rep["skipped_frames"] == 0


def test_source_switch_and_bad_source(make_window, qtbot, tmp_path):
    fs = 32000
    path = tmp_path / "noise.wav"
    noise = 0.05 * np.random.default_rng(0).standard_normal(fs)
    wavfile.write(path, fs, noise.astype(np.float32))
    win = make_window()
    qtbot.waitUntil(lambda: _panels_filled(win), timeout=2000)
    win.set_source(str(path))
    assert win.live.input.kind == "file" and win.feed.fs == fs and win.error is None
    qtbot.waitUntil(lambda: win.shown.get("t", 0) > 0.1, timeout=3000)
    # a source that does not exist, a rate the loudness models cannot take: a clear message,
    # the previous input keeps running
    win.set_source("no-such-device-or-file.wav")
    assert win.error and "no-such-device-or-file.wav" in win.error
    assert "could not switch" in win.statusBar().currentMessage()
    assert win.live.input.kind == "file" and win.live.runtime.running
    low = tmp_path / "low.wav"
    wavfile.write(low, 16000, np.zeros(1600, np.int16))
    win.set_source(str(low))
    assert "16000 Hz is too low" in win.error
    assert win.live.input.label == str(path) and win.live.runtime.running
    win.set_source("demo")
    assert win.live.input.kind == "demo" and win.error is None
    qtbot.waitUntil(lambda: _panels_filled(win), timeout=2000)


def _panel_regions(win):
    """Pixel rectangles (x0, y0, x1, y1) of each panel in a window grab."""
    out = {}
    for name, item in win.panels.items():
        r = item.sceneBoundingRect()
        poly = win.glw.mapFromScene(r)
        br = poly.boundingRect()
        tl = win.glw.mapTo(win, br.topLeft())
        out[name] = (tl.x(), tl.y(), tl.x() + br.width(), tl.y() + br.height())
    return out


def _qimage_rgb(img):
    from pyqtgraph.Qt import QtGui

    img = img.convertToFormat(QtGui.QImage.Format.Format_RGB888)
    w, h, bpl = img.width(), img.height(), img.bytesPerLine()
    a = np.frombuffer(img.constBits(), np.uint8, count=bpl * h).reshape(h, bpl)
    return a[:, :3 * w].reshape(h, w, 3).copy()


def test_screenshot_command_populates_every_panel(make_window, qtbot, tmp_path):
    """``rtamt monitor --input demo --seconds 3 --screenshot out.png`` (no display: Qt goes
    offscreen by itself) writes a PNG in which every panel differs from the same window
    before any data (static items only) in >= 2 % of its pixels; the heat map has many
    colours; the report says nothing was dropped."""
    from pyqtgraph.Qt import QtGui

    out = tmp_path / "monitor.png"
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "DISPLAY",
                                                              "WAYLAND_DISPLAY")}
    r = subprocess.run([sys.executable, "-m", "rtamt_apps", "monitor", "--input", "demo",
                        "--seconds", "3", "--screenshot", str(out), "--spl-ref", "100"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "dropped 0" in r.stdout, r.stdout
    shot = QtGui.QImage(str(out))
    assert not shot.isNull() and (shot.width(), shot.height()) == (1280, 800)
    a = _qimage_rgb(shot)
    empty = make_window(start=False, spl_ref=100.0)
    empty.prepare()
    qtbot.wait(50)
    b = _qimage_rgb(empty.grab().toImage())
    assert b.shape == a.shape
    regions = _panel_regions(empty)
    assert set(regions) == {"excitation", "loudness", "modulation", "health"}
    for name, (x0, y0, x1, y1) in regions.items():
        x0, y0, x1, y1 = (int(round(v)) for v in (x0, y0, x1, y1))
        pa, pb = a[y0:y1, x0:x1], b[y0:y1, x0:x1]
        changed = np.any(np.abs(pa.astype(int) - pb.astype(int)) > 30, axis=2).mean()
        colours = np.unique(pa.reshape(-1, 3), axis=0).shape[0]
        print(f"{name}: {100 * changed:.1f} % of pixels changed, {colours} colours")
        assert changed >= 0.02, name
        if name == "modulation":
            assert colours >= 40
    # the readouts above the plots were filled too (between the controls and the plots)
    top = int(regions["excitation"][1])
    assert np.any(np.abs(a[:top].astype(int) - b[:top].astype(int)) > 30)


def test_latency_bench_monitor_reports(tmp_path):
    """``python -m latency_bench.monitor`` prints the frame-rate / drop report (numbers
    are recorded in the README, not asserted as timings here)."""
    import json

    r = subprocess.run([sys.executable, "-m", "latency_bench.monitor", "--seconds", "2.5"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    for k in ("fps_mean", "fps_min_1s", "frames", "dropped_frames", "skipped_frames", "rtf",
              "proc_p99_us", "budget_us", "refresh_p99_ms", "cpu", "qt_platform"):
        assert k in rep, k
    assert rep["modulation"] and rep["model"] == "moore2016" and rep["blocks"] >= 150
    assert rep["frames"] > 0 and rep["fps_mean"] > 0 and rep["qt_platform"] == "offscreen"


def _scene_texts(win):
    """Every text drawn in the plots' scene: legend and title labels, axis labels."""
    from pyqtgraph.Qt import QtWidgets

    out = set()
    for it in win.glw.scene().items():
        if isinstance(it, QtWidgets.QGraphicsTextItem):
            out.add(" ".join(it.toPlainText().split()))
        elif isinstance(getattr(it, "text", None), str):
            out.add(it.text)
    return out


def test_every_curve_and_number_is_labelled_with_its_unit(make_window, qtbot):
    """Before: the specific-loudness curves (right axis) had no legend entry, and the
    phon readout showed "(STL 64.9)" without a unit.  Now the legend names them and
    every number above the plots carries its unit."""
    win = make_window()
    qtbot.waitUntil(lambda: _panels_filled(win), timeout=2000)
    texts = _scene_texts(win)
    assert "specific loudness, left / mono (right axis)" in texts, texts
    assert "specific loudness, right (right axis)" in texts
    assert "excitation, left / mono" in texts and "threshold (E_THRQ)" in texts
    assert any(t.startswith("specific loudness (sone/Cam)") for t in texts), texts
    phon = win.labels["phon"].text()
    assert phon.count(" phon") == 2 and "(STL " in phon, phon
    for key in ("stl", "ltl"):
        assert win.labels[key].text().endswith(" sone"), win.labels[key].text()


def test_per_ear_readout_carries_units(make_window, qtbot, tmp_path):
    """A stereo input: the per-ear line says which value is STL / LTL, each with sone."""
    from scipy.io import wavfile

    fs = 32000
    t = np.arange(fs) / fs
    x = 0.05 * np.sin(2 * np.pi * 1000 * t)
    wav = tmp_path / "st.wav"
    wavfile.write(wav, fs, np.stack([x, 0.5 * x], axis=1).astype(np.float32))
    win = make_window(input=str(wav), loop=True)
    qtbot.waitUntil(lambda: "LTL L" in win.labels["ears"].text(), timeout=3000)
    text = win.labels["ears"].text()
    assert text.startswith("STL L ") and text.count(" sone") == 4, text
