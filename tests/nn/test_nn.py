"""rtamt.nn forward behaviour: equality with the streaming models, block invariance, the
state as batch-first tensors, no-grad / inference mode, devices and bad input."""
import numpy as np
import pytest
import torch

import rtamt.nn as rn
from rtamt.engine.contract import RtamtInputError
from rtamt.models import MODELS

FS = 16000
#: small configurations of every model (same keywords for the model and its layer)
KW = {"dau1997": dict(fhigh=2000.0), "osses2021": dict(fhigh=2000.0),
      "king2019": dict(basef=1000.0), "paulick2024": dict(n_channels=4, fhigh=4000.0),
      "glasberg2002": {}, "moore2016": {}}
#: sample rates (the loudness models analyse up to 15 kHz)
RATE = {"glasberg2002": 32000, "moore2016": 32000}


def _signal(shape, seed=0, scale=0.05):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def _shape(key, B, T):
    return (B, 2, T) if key == "moore2016" else (B, T)


def _all_equal(a: dict, b: dict):
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), b[k].numpy(), err_msg=k)


def test_every_model_has_a_layer():
    assert set(rn.LAYERS) == set(MODELS)


@pytest.mark.parametrize("key", sorted(MODELS))
def test_layer_equals_model_and_blocks_equal_one_call(key):
    """Float64 outputs equal the streaming model's bit for bit, every output, and the
    layer called block by block (online_inference) equals one call."""
    B, T = 2, 400
    x = _signal(_shape(key, B, T), seed=3)
    fs = RATE.get(key, FS)
    model = MODELS[key](fs, **KW[key])
    ref = model.process_all(x)
    layer = rn.LAYERS[key](fs, **KW[key], output="all")
    y, st = layer(torch.from_numpy(x))
    _all_equal(ref, y)
    ctx, parts = None, []
    for a, b in ((0, 1), (1, 97), (97, 250), (250, T)):
        yb, ctx = layer.online_inference(torch.from_numpy(x[..., a:b]), ctx)
        parts.append(yb)
    for k in y:
        axis = 0 if k == "frame_time" else -1
        np.testing.assert_array_equal(torch.cat([p[k] for p in parts], axis).numpy(),
                                      y[k].numpy(), err_msg=k)
    for k in st:
        assert torch.equal(st[k], ctx[k]), k
        assert st[k].shape[0] == B, k         # batch-first


#: what a layer class adds to :class:`rn.ChainLayer`: its construction only
_CONSTRUCTION = {"__init__", "__module__", "__doc__", "__qualname__", "__annotations__",
                 "__firstlineno__", "__static_attributes__", "model_cls", "n_rows"}


def _only_construction(cls):
    """``cls`` is a :class:`rn.ChainLayer` whose classes below ChainLayer define nothing
    but their construction."""
    for c in cls.__mro__[:cls.__mro__.index(rn.ChainLayer)]:
        assert set(vars(c)) <= _CONSTRUCTION, (c, set(vars(c)) - _CONSTRUCTION)


def test_stage_layers_only_construct_a_chain_layer():
    for cls in (rn.StageLayer, rn.Gammatone, rn.IHCEnvelope, rn.AdaptLoop, rn.ModFilterbank,
                rn.KingModFilterbank, rn.AdaptHighpass):
        _only_construction(cls)
    assert type(rn.BrokenStick(channels=2)) is rn.StageLayer
    assert type(rn.PowerCompression(channels=2)) is rn.StageLayer


