"""Admission admits only what can run, and a block is bounded (issue 38, item 2).

* the cost model is measured at the stream's own block, with the scheduler's own time
  per call and per block (measured on a private scheduler), so that it predicts what a
  one-sample block really costs;
* a stream's blocks run one after another: a stream whose block's call takes longer
  than its period is refused whatever the number of workers (before: Dau1997 with
  ``block=1`` at 48 kHz and 10 ms was admitted on 2 threads and ran at 2.27x real time);
* a block longer than the budget is refused in strict mode;
* a block whose stream the memory cannot hold is refused, naming the figures, before
  anything of its size is allocated (before: ``block=10**7`` grew the process to 24 GB).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from rtamt.scheduler import RtamtCapacityError, Scheduler

FS = 48000


def test_a_stream_whose_call_outlasts_its_block_is_refused_on_any_number_of_threads():
    """Dau1997, block=1, budget 10 ms, 2 threads (the issue's case): refused, naming the
    call's time, the scheduler's share of it and the period; best-effort still opens it.
    A block a little longer is admitted."""
    with Scheduler(threads=2, realtime=None) as s:
        with pytest.raises(RtamtCapacityError) as ei:
            s.open("dau1997", FS, block=1, budget_ms=10)
        msg = str(ei.value)
        for part in ("one block's call takes", "the scheduler's own", "20.8 us period",
                     "one after another", "a block of at least", "best-effort"):
            assert part in msg, msg
        assert not s.streams
        h = s.open("dau1997", FS, block=1, budget_ms=10, admission="best-effort")
        assert h.predicted_serial > 0.9
        h.close("discard")
        ok = s.open("dau1997", FS, block=64, budget_ms=10)
        assert ok.predicted_serial < 0.9


@pytest.mark.parametrize("block", [1, 4])
def test_the_cost_model_predicts_a_small_blocks_real_cost(block, monkeypatch):
    """The prediction for one stream's call at a small block (the processor's call plus
    the scheduler's own time) is within 0.6-3x of what a block really takes through the
    scheduler: the median time from one call's start to the next while the worker goes
    from block to block (a CallTrace of 700 blocks queued at once; the least of three
    runs, as a shared CPU only ever makes it longer).  The issue's model, extrapolated
    from 256-sample blocks, predicted 11 us for one sample that took 47 us (0.23); the
    same model measured 18 us against 32 us here (0.58): this checks accuracy, the
    refusal itself is the test above."""
    from rtamt.scheduler import CallTrace, costs

    # the scheduler's overhead is measured once per process: measure it again now, so that
    # the prediction and the blocks timed below see the same machine (the VM's speed
    # drifts 2x over a suite's run)
    monkeypatch.setattr(costs, "_OVERHEADS", {})
    tr, runs = CallTrace(4096), []
    with Scheduler(threads=1, realtime=None, trace=tr) as s:
        h = s.open("dau1997", FS, block=block, admission="best-effort", history=0,
                   source_timeout=None)
        predicted, model = h.group.cost.cost(1, block), h.group.cost.describe()
        for _ in range(3):
            t0 = time.perf_counter()
            h.push(np.zeros(700 * block), wait=True)
            assert h.wait_idle(60)
            runs.append((t0, time.perf_counter()))
    start = tr.records()["start"]
    real = [float(np.median(np.diff(start[(start > a) & (start < b)]))) for a, b in runs]
    assert 0.6 * min(real) <= predicted <= 3.0 * min(real), (predicted, real, model)


def test_a_block_longer_than_its_budget_is_refused_in_strict_mode():
    """4096 samples at 48 kHz last 85 ms: with a 10 ms budget its first sample waits
    longer than the budget.  Refused (strict) with the figure; best-effort opens it; the
    default budget (the block period) is admitted.  (Before: admitted.)"""
    with Scheduler(threads=1, realtime=None) as s:
        with pytest.raises(RtamtCapacityError, match=r"a block of 4096 samples lasts 85\.33 "
                           r"ms at 48000 Hz, longer than the budget.*at most 480 samples"):
            s.open("dau1997", FS, block=4096, budget_ms=10)
        assert not s.streams
        s.open("dau1997", FS, block=4096, budget_ms=10, admission="best-effort")
        s.open("dau1997", FS, block=4096)


#: run in a child whose address space is limited to its size after the imports + 3 GB
_CHILD = textwrap.dedent('''
    import json, resource, tracemalloc
    import rtamt
    from rtamt.scheduler import RtamtCapacityError

    out = {}
    s = rtamt.Scheduler(threads=1, realtime=None)
    s.open("dau1997", 48000, 256, budget_ms=20).close()       # the design is measured
    vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (vm + 3 * 2**30, resource.RLIM_INFINITY))
    tracemalloc.start()
    try:
        s.open("dau1997", 48000, 2**20, admission="best-effort")     # 7.4 GB
        out["huge"] = "admitted"
    except RtamtCapacityError as e:
        out["huge"] = str(e)
    except BaseException as e:
        out["huge"] = repr(e)
    out["peak"] = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    out["streams"] = len(s.streams)
    h = s.open("dau1997", 48000, 4096, budget_ms=100)                # fits
    out["normal"] = h.block
    s.close("discard")
    print(json.dumps(out))
''')


def test_a_block_the_memory_cannot_hold_is_refused_before_it_is_allocated():
    """Under a 3 GB address-space limit, Dau1997 with 2**20-sample blocks (about 7.4 GB:
    three outputs of 2.2 kB per sample kept, the inner stages' buffers, the inputs, the
    ring) is refused with the figures and the largest block that fits, even in
    best-effort mode, before any of it is allocated (tracemalloc: under 16 MB); a normal
    block opens under the same limit.  (Before: it allocated until MemoryError.)"""
    r = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    msg = out["huge"]
    assert msg.startswith("cannot open 'dau1997'"), msg
    for part in ("a block of 1048576 samples needs about 7.", "GB", "3 outputs kept",
                 "2.2 kB", "can still allocate", "the largest block that fits is"):
        assert part in msg, msg
    fit = int(msg.split("the largest block that fits is ")[1].split()[0])
    assert 100_000 < fit < 2**20
    assert out["peak"] < 16e6 and out["streams"] == 0
    assert out["normal"] == 4096


def test_the_memory_estimate_matches_what_a_stream_takes():
    """The estimate is what the stream really keeps: resident memory after opening a
    65536-sample Dau1997 stream and processing 3 blocks is within 25 % of it."""
    child = textwrap.dedent('''
        import json, numpy as np, rtamt
        def rss():
            return int(open("/proc/self/statm").read().split()[1]) * 4096
        s = rtamt.Scheduler(threads=1, realtime=None)
        s.open("dau1997", 48000, 256, budget_ms=20).close()
        r0 = rss()
        h = s.open("dau1997", 48000, 65536, admission="best-effort")
        h.push(np.zeros(3 * 65536), wait=True)
        h.wait_idle(120)
        print(json.dumps({"grew": rss() - r0, "estimate": h.predicted_memory}))
        s.close("discard")
    ''')
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert 0.75 * out["estimate"] < out["grew"] < 1.25 * out["estimate"], out


@pytest.mark.parametrize("files,room", [
    ({"/proc/self/cgroup": "0::/app\n", "/sys/fs/cgroup/app/memory.max": "6000000000\n",
      "/sys/fs/cgroup/app/memory.current": "2000000000\n",
      "/sys/fs/cgroup/app/memory.stat": "anon 1\ninactive_file 1000000000\n"}, 5_000_000_000),
    ({"/proc/self/cgroup": "4:memory:/ns/x\n0::/\n",     # v1, seen from inside the container
      "/sys/fs/cgroup/memory/memory.limit_in_bytes": "6000000000\n",
      "/sys/fs/cgroup/memory/memory.usage_in_bytes": "1000000000\n",
      "/sys/fs/cgroup/memory/memory.stat": "total_inactive_file 0\n"}, 5_000_000_000),
    ({"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "max\n",
      "/sys/fs/cgroup/memory.current": "5\n"}, None),
    ({"/proc/self/cgroup": "4:memory:/\n",
      "/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
      "/sys/fs/cgroup/memory/memory.usage_in_bytes": "5\n"}, None),
], ids=["v2", "v1 in a container", "v2 no limit", "v1 no limit"])
def test_the_room_under_a_cgroup_memory_limit_is_read(monkeypatch, files, room):
    """A container's memory limit counts (cgroup v2 and v1): the limit less the usage but
    the page cache the kernel can drop; no limit, no figure."""
    from rtamt.scheduler import memory

    monkeypatch.setattr(memory, "_read", lambda path: files.get(path))
    assert memory._cgroup_room() == room
