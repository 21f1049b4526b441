"""Checks of a frame stage's gradient rule (:class:`rtamt.loudness.frames_grad.FrameGrad`)
against central finite differences of the stage's own forward pass, w.r.t. each frame
array it reads, each float state entry and its learnable vector."""
from __future__ import annotations

import numpy as np

SKIP_STATE = ("n",)


def run(stage, fr: dict, state: dict):
    """The stage's outputs (by name) and new state for inputs ``fr`` (copied) from
    ``state`` (copied)."""
    f = {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) and k not in ("ends",)
             else v) for k, v in fr.items()}
    st = {k: np.array(v, copy=True) for k, v in state.items()}
    stage.process_tm(f, st)
    return {k: np.array(f[k], dtype=np.float64) for k in stage.writes if k != "ends"}, st


def _loss(stage, fr, state, w_out, w_st):
    out, st = run(stage, fr, state)
    return (sum(float(np.sum(w_out[k] * out[k])) for k in w_out)
            + sum(float(np.sum(w_st[k] * st[k])) for k in w_st))


def check_rule(stage, fr: dict, state: dict, reads=None, th=None, seed=0, eps=1e-6,
               rtol=1e-5, atol=1e-9, skip_state=(), relative=False):
    """Directional derivatives of ``sum w_out * out + sum w_st * new_state`` (random
    weights) along random directions of each read, state entry (not ``skip_state``) and
    ``th``, by the rule and by central differences, agree to ``rtol`` (of the larger
    magnitude) + ``atol``; ``relative``: the directions of the reads scaled by their
    magnitude (inputs over many decades).  Returns the per-check pairs (name, analytic,
    numeric)."""
    rng = np.random.default_rng(seed)
    rule = type(stage).grad_rule()(stage, 1)
    st0 = stage if th is None else rule.stage_for(th)
    out, st = run(st0, fr, state)
    w_out = {k: rng.standard_normal(np.shape(v)) for k, v in out.items()}
    keys = [k for k in state if k not in SKIP_STATE and k not in skip_state]
    w_st = {k: rng.standard_normal(np.shape(state[k])) for k in keys}
    fin = {k: (np.array(v, dtype=np.float64, copy=True) if isinstance(v, np.ndarray) else v)
           for k, v in fr.items()}
    fin["out"] = dict(out)
    if "ends" in stage.writes:
        f2 = dict(fr)
        st2 = {k: np.array(v, copy=True) for k, v in state.items()}
        st0.process_tm(f2, st2)
        fin["out"]["ends"] = f2["ends"]
    mu = {k: np.array(w_st[k], dtype=np.float64, copy=True) for k in keys}
    for k in state:
        if k not in SKIP_STATE and k not in keys:
            mu[k] = np.zeros(np.shape(state[k]))
    gin, gth = rule.backward(st0, fin, {k: np.array(v, copy=True) for k, v in state.items()},
                             {k: w_out.get(k) for k in stage.writes}, mu, th)
    pairs = []
    reads = stage.reads if reads is None else reads
    for k in reads:
        d = rng.standard_normal(np.shape(fr[k]))
        if relative:
            d = d * np.abs(fr[k])
        a = float(np.sum(gin[k] * d))
        fp = dict(fr, **{k: fr[k] + eps * d})
        fm = dict(fr, **{k: fr[k] - eps * d})
        num = (_loss(st0, fp, state, w_out, w_st) - _loss(st0, fm, state, w_out, w_st)) / (2 * eps)
        pairs.append((k, a, num))
    for k in keys:
        d = rng.standard_normal(np.shape(state[k]))
        a = float(np.sum(mu[k] * d))
        sp = dict(state, **{k: state[k] + eps * d})
        sm = dict(state, **{k: state[k] - eps * d})
        num = (_loss(st0, fr, sp, w_out, w_st) - _loss(st0, fr, sm, w_out, w_st)) / (2 * eps)
        pairs.append(("state." + k, a, num))
    if th is not None:
        for i in range(len(th)):
            e = np.zeros(len(th))
            e[i] = eps
            lp = _loss(rule.stage_for(th + e), fr, state, w_out, w_st)
            lm = _loss(rule.stage_for(th - e), fr, state, w_out, w_st)
            pairs.append((f"theta[{i}]", float(gth[i]), (lp - lm) / (2 * eps)))
    for name, a, num in pairs:
        assert abs(a - num) <= rtol * max(abs(a), abs(num)) + atol, (name, a, num)
    return pairs
