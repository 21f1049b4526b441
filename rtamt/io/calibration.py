"""Calibration files: reading, writing and measuring them (outside the library core).

``rtamt calibrate`` measures a reference tone (e.g. a sound calibrator: 94 dB SPL at
1 kHz) and stores ``spl_ref = L_ref - 20 log10(rms)`` (the dB SPL of a digital RMS of 1.0)
in a small JSON file, by default ``$RTAMT_CALIBRATION`` or
``~/.config/rtamt/calibration.json``; the meter and the monitor read it
(``--calibration FILE``) and hand the ``spl_ref`` to a model, whose calibration stage
(:class:`rtamt.ear.calibration.InputCalibration`, ``model.stages[0]``) applies it.
:func:`save` refuses a calibration that :func:`load` would refuse, and replaces the file
atomically (a temporary file beside it, fsync, rename): whatever fails, the old file is
left as it was.  Every failure (missing or invalid file, clipped or absent tone, wrong
frequency, unstable level, wrong sample rate) raises :class:`CalibrationError` with the
reason.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import pathlib

import numpy as np

from .atomic import write_text_atomic

__all__ = ["Calibration", "CalibrationError", "REFERENCE_DB_RANGE", "SPL_REF_RANGE",
           "default_path", "load", "save", "measure_tone", "resolve_spl_ref"]

#: accepted ``spl_ref`` of a stored calibration (a measured sound card and microphone), dB SPL
SPL_REF_RANGE = (40.0, 200.0)
#: accepted calibrator level, dB SPL: a tone that does not clip has an RMS below digital 1.0,
#: so spl_ref >= reference_db, and spl_ref must be within :data:`SPL_REF_RANGE`
REFERENCE_DB_RANGE = SPL_REF_RANGE


class CalibrationError(ValueError):
    """Calibration could not be measured, read or applied (message says why)."""


@dataclasses.dataclass
class Calibration:
    """spl_ref: dB SPL of digital RMS 1.0.  The rest documents the measurement:
    reference_db (dB SPL of the calibrator), frequency (Hz), measured_dbfs (RMS of the
    tone, dB re digital RMS 1.0), fs (Hz), device (name or file), date (ISO 8601)."""

    spl_ref: float
    reference_db: float = 94.0
    frequency: float = 1000.0
    measured_dbfs: float | None = None
    fs: float | None = None
    device: str | None = None
    date: str | None = None


def default_path() -> pathlib.Path:
    env = os.environ.get("RTAMT_CALIBRATION")
    if env:
        return pathlib.Path(env)
    return pathlib.Path.home() / ".config" / "rtamt" / "calibration.json"


def _check_spl_ref(v, where: str) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise CalibrationError(f"{where}: spl_ref must be a finite number, got {v!r}")
    lo, hi = SPL_REF_RANGE
    if not lo <= v <= hi:
        raise CalibrationError(
            f"{where}: spl_ref {v} dB is outside the plausible range {lo}-{hi} dB "
            "SPL for digital RMS 1.0")


def save(cal: Calibration, path=None) -> pathlib.Path:
    """Write ``cal`` to ``path`` (default :func:`default_path`) and return the path.

    A calibration :func:`load` would refuse raises :class:`CalibrationError` and writes
    nothing.  The JSON goes to a temporary file in the same directory, is flushed to disk
    (fsync) and renamed over ``path`` (``os.replace``, atomic): on any failure (``OSError``
    such as a full disk or a read-only directory) the temporary file is removed, the
    previous file is left unchanged and the error is raised."""
    p = pathlib.Path(path) if path else default_path()
    _check_spl_ref(cal.spl_ref, "calibration not saved")
    text = json.dumps(dataclasses.asdict(cal), indent=2, allow_nan=False) + "\n"
    p.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(p, text)
    return p


def load(path=None) -> Calibration:
    p = pathlib.Path(path) if path else default_path()
    if not p.is_file():
        raise CalibrationError(
            f"calibration file {p} does not exist (run `rtamt calibrate` first, or give "
            "--spl-ref)")
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise CalibrationError(f"calibration file {p} is not valid JSON: {e}") from None
    if not isinstance(d, dict) or "spl_ref" not in d:
        raise CalibrationError(f"calibration file {p} has no 'spl_ref' entry")
    known = {f.name for f in dataclasses.fields(Calibration)}
    extra = set(d) - known
    if extra:
        raise CalibrationError(f"calibration file {p}: unknown entries {sorted(extra)}")
    _check_spl_ref(d["spl_ref"], f"calibration file {p}")
    return Calibration(**d)


def measure_tone(x, fs: float, reference_db: float = 94.0, frequency: float = 1000.0, *,
                 settle_s: float = 0.5, expected_fs: float | None = None,
                 freq_tol: float = 0.05, device: str | None = None) -> Calibration:
    """Measure a calibrator tone in ``x`` ((T,) or (channels, T), first channel used).

    The first ``settle_s`` seconds are skipped; the tone must then last >= 0.5 s, not
    clip (|x| < 0.999), be at ``frequency`` within ``freq_tol`` (relative), carry >= 90 %
    of the signal power in +-10 % of that frequency, and be steady (100 ms RMS values
    within 1 dB).  Returns the :class:`Calibration`."""
    lo, hi = REFERENCE_DB_RANGE
    if not (math.isfinite(reference_db) and lo <= reference_db <= hi):
        raise CalibrationError(
            f"reference level must be a finite {lo:g} to {hi:g} dB SPL, got {reference_db}")
    if expected_fs is not None and abs(float(fs) - float(expected_fs)) > 1e-6:
        raise CalibrationError(
            f"sample rate mismatch: the recording is {fs:g} Hz, expected {expected_fs:g} Hz")
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 2:
        a = a[0]
    if a.ndim != 1 or not np.isfinite(a).all():
        raise CalibrationError("calibration input must be finite (T,) or (channels, T) samples")
    n0 = int(round(settle_s * fs))
    seg = a[n0:]
    if seg.size < int(0.5 * fs):
        raise CalibrationError(
            f"calibration recording too short: {a.size / fs:.2f} s, need >= {settle_s + 0.5:.1f} s")
    peak = float(np.max(np.abs(a)))
    if peak >= 0.999:
        raise CalibrationError(
            f"the calibrator tone is clipped (peak {peak:.4f} of full scale): lower the input "
            "gain and calibrate again")
    rms = float(np.sqrt(np.mean(seg ** 2)))
    if rms < 1e-6:
        raise CalibrationError(f"no calibrator tone: RMS {20 * np.log10(max(rms, 1e-30)):.1f} dBFS")
    spec = np.abs(np.fft.rfft(seg * np.hanning(seg.size))) ** 2
    f = np.fft.rfftfreq(seg.size, 1.0 / fs)
    fpk = float(f[int(np.argmax(spec))])
    if abs(fpk - frequency) > freq_tol * frequency:
        raise CalibrationError(
            f"dominant frequency {fpk:.1f} Hz, expected a {frequency:g} Hz calibrator tone "
            f"(+-{100 * freq_tol:g} %)")
    band = np.abs(f - frequency) <= 0.1 * frequency
    if spec[band].sum() < 0.9 * spec.sum():
        raise CalibrationError(
            f"the input is not a clean tone: only {100 * spec[band].sum() / spec.sum():.0f} % of "
            f"its power is near {frequency:g} Hz")
    hop = int(0.1 * fs)
    frames = seg[: seg.size // hop * hop].reshape(-1, hop)
    lv = 10 * np.log10(np.maximum(np.mean(frames ** 2, axis=1), 1e-30))
    if lv.max() - lv.min() > 1.0:
        raise CalibrationError(
            f"the tone level is not steady ({lv.max() - lv.min():.1f} dB variation over 100 ms "
            "frames)")
    dbfs = 20 * np.log10(rms)
    return Calibration(spl_ref=float(reference_db - dbfs), reference_db=float(reference_db),
                       frequency=float(frequency), measured_dbfs=float(dbfs), fs=float(fs),
                       device=device,
                       date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def resolve_spl_ref(spl_ref: float | None, path=None) -> tuple[float, str]:
    """The ``spl_ref`` an app should use, and where it came from: an explicit value wins;
    else an explicitly given calibration file (errors if unusable); else the default
    file if it exists (errors if it is invalid); else 100 dB (the AMT convention)."""
    if spl_ref is not None:
        if not math.isfinite(spl_ref):
            raise CalibrationError(f"--spl-ref must be finite, got {spl_ref}")
        return float(spl_ref), "--spl-ref"
    if path is not None:
        c = load(path)
        return c.spl_ref, f"calibration {path}"
    p = default_path()
    if p.exists():
        c = load(p)
        return c.spl_ref, f"calibration {p}"
    return 100.0, "default (RMS 1.0 = 100 dB SPL, uncalibrated)"

