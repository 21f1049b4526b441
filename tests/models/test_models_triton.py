"""Models on the Triton backend (issue 21), run in Triton's interpreter on CPU tensors:
equal to the numba models within 1e-12 (float64) / 1e-5 (float32), exact under any block
partition on the Triton path itself, snapshots that cross between the backends, and clear
errors for a backend or device that cannot run."""
import os

import numpy as np
import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

import rtamt  # noqa: E402
from rtamt.engine import backend as B  # noqa: E402

from _triton import DEVICE, host  # noqa: E402

FS = 48000
TOL = {np.float64: 1e-12, np.float32: 1e-5}
# a small Dau1997 (5 channels) keeps the interpreter fast; the kernels are the full ones
SMALL = dict(flow=500.0, fhigh=2000.0)


def _signal(n, seed, dtype):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 0.05
    x[n // 3:n // 3 + 20] *= 40.0            # a loud burst: the overshoot limiter acts
    return x.astype(dtype)


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _np(t):
    return host(t)


def _parts(n, seed):
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, n), size=3, replace=False))
    return np.split(np.arange(n), cuts)


def _equals_numba_per_stage(cls, fs, kw, x, seed) -> dict:
    """``cls(fs, **kw)`` on the Triton backend, fed ``x`` in a random partition (state
    carried), against the numba model on the whole of ``x``: every stage's output within
    :data:`TOL`, as CPU tensors of the same shape and dtype.  Returns the numba outputs."""
    ref = cls(fs, **kw).process_all(x)
    m = cls(fs, **kw, backend="triton", device=DEVICE)
    assert m.backend == "triton" and all(s.backend == "triton" for s in m.stages)
    outs = {k: [] for k in ref}
    for idx in _parts(x.size, seed):
        for k, v in m.process_all(x[idx]).items():
            assert isinstance(v, torch.Tensor) and v.device.type == DEVICE
            outs[k].append(_np(v))
    for k, v in ref.items():
        got = np.concatenate(outs[k], axis=-1)
        assert got.shape == v.shape and got.dtype == v.dtype
        assert _rel(got, v) <= TOL[x.dtype.type], (k, _rel(got, v))
    return ref


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_dau1997_triton_equals_numba_per_stage(dtype):
    ref = _equals_numba_per_stage(rtamt.Dau1997, FS, SMALL, _signal(160, 1, dtype), 2)
    # the limiter really was active (the burst drives the adaptation loops above 1)
    assert np.max(ref["adaptloop"]) > 100.0


def test_triton_path_is_exact_under_any_partition_and_batch():
    """Triton path vs itself: one call == random partition == block size 1 prefix, and a
    stream batched with another gives the same bits as alone."""
    x = _signal(96, 3, np.float64)
    one = _np(rtamt.Dau1997(FS, **SMALL, backend="triton", device=DEVICE)(x))
    m = rtamt.Dau1997(FS, **SMALL, backend="triton", device=DEVICE)
    parts = [_np(m(x[i])) for i in _parts(x.size, 4)]
    assert np.array_equal(np.concatenate(parts, axis=-1), one)
    m1 = rtamt.Dau1997(FS, **SMALL, backend="triton", device=DEVICE)
    head = np.concatenate([_np(m1(x[i:i + 1])) for i in range(8)], axis=-1)
    assert np.array_equal(head, one[..., :8])
    other = _signal(96, 9, np.float64)
    mb = rtamt.Dau1997(FS, **SMALL, backend="triton", device=DEVICE)
    both = _np(mb(np.stack([other, x])))
    assert np.array_equal(both[1], one)


