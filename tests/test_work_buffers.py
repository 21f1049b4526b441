"""The chain reuses per-stage work buffers between blocks; returned arrays must not alias them."""
import numpy as np
import pytest

import rtamt


def test_returned_blocks_are_not_overwritten_by_later_blocks():
    rng = np.random.default_rng(5)
    x = rng.standard_normal(4 * 256) * 0.02
    m = rtamt.Dau1997(16000.0)
    outs = [m(x[i:i + 256]) for i in range(0, x.size, 256)]
    kept = [o.copy() for o in outs]
    m(x[:256] * 3)  # another block through the same buffers
    for o, k in zip(outs, kept):
        np.testing.assert_array_equal(o, k)
    np.testing.assert_array_equal(np.concatenate(outs, axis=-1), rtamt.Dau1997(16000.0)(x))


def test_batch_change_via_load_state_dict_uses_fresh_buffers():
    rng = np.random.default_rng(6)
    a = rtamt.Dau1997(16000.0)
    b = rtamt.Dau1997(16000.0)
    a(rng.standard_normal(128) * 0.02)  # a has mono buffers
    x2 = rng.standard_normal((2, 256)) * 0.02
    b(x2[:, :128])
    a.load_state_dict(b.state_dict())  # a now streams a batch of 2
    np.testing.assert_array_equal(a(x2[:, 128:]), b(x2[:, 128:]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1, 5), (2, 7, 3), (1, 4, 4), (3, 1030, 261), (1, 256, 260)])
def test_transpose_kernel_equals_numpy(shape, dtype):
    """The tiled time-major -> time-last copy behind every public output moves each value
    exactly once to its place (tile edges: T and F not multiples of 4, batch > 1)."""
    from rtamt.engine.kernels import transpose_tm

    y = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    out = np.full((shape[0], shape[2], shape[1]), np.nan, dtype)
    transpose_tm(y, out)
    assert np.array_equal(out, y.transpose(0, 2, 1))


def test_work_buffer_reuses_only_an_exact_c_contiguous_match():
    """Every stage's ``process_tm`` takes its output array from ``work_buffer``: the chain's
    buffer is reused only when shape, dtype and C-contiguity all match (the compiled
    kernels write some outputs flat), otherwise a new array is made."""
    from rtamt.engine.stage import work_buffer

    buf = np.zeros((1, 8, 3))
    assert work_buffer(buf, (1, 8, 3), np.float64) is buf
    for out, shape, dtype in [(None, (1, 8, 3), np.float64),
                              (buf, (1, 9, 3), np.float64),
                              (buf, (1, 8, 3), np.float32),
                              (np.zeros((1, 3, 8)).transpose(0, 2, 1), (1, 8, 3), np.float64)]:
        y = work_buffer(out, shape, dtype)
        assert y is not out and y.shape == shape and y.dtype == dtype and y.flags.c_contiguous
