"""Writing model outputs to disk as they are produced.

* :class:`OutputWriter`: named outputs appended block by block along their time axis, one
  ``.npy`` per output in a directory (or one ``.npz``), memory independent of the stream's
  length, the result moved into place atomically at the end;
* :class:`OutputSet`: several such outputs (e.g. one per channel) in one directory,
  committed together;
* :class:`StreamTap`: a scheduler subscriber that hands a stream's outputs to a writer
  thread through a bounded ring of preallocated slots;
* :class:`Decimator`: block-invariant rate reduction (mean over ``factor`` samples, or
  keeping every ``factor``-th sample) before writing;
* :func:`read_outputs`: open a written output (memory-mapped for a directory).
"""
from .decimate import Decimator
from .tap import StreamTap, TapError
from .writer import MARKER, OutputSet, OutputWriter, read_outputs, remove_stale

__all__ = ["OutputWriter", "OutputSet", "StreamTap", "TapError", "Decimator", "read_outputs",
           "remove_stale", "MARKER"]
