"""Triton kernels of the instantaneous compression stages (:mod:`rtamt.nonlinear.compression`).

The CPU path of these stateless stages is plain numpy (no recursion to compile); this is the
same formula once per element on torch tensors, for the Triton backend
(declared with the numpy twins by :data:`rtamt.nonlinear.compression.COMPRESSION`):

* broken stick (King et al. 2019, JASA 145, 2277): ``y = x`` for ``|x| <= knee``, else
  ``sign(x) |x|^n knee^(1-n)``;
* power: ``y = sign(x) |x / knee|^n knee``.

``|x|^n`` is ``exp(n log|x|)`` here (numpy's ``pow`` on the CPU): the two agree within a few
ulps times ``|n log|x||``, well inside 1e-12 relative in float64.  The per-channel factors
``knee^(1-n)`` (broken stick) are computed on the host by numpy, as the CPU path does, once
per design and dtype, and passed in as device tensors.  Arithmetic in the block's dtype, as
numpy does for a float32 block with float32 exponents.

On a GPU ``tl.log``/``tl.exp`` are libdevice's ``log``/``exp`` (within an ulp or two in
float64); in Triton's interpreter they are numpy's.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["broken_stick", "power_compression"]

BLOCK = 256


@triton.jit
def _compress_kernel(x_ptr, y_ptr, n_ptr, f_ptr, k_ptr, N, C, N_STRIDE,
                     POWER: tl.constexpr, BLOCK: tl.constexpr):
    """One element per lane: ``x``/``y`` flat (B*T*C,), channel = index % C; ``n_ptr``
    exponents and ``f_ptr`` the factors ``knee^(1-n)`` (broken stick; unused for power),
    one per channel (``N_STRIDE = 1``) or one for all (``N_STRIDE = 0``); ``k_ptr`` (1,)
    the knee in the block's dtype (a tensor: a Python float argument would reach a compiled
    kernel as float32)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    c = (i % C) * N_STRIDE
    knee = tl.load(k_ptr)
    x = tl.load(x_ptr + i, mask=m, other=0.0)
    n = tl.load(n_ptr + c, mask=m, other=1.0)
    ax = tl.abs(x)
    sgn = tl.where(x > 0, 1.0, tl.where(x < 0, -1.0, 0.0)).to(x.dtype)
    if POWER:
        r = ax / knee
        p = tl.where(r > 0, tl.exp(n * tl.log(tl.where(r > 0, r, 1.0))), 0.0).to(x.dtype)
        y = sgn * p * knee
    else:
        f = tl.load(f_ptr + c, mask=m, other=1.0)
        p = tl.where(ax > 0, tl.exp(n * tl.log(tl.where(ax > 0, ax, 1.0))), 0.0).to(x.dtype)
        y = tl.where(ax > knee, sgn * p * f, x)
    tl.store(y_ptr + i, y, mask=m)


def _launch(x, y, n, f, knee, power):
    if y is None:
        y = torch.empty_like(x)
    assert x.is_contiguous() and y.is_contiguous() and x.shape == y.shape
    assert n.dtype == knee.dtype == x.dtype and knee.shape == (1,)
    N = x.numel()
    if N == 0:
        return y
    C = x.shape[-1]
    assert n.numel() in (1, C)
    _compress_kernel[(triton.cdiv(N, BLOCK),)](x, y, n, n if f is None else f, knee, N, C,
                                               int(n.numel() > 1), POWER=power, BLOCK=BLOCK)
    return y


def broken_stick(x, y, exponent, factor, knee):
    """Broken-stick compression of time-major ``x`` (…, C) into ``y`` (same shape, may be
    ``x``; ``None``: a new tensor), returned.  ``exponent`` and ``factor =
    knee^(1-exponent)``: (1,) or (C,) tensors, ``knee``: (1,) tensor (linear, model
    units), all in ``x``'s dtype on its device."""
    return _launch(x, y, exponent, factor, knee, False)


def power_compression(x, y, exponent, knee):
    """Power-law compression ``sign(x) |x/knee|^n knee`` of time-major ``x`` into ``y``
    (tensors as in :func:`broken_stick`)."""
    return _launch(x, y, exponent, None, knee, True)
