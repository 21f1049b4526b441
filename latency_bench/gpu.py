"""``python -m latency_bench.gpu --out DIR``: the GPU check, one prepared command.

Runs, on a CUDA machine, each step in a child process with a time limit of its own (a hang
or a crash in one step still leaves the others' results), and writes ``DIR/gpu.json`` and
``DIR/gpu.md`` after every step:

``env``
    GPU name, compute capability, memory, driver, CUDA, torch, triton, numba, numpy and
    Python versions, CPU, date, git commit.
``tests``
    pytest ``-m "cuda or triton"`` (the markers of tests/conftest.py, wherever the tests
    live under tests/) with ``RTAMT_TEST_DEVICE=cuda`` and ``TRITON_INTERPRET=0``: each
    Triton kernel compiled for the GPU and checked on CUDA tensors against its numba twin
    (tests/support/_triton.py).  Results go to ``DIR/junit.xml`` and, one line per test as
    it ends, ``DIR/tests.jsonl``.
``cpu_timing`` (beside ``tests``, on one pinned CPU core)
    every model with the numba kernels, one thread, 256-sample blocks, float32 and float64,
    batch 1, 64 and 1024: seconds per block.
``gpu_timing``
    every model on the Triton backend on the GPU, the same blocks and dtypes, batch 1, 64,
    1024 and the largest that fits (doubling from 2048 until out of memory, a block takes
    over a second, or the cap): per block, the host-to-device copy from pinned memory, the
    model call and the device-to-host copy of its output (CUDA events), and the end-to-end
    wall time from the input copy's start to the output on the host.
``cpu_capacity`` (beside the others, on the two highest-numbered cores, which the other
    steps then leave alone; not pinned on a machine of fewer than 4 cores)
    the CPU scheduler (numba kernels, 2 worker threads, 10 ms budget, 256-sample blocks,
    float64) for Dau1997 at 48 kHz and Moore2016 stereo at 32 kHz: ``python -m
    latency_bench --find-capacity`` (0 misses and 0 drops per trial, 10 s trials from 8
    streams), which also times the ideal capacity (the bare batched model) in the same
    run, then one 60 s trial at the capacity found (passing with 0 misses, or the
    capacity is not confirmed), and one 30 s ``--trace`` trial at 0.8 of the ideal
    whose late calls are attributed to their causes.
``capacity_<model>``
    ``latency_bench.streams.run_trial`` through ``Scheduler(backend='triton',
    device='cuda')``: Dau1997 at 48 kHz and Moore2016 stereo at 32 kHz, float32, 10 ms
    budget.  The search starts at a prediction from ``gpu_timing`` (the batch whose
    end-to-end block time fits half a block period, scaled), or the cost model of
    docs/gpu.md when that step gave nothing; short trials move up by doubling or down by
    quartering, then bisect to 10 %; one 30 s trial confirms the result.

Throughput is stream-seconds per second: streams x block duration / seconds per block.

Without CUDA the command exits 2 with one line.  ``--device cpu`` runs the same steps on CPU
tensors in Triton's interpreter (``TRITON_INTERPRET=1``) with tiny sizes (``--tiny``): a
check of the plumbing that CI runs, not a measurement.

The path imports neither sounddevice, Qt nor lhotse, and needs no install: the children
find ``rtamt`` and ``latency_bench`` in the repository root (``PYTHONPATH``) and the
command-line package ``rtamt_apps`` through a link to ``apps/`` made under ``DIR`` when it
is not installed.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

from .__main__ import _cpu_name

ROOT = Path(__file__).resolve().parent.parent
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

#: (name, sample rate Hz, channels per stream, model keywords)
MODELS = [("dau1997", 48000.0, 1, {}), ("king2019", 48000.0, 1, {}),
          ("osses2021", 48000.0, 1, {}), ("paulick2024", 44100.0, 1, {}),
          ("glasberg2002", 32000.0, 1, {}), ("moore2016", 32000.0, 2, {})]
#: capacity searches: (model, fs, channels, dtype, cost-model prediction on an H100 from
#: docs/gpu.md, used when gpu_timing measured nothing)
CAPACITY = [("dau1997", 48000.0, 1, "float32", 40000), ("moore2016", 32000.0, 2, "float32", 2000)]
#: the CPU scheduler's capacity on pinned cores beside the GPU steps (issue 37):
#: (model, fs, channels per stream)
CPU_CAPACITY = [("dau1997", 48000.0, 1), ("moore2016", 32000.0, 2)]
#: seconds each step may run (the whole run also stops at --time-limit)
LIMITS = {"env": 30.0, "tests": 170.0, "cpu_timing": 260.0, "gpu_timing": 110.0,
          "capacity_dau1997": 110.0, "capacity_moore2016": 70.0, "cpu_capacity": 460.0}
FORBIDDEN = ("sounddevice", "PySide6", "pyqtgraph", "lhotse", "dask")
"""Packages the GPU path must not import (absent on the GPU machine)."""


DEVICE_MARKERS = "cuda or triton"
"""The tests the ``tests`` step runs: the markers set in tests/conftest.py."""


def device_test_files() -> list[str]:
    """The test files under tests/ that can hold a ``cuda`` or ``triton`` test, wherever they
    live: those that import the Triton test helpers (``_triton``) or name either marker.
    Reading the text instead of importing every test module keeps the step from importing
    tests that need packages the GPU machine lacks (lhotse, Qt, sounddevice); ``-m``
    (:data:`DEVICE_MARKERS`) then picks the marked tests from these files."""
    needles = ("from _triton import", "import _triton", "mark.triton", "mark.cuda")
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                  if any(n in p.read_text(encoding="utf-8") for n in needles))


def sizes(tiny: bool) -> dict:
    """What each step runs: the full check, or tiny sizes for the interpreter."""
    if not tiny:
        return {"tiny": False, "models": MODELS, "dtypes": ["float32", "float64"],
                "block": 256, "batches": [1, 64, 1024], "largest_from": 2048,
                "largest_cap": 131072, "gpu_blocks": 12, "gpu_warm": 2, "cpu_min_s": 0.3,
                "tests": device_test_files(), "tests_m": DEVICE_MARKERS, "tests_k": None,
                "capacity": CAPACITY, "trial_s": 2.0, "warm_s": 0.5,
                "confirm_s": 30.0, "max_streams": 200000, "budget_ms": 10.0,
                "cpu_capacity": CPU_CAPACITY, "cpu_threads": 2, "cpu_block": 256,
                "cpu_trial_s": 10.0, "cpu_warm_s": 1.0, "cpu_confirm_s": 60.0,
                "cpu_trace_s": 30.0, "cpu_start": 8, "cpu_max_streams": 256}
    return {"tiny": True, "models": [("dau1997", 16000.0, 1, {"flow": 1000.0, "fhigh": 1300.0}),
                                     ("glasberg2002", 32000.0, 1, {})],
            "dtypes": ["float32", "float64"], "block": 32, "batches": [1, 2],
            "largest_from": 4, "largest_cap": 4, "gpu_blocks": 2, "gpu_warm": 1,
            "cpu_min_s": 0.0, "tests": device_test_files(), "tests_m": DEVICE_MARKERS,
            "tests_k": "exact_under_any_partition or snapshot_crosses",
            "capacity": [("king2019", 16000.0, 1, "float32", 2)], "trial_s": 0.008,
            "warm_s": 0.0, "confirm_s": 0.008, "max_streams": 2, "budget_ms": 100000.0,
            "block_capacity": 64, "limits": {"capacity_king2019": 120.0},
            "cpu_capacity": [("king2019", 16000.0, 1)], "cpu_threads": 2, "cpu_block": 64,
            "cpu_trial_s": 0.1, "cpu_warm_s": 0.0, "cpu_confirm_s": 0.1, "cpu_trace_s": 0.1,
            "cpu_start": 1, "cpu_max_streams": 2}


# ------------------------------------------------------------------------ the children
def _write(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str))
    os.replace(tmp, path)


def _forbidden_loaded() -> list[str]:
    return sorted(m for m in sys.modules if m.split(".")[0] in FORBIDDEN)


def step_env(cfg, out: dict, save) -> None:
    import numba
    import numpy as np
    import torch

    out.update(date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               python=platform.python_version(), torch=torch.__version__,
               cuda=torch.version.cuda, numba=numba.__version__, numpy=np.__version__,
               cpu=_cpu_name(), cores=os.cpu_count(), device_kind=cfg["device"])
    try:
        import triton
        out["triton"] = triton.__version__
    except ImportError as e:
        out["triton"] = f"not importable: {e}"
    if cfg["device"] == "cuda":
        p = torch.cuda.get_device_properties(0)
        out.update(gpu=p.name, capability=f"{p.major}.{p.minor}",
                   gpu_memory_gib=round(p.total_memory / 2**30, 1),
                   gpu_count=torch.cuda.device_count(), driver=_driver())
    out["commit"] = _git_commit()
    save()


def _driver() -> str:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/driver/nvidia/version") as f:
            return f.readline().strip()
    except OSError:
        return "unknown"


def _git_commit() -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                           text=True, timeout=10)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _noise(shape, dtype, seed):
    import numpy as np

    from rtamt.signals import rms_for_spl
    return (np.random.default_rng(seed).standard_normal(shape) * rms_for_spl(70.0)).astype(dtype)


def _shape(batch: int, ch: int, block: int) -> tuple:
    return (batch, block) if ch == 1 else (batch, ch, block)


def _leaves(y) -> list:
    return list(y.values()) if isinstance(y, dict) else [y]


def step_cpu_timing(cfg, out: dict, save) -> None:
    """The numba models on one CPU core: seconds per block (best of the timed blocks and
    their median)."""
    import numpy as np

    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    except (AttributeError, OSError):
        pass
    from rtamt.engine.denormal import ensure_ftz
    from rtamt.models import MODELS as ALL

    ensure_ftz()
    B = cfg["block"]
    out["rows"] = rows = []
    for name, fs, ch, kw in cfg["models"]:
        for dtype in cfg["dtypes"]:
            for b in cfg["batches"]:
                x = _noise(_shape(b, ch, B * 2), dtype, 1)
                blocks = [np.ascontiguousarray(x[..., i * B:(i + 1) * B]) for i in range(2)]
                m = ALL[name](fs, **kw)
                m(blocks[0])                                 # compile or cache load, state
                times, t_all = [], time.perf_counter()
                while len(times) < 3 or (time.perf_counter() - t_all < cfg["cpu_min_s"]
                                         and len(times) < 50):
                    t = time.perf_counter()
                    m(blocks[len(times) % 2])
                    times.append(time.perf_counter() - t)
                sec = float(np.median(times))
                rows.append({"model": name, "fs": fs, "channels": ch, "dtype": dtype,
                             "batch": b, "blocks": len(times), "s_per_block": sec,
                             "best_s_per_block": float(min(times)),
                             "stream_s_per_s": b * B / fs / sec})
                save()


def _gpu_row(name, fs, ch, kw, dtype, b, cfg) -> dict:
    """One model at batch ``b`` on the configured device: CUDA-event times per block (wall
    times on the CPU interpreter, where copies are not separate)."""
    import numpy as np
    import torch

    from rtamt.models import MODELS as ALL

    dev = torch.device(cfg["device"])
    cuda = dev.type == "cuda"
    B, n_warm, n_time = cfg["block"], cfg["gpu_warm"], cfg["gpu_blocks"]
    tdt = getattr(torch, dtype)
    m = ALL[name](fs, **kw, device=dev)
    host = [torch.from_numpy(_noise(_shape(b, ch, B), dtype, 10 + i)) for i in range(2)]
    if cuda:
        host = [h.pin_memory() for h in host]
    dev_in = torch.empty(host[0].shape, dtype=tdt, device=dev)
    outs: list | None = None

    def one(i, ev=None):
        nonlocal outs
        if ev:
            ev[0].record()
        dev_in.copy_(host[i % 2], non_blocking=cuda)
        if ev:
            ev[1].record()
        y = _leaves(m(dev_in))
        if ev:
            ev[2].record()
        if outs is None or [o.shape for o in outs] != [v.shape for v in y]:
            outs = [torch.empty(v.shape, dtype=v.dtype, pin_memory=cuda) for v in y]
        for o, v in zip(outs, y):
            o.copy_(v, non_blocking=cuda)
        if ev:
            ev[3].record()
            ev[3].synchronize()

    t = time.perf_counter()
    one(0)                                  # compile (first model of this dtype), state
    if cuda:
        torch.cuda.synchronize()
    first_s = time.perf_counter() - t
    for i in range(1, n_warm):
        one(i)
    if cuda:
        torch.cuda.synchronize()
    wall, h2d, ker, d2h = [], [], [], []
    for i in range(n_time):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)] if cuda else None
        t = time.perf_counter()
        one(i, ev)
        wall.append(time.perf_counter() - t)
        if cuda:
            h2d.append(ev[0].elapsed_time(ev[1]) * 1e3)
            ker.append(ev[1].elapsed_time(ev[2]) * 1e3)
            d2h.append(ev[2].elapsed_time(ev[3]) * 1e3)
    e2e = np.array(wall) * 1e6
    med = float(np.median(e2e))
    row = {"model": name, "fs": fs, "channels": ch, "dtype": dtype, "batch": b,
           "blocks": n_time, "first_call_s": first_s, "e2e_us_p50": med,
           "e2e_us_p99": float(np.percentile(e2e, 99)), "e2e_us_max": float(e2e.max()),
           "period_us": B / fs * 1e6, "stream_s_per_s": b * B / fs / (med / 1e6)}
    if cuda:
        row.update(h2d_us_p50=float(np.median(h2d)), kernel_us_p50=float(np.median(ker)),
                   kernel_us_p99=float(np.percentile(ker, 99)), d2h_us_p50=float(np.median(d2h)),
                   kernel_stream_s_per_s=b * B / fs / (float(np.median(ker)) / 1e6),
                   out_bytes_per_block=int(sum(o.numel() * o.element_size() for o in outs)))
        torch.cuda.synchronize()
    return row


def _free(torch) -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def step_gpu_timing(cfg, out: dict, save) -> None:
    import torch

    from rtamt.engine.denormal import ensure_ftz

    ensure_ftz()
    out["rows"] = rows = []
    out["errors"] = errors = []
    for name, fs, ch, kw in cfg["models"]:
        for dtype in cfg["dtypes"]:
            b = 0
            for b in cfg["batches"]:
                try:
                    rows.append(_gpu_row(name, fs, ch, kw, dtype, b, cfg))
                    _free(torch)
                except Exception as e:          # a compile error: report it, go on
                    errors.append(f"{name} {dtype} batch {b}: {type(e).__name__}: {e}"[:2000])
                    save()
                    break
                save()
            else:
                b = cfg["largest_from"]
                largest = None
                while b <= cfg["largest_cap"]:
                    try:
                        r = _gpu_row(name, fs, ch, kw, dtype, b, cfg)
                    except torch.cuda.OutOfMemoryError:
                        torch.cuda.empty_cache()
                        break
                    except RuntimeError as e:       # CUDA OOM raised as a plain error
                        if "out of memory" not in str(e).lower():
                            errors.append(f"{name} {dtype} batch {b}: {e}"[:2000])
                        break
                    largest = r
                    _free(torch)
                    if r["e2e_us_p50"] > 1e6:
                        break
                    b *= 2
                if largest is not None:
                    rows.append(dict(largest, largest=True))
                    save()


def step_capacity(cfg, out: dict, save, which: str) -> None:
    """Paced trials through the scheduler on the device; see the module docstring."""
    from . import streams as ms

    name, fs, ch, dtype, fallback = next(c for c in cfg["capacity"] if c[0] == which)
    block = cfg.get("block_capacity", cfg["block"])
    pred = cfg.get("predictions", {}).get(name)
    out.update(model=name, fs=fs, channels=ch, dtype=dtype, block=block,
               budget_ms=cfg["budget_ms"], prediction=pred or fallback,
               prediction_source="gpu_timing" if pred else "cost model (docs/gpu.md)",
               trials=[], confirm=None, capacity=None)
    save()
    ns = argparse.Namespace(
        model=name, config=None, fs=fs, block=block, channels=ch, dtype=dtype,
        budget_ms=cfg["budget_ms"], threads=os.cpu_count() or 1, seconds=cfg["trial_s"],
        warmup_seconds=cfg["warm_s"], history=0, source="fanout", device=cfg["device"],
        backend="triton", realtime=None, probe_budget_ms=None, max_miss_rate=0.0, batch=1)

    def trial(n: int, seconds: float) -> tuple[bool, dict]:
        ns.seconds, ns.batch = seconds, n           # one call per block for every stream
        t = time.perf_counter()
        r = ms.run_trial(ns, n)
        r.update(fs=fs, block=block)
        ok = ms.passed(r)
        row = {"streams": n, "seconds": seconds, "pass": ok, "misses": r["misses"],
               "drops": r["drops"], "latency_p99_us": r["latency_p99_us"],
               "latency_max_us": r["latency_max_us"], "cpu_util": r["cpu_util"],
               "batch_mean": r["batch_mean"], "errors": r["errors"][:3],
               "wall_s": time.perf_counter() - t,
               "cpu_us_per_stream_block": 1e6 * r["cpu_util"] / (n * fs / block)}
        return ok, row

    cap = cfg["max_streams"]
    n = max(1, min(int(out["prediction"]), cap))
    good, bad = 0, None
    while True:
        ok, row = trial(n, cfg["trial_s"])
        out["trials"].append(row)
        save()
        if ok:
            good = n
            if bad is not None or n >= cap:
                break
            n = min(2 * n, cap)
        else:
            bad = n
            if good or n == 1:
                break
            n = max(1, n // 4)
    while bad is not None and bad - good > max(1, good // 10):
        mid = (good + bad) // 2
        ok, row = trial(mid, cfg["trial_s"])
        out["trials"].append(row)
        save()
        good, bad = (mid, bad) if ok else (good, mid)
    while good:
        ok, row = trial(good, cfg["confirm_s"])
        out["confirm"] = row
        save()
        if ok:
            out["capacity"] = good
            break
        good = int(good * 0.8)
    save()


def _bench_json(argv: list[str], log: Path) -> dict:
    """``python -m latency_bench ARGV --json`` in a child (this process's cores); its
    report, or ``{'error': ...}``."""
    with open(log, "a") as f:
        f.write("$ latency_bench " + " ".join(argv) + "\n")
        f.flush()
        r = subprocess.run([sys.executable, "-m", "latency_bench", *argv, "--json"], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=f, text=True)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"exit {r.returncode}: {r.stdout[-500:]}"}


def step_cpu_capacity(cfg, out: dict, save) -> None:
    """The CPU scheduler's capacity on the reserved cores; see the module docstring."""
    cores = cfg.get("cpu_cores")
    if cores:
        os.sched_setaffinity(0, set(cores))         # inherited by the children
    budget = min(cfg["budget_ms"], 10000.0)
    out.update(cores=cores or sorted(os.sched_getaffinity(0)), pinned=bool(cores),
               threads=cfg["cpu_threads"], budget_ms=budget, confirm_s=cfg["cpu_confirm_s"],
               rows=[])
    save()
    log = Path(cfg["out"]) / "cpu_capacity.runs.log"
    for name, fs, ch in cfg["cpu_capacity"]:
        common = ["--model", name, "--fs", f"{fs:g}", "--block", str(cfg["cpu_block"]),
                  "--channels", str(ch), "--threads", str(cfg["cpu_threads"]),
                  "--budget-ms", f"{budget:g}",
                  "--warmup-seconds", f"{cfg['cpu_warm_s']:g}"]
        row: dict = {"model": name, "fs": fs, "channels": ch}
        out["rows"].append(row)
        r = _bench_json(common + ["--find-capacity", "--streams", str(cfg["cpu_start"]),
                                  "--max-streams", str(cfg["cpu_max_streams"]),
                                  "--seconds", f"{cfg['cpu_trial_s']:g}"], log)
        row.update(search_s=cfg["cpu_trial_s"], capacity=r.get("capacity"),
                   ideal=r.get("ideal"), ideal_before=r.get("ideal_before"),
                   ideal_after=r.get("ideal_after"), fraction=r.get("capacity_fraction"),
                   trials=r.get("trials"), error=r.get("error"))
        save()
        if row["capacity"]:
            c = _bench_json(common + ["--streams", str(row["capacity"]),
                                      "--seconds", f"{cfg['cpu_confirm_s']:g}"], log)
            row["confirm"] = {k: c.get(k) for k in ("streams", "seconds", "misses", "drops",
                                                    "latency_p99_us", "latency_max_us",
                                                    "cpu_util", "error")}
            row["confirmed"] = c.get("misses") == 0 and c.get("drops") == 0
            save()
        if row.get("ideal"):
            n = max(1, int(0.8 * row["ideal"]))
            path = Path(cfg["out"]) / f"cpu_capacity_{name}.trace.npz"
            t = _bench_json(common + ["--streams", str(n), "--seconds",
                                      f"{cfg['cpu_trace_s']:g}", "--trace", str(path)], log)
            row["trace_trial"] = {"streams": n, "misses": t.get("misses"),
                                  "drops": t.get("drops"), "trace": t.get("trace"),
                                  "latency_p99_us": t.get("latency_p99_us"),
                                  "error": t.get("error")}
            save()


STEPS = {"env": step_env, "cpu_timing": step_cpu_timing, "gpu_timing": step_gpu_timing,
         "cpu_capacity": step_cpu_capacity}


def run_step(name: str, out_dir: Path) -> int:
    """The child's side: run one step, saving its partial result after every row."""
    cfg = json.loads((out_dir / "config.json").read_text())
    path = out_dir / "steps" / f"{name}.json"
    out: dict = {"step": name}

    def save():
        out["forbidden_modules"] = _forbidden_loaded()
        _write(path, out)
    save()
    reserved = set(cfg.get("cpu_cores") or ())
    if reserved and name != "cpu_capacity":
        rest = os.sched_getaffinity(0) - reserved
        if rest:
            os.sched_setaffinity(0, rest)
    if name.startswith("capacity_"):
        step_capacity(cfg, out, save, name[len("capacity_"):])
    else:
        STEPS[name](cfg, out, save)
    out["done"] = True
    save()
    return 0


# ------------------------------------------------------------------------ the parent
class _Child:
    def __init__(self, name: str, argv: list[str], env: dict, log: Path, limit: float):
        self.name, self.limit, self.log = name, limit, log
        self.t0 = time.monotonic()
        self.f = open(log, "w")
        self.p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=self.f,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)

    def wait(self, deadline: float) -> dict:
        """Wait until the child ends, its limit passes or ``deadline`` (monotonic);
        returns its status."""
        end = min(self.t0 + self.limit, deadline)
        try:
            rc = self.p.wait(timeout=max(end - time.monotonic(), 0.0))
            status = "ok" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            self.kill()
            rc, status = None, f"timed out after {time.monotonic() - self.t0:.0f} s"
        self.f.close()
        tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        return {"status": status, "exit": rc, "wall_s": round(time.monotonic() - self.t0, 1),
                "log": str(self.log.name), "log_tail": tail if status != "ok" else ""}

    def kill(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.p.wait(timeout=5)
                return
            except subprocess.TimeoutExpired:
                continue


def _child_env(cfg: dict, out: Path) -> dict:
    """PYTHONPATH with the repository root, and ``rtamt_apps`` linked to apps/ when it
    is not installed; the test and Triton settings of the device."""
    import importlib.util

    paths = [str(ROOT)]
    if importlib.util.find_spec("rtamt_apps") is None:
        shim = out / "pyshim"
        shim.mkdir(exist_ok=True)
        link = shim / "rtamt_apps"
        if not link.exists():
            link.symlink_to(ROOT / "apps", target_is_directory=True)
        paths.append(str(shim))
    env = dict(os.environ)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(paths + ([old] if old else []))
    env["RTAMT_TEST_DEVICE"] = cfg["device"]
    env["TRITON_INTERPRET"] = "1" if cfg["device"] == "cpu" else "0"
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                "NUMBA_NUM_THREADS"):
        env[var] = "1"
    return env


