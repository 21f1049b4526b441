"""Outputs recorded before the one-framework refactor (issue 40), to prove it changes no bit.

``python tests/support/_golden.py --record`` runs every case below on the checked-out code
and writes ``tests/data/golden_outputs.json`` (a SHA-256 of every output array's dtype,
shape and bytes, the commit and the CPU it was recorded on), ``golden_outputs.npz`` (up to
257 evenly spaced values of each array, float64, for a machine whose CPU differs) and
``golden_states.pkl.gz`` (the snapshots the continuation cases load).
``tests/models/test_golden_outputs.py`` runs the same cases and compares.

Cases: the six models at their usual rates, float64 and float32, one call on 0.25 s of
noise with a tone burst and a silent gap (and float64 at ``spl_ref=80``); each model's
snapshot taken after 0.12 s, pickled, loaded into a new model and continued; the R128
meter (stereo 4.5 s in 100 ms and odd blocks; Annex 2 true peak with exact statistics;
5.1; a snapshot continued); Dau1997 (10 channels), Glasberg2002 and Moore2016 on the Triton backend
in Triton's interpreter.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import pathlib
import pickle
import subprocess
import sys
import zlib

import numpy as np

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
JSON, NPZ, STATES = (DATA / "golden_outputs.json", DATA / "golden_outputs.npz",
                     DATA / "golden_states.pkl.gz")
MODELS = {"dau1997": 48000, "osses2021": 48000, "king2019": 48000, "paulick2024": 44100,
          "glasberg2002": 32000, "moore2016": 32000}
SPLIT_S = 0.12


def signal(fs: int, seconds: float, channels: int = 1, seed: int = 40) -> np.ndarray:
    """Noise at about 70 dB SPL (spl_ref 100), a 1 kHz tone burst at 80 dB from 30 % to 55 %
    of the signal, digital silence from 70 % to 80 %: ``(T,)`` or ``(channels, T)``."""
    n = int(round(fs * seconds))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((channels, n)) * 10 ** (-30 / 20)
    t = np.arange(n) / fs
    burst = (t >= 0.30 * seconds) & (t < 0.55 * seconds)
    x[:, burst] += np.sqrt(2) * 0.1 * np.sin(2 * np.pi * 1000.0 * t[burst])
    x[:, int(0.7 * n):int(0.8 * n)] = 0.0
    return x[0] if channels == 1 else x


def _model(name: str, fs: int, **kw):
    import rtamt

    return rtamt.MODELS[name](fs, **kw)


def _model_input(name: str, fs: int, seconds: float, dtype) -> np.ndarray:
    return signal(fs, seconds, 2 if name == "moore2016" else 1).astype(dtype)


def _flatten(prefix: str, out, into: dict) -> None:
    """Arrays of a model's ``process_all`` result, or of a meter result, under
    ``prefix/key``."""
    if isinstance(out, dict):
        for k in sorted(out):
            _flatten(f"{prefix}/{k}", out[k], into)
    elif out is None:
        into[prefix] = np.array([np.nan])
    else:
        a = np.asarray(out.detach().cpu().numpy() if hasattr(out, "detach") else out)
        into[prefix] = a


def _meter_blocks(meter, x: np.ndarray, sizes) -> dict:
    """Every field of every call's result (LoudnessResult.to_json), as float64 arrays."""
    rows, i, k = [], 0, 0
    while i < x.shape[-1]:
        n = sizes[k % len(sizes)]
        rows.append(meter(x[..., i:i + n]).to_json())
        i, k = i + n, k + 1
    out = {}
    for key in rows[0]:
        vals = []
        for r in rows:
            v = r[key]
            v = [np.nan if e is None else e for e in v] if isinstance(v, list) else \
                [np.nan if v is None else (zlib.crc32(v.encode()) if isinstance(v, str) else v)]
            vals.extend(float(e) for e in v)
        out[key] = np.array(vals)
    return out


