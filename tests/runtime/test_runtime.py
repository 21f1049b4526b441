"""Real-time runtime: exactness under re-blocking, state management, accounting,
bad input, sources and the ``rtamt stream`` CLI (no audio hardware needed).
Load tests (overload, denormals, soak) are in test_runtime_load.py; the real
audio server (JACK) end-to-end test is in test_jack_runtime.py."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from scipy.io import wavfile

from rtamt.engine.stage import RtamtInputError
from rtamt.filterbank import Gammatone, GammatoneParams
from rtamt.models import Dau1997
from rtamt.runtime import ArraySource, DemoSource, FileSource, Runtime
from rtamt.signals import read_wav

from _helpers import FS, make_signal

pytestmark = pytest.mark.timeout(120)

N = 24000  # 0.5 s


def collect(rt):
    got = []
    rt.subscribe(got.append)
    return got


def joined(results, name="dau1997"):
    return np.concatenate([r.outputs[name] for r in results], axis=-1)


def run_fast(chain, x, sizes, block=256, **kw):
    """Push ``x`` in ``sizes`` (cyclic) through a fresh runtime, drain, return results."""
    kw.setdefault("sample_dtype", "float64")
    rt = Runtime(chain, FS, block=block, policy="drop-newest", **kw)
    got = collect(rt)
    rt.start()
    ArraySource(x, FS, blocksize=sizes, realtime=False).run(rt)
    rt.stop("drain")
    return rt, got


@pytest.fixture(scope="module")
def sig():
    return make_signal(N)


@pytest.fixture(scope="module")
def offline(sig):
    return Dau1997(FS)(sig)


@pytest.mark.parametrize("sizes", [[256], [100, 256, 37, 1024], [1, 7, 3000], [0]])
def test_varying_callback_sizes_equal_fixed_and_offline(sig, offline, sizes):
    if sizes == [0]:  # random sizes, like a blocksize=0 device
        sizes = list(np.random.default_rng(5).integers(1, 2000, 200))
    rt, got = run_fast(Dau1997(FS), sig, sizes)
    y = joined(got)
    assert np.array_equal(y, offline, equal_nan=True)
    # re-blocked to the chain's block size; only the drained tail is shorter
    assert all(r.frames == 256 for r in got[:-1])
    assert [r.start for r in got] == list(range(0, N, 256))
    st = rt.stats()
    assert st.frames_processed == N and st.dropped_frames == st.skipped_frames == 0
    assert not any(r.gap for r in got)


def test_default_ring_keeps_float64_pushes_exact(sig, offline):
    """With every default (no sample_dtype) a float64 runtime fed float64 audio equals the
    offline model bit for bit (the ring follows the chains' dtype; it stored float32)."""
    rt = Runtime(Dau1997(FS), FS, block=256, policy="drop-newest")
    got = collect(rt)
    rt.start()
    ArraySource(sig[:6000], FS, blocksize=[333], realtime=False).run(rt)
    rt.stop("drain")
    assert np.array_equal(joined(got), offline[:, :6000], equal_nan=True)


@pytest.mark.parametrize("block", [1, 64, 1000])
def test_processing_block_size_does_not_change_results(sig, offline, block):
    x = sig[:6000]
    _, got = run_fast(Dau1997(FS), x, [333], block=block)
    assert np.array_equal(joined(got), offline[:, :6000], equal_nan=True)


def test_float32_device_samples(sig):
    """A float32 ring (what devices deliver) equals offline processing of the
    float32-rounded signal in float64."""
    x32 = sig.astype(np.float32)
    _, got = run_fast(Dau1997(FS), x32, [100, 256, 37, 1024], sample_dtype="float32")
    ref = Dau1997(FS)(x32.astype(np.float64))
    assert np.array_equal(joined(got), ref, equal_nan=True)


def test_multichannel_and_several_chains(sig):
    x = np.stack([sig, 0.5 * sig[::-1]], axis=1)           # (T, 2)
    gt = Gammatone(GammatoneParams(fs=FS))
    rt = Runtime({"dau": Dau1997(FS), "gt": gt}, FS, channels=2, block=128,
                 policy="drop-newest", sample_dtype="float64")
    got = collect(rt)
    rt.start()
    ArraySource(x, FS, blocksize=[300, 77], realtime=False).run(rt)
    rt.stop()
    ref_d = Dau1997(FS)(x.T)
    ref_g = Gammatone(GammatoneParams(fs=FS))(x.T)
    assert np.array_equal(joined(got, "dau"), ref_d, equal_nan=True)
    assert np.array_equal(joined(got, "gt"), ref_g)
    assert joined(got, "gt").shape[:2] == (2, ref_g.shape[1])


def test_snapshot_while_streaming_restores_bit_for_bit(sig, offline):
    """Snapshot taken from a running runtime in real-time pacing; a new runtime
    restored from it and fed the rest of the stream continues bit-for-bit."""
    x = np.concatenate([sig, sig])                     # 1 s
    rt = Runtime(Dau1997(FS), FS, block=256, sample_dtype="float64")
    got = collect(rt)
    rt.start()
    src = ArraySource(x, FS, blocksize=100, realtime=True).start(rt)
    time.sleep(0.4)
    snap = rt.snapshot()                               # while streaming
    assert src._thread.is_alive()
    src.join(5)
    rt.stop("drain")
    pos = snap["position"]
    assert 0 < pos < x.size and pos % 100 == 0         # between two 100-frame pushes
    assert snap["pending"].shape[0] == pos - snap["pending_start"] < 256

    rt2 = Runtime(Dau1997(FS), FS, block=256, sample_dtype="float64")
    rt2.restore(snap)
    got2 = collect(rt2)
    rt2.start()
    # backpressured pushes (the runtime's policy is drop-oldest, so push directly)
    for i in range(pos, x.size, 256):
        rt2.push(x[i:i + 256], wait=True)
    rt2.stop("drain")
    first = got2[0].seq
    assert got2[0].start == snap["pending_start"]
    orig = {r.seq: r for r in got}
    for r in got2:
        o = orig[r.seq]
        assert r.start == o.start and r.frames == o.frames
        assert np.array_equal(r.outputs["dau1997"], o.outputs["dau1997"], equal_nan=True)
    assert got2[-1].seq == got[-1].seq and first == snap["seq"]


def test_restore_rejects_mismatch(sig):
    rt = Runtime(Dau1997(FS), FS, block=256)
    snap = rt.snapshot()
    bad = dict(snap, block=128)
    with pytest.raises(RtamtInputError, match="block"):
        rt.restore(bad)
    bad = dict(snap, chains={"other": snap["chains"]["dau1997"]})
    with pytest.raises(RtamtInputError, match="chains"):
        rt.restore(bad)


def test_reset_while_streaming(sig):
    x = np.concatenate([sig, sig])
    rt = Runtime(Dau1997(FS), FS, block=256, sample_dtype="float64")
    got = collect(rt)
    rt.start()
    src = ArraySource(x, FS, blocksize=256, realtime=True).start(rt)
    time.sleep(0.3)
    seq = rt.reset()
    src.join(5)
    rt.stop()
    assert 0 < seq < len(got)
    k = [r.seq for r in got].index(seq)
    start = got[k].start
    # from the reset block on, results equal a fresh model started at that sample
    ref = Dau1997(FS)(x[start:])
    assert np.array_equal(joined(got[k:]), ref, equal_nan=True)
    # and differ from the un-reset continuation
    assert not np.array_equal(joined(got[k:]), Dau1997(FS)(x)[:, start:], equal_nan=True)


def test_stop_drain_and_discard(sig):
    x = sig[:1000]
    rt = Runtime(Dau1997(FS), FS, block=256, policy="drop-newest", sample_dtype="float64")
    got = collect(rt)
    for i in range(0, 1000, 100):          # queued before the thread runs
        assert rt.push(x[i:i + 100])
    rt.start()
    rt.stop("drain")
    assert sum(r.frames for r in got) == 1000 and got[-1].frames == 1000 - 3 * 256
    assert np.array_equal(joined(got), Dau1997(FS)(x), equal_nan=True)

    rt = Runtime(Dau1997(FS), FS, block=256, policy="drop-newest", sample_dtype="float64")
    got = collect(rt)
    rt.simulate_overload(1e6, 0.5)         # every block very slow: the queue stays
    rt.start()
    for i in range(0, 1000, 100):
        rt.push(x[i:i + 100])
    time.sleep(0.05)
    rt.stop("discard", timeout=5)
    st = rt.stats()
    assert st.frames_processed + st.discarded_frames == 1000
    assert st.discarded_frames > 0
    assert not rt.running


def test_bad_input_rejected_state_untouched(sig):
    x = sig[:4096].copy()
    bad = x.copy()
    bad[600] = np.nan                        # inside block 2 (512..767)
    rt = Runtime(Dau1997(FS), FS, block=256, policy="drop-newest", sample_dtype="float64")
    got = collect(rt)
    rt.start()
    ArraySource(bad, FS, blocksize=256, realtime=False).run(rt)
    rt.stop()
    st = rt.stats()
    assert st.rejected_blocks == 1
    assert "block 2" in st.last_error and "sample 88" in st.last_error
    assert [r.start for r in got] == [0, 256] + list(range(768, 4096, 256))
    assert got[2].gap and not got[1].gap
    # state untouched: later blocks = offline processing with the bad block removed
    keep = np.concatenate([x[:512], x[768:]])
    assert np.array_equal(joined(got), Dau1997(FS)(keep), equal_nan=True)
    for r in got:
        assert np.isfinite(r.outputs["dau1997"][~np.isnan(r.outputs["dau1997"])]).all()


class _Contract:
    """The streaming contract's descriptive part, for the test chains below."""

    outputs = ("out",)
    batchable = False
    input_limit = float("inf")

    def process_all(self, x):
        return {"out": self(x)}

    def design_identity(self):
        return {"name": self.name}

    def output_info(self):
        return {"out": {"rate": None, "channels": None}}


class Counter(_Contract):
    """A stateful chain that accepts anything: counts the samples it was given."""

    name = "count"

    def __init__(self):
        self.n = 0

    def __call__(self, x):
        self.n += x.shape[-1]
        return np.array([self.n])

    def reset(self):
        self.n = 0

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, sd):
        self.n = sd["n"]


