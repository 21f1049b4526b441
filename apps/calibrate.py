"""``rtamt calibrate``: measure a reference tone and store ``spl_ref`` for the meter.

Records ``--seconds`` of a calibrator tone (default 94 dB SPL, 1 kHz) from an input
device, or reads it from a WAV file, checks it (not clipped, right frequency, steady)
and writes ``spl_ref`` (dB SPL of a digital RMS of 1.0) to the calibration file
(``--out``, default ``$RTAMT_CALIBRATION`` or ``~/.config/rtamt/calibration.json``).
"""
from __future__ import annotations

import json
import os
import sys

from rtamt.io.calibration import REFERENCE_DB_RANGE, CalibrationError, measure_tone, save
from rtamt.signals import read_wav

from .args import FS_LIMITS, float_range, int_range, looks_like_path, no_such_device, positive_float


def add_arguments(p):
    p.add_argument("--input", default="default",
                   help="a WAV file of the calibrator tone, 'default', or an input device")
    p.add_argument("--hostapi", default=None)
    lo, hi = REFERENCE_DB_RANGE
    p.add_argument("--reference-db", type=float_range(lo, hi), default=94.0,
                   help=f"calibrator level, dB SPL ({lo:g} to {hi:g})")
    p.add_argument("--freq", type=positive_float(100000.0), default=1000.0,
                   help="calibrator frequency, Hz")
    p.add_argument("--seconds", type=float_range(1.0, 600.0), default=3.0,
                   help="recording length (device), 1 to 600 s")
    p.add_argument("--fs", type=float_range(*FS_LIMITS), default=None,
                   help="expected sample rate (a file at another rate is an error)")
    p.add_argument("--channel", type=int_range(0, 255), default=0,
                   help="channel that carries the tone")
    p.add_argument("--out", default=None, help="calibration file to write")
    p.add_argument("--json", action="store_true")


def run(args) -> int:
    try:
        if os.path.isfile(args.input):
            fs, x = read_wav(args.input)
            name = args.input
        elif looks_like_path(args.input):
            raise FileNotFoundError(f"no such file: {args.input}")
        else:
            from rtamt.runtime.stream import _sd, find_input_device

            dev = None if args.input == "default" else \
                int(args.input) if args.input.isdigit() else args.input
            try:
                idx = find_input_device(dev, args.hostapi)
            except LookupError as e:
                raise no_such_device(args.input, args.hostapi, e) from None
            sd = _sd()
            info = sd.query_devices(idx)
            fs = args.fs or float(info["default_samplerate"])
            rec = sd.rec(int(args.seconds * fs), samplerate=fs, channels=args.channel + 1,
                         device=idx, dtype="float32", blocking=True)
            x = rec.T.astype("float64")
            name = str(info["name"])
        if not 0 <= args.channel < x.shape[0]:
            raise CalibrationError(f"--channel {args.channel}: the input has {x.shape[0]} channels")
        cal = measure_tone(x[args.channel], fs, args.reference_db, args.freq,
                           expected_fs=args.fs, device=name)
        path = save(cal, args.out)
    except (CalibrationError, OSError, ValueError, LookupError, RuntimeError) as e:
        print(f"rtamt calibrate: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(dict(cal.__dict__, path=str(path))))
    else:
        print(f"rtamt calibrate: tone {cal.measured_dbfs:.2f} dB re RMS 1.0 = "
              f"{cal.reference_db:g} dB SPL -> spl_ref {cal.spl_ref:.2f} dB; wrote {path}")
    return 0
