"""Test helpers for channel layouts (tests/loudness/test_layouts.py,
tests/apps/test_loudness_layouts.py): WAVE_FORMAT_EXTENSIBLE files written byte by byte,
per-channel noise, and the expected loudness from the standard's formula and from
libebur128 (pyebur128) with a BS.2051 channel map."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import scipy.signal as sps

FS = 48000

# BS.1770-4 Annex 1, Tables 1 and 2: the K-weighting filter at 48 kHz (b0 b1 b2, a1 a2)
_PRE = ([1.53512485958697, -2.69169618940638, 1.19839281085285],
        [1.0, -1.69065929318241, 0.73248077421585])
_RLB = ([1.0, -2.0, 1.0], [1.0, -1.99004745483398, 0.99007225036621])


def wavex(path, x, mask, fs=FS):
    """Write ``x`` ((C, T) float) as a 32-bit float WAVE_FORMAT_EXTENSIBLE file with
    ``dwChannelMask`` = ``mask`` (Microsoft WAVEFORMATEXTENSIBLE: WAVEFORMATEX with
    wFormatTag 0xFFFE, cbSize 22, then wValidBitsPerSample, dwChannelMask, SubFormat
    KSDATAFORMAT_SUBTYPE_IEEE_FLOAT), a ``fact`` chunk and the interleaved samples."""
    C = x.shape[0]
    data = np.ascontiguousarray(x.T, dtype="<f4").tobytes()
    guid = bytes.fromhex("0300000000001000800000aa00389b71")
    fmt = struct.pack("<HHIIHHHHI16s", 0xFFFE, C, fs, fs * 4 * C, 4 * C, 32, 22, 32, mask,
                      guid)
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"fact" + struct.pack("<II", 4, x.shape[1])
            + b"data" + struct.pack("<I", len(data)) + data)
    Path(path).write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return str(path)


def noise(levels_db, seconds=6.0, seed=0):
    """Independent white noise per channel at the given RMS levels (dB re 1.0), (C, T)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((len(levels_db), int(seconds * FS)))
    return x * 10 ** (np.asarray(levels_db, float)[:, None] / 20)


def standard_lufs(x, weights):
    """BS.1770 loudness of stationary ``x`` from the standard's formula: K-weight each
    channel with the Table 1 / 2 filters, mean square ``z_i`` over the whole signal,
    ``-0.691 + 10 log10(sum G_i z_i)`` (every 400 ms block of stationary noise passes the
    gates, so the gated value is this within a few 0.001 LU)."""
    y = sps.lfilter(*_RLB, sps.lfilter(*_PRE, x, axis=-1), axis=-1)
    z = np.mean(y[:, FS:] ** 2, axis=-1)               # after the filters' start
    return -0.691 + 10 * np.log10(np.dot(weights, z))


def libebur128_lufs(x, channel_types):
    """Integrated loudness of ``x`` by libebur128 (pyebur128) with its channel map set."""
    pe = pytest.importorskip("pyebur128")
    st = pe.R128State(x.shape[0], FS, pe.MeasurementMode.MODE_I)
    for c, kind in enumerate(channel_types):
        st.set_channel(c, getattr(pe.ChannelType, kind))
    xi = np.ascontiguousarray(x.T)
    st.add_frames(xi.ravel(), xi.shape[0])
    return pe.get_loudness_global(st)