def test_bad_block_leaves_every_chain_unchanged(sig):
    """A chain that would accept the bad block runs before one that rejects it: the
    runtime rejects the block before any chain runs, so no chain advances."""
    x = sig[:2048].copy()
    x[300] = np.inf                           # block 1 (256..511)
    cnt = Counter()
    rt = Runtime({"count": cnt, "dau1997": Dau1997(FS)}, FS, block=256,
                 policy="drop-newest", sample_dtype="float64")
    got = collect(rt)
    rt.start()
    ArraySource(x, FS, blocksize=256, realtime=False).run(rt)
    rt.stop()
    st = rt.stats()
    assert st.rejected_blocks == 1 and "channel 0, sample 44" in st.last_error
    assert cnt.n == st.frames_processed == 2048 - 256
    keep = np.concatenate([x[:256], x[512:]])
    assert np.array_equal(joined(got), Dau1997(FS)(keep), equal_nan=True)


def test_bad_input_on_error_stop(sig):
    rt = Runtime(Dau1997(FS), FS, block=256, on_error="stop", sample_dtype="float64")
    rt.start()
    blk = np.full(256, np.inf)
    rt.push(blk)
    rt.wait_idle(5)
    time.sleep(0.05)
    with pytest.raises(RuntimeError, match="non-finite"):
        rt.stop()


