"""Placement of scheduler groups (``Scheduler(device='auto')``, issue 21 item 3): the
decision as a pure function of cost models and loads, 'auto' without CUDA, groups moved
between devices by :meth:`Scheduler.rebalance` bit-exactly, and no staging buffers off
CUDA."""
import numpy as np
import pytest

from rtamt.scheduler import CostModel, Scheduler
from rtamt.scheduler.placement import decide, work

FS, BLK = 48000, 256
# a design costing 0.1 ms per call + 1 us per stream-sample on the CPU, 0.5 ms per call
# + 1 ns per stream-sample on the GPU
CPU = CostModel(1e-4, 1e-6)
GPU = CostModel(5e-4, 1e-9)


def _decide(cpu=CPU, gpu=GPU, **kw):
    args = dict(streams=16, block=BLK, fs=FS, budget_s=0.010, max_batch=8, cpu_busy=1.0,
                cores=2, gpu_busy=0.0, max_load=0.9)
    args.update(kw)
    return decide(cpu, gpu, **args)


def test_work_is_busy_seconds_per_second():
    # 16 streams in calls of 8: 2 calls per block, 187.5 blocks per second
    assert work(CPU, 16, BLK, FS, 8) == pytest.approx(375 * 1e-4 + 16 * FS * 1e-6)
    assert work(CPU, 16, BLK, FS, 1) == pytest.approx(16 * 187.5 * 1e-4 + 16 * FS * 1e-6)
    assert work(CostModel(1e-4, 1e-6, scale=2.0), 1, BLK, FS, 8) == \
        pytest.approx(2 * (187.5e-4 + FS * 1e-6))
    assert work(CPU, 0, BLK, FS, 8) == 0.0


def test_gpu_when_the_cpu_is_the_tighter_resource_and_the_gpu_meets_the_budget():
    p = _decide()
    assert p.device == "gpu" and "tighter" in p.reason
    # on the CPU: 1.0 + 0.8 cores busy of 2; on the GPU: the workers wait (1.0 + 0.19)/2
    assert p.on_cpu == pytest.approx((1.0 + 0.0375 + 0.768) / 2)
    assert p.on_gpu == pytest.approx((1.0 + 0.1875 + 0.000768) / 2)
    assert p.gpu_latency_s == pytest.approx(BLK / FS + 5e-4 + 8 * BLK * 1e-9)
    assert p.gpu_latency_s <= 0.010


def test_cpu_when_the_gpu_would_miss_the_budget():
    # 2048-sample blocks: a 42.7 ms period + an 8 ms call exceed the 50 ms budget, though
    # the GPU would be the less loaded resource (0.69 against 0.89)
    p = _decide(gpu=CostModel(8e-3, 1e-9), block=2048, budget_s=0.050)
    assert p.device == "cpu" and "misses the budget" in p.reason
    assert p.gpu_latency_s > 0.050 and p.on_gpu < p.on_cpu
    assert _decide(gpu=CostModel(8e-3, 1e-9), block=2048, budget_s=0.051).device == "gpu"
    assert _decide(gpu=CostModel(5e-4, 1e-9, scale=9.0)).device == "cpu"   # scale counts


def test_cpu_without_a_gpu():
    p = _decide(gpu=None)
    assert p.device == "cpu" and p.reason == "no GPU"
    assert p.on_gpu is None and p.gpu_latency_s is None


def test_cpu_when_the_gpu_is_the_tighter_resource():
    # one stream on idle workers: 0.067 cores on the CPU (0.033 load of 2) against 0.094 of
    # the GPU
    p = _decide(streams=1, cpu_busy=0.0)
    assert p.device == "cpu" and "not the looser" in p.reason
    assert p.on_cpu < p.on_gpu
    # a GPU busy with other groups: 0.6 + 0.19 on the GPU against (0.6 + 0.81) / 2 workers
    p = _decide(cpu_busy=0.6, gpu_busy=0.6)
    assert p.device == "cpu" and p.on_gpu == pytest.approx(0.6 + 0.188268)
    assert _decide(cpu_busy=0.6, gpu_busy=0.4).device == "gpu"


def test_cpu_when_the_gpu_is_full():
    p = _decide(gpu_busy=0.8)              # 0.8 + 0.19 > max_load 0.9
    assert p.device == "cpu" and "busy" in p.reason


def test_gpu_when_only_the_gpu_meets_the_budget():
    slow = CostModel(6e-3, 1e-6)            # one CPU call misses the 10 ms budget
    p = _decide(cpu=slow, streams=1, cpu_busy=0.0)
    assert p.device == "gpu" and "CPU misses" in p.reason
    assert _decide(cpu=slow, gpu=CostModel(6e-3, 0.0), streams=1).device == "cpu"


def test_auto_without_cuda_places_every_group_on_the_cpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: 'auto' may use it")
    with pytest.raises(ValueError):
        Scheduler(device="auto", backend="numba", start=False)
    with pytest.raises(ValueError):
        Scheduler(accelerator="cpu", start=False)
    s = Scheduler(threads=1, device="auto", realtime=None)
    try:
        assert s.accelerator is None
        h = s.open("dau1997", FS, 64, model_kwargs=dict(flow=500.0, fhigh=2000.0),
                   measure=False, admission="best-effort", budget_ms=1000.0, history=0)
        assert getattr(h.proc, "backend", "numba") == "numba"
        assert "triton" not in h.group.label
        assert h.group.cuda_stream is None and h.group.staging is None
        p = s.placement_of(h)
        assert p.device == "cpu" and p.reason == "no GPU"
        assert s.cost_models(h)["gpu"] is None
        assert s.rebalance() == {}
    finally:
        s.close("discard")


