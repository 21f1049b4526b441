"""Compute backends of the stages: numba kernels on numpy arrays, or Triton kernels on torch
tensors.

* ``'numba'`` (default): each stage's numba kernels, on the CPU; state and outputs are
  numpy arrays.
* ``'triton'``: the same recursions written once more in Triton, kernel by kernel with the
  same names and arguments, on torch tensors of one device.  State lives on that device;
  outputs are tensors there.  On a CUDA device the kernels are compiled for the GPU; on
  CPU tensors they run only in Triton's interpreter (``TRITON_INTERPRET=1`` set before
  triton is imported), which is how CI checks them against the numba kernels on a
  machine without a GPU.

A stage declares its kernels once, in its own module (:class:`Kernels`: the numba
functions and a function that imports the Triton twins), and ``to(device, backend=...)``
binds them once (:meth:`Kernels.bind`): the stage keeps the bound set as ``stage.kern``
(:class:`NumbaKernels` or :class:`TritonKernels`), and its ``process_tm``, written once for
both backends, calls ``kern.<kernel>(...)`` and the few array operations the set provides
(``coef``, ``buffer``, ``contiguous``, ``is64``, ...).  Coefficients are designed once as
float64 numpy arrays (``Coeffs``); the Triton set hands its kernels a copy on the device,
made once per array and device and cached.

Triton is an optional extra (``pip install 'rtamt[gpu]'``); a stage's Triton module is
imported only when the stage is bound to the ``'triton'`` backend, because importing
triton costs start-up time.
"""
from __future__ import annotations

import functools
import os
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .contract import RtamtInputError

__all__ = ["BACKENDS", "RtamtBackendError", "resolve", "Kernels", "NumbaKernels",
           "TritonKernels", "declare_kernels", "kernel_method", "host_buffer",
           "device_buffer", "is_tensor",
           "to_numpy", "as_numpy_block", "HostRows", "DeviceRows", "rows_io", "require_numpy",
           "block_movers", "host_samples", "triton_available", "time_last", "work_buffer",
           "concat_slots", "copy_leaf", "leaf_bytes", "take_slots", "zeros_like_leaf"]

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


def require_numpy(x: Any, where: Callable[[], str], err: type) -> np.ndarray:
    """``x`` if it is a numpy array (a front end that takes numpy blocks only, e.g. the
    R128 meter); else raise ``err`` with ``where()`` (the block it is) and the type got."""
    if isinstance(x, np.ndarray):
        return x
    raise err(f"{where()}: expected a numpy array, got {type(x).__name__}")


def _host_array(t) -> np.ndarray:
    return t.detach().to("cpu").numpy()


def _same(x):
    return x


def block_movers(backend: str, device: Any = None) -> tuple[Callable, Callable]:
    """``(to_kernels, to_host)`` for a block path, chosen once when a processor is bound
    (its ``to()``): ``to_kernels(a)`` hands a validated numpy array to the kernels of the
    resolved ``(backend, device)`` (numba: ``a`` itself; Triton: a tensor on ``device``,
    ``a``'s own memory on the CPU), ``to_host(y)`` brings a kernel's result back as numpy
    (numba: ``y`` itself; Triton: the tensor's values on the host)."""
    if backend == "numba":
        return _same, _same
    return functools.partial(_on_device, device=device), _host_array


def _on_device(a: np.ndarray, device):
    import torch

    t = torch.from_numpy(a)
    return t if t.device == device else t.to(device)


def host_samples(x: Any) -> np.ndarray:
    """Samples a producer hands over (a scheduled stream's ``push``), as a numpy array on
    the host: :func:`as_numpy_block`'s array (a numpy array itself, a float32 / float64
    tensor as a view on the CPU or a host copy from another device).  Raises
    :class:`~rtamt.engine.contract.RtamtInputError` (a ``ValueError``) naming what was given
    for anything else; the caller says which stream and block.  The dtype of a numpy array
    is the caller's to check."""
    return as_numpy_block(x)[0]


def triton_available() -> str | None:
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
    why = triton_available()
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



