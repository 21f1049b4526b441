"""The channel-layout options of the BS.1770 meters (``rtamt loudness``, ``rtamt meter``):
``--layout NAME``, ``--channels NAME,...`` and ``--weights G,...``, and the layout of a file
or a live input from them (:mod:`rtamt.loudness.layouts`).

An option wins over the file; without one a file's channel mask (WAV, FLAC) or its
format's channel order gives the layout, and a channel count without a conventional layout
(8 channels without a mask, ...) is refused with the choices named.  All three options
store into ``args.layout``: a layout name (str), channel names (tuple of str) or
:class:`rtamt.loudness.layouts.Weights`; picklable, so ``--jobs`` workers get it as is.
"""
from __future__ import annotations

import argparse

#: how a command-line user gives a layout (the refusal's last words)
HOW = "--layout NAME, --channels NAME,... or --weights G,..."
_MAIN = "mono, stereo, quad, 5.0, 5.1, 5.1(film), 7.1, 7.1.4, 0+7+0, 4+7+0, ..."


def _arg(parse):
    """``type=`` for argparse from a :mod:`rtamt.loudness.layouts` parser."""
    def convert(text: str):
        from rtamt.loudness import layouts as L

        try:
            return parse(L)(text)
        except L.LayoutError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = "layout"
    return convert


def _layout(L):
    def parse(text: str):
        if "," in text:                             # --layout L,C,R,...: channel names
            return L.parse_names(text)
        L.layout_names(text)                        # a known name (else LayoutError)
        return text.strip()
    return parse


layout_name = _arg(_layout)
channel_names = _arg(lambda L: L.parse_names)
weights = _arg(lambda L: L.parse_weights)


def add_layout_arguments(p, *, names: bool = True) -> None:
    """``--layout``, ``--channels NAME,...`` (with ``names``; ``rtamt meter``'s
    ``--channels`` takes names or a count, :func:`channels_or_names`) and ``--weights``,
    mutually exclusive, all into ``args.layout`` (default None)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--layout", dest="layout", type=layout_name, default=None,
                   metavar="NAME",
                   help=f"channel layout ({_MAIN}; docs/models.md) or channel names "
                        "L,C,R,...; default: the file's channel mask or its format's order, "
                        "1 = mono, 2 = stereo")
    if names:
        g.add_argument("--channels", dest="layout", type=channel_names, metavar="NAME,...",
                       help="the channels in order, e.g. L,R,C,LFE,Ls,Rs (also Lss Rss Lrs "
                            "Rrs Ltf Rtf Ltb Rtb, BS.2051 labels M+030, WAVE names FL ...)")
    g.add_argument("--weights", dest="layout", type=weights, metavar="G,...",
                   help="BS.1770 channel weights in order, e.g. 1,1,1,0,1.41,1.41 "
                        "(0 leaves a channel out)")


def channels_or_names(text: str):
    """``type=`` of ``rtamt meter --channels``: a channel count (1-256) or channel names
    (``L,R,C,LFE,Ls,Rs``)."""
    if text.strip().isdigit():
        n = int(text)
        if not 1 <= n <= 256:
            raise argparse.ArgumentTypeError(f"must be 1 to 256 channels, got {n}")
        return n
    return channel_names(text)


def choose(channels: int, option=None, reader=None):
    """The :class:`rtamt.loudness.layouts.Choice` for an input of ``channels`` channels:
    ``option`` (``args.layout``), else the file's layout (``reader``: an
    :class:`rtamt.signals.AudioReader`; None for a device or the demo: 1 mono, 2 stereo);
    raises :class:`rtamt.loudness.layouts.LayoutError` (a ``ValueError``) with the
    choices."""
    from rtamt.loudness import layouts as L

    given = "--layout" if isinstance(option, str) else "--channels"
    if reader is None:
        return L.choose(channels, option, how=HOW, given=given)
    return L.choose(channels, option, found=reader.layout, found_from=reader.layout_from or "",
                    problem=reader.layout_problem, how=HOW, given=given)
