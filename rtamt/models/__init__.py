"""Models: short compositions of stages."""
from .dau1997 import Dau1997
from .glasberg2002 import Glasberg2002
from .king2019 import King2019
from .moore2016 import Moore2016
from .osses2021 import Osses2021
from .paulick2024 import Paulick2024

MODELS = {"dau1997": Dau1997, "glasberg2002": Glasberg2002, "king2019": King2019,
          "moore2016": Moore2016, "osses2021": Osses2021, "paulick2024": Paulick2024}

__all__ = ["Dau1997", "Glasberg2002", "King2019", "Moore2016", "Osses2021", "Paulick2024",
           "MODELS", "processor_by_name"]


def processor_by_name(name: str, fs: float, channels: int = 1, kwargs: dict | None = None):
    """A new processor for ``Scheduler.open(name, ...)``: a model of :data:`MODELS`
    (``MODELS[name](fs, **kwargs)``) or a meter of
    :data:`rtamt.loudness.r128stream.METERS` (``'r128'``, ``'bs1770'``: ``METERS[name](fs,
    channels=channels, **kwargs)``, with the meter's ``layout``, ``weights``, ``mode``,
    ``lra_hop``, ``truepeak``).  ``ValueError`` naming the choices for another name."""
    from ..loudness.r128stream import METERS
    key = name.lower()
    if key in MODELS:
        return MODELS[key](fs, **(kwargs or {}))
    if key in METERS:
        return METERS[key](fs, channels=channels, **(kwargs or {}))
    raise ValueError(f"unknown model {name!r}; choose from {sorted(MODELS)} or the meters "
                     f"{sorted(METERS)}")
