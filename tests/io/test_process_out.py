"""`rtamt process` writing its outputs incrementally (rtamt.io): same bits as in memory,
peak memory independent of the file's length, nothing lost on a failed write, block-invariant
decimation, --outputs, and the checks made before any processing."""
import contextlib
import errno
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from scipy.io import wavfile

import rtamt
import rtamt_apps.outputs as outputs_mod
import rtamt_apps.process as proc
from rtamt.io import Decimator, OutputWriter, read_outputs
from rtamt.io import writer as writer_mod
from rtamt.modulation import to_padded
from rtamt.signals import read_wav
from rtamt_apps.cli import main

from _helpers import file_tree as _tree
from _helpers import mounted_tmpfs as _tmpfs
from _helpers import skip_or_fail as _skip_or_fail

FS = 32000
#: every output at full rate in float64, modfb NaN-padded: what the in-memory reference holds
FULL = ["--outputs", "all", "--frame-rate", "0", "--store-dtype", "float64", "--padded"]


def _signal(n, fs=FS, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / fs
    x = 0.05 * np.sin(2 * np.pi * 1000 * t) * (1 + np.sin(2 * np.pi * 8 * t)) / 2
    return (x + 0.005 * rng.standard_normal(n)).astype(np.float32)


def _wav(path, n, fs=FS, seed=0):
    wavfile.write(path, fs, _signal(n, fs, seed))
    return path


def _reference(model_name, path):
    fs, x = read_wav(path)
    m = rtamt.MODELS[model_name](fs)
    out = m.process_all(x[0])
    if "modfb" in out and m.mfc is not None:
        out["modfb"] = to_padded(out["modfb"], m["modfb"].coeffs)
    return m, out


@pytest.fixture
def no_processing(monkeypatch):
    """Fail the test if `rtamt process` gets as far as warming up the model's kernels."""
    def boom(*a, **k):
        raise AssertionError("processing started")
    monkeypatch.setattr(proc, "warm_up", boom)


# ------------------------------------------------------------------ same bits as in memory
@pytest.mark.parametrize("model", ["dau1997", "paulick2024"])
def test_incremental_outputs_equal_in_memory_outputs(tmp_path, model):
    wav = _wav(tmp_path / "in.wav", 7001)
    m, ref = _reference(model, wav)
    for dest in (tmp_path / "out", tmp_path / "out.npz"):
        assert main(["process", str(wav), "--model", model, "--block", "random", "--seed", "3",
                     *FULL, "--out", str(dest)]) == 0
        if dest.suffix == ".npz":
            r = np.load(dest)
            got = {k: r[k] for k in r.files}
        else:
            got = {p.stem: np.load(p, mmap_mode="r") for p in dest.glob("*.npy")}
            side = json.loads((dest / "rtamt.json").read_text())
            assert set(side["outputs"]) == set(m.outputs) and side["model"] == model
        assert set(m.outputs) <= set(got)
        for k in m.outputs:
            assert got[k].shape == ref[k].shape and got[k].dtype == ref[k].dtype, k
            np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
        assert float(got["fs"]) == FS and str(got["model"]) == model
        np.testing.assert_array_equal(got["fc"], m.fc)
        assert got["block_sizes"].sum() == 7001 and got["block_sizes"].min() == 1
        if model == "paulick2024":       # the modulation outputs run at fs_mod (fs/2 here)
            assert float(got["fs_mod"]) == m.fs_mod == FS / m.resample_factor
            assert got["modfb"].shape[-1] == got["resample"].shape[-1] == -(
                -7001 // m.resample_factor)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav", "out", "out.npz"]


def test_writer_without_lengths_grows_and_with_wrong_lengths_is_exact(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5000)).astype(np.float32)
    cuts = np.sort(rng.integers(0, 5000, 40))
    for lengths in (None, {"a": 10}, {"a": 90000}):
        dest = tmp_path / f"o{0 if lengths is None else lengths['a']}"
        with OutputWriter(dest, lengths=lengths) as w:
            for part in np.split(x, cuts, axis=-1):
                w.write({"a": part, "b": part[0, 0]})
            w.commit()
        r = read_outputs(dest)
        assert r["a"].flags.f_contiguous and r["a"].dtype == np.float32
        np.testing.assert_array_equal(r["a"], x)
        np.testing.assert_array_equal(r["b"], x[0, 0])
        assert (dest / "a.npy").stat().st_size < x.nbytes + 1024


def test_writer_refuses_to_replace_a_foreign_directory(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "thesis.tex").write_text("precious")
    with pytest.raises(OSError, match="not an rtamt output"):
        OutputWriter(d)
    assert _tree(tmp_path) == {"mine/thesis.tex": b"precious"}


# ------------------------------------------------------------------ memory
_RSS = """
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=580)
sys.stderr.write(r.stderr)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _peak_rss_mb(args, cwd) -> float:
    """Peak RSS (MB) of ``python -m rtamt_apps ARGS``, measured in a fresh wrapper process
    (RUSAGE_CHILDREN covers only that one child)."""
    r = subprocess.run([sys.executable, "-c", _RSS, sys.executable, "-m", "rtamt_apps", *args],
                       capture_output=True, text=True, timeout=600, cwd=cwd)
    rc, kb = r.stdout.split()
    assert rc == "0", r.stderr
    return int(kb) / 1024


def test_peak_memory_does_not_grow_with_the_file(tmp_path):
    """3 s and 6 s of 48 kHz audio, every Dau1997 output at full rate (0.5 / 1 GB on disk):
    the peak RSS differs by < 100 MB and stays <= 600 MB (it was 1.4 / 2.6 GB)."""
    rss = {}
    for s in (3, 6):
        wav = _wav(tmp_path / f"{s}s.wav", 48000 * s, fs=48000)
        out = tmp_path / f"out{s}"
        rss[s] = _peak_rss_mb(["process", str(wav), *FULL, "--out", str(out)], tmp_path)
        assert np.load(out / "modfb.npy", mmap_mode="r").shape == (30, 12, 48000 * s)
        for p in out.iterdir():
            p.unlink()           # 1.5 GB in all: not kept until pytest's cleanup
    assert rss[6] - rss[3] < 100, rss
    assert max(rss.values()) <= 600, rss


# ------------------------------------------------------------------ nothing lost
def _old_outputs(tmp_path, wav):
    """An earlier run's outputs (directory and .npz) to be protected."""
    old_dir, old_npz = tmp_path / "res", tmp_path / "res.npz"
    for dest in (old_dir, old_npz):
        assert main(["process", str(wav), "--outputs", "adaptloop", "--decimate", "320",
                     "--out", str(dest)]) == 0
    return old_dir, old_npz


def _one_line_error(err: str):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("rtamt process: "), err
    assert "Traceback" not in err
    return lines[0]


def test_injected_write_failure_keeps_old_outputs_and_leaves_nothing(tmp_path, monkeypatch,
                                                                     capsys):
    wav = _wav(tmp_path / "in.wav", 32000)
    dests = _old_outputs(tmp_path, wav)
    before = _tree(tmp_path)
    calls = {"n": 0}
    real = OutputWriter.write

    def failing(self, outputs):
        calls["n"] += 1
        if calls["n"] > 2:        # the disk fills up at the third block
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, outputs)

    monkeypatch.setattr(OutputWriter, "write", failing)
    for dest in dests:
        capsys.readouterr()
        calls["n"] = 0
        rc = main(["process", str(wav), "--out", str(dest)])
        assert rc != 0 and calls["n"] == 3
        line = _one_line_error(capsys.readouterr().err)
        assert "No space left" in line and str(dest) in line
        assert _tree(tmp_path) == before       # old outputs intact, no partial file