def test_snapshot_crosses_between_cpu_and_triton():
    """A state taken on the numba model continues on the Triton one, and back (float64,
    within 1e-12 of the numba model run straight through)."""
    x = _signal(150, 5, np.float64)
    ref = rtamt.Dau1997(FS, **SMALL)(x)
    cpu = rtamt.Dau1997(FS, **SMALL)
    a = cpu(x[:50])
    tri = rtamt.Dau1997(FS, **SMALL, backend="triton", device=DEVICE)
    tri.load_state_dict(cpu.state_dict())
    b = _np(tri(x[50:100]))
    back = rtamt.Dau1997(FS, **SMALL)
    sd = tri.state_dict()
    assert all(isinstance(v, np.ndarray)
               for ch in sd["children"].values() for v in (ch["arrays"] or {}).values())
    back.load_state_dict(sd)
    c = back(x[100:])
    got = np.concatenate([a, b, c], axis=-1)
    assert _rel(got, ref) <= 1e-12
    # switching a running model's backend keeps its stream going too
    m = rtamt.Dau1997(FS, **SMALL)
    p = m(x[:70])
    m.to(DEVICE, backend="triton")
    q = _np(m(x[70:]))
    m.to(backend="numba")
    assert m.backend == "numba" and isinstance(m["gammatone"].state["sr"], np.ndarray)
    assert _rel(np.concatenate([p, q], axis=-1), ref) <= 1e-12


def test_backend_errors_say_what_to_do(monkeypatch):
    with pytest.raises(B.RtamtBackendError, match="unknown backend"):
        B.resolve("opencl")
    if not torch.cuda.is_available():
        with pytest.raises(B.RtamtBackendError, match="no CUDA device"):
            rtamt.Dau1997(FS, device="cuda")
    with pytest.raises(B.RtamtBackendError, match="needs backend='triton'"):
        B.resolve("numba", "cuda")
    monkeypatch.setattr(B, "triton_available", lambda: "No module named 'triton'")
    with pytest.raises(B.RtamtBackendError, match=r"pip install 'rtamt\[gpu\]'"):
        rtamt.Dau1997(FS, device="cuda")
    monkeypatch.undo()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(B.RtamtBackendError, match="TRITON_INTERPRET=1"):
        B.resolve("triton", "cpu")


def test_stage_without_a_triton_kernel_is_refused_and_nothing_changes():
    """A chain with one stage that has no Triton kernel refuses the backend as a whole,
    naming the stage, and goes on exactly on the numba kernels."""
    from rtamt.engine.stage import Chain
    from rtamt.filterbank.gammatone import Gammatone, GammatoneParams
    from rtamt.ihc.envelope import IHCEnvelope, IHCEnvelopeParams

    class NoKernel(IHCEnvelope):
        name = "nokernel"
        triton_ready = False

    def chain():
        return Chain([Gammatone(GammatoneParams(fs=FS, flow=500.0, fhigh=2000.0)),
                      NoKernel(IHCEnvelopeParams(fs=FS))])
    m = chain()
    x = _signal(64, 7, np.float64)
    m(x)
    sd = m.state_dict()
    with pytest.raises(B.RtamtBackendError, match=r"no Triton kernel yet.*nokernel"):
        m.to(DEVICE, backend="triton")
    assert m.backend == "numba" and all(s.backend == "numba" for s in m.stages)
    y = m(x)
    ref = chain()
    ref.load_state_dict(sd)
    assert np.array_equal(y, ref(x))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("comp", ["brokenstick", "power"])
def test_king2019_triton_equals_numba_per_stage(dtype, comp):
    """King2019 (gammatone, compression, IHC, adaptation high-pass, IIR modulation bank) on
    the Triton backend, both compression kinds, against the numba model."""
    x = _signal(120, 12, dtype)
    x[40:60] *= 30.0                     # above the compression knee
    _equals_numba_per_stage(rtamt.King2019, FS, dict(SMALL, compression=comp), x, 13)


