"""Start-up: what importing rtamt pulls in, the kernel warm-up (rtamt.engine.jit.warmup)
and the summary of `rtamt process`, which reports the one-time kernel load/compile apart
from the steady-state real-time factor.  Behaviour only; wall times are in docs/startup.md."""
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import rtamt
from rtamt.engine import jit
from rtamt.engine.jit import WarmupStep, warmup
from rtamt_apps.cli import main

FS = 32000.0


def _run_py(code, **env):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, **env), timeout=600)
    assert r.returncode == 0, r.stderr
    return r


def test_import_rtamt_does_not_import_heavy_or_app_modules():
    r = _run_py("import sys, rtamt\n"
                "print(sorted(m for m in ('torch', 'pyqtgraph', 'PySide6', 'sounddevice',"
                " 'rtamt_apps', 'scipy.io') if m in sys.modules))")
    assert r.stdout.strip() == "[]"


def test_import_rtamt_loads_its_parts_on_first_use(tmp_path):
    """Issue 39: `import rtamt` imported every model, the scheduler and numba (and through
    them scipy.signal and scipy.stats), so `rtamt loudness` paid for all of them.  Now the
    package's names are imported on first use: `import rtamt` loads none of that,
    `rtamt.Moore2016`, `from rtamt import MODELS` and `rtamt.models` work as before, and a
    state of a kind not yet imported still stacks."""
    import pickle

    m = rtamt.Dau1997(16000.0)
    m(np.zeros(160))
    path = tmp_path / "state.pkl"
    path.write_bytes(pickle.dumps(m.state_dict()))
    r = _run_py(
        "import pickle, sys, rtamt\n"
        "heavy = ('numba', 'scipy', 'rtamt.models', 'rtamt.scheduler', 'rtamt.engine.stage')\n"
        "print(sorted(k for k in heavy if k in sys.modules))\n"
        f"st = pickle.loads(open({str(path)!r}, 'rb').read())\n"
        "print(rtamt.stack_states([st, st])['stream']['batch'])\n"
        "from rtamt import MODELS, Scheduler\n"
        "print(rtamt.Moore2016.__name__, sorted(MODELS) == sorted(rtamt.models.MODELS),\n"
        "      Scheduler is rtamt.scheduler.Scheduler, rtamt.__version__,\n"
        "      set(rtamt.__all__) <= set(dir(rtamt)))\n")
    lines = r.stdout.splitlines()
    assert lines == ["[]", "2", "Moore2016 True True 0.1.0 True"], r.stdout


def test_every_subpackage_is_reached_from_a_bare_import():
    """``rtamt.<name>`` after a bare ``import rtamt`` works for every module and subpackage
    of the package (the lazy loader lists them by hand, as it imports without importlib),
    and an unknown name is an AttributeError."""
    import pathlib

    root = pathlib.Path(rtamt.__file__).parent
    have = sorted(p.stem if p.is_file() else p.name for p in root.iterdir()
                  if (p.suffix == ".py" and p.stem != "__init__")
                  or (p.is_dir() and (p / "__init__.py").exists()))
    assert sorted(rtamt._SUBMODULES) == have
    r = _run_py("import rtamt\n"
                f"print(all(getattr(rtamt, n).__name__ == 'rtamt.' + n for n in {have!r}))\n"
                "try:\n    rtamt.nonexistent\nexcept AttributeError as e:\n    print(e)\n")
    assert r.stdout.splitlines() == ["True", "module 'rtamt' has no attribute 'nonexistent'"]


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="FTZ/DAZ through MXCSR is x86 only")
def test_processing_flushes_denormals_without_importing_torch():
    r = _run_py("import sys, numpy as np, rtamt\n"
                "rtamt.Dau1997(16000.0)(np.zeros(64))\n"
                "print('torch' in sys.modules, np.array([1e-310])[0] * 1.0)")
    assert r.stdout.split() == ["False", "0.0"]   # DAZ: the subnormal input reads as 0


def _blocks(seed=0, n=4000):
    return np.random.default_rng(seed).standard_normal(n) * 0.02


