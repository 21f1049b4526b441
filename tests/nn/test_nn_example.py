"""examples/fit_dau1997.py converges: run as a script, it recovers the perturbed
adaptation time constant and modulation filter Q of Dau1997 within 2 % by truncated BPTT
over streamed blocks (its last output line is a JSON summary)."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args):
    """``python *args`` from the repository root, with rtamt importable."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_fit_dau1997_example_converges():
    run = _run(str(ROOT / "examples" / "fit_dau1997.py"))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    res = json.loads(lines[-1])
    assert res["tau_rel_err"] < 0.02 and res["q_rel_err"] < 0.02, res
    assert res["loss_last"] < 1e-2 * res["loss_first"], res
    curve = [ln for ln in lines if ln[:5].strip().isdigit()]
    assert len(curve) >= 2                         # the loss curve is printed, per epoch
    assert "Warning" not in run.stderr, run.stderr


def test_fit_moore2016_bands_example_converges():
    """examples/fit_moore2016_bands.py fits four band gains through Moore2016 (streamed
    in blocks, state carried): the specific-loudness pattern within 2 % of the target,
    the gains near the target's, the loss curve printed."""
    run = _run(str(ROOT / "examples" / "fit_moore2016_bands.py"))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    res = json.loads(lines[-1])
    assert res["pattern_rel_err"] < 0.02, res
    assert res["loss_last"] < 1e-3 * res["loss_first"], res
    assert max(abs(g - t) for g, t in zip(res["gains_db"], res["target_db"])) < 0.2, res
    assert len([ln for ln in lines if ln[:5].strip().isdigit()]) >= 2   # the loss curve
    assert "Warning" not in run.stderr, run.stderr


def test_nn_speed_script_reports_json():
    """latency_bench/nn_speed.py runs (tiny configuration) and prints its JSON: the three
    timed cases, and no torch_amt ratio without --torch-amt-python (no times are
    asserted; the side-by-side plumbing: tests/bench/test_nn_speed_torch_amt.py)."""
    run = _run("-m", "latency_bench.nn_speed", "--fs", "16000", "--seconds", "0.03",
               "--batch", "2", "--repeat", "1")
    assert run.returncode == 0, run.stderr
    res = json.loads(run.stdout)
    assert set(res["rtamt"]) == {"forward", "forward_backward_input",
                                 "forward_backward_all_params"}
    for case in res["rtamt"].values():
        assert case["best_s"] > 0 and case["first_s"] > 0 and case["runs"] == 1
    assert res["torch_amt"]["available"] is False and "--torch-amt-python" in \
        res["torch_amt"]["reason"]
    assert "speedup_vs_torch_amt" not in res
