"""Shared helpers for the rtamt test suite (signals, partitions, block runners)."""
from __future__ import annotations

import contextlib
import os
import shutil
import sysconfig
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "data"
FS = 48000.0


def db_spl_to_rms(db: float) -> float:
    """AMT calibration: an RMS of 1.0 is 100 dB SPL."""
    return 10.0 ** ((db - 100.0) / 20.0)


def make_signal(n: int = 9600, fs: float = FS, seed: int = 0) -> np.ndarray:
    """Realistic 60-80 dB SPL test input with an abrupt onset, a silent gap and a re-onset.

    0 .. 300: digital silence; 300 .. 1200: white noise at 74 dB SPL (abrupt onset);
    1200 .. 1500: silence (gap); 1500 .. n: 1 kHz tone at 66 dB + noise at 62 dB.
    """
    assert n >= 1600, "make_signal needs n >= 1600 (take a prefix for shorter inputs)"
    rng = np.random.default_rng(seed)
    t = np.arange(n) / fs
    x = np.zeros(n)
    x[300:1200] = db_spl_to_rms(74.0) * rng.standard_normal(900)
    seg = slice(1500, n)
    x[seg] = (np.sqrt(2) * db_spl_to_rms(66.0) * np.sin(2 * np.pi * 1000.0 * t[seg])
              + db_spl_to_rms(62.0) * rng.standard_normal(n - 1500))
    return x


def random_partition(n: int, seed: int = 1234, big: int = 8192) -> list[int]:
    """Seeded partition of ``n`` samples containing 1-sample blocks, one ``big`` block
    and random sizes in between (requires n > big + ~200)."""
    assert n >= big + 200, "signal too short for a partition with a big block"
    rng = np.random.default_rng(seed)
    sizes: list[int] = [1, 1, 1]
    pre = int(rng.integers(50, n - big - 100))
    while sum(sizes) < pre:
        want = int(rng.choice([1, 2, 3, int(rng.integers(4, 400))]))
        sizes.append(min(want, pre - sum(sizes)))
    sizes.append(big)
    rest = n - sum(sizes)
    assert rest > 0
    tail: list[int] = []
    while sum(tail) < rest:
        tail.append(int(rng.choice([1, 1, 7, int(rng.integers(2, 300))])))
    over = sum(tail) - rest
    tail[-1] -= over
    if tail[-1] == 0:
        tail.pop()
    sizes += tail
    assert sum(sizes) == n and min(sizes) >= 1 and big in sizes and 1 in sizes
    return sizes


def run_blocks(proc, x, sizes, key=None):
    """Feed ``x`` (time last) through ``proc`` in blocks of ``sizes``; concatenate outputs.

    ``key``: if given, ``proc`` is a Chain and ``proc.process_all`` is used, returning a
    dict of concatenated outputs.
    """
    outs = []
    i = 0
    for s in sizes:
        blk = x[..., i:i + s]
        outs.append(proc.process_all(blk) if key else proc(blk))
        i += s
    assert i == x.shape[-1]
    if key:
        return {k: np.concatenate([o[k] for o in outs], axis=-1) for k in outs[0]}
    return np.concatenate(outs, axis=-1)


