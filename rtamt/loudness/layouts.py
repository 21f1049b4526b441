"""Loudspeaker channel layouts and their ITU-R BS.1770 channel weights ``G_i``.

Weights
-------
BS.1770 sums the K-weighted mean squares ``z_i`` of the channels with weights ``G_i``
(BS.1770-4/-5 Annex 1, eq. (2)).  Its Table 3 gives them for the five main channels of
Rec. ITU-R BS.775: L, R, C 1.0 and the surrounds Ls, Rs 1.41 (+1.5 dB); the LFE channel
is not measured.  For the larger layouts of Rec. ITU-R BS.2051 the weight follows from
each loudspeaker's position (BS.1770-5 Annex 3, "position-dependent channel weightings",
Table 4): 1.41 for a loudspeaker with elevation below 30 degrees and azimuth between 60
and 120 degrees (either side, bounds included), 1.0 at every other position, the LFE
channels excluded (0).  :func:`position_weight` is that rule; applied to the BS.775
positions (L, R at 30 degrees, Ls, Rs at 110 degrees) it gives Table 3.  libebur128
weighs its BS.2051 channels the same way (M+-060, M+-090, M+-110 1.41; M+-135, the upper
and bottom layers 1.0).  FFmpeg's ``ebur128`` filter does not: it gives 1.41 to every
back, side and top-back channel, so on 7.1 (back pair at 135-150 degrees) and 7.1.4 it
reads louder than BS.1770-5 (``docs/models.md``).

Names
-----
Channels are named as in SMPTE / Dolby practice (:data:`SPEAKERS`): ``L R C LFE LFE2``,
``Ls Rs`` (surround, +-110 degrees: BS.775), ``Lss Rss`` (side surround, +-90), ``Lrs Rrs``
(rear surround, +-135..150), ``Cs`` (back centre), ``Lw Rw`` (wide, +-60), ``Lc Rc`` (left /
right of centre), ``Ltf Rtf Ctf Lts Rts Ltb Rtb Ctb Tc`` (top layer), ``Bfl Bfc Bfr``
(bottom layer).  Accepted too, in any letter case: the BS.2051 labels (``M+030``,
``M-110``, ``U+045``, ``UH+180``, ``T+000``, ``B-045``, ``LFE1``, ...: any azimuth, the layer
giving the elevation), the WAVE / FFmpeg names (``FL FR FC LFE FLC FRC BC SL SR TC TFL TFC
TFR TBL TBC TBR WL WR TSL TSR BFL BFC BFR``) and ``M`` (mono, = C), ``Lb Rb Lsr Rsr`` (=
``Lrs Rrs``), ``Ltr Rtr`` (= ``Ltb Rtb``).

The WAVE back pair (``BL BR``, SPEAKER_BACK_LEFT/RIGHT) and side pair (``SL SR``) name
different positions depending on the layout: in 5.1 (mask 0x3F, FL FR FC LFE BL BR), in
5.1 "surround" (0x60F, with SL SR) and in quad the one pair present is the BS.775
surround pair at +-110 degrees (Ls, Rs: 1.41); in 7.1 (0x63F) the side pair is at +-90
(Lss, Rss: 1.41) and the back pair at +-135..150 (Lrs, Rrs: 1.0) -- Microsoft's speaker
configurations for 5.1 and 7.1 home theatre (the "Channel Mask" page of the Windows
driver documentation) and BS.2051's systems B and I.  :func:`names` applies this rule to
a list of names, :func:`mask_names` to a WAVE channel mask.

Layouts
-------
:data:`LAYOUTS` names the layouts in stream order: FFmpeg's names and orders (the WAVE
mask order: ``5.1`` = L R C LFE Ls Rs, ``7.1`` = L R C LFE Lrs Rrs Lss Rss, ``7.1.4`` = 7.1
+ Ltf Rtf Ltb Rtb, ``quad`` = L R Ls Rs, ...), the film orders ``5.0(film)`` = L C R Ls Rs,
``5.1(film)`` = L C R Ls Rs LFE, and BS.2051's systems in its order (``0+5+0`` = 5.1,
``0+7+0`` = L R C LFE Lss Rss Lrs Rrs, ``4+7+0`` = that + Ltf Rtf Ltb Rtb, ...).

Which layout a file has
-----------------------
:func:`file_layout` reads it from the file's format: a WAVE_FORMAT_EXTENSIBLE channel mask
(WAV, RF64, W64) or FLAC's WAVEFORMATEXTENSIBLE_CHANNEL_MASK tag; without a mask, the
order the format defines for the channel count (FLAC: 1-8 channels in the WAVE orders, the
channel assignment of its frame header, RFC 9639; Ogg Vorbis and Opus mapping family 0/1:
1-8 channels in the Vorbis order, Vorbis I specification section 4.3.9, RFC 7845 section
5.1.1.2; libsndfile hands the channels over in stream order); 1 channel is mono and 2
stereo in every format.  A WAV without a mask
(WAVE_FORMAT_PCM, or mask 0) says nothing about its channels; for 5 and 6 channels the
order L R C (LFE) Ls Rs is taken, the one convention for them: the track allocation of
international programme exchange (ITU-R BR.1384, EBU R 123, SMPTE), the order of the
WAVE 5.1 mask and of FLAC's 5- and 6-channel files, libebur128's and FFmpeg's default, and
the EBU loudness test set's 5-channel WAV (WAVE_FORMAT_PCM, L R C Ls Rs).  The film order
(L C R Ls Rs LFE) needs ``--layout 5.1(film)``.  Every other channel count without a mask
(3, 4, 7, 8, ...: 8 channels are 7.1 or 5.1 + stereo, 4 quad, L C R S or two stereo
pairs) has no layout that is safe to assume: :func:`choose` refuses it, naming the
choices.
"""
from __future__ import annotations