@pytest.mark.parametrize("key", sorted(MODELS))
def test_one_layer_class_serves_every_model(key):
    """``rn.LAYERS[key]`` is a :class:`rn.ChainLayer` that adds nothing but its
    construction; ``rn.ChainLayer`` of the streaming model itself equals that model bit for
    bit over three blocks with the state carried (every output), and the model layer's
    state continues in it (same design, same state)."""
    cls = rn.LAYERS[key]
    _only_construction(cls)
    fs = RATE.get(key, FS)
    model = MODELS[key](fs, **KW[key])
    layer = rn.ChainLayer(MODELS[key](fs, **KW[key]), n_in=2 if key == "moore2016" else 1,
                          output="all")
    assert layer.input_limit == model.input_limit
    x = _signal(_shape(key, 2, 600), seed=4)
    st, refs = None, []
    for a, b in ((0, 123), (123, 400), (400, 600)):
        refs.append(model.process_all(x[..., a:b]))
        y, st = layer(torch.from_numpy(x[..., a:b]), st)
        _all_equal(refs[-1], y)
    _, st_m = cls(fs, **KW[key])(torch.from_numpy(x[..., :123]))
    y, _ = layer(torch.from_numpy(x[..., 123:400]), st_m)
    _all_equal(refs[1], y)


def test_a_frame_model_with_its_calibration_as_first_stage():
    """A loudness model's calibration is ``stages[0]`` (as every Chain's): the layer of the
    streaming model gives the calibration no state, and equals the model layer, state for
    state; with a gradient, its outputs are the same and the gradient reaches the input
    through the calibration."""
    m = MODELS["glasberg2002"](32000)
    assert m.stages[0] is m.calibration
    layer = rn.ChainLayer(m, output="all")
    ref = rn.Glasberg2002(32000, output="all")
    assert layer.input_limit == ref.input_limit == m.input_limit
    x = torch.from_numpy(_signal((2, 500), seed=6))
    st, st_r = None, None
    for a, b in ((0, 100), (100, 500)):
        y, st = layer(x[:, a:b], st)
        y_r, st_r = ref(x[:, a:b], st_r)
        _all_equal({k: v.numpy() for k, v in y_r.items()}, y)
    assert set(st) == set(st_r) and all(torch.equal(st[k], st_r[k]) for k in st)
    assert not [k for k in st if k.startswith("calibration.")]
    xg = x.clone().requires_grad_(True)            # with a gradient: the same outputs
    y, _ = layer(xg)
    _all_equal({k: v.numpy() for k, v in ref(x)[0].items()},
               {k: v.detach() for k, v in y.items()})
    y["stl"].sum().backward()
    assert xg.grad.abs().sum() > 0


def test_default_output_and_float32():
    """The default output is the last stage's (batch, ..., T); float32 equals the model's
    float32 stream."""
    x = _signal((1, 300)).astype(np.float32)
    model = MODELS["dau1997"](FS, fhigh=2000.0)
    layer = rn.Dau1997(FS, fhigh=2000.0)
    y, st = layer(torch.from_numpy(x))
    np.testing.assert_array_equal(y.numpy(), model(x))
    assert y.dtype == torch.float32 and st["adaptloop.s"].dtype == torch.float32


def test_states_stack_on_the_batch_axis():
    """States of single streams concatenate on axis 0 into the state of their batch."""
    layer = rn.Dau1997(FS, fhigh=2000.0)
    x = torch.from_numpy(_signal((2, 300), seed=5))
    _, s0 = layer(x[:1, :150])
    _, s1 = layer(x[1:, :150])
    both = {k: torch.cat([s0[k], s1[k]]) for k in s0}
    y, _ = layer(x[:, 150:], both)
    y0, _ = layer(x[:1, 150:], s0)
    y1, _ = layer(x[1:, 150:], s1)
    assert torch.equal(y, torch.cat([y0, y1]))


def test_stage_layers_equal_stages():
    """The stage layers equal their streaming stages (channel stages take (batch, C, T))."""
    from rtamt.adaptation import AdaptLoop, AdaptLoopParams
    from rtamt.filterbank import Gammatone, GammatoneParams

    x = _signal((2, 200))
    ref = Gammatone(GammatoneParams(fs=FS, fc=(300.0, 900.0)))(x)
    y, _ = rn.Gammatone(FS, fc=(300.0, 900.0))(torch.from_numpy(x))
    np.testing.assert_array_equal(y.numpy(), ref)
    xc = np.abs(_signal((2, 3, 200), scale=0.5))
    ref = AdaptLoop(AdaptLoopParams(fs=FS))(xc)
    y, _ = rn.AdaptLoop(FS, 3)(torch.from_numpy(xc))
    np.testing.assert_array_equal(y.numpy(), ref)


