"""Triton versions of the per-sample recursions of :mod:`rtamt.engine.kernels`.

This module mirrors :mod:`rtamt.engine.kernels` kernel by kernel: each public function
has the name, the argument order and the argument meaning of the numba kernel it mirrors,
but takes torch tensors (all on one device) instead of numpy arrays.  Coefficient
tensors are float64 as in numba (except the float32 coefficient row set of the
modulation bank, ``ModFilterbankCoeffs.bp_coef32``, which numba also uses as is); state,
``x`` and ``y`` tensors have the stream's dtype (float32 or float64); flags and counts
stay Python scalars.  States are advanced in place and ``y`` is a preallocated output
that the kernel writes; every tensor passed in must be contiguous.

It is imported only for ``backend='triton'``: importing triton costs start-up time and
triton is an optional extra (``pip install -e '.[gpu]'``).

Layout of the work: one Triton lane per independent recursion, i.e. per (stream,
channel) or (stream, filter); a program runs :data:`BLOCK` lanes (the tail is masked).
A lane loads its state once, runs the block's ``T`` samples in a ``for t in range(T)``
loop inside the kernel, writes ``y[b, t, ...]`` sample by sample and stores its state
back at the end.  ``T`` is only a loop bound, never an operand, so the arithmetic applied
to sample ``t`` depends only on the state and on ``x[t]``: any block partition gives
bit-identical results on this path, as on the numba path.

dtype semantics follow the numba kernels exactly: where numba multiplies a float64
coefficient by a state or input value, the product is formed in float64 here too and the
state is rounded to its own dtype after every sample; the modulation bank's complex
one-pole filters run in the dtype of their coefficients (float32 arithmetic for float32
streams) with the fused multiply-adds that the numba version spells out
(:func:`rtamt.engine.intrinsics.fma`), as ``tl.fma`` in the same places.

The kernels use only ``tl.load``/``tl.store`` with masks, ``tl.where``, ``tl.fma``,
``tl.sqrt``/``tl.sqrt_rn``, ``tl.maximum``, arithmetic, ``tl.constexpr`` flags and
``range`` loops over scalar kernel arguments.  Their results are checked only with
``TRITON_INTERPRET=1`` on CPU tensors (no GPU here); every kernel also compiles to a
cubin for sm_80 with Triton 3.9's CUDA backend (``triton.compile`` with a
``GPUTarget``, no device needed), float32 and float64, with every ``tl.constexpr``
combination.  See each kernel's docstring for what could not be checked on hardware.
Numba compiles :func:`~rtamt.engine.kernels.gammatone4`, ``sos_shared`` and
``cplx_biquad_bank`` with FMA contraction allowed; their Triton launches pass
``enable_fp_fusion=True`` (contraction allowed; the default of Triton 3.9, but 3.10
changes it) and the modulation bank's ``enable_fp_fusion=False``, as numba's exact
build.  Where contraction is allowed the two compilers may fuse different products,
which changes the last bits only (the tests allow 1e-12 relative in float64).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["BLOCK", "gammatone4", "sos_shared", "modfb_efilt", "cplx_onepole_bank",
           "cplx_biquad_bank"]

BLOCK = 64
"""Lanes (independent recursions) per Triton program; a power of two (``tl.arange``)."""

_NUM_WARPS = 2
"""Warps per program: 64 threads for the :data:`BLOCK` = 64 lanes (ignored by the
interpreter)."""


def _grid(n_lanes: int) -> tuple:
    return (triton.cdiv(n_lanes, BLOCK),)


def _contiguous(**tensors) -> None:
    for name, t in tensors.items():
        assert t.is_contiguous(), f"{name} must be contiguous"


@triton.jit
def _lanes(N, W, BLOCK: tl.constexpr):
    """This program's lanes: mask ``i < N`` and (row, column) of lane ``i`` in a
    row-major (rows, W) lane grid, int64 (stream, channel or filter)."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    b = i // W
    return i < N, b, i - b * W


# --- gammatone ------------------------------------------------------------------------