@pytest.mark.parametrize("extra", [[], ["--streams", "4"], ["--find-capacity"]])
def test_latency_bench_device_cuda_without_a_gpu_is_one_clear_line(extra):
    import subprocess
    import sys
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    r = subprocess.run([sys.executable, "-m", "latency_bench", "--device", "cuda", *extra],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--device cuda" in lines[0] and "CUDA" in lines[0]


def test_latency_bench_streams_on_the_triton_backend():
    """``latency_bench --streams 2 --backend triton`` (the path ``--device cuda`` takes, here
    in the interpreter): both streams' blocks all processed through a Triton scheduler, and
    the report says which backend ran."""
    import json
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "latency_bench", "--model", "king2019",
                        "--streams", "2", "--backend", "triton", "--fs", "16000",
                        "--block", "64", "--seconds", "0.016", "--warmup-seconds", "0",
                        "--budget-ms", "10000", "--realtime", "0", "--json"],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TRITON_INTERPRET="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert res["backend"] == "triton" and res["device"].startswith("cpu")
    assert res["errors"] == [] and res["streams"] == 2
    assert res["n_blocks"] == 2 * 4 and res["drops"] == 0
    bad = subprocess.run([sys.executable, "-m", "latency_bench", "--backend", "triton"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--backend: only with --streams" in bad.stderr


#: small configurations (few channels) of every modulation model, for the interpreter
MODELS = {"dau1997": (FS, SMALL), "king2019": (FS, SMALL), "osses2021": (FS, SMALL),
          "paulick2024": (44100, dict(n_channels=3))}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_paulick2024_triton_equals_numba_per_stage(dtype):
    fs, kw = MODELS["paulick2024"]
    _equals_numba_per_stage(rtamt.Paulick2024, fs, kw, _signal(160, 14, dtype), 15)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_scheduler_on_the_triton_backend_is_exact_per_stream(name):
    """Scheduler(backend='triton'): 3 streams of a model in random chunks, one closing and
    one opening mid-run; each stream's outputs equal its own offline Triton run bit for bit,
    whatever batches the scheduler formed, and batches really formed."""
    from rtamt.models import MODELS as ALL
    from rtamt.scheduler import Scheduler

    fs, mkw = MODELS[name]
    rng = np.random.default_rng(11)
    n = 200
    sigs = [_signal(n, 20 + i, np.float64) for i in range(4)]
    got = {i: [] for i in range(4)}
    batches = []

    def rec(i):
        def sub(r):
            got[i].append(_np(r.outputs[name]))
            batches.append(r.batch)
        return sub
    kw = dict(model_kwargs=mkw, measure=False, admission="best-effort", budget_ms=60000.0,
              sample_dtype="float64", policy="drop-newest", history=0)
    s = Scheduler(threads=2, backend="triton", device=DEVICE, realtime=None)
    try:
        hs = {i: s.open(name, fs, 32, **kw) for i in range(3)}
        for i, h in hs.items():
            h.subscribe(rec(i))
        pos = [0] * 4
        for step in range(30):
            if step == 10:                      # stream 3 joins, stream 0 leaves
                hs[0].close("drain", timeout=120)
                hs[3] = s.open(name, fs, 32, **kw)
                hs[3].subscribe(rec(3))
            for i, h in list(hs.items()):
                if h.closed or pos[i] >= n:
                    continue
                k = int(rng.integers(1, 40))
                assert h.push(sigs[i][pos[i]:pos[i] + k], wait=True, timeout=120)
                pos[i] += k
        for i, h in hs.items():
            if not h.closed:
                while pos[i] < n:
                    assert h.push(sigs[i][pos[i]:pos[i] + 50], wait=True, timeout=120)
                    pos[i] += 50
                h.close("drain", timeout=120)
        assert not s.errors, s.errors[:2]
    finally:
        s.close("discard", timeout=120)
    for i in range(4):
        assert got[i], i
        y = np.concatenate(got[i], axis=-1)
        ref = _np(ALL[name](fs, **mkw, backend="triton", device=DEVICE)(sigs[i][:pos[i]]))
        assert np.array_equal(y, ref[..., :y.shape[-1]]), i
        assert y.shape[-1] >= ref.shape[-1] - ref.shape[-1] * 32 // max(pos[i], 1) - 32
    assert max(batches) > 1


def test_numba_path_never_imports_triton():
    """The base install does not need triton: importing rtamt and running models on the
    default backend leaves it unimported."""
    import subprocess
    import sys
    code = ("import sys, numpy as np, rtamt\n"
            "for m in (rtamt.Dau1997(48000), rtamt.King2019(48000)): m(np.zeros(64))\n"
            "print('triton' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_scheduler_moves_a_live_group_between_backends_exactly():
    """Scheduler.move(): 3 Dau1997 streams start on numba, the whole group moves to the
    Triton backend between two blocks and back again; each stream's outputs equal an
    offline model that switches backend at the same block, bit for bit (the state moves
    exactly), and the other streams keep running."""
    from rtamt.scheduler import Scheduler

    B_ = 32
    sigs = [_signal(6 * B_, 30 + i, np.float64) for i in range(3)]
    got = {i: [] for i in range(3)}

    def rec(i):
        def sub(r):
            got[i].append(_np(r.outputs["dau1997"]) if not isinstance(
                r.outputs["dau1997"], np.ndarray) else r.outputs["dau1997"].copy())
        return sub
    kw = dict(model_kwargs=SMALL, measure=False, admission="best-effort", budget_ms=60000.0,
              sample_dtype="float64", policy="drop-newest", history=0)
    s = Scheduler(threads=2, realtime=None)
    try:
        hs = [s.open("dau1997", FS, B_, **kw) for _ in range(3)]
        for i, h in enumerate(hs):
            h.subscribe(rec(i))

        def feed(a, b):
            for h, x in zip(hs, sigs):
                assert h.push(x[a * B_:b * B_], wait=True, timeout=120)
            for h in hs:
                assert h.wait_idle(timeout=120)
        feed(0, 2)
        label = s.move(hs[1], "cpu", backend="triton")
        assert label.endswith("/triton:cpu") and hs[0].group is hs[2].group is hs[1].group
        assert all(h.proc.backend == "triton" for h in hs)
        feed(2, 4)
        assert "triton" not in s.move(hs[0], backend="numba")
        feed(4, 6)
        assert not s.errors
    finally:
        s.close("discard", timeout=120)
    for i, x in enumerate(sigs):
        m = rtamt.Dau1997(FS, **SMALL)
        ref = [m(x[:2 * B_])]
        m.to(DEVICE, backend="triton")
        ref.append(_np(m(x[2 * B_:4 * B_])))
        m.to(backend="numba")
        ref.append(m(x[4 * B_:]))
        assert np.array_equal(np.concatenate(got[i], axis=-1), np.concatenate(ref, axis=-1)), i


def test_scheduler_runs_glasberg2002_on_the_triton_backend_exactly():
    """Loudness streams (frame clocks shared per batch) on the Triton backend: 3 streams,
    batched, each equal to its own offline Triton run bit for bit."""
    from rtamt.scheduler import Scheduler

    fs = 32000
    sigs = [_signal(512, 40 + i, np.float64) for i in range(3)]
    got = {i: [] for i in range(3)}
    batches = []

    def rec(i):
        def sub(r):
            batches.append(r.batch)
            got[i].append({k: np.asarray(_np(v) if isinstance(v, torch.Tensor) else v)
                           for k, v in r.outputs["glasberg2002"].items()})
        return sub
    kw = dict(measure=False, admission="best-effort", budget_ms=60000.0,
              sample_dtype="float64", policy="drop-newest", history=0)
    s = Scheduler(threads=2, backend="triton", device=DEVICE, realtime=None)
    try:
        hs = [s.open("glasberg2002", fs, 128, **kw) for _ in range(3)]
        for i, h in enumerate(hs):
            h.subscribe(rec(i))
        for k in range(0, 512, 128):
            for h, x in zip(hs, sigs):
                assert h.push(x[k:k + 128], wait=True, timeout=120)
        for h in hs:
            h.close("drain", timeout=300)
        assert not s.errors, s.errors[:2]
    finally:
        s.close("discard", timeout=120)
    assert max(batches) > 1
    for i, x in enumerate(sigs):
        ref = rtamt.Glasberg2002(fs, backend="triton", device=DEVICE)(x)
        for key in ("stl", "ltl", "specific_loudness"):
            g = np.concatenate([d[key] for d in got[i]], axis=-1)
            assert np.array_equal(g, _np(ref[key])), (i, key)


@pytest.mark.parametrize("mode", ["stereo", "diotic"])
def test_scheduler_runs_moore2016_on_the_triton_backend_exactly(mode):
    """Moore2016 streams on the Triton backend through the scheduler, one stream leaving
    and one joining after two blocks: each stream equals its own offline Triton run bit for
    bit.  Stereo streams batch while their frame clocks are equal (the joiner's is behind,
    so it runs alone); a diotic stream has no batch form and always runs alone."""
    from rtamt.scheduler import Scheduler

    fs, blk, n = 32000, 64, 256
    ch = 2 if mode == "stereo" else 1
    rng = np.random.default_rng(50)
    sigs = [rng.standard_normal((ch, n) if ch == 2 else n) * 0.05 for _ in range(4)]
    got = {i: [] for i in range(4)}
    batches = {i: [] for i in range(4)}

    def rec(i):
        def sub(r):
            batches[i].append(r.batch)
            got[i].append({k: _np(v) for k, v in r.outputs["moore2016"].items()})
        return sub
    kw = dict(channels=ch, measure=False, admission="best-effort", budget_ms=60000.0,
              sample_dtype="float64", policy="drop-newest", history=0)
    s = Scheduler(threads=2, backend="triton", device=DEVICE, realtime=None)

    def push(h, x, a, b):
        assert h.push(np.ascontiguousarray(x[..., a:b].T), wait=True, timeout=300)
    try:
        hs = {i: s.open("moore2016", fs, blk, **kw) for i in range(3)}
        for i, h in hs.items():
            h.subscribe(rec(i))
        for k in range(0, 2 * blk, blk):
            for i, h in hs.items():
                push(h, sigs[i], k, k + blk)
        for h in hs.values():
            assert h.wait_idle(timeout=300)
        hs.pop(0).close("drain", timeout=300)          # stream 0 leaves, stream 3 joins
        hs[3] = s.open("moore2016", fs, blk, **kw)
        hs[3].subscribe(rec(3))
        for k in range(2 * blk, n, blk):
            for i, h in hs.items():
                o = 2 * blk if i == 3 else 0          # the joiner starts at its sample 0
                push(h, sigs[i], k - o, k + blk - o)
        for h in hs.values():
            h.close("drain", timeout=300)
        assert not s.errors, s.errors[:2]
    finally:
        s.close("discard", timeout=300)
    seen = [b for v in batches.values() for b in v]
    if mode == "stereo":
        assert max(seen) > 1 and max(batches[3]) == 1
    else:
        assert set(seen) == {1}
    for i, x in enumerate(sigs):
        length = 2 * blk if i in (0, 3) else n
        ref = rtamt.Moore2016(fs, backend="triton", device=DEVICE)(x[..., :length])
        for key in ("stl", "ltl", "stl_left", "ltl_right", "specific_loudness",
                    "excitation", "frame_time"):
            g = np.concatenate([d[key] for d in got[i]], axis=-1)
            assert np.array_equal(g, _np(ref[key])), (i, key)


def test_scheduler_issue_bit_identity_on_the_triton_backend():
    """The scheduler's bit-identity test (scheduler/test_scheduler.py) on
    ``Scheduler(backend='triton')`` in the interpreter: N = 1, 3, 17 Dau1997 streams (a small
    configuration, 64-sample blocks), different signals in random interleaved chunk sizes;
    each stream's output is exactly its own offline Triton run, and the 17 were really
    batched."""
    from rtamt.scheduler import Scheduler

    from _streams import Recorder, feed

    rng = np.random.default_rng(17)
    kw = dict(model_kwargs=SMALL, measure=False, admission="best-effort", budget_ms=60000.0,
              sample_dtype="float64", policy="drop-newest", history=0)
    for n in (1, 3, 17):
        # queued before the workers start, so that calls take full batches (each call is an
        # interpreted launch per stage)
        s = Scheduler(threads=2, backend="triton", device=DEVICE, realtime=None, start=False)
        try:
            sigs = [_signal(160 + int(rng.integers(0, 64)), 300 + 17 * n + i, np.float64)
                    for i in range(n)]
            hs = [s.open("dau1997", FS, 64, **kw) for _ in range(n)]
            recs = [Recorder(h, "dau1997") for h in hs]
            feed(hs, sigs, rng, 1, 90)
            s.start()
            for h in hs:
                h.close("drain", timeout=300)
            assert not s.errors, s.errors[:2]
        finally:
            s.close("discard", timeout=120)
        # the references in one offline call: a batch of the signals zero-padded to one
        # length (causal: each row's first len(x) samples are that stream's run alone)
        m = max(len(x) for x in sigs)
        ref = _np(rtamt.Dau1997(FS, **SMALL, backend="triton", device=DEVICE)(
            np.stack([np.pad(x, (0, m - len(x))) for x in sigs])))
        for i, (rec, x) in enumerate(zip(recs, sigs)):
            assert np.array_equal(np.concatenate(rec.outs, axis=-1), ref[i, ..., :len(x)]), \
                f"N={n} stream {i}"
        if n == 17:
            assert max(r.batch for rec in recs for r in rec.results) > 1