@pytest.mark.parametrize("name", ["dau1997", "moore2016"])
def test_warmup_leaves_the_model_untouched(name):
    x = _blocks()
    ref = rtamt.MODELS[name](FS)
    ref(x[:1000])
    m = rtamt.MODELS[name](FS)
    assert m.state_dict()["stream"] is None
    warmup(m, "float64")
    assert m.state_dict()["stream"] is None          # a fresh model stays fresh
    m(x[:1000])
    before = m.state_dict()
    warmup(m, "float64")                             # and a running one is not advanced
    after = m.state_dict()
    assert after["block"] == before["block"]
    for a, b in zip(_leaves(before), _leaves(after)):
        np.testing.assert_array_equal(a, b)
    want = ref.process_all(x[1000:])
    for k, v in m.process_all(x[1000:]).items():
        np.testing.assert_array_equal(v, want[k])


def _leaves(sd):
    if sd.get("arrays"):
        for k in sorted(sd["arrays"]):
            yield sd["arrays"][k]
    for k in sorted(sd.get("children") or {}):
        yield from _leaves(sd["children"][k])


def test_warmup_reports_every_stage_through_the_callback():
    m = rtamt.Dau1997(FS)
    steps = []
    rep = warmup(m, "float32", progress=steps.append)
    done = [s for s in steps if s.event == "done"]
    assert [s.stage for s in done] == m.output_names    # the calibration counts in stage 1
    assert [s.index for s in done] == list(range(1, len(m.output_names) + 1))
    assert all(isinstance(s, WarmupStep) and s.total == len(m.output_names) for s in steps)
    assert all(s.seconds >= 0 and s.loaded >= 0 and s.compiled >= 0 for s in done)
    assert rep.steps == done
    assert rep.compiled == sum(s.compiled for s in done) == sum(
        s.event == "compile" for s in steps)
    assert rep.describe().startswith("kernels: compiled in" if rep.cold
                                     else "kernels: loaded from cache in")


@pytest.mark.parametrize("mode", ["histogram", "exact"])
def test_warmup_runs_the_meters_later_kernels_as_a_step_and_leaves_it_untouched(mode):
    """The loudness meter's gating statistics start after 400 ms (integrated) and 3 s
    (loudness range), past the warm-up's 0.1 s: its warm_kernels() step runs them (issue
    38 item 6), on a copy: the meter measures afterwards as a fresh one does."""
    from rtamt.loudness import gating
    from rtamt.loudness.bs1770 import LoudnessMeter

    x = np.stack([_blocks(1, 4 * int(FS)), _blocks(2, 4 * int(FS))])
    m, ref = (LoudnessMeter(fs=FS, channels=2, mode=mode) for _ in range(2))
    steps = []
    warmup(m, "float64", lead=(2,), progress=steps.append)
    done = [s.stage for s in steps if s.event == "done"]
    assert done == ["kweighting", "gating", "statistics", "truepeak", m.name]
    if mode == "histogram":            # the exact mode's statistics are numpy code
        assert (gating.hist_gates.signatures and gating.hist_lra_stats.signatures
                and gating.hist_running.signatures)
    got, want = m(x), ref(x)
    assert (got.integrated, got.loudness_range, got.true_peak) == \
        (want.integrated, want.loudness_range, want.true_peak)
    assert m.blocks_processed == ref.blocks_processed == 1


def test_process_summary_separates_kernel_load_from_steady_state(capsys):
    assert main(["process", "--demo", "--block", "4096"]) == 0
    out = capsys.readouterr().out
    lines = [ln.strip() for ln in out.splitlines()]
    assert any(ln.startswith("kernels: loaded from cache in") or
               ln.startswith("kernels: compiled in") for ln in lines), out
    steady = [ln for ln in lines if ln.startswith("steady state:")]
    assert len(steady) == 1 and "of real time" in steady[0], out
    assert float(steady[0].split()[2]) > 0
    assert "first-call JIT" not in out


@pytest.mark.slow
def test_first_run_announces_the_compile_and_later_runs_do_not(tmp_path):
    """A cold numba cache (its own NUMBA_CACHE_DIR): the first run says on stderr that it
    compiles, with [k/N] progress, and its summary says so; the second run is quiet."""
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    code = ("import sys\nfrom rtamt_apps.cli import main\n"
            "sys.exit(main(['process', '--demo', '--block', '4096']))")
    first = _run_py(code, **env)
    assert sum(ln.startswith("compiling kernels for dau1997 (first run")
               for ln in first.stderr.splitlines()) == 1, first.stderr
    assert "rtamt: compiling" not in first.stderr     # the app's line only, not the library's
    assert "[1/4] gammatone" in first.stderr and "[4/4] modfb" in first.stderr
    assert "kernels: compiled in" in first.stdout
    second = _run_py(code, **env)
    assert "compiling" not in second.stderr, second.stderr
    assert "kernels: loaded from cache in" in second.stdout


