"""Snapshots of earlier releases of the time-varying loudness models and their frame
stages, migrated once on load.

Before issue 40 (rtamt 0.1.0; the same schema version) a
:class:`~rtamt.loudness.tvl.TimeVaryingLoudness` snapshot held the union of its stages'
state arrays in one flat ``arrays`` dict (keys unique across the stages), and its design
fingerprint covered the model's public parameters and the designs of its first three
stages, the spectrum designed at the model's ``spl_ref`` (the spectrum's gains held the
calibration before the calibration stage did).  A frame stage's own snapshot carried a
fingerprint of its params with the fields they had lost (the spectrum's ``spl_ref``,
100 dB) and no sample rate.  The next release nested the stages' snapshots
(``children``) but had no ``calibration`` child: the calibration was not yet the model's
``stages[0]`` (its design fingerprint is today's).

:func:`model_snapshot` checks a flat snapshot against the fingerprint that release computed
and rewrites it in the present schema (the model's stream layout, ``children``: each
stage's own snapshot with its share of the arrays), and gives a nested snapshot without a
``calibration`` child that child (no arrays; the stream layout the model gives its
calibration); :func:`frame_stage_snapshot` gives a frame stage's snapshot the present
design identity when its fingerprint is that of the earlier release.  Nothing else reads
the former fingerprints.
"""
from __future__ import annotations

import numpy as np

from ..ear.calibration import INTERNAL_SPL_REF
from ..engine import contract as _C
from ..engine.contract import RtamtInputError
from .frames import rows_stream

__all__ = ["model_snapshot", "frame_stage_snapshot"]

#: fields a frame stage's ``Params`` had in the earlier release, with the value every
#: design used (fed to that release's design fingerprint)
_FORMER_FIELDS = {"Spectrum": {"spl_ref": INTERNAL_SPL_REF}}


def _former_stage_identity(stage) -> dict:
    """``{'name', 'fingerprint'}`` as the earlier release computed it for ``stage``."""
    p = stage.params
    former = _FORMER_FIELDS.get(type(stage).__name__)
    if former:
        p = _C.with_former_fields(p, **former)
    return {"name": stage.name, "fingerprint": _C.fingerprint(p, stage.coeffs)}


def frame_stage_snapshot(stage, sd):
    """``sd`` with ``stage``'s present design identity if it carries the identity the
    earlier release gave that design (else ``sd`` itself, checked by the loader)."""
    d = sd.get("design") if isinstance(sd, dict) else None
    if isinstance(d, dict) and d == _former_stage_identity(stage):
        sd = dict(sd)
        sd["design"] = stage.design_identity()
    return sd


def _former_model_identity(model) -> dict:
    """The design identity the earlier release computed for ``model``: its public
    parameters (``fingerprint_fields``) and the designs of spectrum, excitation and
    specific loudness, the spectrum designed at ``spl_ref``."""
    from .spectrum import design_spectrum
    from .tvl import TVLCoeffs

    pub = {k: getattr(model, k) for k in model.fingerprint_fields}
    if model.spl_ref != INTERNAL_SPL_REF:
        spec = design_spectrum(model.spectrum.params, level_db=model.spl_ref)
        pub["coeffs"] = TVLCoeffs(spec, model.coeffs.exc, model.coeffs.sl)
    return _C.identity(model, model.identity_fields,
                       _C.fingerprint(type(model).__name__, pub))


def _with_calibration(model, sd: dict) -> dict:
    """``sd`` (nested) with a ``calibration`` child when it has none: no arrays, the
    model's block count, and the stream layout the model gives its calibration (its batch
    of streams, float64 rows; ``None`` before the first block)."""
    ch, cal = sd.get("children"), model.stages[0]
    if not isinstance(ch, dict) or cal.name in ch:
        return sd
    st = sd.get("stream")
    try:
        cst = None if st is None else _C.stream_meta(st["batch"], (), np.float64, n_in=1)
    except (KeyError, TypeError, ValueError):
        raise RtamtInputError(f"{model.name}: malformed stream entry {st!r}") from None
    kid = _C.header(cal, int(sd.get("block", 0)), cst, arrays=None if cst is None else {})
    return {**sd, "children": {cal.name: kid, **ch}}


def model_snapshot(model, sd):
    """``sd`` in the present schema: an earlier release's flat snapshot (``arrays``, no
    ``children``) is checked against that release's design identity and layout and split
    into its stages' snapshots; a nested snapshot without a ``calibration`` child gets one;
    any other ``sd`` is returned as it is."""
    if not isinstance(sd, dict):
        return sd
    if "children" in sd:
        return _with_calibration(model, sd)
    if "arrays" not in sd:
        return sd
    _C.check_identity(model.name, sd, model, _former_model_identity(model))
    out = {k: _C.deep(v) for k, v in sd.items() if k != "arrays"}
    out["design"] = model.design_identity()
    block, st = int(sd["block"]), sd.get("stream")
    frames = model.stages[1:]
    if st is None:
        out["children"] = {s.name: _C.header(s, block, None, arrays=None) for s in frames}
        return _with_calibration(model, out)
    lead, mode, _ = model._parse_stream(st)
    R, rps = model._rows_for(lead, mode), model._rows_per_stream(mode)
    arrays = sd.get("arrays")
    keys = [tuple(s.init_state(1)) for s in frames]
    if not isinstance(arrays, dict) or set(arrays) != {k for ks in keys for k in ks}:
        raise RtamtInputError(
            f"{model.name}: state arrays "
            f"{sorted(arrays) if isinstance(arrays, dict) else type(arrays).__name__} != "
            f"{sorted(k for ks in keys for k in ks)}")
    out["children"] = {s.name: _C.header(s, block, rows_stream(R, rps),
                                         arrays={k: arrays[k] for k in ks})
                       for s, ks in zip(frames, keys)}
    return _with_calibration(model, out)