# ------------------------------------------------------------------ coefficients on a device
class _TorchCoeffs:
    """``coef(a)``: a numpy coefficient array ``a`` as a tensor on ``device``, made on first
    use and kept.  Keyed by the memory ``a`` views (address, shape, strides, dtype), so a
    fresh view of the same coefficients (``coeffs.sos[m]``) finds its tensor; the cache
    keeps that memory alive, so the address cannot be reused by other values.
    Coefficients are designed once and never written, which this relies on."""

    def __init__(self, device):
        self.device = device
        self.cache: dict[tuple, tuple[np.ndarray, Any]] = {}

    def __deepcopy__(self, memo):     # shared by copies, as the kernel sets that hold it
        return self

    def __copy__(self):
        return self

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


def _device_coeffs(device) -> _TorchCoeffs:
    """The coefficient cache of ``device`` (one per device, shared by every stage)."""
    key = str(device)
    c = _coef_by_device.get(key)
    if c is None:
        c = _coef_by_device[key] = _TorchCoeffs(device)
    return c


#: one lock for every Triton module's launches: the interpreter's patching is process-wide
_INTERPRETER_LOCK = threading.Lock()


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _serialized(fn: Callable) -> Callable:
    """``fn`` (a Triton kernel's launcher) under one process-wide lock: Triton's
    interpreter swaps ``triton.language`` functions for its own while a kernel runs, so
    two threads interpreting kernels at once break each other ("Did you forget to add
    @triton.jit?").  Compiled GPU kernels need no lock."""
    lock = _INTERPRETER_LOCK

    def launch(*a, **k):
        with lock:
            return fn(*a, **k)
    launch.__name__ = getattr(fn, "__name__", "launch")
    launch.__wrapped__ = fn
    return launch


# ------------------------------------------------------------------ a stage's kernels
def host_buffer(out, shape: tuple, dtype) -> np.ndarray:
    """``out`` if it is a C-contiguous numpy array of exactly ``shape`` and ``dtype`` (a
    chain hands back a stage's previous output as its work buffer for the next block of
    the same size), else a new uninitialised array."""
    if (out is not None and out.shape == shape and out.dtype == dtype
            and out.flags.c_contiguous):
        return out
    return np.empty(shape, dtype)


def device_buffer(out, shape: tuple, like):
    """:func:`host_buffer` for torch: ``out`` if it is a contiguous tensor of ``shape`` in
    ``like``'s dtype on its device, else a new uninitialised one there."""
    if (out is not None and tuple(out.shape) == shape and out.dtype == like.dtype
            and out.device == like.device and out.is_contiguous()):
        return out
    import torch

    return torch.empty(shape, dtype=like.dtype, device=like.device)


class _Bound:
    """A bound kernel set: the kernels as attributes (``kern.gammatone4``), shared by every
    copy of a stage (a deep copy of a stage keeps the same set: kernels and the
    coefficient cache are never written by a stream)."""

    backend = ""
    device = None

    def __init__(self, functions: dict):
        self.__dict__.update(functions)
        self.names = tuple(functions)

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def __repr__(self):
        return f"<{self.backend} kernels {', '.join(self.names)}>"


class NumbaKernels(_Bound):
    """The numba kernels of a stage with the operations of the numba backend: coefficient
    arrays as they are, numpy work buffers, numpy dtypes."""

    backend = "numba"

    @staticmethod
    def coef(a):
        """A coefficient array as this backend's kernels take it (numpy: itself)."""
        return a

    @staticmethod
    def buffer(out, shape, like):
        """The output array of a ``process_tm`` call: ``out`` where it fits
        (:func:`host_buffer`), else a new array in ``like``'s dtype."""
        return host_buffer(out, tuple(shape), like.dtype)

    @staticmethod
    def empty(shape, like):
        """A new uninitialised array of ``shape`` in ``like``'s dtype."""
        return np.empty(shape, like.dtype)

    @staticmethod
    def zeros(shape, like):
        """A new zeroed array of ``shape`` in ``like``'s dtype."""
        return np.zeros(shape, like.dtype)

    @staticmethod
    def contiguous(x):
        return x if x.flags.c_contiguous else np.ascontiguousarray(x)

    @staticmethod
    def int64(a):
        """``a`` (an integer value kept in a float or integer array, e.g. a phase) as an
        int64 array."""
        return np.asarray(a, dtype=np.int64)

    @staticmethod
    def is64(x) -> bool:
        """True for a float64 block."""
        return x.dtype == np.float64

    @staticmethod
    def dtype(x) -> np.dtype:
        """The numpy dtype of a block."""
        return x.dtype

    @staticmethod
    def scratch(shape, x):
        """Zeroed scratch memory of ``shape`` in ``x``'s dtype for a numba kernel (the
        Triton twins keep theirs in registers and get ``None``)."""
        return np.zeros(shape, x.dtype)

    @staticmethod
    def state(st: dict) -> dict:
        """A stage's state (numpy arrays) as this backend keeps it."""
        return st


