"""Auditory filterbanks (signal -> frequency channels)."""
from .erb import erb, erb_number, erb_space, erb_to_hz
from .gammatone import Gammatone, GammatoneCoeffs, GammatoneParams

__all__ = ["erb", "erb_number", "erb_space", "erb_to_hz", "Gammatone", "GammatoneParams",
           "GammatoneCoeffs"]
