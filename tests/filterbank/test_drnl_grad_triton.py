import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")

"""The Triton twin of the DRNL adjoint (rtamt.filterbank.drnl_grad_triton.drnl_adjoint)
against the numba adjoint on the same inputs: both paths, each path alone, the exponent
1/4 and another one, at levels on both sides of the broken stick's knee; a strided output
gradient, gradients added to a non-zero ``gx``; every output (input gradient, the memories'
gradients of both paths, the advanced nonlinear memories) within 1e-12 relative (float64,
the adjoint's dtype)."""
import math  # noqa: E402

import numpy as np  # noqa: E402

from rtamt.filterbank import drnl_grad, drnl_grad_triton  # noqa: E402
from rtamt.filterbank.drnl import DRNL, DRNLParams, get_preset  # noqa: E402

from _kernel_twins import rel  # noqa: E402
from _triton import compile_sm80, dev  # noqa: E402

FS = 16000.0
FC = (500.0, 1000.0, 3000.0)
TOL = 1e-12


def _run(co, x, gy, st, mu, gx, tw):
    sec = co.sections[np.dtype(np.float64)]
    names = ("scale", "gain", "gtl", "lpl", "gtn", "lpn", "bs")
    B, T = x.shape
    C = co.fc.size
    if tw:
        dv = {k: dev(v.copy()) for k, v in {**st, **mu}.items()}
        gxt = dev(gx.copy())
        drnl_grad_triton.drnl_adjoint(*(dev(sec[k]) for k in names), co.quarter, *co.counts,
                                      co.do_lin, co.do_nlin, dv["n1"], dv["n2"], dev(x),
                                      dev(gy)[:, :, :C], dv["ml1"], dv["ml2"], dv["mn1"],
                                      dv["mn2"], gxt)
        return gxt, dv
    dv = {k: v.copy() for k, v in {**st, **mu}.items()}
    gxn = gx.copy()
    drnl_grad.drnl_adjoint(*(sec[k] for k in names), co.quarter, *co.counts, co.do_lin,
                           co.do_nlin, dv["n1"], dv["n2"], x, gy[:, :, :C], dv["ml1"],
                           dv["ml2"], dv["mn1"], dv["mn2"], gxn, np.empty((T, C)),
                           np.empty(C), np.empty(C))
    return gxn, dv


@pytest.mark.parametrize("level", [1e-9, 1e-3])
@pytest.mark.parametrize("kw", [dict(), dict(preset="lopezpoveda2001"),
                                dict(preset=get_preset("jepsen2008", c=(math.log10(0.3), 0.0))),
                                dict(paths="nlin"), dict(paths="lin")],
                         ids=["paulick2024", "lopezpoveda2001", "c0.3", "nlin", "lin"])
def test_drnl_adjoint(kw, level):
    """1e-9 m/s: the stick's linear part; 1e-3: compressive."""
    co = DRNL(DRNLParams(fs=FS, fc=FC, **kw)).coeffs
    rng = np.random.default_rng(21)
    B, T, C = 2, 30, co.fc.size
    SL, SN = co.n_sections_lin, co.n_sections_nlin
    x = level * rng.standard_normal((B, T))
    gy = rng.standard_normal((B, T, C + 2))            # sliced: a strided gradient
    st = {k: level * 1e-2 * rng.standard_normal((B, SN, C)) for k in ("n1", "n2")}
    mu = {k: rng.standard_normal((B, S, C))
          for k, S in (("ml1", SL), ("ml2", SL), ("mn1", SN), ("mn2", SN))}
    gx = rng.standard_normal((B, T))
    gxn, dn = _run(co, x, gy, st, mu, gx, False)
    gxt, dt = _run(co, x, gy, st, mu, gx, True)
    assert rel(gxt, gxn) <= TOL, rel(gxt, gxn)
    for k in dn:
        changed = not np.array_equal(dn[k], {**st, **mu}[k])
        assert changed == (co.do_lin if k.startswith("ml") else co.do_nlin), k
        if changed:
            assert rel(dt[k], dn[k]) <= TOL, (k, rel(dt[k], dn[k]))
        else:
            assert np.array_equal(dt[k].cpu().numpy(), dn[k]), k


def test_drnl_adjoint_kernel_compiles_for_gpu():
    """The GPU compiler (sm_80, no device needed) accepts the kernel for the constexpr
    combinations the presets and ``paths`` give."""
    pytest.importorskip("triton.backends.nvidia")
    compile_sm80("""
        from rtamt.filterbank import drnl_grad_triton as m
        p, i = "*fp64", "i32"
        sig = dict(gain_ptr=p, gtl_ptr=p, lpl_ptr=p, gtn_ptr=p, lpn_ptr=p, bs_ptr=p,
                   n1_ptr=p, n2_ptr=p, x_ptr=p, gy_ptr=p, gys_b=i, gys_t=i, gys_c=i,
                   ml1_ptr=p, ml2_ptr=p, mn1_ptr=p, mn2_ptr=p, u_ptr=p, s_ptr=p, N=i, T=i,
                   C=i, N_GL=0, N_LL=0, N_GB=0, N_GA=0, N_LN=0, KL=0, KN=0, QUARTER=0,
                   DO_LIN=0, DO_NLIN=0, BLOCK=0)
        for q, lin, nlin in ((True, True, True), (False, True, True), (True, False, True),
                             (True, True, False)):
            build(m._drnl_adj_kernel, sig,
                  dict(N_GL=3, N_LL=4, N_GB=3, N_GA=3, N_LN=3, KL=8, KN=16, QUARTER=q,
                       DO_LIN=lin, DO_NLIN=nlin, BLOCK=32), fusion=False)
    """)
