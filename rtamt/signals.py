"""Built-in demo signal and audio-file input (calibrated, float; files through soundfile).

Calibration convention (shared by every model): ``spl_ref`` is the dB SPL of a
digital signal with RMS 1.0.  AMT's convention is ``spl_ref = 100``.
"""
from __future__ import annotations

import os
import re

import numpy as np


def rms_for_spl(spl_db: float, spl_ref: float = 100.0) -> float:
    """Digital RMS that corresponds to ``spl_db`` dB SPL: ``10^((spl_db - spl_ref)/20)``."""
    return 10.0 ** ((spl_db - spl_ref) / 20.0)


def demo_signal(fs: float = 48000.0, seconds: float = 2.0, spl_ref: float = 100.0,
                seed: int = 0) -> np.ndarray:
    """Deterministic demo: 1 kHz tone (60 dB SPL, 10 ms raised-cosine ramps, 0-0.5 s),
    4 kHz carrier 100 % AM at 8 Hz (65 dB SPL, 0.5-1.2 s), white noise (70 dB SPL,
    1.2-1.7 s), then silence.  Returns float64 (T,)."""
    n = int(round(seconds * fs))
    t = np.arange(n) / fs
    x = np.zeros(n)
    rng = np.random.default_rng(seed)

    def seg(t0, t1):
        return (t >= t0) & (t < t1)

    def ramp(mask, dur=0.01):
        idx = np.nonzero(mask)[0]
        w = np.ones(idx.size)
        nr = min(int(round(dur * fs)), idx.size // 2)
        if nr > 0:
            r = 0.5 - 0.5 * np.cos(np.pi * np.arange(nr) / nr)
            w[:nr] = r
            w[-nr:] = r[::-1]
        return idx, w

    m = seg(0.0, 0.5)
    idx, w = ramp(m)
    x[idx] = np.sqrt(2) * rms_for_spl(60, spl_ref) * np.sin(2 * np.pi * 1000 * t[idx]) * w
    m = seg(0.5, 1.2)
    idx, w = ramp(m)
    if idx.size:                      # (a demo shorter than 0.5 s has no AM segment)
        am = (1 + np.cos(2 * np.pi * 8 * t[idx])) * np.sin(2 * np.pi * 4000 * t[idx])
        x[idx] = am / np.sqrt(np.mean(am ** 2)) * rms_for_spl(65, spl_ref) * w
    m = seg(1.2, 1.7)
    idx, w = ramp(m)
    x[idx] = rng.standard_normal(idx.size) * rms_for_spl(70, spl_ref) * w
    return x


class AudioFileError(ValueError):
    """An audio file that cannot be read completely: not an audio file, a truncated header
    or data part, a decoding error.  The message is one line naming the file (and, for a
    truncated or damaged file, how many frames could be read).

    ``frames_read``: for a file that ends early (truncated, or a decoding error part way),
    the frames that could be read before the end or the error, which
    ``AudioReader(path, partial=True)`` would deliver; ``None`` for a file that cannot be
    read at all."""

    def __init__(self, message: str, frames_read: int | None = None):
        super().__init__(message)
        self.frames_read = frames_read


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


#: libsndfile subtypes stored as plain samples (bytes per sample): in the containers that
#: hold them (WAV, AIFF, AU, CAF, W64, RF64, ...) libsndfile takes the frame count from the
#: bytes of the data chunk that are present, so it is what reading gives
_PLAIN_BYTES = {"PCM_S8": 1, "PCM_U8": 1, "PCM_16": 2, "PCM_24": 3, "PCM_32": 4, "FLOAT": 4,
                "DOUBLE": 8, "ULAW": 1, "ALAW": 1}
#: containers whose samples are coded (their subtype may still read PCM_16: FLAC)
_CODED_FORMATS = ("FLAC", "OGG", "MP3")
#: data-chunk sizes a writer that cannot seek back leaves in the header: not a length.
#: 0 and 0xFFFFFFFF (RIFF's -1: FFmpeg writing to a pipe), 0x7FFFFFFF, 0x7FFFF000 (SoX)
PLACEHOLDER_SIZES = frozenset({0, 0xFFFFFFFF, 0x7FFFFFFF, 0x7FFFF000})
#: libsndfile's frame count for a length it does not know (SF_COUNT_MAX)
_UNKNOWN_LENGTH = (1 << 63) - 1
#: frames decoded at a time when counting a file's length
COUNT_CHUNK = 1 << 14


def _mp3_has_length_tag(path: str) -> bool:
    """True when the first MPEG audio frame of ``path`` (after an ID3v2 tag) holds a
    Xing / Info (LAME, FFmpeg) or VBRI (Fraunhofer) header, which gives the stream's frame
    count; without one, libsndfile (mpg123) estimates the length from the file size and
    the first frame's bit rate.  The tag sits 13 to 36 bytes into the frame (after the side
    information, or at 36 for VBRI)."""
    try:
        with open(path, "rb") as f:
            head = f.read(10)
            start = 0
            if head[:3] == b"ID3" and len(head) == 10:
                size = 0
                for b in head[6:10]:                  # a syncsafe integer: 7 bits a byte
                    size = (size << 7) | (b & 0x7F)
                start = 10 + size + (10 if head[5] & 0x10 else 0)   # + footer
            f.seek(start)
            data = f.read(1 << 16)
    except OSError:
        return False
    for i in range(len(data) - 1):                    # the first frame sync
        if data[i] == 0xFF and data[i + 1] & 0xE0 == 0xE0:
            frame = data[i:i + 48]
            return any(t in frame for t in (b"Xing", b"Info", b"VBRI"))
    return False


#: the GUID tail of Sony Wave64's chunk ids (the id is its first 4 bytes, e.g. b"fmt ")
_W64_GUID_TAIL = bytes.fromhex("f3acd3118cd100c04f8edb8a")


def _wave_chunks(f):
    """``(id, offset of the size field, size, offset of the body)`` of each chunk of an
    open RIFF / RF64 / BW64 WAVE file (4-byte ids and sizes, bodies padded to even
    length) or Sony Wave64 file (16-byte GUID ids whose first 4 bytes are the RIFF id,
    8-byte sizes that count the 24-byte header, bodies padded to 8 bytes); nothing for
    another file.  Sizes are as stored (RF64's 0xFFFFFFFF placeholders included)."""
    import struct

    f.seek(0)
    head = f.read(40)
    if head[:4] in (b"RIFF", b"RF64", b"BW64") and head[8:12] == b"WAVE":
        off, w64 = 12, False
    elif head[:4] == b"riff" and head[24:28] == b"wave" and head[28:40] == _W64_GUID_TAIL:
        off, w64 = 40, True
    else:
        return
    while True:
        f.seek(off)
        hdr = f.read(24 if w64 else 8)
        if len(hdr) < (24 if w64 else 8):
            return
        if w64:
            size = struct.unpack("<Q", hdr[16:24])[0]
            if size < 24:
                return
            yield hdr[:4], off + 16, size - 24, off + 24
            off += size + (-size % 8)
        else:
            size = struct.unpack("<I", hdr[4:])[0]
            yield hdr[:4], off + 4, size, off + 8
            off += 8 + size + (size & 1)


def _riff_data_size_offset(path: str) -> int | None:
    """Byte offset of the size field of a RIFF/WAVE file's ``data`` chunk (None when the
    file is not RIFF/WAVE or has no ``data`` chunk header)."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"RIFF":
                return None
            return next((at for cid, at, _, _ in _wave_chunks(f) if cid == b"data"), None)
    except OSError:
        return None


def _wave_channel_mask(path: str) -> int | None:
    """``dwChannelMask`` of a WAVE file (RIFF, RF64, BW64, Wave64) whose ``fmt `` chunk is a
    WAVEFORMATEXTENSIBLE (Microsoft, mmreg.h / ksmedia.h: the 18-byte WAVEFORMATEX with
    ``wFormatTag`` 0xFFFE and ``cbSize`` >= 22, then ``wValidBitsPerSample`` (2 bytes) and
    the 32-bit ``dwChannelMask`` at byte 20 of the chunk, then the SubFormat GUID); None
    for a plain WAVEFORMATEX (no mask) or another file."""
    import struct

    try:
        with open(path, "rb") as f:
            for cid, _, size, body in _wave_chunks(f):
                if cid == b"fmt ":
                    f.seek(body)
                    fmt = f.read(min(size, 40))
                    if len(fmt) < 24 or struct.unpack_from("<H", fmt, 0)[0] != 0xFFFE \
                            or struct.unpack_from("<H", fmt, 16)[0] < 22:
                        return None
                    return struct.unpack_from("<I", fmt, 20)[0]
                if cid == b"data":
                    return None
    except OSError:
        return None
    return None


#: the Vorbis comment FLAC and FFmpeg store a WAVE channel mask in
FLAC_MASK_TAG = "WAVEFORMATEXTENSIBLE_CHANNEL_MASK"


def _flac_channel_mask(path: str) -> int | None:
    """The channel mask of a FLAC file's ``WAVEFORMATEXTENSIBLE_CHANNEL_MASK`` Vorbis
    comment (written by ``flac`` and FFmpeg for a layout other than FLAC's default; hex
    ``0x...`` or decimal), from its metadata blocks (RFC 9639: after ``fLaC``, blocks with
    a 4-byte header -- last-block flag, 7-bit type, 24-bit big-endian length; type 4 is the
    VORBIS_COMMENT, whose own lengths are little-endian); None without one.  A tag whose
    value is not a number raises ``ValueError``."""
    import struct

    try:
        with open(path, "rb") as f:
            if f.read(4) != b"fLaC":
                return None
            while True:
                h = f.read(4)
                if len(h) < 4:
                    return None
                last, kind, size = h[0] & 0x80, h[0] & 0x7F, int.from_bytes(h[1:], "big")
                if kind != 4:
                    if last:
                        return None
                    f.seek(size, 1)
                    continue
                b = f.read(size)
                at = 4 + struct.unpack_from("<I", b, 0)[0]          # after the vendor
                n, at = struct.unpack_from("<I", b, at)[0], at + 4
                for _ in range(n):
                    ln = struct.unpack_from("<I", b, at)[0]
                    key, _, val = b[at + 4:at + 4 + ln].decode("utf-8", "replace") \
                        .partition("=")
                    at += 4 + ln
                    if key.upper() == FLAC_MASK_TAG:
                        try:
                            return int(val.strip(), 0)
                        except ValueError:
                            raise ValueError(f"its {FLAC_MASK_TAG} tag {val!r} is not a "
                                             "number") from None
                return None
    except (OSError, struct.error):
        return None


def _opus_mapping_family(path: str) -> int | None:
    """The channel mapping family of an Ogg Opus file's identification header (RFC 7845
    section 5.1: ``OpusHead``, then version, channel count, pre-skip (2), rate (4), gain
    (2), family at byte 18); None when there is none in its first page."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 12)
    except OSError:
        return None
    i = head.find(b"OpusHead")
    return head[i + 18] if i >= 0 and len(head) > i + 18 else None


