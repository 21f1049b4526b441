"""Snapshots of earlier releases of the time-varying loudness models and their frame
stages, migrated once on load.

Before issue 40 (rtamt 0.1.0; the same schema version) a
:class:`~rtamt.loudness.tvl.TimeVaryingLoudness` snapshot held the union of its stages'
state arrays in one flat ``arrays`` dict (keys unique across the stages), and its design
fingerprint covered the model's public parameters and the designs of its first three
stages, the spectrum designed at the model's ``spl_ref`` (the spectrum's gains held the
calibration before the calibration stage did).  A frame stage's own snapshot carried a
fingerprint of its params with the fields they had lost (the spectrum's ``spl_ref``,
100 dB) and no sample rate.

:func:`model_snapshot` checks such a snapshot against the fingerprint that release computed
and rewrites it in the present schema (the model's stream layout, ``children``: each
stage's own snapshot with its share of the arrays); :func:`frame_stage_snapshot` gives a
frame stage's snapshot the present design identity when its fingerprint is that of the
earlier release.  Nothing else reads the former fingerprints.
"""
from __future__ import annotations

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


def model_snapshot(model, sd):
    """``sd`` in the present schema: an earlier release's flat snapshot (``arrays``, no
    ``children``) is checked against that release's design identity and layout and split
    into its stages' snapshots; any other ``sd`` is returned as it is."""
    if not isinstance(sd, dict) or "children" in sd or "arrays" not in sd:
        return sd
    _C.check_identity(model.name, sd, model, _former_model_identity(model))
    out = {k: _C.deep(v) for k, v in sd.items() if k != "arrays"}
    out["design"] = model.design_identity()
    block, st = int(sd["block"]), sd.get("stream")
    if st is None:
        out["children"] = {s.name: _C.header(s, block, None, arrays=None)
                           for s in model.stages}
        return out
    lead, mode, _ = model._parse_stream(st)
    R, rps = model._rows_for(lead, mode), model._rows_per_stream(mode)
    arrays = sd.get("arrays")
    keys = [tuple(s.init_state(1)) for s in model.stages]
    if not isinstance(arrays, dict) or set(arrays) != {k for ks in keys for k in ks}:
        raise RtamtInputError(
            f"{model.name}: state arrays "
            f"{sorted(arrays) if isinstance(arrays, dict) else type(arrays).__name__} != "
            f"{sorted(k for ks in keys for k in ks)}")
    out["children"] = {s.name: _C.header(s, block, rows_stream(R, rps),
                                         arrays={k: arrays[k] for k in ks})
                       for s, ks in zip(model.stages, keys)}
    return out
