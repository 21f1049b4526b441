"""``python -m latency_bench --cluster local|ADDRESS``: paced streams through an
:class:`rtamt.cluster.Cluster` beside the same streams on a local
:class:`rtamt.scheduler.Scheduler`, in one run.

Every trial feeds ``N`` streams one block per block period from one paced source thread
(each stream's own noise).  A block's **latency** is, for both, the time from the push of
the block (its last sample) to its result in the pushing process: the local scheduler's
subscriber call, or the cluster's result at the client (transport to the worker, its
scheduler, the reply).  A trial passes with no block over ``--budget-ms`` and every block
back.  Printed, from one run:

* the latency the cluster adds: its p50 / p99 / max beside the local scheduler's at the
  same ``N`` (``--streams``, default 4);
* the capacity (largest passing ``N``: misses at most ``--max-miss-rate`` of its blocks,
  none missing; doubling then bisection up to ``--max-streams``) of the cluster of
  ``--workers`` workers of ``--threads`` threads, per worker, and as a fraction of the
  local scheduler's on as many threads (``workers × threads``: the same cores);
* ``--cluster local`` only: the recovery time after one worker's process is killed with
  SIGKILL mid-run (from the detection of its death until its streams, restored on the
  others, have processed their replayed input).

The cluster's streams return their results without outputs (``results='none'``): a
Dau1997 block of 256 samples has 563 kB of outputs, so shipping every output of every
stream measures the network, not rtamt.  ``--cluster ADDRESS`` joins a running cluster
(one worker per node); the recovery trial needs ``local``.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import numpy as np

_perf = time.perf_counter


def _source(streams: list, period: float, n_blocks: int, block: int, t0: float,
            pushed: np.ndarray, stop=None) -> threading.Thread:
    """A paced thread: block ``k`` of every stream at ``t0 + (k+1)·period``, its push time
    in ``pushed[k]``; ``stop(k)`` before block ``k`` (the recovery trial's kill)."""
    rng = np.random.default_rng(len(streams))
    noise = 0.05 * rng.standard_normal((len(streams), 16 * block))

    def run():
        for k in range(n_blocks):
            d = t0 + (k + 1) * period - _perf()
            if d > 0:
                time.sleep(d)
            if stop is not None:
                stop(k)
            pushed[k] = _perf()
            j = (k % 16) * block
            for i, s in enumerate(streams):
                s.push(noise[i, j:j + block])
    return threading.Thread(target=run, name="bench-cluster-source", daemon=True)


def _trial(open_stream, args, n: int, stop=None, close=None) -> dict:
    """``n`` paced streams made by ``open_stream(i)``; latency per block from its push to
    its result here."""
    period = args.block / args.fs
    k_warm = int(round(args.warmup_seconds / period))
    n_blocks = k_warm + max(1, int(round(args.seconds / period)))
    streams = [open_stream(i) for i in range(n)]
    got = np.full((n, n_blocks), np.nan)
    for i, s in enumerate(streams):
        def sub(r, i=i):
            if r.seq < n_blocks:
                got[i, r.seq] = r.t_done
        s.subscribe(sub)
    pushed = np.zeros(n_blocks)
    src = _source(streams, period, n_blocks, args.block, _perf() + 0.05, pushed, stop)
    src.start()
    src.join()
    if close is not None:
        close(streams)
    lat = (got - pushed[None, :])[:, k_warm:]
    ok = np.isfinite(lat)
    v = lat[ok]
    return {"streams": n, "blocks": int(ok.sum()), "missing": int((~ok).sum()),
            "misses": int((v > args.budget_ms / 1e3).sum()),
            "p50_ms": 1e3 * float(np.percentile(v, 50)) if v.size else float("nan"),
            "p99_ms": 1e3 * float(np.percentile(v, 99)) if v.size else float("nan"),
            "max_ms": 1e3 * float(v.max()) if v.size else float("nan")}


def _capacity(run, args, log) -> int:
    """Largest ``N`` whose trial :func:`run` passes (doubling, then bisection)."""
    def ok(n):
        r = run(n)
        good = r["misses"] <= args.max_miss_rate * r["blocks"] and r["missing"] == 0
        log(f"    {n:4d} streams: p99 {r['p99_ms']:7.2f} ms  max {r['max_ms']:7.2f} ms  "
            f"misses {r['misses']}  missing {r['missing']}  {'ok' if good else 'FAIL'}")
        return good
    good, bad, n = 0, None, 1
    while good < args.max_streams:
        if not ok(n):
            bad = n
            break
        good, n = n, min(2 * n, args.max_streams)
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    return good


def run(args, log=print) -> dict:
    from rtamt.cluster import Cluster
    from rtamt.scheduler import Scheduler

    opts = dict(budget_ms=args.budget_ms, admission="best-effort")
    rep: dict = {"fs": args.fs, "block": args.block, "budget_ms": args.budget_ms,
                 "threads": args.threads, "workers": args.workers, "model": args.model}

    def local(n):
        with Scheduler(threads=args.threads * args.workers, realtime=None) as s:
            return _trial(lambda i: s.open(args.model, args.fs, args.block, name=f"l{i}",
                                           **opts), args, n,
                          close=lambda hs: [h.close("drain") for h in hs])

    if args.cluster == "local":
        c = Cluster.local(workers=args.workers, threads=args.threads,
                          snapshot_every_s=args.snapshot_every, scheduler={"realtime": None})
    else:
        c = Cluster(args.cluster, threads=args.threads, snapshot_every_s=args.snapshot_every,
                    scheduler={"realtime": None})
    try:
        workers = len(c.workers)
        rep["workers"] = workers

        def remote(n, stop=None):
            return _trial(lambda i: c.open(args.model, args.fs, args.block, name=f"c{i}",
                                           results="none", **opts), args, n, stop=stop,
                          close=lambda hs: [h.close("discard") for h in hs])
        log(f"latency at {args.streams} streams, {args.model} {args.fs:g} Hz block "
            f"{args.block}, budget {args.budget_ms:g} ms:")
        rep["local"], rep["cluster"] = local(args.streams), remote(args.streams)
        for k in ("local", "cluster"):
            r = rep[k]
            log(f"  {k:8s} p50/p99/max {r['p50_ms']:.2f}/{r['p99_ms']:.2f}/"
                f"{r['max_ms']:.2f} ms  misses {r['misses']}")
        rep["added_ms"] = {q: rep["cluster"][f"{q}_ms"] - rep["local"][f"{q}_ms"]
                           for q in ("p50", "p99", "max")}
        log("  the cluster adds p50/p99/max " + "/".join(
            f"{rep['added_ms'][q]:.2f}" for q in ("p50", "p99", "max")) + " ms")
        if args.find_capacity:
            log(f"capacity, local scheduler ({args.threads * args.workers} threads):")
            rep["capacity_local"] = _capacity(local, args, log)
            log(f"capacity, cluster ({workers} workers x {args.threads} threads):")
            rep["capacity_cluster"] = _capacity(remote, args, log)
            rep["capacity_per_worker"] = per = rep["capacity_cluster"] / workers
            rep["capacity_fraction"] = (rep["capacity_cluster"] / rep["capacity_local"]
                                        if rep["capacity_local"] else None)
            log(f"  local {rep['capacity_local']}  cluster {rep['capacity_cluster']} "
                f"({per:.1f} per worker) = {rep['capacity_fraction'] or 0:.2f} of the local "
                "scheduler's on the same cores")
        if args.cluster == "local" and workers > 1:
            k_kill = int(round((args.warmup_seconds + args.seconds / 2) * args.fs
                               / args.block))

            def stop(k):
                if k == k_kill:
                    c.kill_worker(0)
            r = remote(args.streams, stop=stop)
            rec = c.recoveries[-1] if c.recoveries else None
            rep["recovery"] = None if rec is None else {
                "seconds": rec.seconds, "streams": len(rec.streams),
                "inexact": rec.inexact, "unplaced": rec.unplaced, "trial": r}
            if rec is not None:
                log(f"recovery after SIGKILL of worker 0: {1e3 * rec.seconds:.0f} ms for "
                    f"{len(rec.streams)} streams (trial max latency {r['max_ms']:.0f} ms)")
    finally:
        c.close()
    return rep


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m latency_bench --cluster",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", required=True, metavar="local|ADDRESS")
    p.add_argument("--model", default="dau1997")
    p.add_argument("--fs", type=float, default=48000.0)
    p.add_argument("--block", type=int, default=256)
    p.add_argument("--budget-ms", type=float, default=20.0)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--workers", type=int, default=2, help="--cluster local: workers")
    p.add_argument("--threads", type=int, default=1, help="threads per worker (and of the "
                   "local scheduler)")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--warmup-seconds", type=float, default=1.0)
    p.add_argument("--snapshot-every", type=float, default=1.0)
    p.add_argument("--find-capacity", action="store_true")
    p.add_argument("--max-streams", type=int, default=128)
    p.add_argument("--max-miss-rate", type=float, default=0.0, metavar="RATE",
                   help="--find-capacity: a trial passes with misses up to RATE of its "
                        "blocks (default 0)")
    p.add_argument("--json", action="store_true", help="print the report as JSON, last "
                   "line of stdout (Ray may print above it)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    rep = run(args, log=(lambda *a: print(*a, file=sys.stderr)) if args.json else print)
    if args.json:
        print(json.dumps(rep))
    return 0
