"""``rtamt features``: a directory with a corrupt file (reported, listed, the rest computed,
exit 0), every input failing (exit 1), resuming after SIGKILL or Ctrl-C without
recomputing finished items, lhotse manifests (a missing audio file), mixed rates, stereo
input, write errors in the output directory, lhotse manifests, a Dask scheduler address,
usage errors (nothing written), and the message without the extra."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import distributed
import numpy as np
import pytest
from lhotse import CutSet, Recording, RecordingSet
from scipy.io import wavfile

from rtamt.integrations.lhotse import RtamtConfig, RtamtExtractor
from rtamt_apps import features
from rtamt_apps.cli import main

FS = 16000


def _corpus(d, n, seconds, fs=FS, seed=0):
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        x = rng.standard_normal(int(seconds * fs)) * 3000
        wavfile.write(d / f"utt{i:02d}.wav", fs, x.astype(np.int16))
    return sorted(d.glob("*.wav"))


def _features_match(out, cfg, n):
    """cuts.jsonl.gz holds n cuts whose stored features equal extract() (numpy storage)."""
    cuts = CutSet.from_file(out / "cuts.jsonl.gz")
    assert len(cuts) == n
    ext = RtamtExtractor(cfg)
    for c in cuts:
        np.testing.assert_array_equal(c.load_features(), ext.extract(c.load_audio(),
                                                                     c.sampling_rate))
    return cuts


def test_directory_with_corrupt_file(tmp_path, capsys):
    files = _corpus(tmp_path / "in" / "sub", 3, 0.6)
    (tmp_path / "in" / "broken.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk" * 20)
    out = tmp_path / "out"
    rc = main(["features", str(tmp_path / "in"), "--out", str(out), "--storage", "numpy",
               "--output", "adaptloop"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "computed 3 item(s)" in cap.out and "FAILED 1 item(s)" in cap.out
    assert "broken.wav" in cap.out and "failures.jsonl" in cap.out
    fails = [json.loads(s) for s in (out / "failures.jsonl").read_text().splitlines()]
    assert [f["id"] for f in fails] == ["broken"]
    assert fails[0]["source"].endswith("broken.wav") and fails[0]["error"]
    cuts = _features_match(out, RtamtConfig(output="adaptloop"), 3)
    assert sorted(c.recording_id for c in cuts) == sorted(f"sub_{f.stem}" for f in files)
    # a rerun skips the three, retries the broken one, lists it again
    rc = main(["features", str(tmp_path / "in"), "--out", str(out), "--storage", "numpy",
               "--output", "adaptloop"])
    cap = capsys.readouterr()
    assert rc == 0 and "computed 0 item(s)" in cap.out and "skipped 3" in cap.out
    assert "FAILED 1 item(s)" in cap.out


def test_killed_halfway_then_rerun_completes_without_recomputing(tmp_path, capsys):
    n = 16
    _corpus(tmp_path / "in", n, 3.0, fs=48000, seed=1)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rtamt_apps", "features", str(tmp_path / "in"), "--out",
           str(out), "--storage", "numpy"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    done = out / "done"
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if done.is_dir() and len(list(done.glob("*.json"))) >= 3:
                break
            time.sleep(0.01)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in done.glob("*.json")}
    k = len(before)
    assert 3 <= k < n, k
    assert not (out / "cuts.jsonl.gz").exists()

    rc = main(cmd[3:])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert f"computed {n - k} item(s)" in cap.out and f"skipped {k} item(s)" in cap.out
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in done.glob("*.json")}
    assert len(after) == n
    assert {name: after[name] for name in before} == before     # finished items untouched
    _features_match(out, RtamtConfig(), n)


def test_manifest_input(tmp_path, capsys):
    files = _corpus(tmp_path / "wav", 3, 0.5, seed=2)
    recs = RecordingSet.from_recordings(Recording.from_file(f) for f in files)
    manifest = tmp_path / "recordings.jsonl.gz"
    recs.to_file(manifest)
    out = tmp_path / "out"
    args = ["features", str(manifest), "--out", str(out), "--storage", "numpy",
            "--output", "adaptloop", "--pooling", "rms", "--frame-shift", "0.02"]
    rc = main(args)
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "computed 3 item(s)" in cap.out
    cuts = _features_match(out, RtamtConfig(output="adaptloop", pooling="rms",
                                            frame_shift=0.02), 3)
    assert all(c.features.frame_shift == 0.02 for c in cuts)
    # the cuts written can be the input of another run
    out2 = tmp_path / "out2"
    assert main(["features", str(out / "cuts.jsonl.gz"), "--out", str(out2), "--storage",
                 "numpy", "--output", "adaptloop"]) == 0
    assert "computed 3 item(s)" in capsys.readouterr().out


def test_dask_scheduler_address(tmp_path, capsys):
    _corpus(tmp_path / "in", 3, 0.5, seed=3)
    out = tmp_path / "out"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        rc = main(["features", str(tmp_path / "in"), "--out", str(out), "--storage", "numpy",
                   "--output", "adaptloop", "--dask", cluster.scheduler_address])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "computed 3 item(s)" in cap.out and "2 worker(s)" in cap.out
    _features_match(out, RtamtConfig(output="adaptloop"), 3)


def test_process_pool_jobs_2(tmp_path, capsys):
    """``--jobs 2``: a pool of 2 spawned processes computes every item, as in-process."""
    _corpus(tmp_path / "in", 3, 0.4, seed=5)
    out = tmp_path / "out"
    rc = main(["features", str(tmp_path / "in"), "--out", str(out), "--storage", "numpy",
               "--output", "adaptloop", "--jobs", "2"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "computed 3 item(s)" in cap.out and "2 worker(s)" in cap.out
    _features_match(out, RtamtConfig(output="adaptloop"), 3)


@pytest.mark.parametrize("extra, msg", [
    (["--frame-shift", "0.0123"], "--frame-shift 0.0123 s is not a whole number of samples"),
    (["--model", "moore2016"], "need fs >= 32000 Hz"),
    (["--output", "stl"], "dau1997 has no output 'stl'"),
    (["--jobs", "0"], "argument --jobs: must be >= 1"),
    (["--jobs", "2", "--dask", "tcp://x:1"], "not allowed with argument"),
])
def test_usage_errors_are_one_line(tmp_path, capsys, extra, msg):
    _corpus(tmp_path / "in", 1, 0.2)
    out = tmp_path / "out"
    rc = main(["features", str(tmp_path / "in"), "--out", str(out)] + extra)
    err = capsys.readouterr().err
    assert rc == 2
    assert msg in err and err.startswith("rtamt features: error: ")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()                  # refused before anything was written


def test_usage_errors_inputs_and_out(tmp_path, capsys):
    _corpus(tmp_path / "in", 1, 0.2)
    out = tmp_path / "out"
    assert main(["features", str(tmp_path / "nothere"), "--out", str(out)]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert main(["features", str(tmp_path / "in")]) == 2
    assert "--out" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["features", str(tmp_path / "empty"), "--out", str(out)]) == 2
    assert "no .wav" in capsys.readouterr().err
    assert main(["features", str(tmp_path / "in"), "--out", str(out), "--output",
                 "adaptloop"]) == 0
    yml = (out / "extractor.yaml").read_bytes()
    capsys.readouterr()
    assert main(["features", str(tmp_path / "in"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds features of another configuration" in err and "output" in err
    assert (out / "extractor.yaml").read_bytes() == yml
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("x")
    assert main(["features", str(tmp_path / "in"), "--out", str(tmp_path / "other")]) == 2
    assert "not an rtamt features directory" in capsys.readouterr().err


def test_without_the_extra_says_what_to_install(tmp_path):
    _corpus(tmp_path / "in", 1, 0.2)
    code = ("import sys; sys.modules['lhotse'] = None\n"
            "from rtamt_apps.cli import main\n"
            f"sys.exit(main(['features', {str(tmp_path / 'in')!r}, '--out', "
            f"{str(tmp_path / 'out')!r}]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env={**os.environ})
    assert r.returncode == 2
    assert "pip install 'rtamt[lhotse]'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


def _one_error_line(err: str, prefix: str = "rtamt features: ") -> None:
    assert err.startswith(prefix) and err.count("\n") == 1 and "Traceback" not in err, err


def test_every_input_failing_exits_1_and_keeps_earlier_cuts(tmp_path, capsys):
    """A directory of corrupt files only: exit 1, each listed; a later such run into a
    directory with features exits 1 too and leaves cuts.jsonl.gz as it was."""
    bad = tmp_path / "bad"
    bad.mkdir()
    for i in range(2):
        (bad / f"c{i}.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk" * 10)
    out = tmp_path / "out"
    assert main(["features", str(bad), "--out", str(out), "--output", "adaptloop"]) == 1
    cap = capsys.readouterr()
    assert "FAILED 2 item(s)" in cap.out and "[extra info]" not in cap.out
    _one_error_line(cap.err)
    assert "every input failed" in cap.err
    assert len((out / "failures.jsonl").read_text().splitlines()) == 2
    assert not (out / "cuts.jsonl.gz").exists()       # lhotse reads an empty one as None

    _corpus(tmp_path / "good", 2, 0.2, seed=11)
    args = ["--out", str(out), "--output", "adaptloop", "--storage", "numpy"]
    out2 = tmp_path / "out2"
    assert main(["features", str(tmp_path / "good")] + args[:1] + [str(out2)] + args[2:]) == 0
    cuts = (out2 / "cuts.jsonl.gz").read_bytes()
    capsys.readouterr()
    assert main(["features", str(bad)] + args[:1] + [str(out2)] + args[2:]) == 1
    assert (out2 / "cuts.jsonl.gz").read_bytes() == cuts
    # a run over one of the inputs keeps the other's cut too
    assert main(["features", str(tmp_path / "good" / "utt00.wav")] + args[:1] + [str(out2)]
                + args[2:]) == 0
    assert "skipped 1 item(s)" in capsys.readouterr().out
    assert sorted(c.id for c in CutSet.from_file(out2 / "cuts.jsonl.gz")) == [
        "utt00-0", "utt01-0"]


def test_manifest_with_a_missing_audio_file_and_mixed_rates(tmp_path, capsys):
    """A recordings manifest naming a file that is gone: that item fails (one short line,
    listed), the others (16 and 44.1 kHz) are computed at their own rates; exit 0."""
    files = _corpus(tmp_path / "a", 1, 0.3, seed=12) + _corpus(tmp_path / "b", 1, 0.3,
                                                               fs=44100, seed=13)
    gone = tmp_path / "gone.wav"
    gone.write_bytes(files[0].read_bytes())
    recs = RecordingSet.from_recordings(Recording.from_file(f, recording_id=f"r{i}")
                                        for i, f in enumerate(files + [gone]))
    gone.unlink()
    recs.to_file(tmp_path / "recs.jsonl.gz")
    out = tmp_path / "out"
    rc = main(["features", str(tmp_path / "recs.jsonl.gz"), "--out", str(out), "--storage",
               "numpy", "--output", "adaptloop"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "computed 2 item(s)" in cap.out and "FAILED 1 item(s)" in cap.out
    line = next(s for s in cap.out.splitlines() if "gone.wav:" in s)
    assert "no such file" in line.lower() and "[extra info]" not in line
    assert [json.loads(s)["id"] for s in (out / "failures.jsonl").read_text().splitlines()
            ] == ["r2-2"]
    cuts = _features_match(out, RtamtConfig(output="adaptloop"), 2)
    assert sorted(c.sampling_rate for c in cuts) == [FS, 44100]


def test_stereo_input(tmp_path, capsys):
    """Stereo WAV with dau1997: refused before anything is written unless --channels says
    how (first: channel 0's features)."""
    d = tmp_path / "in"
    d.mkdir()
    x = np.random.default_rng(14).standard_normal((int(0.3 * FS), 2)) * 3000
    x[:, 1] *= 0.1
    wavfile.write(d / "st.wav", FS, x.astype(np.int16))
    out = tmp_path / "out"
    assert main(["features", str(d), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    _one_error_line(err, "rtamt features: error: ")
    assert "dau1997 takes 1 channel" in err and "--channels first" in err
    assert not out.exists()
    assert main(["features", str(d), "--out", str(out), "--storage", "numpy", "--output",
                 "adaptloop", "--channels", "first"]) == 0
    capsys.readouterr()
    _features_match(out, RtamtConfig(output="adaptloop", channels="first"), 1)


def test_interrupted_then_rerun(tmp_path, capsys, monkeypatch):
    """Ctrl-C after two items: exit 130 with one line naming what is kept, no cuts.jsonl.gz
    written; the rerun computes only the other two."""
    _corpus(tmp_path / "in", 4, 0.2, seed=15)
    out = tmp_path / "out"
    args = ["features", str(tmp_path / "in"), "--out", str(out), "--output", "adaptloop",
            "--storage", "numpy"]
    real, calls = features.compute_item, []

    def interrupted(*a):
        calls.append(a[0]["id"])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a)

    monkeypatch.setattr(features, "compute_item", interrupted)
    assert main(args) == 130
    err = capsys.readouterr().err
    _one_error_line(err)
    assert "interrupted; 2 of 4 item(s) are done" in err
    assert not (out / "cuts.jsonl.gz").exists()
    monkeypatch.setattr(features, "compute_item", real)
    assert main(args) == 0
    cap = capsys.readouterr().out
    assert "computed 2 item(s)" in cap and "skipped 2 item(s)" in cap
    _features_match(out, RtamtConfig(output="adaptloop"), 4)


def test_write_errors_stop_the_run_and_are_not_item_failures(tmp_path, capsys, monkeypatch):
    """A full disk while storing features stops the run (one line, exit 2) without listing
    the item as failed or replacing cuts.jsonl.gz / failures.jsonl; an output directory
    that cannot be written is refused before computing."""
    import errno

    from lhotse import NumpyFilesWriter

    files = _corpus(tmp_path / "in", 2, 0.2, seed=16)
    out = tmp_path / "out"
    args = ["--out", str(out), "--output", "adaptloop", "--storage", "numpy"]
    assert main(["features", str(files[0])] + args) == 0
    kept = {n: (out / n).read_bytes() for n in ("cuts.jsonl.gz", "failures.jsonl")}
    capsys.readouterr()

    def full(self, key, value):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(NumpyFilesWriter, "write", full)
    assert main(["features", str(tmp_path / "in")] + args) == 2
    err = capsys.readouterr().err
    _one_error_line(err)
    assert "cannot write in" in err and "No space left" in err
    assert {n: (out / n).read_bytes() for n in kept} == kept
    assert len(list((out / "done").glob("*.json"))) == 1
    monkeypatch.undo()

    def read_only(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(features.tempfile, "TemporaryFile", read_only)
    assert main(["features", str(tmp_path / "in"), "--out", str(tmp_path / "ro")]) == 2
    err = capsys.readouterr().err
    _one_error_line(err, "rtamt features: error: ")
    assert "argument --out: cannot write in" in err and "Permission denied" in err


def test_done_entry_of_other_audio_is_refused(tmp_path, capsys):
    """An input whose id is done in OUT from another file is refused (a rerun would have
    skipped it and kept the other file's features)."""
    a = _corpus(tmp_path / "a", 1, 0.2, seed=17)
    b = _corpus(tmp_path / "b", 1, 0.25, seed=18)
    out = tmp_path / "out"
    assert main(["features", str(a[0]), "--out", str(out), "--output", "adaptloop"]) == 0
    capsys.readouterr()
    assert main(["features", str(b[0]), "--out", str(out), "--output", "adaptloop"]) == 2
    err = capsys.readouterr().err
    _one_error_line(err, "rtamt features: error: ")
    assert "holds item 'utt00-0' computed from other audio" in err


def test_unreachable_dask_scheduler_writes_nothing(tmp_path, capsys, monkeypatch):
    _corpus(tmp_path / "in", 1, 0.2)

    def refused(address, timeout=None):
        raise OSError(f"Timed out trying to connect to {address}")

    monkeypatch.setattr(distributed, "Client", refused)
    out = tmp_path / "out"
    assert main(["features", str(tmp_path / "in"), "--out", str(out), "--dask",
                 "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    _one_error_line(err, "rtamt features: error: ")
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:1" in err
    assert not out.exists()


@pytest.mark.parametrize("kind", ["recordings", "cuts"])
def test_manifest_with_duplicate_ids_is_refused(tmp_path, capsys, kind):
    """Two recordings (or cuts) with one id in a manifest: lhotse loads them, and the cuts
    made from the recordings got ids of their own, so both were computed (issue 29)."""
    files = _corpus(tmp_path / "wav", 3, 0.2, seed=4)
    recs = [Recording.from_file(f, recording_id=rid)
            for f, rid in zip(files, ["utt", "other", "utt"])]
    manifest = tmp_path / f"{kind}.jsonl.gz"
    if kind == "recordings":
        RecordingSet.from_recordings(recs).to_file(manifest)
    else:
        cuts = CutSet.from_manifests(recordings=RecordingSet.from_recordings(recs[:2]))
        CutSet.from_cuts([cuts[0], cuts[1], cuts[0]]).to_file(manifest)
    out = tmp_path / "out"
    rc = main(["features", str(manifest), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2, err
    want = "recording id(s) 'utt' (2x)" if kind == "recordings" else "cut id(s) "
    _one_error_line(err, f"rtamt features: error: {manifest}: duplicate {want}")
    assert not out.exists()                  # refused before anything was written


def test_one_sample_file_is_a_clear_failure(tmp_path, capsys):
    """A 1-sample file gives no frame; lilcom failed with a cryptic RuntimeError. Now a
    failure record (and summary line) says why; the other input is computed."""
    _corpus(tmp_path / "in", 1, 0.3)
    wavfile.write(tmp_path / "in" / "one.wav", FS, np.array([1000], np.int16))
    out = tmp_path / "out"
    rc = main(["features", str(tmp_path / "in"), "--out", str(out)])      # lilcom storage
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    fails = [json.loads(s) for s in (out / "failures.jsonl").read_text().splitlines()]
    assert len(fails) == 1 and fails[0]["source"].endswith("one.wav")
    err = fails[0]["error"]
    assert err.startswith("too short: 1 sample(s) (0.0625 ms at 16000 Hz) give no feature "
                          "frame") and "--frame-shift 0.01 s" in err
    assert "RuntimeError" not in cap.out and f"one.wav: {err}" in cap.out


def test_truncated_wav_fails_with_the_frames_read_or_partial(tmp_path, capsys):
    """A WAV cut short was computed silently from what it held (issue 38); now it is a
    failure naming the frames read, and --partial computes them, saying so."""
    (f,) = _corpus(tmp_path / "in", 1, 0.5)
    data = f.read_bytes()
    f.write_bytes(data[:44 + 2 * 3000])                  # 3000 of 8000 frames
    out = tmp_path / "out"
    assert main(["features", str(f), "--out", str(out), "--storage", "numpy"]) == 1
    cap = capsys.readouterr()
    (fail,) = [json.loads(s) for s in (out / "failures.jsonl").read_text().splitlines()]
    assert "truncated: its header announces 8000 frames, only 3000 could be read" in \
        fail["error"] and "--partial processes the 3000 frames read" in fail["error"]
    assert main(["features", str(f), "--out", str(out), "--storage", "numpy",
                 "--partial"]) == 0
    cap = capsys.readouterr()
    assert "processed the 3000 frames read (--partial)" in cap.err
    assert "1 truncated file(s) computed from the frames read" in cap.out
    (cut,) = CutSet.from_file(out / "cuts.jsonl.gz")
    assert cut.num_samples == 3000 and "only 3000 could be read" in cut.custom[
        "rtamt_truncated"]
    assert cut.load_features().shape[0] == (3000 + 80) // 160
    assert (out / "failures.jsonl").read_text() == ""


def test_jobs_are_capped_at_the_usable_cores(tmp_path, capsys, monkeypatch):
    """--jobs above the usable cores: capped (the pool gets that many processes), with one
    note on stderr; --force keeps the number asked for."""
    import multiprocessing

    from rtamt_apps import files

    _corpus(tmp_path / "in", 3, 0.2)
    sizes = []

    class Ctx:
        def __init__(self, real):
            self.real = real

        def Pool(self, n, **kw):
            sizes.append(n)
            return self.real.Pool(n, **kw)

    real_ctx = multiprocessing.get_context
    monkeypatch.setattr(multiprocessing, "get_context", lambda m=None: Ctx(real_ctx(m)))
    monkeypatch.setattr(files, "usable_cores", lambda: 2)
    assert main(["features", str(tmp_path / "in"), "--out", str(tmp_path / "o"),
                 "--storage", "numpy", "--jobs", "64"]) == 0
    err = capsys.readouterr().err
    assert sizes == [2] and "rtamt features: --jobs 64 capped at 2, the number of usable " \
        "cores" in err
    assert main(["features", str(tmp_path / "in"), "--out", str(tmp_path / "o2"),
                 "--storage", "numpy", "--jobs", "3", "--force"]) == 0
    assert sizes == [2, 3] and "capped at" not in capsys.readouterr().err
