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


_SM80 = '''
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


def build(fn, sig, cx, fusion=True):
    sig = {n: ("constexpr" if n in cx else v) for n, v in sig.items()}
    src = ASTSource(fn=fn, signature=sig, constexprs=cx)
    out = triton.compile(src, target=GPUTarget("cuda", 80, 32),
                         options={"enable_fp_fusion": fusion, "num_warps": 2})
    assert out.asm["cubin"]
    return out.asm["ptx"]
'''


def compile_sm80(body: str, timeout: float = 600) -> None:
    """Run ``body`` (Python source calling ``build(kernel, signature, constexprs,
    fusion=True)``, which compiles ``kernel`` to a cubin for an sm_80 GPU with Triton's
    CUDA backend and returns its PTX) in a process without ``TRITON_INTERPRET`` (no device
    needed); asserts that every build succeeded."""
    import subprocess
    import sys
    import textwrap

    script = _SM80 + textwrap.dedent(body) + '\nprint("ok")\n'
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=env, timeout=timeout)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
