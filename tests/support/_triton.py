"""Where the Triton tests run their kernels.

``RTAMT_TEST_DEVICE`` (default ``cpu``) names the torch device of every tensor the
Triton tests make.  On ``cpu`` the kernels run in Triton's interpreter (``TRITON_INTERPRET=1``,
set by tests/conftest.py; CI); ``python -m latency_bench.gpu`` runs the same tests with
``RTAMT_TEST_DEVICE=cuda`` and ``TRITON_INTERPRET=0``, so every kernel is compiled for the
GPU and checked there against its numba twin.  tests/conftest.py marks every test of a
module that imports from here ``triton`` (what that command selects)."""
from __future__ import annotations

import os

import numpy as np
import torch

DEVICE = os.environ.get("RTAMT_TEST_DEVICE", "cpu")
"""The device string: ``'cpu'`` or ``'cuda'``."""


def dev(a) -> torch.Tensor:
    """A numpy array as a tensor on :data:`DEVICE` (on the CPU: a view of ``a``, as
    ``torch.from_numpy``; on a GPU: a copy)."""
    t = torch.from_numpy(a) if isinstance(a, np.ndarray) else a
    return t.to(DEVICE)


def host(t) -> np.ndarray:
    """A tensor's values as a numpy array on the host."""
    return t.detach().cpu().numpy()
