import pytest

triton = pytest.importorskip("triton")

"""The GPU compiler accepts the Triton adjoint kernels (``*_grad_triton.py``: the SOS
cascade, the gammatone, the adaptation loops, the ear FIRs, the loudness frame stages,
the R128 meter's gating blocks and true peak): each compiled for an sm_80 GPU with every
``tl.constexpr`` combination (no device needed), so that the code the interpreter checks
against numba on CI is code the GPU compiler takes."""
from _triton import compile_sm80  # noqa: E402


def test_adjoint_kernels_compile_for_gpu():
    pytest.importorskip("triton.backends.nvidia")
    compile_sm80('''
        from rtamt.adaptation import adaptloop_grad_triton as al
        from rtamt.ear import fir_grad_triton as fir
        from rtamt.engine import sos_grad_triton as sos
        from rtamt.filterbank import gammatone_grad_triton as gt
        from rtamt.loudness import gating_grad_triton as gg
        from rtamt.loudness import truepeak_grad_triton as tpg

        p, i = "*fp64", "i32"
        for rect in (False, True):
            build(sos._sos_adjoint_kernel,
                  dict(sos_ptr=p, S=i, x_ptr=p, gy_ptr=p, gy_sb=i, gy_st=i, gy_sc=i,
                       mu_ptr=p, gx_ptr=p, w_ptr=p, N=i, T=i, C=i, RECTIFY=0, BLOCK=0),
                  {"RECTIFY": rect, "BLOCK": 64})
        for want in (False, True):
            build(gt._gt_adjoint_kernel,
                  dict(pr_ptr=p, pi_ptr=p, gain_ptr=p, gy_ptr=p, mur_ptr=p, mui_ptr=p,
                       gxc_ptr=p, sr_ptr=p, si_ptr=p, x_ptr=p, gp_ptr=p, ck_ptr=p, zs_ptr=p,
                       N=i, T=i, C=i, SEG=i, NSEG=i, WANT=0, BLOCK=0),
                  {"WANT": want, "BLOCK": 64})
        for lim in (False, True):
            build(al._adaptloop_adjoint_kernel,
                  dict(a_ptr=p, b_ptr=p, lanes_ptr=p, s_ptr=p, x_ptr=p, gy_ptr=p, mu_ptr=p,
                       gx_ptr=p, ga_ptr=p, ck_ptr=p, tr_ptr=p, n_lanes=i, T=i, C=i, L=i,
                       SEG=i, NSEG=i, K=0, KP=0, LIMIT_ON=0, BLOCK=0),
                  {"K": 5, "KP": 8, "LIMIT_ON": lim, "BLOCK": 32})
        build(fir._fir_adjoint_kernel,
              dict(h_ptr=p, gy_ptr=p, mu_ptr=p, nmu_ptr=p, gx_ptr=p, T=i, C=i, N=i, M=i,
                   BLOCK=0), {"BLOCK": 64})
        q = "*i64"
        build(gg._adjoint_kernel,
              dict(w_ptr=p, lens_ptr=q, acc_ptr=p, fill_ptr=q, nf_ptr=q, ring_e_ptr=p,
                   ring_n_ptr=q, peak_ptr=p, y_ptr=p, gy_ptr=p, mu_acc_ptr=p, mu_ring_ptr=p,
                   mu_peak_ptr=p, gx_ptr=p, accw_ptr=p, E_ptr=p, N_ptr=p, ends_ptr=q,
                   gw_ptr=p, gE_ptr=p, B=i, T=i, C=i, P=i, K=i, F=i, BLOCK=0),
              {"BLOCK": 16})
        for sinc in (False, True):
            build(tpg._adjoint_kernel,
                  dict(h_ptr=p, hist_ptr=p, tp_ptr=p, sp_ptr=p, x_ptr=p, gy_ptr=p,
                       mu_hist_ptr=p, mu_tp_ptr=p, mu_sp_ptr=p, gx_ptr=p, gw_ptr=p, B=i, T=i,
                       C=i, L=i, K=i, screen="fp64", SINC=0, BLOCK=0, KC=0),
                  {"SINC": sinc, "BLOCK": 64, "KC": 16})
    ''')


def test_loudness_adjoint_kernels_compile_for_gpu():
    """The frame stages' Triton adjoints (``rtamt/loudness/*_grad_triton.py``)."""
    pytest.importorskip("triton.backends.nvidia")
    compile_sm80('''
        from rtamt.loudness import binaural_grad_triton as bi
        from rtamt.loudness import excitation_grad_triton as ex
        from rtamt.loudness import frames_grad_triton as fg
        from rtamt.loudness import specific_loudness_grad_triton as sl
        from rtamt.loudness import spectrum_grad_triton as sp
        from rtamt.loudness import tvl2018_grad_triton as tv

        p, i, d = "*fp64", "i32", "fp64"
        build(fg._agc_adjoint_kernel,
              dict(x_ptr=p, y0_ptr=p, aa=d, ar=d, gy_ptr=p, mu_ptr=p, gx_ptr=p, yp_ptr=p,
                   gar_ptr=p, N=i, K=i, BLOCK=0), {"BLOCK": 64})
        build(sl._sl_adjoint_kernel,
              dict(E_ptr=p, G_ptr=p, A_ptr=p, al_ptr=p, Aal_ptr=p, thr_ptr=p, C=d, gN_ptr=p,
                   gE_ptr=p, gC_ptr=p, N=i, K=i, BLOCK=0), {"BLOCK": 256})
        for diotic in (False, True):
            build(bi._binaural_adjoint_kernel,
                  dict(st_ptr=p, S_ptr=p, E_ptr=p, lt_ptr=p, aa=d, ar=d, p=d, gspec_ptr=p,
                       gexc_ptr=p, gste_ptr=p, glte_ptr=p, mu_ptr=p, gst_ptr=p, gS_ptr=p,
                       gE_ptr=p, tot_ptr=p, ltp_ptr=p, gpar_ptr=p, F=i, R=i, K=i, DIOTIC=0,
                       KP=0), {"DIOTIC": diotic, "KP": 256})
        build(ex._skirt_adjoint_kernel,
              dict(P_ptr=p, lvl_ptr=p, c_slope=d, a_ptr="*fp32", b_ptr="*fp32",
                   i0_ptr="*i64", seg_ptr="*i64", cnt_ptr="*i64", gE_ptr=p, gP_ptr=p,
                   glvl_ptr=p, N=i, J=i, nf=i, CMAX=i, BLOCK=0), {"BLOCK": 256})
        build(ex._db_adjoint_kernel, dict(E_ptr=p, gdb_ptr=p, gE_ptr=p, n=i, BLOCK=0),
              {"BLOCK": 256})
        build(sp._dft_grad_kernel,
              dict(z_ptr=p, Lz=i, st=i, F=i, H=i, mat_ptr=p, gain_ptr=p, grp_ptr="*i64",
                   gP_ptr=p, J=i, G_ptr=p, R=i, n=i, B=i, BLOCK=0), {"BLOCK": 128})
        build(sp._dft_scatter_kernel,
              dict(G_ptr=p, mat_t_ptr=p, gz_ptr=p, Lz=i, st=i, F=i, H=i, R=i, n=i, B2=i,
                   BLOCK=0), {"BLOCK": 128})
        build(tv._fir_adjoint_kernel, dict(h_ptr=p, gy_ptr=p, gz_ptr=p, R=i, T=i, N=i, BLOCK=0),
              {"BLOCK": 128})
    ''')
