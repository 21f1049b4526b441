"""``python -m latency_bench.r128 [FILE ...] [--files 4] [--seconds 120] [--repeat 3] [--json]``

EBU R128 meters side by side on the same files: rtamt's
:class:`rtamt.loudness.bs1770.LoudnessMeter` (M, S, I, LRA and true peak, histogram mode)
and libebur128 through pyebur128 (modes M, S, I, LRA, sample and true peak, its exact
mode), both fed the same float64 blocks of ``--block`` frames from memory (file reading
is not timed).  Without FILE arguments it writes ``--files`` stereo 48 kHz programme-like
files (speech-like modulated noise, noise bursts, tone mixtures) to a temporary directory.

Per file: I, LRA and max true peak of each meter and their differences; per meter: the
real-time factor (processing time / audio duration, best of ``--repeat`` runs) and the
speed ratio (libebur128 time / rtamt time: above 1, rtamt is faster), measured in one
run on the same machine.  rtamt's kernels are compiled (or loaded from the cache) before
timing.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from latency_bench.__main__ import _cpu_name  # noqa: E402

FS = 48000


def _write_programmes(folder: Path, n: int, seconds: float) -> list[Path]:
    """``n`` stereo 48 kHz float32 WAV files of programme-like material."""
    import soundfile as sf
    from scipy import signal as sps

    rng = np.random.default_rng(2024)
    files = []
    T = int(seconds * FS)
    t = np.arange(T) / FS
    for i in range(n):
        kind = ("speech", "bursts", "music")[i % 3]
        if kind == "speech":
            mod = np.abs(np.sin(2 * np.pi * 4 * t)) ** 2
            b, a = sps.butter(2, [200, 4000], btype="band", fs=FS)
            x = sps.lfilter(b, a, rng.standard_normal((2, T))) * mod
        elif kind == "bursts":
            env = np.repeat(10 ** (rng.uniform(-40, 0, T // 24000 + 1) / 20), 24000)[:T]
            x = rng.standard_normal((2, T)) * env * (rng.random(T // 24000 + 1) > 0.3) \
                .repeat(24000)[:T]
        else:
            x = np.zeros((2, T))
            for _ in range(8):
                f = 110 * 2 ** (rng.integers(0, 48) / 12)
                env = np.repeat(10 ** (rng.uniform(-30, 0, T // 24000 + 1) / 20), 24000)[:T]
                x += env * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi))
        x = 0.5 * x / np.abs(x).max()
        p = folder / f"prog{i}_{kind}.wav"
        sf.write(str(p), x.T.astype(np.float32), FS, subtype="FLOAT")
        files.append(p)
    return files


def _rtamt(x: np.ndarray, fs: float, block: int):
    from rtamt.loudness.bs1770 import LoudnessMeter

    m = LoudnessMeter(fs=fs, channels=x.shape[0])
    t0 = time.perf_counter()
    for i in range(0, x.shape[1], block):
        m(x[:, i:i + block])
    dt = time.perf_counter() - t0
    return dt, (m.integrated, m.loudness_range, m.true_peak)


def _libebur128(x: np.ndarray, fs: float, block: int):
    import pyebur128 as pe

    mm = pe.MeasurementMode
    st = pe.R128State(x.shape[0], int(fs), mm.MODE_M | mm.MODE_S | mm.MODE_I | mm.MODE_LRA
                      | mm.MODE_SAMPLE_PEAK | mm.MODE_TRUE_PEAK)
    xi = np.ascontiguousarray(x.T)
    t0 = time.perf_counter()
    for i in range(0, xi.shape[0], block):
        st.add_frames(xi[i:i + block].ravel(), xi[i:i + block].shape[0])
    integ, lra = pe.get_loudness_global(st), pe.get_loudness_range(st)
    tp = max(pe.get_true_peak(st, c) for c in range(x.shape[0]))
    dt = time.perf_counter() - t0
    return dt, (integ, lra, 20 * math.log10(tp) if tp > 0 else -math.inf)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m latency_bench.r128", description=__doc__)
    ap.add_argument("files", nargs="*", help="audio files (default: generated programmes)")
    ap.add_argument("--files", dest="n_files", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--block", type=int, default=4800, help="frames per call (default 100 ms)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from rtamt.signals import read_audio

    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(f) for f in args.files] or _write_programmes(Path(tmp), args.n_files,
                                                                   args.seconds)
        signals = [(p, *read_audio(p)) for p in paths]
    fs0, x0 = signals[0][1], signals[0][2]
    _rtamt(x0[:, : int(fs0)], fs0, args.block)            # compile / load the kernels
    rows, t_r, t_e, audio = [], 0.0, 0.0, 0.0
    for p, fs, x in signals:
        best_r = best_e = math.inf
        for _ in range(args.repeat):
            dr, vr = _rtamt(x, fs, args.block)
            de, ve = _libebur128(x, fs, args.block)
            best_r, best_e = min(best_r, dr), min(best_e, de)
        dur = x.shape[1] / fs
        t_r, t_e, audio = t_r + best_r, t_e + best_e, audio + dur
        rows.append({"file": str(p), "seconds": round(dur, 2),
                     "rtamt": {"I": vr[0], "LRA": vr[1], "TP": vr[2], "rtf": best_r / dur},
                     "libebur128": {"I": ve[0], "LRA": ve[1], "TP": ve[2], "rtf": best_e / dur},
                     "diff": {k: vr[i] - ve[i] for i, k in enumerate(("I", "LRA", "TP"))}})
    report = {"machine": f"{platform.node()} ({_cpu_name()})", "block": args.block,
              "files": rows, "rtf_rtamt": t_r / audio, "rtf_libebur128": t_e / audio,
              "speed_ratio": t_e / t_r}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"EBU R128 meters on {len(rows)} file(s), {audio:.0f} s of audio, blocks of "
          f"{args.block} frames, {report['machine']}")
    print(f"{'file (rtamt, libebur128)':32} {'I LUFS':>25} {'LRA LU':>13} {'TP dBTP':>13}")
    for r in rows:
        a, b = r["rtamt"], r["libebur128"]
        print(f"{Path(r['file']).name[:32]:32} {a['I']:12.2f} {b['I']:12.2f} "
              f"{a['LRA']:6.2f} {b['LRA']:6.2f} {a['TP']:6.2f} {b['TP']:6.2f}")
    print(f"real-time factor: rtamt {report['rtf_rtamt']:.5f} ({1 / report['rtf_rtamt']:.0f}x "
          f"real time), libebur128 {report['rtf_libebur128']:.5f} "
          f"({1 / report['rtf_libebur128']:.0f}x); libebur128 time / rtamt time = "
          f"{report['speed_ratio']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
