"""A pytest plugin (``-p latency_bench.pytest_record``) that appends one JSON line per test
to the file named by ``RTAMT_PYTEST_RECORD`` as soon as the test ends: ``nodeid``,
``outcome`` (passed, failed, skipped, error), ``duration`` (s) and, for a failure, the
first lines of its message.  A run killed at its time limit (latency_bench.gpu) keeps the
results of every test that finished; pytest's own ``--junitxml`` is written only at the
end."""
from __future__ import annotations

import json
import os


def _write(row: dict) -> None:
    path = os.environ.get("RTAMT_PYTEST_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = report.outcome
        if report.when == "setup" and report.failed:
            outcome = "error"
        row = {"nodeid": report.nodeid, "outcome": outcome,
               "duration": round(report.duration, 3)}
        if report.failed:
            row["message"] = str(report.longrepr)[-1500:]
        _write(row)
    elif report.when == "teardown" and report.failed:
        _write({"nodeid": report.nodeid, "outcome": "error", "duration": 0.0,
                "message": "teardown: " + str(report.longrepr)[-1500:]})
