"""Triton kernel of the CASP 2024 inner-hair-cell membrane model; mirrors the numba kernel
:func:`rtamt.ihc.paulick2024.ihc_paulick2024_kernel`.

Model (see :mod:`rtamt.ihc.paulick2024` for the constants and their sources): BM
velocity ``v`` (m/s) -> stereocilia displacement ``d = alpha v`` (Paulick, Relaño-Iborra
& Dau 2024; AMT ``paulick2024_ihc``) -> MET conductance ``G(d) = Gmet / (1 + exp((x0 -
d)/s1) (1 + exp((x0 - d)/s0)))`` (Altoè, Pulkki & Verhulst 2018, Eq. A2) -> one step of
the membrane equation ``Cm dV/dt = G (EP - V) + Gkf (Ekf - V) + Gks (Eks - V)`` (Altoè
et al. 2018, Eqs. A1, A4, A7) per sample, by forward Euler or by the exponential Euler
step of Rush & Larsen (1978), with ``G`` held over the step.

Layout: one Triton lane per (stream, channel), :data:`BLOCK` lanes per program (the tail
masked).  A lane loads its membrane potential once, runs the block's ``T`` samples in a
loop inside the kernel, writes ``y[b, t, c]`` sample by sample and stores the potential
back at the end.  ``T`` is only a loop bound, so the arithmetic applied to sample ``t``
depends only on the state and ``x[t]``: any block partition gives bit-identical results.

dtype semantics (those of the numba kernel): everything is float64 whatever the stream
dtype; the input is widened to float64 on load, the state ``v`` is float64, and the
output ``V - offset`` is rounded to ``y``'s dtype (float32 or float64) on store, once.

The twelve float64 constants travel in one float64 tensor (a Python float kernel argument
would be passed to a compiled kernel as float32); the wrapper makes it once per set of
constants and device and keeps it.  The integrator is a ``tl.constexpr`` flag.

Rounding: on a GPU the float64 ``tl.exp`` is libdevice's ``exp`` (within an ulp; an
overflow to ``inf`` makes ``G`` exactly 0, as in numba) and the division is ``div.rn.f64``;
in Triton's interpreter both are numpy's.  The launch enables FP fusion
(``enable_fp_fusion=True``) because numba compiles the kernel with
``fastmath={'contract'}``; the two compilers may fuse different products, which changes the
last bits only.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["BLOCK", "ihc_paulick2024_kernel"]

BLOCK = 32
"""Lanes (stream, channel) per Triton program; a power of two (``tl.arange``)."""

_CONST_CACHE: dict = {}


@triton.jit
def _model_constants(cst_ptr):
    """The first 11 values of the constant vector (:func:`_constants`): alpha, gmet, x0,
    inv_s0, inv_s1, ep, gkf, ekf, gks, eks, k (``IHCPaulick2024Coeffs``)."""
    return (tl.load(cst_ptr), tl.load(cst_ptr + 1), tl.load(cst_ptr + 2),
            tl.load(cst_ptr + 3), tl.load(cst_ptr + 4), tl.load(cst_ptr + 5),
            tl.load(cst_ptr + 6), tl.load(cst_ptr + 7), tl.load(cst_ptr + 8),
            tl.load(cst_ptr + 9), tl.load(cst_ptr + 10))


@triton.jit
def _ihc_kernel(cst_ptr, v_ptr, x_ptr, y_ptr, N, T, C, METHOD: tl.constexpr,
                BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = i < N
    b = i // C
    c = i - b * C
    alpha, gmet, x0, inv_s0, inv_s1, ep, gkf, ekf, gks, eks, k = _model_constants(cst_ptr)
    offset = tl.load(cst_ptr + 11)
    ydt = y_ptr.dtype.element_ty
    vm = tl.load(v_ptr + i, mask=live, other=0.0)          # v is (B, C): lane i = b C + c
    xo = b * T * C + c
    for t in range(T):
        d = alpha * tl.load(x_ptr + xo + t * C, mask=live, other=0.0).to(tl.float64)
        u = x0 - d
        g = gmet / (1.0 + tl.exp(u * inv_s1) * (1.0 + tl.exp(u * inv_s0)))
        if METHOD == 0:    # forward Euler
            vm = vm + k * (g * (ep - vm) + gkf * (ekf - vm) + gks * (eks - vm))
        else:              # exponential Euler: exact step of the linear ODE at constant g
            gt = g + gkf + gks
            vinf = (g * ep + gkf * ekf + gks * eks) / gt
            vm = vinf + (vm - vinf) * tl.exp(-k * gt)
        tl.store(y_ptr + xo + t * C, (vm - offset).to(ydt), mask=live)
    tl.store(v_ptr + i, vm, mask=live)


def _constants(values: tuple, device) -> torch.Tensor:
    """The float64 constant vector ``values`` on ``device``, made once and kept."""
    key = (str(device), values)
    t = _CONST_CACHE.get(key)
    if t is None:
        if len(_CONST_CACHE) > 64:          # a long-lived process that designs many stages
            _CONST_CACHE.clear()
        t = _CONST_CACHE[key] = torch.tensor(values, dtype=torch.float64, device=device)
    return t


def ihc_paulick2024_kernel(alpha, gmet, x0, inv_s0, inv_s1, ep, gkf, ekf, gks, eks, k,
                           method, offset, v, x, y):
    """BM velocity -> IHC receptor potential, time-major, on torch tensors (Triton).

    Same arguments as the numba kernel :func:`rtamt.ihc.paulick2024.ihc_paulick2024_kernel`:

    alpha (s), gmet (S), x0 (m), inv_s0, inv_s1 (1/m), ep, ekf, eks (V), gkf, gks (S),
    k = dt / Cm (s/F), offset (V): Python floats (``IHCPaulick2024Coeffs``).
    method : 0 forward Euler, 1 exponential Euler (Rush & Larsen 1978).
    v      : (B, C) float64 membrane potential (V), state, advanced in place.
    x      : (B, T, C) float32/float64 BM velocity (m/s).
    y      : (B, T, C) output ``V - offset`` (V), x's dtype; may be ``x``.

    All tensors contiguous and on one device; the grid is ``ceil(B C / BLOCK)`` programs.
    """
    B, T, C = x.shape
    for name, tns in (("v", v), ("x", x), ("y", y)):
        assert tns.is_contiguous(), f"ihc_paulick2024_kernel: {name} must be contiguous"
    assert v.dtype == torch.float64 and tuple(v.shape) == (B, C)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert method in (0, 1)
    n = B * C
    if n == 0 or T == 0:
        return
    cst = _constants(tuple(float(a) for a in (alpha, gmet, x0, inv_s0, inv_s1, ep, gkf, ekf,
                                              gks, eks, k, offset)), x.device)
    _ihc_kernel[(triton.cdiv(n, BLOCK),)](cst, v, x, y, n, T, C, METHOD=int(method),
                                          BLOCK=BLOCK, enable_fp_fusion=True)
