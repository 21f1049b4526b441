"""The README's cluster example (a ```py block: the Python-block test does not run it,
since it starts Ray) runs as written on a local Ray cluster."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"

pytest.importorskip("ray", reason="the cluster example needs Ray: pip install 'rtamt[cluster]'")


@pytest.mark.timeout(180)
def test_readme_cluster_example_runs():
    (code,) = [b for b in re.findall(r"```py\n(.*?)```", README.read_text(), flags=re.S)
               if "Cluster.local" in b]
    fs = 48000.0
    ns = {"fs": fs, "x": 0.05 * np.random.default_rng(0).standard_normal(int(fs))}
    exec(compile(code, "README.md cluster example", "exec"), ns)
    h = ns["h"]
    assert h.worker in (0, 1) and h.latest().seq == 4800 // 256 - 1
    assert h.latest().outputs["dau1997"].shape[-1] == 256