import dataclasses
import math
import re

__all__ = [
    "SIDE_WEIGHT", "Speaker", "SPEAKERS", "LAYOUTS", "WAVE_SPEAKERS", "Weights", "Choice",
    "LayoutError", "position_weight", "speaker", "names", "layout_names", "weights_of",
    "mask_names", "describe", "file_layout", "choose", "choices_for", "parse_names",
    "parse_weights",
]

#: BS.1770 weight of the positions beside the listener (Table 3: Ls, Rs; +1.5 dB)
SIDE_WEIGHT = 1.41


class LayoutError(ValueError):
    """A channel layout that cannot be used: an unknown name, a count that does not match
    the channels, a channel mask that disagrees with the file, or no layout at all where
    the channel count does not tell one (the message names the choices)."""


def position_weight(azimuth: float, elevation: float = 0.0) -> float:
    """``G_i`` of a loudspeaker at ``azimuth`` / ``elevation`` (degrees; azimuth from the
    front, either side, any turn; elevation positive upwards): 1.41 where
    ``|elevation| < 30`` and ``60 <= |azimuth| <= 120``, else 1.0 (BS.1770-5 Annex 3,
    Table 4; the LFE channels are excluded by the caller)."""
    a = abs((float(azimuth) + 180.0) % 360.0 - 180.0)
    return SIDE_WEIGHT if abs(float(elevation)) < 30.0 and 60.0 <= a <= 120.0 else 1.0


@dataclasses.dataclass(frozen=True)
class Speaker:
    """One channel: ``name`` (:data:`SPEAKERS`' name, or a BS.2051 label), ``label`` (its
    BS.2051 label, '' where BS.2051 has none), ``azimuth`` / ``elevation`` (degrees,
    azimuth positive to the left as in BS.2051; None for an LFE channel), ``what``."""

    name: str
    label: str
    azimuth: float | None
    elevation: float | None
    what: str

    @property
    def lfe(self) -> bool:
        return self.azimuth is None

    @property
    def weight(self) -> float:
        """BS.1770 ``G_i``: 0 for LFE, else :func:`position_weight`."""
        return 0.0 if self.lfe else position_weight(self.azimuth, self.elevation)


