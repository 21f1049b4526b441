"""The README's Python examples run as pasted (in order, in one namespace)."""
from __future__ import annotations

import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


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
    # the stacking example: each row of the batch is what its stream gives alone
    import rtamt
    x, fs = ns["x"], ns["fs"]
    for row, (a, b) in enumerate([(0, 4800), (9600, 14400)]):
        alone = rtamt.Dau1997(fs)
        alone(x[a:b])
        np.testing.assert_array_equal(ns["y"][row], alone(x[b:b + 4800]))
