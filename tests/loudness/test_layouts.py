"""Channel layouts and BS.1770 channel weights (rtamt/loudness/layouts.py, the meter's
``layout=`` / ``weights=``, :class:`rtamt.signals.AudioReader`'s channel mask):

* the position rule of BS.1770-5 Annex 3 (1.41 for elevation < 30 degrees and azimuth
  60..120 degrees, 1.0 elsewhere, LFE 0) at its edges, and Table 3 from it;
* WAVE channel masks: the back pair of 5.1 / quad and the side pair of 5.1 "surround" are
  the +-110 degree surrounds (1.41); in 7.1 the side pair takes 1.41, the back pair 1.0;
  unknown bits are refused;
* names: aliases, BS.2051 labels, WAVE names, duplicates refused;
* the meter on 7.1, quad, film-order 5.1 and 7.1.4 programme against libebur128 (pyebur128)
  with its BS.2051 channel map and against the standard's formula on K-weighted noise
  (BS.1770-4 Table 1 / 2 coefficients typed here, not rtamt's design);
* a channel count without a conventional layout (8, 3, 4, ...) is refused naming the
  choices, never weighted 1.0; the defaults of 1, 2, 5, 6 channels are those of before;
* snapshots saved by the meter before this module (commit 73ae6e5) load and continue
  bit-exactly;
* the reader's mask and format orders: WAVE_FORMAT_EXTENSIBLE written here byte by byte,
  RF64 / W64 / FLAC from libsndfile, FLAC's mask tag and Ogg Vorbis from FFmpeg.
"""
from __future__ import annotations

import gzip
import pickle
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rtamt.loudness import layouts as L
from rtamt.loudness.bs1770 import LoudnessMeter, Params
from rtamt.signals import AudioReader

from _layouts import FS, libebur128_lufs, noise, standard_lufs, wavex

DATA = Path(__file__).resolve().parents[1] / "data"


def meter_lufs(x, **kw):
    m = LoudnessMeter(fs=FS, channels=x.shape[0], **kw)
    for i in range(0, x.shape[1], 48000):
        m(x[:, i:i + 48000])
    return m.integrated


# (layout, the standard's weights typed here, libebur128 channel map, channel levels dB)
CASES = {
    "7.1": ((1, 1, 1, 0, 1, 1, 1.41, 1.41),
            ("LEFT", "RIGHT", "CENTER", "UNUSED", "M_PLUS_135", "M_MINUS_135", "M_PLUS_090",
             "M_MINUS_090"),
            (-30, -31, -29, -12, -20, -21, -22, -19)),
    "quad": ((1, 1, 1.41, 1.41), ("LEFT", "RIGHT", "LEFT_SURROUND", "RIGHT_SURROUND"),
             (-30, -28, -20, -22)),
    "5.1(film)": ((1, 1, 1, 1.41, 1.41, 0),
                  ("LEFT", "CENTER", "RIGHT", "LEFT_SURROUND", "RIGHT_SURROUND", "UNUSED"),
                  (-30, -26, -31, -20, -21, -10)),
    "7.1.4": ((1, 1, 1, 0, 1, 1, 1.41, 1.41, 1, 1, 1, 1),
              ("LEFT", "RIGHT", "CENTER", "UNUSED", "M_PLUS_135", "M_MINUS_135",
               "M_PLUS_090", "M_MINUS_090", "U_PLUS_045", "U_MINUS_045", "U_PLUS_135",
               "U_MINUS_135"),
              (-30, -31, -29, -12, -20, -21, -22, -19, -24, -25, -18, -17)),
    "4+7+0": ((1, 1, 1, 0, 1.41, 1.41, 1, 1, 1, 1, 1, 1),
              ("LEFT", "RIGHT", "CENTER", "UNUSED", "M_PLUS_090", "M_MINUS_090",
               "M_PLUS_135", "M_MINUS_135", "U_PLUS_045", "U_MINUS_045", "U_PLUS_135",
               "U_MINUS_135"),
              (-30, -31, -29, -12, -20, -21, -22, -19, -24, -25, -18, -17)),
}


# ---------------------------------------------------------------- the rule
def test_position_rule_at_its_edges():
    w = L.position_weight
    assert w(60) == w(-60) == w(90) == w(120) == w(-120) == w(110, 29.9) == 1.41
    assert w(59.9) == w(120.1) == w(0) == w(30) == w(135) == w(180) == w(-150) == 1.0
    assert w(90, 30) == w(90, -30) == w(110, 45) == 1.0         # upper / bottom layers
    assert w(90 + 360) == w(-270) == 1.41                        # any turn
    # BS.1770 Table 3 follows from the BS.775 positions
    assert L.weights_of(("L", "R", "C", "Ls", "Rs", "LFE")) == (1, 1, 1, 1.41, 1.41, 0)


