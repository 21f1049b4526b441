"""Faults and bad input at the library level: input beyond physics, poisoned states."""
from __future__ import annotations

import numpy as np
import pytest

import rtamt
from rtamt import RtamtInputError
from rtamt.models import MODELS


def _fs(name):
    return 44100.0 if name == "paulick2024" else 48000.0


def _tone(name, n, amp, dtype=np.float64):
    t = np.arange(n) / _fs(name)
    x = (amp * np.sin(2 * np.pi * 1000 * t)).astype(dtype)
    return np.stack([x, 0.5 * x]) if name == "moore2016" else x


def _finite_state(sd) -> bool:
    if isinstance(sd, dict):
        return all(_finite_state(v) for v in sd.values())
    if isinstance(sd, np.ndarray) and sd.dtype.kind == "f":
        return bool(np.isfinite(sd).all())
    return True


def _outs(m, x):
    return {k: np.asarray(v) for k, v in m.process_all(x).items()}


@pytest.mark.parametrize("dtype,huge", [(np.float32, 1e30), (np.float64, 1e300)],
                         ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_input_beyond_physics_is_rejected_and_state_untouched(name, dtype, huge):
    m, twin = MODELS[name](_fs(name)), MODELS[name](_fs(name))
    x = _tone(name, 3000, 0.1, dtype)
    _outs(m, x[..., :1000]), _outs(twin, x[..., :1000])
    bad = x[..., 1000:1500].copy()
    bad[..., 17] = huge
    with pytest.raises(RtamtInputError, match=r"block 1: value .* sample 17 is beyond the "
                                              r"physical limit .*200 dB SPL"):
        m(bad)
    a, b = _outs(m, x[..., 1000:]), _outs(twin, x[..., 1000:])
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("spl_ref", [100.0, 20.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_largest_accepted_input_leaves_a_finite_state(name, dtype, spl_ref):
    """A square wave at exactly the limit (200 dB SPL peak at spl_ref), then normal input:
    every output and every state value stays finite."""
    m = MODELS[name](_fs(name), spl_ref=spl_ref)
    lim = m.input_limit
    assert lim == pytest.approx(10 ** ((200.0 - spl_ref) / 20.0))
    n = int(_fs(name) * 0.1)
    sq = np.where(np.sin(2 * np.pi * 1000 * np.arange(n) / _fs(name)) >= 0, lim, -lim)
    sq = sq.astype(dtype)
    assert np.abs(sq).max() <= lim
    sq = np.stack([sq, -sq]) if name == "moore2016" else sq
    for x in (sq, _tone(name, n, 10 ** ((60.0 - spl_ref) / 20.0), dtype)):
        for v in m.process_all(x).values():
            assert np.isfinite(np.asarray(v)).all()
        assert _finite_state(m.state_dict())


def test_max_spl_is_settable_per_model():
    m = rtamt.Dau1997(48000.0, spl_ref=94.0)
    x = np.full(64, 10.0)                      # 114 dB SPL
    m(x)
    m.max_spl = 110.0
    with pytest.raises(RtamtInputError, match="max_spl 110 dB SPL at spl_ref 94"):
        m(x)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_max_spl_is_not_part_of_the_design(name):
    """A state moves between instances with different limits, set before or after first use."""
    a, b = MODELS[name](_fs(name)), MODELS[name](_fs(name))
    b.max_spl = 210.0                       # set before anything asks for the identity
    a(_tone(name, 2000, 0.1))
    b.load_state_dict(a.state_dict())
    a.max_spl = 190.0                       # and after
    a.load_state_dict(b.state_dict())


def test_runtime_checks_every_chains_limit_before_any_chain_runs():
    """Block 1 is within Dau1997(spl_ref=100)'s limit (1e5) but beyond that of
    Dau1997(spl_ref=120) (1e4): the runtime rejects it before either chain runs, so both
    continue as if it never came."""
    from rtamt.runtime import ArraySource, Runtime
    fs = 48000.0
    lo, hi = rtamt.Dau1997(fs, spl_ref=120.0), rtamt.Dau1997(fs)   # limits 1e4, 1e5
    x = _tone("dau1997", 2048, 0.1)
    x[300] = 5e4                               # block 1: beyond lo's limit only
    rt = Runtime({"lo": lo, "hi": hi}, fs, block=256, policy="drop-newest",
                 sample_dtype="float64")
    assert rt._limit == lo.input_limit == pytest.approx(1e4)
    got = []
    rt.subscribe(got.append)
    rt.start()
    ArraySource(x, fs, blocksize=256, realtime=False).run(rt)
    rt.stop()
    st = rt.stats()
    assert st.rejected_blocks == 1 and "physical limit" in st.last_error
    keep = np.concatenate([x[:256], x[512:]])
    for name, ref in (("lo", rtamt.Dau1997(fs, spl_ref=120.0)), ("hi", rtamt.Dau1997(fs))):
        y = np.concatenate([np.asarray(r.outputs[name]) for r in got], axis=-1)
        np.testing.assert_array_equal(y, ref(keep))


# --- numba's kernel cache cannot be written (issue 29 item 12) ----------------------------

def _read_only_install(tmp_path):
    """A copy of the rtamt package where numba can write no cache: every package folder
    has a *file* named __pycache__ (what a read-only install amounts to, also for root,
    whom chmod does not stop), NUMBA_CACHE_DIR names a file, HOME is under /proc (no
    ~/.cache can be made there).  Returns (environment, working folder)."""
    import os
    import shutil
    from pathlib import Path

    src = Path(rtamt.__file__).parent
    site = tmp_path / "site"
    shutil.copytree(src, site / "rtamt", ignore=shutil.ignore_patterns("__pycache__"))
    for d in (site / "rtamt").rglob("*"):
        if d.is_dir() and (d / "__init__.py").exists():
            (d / "__pycache__").write_text("")
    (site / "rtamt" / "__pycache__").write_text("")
    (tmp_path / "not-a-dir").write_text("")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "PYTHONPATH")}
    env.update(PYTHONPATH=str(site), NUMBA_CACHE_DIR=str(tmp_path / "not-a-dir"),
               HOME="/proc/nonexistent-home", TMPDIR=str(tmp), PYTHONDONTWRITEBYTECODE="1")
    return env, tmp


_UNCACHED = ("import sys, numpy as np, rtamt\n"
             "assert rtamt.__file__.startswith(sys.argv[1]), rtamt.__file__\n"
             "from rtamt.engine import kernels\n"
             "from rtamt.engine.denormal import ensure_ftz\n"
             "ensure_ftz()\n"
             "print(kernels.all_finite(np.zeros(8)), kernels.all_finite(np.array([np.nan])))\n")


def _run(env, cwd, code, *args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=900)


def test_unwritable_numba_cache_falls_back_to_a_private_temporary_cache(tmp_path):
    """Before: `import rtamt` died with "cannot cache function ...: no locator available".
    Now it runs, caches in $TMPDIR/rtamt-numba-cache-UID, says so in one line, and a
    second run loads what the first compiled."""
    import os

    env, tmp = _read_only_install(tmp_path)
    site = env["PYTHONPATH"]
    first = _run(env, tmp, _UNCACHED, site)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["True", "False"]
    cache = tmp / f"rtamt-numba-cache-{os.getuid()}"
    from rtamt.engine.jit import FIRST_COMPILE

    warn = [ln for ln in first.stderr.splitlines() if "kernel cache" in ln]
    assert len(warn) == 1 and str(cache) in warn[0], first.stderr
    assert first.stderr.splitlines() == [warn[0], FIRST_COMPILE]
    assert cache.is_dir() and any(cache.rglob("*.nbi"))
    assert (cache.stat().st_mode & 0o777) == 0o700
    saved = {f: f.stat().st_mtime_ns for f in cache.rglob("*") if f.is_file()}
    second = _run(env, tmp, _UNCACHED, site)
    assert second.returncode == 0 and second.stdout.split() == ["True", "False"], second.stderr
    assert {f: f.stat().st_mtime_ns for f in cache.rglob("*") if f.is_file()} == saved
    assert second.stderr.splitlines() == warn           # loaded: no compile line
    cli = _run(env, tmp, "import sys; from rtamt_apps.cli import main; "
               "sys.exit(main(['--help']))", site)
    assert cli.returncode == 0 and "process" in cli.stdout, cli.stderr


def test_no_writable_cache_anywhere_compiles_in_memory(tmp_path):
    """A fallback folder that is not this user's own private folder is never used (the
    cache holds pickled code): kernels compile in memory, with one line saying so."""
    import os

    env, tmp = _read_only_install(tmp_path)
    (tmp / f"rtamt-numba-cache-{os.getuid()}").write_text("")   # squatted by a file
    r = _run(env, tmp, _UNCACHED, env["PYTHONPATH"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False"]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "compiling kernels in memory" in lines[0], r.stderr


@pytest.mark.slow
def test_process_demo_runs_with_an_unwritable_numba_cache(tmp_path):
    """`rtamt process --demo` on the read-only install: compiles (into the private
    temporary cache), says so once, and finishes."""
    env, tmp = _read_only_install(tmp_path)
    r = _run(env, tmp, "import sys; from rtamt_apps.cli import main; "
             "sys.exit(main(['process', '--demo']))")
    assert r.returncode == 0, r.stderr
    assert sum("kernel cache" in ln for ln in r.stderr.splitlines()) == 1, r.stderr
    assert "steady state:" in r.stdout


# --- no writable directory at all: no cache folder, no temporary directory (issue 38 item 7)

def _run_without_writable_dirs(tmp_path, *cmd, timeout=900):
    """Run ``cmd`` where nothing numba or ``tempfile`` could use is writable: a mount
    namespace (``unshare -rm``; chmod does not stop root) with read-only bind mounts of
    the system's temporary directories (/tmp, /var/tmp, /usr/tmp), of ``HOME``,
    ``TMPDIR`` / ``TEMP`` / ``TMP`` and the working folder (all under ``tmp_path``), and of
    the ``rtamt`` and ``rtamt_apps`` package folders (no ``__pycache__`` can be written);
    ``NUMBA_CACHE_DIR`` and ``XDG_CACHE_HOME`` unset.  Skips where no mount namespace can
    be made."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import rtamt_apps

    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs util-linux unshare (a mount namespace for read-only mounts)")
    home, ro = tmp_path / "home", tmp_path / "ro"
    home.mkdir()
    ro.mkdir()
    dirs = [str(home), str(ro), str(Path(rtamt.__file__).parent),
            str(Path(rtamt_apps.__file__).parent)]
    dirs += [d for d in ("/tmp", "/var/tmp", "/usr/tmp") if os.path.isdir(d)]
    mounts = " && ".join(f"mount --bind -o ro '{d}' '{d}'" for d in dirs)
    probe = subprocess.run([unshare, "-rm", "sh", "-c", mounts], capture_output=True,
                           text=True)
    if probe.returncode:
        pytest.skip(f"no mount namespace with read-only bind mounts here: {probe.stderr}")
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), TMPDIR=str(ro), TEMP=str(ro), TMP=str(ro))
    script = f'{mounts} && cd \'{ro}\' && exec "$@"'
    cmd = [sys.executable if c == "python" else c for c in cmd]
    return subprocess.run([unshare, "-rm", "sh", "-c", script, "sh", *cmd],
                          capture_output=True, text=True, env=env, timeout=timeout)


_NO_TMP_CHECK = ("import tempfile\n"
                 "try:\n"
                 "    tempfile.gettempdir()\n"
                 "except FileNotFoundError:\n"
                 "    pass\n"
                 "else:\n"
                 "    raise SystemExit('the sandbox has a writable temporary directory')\n")


def test_no_writable_directory_at_all_compiles_in_memory(tmp_path):
    """Before: with HOME, every temporary directory and the package read-only, `import
    rtamt` died with "FileNotFoundError: No usable temporary directory found" (from the
    cache fallback).  Now it imports, a model runs with its kernels compiled in memory,
    and one line on stderr says so."""
    code = _NO_TMP_CHECK + (
        "import numpy as np, rtamt\n"
        "from rtamt.engine.jit import JIT\n"
        "assert JIT['cache'] is False\n"
        "y = rtamt.Dau1997(48000.0)(0.01 * np.sin(np.arange(2400) * 0.13))\n"
        "print(y.shape, bool(np.isfinite(y).all()))\n")
    r = _run_without_writable_dirs(tmp_path, "python", "-c", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "True", r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "compiling kernels in memory" in lines[0]
    assert "no writable temporary directory" in lines[0]


@pytest.mark.slow
def test_process_demo_runs_without_any_writable_directory(tmp_path):
    """`rtamt process --demo` where nothing is writable: kernels compiled in memory, the
    line saying so once, the run finished (exit 0), and the summary does not promise a
    cache."""
    r = _run_without_writable_dirs(tmp_path, "python", "-c",
                                   _NO_TMP_CHECK + "import sys; from rtamt_apps.cli import "
                                   "main; sys.exit(main(['process', '--demo']))")
    assert r.returncode == 0, r.stderr
    assert sum("compiling kernels in memory" in ln for ln in r.stderr.splitlines()) == 1, \
        r.stderr
    assert "steady state:" in r.stdout
    assert "not cached" in r.stdout and "from the cache" not in r.stdout, r.stdout