def test_push_wrong_shape_raises_and_queues_nothing():
    rt = Runtime(Dau1997(FS), FS, channels=2, block=256)
    with pytest.raises(RtamtInputError, match=r"expected shape \(frames, 2\)"):
        rt.push(np.zeros((256, 3), np.float32))
    with pytest.raises(RtamtInputError):
        rt.push(np.zeros(256, np.float32))
    assert rt.ring.available() == 0 and rt.stats().frames_pushed == 0


def test_status_flags_counted(sig):
    class Flags:  # what sounddevice passes (CallbackFlags keeps the bits in _flags)
        _flags = 0x2

    rt = Runtime(Dau1997(FS), FS, block=256)
    rt.start()
    rt.push(np.zeros((256, 1), np.float32), Flags())
    rt.push(np.zeros((256, 1), np.float32), 0x1 | 0x2)
    rt.push(np.zeros((256, 1), np.float32))
    rt.wait_idle(5)
    rt.stop()
    st = rt.stats()
    assert st.status["input_overflow"] == 2 and st.status["input_underflow"] == 1
    assert sum(st.status.values()) == 3 and st.dropped_status == []


def test_status_flags_of_dropped_chunks_reported():
    rt = Runtime(Dau1997(FS), FS, block=256, ring_seconds=0.0, policy="drop-newest")  # 4 blocks
    for _ in range(4):
        assert rt.push(np.zeros((256, 1), np.float32))
    assert not rt.push(np.zeros((256, 1), np.float32), 0x2)      # full: dropped
    st = rt.stats()
    assert st.dropped_frames == 256 and st.dropped_status == ["input_overflow"]
    assert st.status["input_overflow"] == 0      # not a processed chunk