# name, BS.2051 label, azimuth, elevation, description, aliases
_TABLE = (
    ("L", "M+030", 30, 0, "front left", ("FL", "Lf")),
    ("R", "M-030", -30, 0, "front right", ("FR", "Rf")),
    ("C", "M+000", 0, 0, "centre", ("FC", "M")),
    ("LFE", "LFE1", None, None, "low-frequency effects", ()),
    ("LFE2", "LFE2", None, None, "second low-frequency effects", ()),
    ("Ls", "M+110", 110, 0, "left surround (BS.775)", ()),
    ("Rs", "M-110", -110, 0, "right surround (BS.775)", ()),
    ("Lss", "M+090", 90, 0, "left side surround", ()),
    ("Rss", "M-090", -90, 0, "right side surround", ()),
    ("Lrs", "M+135", 135, 0, "left rear surround", ("Lb", "Lsr")),
    ("Rrs", "M-135", -135, 0, "right rear surround", ("Rb", "Rsr")),
    ("Cs", "M+180", 180, 0, "back centre", ("BC", "Cb")),
    ("Lw", "M+060", 60, 0, "front left wide", ("WL",)),
    ("Rw", "M-060", -60, 0, "front right wide", ("WR",)),
    ("Lc", "", 15, 0, "front left of centre", ("FLC",)),
    ("Rc", "", -15, 0, "front right of centre", ("FRC",)),
    ("Ltf", "U+045", 45, 30, "top front left", ("TFL",)),
    ("Rtf", "U-045", -45, 30, "top front right", ("TFR",)),
    ("Ctf", "U+000", 0, 30, "top front centre", ("TFC",)),
    ("Lts", "U+090", 90, 30, "top side left", ("TSL",)),
    ("Rts", "U-090", -90, 30, "top side right", ("TSR",)),
    ("Ltb", "U+135", 135, 30, "top back left", ("TBL", "Ltr")),
    ("Rtb", "U-135", -135, 30, "top back right", ("TBR", "Rtr")),
    ("Ctb", "U+180", 180, 30, "top back centre", ("TBC",)),
    ("Tc", "T+000", 0, 90, "top centre (overhead)", ("TC",)),
    ("Bfl", "B+045", 45, -30, "bottom front left", ("BFL",)),
    ("Bfr", "B-045", -45, -30, "bottom front right", ("BFR",)),
    ("Bfc", "B+000", 0, -30, "bottom front centre", ("BFC",)),
)
#: the named channels (name -> :class:`Speaker`)
SPEAKERS = {n: Speaker(n, lab, az, el, what) for n, lab, az, el, what, _ in _TABLE}
_LOOKUP: dict[str, str] = {}
for _n, _lab, _az, _el, _what, _aliases in _TABLE:
    for _k in (_n, _lab, *_aliases):
        if _k:
            assert _LOOKUP.get(_k.lower(), _n) == _n, _k     # no name for two channels
            _LOOKUP[_k.lower()] = _n
#: WAVE / FFmpeg names of the pairs whose position depends on the layout (module docstring)
_PAIRS = {"bl": ("left", "back"), "br": ("right", "back"), "sl": ("left", "side"),
          "sr": ("right", "side")}
#: BS.2051 layers: label prefix -> nominal elevation (degrees)
_LAYERS = {"M": 0.0, "U": 30.0, "UH": 45.0, "T": 90.0, "B": -30.0}
_LABEL = re.compile(r"^(M|UH|U|T|B)([+-])(\d{1,3}|SC)$", re.I)
#: WAVE_FORMAT_EXTENSIBLE speaker bits, in bit (= stream) order (Microsoft ksmedia.h:
#: SPEAKER_FRONT_LEFT 0x1 ... SPEAKER_TOP_BACK_RIGHT 0x20000)
WAVE_SPEAKERS = ("FL", "FR", "FC", "LFE", "BL", "BR", "FLC", "FRC", "BC", "SL", "SR", "TC",
                 "TFL", "TFC", "TFR", "TBL", "TBC", "TBR")


