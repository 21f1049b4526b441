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

from _helpers import spy_reads

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


def test_read_tm_into_one_buffer_gives_the_frames_of_read(tmp_path):
    """``read_tm(n, out=buf)``: the frames of :meth:`AudioReader.read`, time-major, decoded
    into the caller's buffer (a view of its first rows, no new array per block); a buffer
    of another shape or dtype is refused before anything is read."""
    path = tmp_path / "a.flac"
    sf.write(path, _x(10_000, ch=2), FS, format="FLAC", subtype="PCM_24")
    with AudioReader(path, count=False) as r:
        want = r.read(10**6)
    buf = np.empty((4096, 2))
    parts = []
    with AudioReader(path, count=False) as r:
        with pytest.raises(ValueError, match=r"out must be C-contiguous float64 \(>= 4096, 2\)"):
            r.read_tm(4096, out=np.empty((4096, 2), np.float32))
        with pytest.raises(ValueError, match="out must be"):
            r.read_tm(4096, out=np.empty((2, 4096)))
        assert r.pos == 0
        while True:
            x = r.read_tm(4096, out=buf)
            if x.shape[0] == 0:
                break
            assert x.base is buf or x is buf or np.shares_memory(x, buf)
            assert x.flags.c_contiguous and x.shape[1] == 2
            parts.append(x.copy())
    assert [p.shape[0] for p in parts] == [4096, 4096, 10_000 - 8192]
    np.testing.assert_array_equal(np.concatenate(parts).T, want)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_read_tm_names_the_frame_of_a_non_finite_sample(tmp_path, bad):
    """NaN and +-Inf are found (the one-pass sum check lets neither through) and the first
    bad frame is named; huge finite samples whose sum overflows are not refused."""
    x = _x(5000, ch=2)
    x[4321, 1] = bad
    path = tmp_path / "bad.wav"
    sf.write(path, x, FS, subtype="DOUBLE")
    with AudioReader(path) as r, pytest.raises(AudioFileError, match="from frame 4321"):
        r.read_tm(8192, out=np.empty((8192, 2)))
    big = np.full((64, 2), 1.5e308)
    sf.write(path, big, FS, subtype="DOUBLE")
    with AudioReader(path) as r:
        np.testing.assert_array_equal(r.read_tm(64), big)


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
    sizes = spy_reads(monkeypatch)
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


# ------------------------------------------------- the length comes from reading (issue 38)
def _wav_with_sizes(path, n, riff, data):
    """A 16-bit mono WAV of ``n`` frames whose RIFF and data sizes are replaced; its
    samples ``(1, n)`` (as read before)."""
    import struct

    sf.write(path, _x(n), FS, subtype="PCM_16")
    want = sf.read(path, dtype="float64", always_2d=True)[0].T
    b = bytearray(path.read_bytes())
    at = b.find(b"data") + 4
    b[4:8], b[at:at + 4] = struct.pack("<I", riff), struct.pack("<I", data)
    path.write_bytes(bytes(b))
    return want


@pytest.mark.parametrize("size", [0xFFFFFFFF, 0x7FFFFFFF, 0x7FFFF000, 0])
def test_placeholder_sizes_are_not_a_length(tmp_path, size):
    """A WAV written to a pipe (FFmpeg: 0xFFFFFFFF; SoX: 0x7FFFF000; 0) is read to its end:
    the header's size is a placeholder, not a claim of 2147483647 frames (refused as
    truncated before); the placeholder 0, which libsndfile reads as empty, is read through
    a view of the header."""
    path = tmp_path / "piped.wav"
    want = _wav_with_sizes(path, 5000, size, size)
    for count in (True, False):
        with AudioReader(path, count=count) as r:
            assert r.frames == 5000 and r.claimed is None and r.truncated is None
            np.testing.assert_array_equal(r.read(10**6), want)
    np.testing.assert_array_equal(read_audio(path)[1], want)
    assert FileSource(path, realtime=False).length == 5000


def test_a_finite_size_beyond_the_data_is_a_truncation(tmp_path):
    path = tmp_path / "short.wav"
    _wav_with_sizes(path, 5000, 36 + 2 * 7000, 2 * 7000)     # the header says 7000 frames
    with pytest.raises(AudioFileError, match="announces 7000 frames, only 5000") as e:
        AudioReader(path)
    assert e.value.frames_read == 5000
    with AudioReader(path, partial=True) as r:
        assert r.frames == 5000 and r.read(10**6).shape == (1, 5000)
        assert "announces 7000 frames, only 5000 could be read" in r.truncated


