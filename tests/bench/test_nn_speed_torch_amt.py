"""The torch_amt side-by-side of ``latency_bench.nn_speed --torch-amt-python PY`` (issue 42)
without torch_amt: a fake interpreter stands in for torch_amt's, and bad interpreters
give an error naming them.  No times are asserted."""
import json
import sys

import numpy as np
import pytest

from latency_bench import nn_speed

FAKE = """#!{python}
# stands in for torch_amt's interpreter: checks what nn_speed hands it, prints a result
import json, sys
import numpy as np
args = sys.argv[1:]
assert args[0].endswith("nn_speed_torch_amt.py"), args
opt = dict(zip(args[1::2], args[2::2]))
x = np.load(opt["--input"])
print("torch_amt would print progress here")
print(json.dumps({{"available": True, "best_s": {best}, "runs_s": [{best}], "cpu_s": 1.0,
                  "batch": x.shape[0], "samples": x.shape[1], "fs": float(opt["--fs"]),
                  "repeat": int(opt["--repeat"]), "dtype": opt["--dtype"],
                  "x_sum": float(x.sum())}}))
"""


def _interpreter(tmp_path, text: str, name: str = "python"):
    p = tmp_path / name
    p.write_text(text)
    p.chmod(0o755)
    return str(p)


def test_side_by_side_runs_in_the_given_interpreter(tmp_path):
    """The fake interpreter gets rtamt's input (its first --torch-amt-seconds), the sample
    rate, repeat and dtype; the ratios are torch_amt's compute time (wall, and process
    CPU) per second of audio over rtamt's forward + backward's, and nothing is labelled
    unverified."""
    py = _interpreter(tmp_path, FAKE.format(python=sys.executable, best=4.0))
    res = nn_speed.main(["--fs", "16000", "--seconds", "0.03", "--batch", "2",
                         "--repeat", "1", "--torch-amt-python", py,
                         "--torch-amt-seconds", "0.01", "--torch-amt-repeat", "2"])
    amt = res["torch_amt"]
    assert (amt["batch"], amt["samples"], amt["fs"], amt["repeat"], amt["dtype"]) == \
        (2, 160, 16000.0, 2, "float64")
    x0 = 0.02 * np.random.default_rng(0).standard_normal((2, 480))
    assert amt["x_sum"] == pytest.approx(x0[:, :160].sum(), rel=1e-12)
    assert amt["python"] == py and amt["rtf"] == pytest.approx(4.0 / (2 * 0.01))
    rt = res["rtamt"]["forward_backward_input"]
    assert res["speedup_vs_torch_amt"] == pytest.approx(amt["rtf"] / rt["rtf"])
    assert res["speedup_vs_torch_amt_cpu"] == pytest.approx(50.0 / rt["rtf_cpu"])
    assert "unverified" not in json.dumps(res).lower()


@pytest.mark.parametrize("kind", ["missing", "not_executable"])
def test_a_bad_interpreter_path_stops_before_timing(tmp_path, kind, monkeypatch):
    """A path that is not an executable file: SystemExit naming it, before any timing."""
    py = tmp_path / "python"
    if kind == "not_executable":
        py.write_text("#!/bin/sh\n")
    monkeypatch.setattr(nn_speed, "_timed", lambda *a: pytest.fail("timed anyway"))
    with pytest.raises(SystemExit, match=f"{py}.*not an executable file"):
        nn_speed.main(["--torch-amt-python", str(py)])


@pytest.mark.parametrize("body,message", [
    ("echo 'ModuleNotFoundError: torch_amt' >&2; exit 3", "failed \\(exit 3\\).*torch_amt"),
    ("echo 'no result here'", "printed no JSON.*no result here"),
    ("echo '{\"best_s\": 0, \"cpu_s\": 1}'", "no positive best_s and cpu_s")])
def test_a_failing_interpreter_is_reported(tmp_path, body, message):
    """An interpreter that fails, prints no JSON or no time: SystemExit naming it with its
    last output."""
    py = _interpreter(tmp_path, f"#!/bin/sh\n{body}\n")
    with pytest.raises(SystemExit, match=f"(?s){py}.*{message}"):
        nn_speed.torch_amt_side(py, np.zeros((1, 8)), 16000.0, 1, "float64", 60.0)
