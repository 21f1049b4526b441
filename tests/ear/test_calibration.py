"""The calibration stage (rtamt.ear.calibration, issue 40 item 3): every model's
``stages[0]``, stateless, the gain from ``spl_ref`` into internal units in the block's
dtype, and the input limit the chain and the torch layers take from it."""
from __future__ import annotations

import numpy as np
import pytest

import rtamt
from rtamt.ear.calibration import MAX_SPL, InputCalibration, spl_limit
from rtamt.engine.contract import RtamtInputError
from rtamt.engine.stage import Chain

MODULATION_MODELS = {"dau1997": 16000.0, "osses2021": 16000.0, "king2019": 16000.0,
                     "paulick2024": 44100.0}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spl_ref", [100.0, 80.0, 117.3])
def test_gain_in_the_blocks_dtype_and_any_partition(dtype, spl_ref):
    """Output = x * gain rounded once in x's dtype (x itself for gain 1), the same for any
    partition of the stream; the state holds no arrays."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((3, 401)) * 0.1).astype(dtype)
    cal = InputCalibration(spl_ref)
    want = x * dtype(cal.gain)
    assert cal.gain == pytest.approx(10 ** ((spl_ref - 100) / 20), rel=1e-15)
    y = cal(x)
    assert y.dtype == dtype and np.array_equal(y, want)
    cal2, cuts, parts = InputCalibration(spl_ref), [0, 1, 2, 50, 51, 300, 401], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        parts.append(cal2(x[:, a:b]))
    assert np.array_equal(np.concatenate(parts, axis=-1), want)
    assert cal2.state == {} and cal2.state_dict()["arrays"] == {}
    assert cal2.blocks_processed == len(cuts) - 1
    assert InputCalibration(100.0)(x) is x or np.shares_memory(InputCalibration(100.0)(x), x)


def test_limit_and_units():
    cal = InputCalibration(94.0, unit="pa")
    assert cal.gain == pytest.approx(20e-6 * 10 ** (94 / 20), rel=1e-15)
    assert cal.input_limit == cal.limit == spl_limit(MAX_SPL, 94.0)
    cal.max_spl = 120.0
    assert cal.input_limit == pytest.approx(10 ** (26 / 20), rel=1e-15)
    assert "max_spl 120" in cal.limit_text()
    with pytest.raises(ValueError, match="unit"):
        InputCalibration(94.0, unit="dB")
    with pytest.raises(ValueError, match="Dau1997: spl_ref"):
        InputCalibration(float("nan"), who="Dau1997")


@pytest.mark.parametrize("name", sorted(MODULATION_MODELS))
def test_calibration_is_stages_0_and_gives_the_input_limit(name):
    fs = MODULATION_MODELS[name]
    m = rtamt.MODELS[name](fs, spl_ref=90.0)
    cal = m.stages[0]
    assert isinstance(cal, InputCalibration) and cal is m.calibration
    assert cal.spl_ref == m.spl_ref == 90.0 and m.input_gain == cal.gain
    m.max_spl = 110.0
    assert m.input_limit == cal.input_limit == pytest.approx(10 ** (20 / 20), rel=1e-15)
    x = np.zeros(64)
    x[17] = 10.5
    with pytest.raises(RtamtInputError, match=r"sample 17.*max_spl 110 dB SPL at spl_ref 90"):
        m(x)
    assert all(s.state is None for s in m.stages)   # refused before anything changed
    assert "calibration" not in m.outputs and list(m.process_all(x * 0.1)) == list(m.outputs)
    info = m.output_info()
    assert list(info) == list(m.outputs) and info[m.outputs[0]]["rate"] == fs


def test_a_chain_without_calibration_checks_finiteness_only():
    m = rtamt.Dau1997(16000.0, flow=500.0, fhigh=1000.0)
    ch = Chain(m.stages[1:3])
    assert ch.calibration is None and ch.input_gain == 1.0 and ch.input_limit == np.inf
    ch(np.full(32, 1e30))


def test_torch_layers_take_gain_and_limit_from_the_calibration_stage():
    torch = pytest.importorskip("torch")
    import rtamt.nn as rn

    layer = rn.Dau1997(16000.0, spl_ref=80.0, flow=500.0, fhigh=1000.0)
    m = rtamt.Dau1997(16000.0, spl_ref=80.0, flow=500.0, fhigh=1000.0)
    assert layer.gain == m.stages[0].gain and layer.input_limit == m.stages[0].input_limit
    assert [p.name for p in layer.parts] == list(m.outputs)
    x = np.random.default_rng(2).standard_normal((1, 300)) * 0.1
    y, _ = layer(torch.from_numpy(x))
    np.testing.assert_array_equal(y.detach().numpy(), m(x))
    with pytest.raises(RtamtInputError, match="max_spl 200 dB SPL at spl_ref 80"):
        layer(torch.from_numpy(np.full((1, 8), 1e7)))


def test_rtamt_calibration_is_a_compatibility_module_only():
    """``rtamt.calibration`` re-exports the stage module's and the file module's names
    (the same objects); the streaming contract imports no calibration file code."""
    import rtamt.calibration as compat
    import rtamt.ear.calibration as stage
    import rtamt.engine.contract as contract
    import rtamt.io.calibration as files

    for name in compat.__all__:
        assert getattr(compat, name) is getattr(stage, name, None) or \
            getattr(compat, name) is getattr(files, name)
    src = open(contract.__file__).read()
    assert "calibration" not in "".join(ln for ln in src.splitlines()
                                        if ln.startswith(("import", "from")))


def test_the_models_do_not_import_calibration_file_code():
    """Calibration files are read and written outside the library core: importing every
    model (the loudness models included) loads neither rtamt.io.calibration nor the
    compatibility module rtamt.calibration."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c",
                        "import sys, rtamt.models\n"
                        "print(sorted(m for m in ('rtamt.io.calibration', 'rtamt.calibration')"
                        " if m in sys.modules))"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize("name", sorted(rtamt.MODELS))
def test_every_model_is_a_chain_headed_by_its_calibration(name):
    """Issue 40 acceptance (structure): every model, the loudness models included, is a
    Chain whose ``stages[0]`` is its calibration (``model.calibration``,
    ``model['calibration']``), the source of its ``spl_ref`` and input limit."""
    m = rtamt.MODELS[name](44100.0 if name == "paulick2024" else 32000.0, spl_ref=90.0)
    cal = m.stages[0]
    assert isinstance(m, Chain) and isinstance(cal, InputCalibration)
    assert cal is m.calibration is m["calibration"] and cal.spl_ref == m.spl_ref == 90.0
    assert m.input_limit == cal.input_limit == spl_limit(MAX_SPL, 90.0)
    assert "calibration" not in m.outputs
