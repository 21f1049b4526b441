import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

"""Glasberg2002 and Moore2016 on the Triton backend (Triton's interpreter on CPU tensors)
against the numba models: every frame output of a Glasberg2002 batch, a Moore2016 diotic
stream and a batched stereo Moore2016 stream, under random block partitions (the Triton
path bit-identical to one call), snapshots crossing backends both ways, ``.to()`` moving a
live stream, float32 input.

Every kernel runs on Triton, the lower skirt included: its float32 roex weights use
rtamt's own ``exp2_neg_f32``/``log_f64`` with numba's FMAs, so every output must agree
with numba to 1e-12 relative (float64 input; float32 input: 1e-6).  The streams are
warmed up on numba (a snapshot of ~80 ms of signal, loaded into both backends) and then
run a few frames only: the interpreter is slow."""

import numpy as np  # noqa: E402

import rtamt  # noqa: E402
from rtamt.engine import backend as B  # noqa: E402

from _helpers import state_arrays  # noqa: E402
from _triton import DEVICE, dev, host  # noqa: E402

FS = 32000
TOL = 1e-12


def _rel(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    if a.size == 0:
        return 0.0
    return float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-300))


def _np(v):
    return host(v) if B.is_tensor(v) else np.asarray(v)


def _signal(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 0.05
    t = np.arange(shape[-1]) / FS
    return x + 0.1 * np.sin(2 * np.pi * 1000.0 * t)


CASES = {
    "glasberg_batch": (lambda **k: rtamt.Glasberg2002(FS, **k), (2,)),
    "moore_diotic": (lambda **k: rtamt.Moore2016(FS, **k), ()),
    "moore_stereo_batch": (lambda **k: rtamt.Moore2016(FS, **k), (2, 2)),
    # the Cambridge program's configuration (issue 41): the linear-phase ear FIR on the
    # waveform (the ear filters' fir_tm twin) and the component floor (its torch twin)
    "moore_tvl2018_stereo": (lambda **k: rtamt.Moore2016(FS, config="tvl2018", **k), (2,)),
}


def _warm(make, lead, seed):
    """A numba model's snapshot after 80 ms of signal, and the next block (3 frames +)."""
    m = make()
    m(_signal(lead + (2560,), seed))
    return m.state_dict(), _signal(lead + (3 * 32 + 7,), seed + 1)


def _cuts(T, rng, n=2):
    """Two random cuts and one at 3 samples (a block that completes no frame)."""
    return np.unique(np.concatenate([[3], rng.choice(np.arange(4, T), n, replace=False)]))


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_numba_and_partition_exact(case):
    make, lead = CASES[case]
    sd, x = _warm(make, lead, 3)
    ref = make()
    ref.load_state_dict(sd)
    want = ref(x)
    tri = make(backend="triton", device=DEVICE)
    assert (tri.backend, str(tri.device)) == ("triton", "cpu")
    tri.load_state_dict(sd)
    one = tri(x)
    assert set(one) == set(want)
    for k, v in want.items():
        assert B.is_tensor(one[k]) and one[k].dtype == torch.float64, k
        assert _rel(v, _np(one[k])) <= TOL, (k, _rel(v, _np(one[k])))
    # any partition gives the same bits on the Triton path
    tri2 = make(backend="triton", device=DEVICE)
    tri2.load_state_dict(sd)
    cuts = _cuts(x.shape[-1], np.random.default_rng(7))
    parts = [tri2(b) for b in np.split(x, cuts, axis=-1)]
    for k in want:
        cat = np.concatenate([_np(p[k]) for p in parts], axis=-1)
        assert np.array_equal(cat, _np(one[k])), k
    for k, v in state_arrays(tri.state_dict()).items():
        assert type(v) is np.ndarray
        assert np.array_equal(v, state_arrays(tri2.state_dict())[k]), k
        assert _rel(state_arrays(ref.state_dict())[k], v) <= TOL, k


def test_full_triton_path_float32_input():
    """float32 blocks give float32 tensors (1e-6 of numba's float32 outputs); the frame
    times are the numba model's, as float64 tensors."""
    make, lead = CASES["moore_stereo_batch"][0], (2,)
    sd, x = _warm(make, lead, 5)
    x = x[..., :3 * 32].astype(np.float32)
    sd["stream"]["dtype"] = "float32"
    ref = make()
    ref.load_state_dict(sd)
    want = ref(x)
    tri = make(backend="triton", device=DEVICE)
    tri.load_state_dict(sd)
    got = tri(dev(x))
    for k, v in want.items():
        g = got[k]
        assert B.is_tensor(g) and g.device.type == DEVICE, k
        assert g.dtype == (torch.float64 if k == "frame_time" else torch.float32), k
        assert _rel(np.asarray(v, np.float64), _np(g).astype(np.float64)) <= 1e-6, k
    assert np.array_equal(_np(got["frame_time"]), want["frame_time"])


def test_snapshot_triton_to_numba_and_to():
    """A Triton stream's snapshot continues on numba; ``.to()`` moves a live stream
    numba -> Triton -> numba, each step within 1e-12 of a numba-only run."""
    make, lead = CASES["moore_stereo_batch"][0], (2,)
    sd, x = _warm(make, lead, 11)
    a, b = x[..., :70], x[..., 70:]
    ref = make()
    ref.load_state_dict(sd)
    w1, w2 = ref(a), ref(b)
    tri = make(backend="triton", device=DEVICE)
    tri.load_state_dict(sd)
    tri(a)
    back = make()
    back.load_state_dict(tri.state_dict())
    assert back.backend == "numba" and back.device is None
    o2 = back(b)
    for k, v in w2.items():
        assert type(o2[k]) is np.ndarray
        assert _rel(v, o2[k]) <= TOL, k
    # .to(): numba (first block) -> Triton (second block) -> numba (state back on the host)
    m = make()
    m.load_state_dict(sd)
    o1 = m(a)
    assert m.to(DEVICE, backend="triton") is m and m.backend == "triton"
    assert all(B.is_tensor(v) for s, d in m.state.items() for k, v in d.items() if k != "n")
    assert type(m.state["spectrum"]["n"]) is np.ndarray
    o2 = m(b)
    for k in w1:
        assert _rel(w1[k], o1[k]) == 0.0, k
        assert _rel(w2[k], _np(o2[k])) <= TOL, k
    m.to(backend="numba")
    assert m.backend == "numba" and all(type(v) is np.ndarray for d in m.state.values()
                                        for v in d.values())
    for k, v in state_arrays(m.state_dict()).items():
        assert _rel(state_arrays(ref.state_dict())[k], v) <= TOL, k


def test_identity_and_errors():
    """The backend is not part of the design (snapshots cross backends); a wrong backend
    is refused before anything changes; the numba path never imports the Triton kernels
    anew (its outputs stay numpy)."""
    g = rtamt.Glasberg2002(FS)
    gt = rtamt.Glasberg2002(FS, backend="triton", device=DEVICE)
    assert g.design_identity() == gt.design_identity()
    with pytest.raises(B.RtamtBackendError):
        g.to(backend="cuda-ish")
    assert g.backend == "numba" and g.device is None
    out = g(_signal((40,), 1))
    assert all(type(v) is np.ndarray for v in out.values())