@triton.jit
def _gt_section(pr, pi, sr, si, ur, ui):
    """One complex one-pole section ``z <- p z + u`` in float64 on state ``(sr, si)``
    (state dtype); returns the new state rounded to that dtype and the float64 value."""
    ar = sr.to(tl.float64)
    ai = si.to(tl.float64)
    zr = pr * ar - pi * ai + ur
    zi = pr * ai + pi * ar + ui
    return zr.to(sr.dtype), zi.to(si.dtype), zr, zi


@triton.jit
def _gammatone4_kernel(lanes_ptr, L, sr_ptr, si_ptr, x_ptr, y_ptr, N, T, C,
                       BLOCK: tl.constexpr):
    m, b, c = _lanes(N, C, BLOCK)
    pr = tl.load(lanes_ptr + c, mask=m, other=0.0)
    pi = tl.load(lanes_ptr + L + c, mask=m, other=0.0)
    pg = tl.load(lanes_ptr + 2 * L + c, mask=m, other=0.0)
    so = b * (4 * C) + c
    r0 = tl.load(sr_ptr + so, mask=m, other=0.0)
    r1 = tl.load(sr_ptr + so + C, mask=m, other=0.0)
    r2 = tl.load(sr_ptr + so + 2 * C, mask=m, other=0.0)
    r3 = tl.load(sr_ptr + so + 3 * C, mask=m, other=0.0)
    j0 = tl.load(si_ptr + so, mask=m, other=0.0)
    j1 = tl.load(si_ptr + so + C, mask=m, other=0.0)
    j2 = tl.load(si_ptr + so + 2 * C, mask=m, other=0.0)
    j3 = tl.load(si_ptr + so + 3 * C, mask=m, other=0.0)
    xo = b * T
    yo = b * T * C + c
    for t in range(T):
        xv = tl.load(x_ptr + xo + t, mask=m, other=0.0).to(tl.float64)
        # section 1 has the real input x and no imaginary input
        ar = r0.to(tl.float64)
        ai = j0.to(tl.float64)
        zr = pr * ar - pi * ai + xv
        zi = pr * ai + pi * ar
        r0 = zr.to(r0.dtype)
        j0 = zi.to(j0.dtype)
        r1, j1, zr, zi = _gt_section(pr, pi, r1, j1, zr, zi)
        r2, j2, zr, zi = _gt_section(pr, pi, r2, j2, zr, zi)
        r3, j3, zr, zi = _gt_section(pr, pi, r3, j3, zr, zi)
        tl.store(y_ptr + yo + t * C, (pg * zr).to(y_ptr.dtype.element_ty), mask=m)
    tl.store(sr_ptr + so, r0, mask=m)
    tl.store(sr_ptr + so + C, r1, mask=m)
    tl.store(sr_ptr + so + 2 * C, r2, mask=m)
    tl.store(sr_ptr + so + 3 * C, r3, mask=m)
    tl.store(si_ptr + so, j0, mask=m)
    tl.store(si_ptr + so + C, j1, mask=m)
    tl.store(si_ptr + so + 2 * C, j2, mask=m)
    tl.store(si_ptr + so + 3 * C, j3, mask=m)


def gammatone4(lanes, sr, si, x, y):
    """Cascade of four identical complex one-pole sections per channel (Triton).

    Mirrors :func:`rtamt.engine.kernels.gammatone4`: ``y = gain * Re( x filtered by
    1 / (1 - p z^-1)^4 )``, the AMT all-pole gammatone (Hohmann 2002, Acta Acustica 88,
    433-442 / Lyon 1997 form, see :mod:`rtamt.filterbank.gammatone`).

    lanes  : (3, L) float64  rows pole real part, pole imaginary part, real output gain
                             (``GammatoneCoeffs.lanes``; only the first C lanes are read).
    sr, si : (B, 4, C)       section states (real, imag), stream dtype, advanced in place.
    x      : (B, T)          input, stream dtype.
    y      : (B, T, C)       output, stream dtype.

    One lane per (stream, channel).  Every product is formed in float64 (float64 poles
    times the widened state); each section's new state is rounded to the state's dtype
    and stored, while the float64 value feeds the next section, as in numba; the output
    ``gain * Re z4`` is rounded to ``y``'s dtype.  Not checked on hardware: float64
    arithmetic on the GPU (slow on consumer GPUs, but needed to match numba for float32
    streams too).
    """
    B, T = x.shape
    C = sr.shape[2]
    _contiguous(lanes=lanes, sr=sr, si=si, x=x, y=y)
    assert lanes.dtype == torch.float64 and lanes.shape[0] == 3 and lanes.shape[1] >= C
    assert sr.shape == si.shape == (B, 4, C) and y.shape == (B, T, C)
    N = B * C
    if N == 0:
        return
    _gammatone4_kernel[_grid(N)](lanes, lanes.shape[1], sr, si, x, y, N, T, C,
                                 BLOCK=BLOCK, num_warps=_NUM_WARPS, enable_fp_fusion=True)


