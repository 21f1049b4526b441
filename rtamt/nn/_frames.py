"""Autograd through the frame stages of the loudness models (:class:`rtamt.models.
Glasberg2002`, :class:`rtamt.models.Moore2016`) in a :class:`rtamt.nn.ChainLayer`.

One ``torch.autograd.Function`` (:class:`FrameFunction`) runs a block through the model's
calibration and frame stages, as the model's pure ``process`` does (the same kernels in
the same order: the outputs are the streaming model's bit for bit), and returns every
frame array the stages wrote (``'stl'``, ``'N'``, ``'spec'``, ...) with the new state; the
layer packs the public outputs from them with torch (the model's own ``_pack``, which
takes numpy arrays and tensors alike), so that autograd reaches the frames.

Backward: the block is run again from the saved input and incoming state, keeping what
each stage read; then the stages' gradient rules (:class:`rtamt.loudness.frames_grad.
FrameGrad`, found through ``type(stage).grad_rule()``) run in reverse, each mapping the
gradients of what it wrote to those of what it read and the gradient of its outgoing state
to that of its incoming state (the carried state chains blocks: two blocks give the
gradient of one call).  Learnable stages run the stage their rule builds for ``theta``
(:meth:`~rtamt.loudness.frames_grad.FrameGrad.stage_for`).  This module knows no stage.

Two paths, chosen when the layer is bound (:meth:`rtamt.nn.ChainLayer.to`): the host path
(numba kernels on float64 numpy arrays; a block on another device is copied to the host
and back) and the device path of a Triton-bound layer (the calibration and the frame
stages of a copy of the model bound to the Triton twins, the rules' Triton adjoints: the
block, the frames, the tape, the float state and every gradient stay float64 tensors on
the block's device; only the frame clock, one integer per stream, is read on the host, as
the Triton-bound model keeps it, with the frames' end samples).
"""
from __future__ import annotations

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from ._autograd import param_np

__all__ = ["FrameFunction", "run_frames", "frame_rows"]

#: entries of a block's frames that are not frame arrays
_NOT_FRAMES = ("R", "F", "ends", "rows")


class _Call:
    """What one call passes to :class:`FrameFunction`: the layer, the names of its
    learnable stages (``theta`` order), the first stage a gradient is wanted through, and,
    after the forward pass, the frame arrays' names and the frames' end samples."""

    def __init__(self, layer, learn: list, start: int):
        self.layer, self.learn, self.start = layer, learn, start
        self.out_keys: tuple = ()
        self.ends = None


def _stages(layer, learn: list, thetas) -> list:
    """The stage each part runs: its rule's stage for its ``theta`` when learnable (bound
    as the rule is)."""
    th = dict(zip(learn, thetas))
    return [p.grad.stage_for(param_np(th[p.name])) if p.name in th else p.run_stage
            for p in layer.parts]


def frame_rows(layer, x: torch.Tensor):
    """The block ``x`` as the float64 rows ``(R, T)`` the model's calibration takes: a
    numpy array on the host path, a contiguous tensor on ``x``'s device on the device
    path."""
    if layer.on_device:
        return x.detach().to(torch.float64).reshape(-1, x.shape[-1]).contiguous()
    return x.detach().cpu().numpy().astype(np.float64).reshape(-1, x.shape[-1])


def _forward(layer, stages, state: dict, x: torch.Tensor, record: bool):
    """The calibration and the frame stages on ``x`` from ``state`` (nested per stage,
    advanced in place; numpy, or tensors on the device path): the block's frames, and
    with ``record`` per stage the copies of what it read and its incoming state."""
    rows = frame_rows(layer, x)
    cal, dev = layer.calibration, layer.on_device
    if cal is not None and dev:
        cal = layer._dev_model.stages[0]
    fr = {"rows": rows if cal is None else cal.process_tm(cal.coeffs, {}, rows)}
    tape = []
    for p, s in zip(layer.parts, stages):
        if record:
            # on the device every frame and float state entry is a float64 tensor there;
            # the frame clock a host array
            fin = {k: (fr[k].clone() if dev else np.array(fr[k], dtype=np.float64, copy=True))
                   for k in s.reads}
            fin.update({k: fr[k] for k in ("R", "F", "ends") if k in fr})
            sin = {k: (v.clone() if dev and k not in p.shared else np.array(v, copy=True))
                   for k, v in state[p.name].items()}
        s.process_tm(fr, state[p.name])
        if record:
            fin["out"] = {k: fr[k] for k in s.writes}
            tape.append((fin, sin))
    return fr, tape


def _nested(layer, flat, B: int) -> dict:
    """The stages' own states (numpy, nested per stage) of the flat batch-first tensors."""
    out, i = {}, 0
    for p in layer.parts:
        n = len(p.keys)
        out[p.name] = p.to_model(dict(zip(p.keys, flat[i:i + n])), B)
        i += n
    return out


def _tensor64(layer, a, dev) -> torch.Tensor:
    """Frame array ``a`` (numpy on the host path, a tensor on the device path) as a
    contiguous float64 tensor on ``dev``."""
    if layer.on_device:
        return a.to(torch.float64).contiguous()
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).to(dev)


def _grad64(layer, gv: torch.Tensor):
    """An output gradient as the rules take it: float64 numpy on the host path, a
    contiguous float64 tensor on the device path."""
    if layer.on_device:
        return gv.detach().to(torch.float64).contiguous()
    return gv.detach().cpu().numpy().astype(np.float64)