class TritonKernels(_Bound):
    """The Triton twins of a stage's kernels on ``device``, with the operations of the
    Triton backend: coefficient arrays as cached tensors on the device (``coef``), torch
    work buffers, torch dtypes."""

    backend = "triton"

    def __init__(self, functions: dict, device):
        super().__init__(functions)
        self.device = device
        self.coef = _device_coeffs(device)

    @staticmethod
    def buffer(out, shape, like):
        return device_buffer(out, tuple(shape), like)

    @staticmethod
    def empty(shape, like):
        import torch

        return torch.empty(shape, dtype=like.dtype, device=like.device)

    @staticmethod
    def zeros(shape, like):
        import torch

        return torch.zeros(shape, dtype=like.dtype, device=like.device)

    @staticmethod
    def contiguous(x):
        return x.contiguous()

    @staticmethod
    def int64(a):
        """:meth:`NumbaKernels.int64`: a contiguous int64 tensor on ``a``'s device."""
        import torch

        return a.to(torch.int64).contiguous()

    @staticmethod
    def is64(x) -> bool:
        import torch

        return x.dtype == torch.float64

    @staticmethod
    def dtype(x) -> np.dtype:
        return np.dtype(str(x.dtype).removeprefix("torch."))

    @staticmethod
    def scratch(shape, x):
        return None

    def state(self, st: dict) -> dict:
        import torch

        return {k: torch.from_numpy(np.ascontiguousarray(v)).to(self.device)
                for k, v in st.items()}


def _named(functions: Iterable[Callable]) -> dict:
    return {f.__name__: f for f in functions}


class Kernels:
    """The kernels of a stage, declared once in the stage's module, per backend::

        def _triton():                     # the Triton twins, imported when first bound
            from . import gammatone_triton
            return (gammatone_triton.gammatone4,)

        class Gammatone(Stage):
            kernels = Kernels(numba=(gammatone4,), triton=_triton)

    numba  : the numba kernels (functions); ``process_tm`` calls them by their names as
             attributes of the bound set (``self.kern.gammatone4(...)``).
    triton : a function of no arguments that imports the stage's Triton module and returns
             the Triton twins, one per numba kernel, with the same names and arguments;
             ``None``: the stage has no Triton path.
    uses   : kernel sets shared with other stages (:data:`rtamt.engine.sos.SOS`), bound
             together with the stage's own.
    """

    def __init__(self, numba: Iterable[Callable] = (), triton: Callable | None = None,
                 uses: Iterable[Kernels] = ()):
        self.numba = _named(numba)
        self.triton = triton
        self.uses = tuple(uses)
        self._numba_bound: NumbaKernels | None = None

    @property
    def parts(self) -> tuple:
        """The shared sets this one uses, then itself."""
        return tuple(p for u in self.uses for p in u.parts) + (self,)

    @property
    def has_triton(self) -> bool:
        return all(p.triton is not None for p in self.parts if p.numba)

    def bind(self, backend: str, device=None) -> _Bound:
        """The kernels of ``backend`` (on ``device`` for Triton), bound once: the numba set
        is made once per declaration; the Triton set imports the Triton modules on first
        use (their launches serialised under Triton's interpreter) and keeps ``device``'s
        coefficient cache.  Raises :class:`RtamtBackendError` for a set without Triton
        twins."""
        if backend == "numba":
            if self._numba_bound is None:
                fns = {}
                for p in self.parts:
                    fns.update(p.numba)
                self._numba_bound = NumbaKernels(fns)
            return self._numba_bound
        if backend != "triton":
            raise RtamtBackendError(f"unknown backend {backend!r}; choose from {BACKENDS}")
        fns = {}
        for p in self.parts:
            if not p.numba:
                continue
            if p.triton is None:
                raise RtamtBackendError(
                    f"no Triton kernels for {', '.join(p.numba)}; use backend='numba'")
            twins = _named(p.triton())
            if set(twins) != set(p.numba):
                raise RtamtBackendError(
                    f"the Triton twins {sorted(twins)} do not match the numba kernels "
                    f"{sorted(p.numba)}")
            fns.update(twins)
        if _interpreting():
            fns = {k: _serialized(f) for k, f in fns.items()}
        return TritonKernels(fns, device)


