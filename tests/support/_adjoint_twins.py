"""A numba adjoint kernel against its Triton twin (``<stage>_grad_triton.py``) on the
test device of :mod:`_triton`: the same arguments as float64 numpy arrays (numba) and
tensors (Triton), one call each, every array the kernel writes compared (max
|triton - numba| / max |numba| <= 1e-12; an array numba leaves all zero must be zero),
and what the kernels return (scalars: numba's floats, Triton's 0-d tensors left on the
device) likewise.  Sizes are small: the Triton interpreter runs every operation of a
sample loop as a numpy call."""
from __future__ import annotations

import numpy as np

from _kernel_twins import rel
from _triton import dev, host

TOL = 1e-12


def check_adjoint(kn, kt, args: list, written: tuple, tol: float = TOL,
                  returns: int = 0) -> dict:
    """Call ``kn(*values)`` on numpy copies and ``kt(*values)`` on tensor copies of
    ``args`` (``[(name, value), ...]``; non-arrays passed as they are) and compare the
    arrays named in ``written`` and the returned values (``ret0``, ``ret1``, ... with
    ``returns`` set: that many; a zero numba value must be matched exactly); returns the
    errors by name and the results (numba, Triton host copies)."""
    an = [(k, v.copy() if isinstance(v, np.ndarray) else v) for k, v in args]
    at = [(k, dev(np.ascontiguousarray(v).copy()) if isinstance(v, np.ndarray) else v)
          for k, v in args]
    rn = kn(*[v for _, v in an])
    rt = kt(*[v for _, v in at])
    dn, dt = dict(an), dict(at)
    # an array numba leaves all zero (a gradient moved elsewhere) must be zero exactly
    errs = {k: (float(np.abs(host(dt[k])).max(initial=0.0)) if not np.any(dn[k])
                else rel(dt[k], dn[k])) for k in written}
    if returns:
        rn = (rn,) if returns == 1 else tuple(rn)
        rt = (rt,) if returns == 1 else tuple(rt)
        assert len(rn) == len(rt) == returns
        for i, (a, b) in enumerate(zip(rn, rt)):
            a = np.asarray(a, dtype=np.float64)
            b = host(b) if hasattr(b, "device") else np.asarray(b, dtype=np.float64)
            errs[f"ret{i}"] = (float(np.max(np.abs(b - a)) / np.max(np.abs(a))) if np.any(a)
                               else float(np.max(np.abs(b))))
            dn[f"ret{i}"], dt[f"ret{i}"] = a, b
        written = (*written, *(f"ret{i}" for i in range(returns)))
    bad = {k: e for k, e in errs.items() if not e <= tol}
    assert not bad, bad
    return {"errors": errs, "numba": {k: dn[k] for k in written},
            "triton": {k: dt[k] if isinstance(dt[k], np.ndarray) else host(dt[k])
                       for k in written}}