def speaker(name: str) -> Speaker:
    """The :class:`Speaker` of one channel name (any spelling of the module docstring;
    ``BL BR SL SR`` only through :func:`names`, which knows the other channels)."""
    key = str(name).strip()
    n = _LOOKUP.get(key.lower())
    if n is not None:
        return SPEAKERS[n]
    m = _LABEL.match(key)
    if m:
        layer, sign, ang = m.group(1).upper(), m.group(2), m.group(3).upper()
        az = 15.0 if ang == "SC" else float(ang)
        if az in (0.0, 180.0):
            sign = "+"
        if az <= 180:
            label = f"{layer}{sign}{ang if ang == 'SC' else f'{int(az):03d}'}"
            if label.lower() in _LOOKUP:
                return SPEAKERS[_LOOKUP[label.lower()]]
            return Speaker(label, label, az if sign == "+" else -az, _LAYERS[layer],
                           f"BS.2051 {label}")
    if key.lower() in _PAIRS:
        raise LayoutError(f"channel {key!r} names a position only among the other channels "
                          "(give the whole list)")
    raise LayoutError(
        f"unknown channel name {key!r}; known: {' '.join(SPEAKERS)}, the BS.2051 labels "
        "(M+030, U-045, ...) and the WAVE names (FL FR FC LFE BL BR SL SR ...)")


def names(channel_names) -> tuple[str, ...]:
    """The :data:`SPEAKERS` names (or BS.2051 labels) of ``channel_names`` (any spelling),
    in order; the WAVE pairs ``BL BR`` / ``SL SR`` by the rule of the module docstring.
    A name twice is refused (:class:`LayoutError`)."""
    raw = [str(n).strip() for n in channel_names]
    present = {r.lower() for r in raw}
    out = []
    for r in raw:
        pair = _PAIRS.get(r.lower())
        if pair is None:
            out.append(speaker(r).name)
            continue
        side, kind = pair
        both = {f"{k[0]}{side[0]}" for k in ("back", "side")} <= present
        lead = "L" if side == "left" else "R"
        out.append(lead + ("s" if not both else "rs" if kind == "back" else "ss"))
    dup = sorted({n for n in out if out.count(n) > 1})
    if dup:
        raise LayoutError(f"channel(s) {' '.join(dup)} named twice in "
                          f"{' '.join(raw)}")
    return tuple(out)


def mask_names(mask: int) -> tuple[str, ...]:
    """The channel names of a WAVE_FORMAT_EXTENSIBLE ``dwChannelMask``: one channel per
    bit set, in bit order (:data:`WAVE_SPEAKERS`); bits beyond SPEAKER_TOP_BACK_RIGHT
    (reserved, SPEAKER_ALL) are refused."""
    mask = int(mask)
    bad = mask & ~((1 << len(WAVE_SPEAKERS)) - 1)
    if bad:
        raise LayoutError(f"channel mask 0x{mask:X} sets bit(s) 0x{bad:X}, which name no "
                          "speaker position")
    return names(w for i, w in enumerate(WAVE_SPEAKERS) if mask >> i & 1)


def _wave(spec: str) -> tuple[str, ...]:
    return names(spec.split("+"))


