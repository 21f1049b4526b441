"""Adaptation stages."""
from .adaptloop import AdaptLoop, AdaptLoopCoeffs, AdaptLoopParams

__all__ = ["AdaptLoop", "AdaptLoopParams", "AdaptLoopCoeffs"]
