"""State leaves of either backend: the array operations a store of many streams' states
needs (the scheduler's slot stores, :mod:`rtamt.scheduler.groups`).

A state leaf is a numpy array (numba backend) or a torch tensor (Triton backend, on its
device).  Each function here picks the library from the leaf it is given, so code
outside :mod:`rtamt.engine` never tests an array's type.
"""
from __future__ import annotations

import numpy as np

from .backend import to_numpy

__all__ = ["concat_slots", "copy_leaf", "leaf_bytes", "take_slots", "zeros_like_leaf"]


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
