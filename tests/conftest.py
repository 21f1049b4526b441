"""Test-session settings, set before anything imports Qt or triton:

* Qt renders offscreen (no display on CI);
* Triton kernels run in Triton's interpreter on CPU tensors (no GPU on CI); triton reads
  ``TRITON_INTERPRET`` when a kernel is defined, so it must be set before the first import.
  ``RTAMT_TEST_DEVICE=cuda`` (``python -m latency_bench.gpu``) puts the Triton tests' tensors
  on the GPU (tests/_triton.py) and compiles the kernels (``TRITON_INTERPRET=0``) instead.
"""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TRITON_INTERPRET",
                      "0" if os.environ.get("RTAMT_TEST_DEVICE") == "cuda" else "1")
