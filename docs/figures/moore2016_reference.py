"""Figure of docs/models.md, "Moore2016 configurations": rtamt's Moore2016 in its two
configurations ('paper', the default, and 'tvl2018') beside the Cambridge loudness
program's output stored in tests/data/moore2016_ref (MalcolmSlaney/LoudnessModel, see the
README there; the program is not run here), and both against ANSI S3.4-2007 Table 7.

    python docs/figures/moore2016_reference.py [--out docs/moore2016_reference.png]

Needs matplotlib (not a dependency of rtamt).  Short-term loudness (sone) of the diotic
signals, frames matched by time; the program's start is reproduced for both
configurations (tests/support/_moore2016ref.run_like_the_program).  Table 7: the settled
short-term loudness of a diotic 1 kHz tone (last 200 ms of 1 s) at 32 kHz."""
from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from rtamt.models import Moore2016  # noqa: E402

import _moore2016ref  # noqa: E402

FS = 32000.0
PANELS = [("pip1k_70dB", (0.28, 0.43), "1 kHz tone pip, 70 dB SPL: onset and offset"),
          ("amnoise_60dB", (0.0, 1.0), "noise, 4 Hz 100 % AM, 60 dB SPL"),
          ("speechlike_60dB", (0.0, 2.0), "speech-like harmonic complex, 60 dB SPL")]
CONFIGS = {"paper": ("default ('paper')", "tab:blue"), "tvl2018": ("'tvl2018'", "tab:red")}


def table7_deviation(config: str, levels) -> np.ndarray:
    """Settled STL of a diotic 1 kHz tone at each level, relative to Table 7 (%)."""
    table = np.loadtxt(ROOT / "tests" / "data" / "ansi_s34_2007_table7.csv", delimiter=",",
                       skiprows=1)
    t = np.arange(int(FS)) / FS
    out = []
    for lv in levels:
        x = np.sqrt(2.0) * 10 ** ((lv - 100.0) / 20.0) * np.sin(2 * np.pi * 1000.0 * t)
        stl = Moore2016(FS, config=config)(np.stack([x, x]))["stl"]
        want = float(table[table[:, 0] == lv, 1][0])
        out.append(100.0 * (stl[-200:].mean() / want - 1.0))
    return np.array(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "moore2016_reference.png"))
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = _moore2016ref.load()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (name, (a, b), title) in zip(axes.flat, PANELS):
        case = f"{name}__diotic"
        t_ref = ref[f"{case}__t"]
        sel = (t_ref >= a) & (t_ref <= b)
        ax.plot(t_ref[sel] * 1e3, ref[f"{case}__2018__stl_bin"][sel], color="k", lw=2.2,
                label="Cambridge program (LoudnessModel)")
        for config, (label, colour) in CONFIGS.items():
            m = Moore2016(FS, config=config, spl_ref=ref["meta"]["spl_ref"])
            out = _moore2016ref.run_like_the_program(m, _moore2016ref.signal(ref, case))
            t = out["frame_time"]
            keep = (t >= a) & (t <= b)
            ax.plot(t[keep] * 1e3, out["stl"][keep], color=colour, lw=1.1, label=label)
        ax.set(title=title, xlabel="time (ms)", ylabel="short-term loudness (sone)")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    ax = axes.flat[3]
    levels = np.arange(30, 101, 10)
    for config, (label, colour) in CONFIGS.items():
        ax.plot(levels, table7_deviation(config, levels), "o-", color=colour, label=label)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set(title="1 kHz tone, diotic, settled: against ANSI S3.4-2007 Table 7",
           xlabel="level (dB SPL)", ylabel="rtamt / Table 7 - 1 (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(args.out)


if __name__ == "__main__":
    main()
