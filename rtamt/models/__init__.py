"""Models: short compositions of stages."""
from .dau1997 import Dau1997
from .glasberg2002 import Glasberg2002
from .moore2016 import Moore2016

MODELS = {"dau1997": Dau1997, "glasberg2002": Glasberg2002, "moore2016": Moore2016}

__all__ = ["Dau1997", "Glasberg2002", "Moore2016", "MODELS"]
