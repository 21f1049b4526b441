"""``python -m latency_bench.r128_cli [--seconds 600] [--files 200] [--file-seconds 3]
[--jobs 2] [--repeat 3] [--dir DIR] [--json]``

``rtamt loudness`` against ffmpeg's EBU R128 filter (``ffmpeg -hide_banner -nostats -i FILE
-af ebur128=peak=true -f null -``: integrated loudness, loudness range, true peak), both as a
user runs them, each command a fresh process timed from launch to exit, in one run on the
same machine:

* **long**: one stereo 48 kHz 24-bit WAV of ``--seconds`` (default 10 minutes) of
  programme-like material: ``rtamt loudness FILE`` vs ffmpeg;
* **many**: ``--files`` stereo 48 kHz files of ``--file-seconds`` each in one folder:
  ``rtamt loudness --jobs N DIR`` (one command) and ``rtamt loudness DIR`` (one process) vs
  ffmpeg called once per file, one after the other (a shell loop), and N at a time (``xargs
  -P N``, for fairness: rtamt uses N processes);
* **startup**: a 0.3 s file, where start-up is all there is to time.

The commands run interleaved, ``--repeat`` rounds, the order reversed every other round, after
one untimed run of each (numba's kernel cache warm, the files in the page cache).  Per command:
every wall time, the best and the median, the CPU seconds (user + system of the process and
its workers, from ``os.wait4``: what a loaded machine disturbs least), the peak RSS of the
largest process, and the speed in times real time.  ``ratio`` = ffmpeg's time / rtamt's
time (best of each; ``ratio_median`` of the medians): 1.0 or more means rtamt is at least as
fast.  Both tools' figures of the long file are reported side by side (a check that both
measured the same audio; ffmpeg prints one decimal).

``true_peak``: rtamt's time in its true-peak stage (ITU-R BS.1770-4 Annex 2 interpolator)
against the whole meter, measured in this process on the first 60 s of the long file, and
that stage's estimated share of the long file's ``rtamt loudness`` run.

The machine (CPU, cores, load average before and after) is in the report: on a shared
machine compare the ratios, which are measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from latency_bench.__main__ import _cpu_name

FS = 48000
CHUNK_S = 10                                     # seconds generated and written at a time
FFMPEG_ARGS = ("-af", "ebur128=peak=true", "-f", "null", "-")


# ------------------------------------------------------------------ material
def _programme(rng, seconds: float) -> np.ndarray:
    """``(T, 2)`` float64 programme-like audio in 10 s segments: speech-like modulated noise
    with pauses, tone chords, noise bursts, at levels from -40 to -8 dBFS RMS."""
    from scipy import signal as sps

    n = int(round(seconds * FS))
    out = np.empty((n, 2))
    t0 = 0
    band = sps.butter(2, [200, 4000], btype="band", fs=FS, output="sos")
    while t0 < n:
        m = min(CHUNK_S * FS, n - t0)
        t = (t0 + np.arange(m)) / FS
        kind = rng.integers(3)
        if kind == 0:
            syll = np.abs(np.sin(2 * np.pi * rng.uniform(3, 5) * t)) ** 2
            pause = (np.sin(2 * np.pi * 0.3 * t + rng.uniform(0, 6.3)) > -0.6)
            x = sps.sosfilt(band, rng.standard_normal((m, 2)), axis=0) * (syll * pause)[:, None]
        elif kind == 1:
            x = np.zeros((m, 2))
            for _ in range(6):
                f = 110 * 2 ** (rng.integers(0, 48) / 12)
                x += np.sin(2 * np.pi * f * t + rng.uniform(0, 6.3))[:, None] \
                    * rng.uniform(0.3, 1.0, 2)
        else:
            env = np.repeat(rng.uniform(0, 1, m // 4800 + 1) > 0.4, 4800)[:m]
            x = rng.standard_normal((m, 2)) * env[:, None]
        rms = math.sqrt(float(np.mean(x ** 2))) or 1.0
        x *= 10 ** (rng.uniform(-40, -8) / 20) / rms
        out[t0:t0 + m] = np.clip(x, -0.99, 0.99)
        t0 += m
    return out


def write_long(path: Path, seconds: float, seed: int = 39) -> Path:
    """A stereo 48 kHz 24-bit WAV of ``seconds`` of :func:`_programme`, written in 10 s
    chunks (memory does not grow with the length)."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    with sf.SoundFile(str(path), "w", FS, 2, subtype="PCM_24") as f:
        left = seconds
        while left > 0:
            s = min(CHUNK_S, left)
            f.write(_programme(rng, s))
            left -= s
    return path


