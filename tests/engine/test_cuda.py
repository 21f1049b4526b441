"""Real-device tests of the Triton backend (issue 21), marked ``cuda``: they run only where
torch sees a CUDA device and the kernels are compiled (``TRITON_INTERPRET=0``), and skip
cleanly everywhere else (CI has no GPU: there the same code runs in the interpreter, in
the tests marked ``triton``)."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
                       reason="TRITON_INTERPRET is set: run with TRITON_INTERPRET=0 on a GPU"),
]

FS = 48000


def _signal(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 0.05
    x[n // 3:n // 3 + 200] *= 40.0
    return x


@pytest.mark.parametrize("name", ["dau1997", "king2019", "osses2021", "paulick2024"])
def test_models_on_the_gpu_equal_the_cpu_models(name):
    import rtamt
    from rtamt.models import MODELS
    fs = 44100 if name == "paulick2024" else FS
    x = _signal(4096, 1)
    ref = MODELS[name](fs).process_all(x)
    m = MODELS[name](fs, device="cuda")
    outs = {k: [] for k in ref}
    for part in np.array_split(np.arange(x.size), [700, 2600]):
        for k, v in m.process_all(torch.from_numpy(x[part]).cuda()).items():
            assert v.is_cuda
            outs[k].append(v.cpu().numpy())
    for k, v in ref.items():
        got = np.concatenate(outs[k], axis=-1)
        err = np.max(np.abs(got - v)) / max(np.max(np.abs(v)), 1e-300)
        assert err <= 1e-12, (name, k, err)
    assert rtamt.engine.backend.resolve(None, "cuda")[0] == "triton"


def test_snapshot_moves_between_cpu_and_gpu():
    import rtamt
    x = _signal(3000, 2)
    ref = rtamt.Dau1997(FS)(x)
    cpu = rtamt.Dau1997(FS)
    a = cpu(x[:1000])
    gpu = rtamt.Dau1997(FS, device="cuda")
    gpu.load_state_dict(cpu.state_dict())
    b = gpu(torch.from_numpy(x[1000:2000]).cuda()).cpu().numpy()
    cpu.load_state_dict(gpu.state_dict())
    c = cpu(x[2000:])
    got = np.concatenate([a, b, c], axis=-1)
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) <= 1e-12


def test_scheduler_on_the_gpu_is_exact_per_stream():
    import rtamt
    from rtamt.scheduler import Scheduler
    sigs = [_signal(2048, 10 + i) for i in range(5)]
    got = {i: [] for i in range(5)}
    with Scheduler(backend="triton", device="cuda") as s:
        hs = [s.open("dau1997", FS, 256, admission="best-effort", budget_ms=1000.0,
                     sample_dtype="float64", history=0) for _ in sigs]
        for i, h in enumerate(hs):
            h.subscribe(lambda r, i=i: got[i].append(r.outputs["dau1997"].cpu().numpy()))
        for k in range(0, 2048, 512):
            for h, x in zip(hs, sigs):
                assert h.push(x[k:k + 512], wait=True, timeout=60)
        for h in hs:
            h.close("drain", timeout=60)
    for i, x in enumerate(sigs):
        ref = rtamt.Dau1997(FS, device="cuda")(torch.from_numpy(x).cuda()).cpu().numpy()
        assert np.array_equal(np.concatenate(got[i], axis=-1), ref)


def _run_streams(s, sigs, block, got, **kw):
    hs = [s.open("dau1997", FS, block, admission="best-effort", budget_ms=1000.0,
                 sample_dtype="float64", history=0, **kw) for _ in sigs]
    for i, h in enumerate(hs):
        h.subscribe(lambda r, i=i: got[i].append(_host(r.outputs["dau1997"])))
    return hs


def _host(y):
    return y.cpu().numpy() if isinstance(y, torch.Tensor) else y.copy()


def test_cuda_group_stages_input_in_reused_pinned_buffers_on_its_own_stream(monkeypatch):
    """A CUDA group copies its input through pinned host buffers, reused from call to call
    (at most one per concurrent call and input shape, not one per block), and launches on
    its own CUDA stream; every stream stays bit-identical to its offline GPU run."""
    import rtamt
    from rtamt.scheduler import Scheduler
    pinned, empty = [], torch.empty

    def spy(*a, **k):
        t = empty(*a, **k)
        if k.get("pin_memory"):
            pinned.append(t)
        return t
    monkeypatch.setattr(torch, "empty", spy)
    sigs = [_signal(4096, 20 + i) for i in range(4)]
    got = {i: [] for i in range(4)}
    with Scheduler(threads=2, backend="triton", device="cuda", realtime=None) as s:
        hs = _run_streams(s, sigs, 256, got)
        g = hs[0].group
        assert isinstance(g.cuda_stream, torch.cuda.Stream)
        assert g.cuda_stream != torch.cuda.default_stream(g.cuda_stream.device)
        for k in range(0, 4096, 512):
            for h, x in zip(hs, sigs):
                assert h.push(x[k:k + 512], wait=True, timeout=60)
        for h in hs:
            h.close("drain", timeout=60)
        pools = [b for bufs in g.staging.values() for b in bufs]
    assert pinned and all(t.is_pinned() for t in pinned)
    shapes = {tuple(t.shape) for t in pinned}
    assert len(pinned) <= s.threads * len(shapes) < 4 * 16
    assert all(any(b is t for t in pinned) for b in pools)
    for i, x in enumerate(sigs):
        ref = rtamt.Dau1997(FS, device="cuda")(torch.from_numpy(x).cuda()).cpu().numpy()
        assert np.array_equal(np.concatenate(got[i], axis=-1), ref), i


def test_auto_placement_moves_a_group_to_the_gpu_and_back_exactly():
    """Scheduler(device='auto') on a CUDA machine: the accelerator is the GPU; cost models
    that make the CPU the tighter resource move the group there between two blocks
    (rebalance), and back; outputs equal an offline model switching at the same blocks."""
    import rtamt
    from rtamt.scheduler import Scheduler
    B_ = 256
    sigs = [_signal(6 * B_, 40 + i) for i in range(3)]
    got = {i: [] for i in range(3)}
    with Scheduler(threads=2, device="auto", realtime=None) as s:
        assert s.accelerator[0] == "triton" and s.accelerator[1].type == "cuda"
        hs = _run_streams(s, sigs, B_, got, measure=False)

        def feed(a, b):
            for h, x in zip(hs, sigs):
                assert h.push(x[a * B_:b * B_], wait=True, timeout=60)
            assert all(h.wait_idle(timeout=60) for h in hs)
        feed(0, 2)
        cm = s.cost_models(hs[0])
        cm["cpu"].per_sample_s, cm["gpu"].per_sample_s = 1e-3, 0.0
        assert s.placement_of(hs[0]).device == "gpu"
        s.rebalance()
        assert hs[0].group.cuda_stream is not None and hs[0].proc.device.type == "cuda"
        feed(2, 4)
        cm["cpu"].per_sample_s = 0.0
        s.rebalance()
        assert hs[0].group.cuda_stream is None
        feed(4, 6)
        for h in hs:
            h.close("drain", timeout=60)
        assert not s.errors
    for i, x in enumerate(sigs):
        m = rtamt.Dau1997(FS)
        a = m(x[:2 * B_])
        m.to("cuda")
        b = m(torch.from_numpy(x[2 * B_:4 * B_]).cuda()).cpu().numpy()
        m.to(backend="numba")
        c = m(x[4 * B_:])
        assert np.array_equal(np.concatenate(got[i], axis=-1), np.concatenate([a, b, c], -1))
