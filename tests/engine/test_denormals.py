"""Silence after loud input: outputs stay finite and exact; the processing thread
flushes subnormals (timing is measured in latency_bench --signal silence-after-loud)."""
import os
import subprocess
import sys
import threading

import numpy as np

import rtamt

FS = 16000.0
TINY = np.finfo(np.float64).tiny


def _loud_then_silence(seconds_silence=3.0):
    rng = np.random.default_rng(3)
    loud = rng.standard_normal(int(0.2 * FS)) * 10 ** ((90 - 100) / 20)
    return np.concatenate([loud, np.zeros(int(seconds_silence * FS))])


def _subnormals(model):
    n = 0
    for s in model.stages:
        for a in s.state.values():
            a = np.abs(a)
            n += int(np.count_nonzero((a > 0) & (a < TINY)))
    return n


def test_silence_after_loud_is_finite_exact_and_flushed():
    x = _loud_then_silence()
    whole = rtamt.Dau1997(FS).process_all(x)
    m = rtamt.Dau1997(FS)
    parts = [m.process_all(x[i:i + 160]) for i in range(0, x.size, 160)]
    for k, v in whole.items():
        assert np.isfinite(v).all()
        np.testing.assert_array_equal(np.concatenate([p[k] for p in parts], axis=-1), v)
    # the adaptation output returns to the silence value (0 model units)
    assert abs(whole["adaptloop"][:, -1]).max() < 1.0
    assert _subnormals(m) == 0


def test_ftz_is_enabled_in_any_processing_thread():
    x = _loud_then_silence()
    box = {}

    def work():
        m = rtamt.Dau1997(FS)
        for i in range(0, x.size, 512):
            m(x[i:i + 512])
        box["n"] = _subnormals(m)

    th = threading.Thread(target=work)
    th.start()
    th.join()
    assert box["n"] == 0


def test_without_ftz_states_do_go_subnormal():
    """Control: with RTAMT_KEEP_DENORMALS=1 the same stream leaves subnormal states,
    so the check above can fail."""
    code = (
        "import numpy as np, rtamt, sys\n"
        f"sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
        "from test_denormals import _loud_then_silence, _subnormals, FS\n"
        "m = rtamt.Dau1997(FS); m(_loud_then_silence())\n"
        "print(_subnormals(m))\n"
    )
    env = dict(os.environ, RTAMT_KEEP_DENORMALS="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip().splitlines()[-1]) > 0
