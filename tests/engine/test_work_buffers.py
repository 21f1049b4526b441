"""The chain reuses per-stage work buffers between blocks; returned arrays must not alias them.
What it hands out is a time-last view of new time-major memory (no copy)."""
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


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_outputs_are_time_last_views_of_fresh_time_major_memory(lib):
    """Every returned array (last stage and process_all) has time on the last axis and
    time-major strides (the kernels' memory, not copied), equals its contiguous copy, and
    is neither overwritten by later blocks nor shared with another output."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3 * 128)) * 0.02
    whole = rtamt.Dau1997(16000.0).process_all(x)
    m = rtamt.Dau1997(16000.0)
    if lib == "torch":
        import torch

        conv = torch.from_numpy
        back = lambda t: t.numpy()  # noqa: E731
    else:
        conv = back = lambda a: a  # noqa: E731
    blocks = [m.process_all(conv(x[:, i:i + 128])) for i in range(0, 256, 128)]
    last = m(conv(x[:, 256:]))
    F = whole["modfb"].shape[-2]
    for outs in blocks:
        for name, y in outs.items():
            a = back(y)
            C = a.shape[-2]
            assert a.shape == (2, C, 128)
            assert a.strides == (128 * C * a.itemsize, a.itemsize, C * a.itemsize), name
    a = back(last)
    assert a.shape == (2, F, 128) and a.strides[-1] == F * a.itemsize
    got = {k: np.concatenate([back(b[k]) for b in blocks] + ([back(last)] if k == "modfb" else []),
                             axis=-1) for k in whole}
    for k, w in whole.items():
        n = got[k].shape[-1]
        np.testing.assert_array_equal(got[k], w[..., :n])
    bases = [back(y).base for outs in blocks for y in outs.values()] + [a.base]
    assert all(b is not None for b in bases)
    assert len({id(b) for b in bases}) == len(bases)


@pytest.mark.parametrize("as_chain", [False, True])
def test_signal_stage_outputs_are_not_overwritten_by_later_blocks(as_chain):
    """A signal stage's own (…, T) output (ear filters, alone or as a chain of signal
    stages) is returned as a view of new memory too: later blocks leave it alone."""
    from rtamt.ear import HeadphoneFilter, MiddleEarFilter

    fs = 16000.0
    x = np.random.default_rng(8).standard_normal((2, 3 * 64)) * 0.1

    def make():
        if as_chain:
            return rtamt.Chain([HeadphoneFilter(fs=fs, order=64), MiddleEarFilter(fs=fs, order=64)])
        return HeadphoneFilter(fs=fs, order=64)

    m = make()
    outs = [m(x[:, i:i + 64]) for i in range(0, x.shape[1], 64)]
    kept = [o.copy() for o in outs]
    m(x[:, :64] * 5)
    for o, k in zip(outs, kept):
        assert o.shape == (2, 64)
        np.testing.assert_array_equal(o, k)
    np.testing.assert_array_equal(np.concatenate(outs, axis=-1), make()(x))


def test_batch_change_via_load_state_dict_uses_fresh_buffers():
    rng = np.random.default_rng(6)
    a = rtamt.Dau1997(16000.0)
    b = rtamt.Dau1997(16000.0)
    a(rng.standard_normal(128) * 0.02)  # a has mono buffers
    x2 = rng.standard_normal((2, 256)) * 0.02
    b(x2[:, :128])
    a.load_state_dict(b.state_dict())  # a now streams a batch of 2
    np.testing.assert_array_equal(a(x2[:, 128:]), b(x2[:, 128:]))


def test_work_buffer_reuses_only_an_exact_c_contiguous_match():
    """Every stage's ``process_tm`` takes its output array from ``work_buffer``: the chain's
    buffer is reused only when shape, dtype and C-contiguity all match (the compiled
    kernels write some outputs flat), otherwise a new array is made."""
    from rtamt.engine.backend import work_buffer

    buf = np.zeros((1, 8, 3))
    assert work_buffer(buf, (1, 8, 3), np.float64) is buf
    for out, shape, dtype in [(None, (1, 8, 3), np.float64),
                              (buf, (1, 9, 3), np.float64),
                              (buf, (1, 8, 3), np.float32),
                              (np.zeros((1, 3, 8)).transpose(0, 2, 1), (1, 8, 3), np.float64)]:
        y = work_buffer(out, shape, dtype)
        assert y is not out and y.shape == shape and y.dtype == dtype and y.flags.c_contiguous
