"""Compute backends of the stages: numba kernels on numpy arrays, or Triton kernels on torch
tensors.

* ``'numba'`` (default): :mod:`rtamt.engine.kernels` and the other numba kernels, on the
  CPU; state and outputs are numpy arrays.
* ``'triton'``: :mod:`rtamt.engine.kernels_triton`, the same recursions written once more
  in Triton, kernel by kernel with the same names and arguments, on torch tensors of one
  device.  State lives on that device; outputs are tensors there.  On a CUDA device the
  kernels are compiled for the GPU; on CPU tensors they run only in Triton's interpreter
  (``TRITON_INTERPRET=1`` set before triton is imported), which is how CI checks them
  against the numba kernels on a machine without a GPU.

A stage's ``process_tm`` is written once for both: :func:`dispatch` returns the kernel
module and the coefficient adapter that match its input array.  Coefficients are designed
once as float64 numpy arrays (``Coeffs``); :func:`dispatch` hands the Triton kernels a copy
on the input's device, made once per array and device and cached.

Triton is an optional extra (``pip install 'rtamt[gpu]'``); it is imported only when a
``'triton'`` backend is selected, because importing it costs start-up time.
"""
from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from . import kernels as _numba_kernels

__all__ = ["BACKENDS", "RtamtBackendError", "resolve", "dispatch", "triton_module",
           "coef_adapter", "is_tensor", "to_numpy", "empty_like_block", "is_float64"]

BACKENDS = ("numba", "triton")


class RtamtBackendError(RuntimeError):
    """A backend or device that cannot run here (missing package, no GPU, a stage without
    a kernel for it).  The message says what to install or choose instead."""


def is_tensor(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def to_numpy(v: Any) -> np.ndarray:
    """A numpy copy of a state array or tensor (on the host)."""
    if is_tensor(v):
        return v.detach().to("cpu").numpy().copy()
    return np.array(v, copy=True)


def _triton_available() -> str | None:
    try:
        import triton  # noqa: F401
    except ImportError as e:
        return str(e)
    return None


_GPU_EXTRA = "pip install 'rtamt[gpu]', or pip install -e '.[gpu]' in a checkout"


def _no_cuda(torch, dev) -> str:
    """Why ``dev`` (a CUDA device) cannot be used when ``torch.cuda.is_available()`` is
    False: a CPU-only build of torch (``torch.version.cuda is None``), or a CUDA build that
    sees no device (no GPU, no driver, or ``CUDA_VISIBLE_DEVICES`` hiding it)."""
    head = f"device={str(dev)!r}: no CUDA device is visible to torch"
    cpu = ("; or run on the CPU: backend='numba' (the default), or device='cpu' with "
           "TRITON_INTERPRET=1 for the Triton kernels in the interpreter")
    if torch.version.cuda is None:
        return (f"{head}: this torch ({torch.__version__}) is a CPU-only build "
                "(torch.version.cuda is None); install a CUDA build of torch from the index "
                "of your CUDA version (https://pytorch.org/get-started/locally/, e.g. pip "
                f"install torch --index-url https://download.pytorch.org/whl/cu124){cpu}")
    return (f"{head} (torch.cuda.is_available() is False; torch {torch.__version__} is built "
            f"for CUDA {torch.version.cuda}): check that the NVIDIA driver sees a GPU "
            f"(nvidia-smi) and that CUDA_VISIBLE_DEVICES does not hide it{cpu}")


def resolve(backend: str | None, device: Any = None) -> tuple[str, Any]:
    """Check a ``(backend, device)`` choice and fill its defaults; returns ``(backend,
    torch.device or None)``.

    ``backend=None`` means ``'triton'`` when ``device`` is a GPU device, else ``'numba'``.
    ``'triton'`` without a device uses CUDA when torch sees one, else the CPU (the
    interpreter).  Raises :class:`RtamtBackendError` saying what is missing."""
    if backend is not None and backend not in BACKENDS:
        raise RtamtBackendError(f"unknown backend {backend!r}; choose from {BACKENDS}")
    if backend in (None, "numba") and device is None:
        return "numba", None
    import torch

    dev = None if device is None else torch.device(device)
    if backend is None:
        backend = "numba" if dev.type == "cpu" else "triton"
    if backend == "numba":
        if dev.type != "cpu":
            raise RtamtBackendError(
                f"the numba kernels run on the CPU; device={str(dev)!r} needs backend='triton'")
        return "numba", None
    if dev is not None and dev.type not in ("cpu", "cuda"):
        raise RtamtBackendError(f"device {str(dev)!r} is not supported (cpu or cuda)")
    why = _triton_available()
    if dev is not None and dev.type == "cuda" and not torch.cuda.is_available():
        raise RtamtBackendError(_no_cuda(torch, dev) + (
            "" if why is None else
            f"; the Triton backend also needs the triton package ({why}): {_GPU_EXTRA}"))
    if why is not None:
        raise RtamtBackendError(
            f"backend='triton'{'' if dev is None else f' (device={str(dev)!r})'} needs the "
            f"triton package ({why}): {_GPU_EXTRA}")
    if dev is None:
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cpu" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        raise RtamtBackendError(
            "Triton kernels on CPU tensors run only in Triton's interpreter: set "
            "TRITON_INTERPRET=1 in the environment before triton is imported (or use "
            "device='cuda')")
    return "triton", dev