def _signatures():
    from rtamt.engine.jit import _dispatchers

    return {(d.py_func.__module__, d.py_func.__name__): set(d.signatures)
            for d in _dispatchers()}


@pytest.mark.parametrize("name,lead,dtype", [("dau1997", (), "float64"),
                                             ("dau1997", (), "float32"),
                                             ("moore2016", (2,), "float64"),
                                             ("king2019", (2,), "float32")])
def test_no_kernel_compiles_after_the_warmup(name, lead, dtype):
    """Before: the warm-up ran a read-only signal (np.broadcast_to), so the first real
    block compiled `all_within` and `gammatone4` again for writable arrays; a slice of a
    multichannel file (layout 'A') or the runtime's transposed device buffer ('F')
    compiled the input check again.  Now no numba dispatcher of rtamt gains a signature
    after warmup, whichever way blocks arrive."""
    fs = 48000.0
    m = rtamt.MODELS[name](fs)
    warmup(m, dtype, lead)
    seen = _signatures()
    x = (0.02 * np.random.default_rng(1).standard_normal(lead + (6000,))).astype(dtype)
    for a, b in [(0, 256), (256, 1000)]:        # `rtamt process`: slices of the file
        m.process_all(x[..., a:b])
    m.process_all(np.ascontiguousarray(x[..., 1000:2000]))   # the scheduler: own buffers
    if lead:                                     # the runtime: (T, ch) buffer transposed
        m.process_all(np.ascontiguousarray(np.moveaxis(x[..., 2000:3000], -1, 0)).T)
    new = {k: v - seen.get(k, set()) for k, v in _signatures().items()}
    assert not {k: v for k, v in new.items() if v}


_COMPILE_TWO = ("import numpy as np, rtamt\n"
                "from rtamt.engine import kernels\n"
                "print(kernels.all_finite(np.zeros(3)), kernels.all_within(np.zeros(3), 1.0))\n")


def test_library_says_once_when_it_compiles_and_not_when_it_loads(tmp_path):
    """A script using the library directly (no app warm-up) on a cold cache: one line on
    stderr, however many kernels compile; the same script on the warm cache: none."""
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    first = _run_py(_COMPILE_TWO, **env)
    assert first.stdout.split() == ["True", "True"]
    assert first.stderr.splitlines() == [jit.FIRST_COMPILE], first.stderr
    second = _run_py(_COMPILE_TWO, **env)
    assert second.stderr == "", second.stderr


@pytest.mark.slow
def test_torch_layer_first_run_says_it_compiles(tmp_path):
    """The torch layers (rtamt.nn) compile their adjoint kernels on the first backward
    pass: the same one line, once."""
    pytest.importorskip("torch")
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    code = ("import torch, rtamt.nn as rn\n"
            "layer = rn.IHCEnvelope(16000.0, 2)\n"
            "x = torch.rand(1, 2, 64, dtype=torch.float64, requires_grad=True)\n"
            "y, _ = layer(x)\n"
            "y.sum().backward()\n"
            "print(bool(torch.isfinite(x.grad).all()))\n")
    first = _run_py(code, **env)
    assert first.stdout.split() == ["True"], first.stderr
    assert first.stderr.splitlines() == [jit.FIRST_COMPILE], first.stderr


def test_process_demo_loads_only_its_models_kernels():
    """numba loads a cached kernel when it is first called: `rtamt process --demo`
    (Dau1997) loads none of the loudness, DRNL, CASP-IHC or King2019 kernels."""
    code = ("import io, contextlib, sys\nfrom rtamt_apps.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['process', '--demo', '--block', '4096']) == 0\n"
            "from rtamt.engine.jit import _dispatchers\n"
            "print(' '.join(sorted({d.py_func.__module__ for d in _dispatchers() "
            "if d.overloads})))\n")
    loaded = set(_run_py(code).stdout.split())
    assert "rtamt.engine.kernels" in loaded
    assert not {m for m in loaded if m.startswith(("rtamt.loudness", "rtamt.filterbank.drnl",
                                                   "rtamt.ihc.paulick", "rtamt.modulation.king",
                                                   "rtamt.nn"))}, loaded