@pytest.mark.parametrize("mask, names", [
    (0x3F, ("L", "R", "C", "LFE", "Ls", "Rs")),          # 5.1: back pair = +-110
    (0x60F, ("L", "R", "C", "LFE", "Ls", "Rs")),         # 5.1 "surround": side pair
    (0x33, ("L", "R", "Ls", "Rs")),                       # quad
    (0x63F, ("L", "R", "C", "LFE", "Lrs", "Rrs", "Lss", "Rss")),     # 7.1
    (0xFF, ("L", "R", "C", "LFE", "Ls", "Rs", "Lc", "Rc")),          # 7.1 wide
    (0x2D63F, ("L", "R", "C", "LFE", "Lrs", "Rrs", "Lss", "Rss", "Ltf", "Rtf", "Ltb", "Rtb")),
    (0x4, ("C",)),
])
def test_wave_masks(mask, names):
    assert L.mask_names(mask) == names


def test_wave_mask_weights_of_the_surround_pairs():
    """5.1's back pair and 7.1's side pair weigh 1.41; 7.1's back pair 1.0."""
    assert L.weights_of(L.mask_names(0x3F))[4:] == (1.41, 1.41)
    w = L.weights_of(L.mask_names(0x63F))
    assert w[4:6] == (1.0, 1.0) and w[6:] == (1.41, 1.41) and w[3] == 0.0
    with pytest.raises(L.LayoutError, match="0x80000000"):
        L.mask_names(0x80000003)


def test_names_aliases_labels_and_duplicates():
    assert L.names(["FL", "fr", "M+000", "lfe1", "m+110", "M-110"]) == L.LAYOUTS["5.1"]
    assert L.names(["L", "R", "BL", "BR"]) == ("L", "R", "Ls", "Rs")
    assert L.names(["L", "R", "BL", "BR", "SL", "SR"]) == ("L", "R", "Lrs", "Rrs", "Lss",
                                                           "Rss")
    assert L.parse_names("Lb Rb, Ltr,Rtr") == ("Lrs", "Rrs", "Ltb", "Rtb")
    assert L.speaker("U+030").elevation == 30 and L.speaker("U+030").weight == 1.0
    assert L.speaker("M+060").weight == 1.41 and L.speaker("B+000").name == "Bfc"
    with pytest.raises(L.LayoutError, match="named twice"):
        L.names(["L", "R", "FL"])
    with pytest.raises(L.LayoutError, match="unknown channel name 'Q'"):
        L.names(["L", "Q"])
    assert L.layout_names("5.1(FILM)") == ("L", "C", "R", "Ls", "Rs", "LFE")
    with pytest.raises(L.LayoutError, match="unknown layout"):
        L.layout_names("7.2")


# ---------------------------------------------------------------- the meter
@pytest.mark.parametrize("layout", sorted(CASES))
def test_meter_layouts_against_libebur128_and_the_formula(layout):
    """The meter with ``layout=NAME`` reads what libebur128 reads with the BS.2051 channel
    map, and the standard's formula with the weights typed in CASES."""
    weights, kinds, levels = CASES[layout]
    x = noise(levels, seed=len(layout))
    got = meter_lufs(x, layout=layout)
    assert got == pytest.approx(libebur128_lufs(x, kinds), abs=1e-6)
    assert got == pytest.approx(standard_lufs(x, weights), abs=0.01)
    assert LoudnessMeter(fs=FS, channels=len(weights), layout=layout).params.weights == \
        pytest.approx(weights)
    # 1.0 per channel (what an 8-channel file got before) would be far off here
    assert abs(standard_lufs(x, np.ones(len(weights))) - got) > 0.3


def test_counts_without_a_conventional_layout_are_refused():
    """8 channels without a layout: refused naming 7.1 and the others, never 1.0 each; 3
    and 4 too; 1, 2, 5, 6 keep their defaults (mono, stereo, L R C Ls Rs, L R C LFE Ls Rs)."""
    for n, named in ((8, "7.1 (L R C LFE Lrs Rrs Lss Rss)"), (3, "3.0 (L R C)"),
                     (4, "quad (L R Ls Rs)"), (12, "7.1.4 (")):
        with pytest.raises(ValueError, match="layout must be known") as e:
            LoudnessMeter(fs=FS, channels=n)
        assert named in str(e.value) and "weights=" in str(e.value)
    assert Params(channels=1).weights == (1.0,) and Params(channels=2).weights == (1.0, 1.0)
    assert Params(channels=5).weights == (1.0, 1.0, 1.0, 1.41, 1.41)
    assert Params(channels=6).weights == (1.0, 1.0, 1.0, 0.0, 1.41, 1.41)
    assert LoudnessMeter(fs=FS, channels=8, weights=(1,) * 8).channel_names is None
    assert LoudnessMeter(fs=FS, channels=6).channel_names == L.LAYOUTS["5.1"]
    with pytest.raises(ValueError, match="every channel weight is 0"):
        Params(channels=2, weights=(0, 0))
    with pytest.raises(ValueError, match="has 8 channels"):
        Params(channels=6, layout="7.1")


