"""A numba adjoint kernel against its Triton twin (``<stage>_grad_triton.py``) on the
test device of :mod:`_triton`: the same arguments as float64 numpy arrays (numba) and
tensors (Triton), one call each, every array the kernel writes compared (max
|triton - numba| / max |numba| <= 1e-12; an array numba leaves all zero must be zero).
Sizes are small: the Triton interpreter runs every operation of a sample loop as a numpy
call."""
from __future__ import annotations

import numpy as np

from _kernel_twins import rel
from _triton import dev, host

TOL = 1e-12


def check_adjoint(kn, kt, args: list, written: tuple, tol: float = TOL) -> dict:
    """Call ``kn(*values)`` on numpy copies and ``kt(*values)`` on tensor copies of
    ``args`` (``[(name, value), ...]``; non-arrays passed as they are) and compare the
    arrays named in ``written``; returns the errors by name and the results (numba,
    Triton host copies)."""
    an = [(k, v.copy() if isinstance(v, np.ndarray) else v) for k, v in args]
    at = [(k, dev(np.ascontiguousarray(v).copy()) if isinstance(v, np.ndarray) else v)
          for k, v in args]
    kn(*[v for _, v in an])
    kt(*[v for _, v in at])
    dn, dt = dict(an), dict(at)
    # an array numba leaves all zero (a gradient moved elsewhere) must be zero exactly
    errs = {k: (float(np.abs(host(dt[k])).max(initial=0.0)) if not np.any(dn[k])
                else rel(dt[k], dn[k])) for k in written}
    bad = {k: e for k, e in errs.items() if not e <= tol}
    assert not bad, bad
    return {"errors": errs, "numba": {k: dn[k] for k in written},
            "triton": {k: host(dt[k]) for k in written}}
