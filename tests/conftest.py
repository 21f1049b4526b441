"""Test-session settings, set before anything imports Qt or triton:

* Qt renders offscreen (no display on CI);
* Triton kernels run in Triton's interpreter on CPU tensors (no GPU on CI); triton reads
  ``TRITON_INTERPRET`` when a kernel is defined, so it must be set before the first import.
  A run on a CUDA machine sets ``TRITON_INTERPRET=0`` to compile the kernels instead.
"""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TRITON_INTERPRET", "1")