def _pytest_argv(cfg: dict, out: Path) -> list[str]:
    argv = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider",
            "-p", "no:pytestqt", "-p", "latency_bench.pytest_record",
            f"--junitxml={out / 'junit.xml'}", "-m", cfg["tests_m"], *cfg["tests"]]
    if cfg["tests_k"]:
        argv += ["-k", cfg["tests_k"]]
    return argv


def _tests_summary(out: Path) -> dict:
    rows = []
    path = out / "tests.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    count: dict[str, int] = {}
    for r in rows:
        count[r["outcome"]] = count.get(r["outcome"], 0) + 1
    bad = [r for r in rows if r["outcome"] in ("failed", "error")]
    return {"counts": count, "failures": bad[:40], "slowest": sorted(
        rows, key=lambda r: -r.get("duration", 0.0))[:5]}


def _predictions(gpu: dict, cfg: dict) -> dict:
    """Streams predicted per capacity model from the measured end-to-end block times: for
    each measured batch ``b`` with ``e2e(b) <= period``, ``b x (period / 2) / e2e(b)``
    (half the period for the call, half for waiting and the scheduler), the largest, at
    most twice the largest batch measured."""
    preds = {}
    for name, _fs, _ch, dtype, _ in cfg["capacity"]:
        rows = [r for r in gpu.get("rows", []) if r["model"] == name and r["dtype"] == dtype]
        est = [r["batch"] * 0.5 * r["period_us"] / r["e2e_us_p50"] for r in rows
               if r["e2e_us_p50"] <= r["period_us"]]
        if est:
            top = max(r["batch"] for r in rows)
            preds[name] = max(1, int(min(max(est), 2 * top)))
    return preds


