"""The input ring moved to :mod:`rtamt.scheduler.ring` (the scheduler owns the input side
of every stream); this name stays for existing imports."""
from ..scheduler.ring import InputRing

__all__ = ["InputRing"]
