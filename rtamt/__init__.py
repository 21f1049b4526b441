"""rtamt - real-time streaming auditory models.

Every stage is a stateful block processor (Params -> Coeffs -> State); any block
partition of a stream, down to single samples, gives the same output as one call
on the whole signal.  See README.md.

The names below are imported on first use (PEP 562 module ``__getattr__``): ``import
rtamt`` loads no model, no scheduler and no numba, so that a program using one part
(``rtamt.loudness.bs1770`` for ``rtamt loudness``) pays for that part only
(docs/startup.md).  ``rtamt.Moore2016``, ``from rtamt import MODELS`` etc. work as before.
"""
from __future__ import annotations

__version__ = "0.1.0"

#: public name -> module that defines it (a key of :func:`_module`)
_LAZY = {
    "RtamtInputError": "engine.contract", "Streaming": "engine.contract",
    "split_state": "engine.contract", "stack_states": "engine.contract",
    "Chain": "engine.stage", "Stage": "engine.stage",
    "MODELS": "models", "Dau1997": "models", "Glasberg2002": "models",
    "King2019": "models", "Moore2016": "models", "Osses2021": "models",
    "Paulick2024": "models",
    "FanOut": "scheduler", "RtamtCapacityError": "scheduler", "Scheduler": "scheduler",
}
#: the subpackages and modules ``rtamt.<name>`` reaches after a bare ``import rtamt``
_SUBMODULES = ("adaptation", "calibration", "cluster", "data", "ear", "engine", "filterbank", "ihc",
               "integrations", "io", "loudness", "media", "models", "modulation", "nn",
               "nonlinear", "resample", "runtime", "scheduler", "signals")


def _module(name: str):
    """The module ``rtamt.<name>``, imported by a plain import statement (no module of
    rtamt imports by name: tests/engine/test_layout.py)."""
    if name == "engine.contract":
        from .engine import contract as m
    elif name == "engine.stage":
        from .engine import stage as m
    elif name == "adaptation":
        import rtamt.adaptation as m
    elif name == "calibration":
        import rtamt.calibration as m
    elif name == "cluster":
        import rtamt.cluster as m
    elif name == "data":
        import rtamt.data as m
    elif name == "ear":
        import rtamt.ear as m
    elif name == "engine":
        import rtamt.engine as m
    elif name == "filterbank":
        import rtamt.filterbank as m
    elif name == "ihc":
        import rtamt.ihc as m
    elif name == "integrations":
        import rtamt.integrations as m
    elif name == "io":
        import rtamt.io as m
    elif name == "loudness":
        import rtamt.loudness as m
    elif name == "media":
        import rtamt.media as m
    elif name == "models":
        import rtamt.models as m
    elif name == "modulation":
        import rtamt.modulation as m
    elif name == "nn":
        import rtamt.nn as m
    elif name == "nonlinear":
        import rtamt.nonlinear as m
    elif name == "resample":
        import rtamt.resample as m
    elif name == "runtime":
        import rtamt.runtime as m
    elif name == "scheduler":
        import rtamt.scheduler as m
    elif name == "signals":
        import rtamt.signals as m
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return m

__all__ = ["Chain", "Stage", "Streaming", "stack_states", "split_state", "RtamtInputError",
           "Dau1997", "Glasberg2002", "King2019", "Moore2016", "Osses2021", "Paulick2024",
           "MODELS", "Scheduler", "FanOut", "RtamtCapacityError", "__version__"]


def __getattr__(name: str):
    """A public name of :data:`_LAZY`, or a subpackage (``rtamt.models`` after a bare
    ``import rtamt``, as when this file imported them all), imported on first use."""
    mod = _LAZY.get(name)
    if mod is not None:
        value = getattr(_module(mod), name)
    elif name in _SUBMODULES:
        value = _module(name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value           # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