# --- shared real SOS cascade ----------------------------------------------------------


@triton.jit
def _sos_load(sos_ptr, s):
    """Coefficients ``b0 b1 b2 a1 a2`` of section ``s`` (scalars, float64) and whether it
    is first-order (``b2 == a2 == 0``)."""
    b0 = tl.load(sos_ptr + s * 6)
    b1 = tl.load(sos_ptr + s * 6 + 1)
    b2 = tl.load(sos_ptr + s * 6 + 2)
    a1 = tl.load(sos_ptr + s * 6 + 4)
    a2 = tl.load(sos_ptr + s * 6 + 5)
    return b0, b1, b2, a1, a2, (b2 == 0.0) & (a2 == 0.0)


@triton.jit
def _sos_step(v, z0, z1, b0, b1, b2, a1, a2, first):
    """One sample of a DF-II transposed section on float64 input ``v``: returns the
    float64 output and the new memories in the state's dtype; a first-order section
    (``first``) leaves ``z1`` as it was (numba's shorter loop does not touch it)."""
    out = b0 * v + z0.to(tl.float64)
    n0 = b1 * v - a1 * out + z1.to(tl.float64)
    n1 = tl.where(first, z1, (b2 * v - a2 * out).to(z1.dtype))
    return out, n0.to(z0.dtype), n1


@triton.jit
def _sos_kernel(sos_ptr, S, zi_ptr, x_ptr, y_ptr, N, T, C, F, yoff,
                RECTIFY: tl.constexpr, HAS_SOS: tl.constexpr, BLOCK: tl.constexpr):
    m, b, c = _lanes(N, C, BLOCK)
    ydt = y_ptr.dtype.element_ty
    xo = b * T * C + c
    yo = b * T * F + yoff + c
    zo = b * S * 2 * C + c
    # pass 0: input (rectified, rounded to y's dtype as numba's copy into y does), then
    # section 0; each lane reads x[t] before it writes y[t], so y may be x
    if HAS_SOS:
        b0, b1, b2, a1, a2, first = _sos_load(sos_ptr, 0)
        z0 = tl.load(zi_ptr + zo, mask=m, other=0.0)
        z1 = tl.load(zi_ptr + zo + C, mask=m, other=0.0)
    for t in range(T):
        xv = tl.load(x_ptr + xo + t * C, mask=m, other=0.0)
        if RECTIFY:
            xv = tl.maximum(xv, 0.0)
        yv = xv.to(ydt)
        if HAS_SOS:
            o0, z0, z1 = _sos_step(yv.to(tl.float64), z0, z1, b0, b1, b2, a1, a2, first)
            yv = o0.to(ydt)
        tl.store(y_ptr + yo + t * F, yv, mask=m)
    if HAS_SOS:
        tl.store(zi_ptr + zo, z0, mask=m)
        tl.store(zi_ptr + zo + C, z1, mask=m)
    # passes 1..S-1: section s on y in place (numba also passes each section's output,
    # rounded to y's dtype, to the next section through y)
    for s in range(1, S):
        b0, b1, b2, a1, a2, first = _sos_load(sos_ptr, s)
        zs = zo + s * 2 * C
        z0 = tl.load(zi_ptr + zs, mask=m, other=0.0)
        z1 = tl.load(zi_ptr + zs + C, mask=m, other=0.0)
        for t in range(T):
            yp = y_ptr + yo + t * F
            u = tl.load(yp, mask=m, other=0.0).to(tl.float64)
            o, z0, z1 = _sos_step(u, z0, z1, b0, b1, b2, a1, a2, first)
            tl.store(yp, o.to(ydt), mask=m)
        tl.store(zi_ptr + zs, z0, mask=m)
        tl.store(zi_ptr + zs + C, z1, mask=m)