#: named layouts -> channel names in stream order (module docstring); a name whose channels
#: repeat an earlier entry's is an alias of it
LAYOUTS: dict[str, tuple[str, ...]] = {
    "mono": ("C",),
    "stereo": ("L", "R"),
    "quad": _wave("FL+FR+BL+BR"),
    "5.0": _wave("FL+FR+FC+BL+BR"),
    "5.1": _wave("FL+FR+FC+LFE+BL+BR"),
    "5.0(film)": ("L", "C", "R", "Ls", "Rs"),
    "5.1(film)": ("L", "C", "R", "Ls", "Rs", "LFE"),
    "7.1": _wave("FL+FR+FC+LFE+BL+BR+SL+SR"),
    "7.1.4": _wave("FL+FR+FC+LFE+BL+BR+SL+SR+TFL+TFR+TBL+TBR"),
    "2.1": _wave("FL+FR+LFE"),
    "3.0": _wave("FL+FR+FC"),
    "3.0(back)": _wave("FL+FR+BC"),
    "3.1": _wave("FL+FR+FC+LFE"),
    "4.0": _wave("FL+FR+FC+BC"),
    "quad(side)": _wave("FL+FR+SL+SR"),
    "4.1": _wave("FL+FR+FC+LFE+BC"),
    "5.0(side)": _wave("FL+FR+FC+SL+SR"),
    "5.1(side)": _wave("FL+FR+FC+LFE+SL+SR"),
    "6.0": _wave("FL+FR+FC+BC+SL+SR"),
    "6.1": _wave("FL+FR+FC+LFE+BC+SL+SR"),
    "6.1(back)": _wave("FL+FR+FC+LFE+BL+BR+BC"),
    "7.0": _wave("FL+FR+FC+BL+BR+SL+SR"),
    "7.1(wide)": _wave("FL+FR+FC+LFE+BL+BR+FLC+FRC"),
    "7.1(wide-side)": _wave("FL+FR+FC+LFE+FLC+FRC+SL+SR"),
    "0+2+0": ("L", "R"),
    "0+5+0": ("L", "R", "C", "LFE", "Ls", "Rs"),
    "2+5+0": ("L", "R", "C", "LFE", "Ls", "Rs", "U+030", "U-030"),
    "4+5+0": ("L", "R", "C", "LFE", "Ls", "Rs", "U+030", "U-030", "U+110", "U-110"),
    "0+7+0": ("L", "R", "C", "LFE", "Lss", "Rss", "Lrs", "Rrs"),
    "4+7+0": ("L", "R", "C", "LFE", "Lss", "Rss", "Lrs", "Rrs", "Ltf", "Rtf", "Ltb", "Rtb"),
}
_LAYOUT_KEYS = {k.lower(): k for k in LAYOUTS}
#: channel orders a file format defines for its channel count (module docstring)
_FLAC_MASKS = {1: 0x4, 2: 0x3, 3: 0x7, 4: 0x33, 5: 0x37, 6: 0x3F, 7: 0x70F, 8: 0x63F}
_VORBIS_ORDER = {1: ("C",), 2: ("L", "R"), 3: ("L", "C", "R"), 4: ("L", "R", "Ls", "Rs"),
                 5: ("L", "C", "R", "Ls", "Rs"), 6: ("L", "C", "R", "Ls", "Rs", "LFE"),
                 7: ("L", "C", "R", "Ls", "Rs", "Cs", "LFE"),
                 8: ("L", "C", "R", "Lss", "Rss", "Lrs", "Rrs", "LFE")}
#: a WAV without a channel mask: the convention for 5 and 6 channels (module docstring)
_WAVE_UNMASKED = {5: "5.0", 6: "5.1"}
_WAVE_FORMATS = ("WAV", "WAVEX", "RF64", "W64")
#: defaults without a file (the API's: 5 and 6 channels in the WAVE order)
API_DEFAULTS = {1: "mono", 2: "stereo", 5: "5.0", 6: "5.1"}


def layout_names(layout) -> tuple[str, ...]:
    """Channel names of a layout: a :data:`LAYOUTS` name (any letter case) or a sequence of
    channel names (:func:`names`)."""
    if isinstance(layout, str):
        key = _LAYOUT_KEYS.get(layout.strip().lower())
        if key is None:
            raise LayoutError(f"unknown layout {layout!r}; choose from "
                              f"{', '.join(LAYOUTS)} or give channel names")
        return LAYOUTS[key]
    return names(layout)


def weights_of(channel_names) -> tuple[float, ...]:
    """BS.1770 ``G_i`` of each channel (:attr:`Speaker.weight`)."""
    return tuple(speaker(n).weight for n in channel_names)