def test_no_staging_buffer_on_the_cpu_path(monkeypatch):
    """A numba group stages nothing: no pinned buffer is allocated, no CUDA stream made,
    and batched calls still form."""
    torch = pytest.importorskip("torch")
    pinned = []
    empty = torch.empty

    def spy(*a, **k):
        if k.get("pin_memory"):
            pinned.append(a)
        return empty(*a, **k)
    monkeypatch.setattr(torch, "empty", spy)
    batches = []
    s = Scheduler(threads=2, realtime=None)
    try:
        hs = [s.open("dau1997", FS, 64, model_kwargs=dict(flow=500.0, fhigh=2000.0),
                     measure=False, admission="best-effort", budget_ms=1000.0, history=0,
                     sample_dtype="float64") for _ in range(3)]
        for h in hs:
            h.subscribe(lambda r: batches.append(r.batch))
        x = np.random.default_rng(1).standard_normal(640) * 0.05
        for k in range(0, 640, 64):
            for h in hs:
                assert h.push(x[k:k + 64], wait=True, timeout=60)
        for h in hs:
            assert h.wait_idle(timeout=60)
        g = hs[0].group
        assert g.staging is None and g.cuda_stream is None
    finally:
        s.close("discard")
    assert pinned == [] and len(batches) == 30


def test_rebalance_moves_a_group_between_devices_bit_exactly():
    """Scheduler(device='auto', accelerator='cpu'): the 'gpu' side is the Triton backend in
    its interpreter.  With nominal cost models the group stays on the CPU; cost models
    that make the CPU the tighter resource move it to the accelerator between two blocks
    (a stream opened then joins it there), and back when they no longer do.  Every
    stream's outputs equal an offline model switching backend at the same blocks."""
    pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    import rtamt

    small = dict(flow=500.0, fhigh=2000.0)
    B_ = 32
    rng = np.random.default_rng(5)
    sigs = [rng.standard_normal(6 * B_) * 0.05 for _ in range(4)]
    got = {i: [] for i in range(4)}

    def rec(i):
        def sub(r):
            y = r.outputs["dau1997"]
            got[i].append(y.numpy().copy() if isinstance(y, torch.Tensor) else y.copy())
        return sub
    kw = dict(model_kwargs=small, measure=False, admission="best-effort", budget_ms=60000.0,
              sample_dtype="float64", policy="drop-newest", history=0)
    s = Scheduler(threads=2, device="auto", accelerator="cpu", realtime=None)
    try:
        assert s.accelerator[0] == "triton" and s.accelerator[1].type == "cpu"
        hs = [s.open("dau1997", FS, B_, **kw) for _ in range(3)]
        for i, h in enumerate(hs):
            h.subscribe(rec(i))
        assert s.placement_of(hs[0]).device == "cpu"
        assert "triton" not in hs[0].group.label and s.rebalance() == {}
        pos = [0] * 4

        def feed(blocks):
            for i, h in enumerate(hs):
                a = pos[i]
                assert h.push(sigs[i][a:a + blocks * B_], wait=True, timeout=120)
                pos[i] += blocks * B_
            for h in hs:
                assert h.wait_idle(timeout=120)
        feed(2)
        cm = s.cost_models(hs[0])
        cm["cpu"].per_sample_s = 1e-3            # the CPU becomes the tighter resource
        assert s.placement_of(hs[0]).device == "gpu"
        moved = s.rebalance()
        assert list(moved.values()) == [hs[0].group.label]
        assert hs[0].group.label.endswith("/triton:cpu")
        hs.append(s.open("dau1997", FS, B_, **kw))   # joins its design's group there
        hs[3].subscribe(rec(3))
        assert hs[3].group is hs[0].group and hs[3].proc.backend == "triton"
        assert hs[0].group.staging is None and hs[0].group.cuda_stream is None
        feed(2)
        cm["cpu"].per_sample_s = 0.0
        assert s.placement_of(hs[0]).device == "cpu"
        assert "triton" not in list(s.rebalance().values())[0]
        assert all(h.proc.backend == "numba" for h in hs)
        feed(2)
        assert not s.errors, s.errors[:2]
    finally:
        s.close("discard", timeout=120)
    for i, x in enumerate(sigs):
        m = rtamt.Dau1997(FS, **small)
        parts = [("numba", 2), ("triton", 2), ("numba", 2)] if i < 3 else \
            [("triton", 2), ("numba", 2)]
        ref, a = [], 0
        for b, k in parts:
            m.to("cpu" if b == "triton" else None, backend=b)
            y = m(x[a:a + k * B_])
            ref.append(y.numpy() if isinstance(y, torch.Tensor) else y)
            a += k * B_
        assert np.array_equal(np.concatenate(got[i], axis=-1),
                              np.concatenate(ref, axis=-1)), i