def _load(out: Path, name: str) -> dict:
    p = out / "steps" / f"{name}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return {}


def report(out: Path, cfg: dict, status: dict) -> dict:
    """Gather every step's file into gpu.json and write gpu.md."""
    res = {"config": {k: v for k, v in cfg.items() if k != "tests"}, "steps": status,
           "env": _load(out, "env"), "tests": _tests_summary(out),
           "cpu_timing": _load(out, "cpu_timing"), "gpu_timing": _load(out, "gpu_timing"),
           "cpu_capacity": _load(out, "cpu_capacity"),
           "capacity": {c[0]: _load(out, f"capacity_{c[0]}") for c in cfg["capacity"]}}
    res["forbidden_modules"] = sorted({m for name in status for m in
                                       _load(out, name).get("forbidden_modules", [])})
    _write(out / "gpu.json", res)
    (out / "gpu.md").write_text(markdown(res))
    return res


def _f(v, fmt="{:.3g}") -> str:
    return "–" if v is None else fmt.format(v)


def markdown(res: dict) -> str:
    """The summary of a run, for docs/gpu.md."""
    e, cfg = res["env"], res["config"]
    L = [f"## GPU check {e.get('date', '?')}: {e.get('gpu', e.get('device_kind', '?'))}", ""]
    if cfg.get("tiny"):
        L += ["**Tiny sizes in Triton's interpreter on the CPU: a check of the plumbing, "
              "not a measurement.**", ""]
    L += [f"GPU {e.get('gpu', '–')} (compute {e.get('capability', '–')}, "
          f"{e.get('gpu_memory_gib', '–')} GiB), driver {e.get('driver', '–')}, CUDA "
          f"{e.get('cuda', '–')}; torch {e.get('torch', '–')}, triton {e.get('triton', '–')}, "
          f"numba {e.get('numba', '–')}, numpy {e.get('numpy', '–')}, Python "
          f"{e.get('python', '–')}; CPU {e.get('cpu', '–')} ({e.get('cores', '–')} cores); "
          f"commit {(e.get('commit') or '–')[:12]}.", "",
          "| step | status | wall s |", "|---|---|---|"]
    L += [f"| {k} | {v['status']} | {v['wall_s']} |" for k, v in res["steps"].items()]
    t = res["tests"]
    where = ("in Triton's interpreter on CPU tensors" if cfg.get("device") == "cpu" else
             "compiled Triton kernels on CUDA tensors")
    L += ["", f"**Tests** (`-m \"{cfg.get('tests_m')}\"`, {where}): "
          + (", ".join(f"{n} {k}" for k, n in sorted(t["counts"].items())) or "none ran")]
    for r in t["failures"][:15]:
        L.append(f"- FAILED `{r['nodeid']}`: {r.get('message', '')[:300]}")
    cpu = {(r["model"], r["dtype"], r["batch"]): r for r in res["cpu_timing"].get("rows", [])}
    g = res["gpu_timing"].get("rows", [])
    L += ["", "**Throughput** (stream-seconds per second, 256-sample blocks; GPU end to end "
          "with both copies, GPU kernels alone, one CPU core with the numba kernels; "
          "ratio = GPU end to end / CPU):", "",
          "| model | dtype | batch | GPU e2e | GPU kernels | CPU 1 core | ratio | e2e µs/block "
          "p50 / p99 | kernel µs | H2D µs | D2H µs |", "|---|---|---|---|---|---|---|---|---|"
          "---|---|"]
    i0 = "{:.0f}"
    for r in g:
        c = cpu.get((r["model"], r["dtype"], r["batch"]))
        cs = c["stream_s_per_s"] if c else None
        big = " (largest)" if r.get("largest") else ""
        ratio = r["stream_s_per_s"] / cs if cs else None
        L.append(f"| {r['model']} | {r['dtype']} | {r['batch']}{big}"
                 f" | {_f(r['stream_s_per_s'], i0)} | {_f(r.get('kernel_stream_s_per_s'), i0)}"
                 f" | {_f(cs, '{:.1f}')} | {_f(ratio, '{:.1f}')}"
                 f" | {r['e2e_us_p50']:.0f} / {r['e2e_us_p99']:.0f}"
                 f" | {_f(r.get('kernel_us_p50'), i0)} | {_f(r.get('h2d_us_p50'), i0)}"
                 f" | {_f(r.get('d2h_us_p50'), i0)} |")
    for err in res["gpu_timing"].get("errors", []):
        L.append(f"- gpu_timing error: {err[:300]}")
    for name, c in res["capacity"].items():
        if not c:
            continue
        L += ["", f"**Capacity, {name}** ({c.get('fs', 0):g} Hz, {c.get('channels')} ch, "
              f"{c.get('dtype')}, budget {c.get('budget_ms')} ms, block {c.get('block')}): "
              f"prediction {c.get('prediction')} ({c.get('prediction_source')}); "
              f"**{c.get('capacity') if c.get('capacity') is not None else 'not found'} streams** "
              "with 0 misses and 0 drops in the confirming trial.", "",
              "| streams | s | pass | misses | drops | p99 ms | cores | CPU µs per stream-block "
              "| batch |", "|---|---|---|---|---|---|---|---|---|"]
        for r in c.get("trials", []) + ([dict(c["confirm"], streams=f"{c['confirm']['streams']} "
                                               "(confirm)")] if c.get("confirm") else []):
            L.append(f"| {r['streams']} | {r['seconds']:g} | {'yes' if r['pass'] else 'no'} | "
                     f"{r['misses']} | {r['drops']} | {r['latency_p99_us'] / 1e3:.2f} | "
                     f"{r['cpu_util']:.2f} | {r['cpu_us_per_stream_block']:.1f} | "
                     f"{r['batch_mean']:.0f} |")
    cc = res.get("cpu_capacity") or {}
    if cc.get("rows"):
        L += ["", f"**CPU scheduler capacity** ({cc.get('threads')} worker threads on cores "
              f"{cc.get('cores')}{'' if cc.get('pinned') else ' (not pinned)'}, budget "
              f"{cc.get('budget_ms')} ms, float64, 0 misses and 0 drops): capacity as a "
              "fraction of the ideal (the bare batched model on those cores, same run).", "",
              f"| model | capacity | confirmed ({cc.get('confirm_s', 0):g} s) | ideal | fraction "
              "| trace trial: streams, "
              "misses, late calls by cause |", "|---|---|---|---|---|---|"]
        for r in cc["rows"]:
            tt = r.get("trace_trial") or {}
            tr = tt.get("trace") or {}
            causes = ", ".join(f"{k} {tr[k]}" for k in ("stall", "slowdown", "late_source",
                                                       "slow_call", "backlog", "queued",
                                                       "other") if tr.get(k))
            L.append(f"| {r['model']} | {_f(r.get('capacity'), '{:.0f}')} | "
                     f"{'yes' if r.get('confirmed') else 'no'} | {_f(r.get('ideal'), '{:.1f}')}"
                     f" | {_f(r.get('fraction'), '{:.2f}')} | {tt.get('streams', '–')}, "
                     f"{tt.get('misses', '–')}, {tr.get('late_calls', '–')}"
                     f"{' (' + causes + ')' if causes else ''} |")
            if r.get("error"):
                L.append(f"- {r['model']}: {r['error'][:300]}")
    if res.get("forbidden_modules"):
        L += ["", f"Imported on this path (must not be): {', '.join(res['forbidden_modules'])}"]
    return "\n".join(L) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m latency_bench.gpu", description=(
        "The GPU check: compiled Triton tests on CUDA, per-model GPU and CPU timing, "
        "scheduler capacity; writes DIR/gpu.json and DIR/gpu.md."))
    p.add_argument("--out", required=True, help="output directory (created)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cuda (default); cpu runs Triton's interpreter with --tiny sizes "
                        "(a plumbing check)")
    p.add_argument("--tiny", action="store_true", help="tiny sizes (implied by --device cpu)")
    p.add_argument("--time-limit", type=float, default=470.0,
                   help="seconds for the whole run (default 470)")
    p.add_argument("--limit", action="append", default=[], metavar="STEP=SECONDS",
                   help="a step's own time limit (default: " + ", ".join(
                       f"{k}={v:g}" for k, v in LIMITS.items()) + ")")
    p.add_argument("--skip", action="append", default=[], metavar="STEP",
                   help="leave a step out (repeatable)")
    p.add_argument("--step", help=argparse.SUPPRESS)
    return p


