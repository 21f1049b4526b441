"""Every stage declares the examples the sweeps run (issue 40 item 7): the sweeps find the
stage classes (tests/support/_examples.py) instead of listing them, so a stage class that
declares none would escape them; this refuses it."""
from __future__ import annotations

import pytest

from rtamt.engine.examples import INPUTS, Example
from rtamt.engine.stage import Stage

from _examples import examples, make, stage_classes
from toy.onepole import OnePole


def undeclared(classes) -> list:
    """The classes that declare no examples in their own body (an inherited declaration
    is the base's, not theirs)."""
    return [c for c in classes if "examples" not in vars(c) or c.examples() is None]


def test_the_stage_classes_are_found():
    names = {c.__name__ for c in stage_classes()}
    # the sample, frame and meter stages of rtamt, their bases, and the toy stage
    assert {"Gammatone", "AdaptLoop", "Resampler", "Spectrum", "Excitation", "KWeighting",
            "TruePeak", "InputCalibration", "SharedSOSStage", "FrameStage", "OnePole"} <= names
    assert all(issubclass(c, Stage) for c in stage_classes())
    assert not [c for c in stage_classes() if c.__module__.startswith("rtamt.nn")]


def test_every_stage_declares_its_examples():
    classes = stage_classes()
    assert not undeclared(classes), [c.__qualname__ for c in undeclared(classes)]
    # a class declaring none is a base: some subclass of it runs
    for base in (c for c in classes if c.examples() == ()):
        assert any(issubclass(c, base) and c.examples() for c in classes if c is not base), base
    found = examples()
    ids = [ex.id for _, ex in found]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    for cls, ex in found:
        assert isinstance(ex, Example) and ex.input in INPUTS, (cls, ex)
        assert type(make(cls, ex)) is cls, ex.id


def test_a_stage_without_examples_is_refused():
    """The check above fails for a stage that declares none, or only inherits them."""

    class Inherits(OnePole):
        name = "inherits"

    class Silent(Stage):
        name = "silent"

    assert undeclared([OnePole, Inherits, Silent]) == [Inherits, Silent]


def test_an_example_names_a_known_input():
    with pytest.raises(ValueError, match="input 'noise'"):
        Example("x", input="noise")
    with pytest.raises(ValueError, match="per_channel 'fc'"):
        Example("x", per_channel={"fc": "erb"})
