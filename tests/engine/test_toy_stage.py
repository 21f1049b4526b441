"""A toy stage added by following docs/architecture.md (tests/support/toy/onepole.py: Params,
Weights, design, numba kernel, Triton twin, gradient rule; a few dozen lines) gets from the
framework what the real stages have, checked as for them: block-size invariance (block
size 1, random partitions, float32 and float64), states that stack and split by stream,
snapshots, the Triton path (interpreter on CI, compiled with RTAMT_TEST_DEVICE=cuda) and
gradients through rtamt.nn."""
import numpy as np
import pytest

import rtamt

from toy.onepole import OnePole

FS = 16000.0


def _x(shape, seed, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_any_partition_equals_one_call(dtype):
    x = _x((2, 3, 400), 1, dtype)
    one = OnePole(fs=FS)(x)
    assert one.shape == x.shape and one.dtype == dtype
    rng = np.random.default_rng(2)
    for cuts in ([*range(1, 400)], sorted(rng.choice(np.arange(1, 400), 7, replace=False))):
        st = OnePole(fs=FS)
        got = np.concatenate([st(p) for p in np.split(x, cuts, axis=-1)], axis=-1)
        assert np.array_equal(got, one)


def test_states_stack_split_and_snapshot():
    x, w = _x((3, 300), 3), _x((3, 300), 4)
    a, b, batch = OnePole(fs=FS), OnePole(fs=FS), OnePole(fs=FS)
    ya, yb = a(x[:, :100]), b(w[:, :100])
    batch.load_state_dict(rtamt.stack_states([a.state_dict(), b.state_dict()]))
    y = batch(np.stack([x[:, 100:], w[:, 100:]]))
    assert np.array_equal(np.concatenate([ya, y[0]], -1), OnePole(fs=FS)(x))
    assert np.array_equal(np.concatenate([yb, y[1]], -1), OnePole(fs=FS)(w))
    snap = a.state_dict()
    c = OnePole(fs=FS)
    c.load_state_dict(snap)
    assert np.array_equal(c(x[:, 100:]), a(x[:, 100:]))
    a.load_state_dict(rtamt.split_state(batch.state_dict(), 0))   # stream 0 goes on alone
    nxt = _x((3, 50), 8)
    assert np.array_equal(a(nxt), batch(np.stack([nxt, nxt]))[0])


@pytest.mark.triton
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_triton_path_matches_numba_and_is_partition_exact(dtype):
    pytest.importorskip("triton")
    from _triton import DEVICE, host

    x = _x((2, 3, 60), 5, dtype)
    ref = OnePole(fs=FS)(x)
    st = OnePole(fs=FS).to(DEVICE, backend="triton")
    parts = [host(st(p)) for p in np.split(x, [1, 17, 40], axis=-1)]
    got = np.concatenate(parts, -1)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    assert np.max(np.abs(got - ref)) <= tol * np.max(np.abs(ref))
    one = host(OnePole(fs=FS).to(DEVICE, backend="triton")(x))
    assert np.array_equal(one, got)
    st.to(backend="numba")                                  # back, the state exact
    assert isinstance(st(x[..., :5]), np.ndarray)


def test_gradients_through_rtamt_nn():
    torch = pytest.importorskip("torch")
    from torch.autograd import gradcheck

    import rtamt.nn as rn

    layer = rn.StageLayer(OnePole(fs=FS), n_in=2, learnable=True)
    _, st = layer(torch.from_numpy(_x((1, 2, 20), 6)))
    key = next(k for k in st if k != rn.DESIGN_KEY)

    def f(theta, xb, z):
        s = dict(st, **{key: z})
        y, new = torch.func.functional_call(layer, {"theta.onepole": theta}, (xb, s))
        return y, new[key]

    theta = torch.tensor([0.2], dtype=torch.float64, requires_grad=True)
    z = st[key].detach().clone().requires_grad_(True)
    xb = torch.from_numpy(_x((1, 2, 30), 7)).requires_grad_(True)
    assert gradcheck(f, (theta, xb, z), eps=1e-6, atol=1e-7, rtol=1e-5)
