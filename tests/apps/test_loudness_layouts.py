"""``rtamt loudness`` and ``rtamt meter`` on multichannel files (issue 39, item 1): every
layout weighted after BS.1770, from the file's channel mask or an option, or refused.

* 7.1, quad, film-order 5.1 and 7.1.4 WAV files, with a WAVE_FORMAT_EXTENSIBLE channel mask
  (written byte by byte, tests/support/_layouts.py, and by FFmpeg) and without one (with
  ``--layout`` / ``--channels``), read what the standard's formula gives with the weights
  typed in tests/loudness/test_layouts.py::CASES (and libebur128 with its BS.2051 map);
* an 8-channel WAV without a mask or option is refused (exit 1, one stderr line naming
  the layouts to choose from and the options); a mask that disagrees with the channel count
  too, unless an option says the layout (the option wins); ``--weights`` measures the 5.1
  of a 5.1 + stereo file;
* FFmpeg's ``ebur128`` filter agrees where its weighting is the standard's (5.1, quad) and
  reads the 7.1 back pair at 1.41 where BS.1770-5 says 1.0: it equals rtamt with those
  weights, and differs from rtamt's 7.1 by what the formula predicts;
* ``rtamt meter`` takes the same files and options (any channel count) and reads the same
  integrated loudness.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from rtamt.loudness.layouts import LAYOUTS
from rtamt_apps.cli import main

from _layouts import FS, libebur128_lufs, noise, standard_lufs, wavex

#: the CLI's figures are rounded to 0.01
TOL = 0.0051
# (mask, the standard's weights, libebur128 map, levels dB) for the layouts under test
SEVEN_ONE = (0x63F, (1, 1, 1, 0, 1, 1, 1.41, 1.41),
             ("LEFT", "RIGHT", "CENTER", "UNUSED", "M_PLUS_135", "M_MINUS_135",
              "M_PLUS_090", "M_MINUS_090"), (-30, -31, -29, -12, -20, -21, -22, -19))
QUAD = (0x33, (1, 1, 1.41, 1.41), ("LEFT", "RIGHT", "LEFT_SURROUND", "RIGHT_SURROUND"),
        (-30, -28, -20, -22))
FIVE_ONE = (0x3F, (1, 1, 1, 0, 1.41, 1.41),
            ("LEFT", "RIGHT", "CENTER", "UNUSED", "LEFT_SURROUND", "RIGHT_SURROUND"),
            (-30, -28, -29, -10, -20, -22))
SEVEN_ONE_FOUR = (0x2D63F, (1, 1, 1, 0, 1, 1, 1.41, 1.41, 1, 1, 1, 1),
                  ("LEFT", "RIGHT", "CENTER", "UNUSED", "M_PLUS_135", "M_MINUS_135",
                   "M_PLUS_090", "M_MINUS_090", "U_PLUS_045", "U_MINUS_045", "U_PLUS_135",
                   "U_MINUS_135"), (-30, -31, -29, -12, -20, -21, -22, -19, -24, -25, -18, -17))


def _files(tmp_path, name, case, seed):
    """The programme of ``case`` as a WAV with its mask and as a plain WAV (no mask), and
    the loudness the standard gives it: libebur128's with the BS.2051 channel map, which is
    the formula with the weights of ``case`` (within 0.02 LU: the formula takes the plain
    mean square, the meter the gated blocks)."""
    mask, weights, kinds, levels = case
    x = noise(levels, seed=seed).astype(np.float32).astype(np.float64)
    masked = wavex(tmp_path / f"{name}_mask.wav", x, mask)
    plain = str(tmp_path / f"{name}_plain.wav")
    sf.write(plain, x.T, FS, subtype="FLOAT")
    expect = libebur128_lufs(x, kinds)
    assert expect == pytest.approx(standard_lufs(x, weights), abs=0.02)
    return masked, plain, expect, x


def _json(capsys, *argv):
    """``rtamt loudness --json ARGV`` in-process: (exit code, records, stderr)."""
    capsys.readouterr()
    rc = main(["loudness", "--json", *argv])
    out, err = capsys.readouterr()
    return rc, [json.loads(ln) for ln in out.strip().splitlines()], err


def _lufs(capsys, *argv):
    rc, recs, err = _json(capsys, *argv)
    assert rc == 0, err
    return recs[0]


@pytest.mark.parametrize("name, case, layout", [
    ("7.1", SEVEN_ONE, "7.1"), ("quad", QUAD, "quad"), ("7.1.4", SEVEN_ONE_FOUR, "7.1.4")])
def test_masked_and_unmasked_files(tmp_path, capsys, name, case, layout):
    """With its channel mask the file reads the standard's value without any option;
    without a mask it is refused (no layout is the convention for 4, 8, 12 channels), and
    reads the same with --layout NAME or --channels NAMES."""
    masked, plain, expect, _ = _files(tmp_path, name.replace(".", ""), case, seed=len(name))
    rec = _lufs(capsys, masked)
    assert rec["integrated_lufs"] == pytest.approx(expect, abs=TOL)
    assert rec["layout"] == layout and rec["layout_from"] == f"the WAVE channel mask " \
        f"0x{case[0]:X}" and rec["channel_weights"] == list(case[1])
    rc, recs, err = _json(capsys, plain)
    assert rc == 1 and "error" in recs[0] and "--layout" in err and "no channel mask" in err
    assert _lufs(capsys, "--layout", layout, plain)["integrated_lufs"] == \
        rec["integrated_lufs"]
    assert _lufs(capsys, "--channels", ",".join(LAYOUTS[layout]), plain)[
        "integrated_lufs"] == rec["integrated_lufs"]


def test_film_order_five_one(tmp_path, capsys):
    """Film order L C R Ls Rs LFE (no WAVE mask can say it): --layout 5.1(film) and
    --channels L,C,R,Ls,Rs,LFE read the standard's value; without an option a 6-channel WAV
    is read in the WAVE order L R C LFE Ls Rs (documented default), and the record says so."""
    weights = (1, 1, 1, 1.41, 1.41, 0)
    x = noise((-30, -26, -31, -20, -21, -10), seed=5)
    p = str(tmp_path / "film.wav")
    sf.write(p, x.T, FS, subtype="FLOAT")
    x = sf.read(p, always_2d=True)[0].T
    expect = libebur128_lufs(x, ("LEFT", "CENTER", "RIGHT", "LEFT_SURROUND",
                                 "RIGHT_SURROUND", "UNUSED"))
    assert expect == pytest.approx(standard_lufs(x, weights), abs=0.02)
    film = _lufs(capsys, "--layout", "5.1(film)", p)
    assert film["integrated_lufs"] == pytest.approx(expect, abs=TOL)
    assert film["layout"] == "5.1(film)" and film["channel_weights"] == list(weights)
    assert _lufs(capsys, "--channels", "L,C,R,Ls,Rs,LFE", p)["integrated_lufs"] == \
        film["integrated_lufs"]
    smpte = _lufs(capsys, p)
    assert smpte["layout"] == "5.1" and "WAVE order for 6" in smpte["layout_from"]
    assert smpte["integrated_lufs"] == pytest.approx(libebur128_lufs(x, FIVE_ONE[2]),
                                                     abs=TOL)
    assert abs(smpte["integrated_lufs"] - film["integrated_lufs"]) > 1.0


def test_eight_channels_without_a_mask_are_refused(tmp_path):
    """A real subprocess: exit 1, the file's row failed, one line naming the choices and
    the options; nothing is weighted 1.0 per channel."""
    x = noise(SEVEN_ONE[3], seconds=2.0)
    p = str(tmp_path / "eight.wav")
    sf.write(p, x.T, FS, subtype="FLOAT")
    r = subprocess.run([sys.executable, "-m", "rtamt_apps", "loudness", "--json", p],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    rec = json.loads(r.stdout)
    assert set(rec) == {"file", "status", "error"} and rec["status"] == "failed"
    line = [ln for ln in r.stderr.splitlines() if "eight.wav" in ln]
    assert len(line) == 1
    for words in ("8 channels and no channel mask", "7.1 (L R C LFE Lrs Rrs Lss Rss)",
                  "0+7+0 (L R C LFE Lss Rss Lrs Rrs)", "--layout NAME", "--channels NAME",
                  "--weights", "5.1 + stereo"):
        assert words in line[0], words


def test_a_mask_that_disagrees_is_refused_unless_an_option_says(tmp_path, capsys):
    x = noise(SEVEN_ONE[3], seconds=3.0)
    p = wavex(tmp_path / "bad.wav", x, 0x3F)              # a 5.1 mask on 8 channels
    rc, recs, err = _json(capsys, p)
    assert rc == 1 and "0x3F names 6 channel(s)" in err and "the file has 8" in err
    rec = _lufs(capsys, "--layout", "7.1", p)
    x = x.astype(np.float32).astype(np.float64)       # as stored
    assert rec["integrated_lufs"] == pytest.approx(libebur128_lufs(x, SEVEN_ONE[2]), abs=TOL)
    assert rec["layout_from"] == "given: --layout"


def test_weights_measure_the_five_one_of_five_one_plus_stereo(tmp_path, capsys):
    x = noise((-30, -28, -29, -10, -20, -22, -15, -15), seconds=3.0)
    p = str(tmp_path / "51_20.wav")
    sf.write(p, x.T, FS, subtype="FLOAT")
    rec = _lufs(capsys, "--weights", "1,1,1,0,1.41,1.41,0,0", p)
    x = sf.read(p, always_2d=True)[0].T
    assert rec["integrated_lufs"] == pytest.approx(libebur128_lufs(x[:6], FIVE_ONE[2]),
                                                   abs=TOL)
    assert rec["layout"] == "weights"


# ---------------------------------------------------------------- FFmpeg
def _ffmpeg_lufs(ffmpeg, path, *pre):
    r = subprocess.run([ffmpeg, "-hide_banner", "-nostats", *pre, "-i", path, "-af",
                        "ebur128", "-f", "null", "-"], capture_output=True, text=True,
                       check=True, timeout=300)
    return float(re.findall(r"I:\s+(-?\d+\.\d) LUFS", r.stderr)[-1])


def test_ffmpeg_ebur128_cross_check(tmp_path, capsys):
    """FFmpeg writes a 7.1 WAV with mask 0x63F that rtamt reads as 7.1.  Its ebur128
    filter weighs every back and side channel 1.41: on 5.1 and quad (and on 7.1 with those
    weights) it agrees with rtamt within its 0.1 LU display; on 7.1 it reads the back pair
    louder than BS.1770-5, by what the standard's formula predicts."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("ffmpeg is not installed")
    for name, case in (("51", FIVE_ONE), ("quad", QUAD)):
        masked, _, expect, _ = _files(tmp_path, name, case, seed=3)
        assert _ffmpeg_lufs(ffmpeg, masked) == pytest.approx(
            _lufs(capsys, masked)["integrated_lufs"], abs=0.051)
    _, plain, expect, x = _files(tmp_path, "71", SEVEN_ONE, seed=4)
    by_ffmpeg = str(tmp_path / "71_ffmpeg.wav")        # FFmpeg's own WAVE_FORMAT_EXTENSIBLE
    subprocess.run([ffmpeg, "-v", "error", "-y", "-channel_layout", "7.1", "-i", plain,
                    "-c:a", "pcm_f32le", by_ffmpeg], check=True, timeout=300)
    rec = _lufs(capsys, by_ffmpeg)
    assert rec["layout"] == "7.1" and rec["layout_from"] == "the WAVE channel mask 0x63F"
    assert rec["integrated_lufs"] == pytest.approx(expect, abs=TOL)
    theirs = _ffmpeg_lufs(ffmpeg, by_ffmpeg)
    back_141 = _lufs(capsys, "--weights", "1,1,1,0,1.41,1.41,1.41,1.41", by_ffmpeg)
    assert theirs == pytest.approx(back_141["integrated_lufs"], abs=0.051)
    predicted = standard_lufs(x, (1, 1, 1, 0, 1.41, 1.41, 1.41, 1.41)) - \
        standard_lufs(x, SEVEN_ONE[1])
    assert predicted > 0.3
    assert theirs - rec["integrated_lufs"] == pytest.approx(predicted, abs=0.06)