def test_failure_while_committing_keeps_old_outputs(tmp_path, monkeypatch, capsys):
    wav = _wav(tmp_path / "in.wav", 4000)
    dests = _old_outputs(tmp_path, wav)
    before = _tree(tmp_path)

    def failing(*a, **k):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(writer_mod.zipfile.ZipFile, "write", failing)
    monkeypatch.setattr(writer_mod.os, "rename", failing)
    for dest in dests:
        capsys.readouterr()
        assert main(["process", str(wav), "--out", str(dest)]) != 0
        _one_line_error(capsys.readouterr().err)
        assert _tree(tmp_path) == before


def test_full_disk_keeps_old_outputs_and_leaves_nothing(tmp_path, capsys):
    wav = _wav(tmp_path / "in.wav", 32000)
    with _tmpfs(tmp_path / "small") as small:
        dests = _old_outputs(small, wav)
        before = _tree(small)
        for dest in dests:       # 1 MB of disk, 60 MB of outputs (--force: past the estimate)
            capsys.readouterr()
            assert main(["process", str(wav), *FULL, "--force", "--out", str(dest)]) != 0
            line = _one_line_error(capsys.readouterr().err)
            assert "No space left" in line
            assert _tree(small) == before


def test_read_only_destination_is_refused_before_processing(tmp_path, capsys, no_processing):
    wav = _wav(tmp_path / "in.wav", 4000)
    ro = tmp_path / "ro"
    if os.geteuid() != 0:
        ro.mkdir()
        ctx = contextlib.nullcontext(ro)
    else:                        # root writes through chmod: a read-only mount instead
        ctx = _tmpfs(ro)
    with ctx:
        if os.geteuid() != 0:
            ro.chmod(0o555)
        else:
            r = subprocess.run(["mount", "-o", "remount,ro", str(ro)], capture_output=True,
                               timeout=60)
            if r.returncode:
                _skip_or_fail("cannot remount read-only")
        try:
            for dest in (ro / "x.npz", ro / "x"):
                assert main(["process", str(wav), "--out", str(dest)]) == 2
                line = _one_line_error(capsys.readouterr().err)
                assert str(dest) in line
                assert not any(ro.iterdir())
        finally:
            if os.geteuid() != 0:
                ro.chmod(0o755)


