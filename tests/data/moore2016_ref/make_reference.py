"""Make the Moore2016 reference data (``moore2016_ref.npz``) from the Cambridge loudness
program's numpy port, MalcolmSlaney/LoudnessModel (BSD-2), run from a checkout outside
this repository::

    python tests/data/moore2016_ref/make_reference.py --reference /tmp/LoudnessModel

The tests never run this script; they read the ``.npz`` it writes (see README.md here).
The signals are made here (no RNG except the AM noise's carrier, which is also stored), at
fs = 32000 Hz, each at most 2 s, in three ear versions: ``mono`` (right ear silent),
``diotic`` (both ears the same) and ``dichotic`` (right ear 10 dB below the left).

The reference's ``tvl2018.compute_loudness(sound, db_max, filter, rate)`` is run with its
free-field filter ``transfer_functions.ff_32000`` under two constant sets of the AGCs
(per-millisecond coefficients, attack/release):

* ``2018``: short-term 0.045/0.033, long-term 0.01/0.00133 (Moore, Jervis, Harries &
  Schlittenlacher 2018, J. Acoust. Soc. Am. 143, 1504-1513; the reference's own values);
* ``2016``: short-term 0.045/0.02, long-term 0.01/0.0005 (Moore, Glasberg, Varathanathan &
  Schlittenlacher 2016, Trends in Hearing 20, 1-16).

The reference keeps those coefficients as local literals of its two AGC loops, which call
the module functions ``agc_next_frame_of_vector`` (short-term, per channel) and
``agc_next_frame`` (long-term, per ear); for the 2016 set this script replaces those two
module attributes, for the duration of the run, by wrappers that check they were called
with the 2018 literals and pass the 2016 ones instead.  The per-ear values that
``compute_loudness`` does not return are recorded by wrapping module functions it calls
(its files are not changed): the short-term specific loudness per ear (before binaural
inhibition), the per-ear short-term loudness after inhibition (the input of its long-term
AGC) and the per-ear long-term loudness.  The instantaneous specific loudness does not
depend on the AGC constants, so it is computed once per signal and reused for the second
constant set.

Calibration: the reference's ``db_max`` is the RMS level of a full-scale sine (peak 1),
so a digital RMS of 1 is ``db_max + 10*log10(2)`` dB SPL (= rtamt's ``spl_ref``); a signal
meant at L dB SPL is scaled to the RMS ``10**((L - spl_ref) / 20)``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

FS = 32000
SPL_REF = 100.0                              # dB SPL of a digital RMS of 1 (rtamt spl_ref)
DB_MAX = SPL_REF - 10.0 * np.log10(2.0)      # reference's db_max: RMS level of a full-scale sine
NOISE_SEED = 41
DICHOTIC_DROP_DB = 10.0                      # right ear below the left in the dichotic version
VERSIONS = ("mono", "diotic", "dichotic")

# per-millisecond AGC coefficients (attack, release)
CONSTANTS = {
    "2018": {"st": (0.045, 0.033), "lt": (0.01, 0.00133)},
    "2016": {"st": (0.045, 0.02), "lt": (0.01, 0.0005)},
}

# Each recipe: a name, a kind and its parameters; ``level`` is the left ear's level in
# dB SPL (RMS over what the recipe says).  See ``base_signal``.
RECIPES = [
    {"name": "tone1k_40dB", "kind": "tone", "f": 1000.0, "level": 40.0, "dur": 1.0,
     "ramp": 0.01},
    {"name": "tone1k_60dB", "kind": "tone", "f": 1000.0, "level": 60.0, "dur": 1.0,
     "ramp": 0.01},
    {"name": "tone1k_80dB", "kind": "tone", "f": 1000.0, "level": 80.0, "dur": 1.0,
     "ramp": 0.01},
    {"name": "tone250_60dB", "kind": "tone", "f": 250.0, "level": 60.0, "dur": 1.0,
     "ramp": 0.01},
    {"name": "tone4k_60dB", "kind": "tone", "f": 4000.0, "level": 60.0, "dur": 1.0,
     "ramp": 0.01},
    {"name": "pip1k_70dB", "kind": "pip", "f": 1000.0, "level": 70.0, "dur": 1.5,
     "onset": 0.3, "pip_dur": 0.1, "ramp": 0.0025},
    {"name": "amnoise_60dB", "kind": "amnoise", "level": 60.0, "dur": 1.0, "fm": 4.0,
     "depth": 1.0, "seed": NOISE_SEED},
    {"name": "speechlike_60dB", "kind": "speechlike", "level": 60.0, "dur": 2.0},
]

# Syllables of the speech-like signal: start (s), duration (s), F0 at start and end (Hz),
# formants F1, F2, F3 (Hz) of its vowel.
SYLLABLES = [
    (0.10, 0.18, 130.0, 120.0, (700.0, 1220.0, 2600.0)),
    (0.32, 0.22, 125.0, 140.0, (300.0, 2300.0, 3000.0)),
    (0.58, 0.15, 140.0, 115.0, (500.0, 900.0, 2400.0)),
    (0.86, 0.25, 120.0, 110.0, (550.0, 1800.0, 2500.0)),
    (1.16, 0.16, 115.0, 135.0, (350.0, 800.0, 2300.0)),
    (1.38, 0.20, 135.0, 118.0, (650.0, 1100.0, 2500.0)),
    (1.66, 0.24, 118.0, 100.0, (400.0, 2000.0, 2700.0)),
]
FORMANT_BW = (90.0, 110.0, 160.0)            # formant bandwidths (Hz)
HARMONIC_FMAX = 6000.0                       # highest harmonic (Hz)

# frames (ms) whose specific loudness is stored, per case "signal__version"
SPEC_FRAMES = {
    "tone1k_80dB__diotic": [100, 500, 900],
    "pip1k_70dB__dichotic": [280, 290, 300, 305, 310, 320, 350, 400, 410, 420, 450, 500],
    "speechlike_60dB__mono": [200, 430, 660, 1000, 1270, 1480, 1780],
}


def _raised_cosine_gate(n: int, nramp: int) -> np.ndarray:
    """(n,) a gate of ones with raised-cosine (cos^2) ramps of nramp samples at both ends."""
    g = np.ones(n)
    if nramp > 0:
        r = np.sin(0.5 * np.pi * (np.arange(nramp) + 0.5) / nramp) ** 2
        g[:nramp] = r
        g[n - nramp:] = r[::-1]
    return g


def _resonance(f: np.ndarray, fc: float, bw: float) -> np.ndarray:
    """Magnitude of a second-order resonance (unit gain at 0 Hz) at frequencies f (Hz)."""
    q = f / fc
    return 1.0 / np.sqrt((1.0 - q ** 2) ** 2 + (f * bw / fc ** 2) ** 2)


def _speechlike(fs: int, dur: float) -> np.ndarray:
    """(T,) the speech-like signal, unscaled: per syllable a harmonic complex (F0 gliding
    linearly, harmonics up to HARMONIC_FMAX weighted by three formant resonances and a
    -6 dB/octave source slope) under a Hann (syllabic) envelope."""
    x = np.zeros(int(round(dur * fs)))
    for t0, d, f0a, f0b, formants in SYLLABLES:
        n0, n = int(round(t0 * fs)), int(round(d * fs))
        f0 = np.linspace(f0a, f0b, n)
        phase = 2.0 * np.pi * np.cumsum(f0) / fs                  # (n,)
        k = np.arange(1, int(HARMONIC_FMAX // min(f0a, f0b)) + 1)[:, None]
        fk = k * f0[None, :]                                     # (K, n)
        amp = (fk <= HARMONIC_FMAX) / k
        for fc, bw in zip(formants, FORMANT_BW):
            amp = amp * _resonance(fk, fc, bw)
        seg = np.sum(amp * np.sin(k * phase[None, :]), axis=0)
        x[n0:n0 + n] += seg * np.hanning(n)
    return x


def _amnoise_carrier(fs: int, dur: float, seed: int) -> np.ndarray:
    """(T,) float32 Gaussian white noise from ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(int(round(dur * fs))).astype(np.float32)