def sos_shared(sos, rectify, zi, x, y, yoff):
    """Real second-order-section cascade shared by all channels, DF-II transposed (Triton).

    Mirrors :func:`rtamt.engine.kernels.sos_shared`: the difference equations of
    ``scipy.signal.sosfilt`` (Oppenheim & Schafer, *Discrete-Time Signal Processing*,
    3rd ed., sec. 6.5), optionally after half-wave rectification ``max(x, 0)``.

    sos     : (S, 6) float64     sections [b0 b1 b2 a0 a1 a2], a0 == 1.
    rectify : bool
    zi      : (B, S, 2, C)       section states, stream dtype, advanced in place.
    x       : (B, T, C)          input.
    y       : (B, T, Ftot)       output; channel c -> column ``yoff + c``; may be ``x``
                                 itself when Ftot == C and yoff == 0.

    One lane per (stream, channel).  Products are formed in float64 (float64
    coefficients times widened values); each section's output is rounded to ``y``'s
    dtype before the next section and its memories to the state's dtype, as in numba.
    A first-order section (``b2 == a2 == 0``, decided in the kernel from the loaded
    coefficients) leaves ``zi[:, s, 1]`` unchanged, like numba's shorter loop.

    The sections run one after the other over the whole block (section-major): the
    lane loads section s's memories once, runs its T samples reading and writing
    ``y[:, :, yoff + c]`` in place, stores the memories, then moves to section s + 1.
    Each sample gets the same operations as in numba's sample-major order (a section's
    output at t depends only on its memories and its input at t).  Not checked on
    hardware: that a lane's load of ``y[t]`` in pass s + 1 sees its own store of pass s
    (same thread, same address, program order; the lane-to-thread layout is the same in
    both passes since both use the same offset tensor).
    """
    B, T, C = x.shape
    S = sos.shape[0]
    _contiguous(sos=sos, zi=zi, x=x, y=y)
    assert sos.dtype == torch.float64 and sos.shape[1] == 6
    assert zi.shape == (B, S, 2, C) and y.shape[:2] == (B, T)
    F = y.shape[2]
    assert 0 <= yoff and yoff + C <= F
    N = B * C
    if N == 0:
        return
    _sos_kernel[_grid(N)](sos, S, zi, x, y, N, T, C, F, yoff,
                          RECTIFY=bool(rectify), HAS_SOS=S > 0, BLOCK=BLOCK,
                          num_warps=_NUM_WARPS, enable_fp_fusion=True)


# --- modulation bank: complex one-pole filters ('efilt') ------------------------------