def declare_kernels(cls, flag: str) -> None:
    """For a class whose body declares ``kernels`` (a :class:`Kernels`; a stage, a gradient
    rule), called from its ``__init_subclass__``: its numba set as ``cls.kern``, and
    ``cls.<flag>`` (whether it runs on the Triton backend) from whether the declaration has
    Triton twins, unless the class body sets it."""
    decl = cls.__dict__.get("kernels")
    if decl is not None:
        cls.kern = decl.bind("numba")
        if flag not in cls.__dict__:
            setattr(cls, flag, decl.has_triton)


class kernel_method:
    """Decorator of a stage's ``process_tm(stage, coeffs, state, x, out=None)``: called on
    a stage object, ``stage`` is that object and ``stage.kern`` the kernels its ``to()``
    bound; called on the class (``StageClass.process_tm(coeffs, state, x)``, the pure
    functional form, and ``StageClass.process``), ``stage`` is the class, whose ``kern``
    is its numba set."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.__doc__ = fn.__doc__
        self.__name__ = fn.__name__

    def __get__(self, obj, cls=None):
        return types.MethodType(self.fn, cls if obj is None else obj)


# ------------------------------------------------------------------ a block's boundary
def _identity(y):
    return y


def as_numpy_block(x: Any) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """Return ``(array, back)``: ``x`` as a numpy array (a torch tensor viewed without copy
    on the CPU, copied from another device) and ``back(y)``, which converts a result to
    ``x``'s library (``torch.from_numpy`` onto the input's device; numpy: ``y`` itself).
    Raises :class:`~rtamt.engine.contract.RtamtInputError` for a torch dtype other than
    float32/float64 or an object that is neither."""
    if type(x) is np.ndarray:
        return x, _identity
    if is_tensor(x):
        import torch

        if x.dtype not in (torch.float32, torch.float64):
            raise RtamtInputError(
                f"torch dtype {x.dtype} is not supported; expected torch.float32 or torch.float64")
        dev = x.device
        arr = x.detach().to("cpu").numpy()

        def back(y, _dev=dev):
            t = torch.from_numpy(y)  # keeps y's strides (see Stage._to_public), no copy
            return t if _dev.type == "cpu" else t.to(_dev)

        return arr, back
    if isinstance(x, np.ndarray):
        return x, _identity
    raise RtamtInputError(f"expected a numpy array or torch tensor, got {type(x).__name__}")


class HostRows:
    """The block boundary of a processor that runs on float64 rows on the numba backend
    (the loudness models), bound once by its ``to()`` (:func:`rows_io`):

    * ``take(x)`` -> ``(a, back)``: the block as a numpy array to validate, and the
      function that hands a result back in ``x``'s library (:func:`as_numpy_block`);
    * ``rows(a)``: validated rows ``a`` (numpy) as the float64 array the kernels take
      (``a`` itself when it is float64);
    * ``hand_out(out, dtype, back, host)``: the outputs ``out`` (``{name: array}``) in the
      input's ``dtype`` (new arrays), through ``back``; the names in ``host`` are float64
      host arrays (frame times), handed back as they are."""

    backend = "numba"
    take = staticmethod(as_numpy_block)

    @staticmethod
    def rows(a: np.ndarray) -> np.ndarray:
        return a.astype(np.float64, copy=False)

    @staticmethod
    def hand_out(out: dict, dtype, back, host: tuple = ()) -> dict:
        return {k: back(v if k in host else v.astype(dtype)) for k, v in out.items()}


class DeviceRows:
    """:class:`HostRows` of the Triton backend on ``device``: blocks are validated on the
    host (``take``, ``back`` unused), the rows go to the device as float64 tensors, the
    outputs stay there as tensors in the input's dtype, and the ``host`` outputs (numpy
    float64) are copied there."""

    backend = "triton"

    def __init__(self, device):
        import torch

        self.device = device
        self._from_numpy = torch.from_numpy
        self._dtypes = {np.dtype(np.float32): torch.float32,
                        np.dtype(np.float64): torch.float64}

    def __deepcopy__(self, memo):         # never written after it is made: shared by copies
        return self

    def __copy__(self):
        return self

    def __reduce__(self):
        return (DeviceRows, (self.device,))

    @staticmethod
    def take(x):
        return as_numpy_block(x)[0], None

    def rows(self, a: np.ndarray):
        return self._from_numpy(np.ascontiguousarray(a, dtype=np.float64)).to(self.device)

    def hand_out(self, out: dict, dtype, back, host: tuple = ()) -> dict:
        tdt, dev, from_numpy = self._dtypes[dtype], self.device, self._from_numpy
        return {k: from_numpy(v).to(dev) if k in host else v.to(tdt) for k, v in out.items()}


def rows_io(backend: str, device=None) -> HostRows | DeviceRows:
    """The block boundary (:class:`HostRows` or :class:`DeviceRows`) of a resolved
    ``(backend, device)``, chosen once by a processor's ``to()``."""
    return HostRows() if backend == "numba" else DeviceRows(device)


