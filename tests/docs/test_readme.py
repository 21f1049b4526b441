"""The README's Python examples run as pasted (in order, in one namespace)."""
from __future__ import annotations

import contextlib
import io
import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 3
    ns: dict = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"README.md python block {i}", "exec"), ns)
    # the first example is calibrated by the model itself: spl_ref set, no extra call
    assert "spl_ref" in blocks[0] and ".calibrate(" not in README.read_text()
    assert ns["model"].spl_ref == 94.0 and ns["model"].input_gain != 1.0
    assert np.isfinite(np.asarray(ns["out"]["ltl"])).all()
    # the torch-layer example: (batch, F, T) out, and the loss reached every learnable parameter
    assert tuple(ns["z"].shape) == (2, 275, 4800)
    params = list(ns["layer"].parameters())
    assert params and all(p.grad is not None and p.grad.abs().sum() > 0 for p in params)
    # the stacking example: each row of the batch is what its stream gives alone
    import rtamt
    x, fs = ns["x"], ns["fs"]
    for row, (a, b) in enumerate([(0, 4800), (9600, 14400)]):
        alone = rtamt.Dau1997(fs)
        alone(x[a:b])
        np.testing.assert_array_equal(ns["y"][row], alone(x[b:b + 4800]))


def _scheduler_example() -> str:
    """The README's scheduler example: the python block that opens ``rtamt.Scheduler()``."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    (code,) = [b for b in blocks if "rtamt.Scheduler()" in b]
    return code


def test_readme_scheduler_example_prints_no_miss_and_an_empty_queue():
    """The scheduler example, run as written after the first example (which defines
    ``fs`` and ``x``): four streams fed 40 chunks of 256 frames in real time print 0
    misses and an empty queue, every block of every stream is processed in time, and each
    equals the model run offline on the same samples, bit for bit (the ring keeps float64
    input as it is).  (Before: the example pushed 0.2 s unpaced and printed 29 misses of
    37 blocks with 128 frames queued under "everything pushed is processed".)"""
    import rtamt

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    ns: dict = {}
    exec(compile(blocks[0], "README.md python block 0", "exec"), ns)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_scheduler_example(), "README.md scheduler example", "exec"), ns)
    line = out.getvalue()
    assert re.search(r"misses 0 ", line) and re.search(r"queue 0 fr", line), line
    mics = ns["mics"]
    assert len(mics) == 4 and all(h.closed for h in mics)
    for h in mics:
        st = h.stats()
        assert (st.frames_processed, st.blocks, st.misses, st.queue_frames) == \
            (40 * 256, 40, 0, 0), st.line()
        assert st.rejected_blocks == st.dropped_frames == st.skipped_frames == 0
    x = ns["x"][:40 * 256]
    want = rtamt.Dau1997(ns["fs"])(x)[..., -256:]
    np.testing.assert_array_equal(mics[0].latest().outputs["dau1997"], want)