@triton.jit
def _efilt_kernel(coef_ptr, Fb, nreal, ch_ptr, st_ptr, x_ptr, y_ptr, N, T, C, F, yoff,
                  F32: tl.constexpr, BLOCK: tl.constexpr):
    m, b, f = _lanes(N, Fb, BLOCK)
    pr = tl.load(coef_ptr + f, mask=m, other=0.0)
    pi = tl.load(coef_ptr + Fb + f, mask=m, other=0.0)
    g = tl.load(coef_ptr + 2 * Fb + f, mask=m, other=0.0)
    sc = tl.load(coef_ptr + 3 * Fb + f, mask=m, other=0.0)
    ch = tl.load(ch_ptr + f, mask=m, other=0)
    real = f < nreal
    so = b * 2 * Fb + f
    wr = tl.load(st_ptr + so, mask=m, other=0.0)
    wi = tl.load(st_ptr + so + Fb, mask=m, other=0.0)
    xo = b * T * C + ch
    yo = b * T * F + yoff + f
    for t in range(T):
        u = tl.load(x_ptr + xo + t * C, mask=m, other=0.0)
        # w <- p w + g u  (numba's _efilt_step, the same fused multiply-adds)
        nr = tl.fma(pr, wr, tl.fma(-pi, wi, g * u))
        wi = tl.fma(pr, wi, pi * wr)
        wr = nr
        # numba's _efilt_out: sc Re w, or sc |w| with a correctly rounded square root
        # (float32 tl.sqrt may be approximate on the GPU; float64 tl.sqrt is rounded)
        if F32:
            mag = sc * tl.sqrt_rn(tl.fma(wr, wr, wi * wi))
        else:
            mag = sc * tl.sqrt(tl.fma(wr, wr, wi * wi))
        tl.store(y_ptr + yo + t * F, tl.where(real, sc * wr, mag), mask=m)
    tl.store(st_ptr + so, wr, mask=m)
    tl.store(st_ptr + so + Fb, wi, mask=m)


_channels: dict = {}


def _channel_of(runs, F, device):
    """Filter -> input channel (F,) int64 from run rows ``[first filter, first channel,
    length]`` (:func:`rtamt.modulation.modfb.channel_runs`).  Built once per ``runs``
    tensor and device (the stages pass the backend's cached coefficient tensor) and kept
    with a reference to ``runs``, so a later tensor at the same address is not mistaken
    for it."""
    key = (id(runs), F, str(device))
    hit = _channels.get(key)
    if hit is not None and hit[0] is runs:
        return hit[1]
    ch = torch.empty(F, dtype=torch.int64)
    for f0, c0, n in torch.as_tensor(runs).reshape(-1, 3).tolist():
        ch[f0:f0 + n] = torch.arange(c0, c0 + n)
    ch = ch.to(device)
    _channels[key] = (runs, ch)
    return ch


def cplx_onepole_bank(runs, nreal, coef, st, x, y, yoff, channel=None):
    """Bank of complex one-pole filters ('efilt', frequency-shifted 1st-order low-pass;
    Triton).

    Mirrors :func:`rtamt.engine.kernels.cplx_onepole_bank`: ``w[n] = g x_ch[n] +
    p w[n-1]`` with complex pole ``p`` (Dau, Kollmeier & Kohlrausch 1997a, JASA 102,
    2892; AMT 0.9.10 ``modfilterbank``); output ``scale * Re(w)`` for filters
    ``f < nreal`` and ``scale * |w|`` for the others.

    runs    : (R, 3) int   ``[first filter, first channel, length]`` (only read when
                           ``channel`` is None).
    nreal   : int          filters 0..nreal-1 output the real part, the rest |w|.
    coef    : (4, F)       rows Re p, Im p, input gain g, output scale; the stream's dtype
                           (``bp_coef`` for float64 streams, ``bp_coef32`` for float32).
    st      : (B, 2, F)    states (real, imag), advanced in place.
    x       : (B, T, C);   y : (B, T, Ftot), filter f -> column ``yoff + f``.
    channel : (F,) int64   input channel per filter (``ModFilterbankCoeffs.bp_channel``);
                           derived from ``runs`` when None.

    One lane per (stream, filter).  All arithmetic is in the dtype of ``coef``/``st``/
    ``x`` (float32 streams: float32 arithmetic), with numba's explicit fused
    multiply-adds: ``Re: fma(pr, ar, fma(-pi, ai, g u))``, ``Im: fma(pr, ai, pi ar)``,
    ``|w| = sqrt(fma(wr, wr, wi wi))`` with a correctly rounded square root
    (``tl.sqrt_rn`` in float32, ``tl.sqrt`` in float64).  No product feeds a plain
    addition, and the launch disables FP fusion, so nothing else is fused.  Compiled (not
    run) for sm_80 with Triton 3.9's CUDA backend, the PTX has only ``fma.rn``,
    ``mul.rn`` and ``sqrt.rn`` arithmetic; the results on a device are not checked.
    """
    B, T, C = x.shape
    Fb = coef.shape[1]
    if channel is None:
        channel = _channel_of(runs, Fb, x.device)
    _contiguous(coef=coef, st=st, x=x, y=y, channel=channel)
    assert coef.dtype == st.dtype == x.dtype == y.dtype, \
        "coef, st, x, y must share the stream's dtype (bp_coef32 for float32 streams)"
    assert coef.shape[0] == 4 and st.shape == (B, 2, Fb) and y.shape[:2] == (B, T)
    assert channel.dtype == torch.int64 and channel.shape == (Fb,)
    F = y.shape[2]
    assert 0 <= yoff and yoff + Fb <= F
    N = B * Fb
    if N == 0:
        return
    _efilt_kernel[_grid(N)](coef, Fb, int(nreal), channel, st, x, y, N, T, C, F, yoff,
                            F32=coef.dtype == torch.float32, BLOCK=BLOCK,
                            num_warps=_NUM_WARPS, enable_fp_fusion=False)