def write_many(folder: Path, n: int, seconds: float, seed: int = 139) -> list[Path]:
    """``n`` stereo 48 kHz 24-bit WAV files of ``seconds`` each in ``folder``."""
    import soundfile as sf

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        p = folder / f"clip{i:04d}.wav"
        sf.write(str(p), _programme(rng, seconds), FS, subtype="PCM_24")
        paths.append(p)
    return paths


# ------------------------------------------------------------------ running commands
def rtamt_command() -> list[str]:
    """The installed ``rtamt`` console script of this interpreter, else ``python -m
    rtamt_apps`` (the same program)."""
    exe = Path(sysconfig.get_path("scripts")) / "rtamt"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "rtamt_apps"]


def _tree_hwm_kb(pid: int) -> int:
    """Largest ``VmHWM`` (peak resident set, KiB) of ``pid`` and its descendants (Linux
    ``/proc``; 0 where it cannot be read)."""
    best, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for ln in f:
                    if ln.startswith("VmHWM:"):
                        best = max(best, int(ln.split()[1]))
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return best


def _run(argv) -> dict:
    """Run ``argv`` to its end: wall seconds, CPU seconds (user + system of the process and
    its waited-for workers, ``os.wait4``), the peak RSS (MB) of its largest process
    (``/proc``, read every 5 ms while it runs: ``wait4``'s ``ru_maxrss`` would count this
    process's memory, which a child has until it executes the command), and its output;
    raises if it fails.  CPU and RSS are None where the system lacks ``wait4`` / ``/proc``."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
        hwm = [0]
        if os.path.exists(f"/proc/{p.pid}/status"):
            def watch():
                while p.returncode is None:
                    hwm[0] = max(hwm[0], _tree_hwm_kb(p.pid))
                    time.sleep(0.005)
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
        else:                                   # pragma: no cover - no /proc
            watcher = None
        if hasattr(os, "wait4"):
            _, status, ru = os.wait4(p.pid, 0)
            wall = time.perf_counter() - t0
            p.returncode = os.waitstatus_to_exitcode(status)
            cpu = ru.ru_utime + ru.ru_stime
        else:                                   # pragma: no cover - Windows
            p.wait()
            wall, cpu = time.perf_counter() - t0, None
        if watcher is not None:
            watcher.join()
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read().decode(errors="replace"), fe.read().decode(errors="replace")
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} exited with {p.returncode}: "
                           f"{err.strip()[-500:]}")
    return {"wall": wall, "cpu": cpu, "rss_mb": hwm[0] / 1024 or None, "out": out, "err": err}


def _runs(argvs, parallel: int = 1) -> dict:
    """Run every command of ``argvs`` (``parallel`` at a time): one timing for all."""
    t0 = time.perf_counter()
    if parallel == 1:
        rs = [_run(a) for a in argvs]
    else:
        with ThreadPoolExecutor(parallel) as ex:
            rs = list(ex.map(_run, argvs))
    wall = time.perf_counter() - t0
    cpu = [r["cpu"] for r in rs]
    return {"wall": wall, "cpu": None if None in cpu else sum(cpu),
            "rss_mb": max((r["rss_mb"] or 0) for r in rs) or None,
            "out": rs[-1]["out"], "err": rs[-1]["err"]}


def _summary(samples: list[dict], audio_s: float) -> dict:
    walls = [s["wall"] for s in samples]
    cpus = [s["cpu"] for s in samples if s["cpu"] is not None]
    best = min(walls)
    return {"wall_s": [round(w, 4) for w in walls], "best_s": round(best, 4),
            "median_s": round(statistics.median(walls), 4),
            "cpu_s": [round(c, 3) for c in cpus],
            "max_rss_mb": round(max((s["rss_mb"] or 0) for s in samples), 1) or None,
            "x_real_time": round(audio_s / best, 1), "rtf": round(best / audio_s, 5)}


def _interleaved(commands: dict, repeat: int, audio_s: float) -> dict:
    """Each of ``commands`` (name -> zero-argument callable returning a timing) once
    untimed, then ``repeat`` rounds, every other round in reverse order."""
    for run in commands.values():
        run()
    samples = {k: [] for k in commands}
    names = list(commands)
    for i in range(repeat):
        for k in (names if i % 2 == 0 else names[::-1]):
            samples[k].append(commands[k]())
    out = {k: _summary(v, audio_s) for k, v in samples.items()}
    out["_last"] = {k: v[-1] for k, v in samples.items()}
    return out


def _ratio(res: dict, ref: str, other: str) -> tuple[float, float]:
    return (round(res[ref]["best_s"] / res[other]["best_s"], 3),
            round(res[ref]["median_s"] / res[other]["median_s"], 3))


# ------------------------------------------------------------------ parsing the outputs
def ffmpeg_figures(stderr: str) -> dict:
    """I (LUFS), LRA (LU) and true peak (dBTP) of ffmpeg's ebur128 summary."""
    def grab(pattern):
        m = re.findall(pattern, stderr)
        return None if not m else float(m[-1])
    return {"I": grab(r"\bI:\s+(-?[\d.]+|-inf) LUFS"), "LRA": grab(r"LRA:\s+(-?[\d.]+) LU\b"),
            "TP": grab(r"Peak:\s+(-?[\d.]+|-inf) dBFS")}