def test_callback_signature_uses_portaudio_times():
    class T:
        inputBufferAdcTime = 10.0
        currentTime = 10.008   # first frame captured 8 ms before the callback

    rt = Runtime(Dau1997(FS), FS, block=256, sample_dtype="float32")
    got = collect(rt)
    rt.start()
    rt.callback(np.zeros((256, 1), np.float32), 256, T(), 0)
    rt.wait_idle(5)
    rt.stop()
    assert rt.ring.m_inlat[0] == pytest.approx(0.008)
    # last frame captured at push - 8 ms + 255/fs; latency = publish - that
    assert 0.008 - 255 / FS - 1e-6 <= got[0].latency_s < 0.008 - 255 / FS + 0.05


def test_history_bounded_latest_is_last(sig):
    rt, got = run_fast(Dau1997(FS), sig[:256 * 20], [256], history=5)
    h = rt.history()
    assert len(h) == 5 and h[-1] is rt.latest() is got[-1]
    assert [r.seq for r in h] == list(range(15, 20))


def test_fast_source_needs_lossless_policy(sig):
    rt = Runtime(Dau1997(FS), FS)
    with pytest.raises(ValueError, match="drop-newest"):
        ArraySource(sig, FS, realtime=False).run(rt)


def test_realtime_pacing_and_latency():
    """A real-time demo source is paced by the clock (no drift) and every block is
    published within a few ms of its last sample's capture."""
    rt = Runtime(Dau1997(FS), FS, block=256)
    got = collect(rt)
    rt.start()
    t0 = time.monotonic()
    DemoSource(FS, blocksize=256, realtime=True, seconds=1.0).run(rt)
    wall = time.monotonic() - t0
    rt.stop()
    st = rt.stats()
    assert 0.99 < wall < 1.1
    assert st.blocks == 188 and st.dropped_frames == st.skipped_frames == 0
    lat = np.array([r.latency_s for r in got[:-1]])
    assert np.median(lat) < 0.005 and lat.min() > 0


def test_file_source_real_wav(tmp_path, sig):
    x16 = np.round(sig / np.abs(sig).max() * 20000).astype(np.int16)
    stereo = np.stack([x16, x16[::-1]], axis=1)
    path = tmp_path / "in.wav"
    wavfile.write(path, int(FS), stereo)
    src = FileSource(path, blocksize=[500, 12], realtime=False)
    rt = Runtime(Dau1997(FS), src.fs, channels=2, block=256, policy="drop-newest")
    got = collect(rt)
    rt.start()
    src.run(rt)
    rt.stop()
    fs, data = read_wav(path)
    assert np.array_equal(joined(got), Dau1997(FS)(data), equal_nan=True)
    with pytest.raises(ValueError, match="sample rate"):
        FileSource(path, fs=44100)


class _Collect:
    """What an as-fast-as-possible source needs of a runtime: the pushed chunks kept."""

    policy = "drop-newest"

    def __init__(self):
        self.chunks = []

    def push(self, blk, wait=False):
        self.chunks.append(np.array(blk))
        return True

    def source_started(self, period_s=0.0):
        pass

    def source_ended(self):
        pass


def test_file_source_reads_the_file_while_it_pushes(tmp_path, monkeypatch):
    """A FileSource holds one chunk of the file, not the file (a 10-minute stereo file
    was 460 MB in memory before the first block), and gives the same samples: across
    chunk boundaries, odd block sizes and a loop."""
    monkeypatch.setattr(FileSource, "READ_CHUNK", 1000)
    rng = np.random.default_rng(5)
    x16 = rng.integers(-20000, 20000, size=(4321, 2), dtype=np.int16)
    path = tmp_path / "in.wav"
    wavfile.write(path, 16000, x16)
    held = []
    src = FileSource(path, blocksize=[777, 5], realtime=False, loop=True, seconds=0.7)
    real = src.reader.read

    def read(n):
        y = real(n)
        held.append(y.shape[-1])
        return y

    src.reader.read = read
    assert not hasattr(src, "data") and src.length == 4321 and src.channels == 2
    rt = _Collect()
    src.run(rt)
    got = np.concatenate(rt.chunks)
    want = np.tile(x16 / 32768.0, (3, 1))[:11200]
    assert got.shape == want.shape and np.array_equal(got, want)
    assert max(held) == 1000 and "_f" not in vars(src.reader)     # closed at the end