# ------------------------------------------------------------------ checks before processing
@pytest.mark.parametrize("case", ["missing-parent", "file-not-dir", "dir-not-npz"])
def test_bad_destination_is_refused_before_processing(tmp_path, capsys, no_processing, case):
    wav = _wav(tmp_path / "in.wav", 4000)
    if case == "missing-parent":
        dest = tmp_path / "nonexistent" / "dir" / "x.npz"
    elif case == "file-not-dir":
        dest = tmp_path / "in.wav"              # a directory is wanted: no .npz suffix
    else:
        dest = tmp_path / "d.npz"
        dest.mkdir()
    before = _tree(tmp_path)
    assert main(["process", str(wav), "--out", str(dest)]) == 2
    _one_line_error(capsys.readouterr().err)
    assert _tree(tmp_path) == before


def test_moore2016_on_a_file_shorter_than_one_frame(tmp_path, capsys, no_processing):
    wav = _wav(tmp_path / "in.wav", 40, fs=48000)     # 0.83 ms < one 1 ms frame
    assert main(["process", str(wav), "--model", "moore2016",
                 "--out", str(tmp_path / "o.npz")]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "shorter than one 1 ms frame" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav"]


@pytest.mark.parametrize("args, option", [
    (["--spl-ref", "nan"], "--spl-ref"), (["--spl-ref", "1e308"], "--spl-ref"),
    (["--spl-ref", "300"], "--spl-ref"), (["--spl-ref", "-60"], "--spl-ref"),
    (["--block", "0"], "--block"), (["--block", "-5"], "--block"),
    (["--block", "32001"], "--block"), (["--block", "x"], "--block"),
    (["--decimate", "0"], "--decimate"), (["--frame-rate", "-1"], "--frame-rate"),
    (["--pool", "median"], "--pool"), (["--max-output-gb", "0"], "--max-output-gb"),
    (["--store-dtype", "int16"], "--store-dtype"),
    (["--outputs", "gammatone,nope"], "--outputs")])
def test_invalid_options_are_usage_errors(tmp_path, capsys, no_processing, args, option):
    wav = _wav(tmp_path / "in.wav", 4000)
    assert main(["process", str(wav), *args, "--out", str(tmp_path / "o")]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert option in line and "non-finite" not in line     # the option, not the data
    assert "unrecognized" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav"]


def test_block_above_one_second_with_force(tmp_path):
    wav = _wav(tmp_path / "in.wav", 40000)
    assert main(["process", str(wav), "--block", "32001", "--force", "--outputs", "ihc",
                 "--frame-rate", "0", "--out", str(tmp_path / "o")]) == 0
    assert np.load(tmp_path / "o" / "ihc.npy").shape == (30, 40000)


# ------------------------------------------------------------------ --outputs, --decimate
def test_outputs_keeps_only_the_named_stages(tmp_path):
    wav = _wav(tmp_path / "in.wav", 3000)
    _, ref = _reference("dau1997", wav)
    full = FULL[2:]
    assert main(["process", str(wav), "--outputs", "modfb,ihc", *full,
                 "--out", str(tmp_path / "o")]) == 0
    assert main(["process", str(wav), "--outputs", "ihc", "--out", str(tmp_path / "o.npz")]) == 0
    meta = {"fs", "fc", "mfc", "spl_ref", "block_sizes", "model", "config", "outputs",
            "decimate"}
    assert {p.stem for p in (tmp_path / "o").glob("*.npy")} == meta | {"ihc", "modfb"}
    assert set(np.load(tmp_path / "o.npz").files) == meta | {"ihc"}
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "modfb.npy"), ref["modfb"])


