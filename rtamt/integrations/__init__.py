"""Bridges from rtamt to other libraries, each behind its own optional extra.

* :mod:`rtamt.integrations.lhotse` (extra ``[lhotse]``): rtamt models as a lhotse
  ``FeatureExtractor``, for corpus-scale feature extraction on one core, a process pool or
  a Dask cluster.

Importing :mod:`rtamt` never imports this package, and this package imports no optional
dependency itself: only the submodule of an integration does.
"""

#: what to install for :mod:`rtamt.integrations.lhotse` (and ``rtamt features``)
LHOTSE_INSTALL_HINT = ("pip install 'rtamt[lhotse]' (lhotse, lilcom, h5py, urllib3, "
                       "dask[distributed])")

__all__ = ["LHOTSE_INSTALL_HINT"]