def cases(states: dict | None = None) -> dict:
    """``{case: {key: array}}``.  ``states``: the pickled snapshots to continue from (None:
    take them now, and return them under ``'_states'``)."""
    import rtamt  # noqa: F401
    from rtamt.loudness.bs1770 import LoudnessMeter

    res, taken = {}, {}
    for name, fs in MODELS.items():
        for dtype in (np.float64, np.float32):
            x = _model_input(name, fs, 0.25, dtype)
            _flatten("", _model(name, fs).process_all(x), res.setdefault(
                f"{name}/{np.dtype(dtype).name}", {}))
        x = _model_input(name, fs, 0.25, np.float64)
        _flatten("", _model(name, fs, spl_ref=80.0).process_all(x),
                 res.setdefault(f"{name}/spl_ref80", {}))
        cut = int(SPLIT_S * fs)
        if states is None:
            m = _model(name, fs)
            m.process_all(x[..., :cut])
            taken[name] = pickle.dumps(m.state_dict())
            blob = taken[name]
        else:
            blob = states[name]
        m = _model(name, fs)
        m.load_state_dict(pickle.loads(blob))
        _flatten("", m.process_all(x[..., cut:]), res.setdefault(f"{name}/continued", {}))

    x = signal(48000, 4.5, 2, seed=41)
    res["r128/stereo"] = _meter_blocks(LoudnessMeter(fs=48000, channels=2), x, [4800, 1234])
    res["r128/bs1770-exact"] = _meter_blocks(
        LoudnessMeter(fs=48000, channels=2, truepeak="bs1770", mode="exact"), x, [48000])
    x6 = signal(48000, 3.5, 6, seed=42)
    res["r128/5.1"] = _meter_blocks(LoudnessMeter(fs=48000, channels=6, layout="5.1"), x6,
                                    [4096])
    cut = 2 * 48000 + 777
    if states is None:
        m = LoudnessMeter(fs=48000, channels=2)
        m(x[:, :cut])
        taken["r128"] = pickle.dumps(m.state_dict())
    m = LoudnessMeter(fs=48000, channels=2)
    m.load_state_dict(pickle.loads(taken["r128"] if states is None else states["r128"]))
    res["r128/continued"] = _meter_blocks(m, x[:, cut:], [4800])

    # the Triton backend in Triton's interpreter (small, as its tests keep it)
    res.update(_triton_cases())
    if states is None:
        res["_states"] = taken
    return res


def _triton_cases() -> dict:
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        return {}
    import torch

    import rtamt

    out = {}
    x = signal(48000, 0.02, seed=43)
    m = rtamt.Dau1997(48000, flow=500.0, fhigh=2000.0, backend="triton", device="cpu")
    _flatten("", m.process_all(torch.from_numpy(x)), out.setdefault("triton/dau1997", {}))
    x = signal(32000, 0.03, seed=44)
    m = rtamt.Glasberg2002(32000, backend="triton", device="cpu")
    _flatten("", m.process_all(torch.from_numpy(x)), out.setdefault("triton/glasberg2002", {}))
    x = signal(32000, 0.03, 2, seed=45)
    m = rtamt.Moore2016(32000, backend="triton", device="cpu")
    _flatten("", m.process_all(torch.from_numpy(x)), out.setdefault("triton/moore2016", {}))
    return out


def digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def sample(a: np.ndarray, n: int = 257) -> np.ndarray:
    f = np.asarray(a, np.float64).ravel()
    return f[np.linspace(0, f.size - 1, min(n, f.size)).astype(np.int64)]


def cpu_name() -> str:
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name()


def record() -> None:
    res = cases()
    taken = res.pop("_states")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=DATA).stdout.strip()
    digests = {f"{c}{k}": digest(a) for c, d in res.items() for k, a in d.items()}
    JSON.write_text(json.dumps({"commit": commit, "cpu": cpu_name(),
                                "numpy": np.__version__, "digests": digests},
                               indent=1, sort_keys=True) + "\n")
    np.savez_compressed(NPZ, **{f"{c}{k}": sample(a) for c, d in res.items()
                                for k, a in d.items()})
    with gzip.open(STATES, "wb") as f:
        pickle.dump(taken, f)
    print(f"{len(digests)} arrays from {len(res)} cases at {commit[:12]} on {cpu_name()}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: TRITON_INTERPRET=1 python tests/support/_golden.py --record")
    record()