# ---------------------------------------------------------------- the live meter
def _meter(capsys, *argv):
    capsys.readouterr()
    rc = main(["meter", "--fast", "--json", *argv])
    out, err = capsys.readouterr()
    return rc, [json.loads(ln) for ln in out.strip().splitlines() if ln.startswith("{")], err


def test_live_meter_takes_every_layout(tmp_path, capsys):
    """The 7.1 file with its mask, and the plain one with --layout 7.1 / --channels: the
    live meter's integrated loudness is the file's; the plain one without an option is
    refused (exit 2) naming the choices; the demo takes --channels NAMES."""
    masked, plain, expect, _ = _files(tmp_path, "71", SEVEN_ONE, seed=6)
    for argv in (["--input", masked], ["--input", plain, "--layout", "7.1"],
                 ["--input", plain, "--channels", "FL,FR,FC,LFE,BL,BR,SL,SR"]):
        rc, recs, err = _meter(capsys, *argv)
        assert rc == 0, err
        assert recs[-1]["lufs_integrated"] == pytest.approx(expect, abs=TOL)
        assert "stl_sone" not in recs[-1]            # no loudness model by default
    rc, recs, err = _meter(capsys, "--input", plain)
    assert rc == 2 and recs == [] and "7.1 (L R C LFE Lrs Rrs Lss Rss)" in err
    rc, recs, err = _meter(capsys, "--input", "demo", "--channels", "L,R,C,LFE,Ls,Rs",
                           "--seconds", "1")
    assert rc == 0, err
    # the demo on identical channels: its mono loudness + 10 log10 of the weights' sum
    # (1 + 1 + 1 + 0 + 1.41 + 1.41 = 5.82)
    rc2, mono, err = _meter(capsys, "--input", "demo", "--channels", "1", "--seconds", "1")
    assert rc2 == 0, err
    assert recs[3]["lufs_momentary"] - mono[3]["lufs_momentary"] == pytest.approx(
        10 * np.log10(5.82), abs=0.01)
