"""``Cluster(address)`` joins a cluster started with ``ray start --head`` (one worker per
node), in a process of its own; the head is started and stopped here."""
from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

pytest.importorskip("ray", reason="rtamt.cluster needs Ray: pip install 'rtamt[cluster]'")

from rtamt.cluster import RtamtClusterError  # noqa: E402
from rtamt.cluster.transport import check_reachable  # noqa: E402

RAY = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; "
       "sys.argv[0] = 'ray'; main()"]


@pytest.mark.timeout(170)
def test_cluster_joins_a_head_started_with_ray_start():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    head = subprocess.Popen(RAY + ["start", "--head", "--block", "--port", str(port),
                                   "--num-cpus", "1", "--include-dashboard", "false",
                                   "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 90
        while True:
            try:
                check_reachable(f"127.0.0.1:{port}", 2.0)
                break
            except RtamtClusterError:
                assert time.monotonic() < end and head.poll() is None, "ray start failed"
                time.sleep(0.5)
        code = textwrap.dedent(f"""
            import numpy as np
            from rtamt.cluster import Cluster
            c = Cluster("127.0.0.1:{port}", scheduler={{"realtime": None}})
            h = c.open("dau1997", 16000.0, 256, budget_ms=100, name="a")
            h.push(np.zeros(2000))
            c.flush()
            print("RESULT", len(c.workers), c.workers[0].threads, h.latest().seq)
            c.close()
        """)
        # `ray start` turns Ray's token authentication on; a client then asks for it
        env = dict(os.environ, RAY_AUTH_MODE="token")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=150, env=env)
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")]
        assert line == ["RESULT 1 1 6"], r.stderr[-3000:]
    finally:
        head.terminate()
        try:
            head.wait(30)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait(10)
        # the address `ray start` left for ray.init() to find: ours only
        mark = pathlib.Path(tempfile.gettempdir(), "ray", "ray_current_cluster")
        if mark.exists() and mark.read_text().strip().endswith(f":{port}"):
            mark.unlink()
