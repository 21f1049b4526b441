"""Models: short compositions of stages."""
from .dau1997 import Dau1997

MODELS = {"dau1997": Dau1997}

__all__ = ["Dau1997", "MODELS"]