def describe(channel_names) -> str:
    """The :data:`LAYOUTS` name of these channels in this order, else the names joined
    by spaces."""
    t = tuple(channel_names)
    for k, v in LAYOUTS.items():
        if v == t:
            return k
    return " ".join(t)


def choices_for(channels: int) -> str:
    """The named layouts of ``channels`` channels, one per distinct order, with their
    channels: ``"7.1 (L R C LFE Lrs Rrs Lss Rss), ..."`` ('' if none)."""
    seen, out = set(), []
    for k, v in LAYOUTS.items():
        if len(v) == channels and v not in seen:
            seen.add(v)
            out.append(f"{k} ({' '.join(v)})")
    return ", ".join(out)


#: what a channel count without a layout may also be (the refusal says so)
_ALSO = {4: "; 4 channels may also be two stereo pairs",
         8: "; 8 channels may also be 5.1 + stereo (weights 1,1,1,0,1.41,1.41,0,0 measure "
            "the 5.1)"}


class Weights(tuple):
    """Channel weights given directly (a tuple of floats >= 0, not all 0), as opposed to a
    layout's names (the CLI's ``--weights``)."""

    def __new__(cls, values):
        values = list(values)
        try:
            w = tuple(float(v) for v in values)
        except (TypeError, ValueError):
            raise LayoutError(f"weights must be numbers, got {values}") from None
        if not w or not all(math.isfinite(v) and v >= 0.0 for v in w):
            raise LayoutError(f"weights must be finite and >= 0, got {list(w)}")
        if not any(w):
            raise LayoutError("every weight is 0: nothing would be measured")
        return super().__new__(cls, w)


@dataclasses.dataclass(frozen=True)
class Choice:
    """The layout a meter uses: ``names`` (None when only weights were given),
    ``weights`` ``G_i``, ``origin`` (where it came from, for the report), ``default``
    (True: the channel count's default layout, which the meter has without ``layout=``:
    :meth:`meter_kwargs` leaves it out, so the meter's design is the same as before)."""

    names: tuple[str, ...] | None
    weights: tuple[float, ...]
    origin: str
    default: bool = False

    @property
    def name(self) -> str:
        """:func:`describe` of the names, or ``'weights'``."""
        return "weights" if self.names is None else describe(self.names)

    def meter_kwargs(self) -> dict:
        """``layout=`` / ``weights=`` for :class:`rtamt.loudness.bs1770.LoudnessMeter`
        (nothing for a default: the meter's own default, the same weights)."""
        if self.default:
            return {}
        if self.names is None:
            return {"weights": tuple(self.weights)}
        return {"layout": self.names}


def _of_names(channel_names, origin: str) -> Choice:
    """The :class:`Choice` of these names (``default`` when they are the channel count's
    :data:`API_DEFAULTS` layout, which a meter gets without ``layout=``)."""
    n = tuple(channel_names)
    w = weights_of(n)
    if not any(w):
        raise LayoutError(f"{describe(n)}: every channel is an LFE channel, which BS.1770 "
                          "does not measure")
    return Choice(n, w, origin, n == LAYOUTS.get(API_DEFAULTS.get(len(n)), ()))


