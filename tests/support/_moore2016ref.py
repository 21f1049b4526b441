"""The stored Moore2016 reference data (tests/data/moore2016_ref: the Cambridge loudness
program's output, see the README there) for the tests that compare rtamt with it: the
``.npz`` and the signal recipes of ``make_reference.py`` (importable without the program:
it needs only numpy until it is run)."""
from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np

REFDIR = pathlib.Path(__file__).resolve().parents[1] / "data" / "moore2016_ref"


def make_reference():
    """The module ``make_reference.py`` (``base_signal``, ``ears``, ...)."""
    spec = importlib.util.spec_from_file_location("_moore2016_make_reference",
                                                  REFDIR / "make_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load() -> dict:
    """Every array of the ``.npz``, ``meta`` parsed, ``mk`` the recipes' module."""
    with np.load(REFDIR / "moore2016_ref.npz") as d:
        data = {k: d[k] for k in d.files}
    data["meta"] = json.loads(str(data["meta"]))
    data["mk"] = make_reference()
    return data


def signal(ref: dict, case: str) -> np.ndarray:
    """(2, T) the left/right signal of ``case`` (``<name>__<version>``) re-created."""
    name, version = case.split("__")
    rec = next(r for r in ref["meta"]["recipes"] if r["name"] == name)
    carrier = ref.get(f"{name}__carrier")
    return ref["mk"].ears(ref["mk"].base_signal(rec, carrier=carrier), version)


def run_like_the_program(m, x: np.ndarray, fs: float = 32000.0, hop: int = 32) -> dict:
    """``m``'s outputs (a Moore2016) on ``x`` (2, T), followed by zeros as the program pads
    its input, with the program's start: it has no frame before t = 0, so its AGCs start
    from zero at frame 0 (t = 0 ms).  ``m``'s frames before t = 0 (windows reaching into
    the signal) are computed, then the two AGC states are set to zero, as the program's."""
    x = np.concatenate([x, np.zeros((2, 4096 + 2 * hop))], axis=1)
    e0 = int(round(m.latency_s * fs)) - hop      # the frame at t = -1 ms ends at this sample
    first = m(x[:, :e0])
    assert abs(first["frame_time"][-1] + 1e-3) < 1e-9, first["frame_time"][-1]
    for name in ("specific_loudness_agc", "binaural_inhibition"):
        for v in m[name].state.values():
            v[...] = 0.0
    out = m(x[:, e0:])
    assert abs(out["frame_time"][0]) < 1e-9, out["frame_time"][0]
    return out
