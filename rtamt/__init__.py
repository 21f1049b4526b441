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

import importlib
import importlib.util

__version__ = "0.1.0"

#: public name -> module that defines it (relative to this package)
_LAZY = {
    "RtamtInputError": ".engine.contract", "Streaming": ".engine.contract",
    "split_state": ".engine.contract", "stack_states": ".engine.contract",
    "Chain": ".engine.stage", "Stage": ".engine.stage",
    "MODELS": ".models", "Dau1997": ".models", "Glasberg2002": ".models",
    "King2019": ".models", "Moore2016": ".models", "Osses2021": ".models",
    "Paulick2024": ".models",
    "FanOut": ".scheduler", "RtamtCapacityError": ".scheduler", "Scheduler": ".scheduler",
}

__all__ = ["Chain", "Stage", "Streaming", "stack_states", "split_state", "RtamtInputError",
           "Dau1997", "Glasberg2002", "King2019", "Moore2016", "Osses2021", "Paulick2024",
           "MODELS", "Scheduler", "FanOut", "RtamtCapacityError", "__version__"]


def __getattr__(name: str):
    """A public name of :data:`_LAZY`, or a subpackage (``rtamt.models`` after a bare
    ``import rtamt``, as when this file imported them all), imported on first use."""
    mod = _LAZY.get(name)
    if mod is not None:
        value = getattr(importlib.import_module(mod, __name__), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value           # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
