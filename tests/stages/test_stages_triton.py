"""Triton = numba for every stage that runs on the Triton backend, as each of its examples
builds its first example (the stages are found, not listed: tests/support/_examples.py).

A stage moved to the Triton backend (``to(DEVICE, backend="triton")``; the interpreter on
CPU, compiled with ``RTAMT_TEST_DEVICE=cuda``) is fed the same blocks as one on numba, in
a partition with 1-sample and empty-remainder blocks: every output and the final state
agree within :data:`_kernel_twins.TOL`; one call on Triton gives the partition's output
exactly; moved back to numba, the stage continues on numpy arrays as the numba one does.
Sizes are small: the interpreter runs every operation of a sample loop as a numpy call."""
from __future__ import annotations

import numpy as np
import pytest

from _examples import cases, example_input, make
from _helpers import state_arrays
from _kernel_twins import TOL
from _triton import DEVICE, dev, host

T = 48
CUTS = [0, 1, 17, 40, T]


def _on_triton(cls, ex) -> bool:
    """The first example of every stage on samples that runs on Triton."""
    from _examples import on_samples

    return on_samples(cls, ex) and cls.triton_ready and ex.id == cls.examples()[0].id


def _rel(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = np.nanmax(np.abs(ref)) if np.any(np.isfinite(ref)) else 0.0
    same_nan = np.array_equal(np.isnan(got), np.isnan(ref))
    if not same_nan:
        return np.inf
    diff = np.nanmax(np.abs(got - ref)) if np.any(np.isfinite(ref)) else 0.0
    return 0.0 if diff == 0 else diff / scale


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("cls, ex", cases(where=_on_triton))
def test_stage_triton_equals_numba(cls, ex, dtype):
    if not ex.takes(dtype):
        pytest.skip(f"{ex.id} takes {ex.dtypes}")
    x = example_input(ex, T + 8, dtype, start=1500)     # inside the re-onset
    tol = TOL[dtype]
    ref_stage, tri = make(cls, ex), make(cls, ex).to(DEVICE, backend="triton")
    assert tri.backend == "triton"
    ref, got = [], []
    for a, b in zip(CUTS[:-1], CUTS[1:]):
        ref.append(np.asarray(ref_stage(x[..., a:b])))
        got.append(host(tri(dev(x[..., a:b].copy()))))
    for r, g in zip(ref, got):
        assert g.dtype == r.dtype
        assert _rel(g, r) <= tol, (ex.id, _rel(g, r))
    ref_st, tri_st = state_arrays(ref_stage.state_dict()), state_arrays(tri.state_dict())
    assert set(ref_st) == set(tri_st)
    for k in ref_st:
        assert _rel(tri_st[k], ref_st[k]) <= tol, (ex.id, k, _rel(tri_st[k], ref_st[k]))
    if ex.streamed:
        one = host(make(cls, ex).to(DEVICE, backend="triton")(dev(x[..., :T].copy())))
        assert np.array_equal(one, np.concatenate(got, axis=-1), equal_nan=True), ex.id
    tri.to(backend="numba")                             # back, the state exact
    tail = x[..., T:]
    y_back = tri(tail)
    assert isinstance(y_back, np.ndarray)
    assert _rel(y_back, ref_stage(tail)) <= tol, ex.id