def test_decimation_is_block_invariant(tmp_path):
    wav = _wav(tmp_path / "in.wav", 5003)
    _, ref = _reference("dau1997", wav)
    results = []
    for block in (["--block", "random", "--seed", "1"], ["--block", "random", "--seed", "7"],
                  ["--block", "1"], ["--block", "5003"]):
        dest = tmp_path / f"o{len(results)}"
        assert main(["process", str(wav), *block, "--decimate", "32", "--pool", "mean",
                     *FULL[:2], *FULL[4:], "--out", str(dest)]) == 0
        results.append(read_outputs(dest))
    for k in ("gammatone", "ihc", "adaptloop", "modfb"):
        n = 5003 // 32
        want = ref[k][..., :n * 32].reshape(ref[k].shape[:-1] + (n, 32)).mean(axis=-1)
        for r in results:
            assert r[k].shape == want.shape
            np.testing.assert_array_equal(r[k], results[0][k], err_msg=k)   # bit for bit
        np.testing.assert_allclose(results[0][k], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(results[0]["decimate"], [32] * 4)
    # --frame-rate 1000 at 32 kHz is --decimate 32
    assert main(["process", str(wav), "--frame-rate", "1000", "--pool", "mean", *FULL[:2],
                 *FULL[4:], "--out", str(tmp_path / "fr")]) == 0
    fr = read_outputs(tmp_path / "fr")
    for k in ("gammatone", "modfb"):
        np.testing.assert_array_equal(fr[k], results[0][k])
    side = json.loads((tmp_path / "fr" / "rtamt.json").read_text())
    assert side["outputs"]["ihc"]["rate"] == 1000 and side["outputs"]["ihc"]["decimate"] == 32


@pytest.mark.parametrize("how", ["mean", "pick", "rms", "power", "max"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_decimator_any_partition_same_bits(how, dtype):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4000)).astype(dtype)
    x[1, 2, 100:300] = np.nan
    d = Decimator(37, how)
    whole = d(x)
    assert whole.shape[-1] == d.output_length(4000) and whole.dtype == dtype
    for _trial in range(10):
        d.reset()
        cuts = np.sort(rng.integers(0, 4000, rng.integers(1, 300)))
        got = np.concatenate([d(p) for p in np.split(x, cuts, axis=-1)], axis=-1)
        np.testing.assert_array_equal(got, whole)
    if how == "pick":
        np.testing.assert_array_equal(whole, x[..., ::37])
    else:
        n = 4000 // 37
        frames = x[..., :n * 37].reshape(2, 3, n, 37)
        want = {"mean": lambda f: f.mean(-1), "max": lambda f: f.max(-1),
                "power": lambda f: (f * f).mean(-1),
                "rms": lambda f: np.sqrt((f * f).mean(-1))}[how](frames)
        np.testing.assert_allclose(whole, want,
                                   **({"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32
                                      else {"rtol": 1e-12, "atol": 1e-14}))


# ------------------------------------------------------------------ defaults that fit a disk
def test_default_output_is_the_last_stage_packed_float32_in_100_hz_rms_frames(tmp_path,
                                                                              capsys):
    """The default keeps modfb only, packed (F rows), float32, one RMS value per 10 ms
    (it was every stage, float64, NaN-padded, at the audio rate: ~3.6 kB per sample)."""
    n = 16000
    wav = _wav(tmp_path / "in.wav", n)
    m = rtamt.Dau1997(FS)
    ref = m.process_all(read_wav(wav)[1][0])
    dest = tmp_path / "o"
    assert main(["process", str(wav), "--out", str(dest)]) == 0
    out = capsys.readouterr().out
    r = read_outputs(dest)
    assert set(r) - {"fs", "fc", "mfc", "spl_ref", "block_sizes", "model", "config",
                     "outputs", "decimate", "modfb_channel", "modfb_mfc"} == {"modfb"}
    f = n // 320                                  # 100 Hz frames at 32 kHz
    F = ref["modfb"].shape[0]
    assert r["modfb"].shape == (F, f) and r["modfb"].dtype == np.float32
    c = m["modfb"].coeffs
    np.testing.assert_array_equal(r["modfb_channel"], c.filter_channel)
    np.testing.assert_array_equal(r["modfb_mfc"], c.filter_mfc)
    want = np.sqrt((ref["modfb"][:, :f * 320].reshape(F, f, 320) ** 2).mean(-1))
    np.testing.assert_allclose(r["modfb"], want, rtol=2e-6, atol=1e-6)
    size = r["modfb"].nbytes
    assert size == F * f * 4
    assert f"output size {size / 1e6:.3g} MB (estimated before writing: " \
           f"{size / 1e6:.3g} MB)" in out, out
    side = json.loads((dest / "rtamt.json").read_text())
    assert side["outputs"]["modfb"]["pool"] == "rms" and side["store_dtype"] == "float32"


def test_rms_frames_of_a_carrier_are_its_amplitude_not_zero(tmp_path):
    """A 1 kHz tone's gammatone output pooled over 10 ms: the boxcar mean is ~0, the RMS
    follows the carrier's amplitude (issue 29, item 15)."""
    wav = _wav(tmp_path / "in.wav", 9600)
    res = {}
    for pool in ("mean", "rms", "max"):
        dest = tmp_path / pool
        assert main(["process", str(wav), "--outputs", "gammatone", "--pool", pool,
                     "--out", str(dest)]) == 0
        res[pool] = read_outputs(dest)["gammatone"]
    _, ref = _reference("dau1997", wav)
    g = ref["gammatone"][..., :9600].reshape(ref["gammatone"].shape[0], 30, 320)
    ch = int(np.argmax(np.abs(g).max(axis=(1, 2))))            # the 1 kHz channel
    np.testing.assert_allclose(res["rms"], np.sqrt((g ** 2).mean(-1)), rtol=2e-6, atol=1e-9)
    np.testing.assert_allclose(res["max"], g.max(-1), rtol=1e-6, atol=1e-9)
    assert np.abs(res["mean"][ch]).max() < 0.02 * res["rms"][ch].max()   # the 8 Hz AM peak


def test_output_over_the_size_limit_is_refused_before_processing(tmp_path, capsys,
                                                                 no_processing):
    wav = _wav(tmp_path / "in.wav", 32000)
    info = rtamt.Dau1997(FS).output_info()
    est = 4 * 32000 * sum(v["channels"] for v in info.values())   # every stage, float32
    assert main(["process", str(wav), "--outputs", "all", "--frame-rate", "0",
                 "--max-output-gb", "0.01", "--out", str(tmp_path / "o")]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert f"about {est / 1e6:.3g} MB" in line and "--max-output-gb 0.01" in line, line
    assert "--force" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav"]
    with pytest.raises(AssertionError, match="processing started"):   # --force: it goes on
        main(["process", str(wav), "--outputs", "all", "--frame-rate", "0",
              "--max-output-gb", "0.01", "--force", "--out", str(tmp_path / "o")])


def test_size_known_after_the_first_block_is_checked_before_writing(tmp_path, capsys):
    """Moore2016's outputs have an ear axis that output_info does not show: the size from
    the first block's shapes (twice the first estimate) is checked before anything is
    written."""
    dest = tmp_path / "o"
    assert main(["process", "--demo", "--model", "moore2016", "--out", str(dest)]) == 0
    size = sum(p.stat().st_size for p in dest.iterdir())
    cap = capsys.readouterr().out
    assert "(2, 150, 200)" in cap
    est = float(cap.split("estimated before writing: ")[1].split()[0]) * 1e6
    assert size * 0.9 < est < size                   # the data, not the metadata
    shutil.rmtree(dest)
    limit = 0.75 * est / 1e9                          # above the first estimate (~est / 2)
    assert main(["process", "--demo", "--model", "moore2016", "--max-output-gb",
                 f"{limit:.6f}", "--out", str(dest)]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert f"about {est / 1e6:.3g} MB" in line, line
    assert list(tmp_path.iterdir()) == []


def test_output_larger_than_the_free_space_is_refused(tmp_path, capsys, monkeypatch,
                                                      no_processing):
    wav = _wav(tmp_path / "in.wav", 32000)
    real = outputs_mod.shutil.disk_usage
    monkeypatch.setattr(outputs_mod.shutil, "disk_usage",
                        lambda p: real(p)._replace(free=100_000))
    for dest in (tmp_path / "o", tmp_path / "o.npz"):
        assert main(["process", str(wav), "--out", str(dest)]) == 2
        line = _one_line_error(capsys.readouterr().err)
        assert "0.1 MB free" in line and "--force" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav"]


def test_without_out_says_that_nothing_is_written(tmp_path, capsys):
    wav = _wav(tmp_path / "in.wav", 3200)
    assert main(["process", str(wav)]) == 0
    cap = capsys.readouterr()
    err = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert len(err) == 1 and "nothing is written" in err[0] and "--out" in err[0], cap.err
    assert "nothing written (no --out)" in cap.out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav"]


def test_summary_times_agree_with_each_other(tmp_path, capsys):
    """'X of real time' is the printed processing time over the printed signal length, on
    both lines (issue 29, item 13: "0.181 of real time ... 2.00 s in 0.474 s")."""
    wav = _wav(tmp_path / "in.wav", 32000)
    assert main(["process", str(wav), "--block", "1024"]) == 0
    lines = [ln.strip() for ln in capsys.readouterr().out.splitlines()]
    total = next(ln for ln in lines if ln.startswith("processed "))
    steady = next(ln for ln in lines if ln.startswith("steady state:"))
    m = re.match(r"processed ([\d.]+) s of signal in ([\d.]+) s: ([\d.e+-]+) of real time",
                 total)
    sig, t, rtf = (float(v) for v in m.groups())
    assert sig == 1.0 and abs(rtf - t / sig) <= 0.0015 * max(1.0, rtf / 0.3), total
    m = re.match(r"steady state: ([\d.e+-]+) of real time, .*\(([\d.]+) s of signal in "
                 r"([\d.]+) s, the first block excluded\)", steady)
    rtf, sig, t = (float(v) for v in m.groups())
    assert abs(sig - (32000 - 1024) / FS) < 0.006
    assert abs(rtf - t / sig) <= 0.001 + 0.005 * rtf, steady


# ------------------------------------------------------------------ signals, killed runs
def _hidden(d):
    return sorted(p.name for p in pathlib.Path(d).iterdir() if ".rtamt-" in p.name)


def _start_long_run(tmp_path, dest):
    """A `rtamt process` subprocess on 40 s of audio, returned once it is writing."""
    wav = _wav(tmp_path / "long.wav", 16000 * 40, fs=16000)
    p = subprocess.Popen([sys.executable, "-m", "rtamt_apps", "process", str(wav),
                          "--out", str(dest)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        tmp = [d for d in _hidden(dest.parent) if (dest.parent / d / "modfb.npy").exists()]
        if tmp or p.poll() is not None:
            break
        time.sleep(0.05)
    assert p.poll() is None, p.communicate()
    assert tmp, "the run never started writing"
    return p


def test_sigterm_removes_the_temporary_output_with_one_line(tmp_path):
    dest = tmp_path / "res"
    p = _start_long_run(tmp_path, dest)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143, (out, err)
    line = _one_line_error(err)
    assert "SIGTERM" in line and str(dest) in line
    assert _hidden(tmp_path) == [] and not dest.exists()


def test_sigkill_leftovers_are_removed_by_the_next_run(tmp_path):
    dest = tmp_path / "res"
    p = _start_long_run(tmp_path, dest)
    p.kill()
    p.wait(timeout=60)
    left = _hidden(tmp_path)
    assert len(left) == 1 and str(p.pid) in left[0]          # what a SIGKILL leaves
    wav = _wav(tmp_path / "short.wav", 3200)
    assert main(["process", str(wav), "--out", str(dest)]) == 0
    assert _hidden(tmp_path) == [] and (dest / "modfb.npy").is_file()


def test_stale_directories_only_of_dead_processes_on_this_host(tmp_path):
    """remove_stale: a dead writer's tmp goes, its 'old' output comes back when the kill fell
    between the two renames; a live process', another host's and foreign names stay."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        host = writer_mod._host()
        names = {f".a.rtamt-tmp-{dead.pid}@{host}-0123abcd": "gone",
                 f".b.rtamt-old-{dead.pid}@{host}-0123abcd": "restored",
                 f".c.rtamt-tmp-{live.pid}@{host}-0123abcd": "kept",
                 f".d.rtamt-tmp-{dead.pid}@other-host-0123abcd": "kept",
                 f".e.rtamt-tmp-{dead.pid}-0123abcd": "kept",
                 "f.rtamt-tmp-1@x-0123abcd": "kept"}
        for n in names:
            (tmp_path / n).mkdir()
            (tmp_path / n / "x.npy").write_bytes(b"data")
        removed = writer_mod.remove_stale(tmp_path)
        assert len(removed) == 2
        left = {p.name for p in tmp_path.iterdir()}
        assert left == {n for n, what in names.items() if what == "kept"} | {"b"}
        assert (tmp_path / "b" / "x.npy").read_bytes() == b"data"
    finally:
        live.kill()
        live.wait()


def test_progress_bar_on_a_terminal(tmp_path):
    """A file of >= PROGRESS_MIN_SECONDS on a terminal's stderr shows a tqdm bar."""
    wav = _wav(tmp_path / "in.wav", 16000 * 6, fs=16000)
    master, slave = os.openpty()
    try:
        p = subprocess.Popen([sys.executable, "-m", "rtamt_apps", "process", str(wav)],
                             stdout=subprocess.DEVNULL, stderr=slave, stdin=subprocess.DEVNULL)
        os.close(slave)
        buf = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:          # EIO: the child closed the terminal
                break
            if not chunk:
                break
            buf += chunk
        assert p.wait(timeout=300) == 0
    finally:
        os.close(master)
    text = buf.decode(errors="replace")
    assert "rtamt process:" in text and "s audio" in text and "%|" in text, text


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ten_minutes_at_48_khz_with_the_defaults(tmp_path):
    """Issue 29's acceptance: a 10-minute 48 kHz file with the default options writes at
    most 2 GB (it is ~67 MB: modfb, 100 Hz RMS frames, float32) in at most 300 MB of peak
    RSS (it was ~104 GB and 621 MB)."""
    import soundfile as sf

    wav = tmp_path / "ten.wav"
    with sf.SoundFile(wav, "w", 48000, 1, subtype="PCM_16") as f:
        rng = np.random.default_rng(0)
        for _ in range(60):                             # 10 s at a time
            f.write(0.05 * rng.standard_normal(480000))
    out = tmp_path / "o"
    rss = _peak_rss_mb(["process", str(wav), "--out", str(out)], tmp_path)
    size = sum(p.stat().st_size for p in out.iterdir())
    assert np.load(out / "modfb.npy", mmap_mode="r").shape == (275, 60000)
    assert size <= 2e9 and rss <= 300, (size, rss)