# ------------------------------------------------------------------ per-call dispatch
def _same(a):
    return a


class _TorchCoeffs:
    """``coef(a)``: a numpy coefficient array ``a`` as a tensor on ``device``, made on first
    use and kept.  Keyed by the memory ``a`` views (address, shape, strides, dtype), so a
    fresh view of the same coefficients (``coeffs.sos[m]``) finds its tensor; the cache
    keeps that memory alive, so the address cannot be reused by other values.
    Coefficients are designed once and never written, which this relies on."""

    def __init__(self, device):
        self.device = device
        self.cache: dict[tuple, tuple[np.ndarray, Any]] = {}

    def __call__(self, a):
        if a is None or is_tensor(a):
            return a
        a = np.asarray(a)
        key = (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str)
        hit = self.cache.get(key)
        if hit is not None:
            return hit[1]
        import torch

        t = torch.from_numpy(np.ascontiguousarray(a)).to(self.device)
        owner = a if a.base is None else a.base
        self.cache[key] = (owner, t)
        return t


_coef_by_device: dict[str, _TorchCoeffs] = {}


#: one lock for every Triton module's launches: the interpreter's patching is process-wide
_INTERPRETER_LOCK = threading.Lock()


class _Serialized:
    """The Triton kernel module with every launch under one process-wide lock: Triton's
    interpreter swaps ``triton.language`` functions for its own while a kernel runs, so two
    threads interpreting kernels at once break each other ("Did you forget to add
    @triton.jit?").  Compiled GPU kernels need no lock."""

    def __init__(self, module):
        self._m, self._lock, self._fns = module, _INTERPRETER_LOCK, {}

    def __getattr__(self, name):
        fn = self._fns.get(name)
        if fn is None:
            f, lock = getattr(self._m, name), self._lock

            def fn(*a, **k):
                with lock:
                    return f(*a, **k)
            self._fns[name] = fn
        return fn


_triton_modules: dict = {}


def triton_module(name: str = "rtamt.engine.kernels_triton"):
    """The Triton kernel module ``name`` (imported on first use), its launches serialised
    when they run in the interpreter.  Stages whose numba kernels live in their own module
    keep the Triton twin beside it (``rtamt/ear/fir.py`` / ``rtamt/ear/fir_triton.py``) and
    call it through this."""
    m = _triton_modules.get(name)
    if m is None:
        import importlib

        mod = importlib.import_module(name)
        interp = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
        m = _triton_modules[name] = _Serialized(mod) if interp else mod
    return m


def coef_adapter(x):
    """The coefficient adapter of :func:`dispatch` for tensor ``x`` (numpy float64
    coefficient arrays -> cached tensors on ``x``'s device)."""
    key = str(x.device)
    c = _coef_by_device.get(key)
    if c is None:
        c = _coef_by_device[key] = _TorchCoeffs(x.device)
    return c


def dispatch(x):
    """``(kernels, coef)`` for a stage's time-major input ``x``: for a numpy array the numba
    kernel module :mod:`rtamt.engine.kernels` and the identity; for a torch tensor
    :mod:`rtamt.engine.kernels_triton` and an adapter that returns each numpy coefficient
    array as a (cached) tensor on ``x``'s device."""
    if type(x) is np.ndarray:
        return _numba_kernels, _same
    return triton_module(), coef_adapter(x)


def empty_like_block(x, shape):
    """An uninitialised output of ``shape`` in ``x``'s dtype, library and device."""
    if type(x) is np.ndarray:
        return np.empty(shape, x.dtype)
    import torch

    return torch.empty(shape, dtype=x.dtype, device=x.device)


def is_float64(x) -> bool:
    if type(x) is np.ndarray:
        return x.dtype == np.float64
    import torch

    return x.dtype == torch.float64