def rtamt_figures(stdout: str) -> dict:
    rec = json.loads(stdout.strip().splitlines()[-1])
    return {"I": rec.get("integrated_lufs"), "LRA": rec.get("lra_lu"),
            "TP": rec.get("true_peak_dbtp")}


# ------------------------------------------------------------------ the true-peak share
def true_peak_share(path: Path, seconds: float = 60.0, block: int = 65536) -> dict:
    """Time of the meter and of its true-peak stage alone on the first ``seconds`` of
    ``path`` (the blocks ``rtamt loudness`` reads, from memory, best of 3)."""
    from rtamt.loudness.bs1770 import LoudnessMeter
    from rtamt.signals import AudioReader

    with AudioReader(path, count=False) as r:
        x = r.read_tm(int(seconds * r.fs))
        fs = r.fs
    n = x.shape[0]
    blocks = [x[i:i + block] for i in range(0, n, block)]
    LoudnessMeter(fs=fs, channels=x.shape[1])(blocks[0].T)      # kernels loaded
    best_m = best_tp = math.inf
    for _ in range(3):
        m = LoudnessMeter(fs=fs, channels=x.shape[1])
        t0 = time.perf_counter()
        for b in blocks:
            m(b.T)
        best_m = min(best_m, time.perf_counter() - t0)
        tp = LoudnessMeter(fs=fs, channels=x.shape[1]).truepeak
        t0 = time.perf_counter()
        for b in blocks:
            tp.process_tm(tp.coeffs, tp._state, b[None])
        best_tp = min(best_tp, time.perf_counter() - t0)
    audio = n / fs
    return {"seconds": round(audio, 2), "meter_rtf": round(best_m / audio, 6),
            "true_peak_rtf": round(best_tp / audio, 6),
            "share_of_meter": round(best_tp / best_m, 3)}


# ------------------------------------------------------------------ main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m latency_bench.r128_cli", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600.0, help="long file (default 600)")
    ap.add_argument("--files", type=int, default=200, help="short files (default 200)")
    ap.add_argument("--file-seconds", type=float, default=3.0)
    ap.add_argument("--jobs", type=int, default=2, help="rtamt --jobs and ffmpeg in parallel")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="keep (and reuse) the generated files here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        print("latency_bench.r128_cli: ffmpeg is not installed", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.dir) if args.dir else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        report = bench(root, ffmpeg, args)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(describe(report))
    return 0


def _material(root: Path, args) -> tuple[Path, Path, Path]:
    long = root / f"long_{args.seconds:g}s.wav"
    if not long.exists():
        write_long(long, args.seconds)
    many = root / f"many_{args.files}x{args.file_seconds:g}s"
    if len(list(many.glob("*.wav"))) != args.files:
        shutil.rmtree(many, ignore_errors=True)
        write_many(many, args.files, args.file_seconds)
    short = root / "short_0.3s.wav"
    if not short.exists():
        write_long(short, 0.3)
    return long, many, short


