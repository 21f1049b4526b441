"""`rtamt process` / `rtamt models` on real WAV files, and latency_bench's JSON."""
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from scipy.io import wavfile

import rtamt
from rtamt.modulation import to_padded
from rtamt_apps.cli import main

from _helpers import entry_point

FS = 16000
#: every output at full rate in float64, modfb NaN-padded (what the references hold)
FULL = ["--outputs", "all", "--frame-rate", "0", "--store-dtype", "float64", "--padded"]


def _signal(n=6000, ch=1, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / FS
    x = 0.05 * np.sin(2 * np.pi * 1000 * t) * (1 + np.sin(2 * np.pi * 8 * t)) / 2
    x = np.stack([x + 0.01 * rng.standard_normal(n) for _ in range(ch)])
    return x


def _reference(x, spl_ref=100.0, dtype=np.float64):
    m = rtamt.Dau1997(FS, spl_ref=spl_ref)      # the model applies spl_ref itself
    xin = x.astype(dtype)
    out = m.process_all(xin[0] if xin.shape[0] == 1 else xin)
    out["modfb"] = to_padded(out["modfb"], m["modfb"].coeffs)
    return m, out


@pytest.mark.parametrize("kind", ["int16", "int32", "float32"])
def test_process_wav_matches_direct_processing(tmp_path, kind):
    x = _signal()
    if kind == "int16":
        data = np.round(x[0] * 32767).astype(np.int16)
        xr = data / 32768.0
    elif kind == "int32":
        data = np.round(x[0] * (2 ** 31 - 1)).astype(np.int32)
        xr = data / 2147483648.0
    else:
        data = x[0].astype(np.float32)
        xr = data.astype(np.float64)
    wav = tmp_path / f"in_{kind}.wav"
    wavfile.write(wav, FS, data)
    out = tmp_path / "out.npz"
    assert main(["process", str(wav), "--block", "random", *FULL, "--out", str(out)]) == 0
    r = np.load(out)
    m, ref = _reference(xr[None, :])
    for k in ("gammatone", "ihc", "adaptloop", "modfb"):
        assert r[k].shape == ref[k].shape
        np.testing.assert_array_equal(r[k], ref[k])
    assert float(r["fs"]) == FS
    np.testing.assert_allclose(r["fc"], m.fc)
    np.testing.assert_array_equal(np.isnan(r["mfc"]), np.isnan(m.mfc))
    assert r["block_sizes"].sum() == xr.size and r["block_sizes"].min() == 1


def test_process_stereo_float32_and_spl_ref(tmp_path):
    x = _signal(ch=2)
    wav = tmp_path / "st.wav"
    wavfile.write(wav, FS, x.T.astype(np.float32))
    out = tmp_path / "o.npz"
    assert main(["process", str(wav), "--block", "100", "--dtype", "float32", *FULL[:4],
                 "--spl-ref", "94", "--out", str(out)]) == 0
    r = np.load(out)
    _, ref = _reference(x.astype(np.float32).astype(np.float64), spl_ref=94, dtype=np.float32)
    assert r["adaptloop"].shape == (2, 20, x.shape[1]) or r["adaptloop"].shape[0] == 2
    assert r["adaptloop"].dtype == np.float32
    np.testing.assert_array_equal(r["adaptloop"], ref["adaptloop"])
    # 94 dB reference makes the same file 6 dB quieter inside the model than spl_ref=100
    _, ref100 = _reference(x.astype(np.float32).astype(np.float64), spl_ref=100, dtype=np.float32)
    assert np.abs(r["gammatone"]).max() < np.abs(ref100["gammatone"]).max()


def test_sample_rate_mismatch_is_an_error(tmp_path, capsys):
    wav = tmp_path / "a.wav"
    wavfile.write(wav, 44100, (_signal()[0] * 1000).astype(np.int16))
    assert main(["process", str(wav), "--fs", "48000", "--out", str(tmp_path / "o.npz")]) == 2
    err = capsys.readouterr().err
    assert "sample rate mismatch" in err and "44100" in err
    assert not (tmp_path / "o.npz").exists()


def test_unreadable_and_missing_input(tmp_path, capsys):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not a wav file")
    assert main(["process", str(bad)]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["process"]) == 2


def test_demo_and_models_via_entry_point(tmp_path):
    out = tmp_path / "demo.npz"
    r = subprocess.run([entry_point(), "process", "--demo", "--block", "64", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "30 auditory channels" in r.stdout and "modfb" in r.stdout
    d = np.load(out)
    # the defaults: modfb only, packed (275 filters), 100 Hz frames, float32
    assert d["modfb"].shape == (275, 200) and d["modfb"].dtype == np.float32
    r = subprocess.run([entry_point(), "models"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "dau1997" in r.stdout and "modfb" in r.stdout


def test_latency_bench_json():
    r = subprocess.run([sys.executable, "-m", "latency_bench", "--model", "dau1997",
                        "--fs", "48000", "--block", "64", "--seconds", "0.25", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    for k in ("model", "fs", "block", "device", "threads", "n_blocks", "rtf", "p50_us", "p99_us",
              "max_us", "budget_us", "misses", "warmup_s"):
        assert k in res
    assert res["n_blocks"] == int(0.25 * 48000) // 64
    assert res["threads"] == 1
    assert abs(res["budget_us"] - 64 / 48000 * 1e6) < 1e-6
    assert 0 < res["p50_us"] <= res["p99_us"] <= res["max_us"]
    assert 0 <= res["misses"] <= res["n_blocks"]


# ----------------------------------------------------------------- library / apps line
_LIB_IMPORTS_NO_APPS = (
    "import sys, rtamt, rtamt.runtime, rtamt.calibration, rtamt.models, rtamt.loudness.ansi, "
    "rtamt.ear\n"
    "bad = [m for m in sys.modules if m == 'apps' or m.startswith('apps.') "
    "or m.startswith('rtamt_apps')]\n"
    "assert not bad, bad\n")


def test_library_imports_no_apps(tmp_path):
    """The library loads none of the apps (run outside the repository, as a user would)."""
    r = subprocess.run([sys.executable, "-c", _LIB_IMPORTS_NO_APPS], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def test_apps_installed_as_rtamt_apps_only(tmp_path):
    """Outside the repository `rtamt_apps` (with `python -m rtamt_apps`) is importable and
    no top-level `apps` package exists; the library has no `__main__`."""
    code = ("import importlib.util as u, rtamt_apps.cli\n"
            "assert u.find_spec('apps') is None, u.find_spec('apps')\n"
            "assert u.find_spec('rtamt.__main__') is None\n"
            "assert u.find_spec('rtamt.cli') is None\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "rtamt_apps", "--help"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "usage: rtamt" in r.stdout, r.stderr


def test_pyproject_lists_every_package():
    """pyproject.toml lists packages by hand (because of the apps/ -> rtamt_apps mapping):
    every package folder must be there, and nothing installs as `apps`."""
    tomllib = pytest.importorskip("tomllib")
    root = pathlib.Path(__file__).resolve().parents[2]
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert cfg["package-dir"] == {"rtamt_apps": "apps"}
    listed = set(cfg["packages"])
    found = {".".join(p.parent.relative_to(root).parts)
             for top in ("rtamt", "latency_bench") for p in (root / top).rglob("__init__.py")}
    found |= {"rtamt_apps." + ".".join(p.parent.relative_to(root / "apps").parts)
              for p in (root / "apps").rglob("__init__.py")}
    found = {f.rstrip(".") for f in found}
    assert listed == found
    assert not any(p == "apps" or p.startswith("apps.") for p in listed)


# ------------------------------------------------- optional parts (issue 29 items 13-15)
# Runs `rtamt` in a subprocess where some modules cannot be imported: a meta-path finder
# in front of every other makes "missing" ones raise ModuleNotFoundError (not installed)
# and "broken" ones raise OSError when loaded (sounddevice without the PortAudio library
# raises "PortAudio library not found").  Then it prints which heavy modules were loaded.
_WITHOUT = """
import importlib.abc, importlib.util, json, sys
MISSING, BROKEN, ARGV = json.loads(sys.argv[1])

class Block(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in MISSING:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        if top in BROKEN:
            return importlib.util.spec_from_loader(name, self)
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        raise OSError("PortAudio library not found")

sys.meta_path.insert(0, Block())
from rtamt_apps.cli import main
rc = main(ARGV)
print("LOADED", json.dumps(sorted(m for m in ("numba", "scipy", "torch", "PySide6", "shiboken6",
      "pyqtgraph", "sounddevice") if sys.modules.get(m) is not None)))
sys.exit(rc)
"""


def _rtamt_without(argv, missing=(), broken=(), cwd=None):
    r = subprocess.run([sys.executable, "-c", _WITHOUT,
                        json.dumps([list(missing), list(broken), list(argv)])],
                       capture_output=True, text=True, timeout=600, cwd=cwd)
    loaded = json.loads(r.stdout.rsplit("LOADED", 1)[1]) if "LOADED" in r.stdout else None
    return r, loaded


_QT = ("PySide6", "shiboken6", "pyqtgraph")


def test_headless_install_processes_the_demo_and_monitor_says_what_to_install(tmp_path):
    """Without Qt and pyqtgraph (a plain `pip install rtamt`, no [monitor] extra): the main
    job runs, and `rtamt monitor` says in one line what to install (exit 1, not the
    usage-error 2; before, it died with a ModuleNotFoundError traceback)."""
    r, loaded = _rtamt_without(["process", "--demo", "--block", "4096"], missing=_QT)
    assert r.returncode == 0, r.stderr
    assert "steady state:" in r.stdout
    assert not set(loaded) & set(_QT)
    r, _ = _rtamt_without(["monitor", "--input", "demo", "--seconds", "0.5", "--screenshot",
                           str(tmp_path / "m.png")], missing=_QT)
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("rtamt monitor: "), r.stderr
    assert "pip install 'rtamt[monitor]'" in r.stderr
    assert not (tmp_path / "m.png").exists()
    r, _ = _rtamt_without(["monitor", "--help"], missing=_QT)   # the options still show
    assert r.returncode == 0 and "--screenshot" in r.stdout, r.stderr


def test_devices_without_portaudio_is_not_a_usage_error():
    """sounddevice present but the PortAudio library missing: one line saying to install
    libportaudio2, exit 1 (before: exit 2, the usage-error status)."""
    r, _ = _rtamt_without(["devices"], broken=["sounddevice"])
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("rtamt devices: "), r.stderr
    assert "libportaudio2" in r.stderr
    r, _ = _rtamt_without(["devices"], missing=["sounddevice"])
    assert r.returncode == 1 and "pip install sounddevice" in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", ["meter", "stream"])
def test_device_input_without_portaudio_is_not_a_usage_error(cmd):
    """A live app reading a device when the PortAudio library is missing: one line saying
    what to install, exit 1, as `rtamt devices` (before: exit 2)."""
    r, _ = _rtamt_without([cmd, "--input", "default", "--seconds", "1"], broken=["sounddevice"])
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.strip().count("\n") == 0 and "libportaudio2" in r.stderr, r.stderr


@pytest.mark.parametrize("argv", [["--help"], ["models"], ["process", "--help"]])
def test_help_and_models_load_no_numba_scipy_or_torch(argv):
    """`rtamt --help` and `rtamt models` import only what they print (before: every
    command's module, hence rtamt with numba and scipy, 1-2 s)."""
    r, loaded = _rtamt_without(argv)
    assert r.returncode == 0, r.stderr
    heavy = {"numba", "scipy", "torch"} if argv != ["process", "--help"] else {"torch"}
    assert not set(loaded) & heavy, loaded
    assert not set(loaded) & set(_QT)


def test_models_listing_read_from_source_equals_the_imported_classes():
    """`rtamt models` reads the model sources (ast) instead of importing them; the text is
    the one inspect gives on the imported classes."""
    from rtamt_apps import models

    assert models.describe_from_source() == models.describe_imported()
