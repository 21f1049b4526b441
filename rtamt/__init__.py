"""rtamt - real-time streaming auditory models.

Every stage is a stateful block processor (Params -> Coeffs -> State); any block
partition of a stream, down to single samples, gives the same output as one call
on the whole signal.  See README.md.
"""
from .engine.contract import RtamtInputError, Streaming, split_state, stack_states
from .engine.stage import Chain, Stage
from .models import MODELS, Dau1997, Glasberg2002, King2019, Moore2016, Osses2021, Paulick2024
from .scheduler import FanOut, RtamtCapacityError, Scheduler

__version__ = "0.1.0"
__all__ = ["Chain", "Stage", "Streaming", "stack_states", "split_state", "RtamtInputError",
           "Dau1997", "Glasberg2002", "King2019", "Moore2016", "Osses2021", "Paulick2024",
           "MODELS", "Scheduler", "FanOut", "RtamtCapacityError", "__version__"]