def _saved_while(fn):
    """Run ``fn`` and count the tensors autograd saves for backward meanwhile."""
    n = [0]

    def pack(t):
        n[0] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return n[0]


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_no_grad_saves_nothing(mode):
    """Under no_grad / inference_mode nothing is recorded or saved, even with a learnable
    parameter and an input that requires grad, over many blocks."""
    layer = rn.Dau1997(FS, fhigh=2000.0, learnable=True)
    x = torch.from_numpy(_signal((2, 64 * 40)))

    def stream():
        st = None
        with mode():
            for i in range(40):
                xb = x[:, 64 * i:64 * (i + 1)].clone().requires_grad_(mode is torch.no_grad)
                y, st = layer(xb, st)
                assert y.grad_fn is None and not y.requires_grad
                assert all(v.grad_fn is None for v in st.values())
        return st

    assert _saved_while(stream) == 0


def test_detached_stream_does_not_grow():
    """With grad on and the state detached every block (truncated BPTT of 1 block), each
    block saves the same number of tensors: nothing accumulates across blocks."""
    layer = rn.Dau1997(FS, fhigh=2000.0, learnable=True)
    x = torch.from_numpy(_signal((1, 64 * 6)))
    counts, st = [], None

    def one(i):
        nonlocal st
        y, st = layer(x[:, 64 * i:64 * (i + 1)], st)
        y.sum().backward()
        st = rn.detach_state(st)

    for i in range(6):
        counts.append(_saved_while(lambda i=i: one(i)))
    assert counts[0] > 0 and len(set(counts)) == 1


def test_to_device_moves_parameters_and_state():
    layer = rn.Dau1997(FS, fhigh=2000.0, learnable=True).to("cpu")
    assert layer.device.type == "cpu" and layer.theta["adaptloop"].device.type == "cpu"
    st = layer.initial_state(1, dtype=torch.float64)
    assert all(v.device.type == "cpu" for v in st.values())
    meta = layer.initial_state(1, device="meta", dtype=torch.float64)
    assert all(v.device.type == "meta" for v in meta.values())
    with pytest.raises(RtamtInputError, match="is on meta"):
        layer(torch.zeros(1, 10, dtype=torch.float64), meta)
    with pytest.raises(RtamtInputError, match="meta device"):
        layer(torch.zeros(1, 10, dtype=torch.float64, device="meta"), meta)
    layer.to("meta")
    assert layer.theta["adaptloop"].device.type == "meta"
    assert layer.initial_state(1)["adaptloop.s"].device.type == "meta"


def _frozen(st):
    return {k: v.clone() for k, v in st.items()}