def max_rel_err(a, b) -> float:
    """max |a - b| / max |b| (b = the whole-signal reference)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape
    den = np.max(np.abs(b))
    assert den > 0, "reference output is all zero; the test would be vacuous"
    return float(np.max(np.abs(a - b)) / den)


def load_ref(name: str) -> dict:
    with np.load(DATA / f"{name}.npz") as d:
        return {k: d[k] for k in d.files}


def outputs_of(proc, x) -> dict:
    """Run one block; a chain gives all stage outputs, a stage ``{'out': y}``."""
    import rtamt

    if isinstance(proc, rtamt.Chain):
        return proc.process_all(x)
    return {"out": proc(x)}


def assert_outputs_equal(a: dict, b: dict) -> None:
    """Same keys and bit-identical arrays (NaN where the other has NaN: the rows of a
    block summary after a stream's last step)."""
    assert set(a) == set(b)
    for k in a:
        u, v = np.asarray(a[k]), np.asarray(b[k])
        assert np.array_equal(u, v, equal_nan=u.dtype.kind in "fc"), k


def entry_point() -> str:
    """The installed `rtamt` console script (in this interpreter's scripts dir)."""
    exe = os.path.join(sysconfig.get_path("scripts"), "rtamt")
    if os.path.exists(exe):
        return exe
    found = shutil.which("rtamt")
    assert found, "the `rtamt` entry point is not installed"
    return found


def rtamt_stage_classes() -> list:
    """Every :class:`rtamt.engine.stage.Stage` subclass defined in rtamt (outside
    rtamt.nn), after importing every module of the package (a module of a missing
    optional dependency, Triton or JACK, is skipped): :func:`_examples.stage_classes`
    without the stages of tests/support."""
    from _examples import stage_classes

    return [c for c in stage_classes() if c.__module__.startswith("rtamt.")]


def restore_sigint() -> None:
    """``preexec_fn`` of a child that the test will interrupt (runs between fork and exec):
    SIGINT back to its default action.  A suite started from a background job (``cmd &``
    in a shell without job control, ``nohup``, ``trap '' INT``) runs with SIGINT ignored,
    the child inherits that, and Python then installs no ``KeyboardInterrupt`` handler, so
    the test's SIGINT would do nothing."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def file_tree(d) -> dict:
    """{relative path: bytes} of every file under ``d`` (hidden ones included)."""
    d = Path(d)
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def skip_or_fail(why: str):
    """Skip where mounting is not allowed, but fail on CI (root, where .ci/run runs): the
    full-disk and read-only tests must not stop running unnoticed."""
    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI is set: this test must run)")
    pytest.skip(why)


@contextlib.contextmanager
def mounted_tmpfs(path, size="1m"):
    """A ``size`` tmpfs mounted at the new directory ``path`` (a small disk to fill), or a
    skip where mounting is not allowed (:func:`skip_or_fail`)."""
    import subprocess

    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode:
        skip_or_fail(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=60)


def spy_reads(monkeypatch) -> list:
    """Patch :meth:`rtamt.signals.AudioReader.read_tm` (every read goes through it,
    :meth:`~rtamt.signals.AudioReader.read` too) to record the frames asked for in each
    call; returns that (growing) list."""
    from rtamt.signals import AudioReader

    sizes = []
    real = AudioReader.read_tm

    def spy(self, n, out=None):
        sizes.append(n)
        return real(self, n, out)

    monkeypatch.setattr(AudioReader, "read_tm", spy)
    return sizes


def run_on_pty(argv, timeout: float = 300.0, size=(24, 100)):
    """Run ``python -m rtamt_apps ARGV`` with stdout and stderr on one pseudo-terminal of
    ``size`` (rows, columns), as in a shell: (exit status, everything written, decoded)."""
    import fcntl
    import pty
    import struct
    import subprocess
    import sys
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    p = subprocess.Popen([sys.executable, "-m", "rtamt_apps", *argv], stdin=subprocess.DEVNULL,
                         stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks, t0 = [], time.monotonic()
    try:
        while time.monotonic() - t0 < timeout:
            try:
                b = os.read(master, 65536)
            except OSError:          # EIO: the child closed the terminal
                break
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(master)
        p.wait(timeout=30)
    return p.returncode, b"".join(chunks).decode(errors="replace")


def state_arrays(sd: dict) -> dict:
    """The arrays of a snapshot by name: a stage's ``arrays``, or a composite's
    (``children``, nested per stage) as ``'<stage>.<key>'``."""
    if "children" in sd:
        return {f"{s}.{k}": v for s, d in sd["children"].items()
                for k, v in (d["arrays"] or {}).items()}
    return dict(sd["arrays"])