def file_layout(fmt: str, subtype: str, channels: int, mask: int | None = None,
                opus_family: int | None = None) -> tuple[tuple[str, ...] | None, str]:
    """``(names, origin)`` of the layout a file's format gives (module docstring), or
    ``(None, why not)``.  ``fmt`` / ``subtype``: libsndfile's format and subtype names
    (``'WAV'``, ``'FLAC'``, ``'OGG'`` / ``'OPUS'``, ...); ``mask``: the file's WAVE channel
    mask (WAV: ``dwChannelMask``; FLAC: its WAVEFORMATEXTENSIBLE_CHANNEL_MASK tag; None
    when it has none); ``opus_family``: an Ogg Opus file's channel mapping family.  A
    mask that names another number of channels, or unknown bits, raises
    :class:`LayoutError`."""
    what = "FLAC WAVEFORMATEXTENSIBLE_CHANNEL_MASK tag" if fmt == "FLAC" else \
        "WAVE channel mask"
    if mask:
        got = mask_names(mask)
        if len(got) != channels:
            raise LayoutError(f"its {what} 0x{mask:X} names {len(got)} channel(s) "
                              f"({' '.join(got)}), the file has {channels}")
        return got, f"the {what} 0x{mask:X}"
    if channels <= 2:
        return LAYOUTS["mono" if channels == 1 else "stereo"], \
            f"{channels} channel{'s' if channels > 1 else ''}"
    if fmt == "FLAC" and channels in _FLAC_MASKS:
        return mask_names(_FLAC_MASKS[channels]), f"FLAC's channel order for {channels}"
    if fmt == "OGG" and channels in _VORBIS_ORDER and (
            subtype == "VORBIS" or subtype == "OPUS" and opus_family == 1):
        return _VORBIS_ORDER[channels], f"the Vorbis channel order for {channels}"
    if fmt in _WAVE_FORMATS and channels in _WAVE_UNMASKED:
        return LAYOUTS[_WAVE_UNMASKED[channels]], \
            f"no channel mask: the WAVE order for {channels} channels"
    return None, ("no channel mask" if fmt in _WAVE_FORMATS else
                  f"a {fmt}/{subtype} file, whose format gives no channel layout")


def choose(channels: int, option=None, *, found: tuple[str, ...] | None = None,
           found_from: str = "", problem: str | None = None, defaults=(1, 2),
           how: str = "a layout name, channel names or weights",
           given: str = "the layout") -> Choice:
    """The :class:`Choice` for ``channels`` channels.

    ``option``: what the user gave -- a :data:`LAYOUTS` name, a sequence of channel names,
    or :class:`Weights`; it wins over the file.  Else the file's layout ``found`` (from
    ``found_from``), unless ``problem`` says why the file's own layout cannot be used
    (a channel mask that disagrees).  Else, for a channel count in ``defaults``, the
    count's :data:`API_DEFAULTS` layout.  Else :class:`LayoutError`, naming the layouts of
    that count (``how``: how the caller's user gives one; ``given``: what the messages
    call ``option``)."""
    if isinstance(option, Weights):
        if len(option) != channels:
            raise LayoutError(f"{channels} channels, {len(option)} weights given")
        return Choice(None, tuple(option), "given weights")
    if option is not None:
        n = layout_names(option)
        if len(n) != channels:
            raise LayoutError(f"{channels} channels, {given} {describe(n)} has {len(n)}")
        return _of_names(n, f"given: {given}")
    if problem:
        raise LayoutError(f"{problem}; give {how}")
    if found is not None:
        if len(found) != channels:
            raise LayoutError(f"{found_from}: {len(found)} channels, the input has {channels}")
        return _of_names(found, found_from)
    if channels in defaults and channels in API_DEFAULTS:
        return _of_names(LAYOUTS[API_DEFAULTS[channels]],
                         f"the default for {channels} channel(s)")
    named = choices_for(channels)
    raise LayoutError(
        f"{channels} channels and {found_from or 'no channel layout'}: BS.1770 weighs "
        f"each channel by its position (1.41 beside the listener, 0 for LFE), so the "
        f"layout must be known; choose {('one of ' + named + ', or ') if named else ''}"
        f"give {how}{_ALSO.get(channels, '')}")


def parse_names(text: str) -> tuple[str, ...]:
    """``'L,R,C,LFE,Ls,Rs'`` (commas or spaces) -> checked channel names (:func:`names`)."""
    parts = [p for p in re.split(r"[,\s]+", str(text).strip()) if p]
    if not parts:
        raise LayoutError("no channel names given")
    return names(parts)


def parse_weights(text: str) -> Weights:
    """``'1,1,1,0,1.41,1.41'`` (commas or spaces) -> :class:`Weights`."""
    return Weights(p for p in re.split(r"[,\s]+", str(text).strip()) if p)
