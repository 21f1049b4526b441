"""Snapshots written by earlier releases, migrated once when they are loaded.

A snapshot names the design that wrote it by a fingerprint (:func:`rtamt.engine.contract.
fingerprint` of the stage's ``Params`` and coefficients; a chain's of its stages').  Two
changes of the design's form, not of its arithmetic, changed fingerprints:

* ``spl_ref`` left the ``Params`` of the stages after a model's calibration (issue 30):
  the adaptation loops and the compressions had ``spl_ref = 100`` in every design, and
  their fingerprints covered it (:data:`FORMER_FIELDS`);
* the calibration became a model's first stage, ``stages[0]`` (issue 40): a chain's
  snapshot had no ``calibration`` child, and the chain's fingerprint covered the input
  gain as a number before its stages' fingerprints.

:func:`chain_state` and :func:`stage_state` recognise such a snapshot by recomputing the
fingerprint the earlier release gave the loading object's own design, and return it in
today's form (the same arrays, today's fingerprints, the calibration's empty state added);
any other snapshot is returned as it is, and the usual checks then accept or refuse it.
Nothing here runs on a block path, and only a snapshot whose fingerprint differs from
today's is looked at twice.
"""
from __future__ import annotations

from . import contract

__all__ = ["FORMER_FIELDS", "former_fingerprint", "chain_state", "stage_state"]

#: ``Params`` class name -> the fields it had in earlier releases, with the value every
#: design used (``spl_ref`` went to the models' calibration stage)
FORMER_FIELDS = {
    "AdaptLoopParams": {"spl_ref": 100.0},
    "CompressionParams": {"spl_ref": 100.0},
}


def former_fingerprint(stage, coeffs=None) -> str | None:
    """The fingerprint an earlier release gave ``stage``'s design (``coeffs``: designed at
    the channel count of the snapshot, default the stage's), or ``None`` when it was
    today's."""
    extra = FORMER_FIELDS.get(type(stage.params).__name__)
    if not extra:
        return None
    c = stage.coeffs if coeffs is None else coeffs
    return contract.fingerprint(contract.with_former_fields(stage.params, **extra), c)


def _fp(sd) -> str | None:
    d = sd.get("design") if isinstance(sd, dict) else None
    return d.get("fingerprint") if isinstance(d, dict) else None


def _with_fp(sd: dict, fp: str) -> dict:
    """``sd`` with design fingerprint ``fp`` (a shallow copy: the arrays are shared)."""
    return {**sd, "design": {**sd["design"], "fingerprint": fp}}


def _n_in(sd: dict) -> int | None:
    st = sd.get("stream")
    try:
        return None if st is None else int(st["n_in"])
    except (KeyError, TypeError, ValueError):
        return None


def stage_state(stage, sd):
    """``sd``, a snapshot for ``stage``, in today's form: its fingerprint replaced by
    today's when it is the one an earlier release gave this design."""
    if type(stage.params).__name__ not in FORMER_FIELDS:
        return sd
    theirs = _fp(sd)
    if theirs is None:
        return sd
    n = _n_in(sd)
    try:
        c = stage._coeffs0 if n is None else stage._coeffs_for(n)
    except Exception:           # the load reports the layout that does not fit
        return sd
    if theirs != stage.design_identity(c)["fingerprint"] and \
            theirs == former_fingerprint(stage, c):
        return _with_fp(sd, stage.design_identity(c)["fingerprint"])
    return sd


def _former_chain_fingerprint(chain) -> tuple[str, dict]:
    """The fingerprint an earlier release gave ``chain`` (the input gain, then the stages
    after the calibration, with their former fingerprints), and ``{stage name: (former,
    today's) fingerprint}`` of the stages whose fingerprint changed."""
    cal = chain.calibration
    parts, changed, n = [float(1.0 if cal is None else cal.gain)], {}, 1
    for st in chain.stages:
        c = st._coeffs_for(n)
        n = st.n_out(c, n)
        if st is cal:
            continue
        now = st.design_identity(c)["fingerprint"]
        old = former_fingerprint(st, c)
        if old is not None:
            changed[st.name] = (old, now)
        parts.append(now if old is None else old)
    return contract.fingerprint(*parts), changed


def chain_state(chain, sd):
    """``sd``, a snapshot for ``chain``, in today's form when an earlier release wrote it
    for this design: today's fingerprints, and a ``calibration`` child (no arrays; the
    stream layout and block count of the first stage's) when the chain has one."""
    theirs = _fp(sd)
    ch = sd.get("children") if isinstance(sd, dict) else None
    if theirs is None or not isinstance(ch, dict) or \
            theirs == chain.design_identity()["fingerprint"]:
        return sd
    old, changed = _former_chain_fingerprint(chain)
    if theirs != old:
        return sd
    kids = {}
    cal = chain.calibration
    if cal is not None and cal.name not in ch and ch:
        first = next(iter(ch.values()))
        kids[cal.name] = contract.header(cal, first.get("block", 0),
                                         contract.deep(first.get("stream")),
                                         arrays=None if first.get("stream") is None else {})
    for name, c in ch.items():
        was, now = changed.get(name, (None, None))
        kids[name] = _with_fp(c, now) if was is not None and _fp(c) == was else c
    return {**sd, "design": {**sd["design"], "fingerprint": chain.design_identity()["fingerprint"]},
            "children": kids}
