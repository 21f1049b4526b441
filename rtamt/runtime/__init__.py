"""Real-time runtime: plug chains into audio callbacks (see :mod:`.runtime`)."""
from .ring import InputRing
from .runtime import POLICIES, STATUS_FLAGS, Result, Runtime, RuntimeStats
from .sources import ArraySource, DemoSource, FileSource

__all__ = ["InputRing", "Runtime", "Result", "RuntimeStats", "POLICIES", "STATUS_FLAGS",
           "ArraySource", "DemoSource", "FileSource"]
