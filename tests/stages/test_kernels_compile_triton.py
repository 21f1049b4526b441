import os

import pytest

triton = pytest.importorskip("triton")

"""The GPU compiler accepts the Triton kernels of the gammatone (filterbank/
test_gammatone_triton.py), the second-order sections (engine/test_sos_triton.py) and the
modulation filterbank (modulation/test_modfb_triton.py): each compiled for an sm_80 GPU (no
device needed), so that the code the interpreter runs on CI is also code the GPU compiler
accepts.  The other stages' files compile their own kernels."""

import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402

pytestmark = pytest.mark.triton


def test_kernels_compile_for_gpu(tmp_path):
    """Compile every kernel (float32 and float64, every constexpr combination) to a cubin
    for sm_80 with Triton's CUDA backend, in a process without TRITON_INTERPRET."""
    pytest.importorskip("triton.backends.nvidia")
    script = textwrap.dedent("""
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from rtamt.engine import sos_triton
        from rtamt.filterbank import gammatone_triton
        from rtamt.modulation import modfb_triton

        def build(fn, sig, cx, fusion):
            sig = {k: ("constexpr" if k in cx else v) for k, v in sig.items()}
            src = ASTSource(fn=fn, signature=sig, constexprs=cx)
            k = triton.compile(src, target=GPUTarget("cuda", 80, 32),
                               options={"enable_fp_fusion": fusion, "num_warps": 2})
            assert k.asm["cubin"]

        for d in ("fp32", "fp64"):
            p = "*" + d
            i = "i32"
            build(gammatone_triton._gammatone4_kernel,
                  dict(lanes_ptr="*fp64", L=i, sr_ptr=p, si_ptr=p, x_ptr=p, y_ptr=p, N=i,
                       T=i, C=i, BLOCK=0), {"BLOCK": 64}, True)
            for rect in (False, True):
                for has in (False, True):
                    build(sos_triton._sos_kernel,
                          dict(sos_ptr="*fp64", S=i, zi_ptr=p, x_ptr=p, y_ptr=p, N=i, T=i,
                               C=i, F=i, yoff=i, RECTIFY=0, HAS_SOS=0, BLOCK=0),
                          {"RECTIFY": rect, "HAS_SOS": has, "BLOCK": 64}, True)
            build(modfb_triton._efilt_kernel,
                  dict(coef_ptr=p, Fb=i, nreal=i, ch_ptr="*i64", st_ptr=p, x_ptr=p, y_ptr=p,
                       N=i, T=i, C=i, F=i, yoff=i, F32=0, BLOCK=0),
                  {"F32": d == "fp32", "BLOCK": 64}, False)
            build(modfb_triton._cbq_kernel,
                  dict(ch_ptr="*i64", nreal=i, b_ptr="*fp64", a_ptr="*fp64", sc_ptr="*fp64",
                       st_ptr=p, x_ptr=p, y_ptr=p, N=i, Fb=i, T=i, C=i, F=i, yoff=i,
                       BLOCK=0), {"BLOCK": 64}, True)
        print("compiled")
    """)
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-3000:]
