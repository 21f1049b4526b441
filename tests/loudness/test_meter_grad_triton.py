import os

os.environ.setdefault("TRITON_INTERPRET", "1")
import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.triton         # the GPU check (latency_bench.gpu) selects it

"""The Triton twins of the R128 meter's adjoints against the numba adjoints beside their
rules (1e-12 float64, every array the kernel writes): the gating blocks'
(``gating_grad_triton.block_powers_adjoint``) and the true peak's
(``truepeak_grad_triton.true_peak_adjoint``, both methods) from states the numba forward
kernels leave; for the gating blocks: a block that completes no fine block, blocks that
complete fine blocks and 100 ms steps, streams at different positions of the clock (one
before its first momentary window, with the ring partly empty) and louder input that
sets new maxima.  Sizes are small (4 kHz: a fine block is 40 samples; the true peak at
48 kHz, 48 samples): the interpreter runs every kernel operation as a numpy call."""
import numpy as np  # noqa: E402

from rtamt.loudness import (  # noqa: E402
    gating_grad,
    gating_grad_triton,
    truepeak_grad,
    truepeak_grad_triton,
)
from rtamt.loudness.gating import GatingBlocks, GatingParams  # noqa: E402
from rtamt.loudness.truepeak import TruePeak, TruePeakParams  # noqa: E402

from _adjoint_twins import check_adjoint  # noqa: E402

FS = 4000.0
_G = GatingBlocks(GatingParams(FS, (1.0, 1.41)))
_CO = _G.design(_G.params, 2)


def _state(lengths, seed):
    """The gating state after ``lengths[b]`` samples of noise, one stream each."""
    rng = np.random.default_rng(seed)
    parts = []
    for n in lengths:
        st = GatingBlocks.init_state(_CO, 1, 2, np.float64)
        x = 0.1 * rng.standard_normal((1, n, 2))
        _G.process_tm(_CO, st, x)
        parts.append(st)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


@pytest.mark.parametrize("T,scale", [(7, 0.3), (95, 0.3), (430, 0.05), (430, 3.0)],
                         ids=["no-fine-block", "fine-blocks", "a-step", "new-maxima"])
def test_gating_adjoint_twin(T, scale):
    st = _state((12_017, 1_587), 1)               # one past the short-term window, one not
    assert st["n_fine"][0] >= 300 and st["n_fine"][1] < 40
    rng = np.random.default_rng(T)
    B, C = 2, 2
    K = T // int(_CO.fine_lens.min()) + 1
    args = [("weights", _CO.weights), ("fine_lens", _CO.fine_lens), ("acc", st["acc"]),
            ("fill", st["fill"]), ("n_fine", st["n_fine"]), ("ring_e", st["ring_e"]),
            ("ring_n", st["ring_n"]), ("peak", st["peak"]),
            ("y", scale * rng.standard_normal((B, T, C))),
            ("gy", rng.standard_normal((B, K, 3))), ("mu_acc", rng.standard_normal((B, C))),
            ("mu_ring", rng.standard_normal((B, 300))),
            ("mu_peak", rng.standard_normal((B, 2))), ("gx", rng.standard_normal((B, T, C)))]
    out = check_adjoint(gating_grad.block_powers_adjoint,
                        gating_grad_triton.block_powers_adjoint, args,
                        ("mu_acc", "mu_ring", "mu_peak", "gx"))
    if scale > 1.0:          # a new maximum: its gradient moved to the window that set it
        assert not out["numba"]["mu_peak"][0].any()


_TP = {m: TruePeak(TruePeakParams(48000.0, method=m)) for m in ("sinc", "bs1770")}


@pytest.mark.parametrize("method", ["sinc", "bs1770"])
@pytest.mark.parametrize("scale", [1.0, 0.01], ids=["new-peaks", "incoming-peaks"])
def test_true_peak_adjoint_twin(method, scale):
    """Louder input sets new true and sample peaks (their gradients move to the values
    that set them: a refined crest, a midpoint or a sample for 'sinc', an Annex 2 phase
    or a sample for 'bs1770'); quieter input leaves them to the incoming peaks."""
    stage = _TP[method]
    co = stage.coeffs
    rng = np.random.default_rng(5)
    B, T, C = 2, 48, 2          # T > 24 (the interpolator's delay): crests of the block
    st = TruePeak.init_state(co, B, C, np.float64)
    stage.process_tm(co, st, 0.3 * rng.standard_normal((B, 60, C)))
    H = st["hist"].shape[1]
    if scale < 1.0:                  # louder before: the history cannot set a new peak
        st["true_peak"][:] = st["sample_peak"][:] = 4.0
    args = [("h", co.phases), ("sinc", method == "sinc"), ("hist", st["hist"]),
            ("tp", st["true_peak"]), ("sp", st["sample_peak"]),
            ("x", scale * rng.standard_normal((B, T, C))),
            ("gy", rng.standard_normal((B, 2, C))), ("mu_hist", rng.standard_normal((B, H, C))),
            ("mu_tp", rng.standard_normal((B, C))),
            ("mu_sp", rng.standard_normal((B, C))), ("gx", rng.standard_normal((B, T, C))),
            ("work", np.empty(H + 2 * T + 1))]
    out = check_adjoint(truepeak_grad.true_peak_adjoint,
                        truepeak_grad_triton.true_peak_adjoint, args,
                        ("mu_hist", "mu_tp", "mu_sp", "gx"))
    held = out["numba"]["mu_tp"] != 0.0
    assert held.all() if scale < 1.0 else not held.any()