# ------------------------------------------------ block and state-leaf helpers
# (what a block path or a slot store needs of either backend's arrays: the one place,
# with the functions above, that looks at an array's type)

def work_buffer(out, shape, dtype, like=None):
    """The output array of a ``process_tm`` call: ``out`` if it is a C-contiguous array of
    exactly ``shape`` and ``dtype`` (a chain hands back a stage's previous output as its
    work buffer for the next block of the same size), else a new uninitialised array.
    With ``like`` a torch tensor the buffer is a tensor in ``like``'s dtype on its device.
    A stage's ``process_tm`` gets the same from its bound kernels (``kern.buffer``)."""
    shape = tuple(shape)
    if like is not None and type(like) is not np.ndarray:
        return device_buffer(out, shape, like)
    return host_buffer(out, shape, dtype)


def time_last(yt):
    """(B, T, C) -> (B, C, T) view, numpy or torch."""
    return yt.transpose(0, 2, 1) if type(yt) is np.ndarray else yt.permute(0, 2, 1)


def zeros_like_leaf(shape, like):
    """Zeros of ``shape`` in the dtype, library and device of ``like``."""
    if type(like) is np.ndarray:
        return np.zeros(shape, like.dtype)
    import torch
    return torch.zeros(shape, dtype=like.dtype, device=like.device)


def copy_leaf(a):
    """An own copy of ``a`` (same library, dtype and device)."""
    return np.array(a, copy=True) if type(a) is np.ndarray else a.clone()


def leaf_bytes(a) -> bytes:
    """The bytes of ``a`` (a numpy array directly, a tensor through a host copy)."""
    return a.tobytes() if type(a) is np.ndarray else to_numpy(a).tobytes()


def take_slots(store, idx: list, out) -> None:
    """Write slots ``idx`` of ``store`` (``(S, *shape)``) into ``out``, a contiguous
    array of ``len(idx) * prod(shape)`` elements (any shape): ``out`` viewed as
    ``(len(idx), *shape)`` gets ``store[idx]``."""
    shape = (len(idx),) + tuple(store.shape[1:])
    if type(store) is np.ndarray:
        np.take(store, idx, axis=0, out=out.reshape(shape))
    else:
        out.view(shape)[...] = store[idx]


def concat_slots(store, idx: list, axis: int, out) -> None:
    """``out`` = slots ``idx`` of ``store`` concatenated along ``axis`` of a slot."""
    if type(store) is np.ndarray:
        np.concatenate([store[i] for i in idx], axis=axis, out=out)
    else:
        import torch
        torch.cat([store[i] for i in idx], dim=axis, out=out)