def _mp3(path, n=8000):
    """An MP3 of ``n`` frames written by libsndfile (LAME: a Xing tag in its first frame);
    the decoded samples."""
    sf.write(path, 0.3 * np.sin(2 * np.pi * 1000 * np.arange(n) / FS), FS, format="MP3")
    return sf.read(path, dtype="float64", always_2d=True)[0].T


def test_mp3_with_a_tag_cut_short_is_truncated(tmp_path):
    """An MP3 whose Xing tag gives its length, cut in half: refused with the frames read
    (whether counted up front or found at the end), or those frames with ``partial``.  (An
    MP3 without a tag: tests/apps/test_file_verdicts.py.)"""
    path = tmp_path / "cut.mp3"
    full = _mp3(path)
    b = path.read_bytes()
    path.write_bytes(b[:len(b) // 2])
    have = sf.read(path, dtype="float64")[0].shape[0]
    assert have < full.shape[1]
    for count in (True, False):
        with pytest.raises(AudioFileError, match=f"announces {full.shape[1]} frames, only "
                                                 f"{have} could be read"):
            with AudioReader(path, count=count) as r:
                while r.read(1000).shape[1]:
                    pass
        with AudioReader(path, count=count, partial=True) as r:
            assert r.frames == (have if count else None)
            x = np.concatenate([r.read(999) for _ in range(20)], axis=1)
            assert x.shape == (1, have) and r.frames == have and r.truncated
        # (libsndfile's MP3 decoding differs in the last bits with the read size)
        np.testing.assert_allclose(x, full[:, :have], rtol=0, atol=1e-6)


def test_count_false_decodes_once(tmp_path, monkeypatch):
    """``count=False``: a coded file is not decoded up front; its length is known at its
    end (loudness reads every file once)."""
    path = tmp_path / "a.flac"
    sf.write(path, _x(20000), FS, subtype="PCM_16")
    reads = []
    real = sf.SoundFile.read

    def spy(self, *a, **k):
        out = real(self, *a, **k)
        reads.append(out.shape[0])
        return out

    monkeypatch.setattr(sf.SoundFile, "read", spy)
    with AudioReader(path, count=False) as r:
        assert r.frames is None and reads == []
        while r.read(6000).shape[1]:
            pass
        assert r.frames == 20000 and sum(reads) == 20000
    reads.clear()
    with AudioReader(path) as r:                    # counted: decoded once up front
        assert r.frames == 20000 and sum(reads) == 20000


class _Sink:
    """What a source needs of a runtime: pushes collected, faults recorded."""
    policy = "drop-newest"

    def __init__(self):
        self.blocks, self.errors, self.ended = [], [], False

    def source_started(self, period):
        pass

    def source_ended(self):
        self.ended = True

    def report_source_error(self, msg):
        self.errors.append(msg)

    def push(self, blk, wait=False):
        self.blocks.append(np.array(blk))
        return True


def test_file_source_reads_block_by_block(tmp_path, monkeypatch):
    """FileSource reads the file as it pushes (chunks of READ_CHUNK frames): memory does
    not depend on the file's length (it read the whole file into memory before); looping
    wraps to the start."""
    path = tmp_path / "long.wav"
    n = 3 * FileSource.READ_CHUNK + 123
    sf.write(path, _x(n, ch=2), FS, subtype="FLOAT")
    sizes = spy_reads(monkeypatch)
    want = read_audio(path)[1].T
    sizes.clear()
    sink = _Sink()
    FileSource(path, blocksize=[1000, 7], realtime=False).run(sink)
    assert sink.ended and not sink.errors
    np.testing.assert_array_equal(np.concatenate(sink.blocks), want)
    assert max(sizes) <= FileSource.READ_CHUNK and len(sizes) >= 4
    sink = _Sink()
    FileSource(path, blocksize=4096, realtime=False, loop=True, seconds=2.5 * n / FS).run(sink)
    got = np.concatenate(sink.blocks)
    np.testing.assert_array_equal(got, np.concatenate([want, want, want])[:got.shape[0]])
    assert got.shape[0] == round(2.5 * n)


def test_file_source_reports_a_file_that_changes_while_it_plays(tmp_path):
    """A file cut short after it was opened: the source stops and reports an input fault
    (no traceback from its thread, nothing pushed past the end)."""
    path = tmp_path / "a.wav"
    n = 3 * FileSource.READ_CHUNK
    sf.write(path, _x(n), FS, subtype="PCM_16")
    src = FileSource(path, blocksize=512, realtime=False)
    with open(path, "r+b") as f:
        f.truncate(44 + 2 * FileSource.READ_CHUNK)
    sink = _Sink()
    src.run(sink)
    assert len(sink.errors) == 1 and "truncated" in sink.errors[0] and not sink.ended
    assert src.error == sink.errors[0]
    assert sum(b.shape[0] for b in sink.blocks) == FileSource.READ_CHUNK
