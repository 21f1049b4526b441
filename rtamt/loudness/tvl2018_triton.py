"""Triton-backend twin of :func:`rtamt.loudness.tvl2018.component_floor` (torch operations
on the device: a maximum, a comparison and a masked fill, exactly those of the numba
kernel)."""
from __future__ import annotations


def component_floor(P, R, F, pair, thr_min, rel):
    """Mirrors :func:`rtamt.loudness.tvl2018.component_floor` (in place)."""
    J = P.shape[1]
    P4 = P.view(R // pair, pair, F, J)
    m = P4.amax(dim=(1, 3), keepdim=True).clamp_min(thr_min)
    P4.masked_fill_(~(P4 > m / rel), 0.0)