def base_signal(rec: dict, fs: int = FS, carrier: np.ndarray | None = None) -> np.ndarray:
    """(T,) float64 the recipe's signal at its level (dB SPL re a digital RMS of 1 =
    SPL_REF): tones at their level over the whole steady part, the pip over its 100 ms, AM
    noise and speech-like over the whole signal.  ``carrier`` replaces the AM noise's
    generated carrier (the stored float32 one)."""
    T = int(round(rec["dur"] * fs))
    rms = 10.0 ** ((rec["level"] - SPL_REF) / 20.0)
    t = np.arange(T) / fs
    kind = rec["kind"]
    if kind == "tone":
        g = _raised_cosine_gate(T, int(round(rec["ramp"] * fs)))
        return np.sqrt(2.0) * rms * np.sin(2.0 * np.pi * rec["f"] * t) * g
    if kind == "pip":
        n0, n = int(round(rec["onset"] * fs)), int(round(rec["pip_dur"] * fs))
        x = np.zeros(T)
        tp = np.arange(n) / fs
        x[n0:n0 + n] = (np.sqrt(2.0) * rms * np.sin(2.0 * np.pi * rec["f"] * tp)
                        * _raised_cosine_gate(n, int(round(rec["ramp"] * fs))))
        return x
    if kind == "amnoise":
        c = _amnoise_carrier(fs, rec["dur"], rec["seed"]) if carrier is None else carrier
        x = c.astype(np.float64) * (1.0 + rec["depth"] * np.sin(2.0 * np.pi * rec["fm"] * t
                                                                - 0.5 * np.pi))
        return x * rms / np.sqrt(np.mean(x ** 2))
    if kind == "speechlike":
        x = _speechlike(fs, rec["dur"])
        return x * rms / np.sqrt(np.mean(x ** 2))
    raise ValueError(f"unknown recipe kind {kind!r}")