def test_bad_input_raises_and_leaves_the_state():
    layer = rn.Dau1997(FS, fhigh=2000.0)
    x = torch.from_numpy(_signal((2, 100)))
    _, st = layer(x)
    before = _frozen(st)
    other = rn.Dau1997(FS, fhigh=3000.0)
    _, st_other = other(x)
    gt = rn.Gammatone(FS, fc=(500.0,))
    _, st_gt = gt(x)
    bad = [
        (x[0], "expected shape"),                                   # rank 1
        (x[:, None], "expected shape"),                             # rank 3
        (x.float(), "dtype change"),                                # float32 after float64
        (x.to(torch.int32), "dtype"),
        (torch.full_like(x, float("nan")), "non-finite"),
        (x * 1e9, "physical limit"),
        (x[:1], "shape"),                                           # other batch size
        (x.numpy(), "expected a torch.float32 or torch.float64 tensor, got ndarray"),
    ]
    for xb, msg in bad:
        with pytest.raises(RtamtInputError, match=msg):
            layer(xb, st)
    nan_state = dict(st, **{"adaptloop.s": st["adaptloop.s"].clone()})
    nan_state["adaptloop.s"][1, 2, 3] = float("nan")
    float_tag = dict(st, **{rn.DESIGN_KEY: st[rn.DESIGN_KEY].double()})
    for sb, msg in ((st_other, "another layer or design"), (st_gt, "entries"),
                    ("state", "state dict"),
                    (dict(st, **{"adaptloop.s": st["adaptloop.s"].numpy()}),
                     r"'adaptloop.s' is on cpu \(ndarray\), expected a tensor"),
                    (nan_state, r"'adaptloop.s' holds a non-finite value at batch 1, "
                                r"index \(2, 3\)"),
                    (float_tag, "dtype torch.float64, expected torch.int64")):
        with pytest.raises(RtamtInputError, match=msg):
            layer(x, sb)
    for k in st:
        assert torch.equal(st[k], before[k])
    y, st2 = layer(x, st)                               # the state still works
    assert torch.equal(st["adaptloop.s"], before["adaptloop.s"])   # and is never written
    assert not torch.equal(st2["adaptloop.s"], st["adaptloop.s"])


def test_moore2016_diotic_equals_stereo_rows():
    """A (batch, 2, T) pair with equal rows is the model's stereo stream."""
    x = _signal((1, 1, 300))
    x2 = np.repeat(x, 2, axis=1)
    layer = rn.Moore2016(32000)
    y, _ = layer(torch.from_numpy(x2))
    np.testing.assert_array_equal(y.numpy(), MODELS["moore2016"](32000)(x2)["stl"])


def test_bad_parameters_raise():
    """A learnable parameter that went non-finite (a diverged optimiser step) is refused
    before any stage runs, naming the stage and index, and the state is left as it was;
    learnable= naming a stage the model does not have is refused at construction."""
    layer = rn.Dau1997(FS, fhigh=2000.0, learnable=True)
    x = torch.from_numpy(_signal((1, 100)))
    _, st = layer(x)
    before = _frozen(st)
    with torch.no_grad():
        layer.theta["modfb"][2] = float("inf")
    with pytest.raises(RtamtInputError, match=r"theta\['modfb'\] .* at index 2"):
        layer(x, st)
    for k in st:
        assert torch.equal(st[k], before[k])
    with pytest.raises(ValueError, match="unknown stage 'adapt'"):
        rn.Dau1997(FS, fhigh=2000.0, learnable=["adapt"])


# issue 38 item 4
def test_torch_layers_refuse_a_column_as_a_fresh_streams_first_block():
    """``rn.Dau1997(fs)(torch.zeros(4800, 1))`` is one channel in (frames, channels) layout,
    not 4800 streams of one sample: refused as the models refuse it (the message says how
    to pass it).  A state of 4800 streams declares the batch, and (1, T) / (B, T) blocks
    are taken as before.  (Before: it returned (4800, 275, 1).)"""
    import rtamt

    layer = rn.Dau1997(16000, flow=1000.0, fhigh=1300.0)
    x = torch.zeros(4800, 1, dtype=torch.float64)
    with pytest.raises(RtamtInputError, match=r"got shape \(4800, 1\), which would be 4800 "
                       r"streams of 1 sample each; time is the last axis"):
        layer(x)
    with pytest.raises(RtamtInputError, match=r"\(4800, 1\)"):
        rtamt.Dau1997(16000, flow=1000.0, fhigh=1300.0)(x.numpy())     # the model's refusal
    y, st = layer(x, layer.initial_state(4800, dtype=torch.float64))   # a declared batch
    assert y.shape[0] == 4800 and y.shape[-1] == 1
    y, _ = layer(x.T)                                                  # one stream
    assert y.shape[0] == 1 and y.shape[-1] == 4800
    gl = rn.Glasberg2002(32000)
    with pytest.raises(RtamtInputError, match="which would be 3200 streams"):
        gl(torch.zeros(3200, 1))
