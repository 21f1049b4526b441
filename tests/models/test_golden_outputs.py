"""Every output of the six models and of the R128 meter is what it was before the
one-framework refactor (issue 40 acceptance: bit-identity), and snapshots written by that
release load and continue exactly.

The reference is ``tests/data/golden_outputs.json`` (recorded by
``tests/support/_golden.py --record``; the commit and the CPU are in the file).  On the CPU
it was recorded on, every array's SHA-256 must match; on another CPU (whose compiled
kernels may round differently) 257 evenly spaced values of each array must agree within
1e-12 relative in float64 and 1e-5 in float32."""
from __future__ import annotations

import gzip
import json
import os
import pickle

import numpy as np
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")

import _golden  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def now():
    with gzip.open(_golden.STATES, "rb") as f:
        states = pickle.load(f)
    return _golden.cases(states)


REF = json.loads(_golden.JSON.read_text())


def test_the_recording_covers_every_case(now):
    """The cases run now are the cases recorded (a case cannot silently disappear)."""
    have = {f"{c}{k}" for c, d in now.items() for k in d}
    assert have == set(REF["digests"])
    assert {c.split("/")[0] for c in now} >= set(_golden.MODELS) | {"r128", "triton"}


def test_every_output_is_bit_identical_to_the_recording(now):
    same_cpu = _golden.cpu_name() == REF["cpu"]
    samples = np.load(_golden.NPZ)
    bad = []
    for c, d in now.items():
        for k, a in d.items():
            key = f"{c}{k}"
            if same_cpu:
                if _golden.digest(a) != REF["digests"][key]:
                    bad.append(key)
            else:
                ref = samples[key]
                got = _golden.sample(a)
                tol = 1e-5 if np.asarray(a).dtype == np.float32 else 1e-12
                scale = max(np.nanmax(np.abs(ref), initial=0.0), 1e-300)
                if got.shape != ref.shape or not np.array_equal(np.isnan(got), np.isnan(ref)) \
                        or np.nanmax(np.abs(got - ref), initial=0.0) > tol * scale:
                    bad.append(key)
    assert not bad, (f"{len(bad)} outputs differ from the recording at "
                     f"{REF['commit'][:12]} ({'same' if same_cpu else 'another'} CPU): "
                     + ", ".join(bad[:20]))