def test_warmup_keeps_restored_state(sig):
    """start() compiles the kernels on a block of zeros and restores the state, so
    a runtime restored before start continues exactly."""
    m = Dau1997(FS)
    m(sig[:1000])
    rt = Runtime(m, FS, block=256, policy="drop-newest", sample_dtype="float64")
    got = collect(rt)
    rt.start()
    rt.push(sig[1000:1512])
    rt.stop()
    ref = Dau1997(FS)(sig[:1512])[:, 1000:]
    assert np.array_equal(joined(got), ref, equal_nan=True)


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "rtamt_apps", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_cli_stream_demo_realtime():
    p = _cli("stream", "--seconds", "1.5")
    assert p.returncode == 0, p.stderr
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("final: blocks 282") and "dropped 0" in last and "skipped 0" in last


def test_cli_stream_fast_json(tmp_path, sig):
    p = _cli("stream", "--fast", "--seconds", "5", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout.strip().splitlines()[-1])
    assert d["final"] and d["frames_processed"] == 5 * 48000
    assert d["dropped_frames"] == d["skipped_frames"] == 0 and d["rtf"] > 0
    path = tmp_path / "x.wav"
    wavfile.write(path, int(FS), sig.astype(np.float32))
    p = _cli("stream", "--input", str(path), "--fast", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1])["frames_processed"] == N


def test_cli_stream_unknown_device_clear_error():
    p = _cli("stream", "--input", "no-such-device-xyz", "--seconds", "0.5")
    assert p.returncode == 2
    assert "no-such-device-xyz" in p.stderr or "PortAudio" in p.stderr


class _StuckChain(_Contract):
    """A chain whose processing call blocks until released: the processing thread is
    busy (holding whatever it holds) for as long as the test wants."""

    name = "stuck"

    def __init__(self):
        import threading

        self.entered = threading.Event()
        self.release = threading.Event()
        self.armed = False  # Runtime.start() warms the chain up with one call

    def __call__(self, x):
        if not self.armed:
            return x
        self.entered.set()
        assert self.release.wait(30), "test never released the processing thread"
        return x

    def reset(self):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, sd):
        pass


def test_callback_neither_waits_for_processing_nor_allocates():
    """The audio callback does almost nothing: while the processing thread is stuck inside
    a chain, callbacks still return (they take no lock the processor holds) and queue
    their frames until the bounded ring is full, then drop and count; the copy goes into
    the preallocated ring, so a callback allocates no block-sized memory.  (Its duration
    is a benchmark figure, reported by the JACK test and in the README, not asserted.)"""
    import threading
    import tracemalloc

    chain = _StuckChain()
    block = 256
    rt = Runtime(chain, FS, block=block, ring_seconds=0.1, max_chunks=64)
    rt.start()
    chain.armed = True
    indata = np.full((block, 1), 0.25, np.float32)
    try:
        rt.callback(indata, block, None, 0)
        assert chain.entered.wait(10), "processing thread never started the first block"
        # memory a queued callback allocates, at its peak (the ring has room for 18
        # blocks): a few small Python objects, nothing of the block's size (1 KiB)
        peaks = []
        tracemalloc.start()
        try:
            for _ in range(10):
                cur0 = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
                rt.callback(indata, block, None, 0)
                peaks.append(tracemalloc.get_traced_memory()[1] - cur0)
        finally:
            tracemalloc.stop()
        assert rt.stats().dropped_frames == 0
        assert max(peaks) < block * 4, peaks
        # callbacks from another thread while processing is stuck: they return, fill the
        # bounded ring and then drop (counted)
        done = threading.Event()

        def produce():
            for _ in range(200):
                rt.callback(indata, block, None, 0)
            done.set()

        t = threading.Thread(target=produce, daemon=True)
        t.start()
        assert done.wait(10), "callbacks blocked while the processing thread was busy"
        st = rt.stats()
        assert st.dropped_frames > 0
        assert st.frames_received == 211 * block
    finally:
        chain.release.set()
        rt.stop("discard")