def bench(root: Path, ffmpeg: str, args) -> dict:
    """Every measurement of the module docstring; the report as a dict."""
    import numba

    long, many, short = _material(root, args)
    rt = rtamt_command()
    ff = [ffmpeg, "-hide_banner", "-nostats", "-nostdin", "-i"]
    files = sorted(many.glob("*.wav"))
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    res_long = _interleaved({
        "rtamt": lambda: _run([*rt, "loudness", "--json", str(long)]),
        "ffmpeg": lambda: _run([*ff, str(long), *FFMPEG_ARGS]),
    }, args.repeat, args.seconds)
    last = res_long.pop("_last")
    res_long["ratio"], res_long["ratio_median"] = _ratio(res_long, "ffmpeg", "rtamt")
    res_long["figures"] = {"rtamt": rtamt_figures(last["rtamt"]["out"]),
                           "ffmpeg": ffmpeg_figures(last["ffmpeg"]["err"])}
    audio_many = args.files * args.file_seconds
    res_many = _interleaved({
        f"rtamt_jobs{args.jobs}": lambda: _run([*rt, "loudness", "--json", "--jobs",
                                                str(args.jobs), str(many)]),
        "rtamt_jobs1": lambda: _run([*rt, "loudness", "--json", str(many)]),
        "ffmpeg_per_file": lambda: _runs([[*ff, str(f), *FFMPEG_ARGS] for f in files]),
        f"ffmpeg_per_file_{args.jobs}_at_a_time": lambda: _runs(
            [[*ff, str(f), *FFMPEG_ARGS] for f in files], parallel=args.jobs),
    }, args.repeat, audio_many)
    res_many.pop("_last")
    key = f"rtamt_jobs{args.jobs}"
    res_many["ratio"], res_many["ratio_median"] = _ratio(res_many, "ffmpeg_per_file", key)
    res_many["ratio_parallel"], res_many["ratio_parallel_median"] = _ratio(
        res_many, f"ffmpeg_per_file_{args.jobs}_at_a_time", key)
    res_short = _interleaved({
        "rtamt": lambda: _run([*rt, "loudness", "--json", str(short)]),
        "ffmpeg": lambda: _run([*ff, str(short), *FFMPEG_ARGS]),
    }, args.repeat, 0.3)
    res_short.pop("_last")
    res_short["ratio"], res_short["ratio_median"] = _ratio(res_short, "ffmpeg", "rtamt")
    tp = true_peak_share(long, min(60.0, args.seconds))
    tp["share_of_long_run"] = round(tp["true_peak_rtf"] * args.seconds
                                    / res_long["rtamt"]["best_s"], 3)
    version = subprocess.run([ffmpeg, "-version"], capture_output=True, text=True).stdout
    return {
        "machine": f"{platform.node()} ({_cpu_name()}, {os.cpu_count()} cores)",
        "load_average_before": load_before,
        "load_average_after": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "ffmpeg": version.splitlines()[0] if version else ffmpeg,
        "python": platform.python_version(), "numba": numba.__version__,
        "rtamt_command": " ".join(rt), "repeat": args.repeat,
        "long": {"seconds": args.seconds, **res_long},
        "many": {"files": args.files, "file_seconds": args.file_seconds, "jobs": args.jobs,
                 **res_many},
        "startup": {"seconds": 0.3, **res_short},
        "true_peak": tp,
    }


def describe(rep: dict) -> str:
    """The report as text."""
    def row(name, s):
        return (f"  {name:34} best {s['best_s']:8.3f} s  median {s['median_s']:8.3f} s  "
                f"{s['x_real_time']:7.1f}x real time  cpu {min(s['cpu_s'] or [math.nan]):7.2f} s"
                f"  rss {s['max_rss_mb'] or math.nan:6.0f} MB")

    lo, ma, st, tp = rep["long"], rep["many"], rep["startup"], rep["true_peak"]
    lines = [f"rtamt loudness vs ffmpeg ebur128=peak=true on {rep['machine']}; "
             f"{rep['ffmpeg']}; load average {rep['load_average_before']} -> "
             f"{rep['load_average_after']}; {rep['repeat']} interleaved rounds",
             f"long: one stereo 48 kHz file of {lo['seconds']:g} s"]
    lines += [row(k, lo[k]) for k in ("rtamt", "ffmpeg")]
    lines.append(f"  ratio ffmpeg/rtamt: {lo['ratio']:.2f} (medians {lo['ratio_median']:.2f}); "
                 f"figures rtamt {lo['figures']['rtamt']}, ffmpeg {lo['figures']['ffmpeg']}")
    lines.append(f"many: {ma['files']} files of {ma['file_seconds']:g} s")
    lines += [row(k, v) for k, v in ma.items() if isinstance(v, dict)]
    lines.append(f"  ratio ffmpeg per file / rtamt --jobs {ma['jobs']}: {ma['ratio']:.2f} "
                 f"(medians {ma['ratio_median']:.2f}); ffmpeg {ma['jobs']} at a time: "
                 f"{ma['ratio_parallel']:.2f} ({ma['ratio_parallel_median']:.2f})")
    lines.append("startup: a 0.3 s file")
    lines += [row(k, st[k]) for k in ("rtamt", "ffmpeg")]
    lines.append(f"  ratio ffmpeg/rtamt: {st['ratio']:.2f}")
    lines.append(f"true peak: {tp['share_of_meter']:.0%} of the meter's time on "
                 f"{tp['seconds']:g} s (meter rtf {tp['meter_rtf']:.5f}, true peak "
                 f"{tp['true_peak_rtf']:.5f}); about {tp['share_of_long_run']:.0%} of the "
                 "long file's rtamt run")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