def main(argv=None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    out = Path(a.out).resolve()
    if a.step:
        return run_step(a.step, out)
    limits = dict(LIMITS)
    for item in a.limit:
        k, _, v = item.partition("=")
        try:
            limits[k] = float(v)
        except ValueError:
            p.error(f"argument --limit: {item!r} is not STEP=SECONDS")
        if k not in LIMITS:
            p.error(f"argument --limit: unknown step {k!r}; steps: {', '.join(LIMITS)}")
    if a.device == "cuda":
        try:
            import torch
        except ImportError as e:
            print(f"latency_bench.gpu: error: torch is not importable ({e})", file=sys.stderr)
            return EXIT_USAGE
        if not torch.cuda.is_available():
            print("latency_bench.gpu: error: torch sees no CUDA device (torch.cuda."
                  "is_available() is False); --device cpu runs the plumbing in Triton's "
                  "interpreter", file=sys.stderr)
            return EXIT_USAGE
    t_start = time.monotonic()
    deadline = t_start + a.time_limit
    cfg = dict(sizes(a.tiny or a.device == "cpu"), device=a.device, out=str(out))
    try:
        have = sorted(os.sched_getaffinity(0))
    except AttributeError:
        have = []
    # the CPU capacity's cores: the two highest, kept from the other steps (not on a
    # machine too small to spare them)
    cfg["cpu_cores"] = have[-cfg["cpu_threads"]:] if len(have) >= 2 * cfg["cpu_threads"] \
        else None
    for k, v in cfg.pop("limits", {}).items():
        limits.setdefault(k, v)
    (out / "steps").mkdir(parents=True, exist_ok=True)
    for old in list((out / "steps").glob("*.json")) + [out / "tests.jsonl"]:
        old.unlink(missing_ok=True)
    _write(out / "config.json", cfg)
    env = _child_env(cfg, out)
    env["RTAMT_PYTEST_RECORD"] = str(out / "tests.jsonl")
    status: dict[str, dict] = {}

    def child(name, argv=None):
        argv = argv or [sys.executable, "-m", "latency_bench.gpu", "--out", str(out),
                        "--step", name]
        return _Child(name, argv, env, out / f"{name}.log", limits[name])

    def finish(c):
        status[c.name] = c.wait(deadline)
        print(f"{c.name}: {status[c.name]['status']} ({status[c.name]['wall_s']} s)",
              flush=True)
        report(out, cfg, status)

    def skipped(name) -> bool:
        if name in a.skip:
            status[name] = {"status": "skipped (--skip)", "exit": None, "wall_s": 0.0,
                            "log": "", "log_tail": ""}
            return True
        if time.monotonic() >= deadline - 5:
            status[name] = {"status": "not run (time limit)", "exit": None, "wall_s": 0.0,
                            "log": "", "log_tail": ""}
            return True
        return False

    if not skipped("env"):
        finish(child("env"))
    cpu = None if skipped("cpu_timing") else child("cpu_timing")
    cpu_cap = None if skipped("cpu_capacity") else child("cpu_capacity")
    if not skipped("tests"):
        finish(child("tests", _pytest_argv(cfg, out)))
    if not skipped("gpu_timing"):
        finish(child("gpu_timing"))
    cfg["predictions"] = _predictions(_load(out, "gpu_timing"), cfg)
    _write(out / "config.json", cfg)
    for c in cfg["capacity"]:
        name = f"capacity_{c[0]}"
        limits.setdefault(name, 60.0)
        if not skipped(name):
            finish(child(name))
    if cpu is not None:
        finish(cpu)
    if cpu_cap is not None:
        finish(cpu_cap)
    res = report(out, cfg, status)
    print(f"wrote {out / 'gpu.json'} and {out / 'gpu.md'} in {time.monotonic() - t_start:.0f} s")
    bad = [k for k, v in status.items() if v["status"] not in ("ok",) and
           not v["status"].startswith("skipped")]
    failed = res["tests"]["counts"].get("failed", 0) + res["tests"]["counts"].get("error", 0)
    if bad or failed or res["forbidden_modules"]:
        print(f"not clean: steps {bad or 'ok'}, {failed} tests failed, forbidden imports "
              f"{res['forbidden_modules'] or 'none'}")
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