def modfb_efilt(lp_sos, lp_zi, runs, nreal, coef, st, x, y, channel=None):
    """The Dau1997-lineage modulation bank in one call (Triton).

    Mirrors :func:`rtamt.engine.kernels.modfb_efilt`: the shared low-pass cascade
    (:func:`sos_shared`, no rectification) into ``y[..., :C]``, then the complex one-pole
    band-pass bank (:func:`cplx_onepole_bank`) into ``y[..., C:]`` (Dau, Kollmeier &
    Kohlrausch 1997a, JASA 102, 2892; AMT 0.9.10 ``modfilterbank``).

    lp_sos  : (S, 6) float64;  lp_zi : (B, S, 2, C) low-pass states, in place.
    runs    : (R, 3) int  channel runs (read only when ``channel`` is None).
    nreal   : int;  coef : (4, F) in the stream's dtype;  st : (B, 2, F), in place.
    x       : (B, T, C);  y : (B, T, C + F).
    channel : (F,) int64  filter -> input channel (``ModFilterbankCoeffs.bp_channel``).

    Two launches (low-passes on the (stream, channel) lanes, band-passes on the
    (stream, filter) lanes); both read ``x``, which is not ``y``.
    """
    C = x.shape[2]
    sos_shared(lp_sos, False, lp_zi, x, y, 0)
    if coef.shape[1]:
        cplx_onepole_bank(runs, nreal, coef, st, x, y, C, channel=channel)


# --- modulation bank: complex biquads (frequency-shifted Butterworth) -----------------


@triton.jit
def _cbq_kernel(ch_ptr, nreal, b_ptr, a_ptr, sc_ptr, st_ptr, x_ptr, y_ptr, N, Fb, T, C, F,
                yoff, BLOCK: tl.constexpr):
    m, b, f = _lanes(N, Fb, BLOCK)
    ch = tl.load(ch_ptr + f, mask=m, other=0)
    real = f < nreal
    co = f * 6
    b0r = tl.load(b_ptr + co, mask=m, other=0.0)
    b0i = tl.load(b_ptr + co + 1, mask=m, other=0.0)
    b1r = tl.load(b_ptr + co + 2, mask=m, other=0.0)
    b1i = tl.load(b_ptr + co + 3, mask=m, other=0.0)
    b2r = tl.load(b_ptr + co + 4, mask=m, other=0.0)
    b2i = tl.load(b_ptr + co + 5, mask=m, other=0.0)
    a1r = tl.load(a_ptr + co + 2, mask=m, other=0.0)
    a1i = tl.load(a_ptr + co + 3, mask=m, other=0.0)
    a2r = tl.load(a_ptr + co + 4, mask=m, other=0.0)
    a2i = tl.load(a_ptr + co + 5, mask=m, other=0.0)
    sc = tl.load(sc_ptr + f, mask=m, other=0.0)
    so = (b * Fb + f) * 4
    z0r = tl.load(st_ptr + so, mask=m, other=0.0)
    z0i = tl.load(st_ptr + so + 1, mask=m, other=0.0)
    z1r = tl.load(st_ptr + so + 2, mask=m, other=0.0)
    z1i = tl.load(st_ptr + so + 3, mask=m, other=0.0)
    xo = b * T * C + ch
    yo = b * T * F + yoff + f
    for t in range(T):
        v = tl.load(x_ptr + xo + t * C, mask=m, other=0.0).to(tl.float64)
        o_r = b0r * v + z0r.to(tl.float64)
        o_i = b0i * v + z0i.to(tl.float64)
        n0r = b1r * v - (a1r * o_r - a1i * o_i) + z1r.to(tl.float64)
        n0i = b1i * v - (a1r * o_i + a1i * o_r) + z1i.to(tl.float64)
        z1r = (b2r * v - (a2r * o_r - a2i * o_i)).to(z1r.dtype)
        z1i = (b2i * v - (a2r * o_i + a2i * o_r)).to(z1i.dtype)
        z0r = n0r.to(z0r.dtype)
        z0i = n0i.to(z0i.dtype)
        yv = tl.where(real, sc * o_r, sc * tl.sqrt(o_r * o_r + o_i * o_i))
        tl.store(y_ptr + yo + t * F, yv.to(y_ptr.dtype.element_ty), mask=m)
    tl.store(st_ptr + so, z0r, mask=m)
    tl.store(st_ptr + so + 1, z0i, mask=m)
    tl.store(st_ptr + so + 2, z1r, mask=m)
    tl.store(st_ptr + so + 3, z1i, mask=m)


