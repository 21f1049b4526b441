"""The stages the sweeps run, found rather than listed (issue 40 item 7).

:func:`stage_classes` imports every module of rtamt (outside rtamt.nn) and of the
packages in tests/support (the toy stage) and collects the
:class:`rtamt.engine.stage.Stage` subclasses defined there; :func:`cases` gives their
declared examples (:class:`rtamt.engine.examples.Example`, ``Stage.examples()``) as
``pytest.param``s with the example's id, and :func:`example_input` makes the input an
example names.  A sweep parametrised with :func:`cases` runs every stage, the toy stage
included, without a list of its own (tests/engine/test_toy_stage.py checks that)."""
from __future__ import annotations

import functools
import importlib
import pathlib
import pkgutil

import numpy as np
import pytest

from _helpers import FS, make_signal

SUPPORT = pathlib.Path(__file__).resolve().parent
#: samples of every example input (> 8192: a random partition holds an 8192-sample block)
N = 9600
#: the Dau1997 output behind each channel input (rtamt.engine.examples.INPUTS)
CHANNEL_INPUTS = {"bands": "gammatone", "envelopes": "ihc", "adapted": "adaptloop"}


def _import_all(path, prefix) -> None:
    for m in pkgutil.walk_packages([str(path)], prefix):
        if m.name.startswith("rtamt.nn"):
            continue
        try:
            importlib.import_module(m.name)
        except ImportError:      # a module of a missing optional dependency (Triton, JACK)
            continue


@functools.cache
def stage_classes() -> tuple:
    """Every ``Stage`` subclass defined in rtamt (outside rtamt.nn) or in a package of
    tests/support, after importing all their modules; sorted by module and name."""
    import rtamt
    from rtamt.engine.stage import Stage

    _import_all(pathlib.Path(rtamt.__file__).parent, "rtamt.")
    homes = ["rtamt."]
    for m in pkgutil.iter_modules([str(SUPPORT)]):
        if m.ispkg:
            _import_all(SUPPORT / m.name, m.name + ".")
            homes.append(m.name + ".")
    seen, todo = set(), [Stage]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return tuple(sorted((c for c in seen if c.__module__.startswith(tuple(homes))
                         and not c.__module__.startswith("rtamt.nn")),
                        key=lambda c: (c.__module__, c.__qualname__)))


def examples(where=lambda cls, ex: True) -> list:
    """``(class, example)`` of every example declared by a discovered class (in its own
    body: an inherited ``examples`` is not the class's) for which ``where`` holds."""
    out = []
    for cls in stage_classes():
        if "examples" in vars(cls) and cls.examples():
            out.extend((cls, ex) for ex in cls.examples() if where(cls, ex))
    return out


def on_samples(cls, ex) -> bool:
    """A stage whose flow is samples in and out and whose example takes sample blocks
    (what the sample sweeps run): not the meter's statistics (step rows, ``"steps"``) nor
    a frame stage on the loudness models' sample rows (``"frames"``, e.g. the linear-phase
    ear FIR of Moore2016 ``config='tvl2018'``), which take frame dicts, not arrays."""
    from rtamt.engine.examples import SAMPLE_INPUTS
    from rtamt.engine.stage import SAMPLES

    return cls.flow_in == SAMPLES and cls.flow_out == SAMPLES and ex.input in SAMPLE_INPUTS


def cases(where=on_samples) -> list:
    """:func:`examples` as ``pytest.param(cls, example, id=example.id)``."""
    return [pytest.param(cls, ex, id=ex.id) for cls, ex in examples(where)]


@functools.cache
def signals() -> dict:
    import rtamt

    x = make_signal(N, seed=0)
    sig = {"signal": x, "pair": np.stack([make_signal(N, seed=1), 0.5 * make_signal(N, seed=2)])}
    outs = rtamt.Dau1997(FS).process_all(x)
    sig.update({k: outs[v] for k, v in CHANNEL_INPUTS.items()})
    sig["fc"] = tuple(rtamt.Dau1997(FS).fc)
    return sig


def example_input(ex, n: int = N, dtype=np.float64, start: int = 0) -> np.ndarray:
    """Samples ``start`` to ``start + n`` (<= :data:`N`) of the input ``ex`` names,
    contiguous, in ``dtype`` (a prefix is the input of a shorter signal: every input is
    causal in time; the signal's first 300 samples are silent)."""
    assert start + n <= N, (start, n)
    return np.ascontiguousarray(signals()[ex.input][..., start:start + n].astype(dtype))


def make(cls, ex):
    """A new stage of ``cls`` built as ``ex`` says (per-channel parameters for the
    channels of its input)."""
    return ex.make(cls, signals()["fc"])
