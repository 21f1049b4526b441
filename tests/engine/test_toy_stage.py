"""A toy stage added by following docs/architecture.md (tests/support/toy/onepole.py: Params,
Weights, design, numba kernel, Triton twin, gradient rule and its examples; a few dozen
lines) gets every sweep the real stages get, from its own files alone: block-size
invariance (block size 1, random partitions, float32 and float64), torch in and out,
states that stack and split by stream, snapshots, bad blocks refused with the state
untouched, the pure form ``process`` equal to the stage, the Triton path (interpreter on
CI, compiled with RTAMT_TEST_DEVICE=cuda), the streaming contract and gradcheck through
rtamt.nn.  The sweeps find the stage classes (tests/support/_examples.py); no sweep names
the toy stage, and its id appears among each sweep's parametrised ids."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: the sweeps that run every stage example (file, test function)
SWEEPS = [("tests/stages/test_invariance.py", "test_block_partition_invariance"),
          ("tests/stages/test_invariance.py", "test_torch_roundtrip"),
          ("tests/engine/test_contract.py", "test_every_stage_example_satisfies_the_protocol"),
          ("tests/engine/test_contract.py", "test_stage_states_stack_and_split"),
          ("tests/engine/test_state.py", "test_stage_snapshot_continues_exactly"),
          ("tests/engine/test_bad_input.py",
           "test_bad_block_mid_stream_is_rejected_and_state_unchanged"),
          ("tests/engine/test_bad_input.py", "test_bad_first_block_is_rejected"),
          ("tests/stages/test_pure_process.py", "test_pure_process_matches_the_stage"),
          ("tests/stages/test_stages_triton.py", "test_stage_triton_equals_numba"),
          ("tests/nn/test_nn_grad.py", "test_stage_gradcheck")]


def test_the_toy_stage_is_in_every_sweep_without_a_list():
    nodes = [f"{f}::{fn}" for f, fn in SWEEPS]
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                        "-p", "no:cacheprovider", *nodes], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ids = [line for line in r.stdout.splitlines() if "::" in line]
    for f, fn in SWEEPS:
        mine = [i.split("[", 1)[1] for i in ids if i.startswith(f"{f}::{fn}[")]
        assert any("onepole" in i for i in mine), (fn, mine[:5])
        assert any("gammatone" in i for i in mine), (fn, mine[:5])   # and a real stage
    # found, not listed: no sweep's source names the toy stage
    for f in {f for f, _ in SWEEPS}:
        src = (ROOT / f).read_text().lower()
        assert "onepole" not in src and "toy" not in src, f
