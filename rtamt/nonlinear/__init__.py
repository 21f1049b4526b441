"""Instantaneous nonlinearities."""
from .compression import BrokenStick, CompressionParams, PowerCompression

__all__ = ["BrokenStick", "PowerCompression", "CompressionParams"]