def cplx_biquad_bank(ch, nreal, bcoef, acoef, scale, st, x, y, yoff):
    """Bank of complex-coefficient biquads (DF-II transposed) on real inputs (Triton).

    Mirrors :func:`rtamt.engine.kernels.cplx_biquad_bank`, the frequency-shifted
    Butterworth modulation filters of :mod:`rtamt.modulation.modfb`
    (``filter_type='butterworth'``): a real low-pass prototype ``H(z)`` moved to centre
    ``w0`` by ``H(z e^{-i w0})`` (frequency-shift theorem), so ``Re`` is a band-pass and
    ``|.|`` its envelope; DF-II transposed as in Oppenheim & Schafer, sec. 6.5.

    ch     : (F,) int64         input channel per filter.
    nreal  : int                filters 0..nreal-1 output ``scale Re``, the rest
                                ``scale |.|``.
    bcoef  : (F, 3, 2) float64  numerator (real, imag);  acoef : (F, 3, 2), a0 == 1.
    scale  : (F,) float64
    st     : (B, F, 2, 2)       states [z index, real/imag], stream dtype, in place.
    x      : (B, T, C);  y : (B, T, Ftot), filter f -> column ``yoff + f``.

    One lane per (stream, filter).  Every product is formed in float64; the four
    memories are rounded to the state's dtype after every sample, the output to ``y``'s
    dtype, as in numba.  Not checked on hardware: the results of the float64 arithmetic
    (``tl.sqrt`` in float64 compiles to ``sqrt.rn.f64``).
    """
    B, T, C = x.shape
    Fb = ch.shape[0]
    _contiguous(ch=ch, bcoef=bcoef, acoef=acoef, scale=scale, st=st, x=x, y=y)
    assert ch.dtype == torch.int64
    assert bcoef.dtype == acoef.dtype == scale.dtype == torch.float64
    assert bcoef.shape == acoef.shape == (Fb, 3, 2) and scale.shape == (Fb,)
    assert st.shape == (B, Fb, 2, 2) and y.shape[:2] == (B, T)
    F = y.shape[2]
    assert 0 <= yoff and yoff + Fb <= F
    N = B * Fb
    if N == 0:
        return
    _cbq_kernel[_grid(N)](ch, int(nreal), bcoef, acoef, scale, st, x, y, N, Fb, T, C, F,
                          yoff, BLOCK=BLOCK, num_warps=_NUM_WARPS, enable_fp_fusion=True)


try:  # written separately; this module still imports without it
    from ._adaptloop_triton import adaptloop  # noqa: F401
except ImportError:  # pragma: no cover
    pass
else:
    __all__.append("adaptloop")
