"""Audio files through soundfile (libsndfile): every WAV subtype, FLAC and OGG read the same
way by `rtamt process` (block by block) and the live apps' file source; truncated or
damaged files reported in one line with the frames that could be read, nothing written
(issue 29, items 9 and 11)."""
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

import rtamt
import rtamt_apps.process as proc
from rtamt.io import read_outputs
from rtamt.runtime import FileSource
from rtamt.signals import AudioFileError, AudioReader, read_audio
from rtamt_apps.cli import main

FS = 16000


def _x(n=8000, ch=1, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / FS
    x = 0.3 * np.sin(2 * np.pi * 1000 * t)[:, None] + 0.05 * rng.standard_normal((n, ch))
    return x if ch > 1 else x[:, 0]


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _truncated_wav(path, n=8000, cut=4000):
    """A valid 16-bit WAV of ``n`` frames with its last ``cut`` bytes cut off."""
    sf.write(path, _x(n), FS, subtype="PCM_16")
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    return n, n - cut // 2


@pytest.mark.parametrize("fmt, subtype", [
    ("WAV", "PCM_U8"), ("WAV", "PCM_16"), ("WAV", "PCM_24"), ("WAV", "PCM_32"),
    ("WAV", "FLOAT"), ("WAV", "DOUBLE"), ("WAV", "ULAW"), ("WAV", "ALAW"),
    ("WAV", "IMA_ADPCM"), ("FLAC", "PCM_16"), ("FLAC", "PCM_24"), ("OGG", "VORBIS")])
def test_reader_reads_every_format_as_soundfile_does(tmp_path, fmt, subtype):
    path = tmp_path / f"a.{fmt.lower()}"
    sf.write(path, _x(ch=2), FS, format=fmt, subtype=subtype)
    want, rate = sf.read(path, dtype="float64", always_2d=True)
    fs, x = read_audio(path)
    assert fs == rate == FS and x.shape == (2, want.shape[0])
    np.testing.assert_array_equal(x, want.T)
    with AudioReader(path) as r:                     # block-wise: the same samples
        parts = [r.read(k) for k in (1, 999, 3000, 10**6, 5)]
    assert [p.shape[-1] for p in parts][-1] == 0
    np.testing.assert_array_equal(np.concatenate(parts, axis=-1), x)


def test_int16_scaling_is_unchanged():
    """Full scale int16 reads as 32767/32768 (what scipy-based reading gave)."""
    import io
    b = io.BytesIO()
    sf.write(b, np.array([32767, -32768, 1], np.int16), FS, format="WAV", subtype="PCM_16")
    b.seek(0)
    d, _ = sf.read(b, dtype="float64")
    np.testing.assert_array_equal(d, [32767 / 32768, -1.0, 1 / 32768])


def test_process_flac_equals_process_wav(tmp_path):
    """A FLAC (lossless) gives the same outputs as the WAV it was made from; `process`
    refused FLAC before."""
    x = np.round(_x(9000) * 32767).astype(np.int16)     # the same samples in both
    for ext in ("wav", "flac"):
        sf.write(tmp_path / f"a.{ext}", x, FS, subtype="PCM_16")
        assert main(["process", str(tmp_path / f"a.{ext}"), "--block", "random",
                     "--out", str(tmp_path / ext)]) == 0
    a, b = read_outputs(tmp_path / "wav"), read_outputs(tmp_path / "flac")
    np.testing.assert_array_equal(a["modfb"], b["modfb"])
    fs, xin = read_audio(tmp_path / "a.flac")
    ref = rtamt.Dau1997(FS).process_all(xin[0])["modfb"]
    f = 9000 // 160
    want = np.sqrt((ref[:, :f * 160].reshape(-1, f, 160) ** 2).mean(-1))
    np.testing.assert_allclose(b["modfb"], want, rtol=2e-6, atol=1e-6)


def test_process_reads_the_file_block_by_block(tmp_path, monkeypatch):
    """No read larger than READ_CHUNK frames: memory does not depend on the file's length."""
    path = tmp_path / "a.wav"
    sf.write(path, _x(3 * proc.READ_CHUNK + 17), FS, subtype="PCM_16")
    sizes = []
    real = AudioReader.read

    def spy(self, n):
        sizes.append(n)
        return real(self, n)

    monkeypatch.setattr(AudioReader, "read", spy)
    assert main(["process", str(path), "--block", "512"]) == 0
    assert len(sizes) >= 4 and max(sizes) <= proc.READ_CHUNK


def test_truncated_wav_is_reported_with_the_frames_read(tmp_path, capsys):
    path = tmp_path / "cut.wav"
    n, have = _truncated_wav(path)
    for out in (tmp_path / "o", tmp_path / "o.npz"):
        assert main(["process", str(path), "--out", str(out)]) == 2
        line = _one_line(capsys.readouterr().err)
        assert str(path) in line and "truncated" in line, line
        assert f"announces {n} frames" in line and f"only {have} could be read" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.wav"]     # nothing written
    with pytest.raises(AudioFileError, match=f"only {have} could be read"):
        FileSource(path)


@pytest.mark.parametrize("keep", [0, 30, 44])
def test_truncated_header_is_one_line(tmp_path, capsys, keep):
    path = tmp_path / "hdr.wav"
    _truncated_wav(path)
    path.write_bytes(path.read_bytes()[:keep])
    assert main(["process", str(path), "--out", str(tmp_path / "o")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"rtamt process: cannot read {path}") and "truncated" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hdr.wav"]


def test_damaged_flac_is_reported_with_the_frames_read(tmp_path, capsys):
    path = tmp_path / "cut.flac"
    sf.write(path, _x(10 * proc.READ_CHUNK // 4), FS, subtype="PCM_16")
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    assert main(["process", str(path), "--out", str(tmp_path / "o")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(path) in line and ("truncated" in line or "damaged" in line), line
    assert "nothing written" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.flac"]


def test_nan_in_a_float_file_names_the_frame(tmp_path, capsys):
    x = _x(5000)
    x[4321] = np.nan
    path = tmp_path / "nan.wav"
    sf.write(path, x, FS, subtype="FLOAT")
    assert main(["process", str(path), "--out", str(tmp_path / "o")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "NaN or Inf" in line and "frame 4321" in line


def test_stream_truncated_wav_is_one_line(tmp_path):
    """`rtamt stream --input cut.wav`: one line, exit 2 (a struct.error traceback before)."""
    path = tmp_path / "cut.wav"
    n, have = _truncated_wav(path)
    for keep in (None, 30):
        if keep:
            path.write_bytes(path.read_bytes()[:keep])
        r = subprocess.run([sys.executable, "-m", "rtamt_apps", "stream", "--input",
                            str(path), "--fast"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 2, r.stderr
        line = _one_line(r.stderr)
        assert line.startswith("rtamt stream: ") and "truncated" in line
        if keep is None:
            assert f"only {have} could be read" in line
