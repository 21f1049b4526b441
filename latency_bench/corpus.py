"""``python -m latency_bench.corpus [--seconds 30] [--files 8] [--json]``

Corpus throughput of rtamt features through lhotse, in hours of audio per hour of wall
time (``x`` real time), on a corpus of noise WAV files written to a temporary directory:

* **per worker**: ``CutSet.compute_and_store_features(RtamtExtractor(cfg), ...,
  num_jobs=1)`` in this process (one thread: numba, BLAS and torch limited to one), WAV
  reading, the model, the pooling and lilcom storage (``LilcomChunkyWriter``) included,
  after a warm-up cut (kernel cache load, model construction) that is not timed.  For
  Dau1997 (``modfb``, dB of mean power per 10 ms frame) at 16 kHz and 48 kHz and Moore2016
  (``specific_loudness``, 2 ears x 150, mean per 10 ms) at 32 kHz;
* **Dask scaling**: the same call with ``executor=distributed.Client(LocalCluster(
  n_workers=W, threads_per_worker=1, processes=True))`` for W = 1 and 2 (Dau1997, 16 kHz,
  ``num_jobs=4`` chunks in both runs, every worker warmed up first); scaling = wall time
  with 1 worker / wall time with 2.

Targets (checked here, never in unit tests): Dau1997 pooled features >= 30x real time per
worker, 1 -> 2 worker scaling >= 1.6.  Other processes on the machine lower both: run it
on a quiet machine and repeat (``--repeat``; the best run of each measurement is kept).
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from latency_bench.__main__ import _cpu_name  # noqa: E402

#: the targets of issue 23
TARGET_DAU_PER_WORKER = 30.0
TARGET_SCALING = 1.6


def write_corpus(d: pathlib.Path, files: int, seconds: float, fs: int, channels: int = 1,
                 seed: int = 0) -> list[pathlib.Path]:
    """``files`` int16 WAV files of amplitude-modulated noise (about 70 dB SPL at the default
    calibration), ``seconds`` each."""
    from scipy.io import wavfile

    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    n = int(seconds * fs)
    t = np.arange(n) / fs
    out = []
    am = (1 + 0.5 * np.sin(2 * np.pi * 4 * t))[:, None]
    for i in range(files):
        x = 0.03 * rng.standard_normal((n, channels)) * am
        p = d / f"{fs}_{i:03d}.wav"
        wavfile.write(p, fs, (np.clip(x, -1, 1) * 32767).astype(np.int16))
        out.append(p)
    return out


def _cuts(paths):
    from lhotse import CutSet, Recording, RecordingSet

    return CutSet.from_manifests(recordings=RecordingSet.from_recordings(
        Recording.from_file(p) for p in paths))


def _warm(cfg_dict: dict, fs: int, channels: int) -> int:
    """Build the extractor and run it on 0.5 s (kernel cache load); runs in a worker."""
    from rtamt.integrations.lhotse import RtamtConfig, RtamtExtractor

    ext = RtamtExtractor(RtamtConfig.from_dict(dict(cfg_dict)))
    ext.extract(np.zeros((channels, fs // 2), dtype=np.float32), fs)
    return os.getpid()


def per_worker(cfg, fs, channels, tmp, files, seconds, repeat):
    """Best audio-seconds per wall-second of one in-process worker over ``repeat`` runs."""
    import torch
    from lhotse import LilcomChunkyWriter

    from rtamt.integrations.lhotse import RtamtExtractor

    torch.set_num_threads(1)
    paths = write_corpus(tmp / f"w{fs}_{channels}", files, seconds, fs, channels)
    cuts = _cuts(paths)
    ext = RtamtExtractor(cfg)
    warm = _cuts(paths[:1]).subset(first=1)
    warm.compute_and_store_features(ext, tmp / "warm", storage_type=LilcomChunkyWriter,
                                    progress_bar=False)
    best = 0.0
    for r in range(repeat):
        t0 = time.perf_counter()
        cuts.compute_and_store_features(ext, tmp / f"feats_{fs}_{r}", num_jobs=1,
                                        storage_type=LilcomChunkyWriter, progress_bar=False)
        best = max(best, files * seconds / (time.perf_counter() - t0))
    return best


def dask_scaling(cfg, fs, tmp, files, seconds, repeat):
    """{workers: best x real time of the whole cluster} for 1 and 2 Dask workers."""
    import dask
    import distributed
    from lhotse import LilcomChunkyWriter

    from rtamt.integrations.lhotse import RtamtExtractor, dask_config

    paths = write_corpus(tmp / "dask", files, seconds, fs, seed=1)
    cuts = _cuts(paths)
    ext = RtamtExtractor(cfg)
    res = {}
    for workers in (1, 2):
        with dask.config.set(dask_config()), \
                distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
                                         processes=True, dashboard_address=None) as cluster, \
                distributed.Client(cluster) as client:
            client.run(_warm, cfg.to_dict(), fs, 1)
            best = 0.0
            for r in range(repeat):
                t0 = time.perf_counter()
                cuts.compute_and_store_features(ext, tmp / f"dask_{workers}_{r}", num_jobs=4,
                                                executor=client,
                                                storage_type=LilcomChunkyWriter,
                                                progress_bar=False)
                best = max(best, files * seconds / (time.perf_counter() - t0))
        res[workers] = best
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m latency_bench.corpus",
                                description=__doc__.split("\n\n")[1])
    p.add_argument("--seconds", type=float, default=30.0, help="length of each file, s")
    p.add_argument("--files", type=int, default=8, help="files per corpus (Dask: twice)")
    p.add_argument("--repeat", type=int, default=2, help="runs per measurement (best kept)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.seconds <= 0 or a.files < 1 or a.repeat < 1:
        p.error("--seconds must be > 0, --files and --repeat >= 1")

    from rtamt.integrations.lhotse import RtamtConfig

    dau = RtamtConfig(model="dau1997")
    moore = RtamtConfig(model="moore2016")
    out = {"machine": f"{_cpu_name()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}",
           "python": platform.python_version(), "file_seconds": a.seconds, "files": a.files}
    with tempfile.TemporaryDirectory() as td:
        tmp = pathlib.Path(td)
        out["dau1997_16k_x_per_worker"] = per_worker(dau, 16000, 1, tmp, a.files, a.seconds,
                                                     a.repeat)
        out["dau1997_48k_x_per_worker"] = per_worker(dau, 48000, 1, tmp, a.files, a.seconds,
                                                     a.repeat)
        out["moore2016_32k_stereo_x_per_worker"] = per_worker(moore, 32000, 2, tmp, a.files,
                                                              a.seconds, a.repeat)
        sc = dask_scaling(dau, 16000, tmp, 2 * a.files, a.seconds, a.repeat)
    out["dask_dau1997_16k_x"] = {str(k): v for k, v in sc.items()}
    out["dask_scaling_1_to_2"] = sc[2] / sc[1]
    out["load_after"] = os.getloadavg()[0]
    out["pass_dau_per_worker"] = out["dau1997_16k_x_per_worker"] >= TARGET_DAU_PER_WORKER
    out["pass_scaling"] = out["dask_scaling_1_to_2"] >= TARGET_SCALING
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"machine: {out['machine']} (load after: {out['load_after']:.2f}); "
          f"{a.files} x {a.seconds:g} s files, best of {a.repeat}")
    print(f"  Dau1997 modfb dB/10 ms, 16 kHz mono:  "
          f"{out['dau1997_16k_x_per_worker']:7.1f} x real time per worker "
          f"(target >= {TARGET_DAU_PER_WORKER:g}: "
          f"{'PASS' if out['pass_dau_per_worker'] else 'FAIL'})")
    print(f"  Dau1997 modfb dB/10 ms, 48 kHz mono:  "
          f"{out['dau1997_48k_x_per_worker']:7.1f} x real time per worker")
    print(f"  Moore2016 specific loudness, 32 kHz stereo: "
          f"{out['moore2016_32k_stereo_x_per_worker']:7.1f} x real time per worker")
    print(f"  Dask LocalCluster, Dau1997 16 kHz: 1 worker {sc[1]:.1f} x, 2 workers "
          f"{sc[2]:.1f} x: scaling {out['dask_scaling_1_to_2']:.2f} (target >= "
          f"{TARGET_SCALING:g}: {'PASS' if out['pass_scaling'] else 'FAIL'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
