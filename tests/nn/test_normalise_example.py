"""examples/normalise_lufs.py converges: run as a script, it brings four clips from about
-54 to -10 LUFS to -23 LUFS integrated within 0.1 LU (measured again by the streaming
meter) by gradient descent through rn.R128Meter (its last output line is a JSON
summary)."""
import json

from test_nn_example import ROOT, _run


def test_normalise_lufs_example_converges():
    run = _run(str(ROOT / "examples" / "normalise_lufs.py"))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    res = json.loads(lines[-1])
    assert len(res["integrated"]) == 4
    assert res["max_error_lu"] < 0.1, res
    assert all(abs(v - res["target"]) < 0.1 for v in res["integrated"]), res
    first = [float(v) for v in lines[1].split()[1:5]]        # step 0: the clips as made
    assert max(first) - min(first) > 30.0, first              # far apart at the start
    assert "Warning" not in run.stderr, run.stderr
