"""Flush-to-zero / denormals-are-zero for the processing thread.

After loud input followed by digital silence, IIR states decay geometrically into
the subnormal range, where x86 arithmetic can be 10-100x slower.  rtamt sets the
FTZ and DAZ bits of the calling thread's MXCSR (via ``torch.set_flush_denormal``,
which does exactly that) the first time a thread processes a block.  This changes
results only for values below 2.2e-308 (float64) / 1.2e-38 (float32): it adds no
dither and no DC.

The flags are per thread; :func:`ensure_ftz` is cheap after the first call in a
thread.  Set ``RTAMT_KEEP_DENORMALS=1`` to leave the thread's flags alone.
"""
from __future__ import annotations

import os
import threading

_local = threading.local()


def ftz_supported() -> bool:
    import torch

    return bool(torch.set_flush_denormal(True))


def ensure_ftz() -> None:
    """Enable FTZ/DAZ in the calling thread once (no-op afterwards)."""
    if getattr(_local, "done", False):
        return
    _local.done = True
    if os.environ.get("RTAMT_KEEP_DENORMALS") == "1":
        return
    import torch

    torch.set_flush_denormal(True)