def ears(x: np.ndarray, version: str) -> np.ndarray:
    """(2, T) left/right: ``mono`` right silent, ``diotic`` equal, ``dichotic`` right ear
    DICHOTIC_DROP_DB below the left."""
    if version == "mono":
        return np.stack([x, np.zeros_like(x)])
    if version == "diotic":
        return np.stack([x, x])
    if version == "dichotic":
        return np.stack([x, x * 10.0 ** (-DICHOTIC_DROP_DB / 20.0)])
    raise ValueError(f"unknown version {version!r}")


class _Recorder:
    """Wraps the reference module's functions for one ``compute_loudness`` call: AGC
    constants substituted, per-ear intermediate values recorded, the instantaneous
    specific loudness memoised per input."""

    def __init__(self, tvl):
        self.tvl = tvl
        self.orig = {k: getattr(tvl, k) for k in (
            "agc_next_frame_of_vector", "agc_next_frame",
            "filtered_signal_to_monaural_instantaneous_specific_loudness",
            "instantaneous_specific_loudness_to_shortterm_specific_loudness",
            "shortterm_loudness_to_longterm_loudness")}
        self.memo = {}

    def run(self, sound: np.ndarray, db_max: float, filt: np.ndarray, consts: dict) -> dict:
        tvl, o = self.tvl, self.orig
        rec = {"inst": [], "st_spec": [], "stl": [], "ltl": []}
        ref_st, ref_lt = CONSTANTS["2018"]["st"], CONSTANTS["2018"]["lt"]

        def agc_vec(last, this, aA, aR):
            if (aA, aR) != ref_st:
                raise RuntimeError(f"reference short-term AGC called with {(aA, aR)}, "
                                   f"expected {ref_st}; the reference has changed")
            return o["agc_next_frame_of_vector"](last, this, *consts["st"])

        def agc_one(last, this, attack, release):
            if (attack, release) != ref_lt:
                raise RuntimeError(f"reference long-term AGC called with "
                                   f"{(attack, release)}, expected {ref_lt}")
            return o["agc_next_frame"](last, this, *consts["lt"])

        def inst(signal, rate, dbm):
            key = (signal.tobytes(), rate, dbm)
            if key not in self.memo:
                self.memo.clear()                   # keep one signal's (both constant sets)
                self.memo[key] = o[
                    "filtered_signal_to_monaural_instantaneous_specific_loudness"](
                        signal, rate, dbm)
            left, right = self.memo[key]
            rec["inst"] = [left.copy(), right.copy()]
            return left.copy(), right.copy()

        def st(inst_spec):
            spec, loud = o["instantaneous_specific_loudness_to_shortterm_specific_loudness"](
                inst_spec)
            rec["st_spec"].append(spec.copy())
            return spec, loud

        def lt(nst):
            rec["stl"].append(np.array(nst, dtype=np.float64))
            out = o["shortterm_loudness_to_longterm_loudness"](nst)
            rec["ltl"].append(np.array(out, dtype=np.float64))
            return out

        patch = {"agc_next_frame_of_vector": agc_vec, "agc_next_frame": agc_one,
                 "filtered_signal_to_monaural_instantaneous_specific_loudness": inst,
                 "instantaneous_specific_loudness_to_shortterm_specific_loudness": st,
                 "shortterm_loudness_to_longterm_loudness": lt}
        for k, f in patch.items():
            setattr(tvl, k, f)
        try:
            peak, stl, ltl = tvl.compute_loudness(sound, db_max, filt, FS)
        finally:
            for k, f in o.items():
                setattr(tvl, k, f)
        if len(rec["stl"]) != 2 or len(rec["st_spec"]) != 2:
            raise RuntimeError("reference call order changed: expected left then right")
        rec.update(peak=float(peak), stl_bin=np.asarray(stl), ltl_bin=np.asarray(ltl))
        for a, b, what in ((rec["stl"], stl, "STL"), (rec["ltl"], ltl, "LTL")):
            if not np.allclose(a[0] + a[1], b, rtol=1e-12, atol=1e-15):
                raise RuntimeError(f"recorded per-ear {what} do not sum to the returned one")
        return rec


