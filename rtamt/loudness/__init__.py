"""Loudness: the Moore-Glasberg family (ANSI S3.4-2007 data, multi-resolution spectrum,
roex excitation, specific loudness, temporal integration, binaural inhibition) and the
ITU-R BS.1770 meter.  The models themselves live in :mod:`rtamt.models`."""
