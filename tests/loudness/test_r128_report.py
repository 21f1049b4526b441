"""The R128 report of :class:`rtamt.loudness.bs1770.LoudnessMeter` (issue 39, item 2) and
programme totals (:class:`rtamt.loudness.bs1770.LoudnessStatistics`, item 3), against a
reference computed from the documents' definitions (tests/support/_r128ref.py: the
published 48 kHz K-weighting, BS.1770-4 gating, Tech 3342 percentiles), in the histogram
and the exact mode:

* every field: I and its relative gate, LRA with its low and high ends and its relative
  gate, the absolute gate, max M and S, per-channel and max true peak, sample peak, and
  the reason an empty I has (``too short``, ``below the absolute gate``);
* every field is the same for any partition of the stream into blocks;
* the running integrated loudness of every 100 ms step (``step_integrated``);
* the total of several programmes gates all their blocks together (not the mean of
  their LUFS): -20 and -26 LUFS of equal length give -22.0, not -23.0; -20 and -36 give
  -20.0 (the quiet one under the relative gate), and an LRA of 6 LU.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from rtamt.loudness.bs1770 import (
    REASON_BELOW_GATE,
    REASON_TOO_SHORT,
    LoudnessMeter,
    LoudnessStatistics,
)

from _r128ref import FS, report, tone

MODES = ("histogram", "exact")
#: histogram mode: LRA percentiles are bin means of 0.01 LU bins (docs/models.md)
TOL = {"histogram": 0.01, "exact": 1e-6}


def _measure(x, mode, block=4096, **kw):
    m = LoudnessMeter(fs=FS, channels=x.shape[0], mode=mode, **kw)
    r = None
    for i in range(0, x.shape[1], block):
        r = m(x[:, i:i + block])
    return m, r


def _programme():
    """Three levels for 8 s each, right channel 6 dB below the left: every field defined,
    an LRA from its three plateaus."""
    return tone([-20.0, -32.0, -26.0], 8.0, gains=[1.0, 0.5])


@pytest.mark.parametrize("mode", MODES)
def test_every_report_field_against_the_definitions(mode):
    x = _programme()
    ref = report(x)
    m, r = _measure(x, mode)
    tol = TOL[mode]
    assert r.integrated == pytest.approx(ref["integrated"], abs=tol)
    assert r.relative_gate == pytest.approx(ref["relative_gate"], abs=1e-6)
    assert r.loudness_range == pytest.approx(ref["lra"], abs=2 * tol)
    assert r.lra_low == pytest.approx(ref["lra_low"], abs=tol)
    assert r.lra_high == pytest.approx(ref["lra_high"], abs=tol)
    assert r.loudness_range == pytest.approx(r.lra_high - r.lra_low, abs=1e-9)
    assert r.lra_gate == pytest.approx(ref["lra_gate"], abs=1e-6)
    assert r.absolute_gate == -70.0
    assert r.max_momentary == pytest.approx(ref["max_momentary"], abs=0.01)
    assert r.max_short_term == pytest.approx(ref["max_short_term"], abs=0.01)
    np.testing.assert_allclose(r.sample_peak_channels, ref["sample_peak_channels"], atol=1e-9)
    assert r.sample_peak == pytest.approx(ref["sample_peak_channels"].max(), abs=1e-9)
    # a 1 kHz sine: its true peak is its amplitude (-20 and -26 dBFS) within the 4x
    # interpolator's accuracy
    np.testing.assert_allclose(r.true_peak_channels, [-20.0, -26.02], atol=0.02)
    assert r.true_peak == max(r.true_peak_channels)
    assert r.integrated_reason is None
    # the meter's properties and its statistics say the same as the result
    st = m.statistics()
    for k in ("integrated", "relative_gate", "loudness_range", "lra_low", "lra_high",
              "lra_gate", "max_momentary", "max_short_term", "integrated_reason"):
        assert getattr(m, k) == getattr(r, k) == getattr(st, k), k
    assert st.seconds == 24.0 and st.true_peak_dbtp == r.true_peak
    js = r.to_json()
    assert js["lra_low"] == r.lra_low and js["relative_gate"] == r.relative_gate
    assert js["absolute_gate"] == -70.0 and js["integrated_reason"] is None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("x, reason", [
    (tone([-20.0], 0.35), REASON_TOO_SHORT),                 # less than one gating block
    (tone([None], 5.0), REASON_BELOW_GATE),                  # digital silence
    (tone([-75.0], 5.0), REASON_BELOW_GATE),                 # all under -70 LUFS
], ids=["0.35 s", "silence", "-75 dBFS"])
def test_reason_when_the_integrated_loudness_is_empty(mode, x, reason):
    m, r = _measure(x, mode)
    assert r.integrated_reason == m.integrated_reason == m.statistics().integrated_reason \
        == reason
    assert r.integrated is None if reason == REASON_TOO_SHORT else r.integrated == -math.inf
    assert r.relative_gate is None and r.lra_low is None and r.lra_high is None
    assert r.to_json()["integrated_reason"] == reason


@pytest.mark.parametrize("mode", MODES)
def test_fields_do_not_depend_on_the_block_size(mode):
    x = _programme()[:, :int(12.34 * FS)]
    rng = np.random.default_rng(3)
    edges = np.unique(np.concatenate([[0], rng.integers(1, x.shape[1], 40), [x.shape[1]]]))
    results = []
    for parts in ([(0, x.shape[1])], [(i, i + 777) for i in range(0, x.shape[1], 777)],
                  list(zip(edges[:-1], edges[1:]))):
        m = LoudnessMeter(fs=FS, channels=2, mode=mode)
        for a, b in parts:
            r = m(x[:, a:b])
        results.append(r)
    keys = ("integrated", "relative_gate", "loudness_range", "lra_low", "lra_high",
            "lra_gate", "max_momentary", "max_short_term", "integrated_reason", "true_peak",
            "sample_peak")
    for r in results[1:]:
        assert [getattr(r, k) for k in keys] == [getattr(results[0], k) for k in keys]


@pytest.mark.parametrize("mode", MODES)
def test_step_integrated_is_the_running_gated_loudness(mode):
    x = _programme()[:, :int(10 * FS)]
    ref = report(x)
    from _r128ref import integrated

    want = [integrated(ref["blocks"][:k + 1])[0] for k in range(ref["blocks"].size)]
    want = np.array([np.nan if v is None else v for v in want])
    m = LoudnessMeter(fs=FS, channels=2, mode=mode)
    got = np.concatenate([m(x[:, i:i + 3001], step_integrated=True).step_integrated
                          for i in range(0, x.shape[1], 3001)])
    assert got.shape == want.shape and np.isnan(got[:3]).all()
    np.testing.assert_allclose(got[3:], want[3:], atol=TOL[mode])
    assert got[-1] == m.integrated
    assert m(x[:, :10]).step_integrated is None              # only when asked


@pytest.mark.parametrize("mode", MODES)
def test_total_gates_all_blocks_together(mode):
    """Two programmes of equal length at -20 and -26 LUFS: the total is the loudness of
    their blocks' mean power, 10 log10((10^-2.0 + 10^-2.6) / 2) = -22.04 LUFS (both above
    the relative gate), not the mean of their LUFS (-23); the LRA spans both: 6 LU."""
    a, b = _measure(tone([-20.0], 10.0), mode)[0], _measure(tone([-26.0], 10.0), mode)[0]
    la, lb = a.integrated, b.integrated
    t = a.statistics().merge(b.statistics())
    want = 10 * math.log10((10 ** (la / 10) + 10 ** (lb / 10)) / 2)
    assert t.integrated == pytest.approx(want, abs=TOL[mode])
    assert abs(t.integrated - (la + lb) / 2) > 0.9
    ref = report(np.concatenate([tone([-20.0], 10.0), tone([-26.0], 10.0)], axis=1))
    assert t.relative_gate == pytest.approx(want - 10.0, abs=TOL[mode])
    assert t.loudness_range == pytest.approx(lb - la if lb > la else la - lb, abs=0.02)
    assert (t.lra_low, t.lra_high) == (pytest.approx(lb, abs=0.01), pytest.approx(la, abs=0.01))
    assert t.max_momentary == pytest.approx(ref["max_momentary"], abs=0.01)
    assert t.true_peak == max(a.statistics().true_peak, b.statistics().true_peak)
    assert t.seconds == 20.0 and t.programmes == 2
    # the inputs are unchanged
    assert a.statistics().integrated == la


@pytest.mark.parametrize("mode", MODES)
def test_total_relative_gate_drops_a_quiet_programme(mode):
    """-20 and -36 LUFS: the mean power is at -22.9 LUFS, its gate -32.9: the -36
    programme's blocks are gated out and the total is -20, where a mean of LUFS gives -28."""
    a, b = _measure(tone([-20.0], 10.0), mode)[0], _measure(tone([-36.0], 10.0), mode)[0]
    t = a.statistics().merge(b.statistics())
    assert t.integrated == pytest.approx(a.integrated, abs=TOL[mode])
    other = "exact" if mode == "histogram" else "histogram"
    mixed = a.statistics().merge(_measure(tone([-36.0], 10.0), other)[0].statistics())
    assert mixed.mode == "histogram" and mixed.integrated == pytest.approx(a.integrated,
                                                                            abs=0.01)


def test_total_of_empty_and_short_programmes():
    short = _measure(tone([-20.0], 0.2), "histogram")[0].statistics()
    quiet = _measure(tone([None], 1.0), "histogram")[0].statistics()
    assert short.merge(short).integrated_reason == REASON_TOO_SHORT
    assert short.merge(quiet).integrated_reason == REASON_BELOW_GATE
    assert short.merge(quiet).loudness_range is None
    assert isinstance(short, LoudnessStatistics) and short.max_momentary is None


def test_restored_state_keeps_the_report():
    x = _programme()
    m, r = _measure(x, "histogram")
    fresh = LoudnessMeter(fs=FS, channels=2)
    fresh.load_state_dict(m.state_dict())
    assert (fresh.lra_low, fresh.lra_high, fresh.relative_gate, fresh.lra_gate) == \
        (r.lra_low, r.lra_high, r.relative_gate, r.lra_gate)