class _PatchedFile:
    """A read-only binary file that reads ``patch`` (bytes) at offset ``at`` instead of
    what is stored there: libsndfile reads a WAV whose ``data`` size is the placeholder 0
    as empty, and the same file with the placeholder 0xFFFFFFFF (which it reads as "to the
    end of the file") completely."""

    def __init__(self, path: str, at: int, patch: bytes):
        self._f = open(path, "rb")
        self._at, self._patch = at, patch

    def seek(self, offset, whence=0):
        return self._f.seek(offset, whence)

    def tell(self):
        return self._f.tell()

    def read(self, n=-1):
        pos = self._f.tell()
        data = self._f.read(n)
        lo, hi = max(pos, self._at), min(pos + len(data), self._at + len(self._patch))
        if lo < hi:
            b = bytearray(data)
            b[lo - pos:hi - pos] = self._patch[lo - self._at:hi - self._at]
            data = bytes(b)
        return data

    def close(self):
        self._f.close()


class AudioReader:
    """An audio file opened for block-wise reading through ``soundfile`` (libsndfile):
    WAV of every subtype (PCM 8/16/24/32 bit, float, double, A-/mu-law, ...), FLAC, OGG
    Vorbis/Opus, MP3, AIFF, and every other format libsndfile reads.

    Samples come as float64 ``(channels, n)`` (integer formats scaled by ``2^-(bits-1)``,
    i.e. a full-scale int16 of 32767 reads as 32767/32768, as libsndfile and scipy scale
    them; float formats as stored).  ``fs`` (Hz) and ``channels`` are known once it is
    open, and so is ``frames``, the number of frames reading gives (see below); memory does
    not depend on the file's length.

    The length comes from reading, not from a header that may be a placeholder:

    * plain samples (PCM, float, A-/mu-law in WAV, AIFF, AU, CAF, W64, RF64, ...):
      ``frames`` is the whole frames present in the data chunk (libsndfile's count from
      the file size), which is exactly what reading gives; no decoding is needed.  The
      header's data size is a *claim* only when it is finite: the placeholders of
      :data:`PLACEHOLDER_SIZES` (0, 0xFFFFFFFF, ...: a WAV streamed by ``ffmpeg ... -f wav
      -``, SoX to a pipe) are not, and such a file is read to its end.  (A WAV whose
      placeholder is 0, which libsndfile reads as empty, is read to its end through a view
      of the header that says 0xFFFFFFFF.)
    * coded formats (FLAC, OGG, MP3, ADPCM subtypes): with ``count=True`` (default) the
      file is decoded once when it is opened, in chunks of :data:`COUNT_CHUNK` frames, to
      count its frames.  The header's figure is a claim when it is a real length (FLAC's
      total samples when not 0, OGG's last granule position, an MP3's Xing / Info / VBRI
      tag) and not when libsndfile estimates it (an MP3 without such a tag: from the file
      size and the first frame's bit rate, off by hundreds of frames either way).

    Why count up front rather than estimate and correct: ``rtamt process`` sizes its output
    files, its block plan and its progress bar from the length before it starts, and
    decides before anything is processed or written whether a file is truncated; decoding
    runs at several hundred times real time (MP3 and FLAC about 900x on one core of a
    2-vCPU VM), the models at 1 to 100x, so the extra decode costs well under 1 % of a
    model run.  A reader that needs no length up front (``rtamt loudness``, whose meter
    itself runs at hundreds of times real time) passes ``count=False``: a coded file is
    decoded once, ``frames`` is None until the end of the file is reached, and the verdict
    below is given there.

    A file that ends early is *truncated*: its header claims more frames than reading
    gives, or decoding fails part way.  That raises :class:`AudioFileError` (with the
    frames the header announces and the frames read; ``frames_read`` holds the latter),
    when the file is opened (or, with ``count=False``, at its end) - unless ``partial``:
    then the frames read are the file (``frames``), and :attr:`truncated` says what was
    missing (one line), for the caller to report.  An unreadable file (not audio, a
    truncated header) raises :class:`AudioFileError` when opened, a file without samples
    too.  NaN or infinite samples raise it when read (with the frame where they start).

    Limits of libsndfile (1.2) that no reader above it can undo: it fails on the last
    frames of a FLAC written to a pipe (total samples 0 in its header), which is therefore
    reported as damaged (``partial`` gives the frames before the failing read); and it
    stops an MP3 without a length tag at its size-based estimate, so a variable-bit-rate
    stream estimated short loses its end (a constant-bit-rate one, what an encoder writing
    to a pipe makes, is estimated long and read completely).  Use as a context manager,
    or call :meth:`close`.
    """

    def __init__(self, path, *, partial: bool = False, count: bool = True):
        import soundfile as sf  # imported here, not at start-up (docs/startup.md)

        self.path = str(path)
        self.partial = bool(partial)
        #: what was missing from a truncated file read with ``partial`` (one line), else None
        self.truncated: str | None = None
        self.pos = 0
        self._raw = None
        try:
            self._f = sf.SoundFile(self.path)
        except (sf.LibsndfileError, RuntimeError, TypeError) as e:
            if not os.path.exists(self.path):
                raise AudioFileError(f"{self.path}: no such file") from None
            if os.path.isdir(self.path):
                raise AudioFileError(f"{self.path}: is a directory, not an audio file") \
                    from None
            msg = _one_line(e).replace(f"Error opening {self.path!r}: ", "")
            if msg.startswith("File does not exist or is not a regular file"):
                msg = "no audio stream that libsndfile decodes"    # its MP3 reader's word
            raise AudioFileError(f"{self.path}: not a readable audio file ({msg}; a truncated "
                                 "header reads like this too)") from None
        try:
            self._open(count)
        except BaseException:
            self.close()
            raise

    def _open(self, count: bool) -> None:
        f = self._f
        if f.frames == 0 and f.format in ("WAV", "WAVEX"):
            self._reopen_zero_placeholder()
            f = self._f
        self.fs = float(f.samplerate)
        self.channels = int(f.channels)
        self.format = f"{f.format}/{f.subtype}"
        plain = f.subtype in _PLAIN_BYTES and f.format not in _CODED_FORMATS
        header = self._header_claim(plain)
        if plain:
            #: frames the header announces when that is a length (None: no claim)
            self.claimed = header
            self._end(int(f.frames))
        else:
            told = int(f.frames)
            trusted = told != _UNKNOWN_LENGTH and (
                f.format != "MP3" or _mp3_has_length_tag(self.path))
            self.claimed = max(header or 0, told if trusted else 0) or None
            #: the frames reading gives (None: not known before the end, ``count=False``)
            self.frames = None
            if count:
                self._count()

    # -- the channel layout ---------------------------------------------------------------
    def _layout_info(self) -> dict:
        """Read once: the file's channel mask and the layout its format gives
        (:func:`rtamt.loudness.layouts.file_layout`)."""
        info = self.__dict__.get("_layout")
        if info is not None:
            return info
        from .loudness import layouts as L

        fmt, sub = self.format.split("/")
        info = {"mask": None, "layout": None, "from": None, "problem": None}
        try:
            if fmt in ("WAV", "WAVEX", "RF64", "W64"):
                info["mask"] = _wave_channel_mask(self.path)
            elif fmt == "FLAC":
                info["mask"] = _flac_channel_mask(self.path)
            family = _opus_mapping_family(self.path) if sub == "OPUS" else None
            info["layout"], info["from"] = L.file_layout(fmt, sub, self.channels,
                                                         info["mask"], family)
        except ValueError as e:          # a mask that disagrees, a tag that is no number
            info["problem"] = f"{self.path}: {e}"
        self._layout = info
        return info

    @property
    def channel_mask(self) -> int | None:
        """The file's WAVE channel mask: ``dwChannelMask`` of a WAVE_FORMAT_EXTENSIBLE
        WAV / RF64 / W64, or a FLAC's ``WAVEFORMATEXTENSIBLE_CHANNEL_MASK`` tag; None when
        it has none (0: a mask that assigns no speaker)."""
        return self._layout_info()["mask"]

    @property
    def layout(self) -> tuple[str, ...] | None:
        """Channel names (:mod:`rtamt.loudness.layouts`) of the layout the file gives:
        its channel mask, else the order its format defines for its channel count (FLAC
        1-8, Ogg Vorbis / Opus 1-8, WAV 5 and 6 by convention; 1 mono, 2 stereo); None
        where it gives none (:attr:`layout_from` says why) or :attr:`layout_problem`."""
        return self._layout_info()["layout"]

    @property
    def layout_from(self) -> str | None:
        """Where :attr:`layout` comes from (``'the WAVE channel mask 0x63F'``,
        ``"FLAC's channel order for 8"``, ...), or why there is none."""
        return self._layout_info()["from"]

    @property
    def layout_problem(self) -> str | None:
        """Why the file's own layout cannot be used (one line naming the file): a channel
        mask naming another number of channels or unknown positions; else None."""
        return self._layout_info()["problem"]

    def _reopen_zero_placeholder(self) -> None:
        """A WAV whose data size is the placeholder 0 (libsndfile: empty) with bytes after
        the data chunk's header: reopened through a view whose size says 0xFFFFFFFF."""
        import soundfile as sf

        at = _riff_data_size_offset(self.path)
        if at is None or os.path.getsize(self.path) <= at + 4:
            return
        raw = _PatchedFile(self.path, at, b"\xff\xff\xff\xff")
        try:
            g = sf.SoundFile(raw)
        except Exception:
            raw.close()
            return
        self._f.close()
        self._f, self._raw = g, raw

    def _header_claim(self, plain: bool) -> int | None:
        """Frames the header of a WAV/AIFF announces when libsndfile found fewer bytes
        (its header log says ``data : N (should be M)``) and ``N`` is a length, not a
        placeholder (:data:`PLACEHOLDER_SIZES`); else None."""
        try:
            info = self._f.extra_info
        except Exception:        # pragma: no cover - libsndfile without a log
            return None
        m = re.search(r"^\s*(?:data|SSND)\s*:\s*(\d+)\s*\(should be (\d+)\)", info, re.M)
        if m is None:
            return None
        claimed, present = int(m.group(1)), int(m.group(2))
        if claimed in PLACEHOLDER_SIZES or claimed <= present:
            return None
        frames = int(self._f.frames)
        if plain:             # frames + the whole frames of the missing bytes
            return frames + (claimed - present) // (_PLAIN_BYTES[self._f.subtype]
                                                    * int(self._f.channels))
        return frames * claimed // present if present else None

    def _count(self) -> None:
        """Decode the file once to count its frames (``frames``), then rewind."""
        buf = np.empty((COUNT_CHUNK, self.channels), dtype=np.float32)
        n, err = 0, None
        try:
            while True:
                k = self._f.read(out=buf).shape[0]
                if k == 0:
                    break
                n += k
        except Exception as e:   # libsndfile decoding errors (a damaged FLAC/OGG)
            err = e
        try:
            self._end(n, err)
        finally:
            self._rewind()

    def _rewind(self) -> None:
        """Back to frame 0 (reopened when libsndfile cannot seek after a decoding error)."""
        import soundfile as sf

        try:
            self._f.seek(0)
        except Exception:
            self._f.close()
            if self._raw is not None:
                self._raw.seek(0)
            self._f = sf.SoundFile(self.path if self._raw is None else self._raw)
        self.pos = 0

    def _end(self, got: int, err: BaseException | None = None) -> None:
        """The length is known: ``got`` frames could be read (``err``: why reading stopped
        early).  A claim of more frames, or ``err``, is a truncation: raised, or kept in
        :attr:`truncated` when ``partial``."""
        self.frames = got
        if err is not None:
            msg = (f"{self.path}: damaged or truncated: reading failed after {got} frames "
                   f"({_one_line(err)})")
        elif self.claimed is not None and got < self.claimed:
            msg = (f"{self.path}: truncated: its header announces {self.claimed} frames, "
                   f"only {got} could be read")
        else:
            msg = None
        if got == 0:
            raise AudioFileError(msg or f"{self.path}: the file has no samples",
                                 frames_read=None if msg is None else 0)
        if msg is None:
            return
        if not self.partial:
            raise AudioFileError(msg, frames_read=got)
        self.truncated = msg

    def read(self, n: int) -> np.ndarray:
        """The next ``n`` frames (fewer at the end of the file) as float64
        ``(channels, n)``; ``(channels, 0)`` at the end."""
        n = int(n)
        if self.frames is not None:
            n = min(n, self.frames - self.pos)
        if n <= 0:
            return np.zeros((self.channels, 0))
        try:
            d = self._f.read(n, dtype="float64", always_2d=True)
        except Exception as e:   # libsndfile decoding errors (a damaged FLAC/OGG)
            if self.frames is None:                   # count=False: the end, early
                self._end(self.pos, e)
                return np.zeros((self.channels, 0))
            raise AudioFileError(f"{self.path}: damaged or truncated: reading failed after "
                                 f"{self.pos} of {self.frames} frames ({_one_line(e)})",
                                 frames_read=self.pos) from None
        if d.shape[0] < n:
            got = self.pos + d.shape[0]
            if self.frames is None:                   # count=False: the end
                self._end(got)
            else:                                     # the file changed since it was opened
                raise AudioFileError(f"{self.path}: truncated: {got} of the {self.frames} "
                                     "frames counted when it was opened could be read",
                                     frames_read=got)
        bad = ~np.isfinite(d)
        if bad.any():
            raise AudioFileError(f"{self.path}: the file contains NaN or Inf samples (from "
                                 f"frame {self.pos + int(np.argmax(bad.any(axis=1)))})")
        self.pos += d.shape[0]
        return np.ascontiguousarray(d.T)

    def seek(self, frame: int) -> None:
        """Continue reading at ``frame`` (0 <= frame <= ``frames``; a reader whose length is
        known)."""
        frame = int(frame)
        if self.frames is None or not 0 <= frame <= self.frames:
            raise ValueError(f"{self.path}: cannot seek to frame {frame} (the file has "
                             f"{self.frames} frames)")
        self._f.seek(frame)
        self.pos = frame

    def close(self) -> None:
        f = self.__dict__.pop("_f", None)
        if f is not None:
            f.close()
        raw = self.__dict__.pop("_raw", None)
        if raw is not None:
            raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def read_audio(path, *, partial: bool = False) -> tuple[float, np.ndarray]:
    """Read a whole audio file (see :class:`AudioReader` for the formats, the length and
    the errors; ``partial``: a truncated file gives the frames that could be read): its
    sample rate (Hz) and float64 ``(channels, T)``.  Decodes the file once."""
    with AudioReader(path, partial=partial, count=False) as r:
        if r.frames is not None:
            return r.fs, r.read(r.frames)
        parts = []
        while True:
            p = r.read(1 << 20)
            if p.shape[-1] == 0:
                break
            parts.append(p)
    return r.fs, np.concatenate(parts, axis=-1)


def read_wav(path) -> tuple[float, np.ndarray]:
    """:func:`read_audio` under its earlier name (every format libsndfile reads, not only
    WAV): sample rate (Hz) and float64 ``(channels, T)``."""
    return read_audio(path)