def _git_commit(path: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", required=True, type=Path,
                    help="checkout of MalcolmSlaney/LoudnessModel (outside this repository)")
    ap.add_argument("--commit", default=None,
                    help="the reference's commit hash (default: git rev-parse in --reference)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("moore2016_ref.npz"))
    ap.add_argument("--only", nargs="*", default=None, help="signal names (default: all)")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(args.reference.resolve()))
    import transfer_functions  # noqa: E402  (the reference's module)
    import tvl2018  # noqa: E402  (the reference's module)

    commit = args.commit or _git_commit(args.reference)
    filt = np.asarray(transfer_functions.ff_32000, dtype=np.float64)
    recorder = _Recorder(tvl2018)
    out: dict[str, np.ndarray] = {}
    cases = []
    recipes = [r for r in RECIPES if args.only is None or r["name"] in args.only]
    for r in recipes:
        carrier = None
        if r["kind"] == "amnoise":
            carrier = _amnoise_carrier(FS, r["dur"], r["seed"])
            out[f"{r['name']}__carrier"] = carrier
        x = base_signal(r, FS, carrier)
        for ver in VERSIONS:
            case = f"{r['name']}__{ver}"
            sound = ears(x, ver).T.copy()                        # (T, 2) for the reference
            for cname, consts in CONSTANTS.items():
                t0 = time.time()
                rec = recorder.run(sound, DB_MAX, filt, consts)
                key = f"{case}__{cname}"
                F = rec["stl_bin"].size
                out[f"{key}__stl"] = np.stack(rec["stl"]).astype(np.float32)     # (2, F)
                out[f"{key}__ltl"] = np.stack(rec["ltl"]).astype(np.float32)     # (2, F)
                out[f"{key}__stl_bin"] = rec["stl_bin"].astype(np.float32)       # (F,)
                out[f"{key}__ltl_bin"] = rec["ltl_bin"].astype(np.float32)       # (F,)
                out[f"{key}__peak_ltl"] = np.float64(rec["peak"])
                if cname == "2018":
                    out[f"{case}__t"] = np.arange(F) * 1e-3                       # s
                    inst = np.stack(rec["inst"])                                  # (2, F, 150)
                    out[f"{case}__inst_mon"] = (0.25 * inst.sum(-1)).astype(np.float32)
                if case in SPEC_FRAMES:
                    idx = np.asarray(SPEC_FRAMES[case])
                    out[f"{case}__spec_frames"] = idx
                    out[f"{case}__spec_inst"] = np.stack(
                        rec["inst"])[:, idx].transpose(1, 0, 2).astype(np.float32)
                    out[f"{key}__spec_st"] = np.stack(
                        rec["st_spec"])[:, idx].transpose(1, 0, 2).astype(np.float32)
                print(f"{key}: {F} frames, max STL {rec['stl_bin'].max():.4g} sone, "
                      f"{time.time() - t0:.1f} s", flush=True)
            cases.append(case)
    out["cam"] = np.arange(1.75, 39.25, 0.25)
    meta = {
        "reference": "https://github.com/MalcolmSlaney/LoudnessModel", "commit": commit,
        "licence": "BSD-2-Clause", "function": "tvl2018.compute_loudness",
        "filter": "transfer_functions.ff_32000 (free field)", "fs": FS,
        "db_max": DB_MAX, "spl_ref": SPL_REF, "hop_ms": 1.0,
        "frame_time": "frame i belongs to t = i ms (centre of the reference's windows)",
        "constants": CONSTANTS, "versions": VERSIONS, "dichotic_drop_db": DICHOTIC_DROP_DB,
        "cases": cases, "recipes": recipes, "syllables": SYLLABLES,
        "formant_bw": FORMANT_BW, "harmonic_fmax": HARMONIC_FMAX,
        "spec_frames": SPEC_FRAMES, "numpy": np.__version__,
    }
    out["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(args.out, **out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB), reference {commit}")


if __name__ == "__main__":
    main()