def test_snapshots_of_the_meter_before_layouts_load_and_continue():
    """States saved by the meter of commit 73ae6e5 (stereo, 6 channels by default and with
    layout='5.1', 5 channels; tests/data/PROVENANCE.md) load into today's meter with that
    meter's true peak (``truepeak='bs1770'``, the Annex 2 filter every meter had before issue
    39) and continue with the values that meter computed, bit for bit; the default meter
    (``truepeak='sinc'``) refuses them, naming the option."""
    d = pickle.loads(gzip.decompress((DATA / "bs1770_v2_states.pkl.gz").read_bytes()))
    rng = np.random.default_rng(d["seed"])
    for case in d["cases"]:
        ch = case["channels"]
        x = 0.1 * rng.standard_normal((ch, 4 * FS))
        x[:, FS:FS + FS // 2] *= 0.1
        with pytest.raises(ValueError, match="truepeak='bs1770'"):
            LoudnessMeter(fs=FS, channels=ch, mode="exact",
                          **case["kwargs"]).load_state_dict(case["state"])
        m = LoudnessMeter(fs=FS, channels=ch, mode="exact", truepeak="bs1770",
                          **case["kwargs"])
        m.load_state_dict(case["state"])
        r = m(x[:, d["split"]:])
        a = case["after"]
        np.testing.assert_array_equal(r.step_momentary, a["step_momentary"])
        np.testing.assert_array_equal(r.step_short_term, a["step_short_term"])
        assert r.integrated == a["integrated"] and r.true_peak == a["true_peak"]


# ---------------------------------------------------------------- the reader
def test_reader_reads_the_wave_channel_mask(tmp_path):
    x = noise([-30] * 8, seconds=0.5)
    with AudioReader(wavex(tmp_path / "m.wav", x, 0x63F)) as r:
        assert r.channel_mask == 0x63F and r.layout == L.LAYOUTS["7.1"]
        assert r.layout_from == "the WAVE channel mask 0x63F" and r.layout_problem is None
        np.testing.assert_allclose(r.read(r.frames), x.astype(np.float32), rtol=0)
    with AudioReader(wavex(tmp_path / "bad.wav", x, 0x3F)) as r:     # 6 bits, 8 channels
        assert r.layout is None and "0x3F names 6 channel(s)" in r.layout_problem
        assert str(tmp_path / "bad.wav") in r.layout_problem
    sf.write(str(tmp_path / "plain.wav"), x.T, FS, subtype="FLOAT")    # WAVE_FORMAT_FLOAT
    with AudioReader(tmp_path / "plain.wav") as r:
        assert r.channel_mask is None and r.layout is None and r.layout_from == "no channel mask"
    sf.write(str(tmp_path / "six.wav"), x[:6].T, FS, subtype="FLOAT")
    with AudioReader(tmp_path / "six.wav") as r:
        assert r.layout == L.LAYOUTS["5.1"] and "WAVE order for 6" in r.layout_from


@pytest.mark.parametrize("fmt, ext", [("RF64", "rf64"), ("W64", "w64"), ("WAVEX", "wav")])
def test_reader_reads_libsndfile_containers(tmp_path, fmt, ext):
    """libsndfile writes a WAVE_FORMAT_EXTENSIBLE mask in RF64 and WAVEX files (6 channels:
    0x3F) and none in Wave64: the first two are read from the mask, Wave64 by the 6-channel
    convention, all as 5.1."""
    p = str(tmp_path / f"six.{ext}")
    sf.write(p, np.zeros((4800, 6)), FS, format=fmt, subtype="PCM_16")
    with AudioReader(p) as r:
        assert r.layout == L.LAYOUTS["5.1"]
        assert r.channel_mask == (None if fmt == "W64" else 0x3F)


def test_reader_flac_order_and_mask_tag(tmp_path):
    """An 8-channel FLAC without a mask tag is 7.1 (FLAC's channel order); FFmpeg's
    WAVEFORMATEXTENSIBLE_CHANNEL_MASK tag gives another layout; Ogg Vorbis is read in the
    Vorbis order (5.1 = L C R Ls Rs LFE)."""
    p = str(tmp_path / "eight.flac")
    sf.write(p, np.zeros((4800, 8)), FS, subtype="PCM_16")
    with AudioReader(p) as r:
        assert r.channel_mask is None and r.layout == L.LAYOUTS["7.1"]
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("ffmpeg is not installed")
    q = str(tmp_path / "quad.flac")
    sf.write(str(tmp_path / "q.wav"), np.zeros((4800, 4)), FS, subtype="PCM_16")
    subprocess.run([ffmpeg, "-v", "error", "-y", "-i", str(tmp_path / "q.wav"), "-metadata",
                    "WAVEFORMATEXTENSIBLE_CHANNEL_MASK=0x107", q], check=True)
    with AudioReader(q) as r:                       # FL FR FC BC: L R C Cs (FFmpeg's 4.0)
        assert r.channel_mask == 0x107 and r.layout == L.LAYOUTS["4.0"]
    o = str(tmp_path / "six.ogg")
    sf.write(str(tmp_path / "s.wav"), 0.1 * noise([0] * 6, 0.5).T, FS, subtype="FLOAT")
    subprocess.run([ffmpeg, "-v", "error", "-y", "-i", str(tmp_path / "s.wav"), "-c:a",
                    "libvorbis", o], check=True)
    with AudioReader(o) as r:
        assert r.layout == L.LAYOUTS["5.1(film)"] and "Vorbis" in r.layout_from
