"""Test-session settings, set before anything imports Qt or triton:

* Qt renders offscreen (no display on CI);
* Triton kernels run in Triton's interpreter on CPU tensors (no GPU on CI); triton reads
  ``TRITON_INTERPRET`` when a kernel is defined, so it must be set before the first import.
  ``RTAMT_TEST_DEVICE=cuda`` (``python -m latency_bench.gpu``) puts the Triton tests' tensors
  on the GPU (tests/support/_triton.py) and compiles the kernels (``TRITON_INTERPRET=0``)
  instead.

Every test of a module that uses the Triton test helpers (``from _triton import ...``) is
marked ``triton``; a Triton test in a module that does not (the toy stage's Triton path, the
kernels' compile check) carries ``pytest.mark.triton`` itself.  ``-m "cuda or triton"``
therefore selects the Triton tests wherever they live (the ``tests`` step of
``latency_bench.gpu``).
"""
import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TRITON_INTERPRET",
                      "0" if os.environ.get("RTAMT_TEST_DEVICE") == "cuda" else "1")


def _uses_triton_helpers(module) -> bool:
    """Whether ``module`` imported the module ``_triton`` or a function of it."""
    return any(getattr(v, "__module__", None) == "_triton"
               or getattr(v, "__name__", None) == "_triton" for v in vars(module).values())


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and _uses_triton_helpers(module):
            item.add_marker(pytest.mark.triton)
