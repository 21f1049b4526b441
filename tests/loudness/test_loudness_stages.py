"""The frame stages of the loudness models, each alone (issue 30 item 3): the spectrum (the
frame producer, which owns the frame clock), excitation, specific loudness, instantaneous
loudness, the loudness integrators, the short-term specific-loudness AGC and the binaural
inhibition.

For every stage: any partition of its input (samples for the spectrum, frames for the
others; block size 1 and random partitions) gives the bits of one call, float32 input
samples give the spectrum of their float64 values (the stages compute in float64);
states stack and split by stream (a batch gives each stream's bits) and snapshots
continue exactly; the stage's Triton twins (interpreter) agree with numba (1e-12
relative).  The frames fed to the stages after the spectrum are those the models produce
for a tone in noise."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import rtamt  # noqa: E402
from rtamt.engine.contract import RtamtInputError  # noqa: E402

FS = 32000.0


def _signal(rows, n, seed):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / FS
    x = 0.05 * np.sin(2 * np.pi * 1000.0 * t) * (1 + 0.5 * np.sin(2 * np.pi * 5 * t))
    return x + 0.02 * rng.standard_normal((rows, n))


def _model_frames(name, rows, n, seed=1):
    """The frames every frame stage of model ``name`` (the stages after its calibration)
    reads and writes for one block of ``n`` samples (float64 rows in internal units) from
    the start of a stream: ``fr`` dict."""
    m = rtamt.MODELS[name](FS)
    fr = {"rows": _signal(rows, n, seed)}
    for s in m.stages[1:]:
        s.process_tm(fr, s.init_state(rows))
    return m, fr


# --- slicing and joining frames by layout ---------------------------------------------------
#: layout of each frame array: "rf" (R F, K) rows r F + f; "r_f" (R, F); "f" frame axis
#: first; "last" frame axis last
LAYOUT = {"P": "rf", "E": "rf", "E_db": "rf", "N": "rf", "inst": "r_f", "stl": "f",
          "ltl": "f", "st": "f", "spec": "last", "exc": "last", "ste": "last",
          "lte": "last", "ends": "f"}


def _take(key, a, R, F, lo, hi):
    kind = LAYOUT[key]
    if kind == "rf":
        K = a.shape[1]
        return np.ascontiguousarray(a.reshape(R, F, K)[:, lo:hi].reshape(R * (hi - lo), K))
    if kind == "r_f":
        return np.ascontiguousarray(a[:, lo:hi])
    if kind == "f":
        return np.ascontiguousarray(a[lo:hi])
    return np.ascontiguousarray(a[..., lo:hi])


def _join(key, parts, R):
    kind = LAYOUT[key]
    if kind == "rf":
        K = parts[0].shape[-1]
        return np.concatenate([p.reshape(R, -1, K) for p in parts], axis=1).reshape(-1, K)
    if kind == "r_f":
        return np.concatenate(parts, axis=1)
    if kind == "f":
        return np.concatenate(parts, axis=0)
    return np.concatenate(parts, axis=-1)


def _cuts(n, rng, size=None):
    if size is not None:
        return list(range(0, n, size)) + [n]
    inner = np.sort(rng.choice(np.arange(1, n), size=min(5, n - 1), replace=False))
    return [0, *inner.tolist(), n]


def _run(stage, fr, cuts):
    """``stage`` (fresh stream) over the frames of ``fr`` cut at ``cuts``; outputs joined."""
    R, F = fr["R"], fr["F"]
    outs = {k: [] for k in stage.writes}
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        part = {k: _take(k, fr[k], R, F, lo, hi) for k in stage.reads}
        o = stage({**part, "R": R, "F": hi - lo})
        for k in stage.writes:
            outs[k].append(o[k])
    return {k: _join(k, v, R) for k, v in outs.items()}


def _fresh(stage):
    return type(stage)(stage.params)


#: (model, rows, stage name) of every frame stage, with the frames it gets in its model
CASES = [("glasberg2002", 2, "excitation"), ("glasberg2002", 2, "specific_loudness"),
         ("glasberg2002", 2, "instantaneous_loudness"), ("glasberg2002", 2, "stl_integrator"),
         ("glasberg2002", 2, "ltl_integrator"), ("moore2016", 4, "specific_loudness_agc"),
         ("moore2016", 4, "binaural_inhibition"), ("moore2016", 1, "binaural_inhibition")]


def _stage(m, name):
    return next(s for s in m.stages if s.name == name)


# --- the spectrum: the frame producer ------------------------------------------------------
def test_spectrum_owns_the_frame_clock_and_any_partition_gives_the_same_frames():
    """The spectrum alone over a signal of 3 rows in one call, in blocks of 1 sample (a
    stretch across several frame ends) and in random blocks: the same powers and frame
    ends; the clock: frames every ``hop`` samples, centred ``nmax/2`` before their end."""
    rng = np.random.default_rng(0)
    m = rtamt.Glasberg2002(FS)
    sp = m.spectrum
    assert (sp.hop, sp.nmax, sp.frame_rate) == (32, 2048, 1000.0)
    assert sp.latency_s == m.latency_s == 2048 / 2 / FS
    x = _signal(3, 3000, 2)
    one = _fresh(sp)({"rows": x})
    F = one["ends"].size
    assert F == 3000 // 32 and np.array_equal(one["ends"], 32 * np.arange(1, F + 1))
    np.testing.assert_array_equal(sp.frame_time(one["ends"]),
                                  (32 * np.arange(1, F + 1) - 1024) / FS)
    for cuts in ([0, 2900, *range(2901, 3000), 3000], _cuts(3000, rng)):
        s = _fresh(sp)
        P, ends = [], []
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            o = s({"rows": x[:, lo:hi]})
            P.append(o["P"].reshape(3, o["ends"].size, o["P"].shape[1]))
            ends.append(o["ends"])
        assert np.array_equal(np.concatenate(ends), one["ends"])
        np.testing.assert_array_equal(np.concatenate(P, axis=1).reshape(3 * F, -1), one["P"])
    # float32 samples: the spectrum of their float64 values (the stages compute in float64)
    x32 = x.astype(np.float32)
    np.testing.assert_array_equal(_fresh(sp)({"rows": x32})["P"],
                                  _fresh(sp)({"rows": x32.astype(np.float64)})["P"])


def test_spectrum_states_stack_split_and_snapshot():
    """Three streams alone vs stacked (the frame clock ``n`` shared), split back; a
    snapshot in mid-stream continues exactly; streams at different positions refuse to
    stack."""
    sp = rtamt.Moore2016(FS).spectrum
    xs = [_signal(1, 2500, 10 + i) for i in range(3)]
    alone = [_fresh(sp) for _ in xs]
    for s, x in zip(alone, xs):
        s({"rows": x[:, :1000]})
    sts = [s.state_dict() for s in alone]
    b = _fresh(sp)
    b.load_state_dict(rtamt.stack_states(sts))
    ob = b({"rows": np.concatenate([x[:, 1000:] for x in xs])})
    for i, (s, x) in enumerate(zip(alone, xs)):
        snap = s.state_dict()
        o = s({"rows": x[:, 1000:]})
        F = o["ends"].size
        np.testing.assert_array_equal(ob["P"].reshape(3, F, -1)[i], o["P"].reshape(F, -1))
        c = _fresh(sp)
        c.load_state_dict(snap)
        np.testing.assert_array_equal(c({"rows": x[:, 1000:]})["P"], o["P"])
        split = rtamt.split_state(b.state_dict(), i)
        for k, v in s.state_dict()["arrays"].items():
            np.testing.assert_array_equal(split["arrays"][k], v)
    late = _fresh(sp)
    late({"rows": xs[0][:, :999]})
    with pytest.raises(RtamtInputError, match="another position"):
        rtamt.stack_states([sts[0], late.state_dict()])


# --- the stages after the spectrum -----------------------------------------------------------
@pytest.mark.parametrize("model,rows,name", CASES)
def test_frame_stage_any_partition_gives_the_bits_of_one_call(model, rows, name):
    """The stage alone over its model's frames (36 frames) in one call, frame by frame,
    and in random partitions: the same bits, outputs and state."""
    rng = np.random.default_rng(5)
    m, fr = _model_frames(model, rows, 36 * 32 + 7)
    st = _stage(m, name)
    F = fr["F"]
    assert F == 36
    one_s = _fresh(st)
    one = _run(one_s, fr, [0, F])
    for k in st.writes:                    # the model's own frames, computed in its chain
        np.testing.assert_array_equal(one[k], fr[k], err_msg=k)
    for cuts in (_cuts(F, rng, size=1), _cuts(F, rng), _cuts(F, rng)):
        s = _fresh(st)
        got = _run(s, fr, cuts)
        for k in st.writes:
            np.testing.assert_array_equal(got[k], one[k], err_msg=(k, cuts))
        for k, v in one_s.state_dict()["arrays"].items():
            np.testing.assert_array_equal(s.state_dict()["arrays"][k], v)


@pytest.mark.parametrize("model,rows,name", [c for c in CASES if c[1] > 1])
def test_frame_stage_states_stack_split_and_snapshot(model, rows, name):
    """Two streams of the stage (rows, or ear pairs for the binaural stage) alone vs one
    batch from their stacked states; the split states equal the streams' own; a snapshot
    taken after the first part continues exactly."""
    m, fr = _model_frames(model, rows, 30 * 32)
    st = _stage(m, name)
    R, F = fr["R"], fr["F"]
    rps = st.rows_per_stream
    n = R // rps

    def rows_of(key, a, i):            # stream i's rows of a frame array
        kind = LAYOUT[key]
        sl = slice(i * rps, (i + 1) * rps)
        if kind == "rf":
            return a.reshape(R, F, -1)[sl].reshape(rps * F, -1)
        if kind == "r_f":
            return a[sl]
        if kind == "f":
            return a[:, sl]
        return a[i:i + 1]              # (B, ...) arrays: one ear pair per stream

    def frames_of(i, lo, hi):
        sub = {k: np.ascontiguousarray(rows_of(k, fr[k], i)) for k in st.reads}
        return {k: _take(k, v, rps, F, lo, hi) for k, v in sub.items()}

    alone = [_fresh(st) for _ in range(n)]
    for i, s in enumerate(alone):
        s({**frames_of(i, 0, 12), "R": rps, "F": 12})
    snaps = [s.state_dict() for s in alone]
    b = _fresh(st)
    b.load_state_dict(rtamt.stack_states(snaps))
    ob = b({**{k: _take(k, fr[k], R, F, 12, F) for k in st.reads}, "R": R, "F": F - 12})
    for i, s in enumerate(alone):
        o = s({**frames_of(i, 12, F), "R": rps, "F": F - 12})
        for k in st.writes:
            np.testing.assert_array_equal(
                np.asarray(rows_of(k, ob[k], i) if LAYOUT[k] != "rf" else
                           ob[k].reshape(R, F - 12, -1)[i * rps:(i + 1) * rps].reshape(
                               rps * (F - 12), -1)), o[k], err_msg=k)
        c = _fresh(st)
        c.load_state_dict(snaps[i])
        oc = c({**frames_of(i, 12, F), "R": rps, "F": F - 12})
        for k in st.writes:
            np.testing.assert_array_equal(oc[k], o[k], err_msg=k)
        split = rtamt.split_state(b.state_dict(), i)
        for k, v in s.state_dict()["arrays"].items():
            np.testing.assert_array_equal(split["arrays"][k], v)


def test_frame_stage_refuses_another_row_count_and_a_foreign_snapshot():
    m, fr = _model_frames("glasberg2002", 2, 10 * 32)
    st = _fresh(_stage(m, "stl_integrator"))
    st({"inst": fr["inst"], "R": 2, "F": fr["F"]})
    with pytest.raises(RtamtInputError, match="1 rows, the stream has 2"):
        st({"inst": fr["inst"][:1], "R": 1, "F": fr["F"]})
    with pytest.raises(RtamtInputError, match="LoudnessIntegrator"):
        _fresh(_stage(m, "excitation")).load_state_dict(st.state_dict())


# --- the Triton twins (interpreter) ------------------------------------------------------------
@pytest.mark.triton
@pytest.mark.parametrize("model,rows,name", [("glasberg2002", 2, "spectrum")] + CASES)
def test_frame_stage_triton_path_agrees_with_numba(model, rows, name):
    """Each stage bound to the Triton backend (interpreter, CPU tensors) on 3 frames of its
    model 78 ms into a stream: every output within 1e-12 of numba's (relative to its largest
    value), the frame clock exactly; the state as numba's (1e-12).  (Partitions of the
    frames on the Triton path: tests/test_triton_loudness.py.)"""
    pytest.importorskip("triton")
    from _triton import DEVICE, host
    from _triton import dev as to_dev

    m, fr = _model_frames(model, rows, 2400 + 3 * 32 + 5)
    st = _stage(m, name)
    a, b = _fresh(st), _fresh(st).to(DEVICE, backend="triton")
    R, F = fr["R"], fr["F"]

    def dev(d):
        return {k: to_dev(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v
                for k, v in d.items()}

    if name == "spectrum":             # a warm start: a stream 75 ms in
        warm = {"rows": _signal(rows, 2400, 1)}
        a(warm), b(dev(warm))
        inputs = {"rows": _signal(rows, 3 * 32 + 5, 2)}
    else:
        # the last 3 frames of a stream 78 ms in
        inputs = {**{k: _take(k, fr[k], R, F, F - 3, F) for k in st.reads}, "R": R, "F": 3}
    ref = a(inputs)
    got = b(dev(inputs))
    for k in st.writes:
        g, r = host(got[k]) if k != "ends" else got[k], ref[k]
        assert g.shape == r.shape, k
        scale = max(float(np.max(np.abs(r))), 1e-300)
        assert float(np.max(np.abs(g - r))) <= 1e-12 * scale, (k, name)
        if k == "ends":
            np.testing.assert_array_equal(g, r, err_msg=k)
    for k, v in a.state_dict()["arrays"].items():
        w = b.state_dict()["arrays"][k]
        assert np.max(np.abs(w - v)) <= 1e-12 * max(float(np.max(np.abs(v))), 1e-300), k


# --- snapshots of the monolithic models -------------------------------------------------------
def test_snapshots_of_the_former_models_load_and_continue_exactly():
    """A Glasberg2002 and a Moore2016 snapshot saved by the models before they were built
    from stages (tests/data/loudness_v1_state.pkl.gz, see PROVENANCE.md) load into the
    stage-built models (same schema, same design fingerprint) and continue with the bits
    the former models computed."""
    import gzip
    import hashlib
    import pathlib
    import pickle

    path = pathlib.Path(__file__).resolve().parents[1] / "data" / "loudness_v1_state.pkl.gz"
    with gzip.open(path, "rb") as f:
        saved = pickle.load(f)
    rng = np.random.default_rng(30)
    t = np.arange(4000) / FS
    x = (0.05 * np.sin(2 * np.pi * 1000 * t) + 0.01 * rng.standard_normal((2, 4000)))[0]
    for name, ref in saved.items():
        m = rtamt.MODELS[name](FS)
        m.load_state_dict(ref["state"])
        got = m(x[3000:])
        assert set(got) == set(ref["sha256"]), name
        for k, v in ref["next"].items():
            np.testing.assert_array_equal(got[k], v, err_msg=(name, k))
        for k, digest in ref["sha256"].items():
            assert hashlib.sha256(np.ascontiguousarray(got[k]).tobytes()).hexdigest() == \
                digest, (name, k)