class FrameFunction(torch.autograd.Function):
    """``FrameFunction.apply(call, x, *thetas, *state) -> (*frames, *new_state)``: one block
    of a frame model's layer (see the module docstring); ``state`` and ``new_state`` are
    the layer's batch-first tensors in the parts' key order, ``frames`` the arrays named
    by ``call.out_keys`` (float64)."""

    @staticmethod
    def forward(ctx, call, x, *args):
        layer = call.layer
        nth = len(call.learn)
        thetas, flat = args[:nth], args[nth:]
        B = x.shape[0]
        state = _nested(layer, flat, B)
        fr, _ = _forward(layer, _stages(layer, call.learn, thetas), state, x, False)
        call.out_keys = tuple(k for k in fr if k not in _NOT_FRAMES)
        call.ends = fr["ends"]
        dev = x.device
        frames = tuple(_tensor64(layer, fr[k], dev) for k in call.out_keys)
        new = []
        for p in layer.parts:
            st = p.from_model(state[p.name], B, dev)
            new.extend(st[k] for k in p.keys)
        ctx.call, ctx.B = call, B
        ctx.save_for_backward(x, *args)
        ctx.mark_non_differentiable(*[v for v in new if not v.is_floating_point()])
        return frames + tuple(new)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        call, B = ctx.call, ctx.B
        layer = call.layer
        x, *args = ctx.saved_tensors
        nth = len(call.learn)
        thetas, flat = args[:nth], args[nth:]
        nout = len(call.out_keys)
        stages = _stages(layer, call.learn, thetas)
        _, tape = _forward(layer, stages, _nested(layer, flat, B), x, True)
        g = {k: _grad64(layer, gv) for k, gv in zip(call.out_keys, grads[:nout])
             if gv is not None}
        gflat = list(grads[nout:])
        g_state = [None] * len(flat)
        g_theta = [None] * nth
        i0 = sum(len(p.keys) for p in layer.parts)
        for j in range(len(layer.parts) - 1, call.start - 1, -1):
            p, s = layer.parts[j], stages[j]
            i0 -= len(p.keys)
            keys = [k for k, v in zip(p.keys, flat[i0:i0 + len(p.keys)])
                    if v.is_floating_point()]
            gb = {}
            for q, k in enumerate(p.keys):       # the clock (an integer) as it is
                v, gv = flat[i0 + q], gflat[i0 + q]
                gb[k] = v if k not in keys else (torch.zeros_like(v) if gv is None else gv)
            mu = {k: (v if layer.on_device else np.ascontiguousarray(v, dtype=np.float64))
                  for k, v in p.to_model(gb, B).items() if k in keys}
            fin, sin = tape[j]
            want = p.name in call.learn and ctx.needs_input_grad[2 + call.learn.index(p.name)]
            th = param_np(thetas[call.learn.index(p.name)]) if want else None
            gin, gth = p.grad.backward(s, fin, sin, {k: g.pop(k, None) for k in s.writes},
                                       mu, th)
            for k, v in gin.items():
                g[k] = v if k not in g else g[k] + v
            if gth is not None:
                t = thetas[call.learn.index(p.name)]
                g_theta[call.learn.index(p.name)] = torch.from_numpy(
                    np.asarray(gth, dtype=np.float64)).to(t.device, t.dtype)
            back = p.from_model(mu, B, x.device)
            for k in keys:
                g_state[i0 + p.keys.index(k)] = back[k]
        gx = None
        if ctx.needs_input_grad[1] and "rows" in g:
            gain = 1.0 if layer.calibration is None else float(layer.calibration.gain)
            gr = g["rows"] * gain
            if layer.on_device:
                gx = gr.reshape(x.shape).to(x.dtype)
            else:
                gx = torch.from_numpy(np.ascontiguousarray(gr).reshape(x.shape)).to(
                    x.device, x.dtype)
        return (None, gx, *g_theta, *g_state)


class _HostCast(torch.autograd.Function):
    """A host output's cast to the input's float dtype by numpy in the calling thread, as
    the forward-only path casts it (``astype``), so the two agree bit for bit whatever
    the thread's flush-to-zero state (torch may cast a large tensor in its worker
    threads, which do not flush float32 subnormals); the gradient is cast back."""

    @staticmethod
    def forward(ctx, v, dtype):
        ctx.src = v.dtype
        return torch.from_numpy(np.ascontiguousarray(v.detach().numpy()).astype(
            np.float32 if dtype == torch.float32 else np.float64))

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.src), None


def run_frames(layer, x: torch.Tensor, state: dict, start):
    """One block of a frame model's layer with gradients (from stage ``start`` on; ``None``:
    none wanted, the learnable stages' values used): ``(outputs, new state)`` as
    :meth:`rtamt.nn.ChainLayer._run_frames` returns them."""
    m, B = layer.model, x.shape[0]
    learn = [p.name for p in layer.parts if p.name in layer.theta]
    flat, names = [], []
    for keys in layer._keys:
        flat.extend(state[f] for f in keys)
        names.extend(keys)
    call = _Call(layer, learn, len(layer.parts) if start is None else start)
    out = FrameFunction.apply(call, x, *[layer.theta[n] for n in learn], *flat)
    nout = len(call.out_keys)
    fr = dict(zip(call.out_keys, out[:nout]))
    R = B * layer.n_in
    fr.update(R=R, F=int(call.ends.size))
    lead = (B,) if layer.n_in == 1 else (B, layer.n_in)
    mode = {1: "mono", 2: "stereo"}[layer.n_in]
    packed = m._pack(fr, lead, mode)
    ys = {k: (v.to(x.dtype) if layer.on_device or v.dtype == x.dtype else
              _HostCast.apply(v, x.dtype)) for k, v in packed.items()}
    ft = m.spectrum.frame_time(call.ends)
    ys["frame_time"] = torch.from_numpy(np.asarray(
        ft - m.pre_delay_s if m.pre_delay_s else ft)).to(x.device)
    new = dict(zip(names, out[nout:]))
    return (ys if layer.output == "all" else ys[layer._out]), new
