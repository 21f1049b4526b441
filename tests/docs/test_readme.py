"""The README's Python examples run as pasted (in order, in one namespace)."""
from __future__ import annotations

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


def test_readme_scheduler_example_processes_every_sample():
    """The scheduler example: four streams, each fed 9600 samples in 480-sample chunks,
    are drained on exit (the partial last block too) and equal the model run offline on
    the same samples, bit for bit (the ring keeps float64 input as it is)."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    ns: dict = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"README.md python block {i}", "exec"), ns)
    import rtamt
    mics = ns["mics"]
    assert len(mics) == 4 and all(h.closed for h in mics)
    for h in mics:
        st = h.stats()
        assert st.frames_processed == 9600 and st.blocks == 38 and st.rejected_blocks == 0
    x = ns["x"][:9600]
    last = 9600 - 37 * 256                          # the partial last block: 128 samples
    want = rtamt.Dau1997(ns["fs"])(x)[..., -last:]
    np.testing.assert_array_equal(mics[0].latest().outputs["dau1997"], want)
