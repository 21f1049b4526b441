"""A stage is one module (issue 30 item 1): the stage's module holds its Params, design and
numba kernels and declares its kernels per backend (``kernels = Kernels(...)``), the Triton
twins sit beside it in ``<module>_triton.py``, ``to()`` binds them once, and no stage code
chooses a kernel from the array's type or imports a kernel module by name."""
import ast
import copy
import os
import pathlib

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import rtamt  # noqa: E402
from rtamt.engine.backend import Kernels, NumbaKernels, TritonKernels  # noqa: E402
from rtamt.engine.stage import Chain  # noqa: E402

from _helpers import rtamt_stage_classes  # noqa: E402


def frame_stage_classes() -> list:
    """Every frame stage of the loudness models (:class:`rtamt.loudness.frames.FrameStage`
    subclasses, after importing the stage classes' modules)."""
    from rtamt.loudness.frames import FrameStage

    return [c for c in rtamt_stage_classes() if issubclass(c, FrameStage) and c is not FrameStage]


FRAME_STAGES = {"Spectrum", "Excitation", "SpecificLoudness", "InstantaneousLoudness",
                "LoudnessIntegrator", "SpecificLoudnessAGC", "BinauralInhibition"}
#: frame stages that run array operations only (no kernels; numpy and torch alike)
KERNEL_FREE = {"InstantaneousLoudness"}

ROOT = pathlib.Path(rtamt.__file__).parent

#: code that still chooses by array type, by path prefix, and why (each must still hold
#: such code: remove its entry when it is gone)
ARRAY_TYPE_PENDING: dict = {}
#: kernel modules still imported by name, and why
IMPORT_BY_NAME_PENDING: dict = {}
#: helpers that test an array's type (their calls are array-type dispatch)
TYPE_TESTS = {"dispatch", "is_tensor", "_is_tensor", "_is_torch", "is_float64"}


def _sources():
    for path in sorted(ROOT.rglob("*.py")):
        yield path.relative_to(ROOT.parent).as_posix(), ast.parse(path.read_text())


def _mentions(node, names) -> bool:
    return any((isinstance(n, ast.Attribute) and n.attr in names)
               or (isinstance(n, ast.Name) and n.id in names) for n in ast.walk(node))


def _array_type_tests(tree) -> list:
    """Lines that choose by an array's type: ``type(x) is [not] np.ndarray / Tensor``,
    ``isinstance(x, torch.Tensor)``, calls of the type-testing helpers."""
    hits = []
    for n in ast.walk(tree):
        if (isinstance(n, ast.Compare) and isinstance(n.left, ast.Call)
                and isinstance(n.left.func, ast.Name) and n.left.func.id == "type"
                and any(_mentions(c, {"ndarray", "Tensor"}) for c in n.comparators)):
            hits.append(n.lineno)
        elif isinstance(n, ast.Call):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(
                f, ast.Attribute) else None
            if name in TYPE_TESTS:
                hits.append(n.lineno)
            elif name == "isinstance" and len(n.args) == 2 and _mentions(n.args[1], {"Tensor"}):
                hits.append(n.lineno)
    return hits


def _imports_by_name(tree) -> list:
    hits = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import) and any(a.name.split(".")[0] == "importlib"
                                             for a in n.names):
            hits.append(n.lineno)
        elif isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "importlib":
            hits.append(n.lineno)
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id == "__import__"):
            hits.append(n.lineno)
    return hits


def _pending(path, table):
    return next((p for p in table if path.startswith(p)), None)


def _scan(finder, table, outside_engine, skip=()):
    bad, used = [], set()
    for path, tree in _sources():
        if (outside_engine and path.startswith("rtamt/engine/")) or path in skip:
            continue
        lines = finder(tree)
        if not lines:
            continue
        p = _pending(path, table)
        if p is None:
            bad.append(f"{path}:{lines}")
        else:
            used.add(p)
    return bad, used


def test_no_array_type_dispatch_outside_the_backend_module():
    """No code of rtamt but rtamt/engine/backend.py tests whether an array is numpy or torch
    to choose what to run (issue 40 item 4): the stages run the kernels their ``to()``
    bound, and the conversions at a block's boundary, the work buffers, the time-last views
    and the scheduler's slot-store operations are backend.py's."""
    bad, used = _scan(_array_type_tests, ARRAY_TYPE_PENDING, outside_engine=False,
                      skip=("rtamt/engine/backend.py",))
    assert not bad, "array-type dispatch outside rtamt/engine/backend.py: " + ", ".join(bad)
    assert used == set(ARRAY_TYPE_PENDING), \
        f"pending entries without such code any more: {set(ARRAY_TYPE_PENDING) - used}"


def _defines(tree, name: str) -> list:
    """``(class, line)`` of every method ``name`` defined in a class body of ``tree``."""
    return [(c.name, f.lineno) for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
            for f in c.body if isinstance(f, ast.FunctionDef) and f.name == name]


def test_one_stage_base_and_one_composite_bind_the_processors():
    """One Stage and one Chain (issue 40, Structure): the processors' ``to()`` is defined
    in ``Stage`` and in ``StageGroup`` (the base of ``Chain``, the loudness models and the
    R128 meter) and nowhere else; every class of rtamt with a ``process_tm`` is a
    ``Stage``, and every processor made of stages is a ``StageGroup``."""
    from rtamt.engine.stage import Stage, StageGroup

    found = {(path, c) for path, tree in _sources() for c, _ in _defines(tree, "to")
             if not path.startswith("rtamt/nn/")}     # torch modules' own .to()
    assert found == {("rtamt/engine/stage.py", "Stage"),
                     ("rtamt/engine/stage.py", "StageGroup")}, found
    classes = rtamt_stage_classes()
    assert classes and all(issubclass(c, Stage) for c in classes)
    import rtamt.loudness.bs1770 as bs
    import rtamt.loudness.r128stream as r128
    for cls in [*rtamt.MODELS.values(), bs.LoudnessMeter, r128.R128Stream]:
        assert issubclass(cls, StageGroup), cls
    for cls in rtamt.MODELS.values():
        assert issubclass(cls, Chain), cls
    # every class of a module of rtamt that defines process_tm derives from Stage
    for path, tree in _sources():
        for c, _ in _defines(tree, "process_tm"):
            mod = path[:-3].replace("/", ".")
            obj = getattr(__import__(mod, fromlist=[c]), c, None)
            if isinstance(obj, type):
                assert issubclass(obj, Stage), f"{path}: {c}"


def test_no_kernel_module_is_imported_by_name():
    """No module of rtamt imports a module by name (importlib, __import__): a stage's
    Triton twins are imported by a small function in the stage's own module."""
    bad, used = _scan(_imports_by_name, IMPORT_BY_NAME_PENDING, outside_engine=False)
    assert not bad, "imports by name: " + ", ".join(bad)
    assert used == set(IMPORT_BY_NAME_PENDING), \
        f"pending entries without such code any more: {set(IMPORT_BY_NAME_PENDING) - used}"


def test_the_scan_finds_what_it_looks_for():
    """The two scans recognise each form they look for (and pass plain code)."""
    src = ("import numpy as np\nimport importlib\n"
           "def f(x):\n"
           "    if type(x) is np.ndarray: pass\n"
           "    if type(x) is not torch.Tensor: pass\n"
           "    k, c = _B.dispatch(x)\n"
           "    if is_tensor(x) or isinstance(x, (torch.Tensor, list)): pass\n"
           "    return __import__('a.b')\n"
           "def g(x):\n"
           "    return isinstance(x, np.ndarray) or type(x).__name__\n")
    tree = ast.parse(src)
    assert sorted(set(_array_type_tests(tree))) == [4, 5, 6, 7]
    assert sorted(_imports_by_name(tree)) == [2, 8]


def _declarer(cls):
    return next(k for k in cls.__mro__ if "kernels" in k.__dict__)


def _module_of(fn) -> str:
    return getattr(fn, "py_func", fn).__module__


def test_every_stage_with_a_triton_path_declares_its_kernels_in_its_own_module():
    """Every stage that runs on the Triton backend declares a :class:`Kernels` set (its own
    or its base's); the set's numba kernels and the function that imports its Triton
    twins are defined in the declaring class's module (shared sets: in rtamt.engine), and
    the twins come from that module's ``_triton`` sibling, one per numba kernel, by the
    same name.  Gradient rules' adjoints (``<stage>_grad_triton.py``) likewise."""
    pytest.importorskip("triton")
    frame_stages = frame_stage_classes()
    assert FRAME_STAGES <= {c.__name__ for c in frame_stages}    # found, not listed: a
    # new frame stage (Moore2016 tvl2018's EarFIR, ComponentFloor) is checked below too
    for cls in frame_stages:           # every frame stage runs on Triton, with kernels or none
        assert cls.triton_ready and (cls.kernels is None) == (cls.__name__ in KERNEL_FREE), cls
    # the frame stages are Stage subclasses; those without kernels were checked above
    every = rtamt_stage_classes()
    stages = [c for c in every if c.triton_ready and c.kernels is not None]
    names = {c.__name__ for c in stages}
    assert {"Gammatone", "IHCEnvelope", "AdaptHighpass", "AdaptLoop", "ModFilterbank",
            "KingModFilterbank", "HeadphoneFilter", "MiddleEarFilter", "OuterMiddleEarFilter",
            "BrokenStick", "PowerCompression", "DRNL", "IHCPaulick2024",
            "Resampler"} | FRAME_STAGES - KERNEL_FREE <= names, names
    twins = set()
    for cls in stages:
        assert isinstance(cls.kernels, Kernels), cls
        owner = _declarer(cls)
        for part in cls.kernels.parts:
            if not part.numba:
                continue
            # a stage's own set lives in its module, or in the module of a stage whose set
            # it reuses (Moore2016 tvl2018's EarFIR runs the ear filters' FIR set); a part
            # shared by several sets lives in rtamt.engine
            homes = {k.__module__ for k in every if vars(k).get("kernels") is owner.kernels}
            for name, fn in part.numba.items():
                mod = _module_of(fn)
                assert (mod in homes) if part is owner.kernels else \
                    mod.startswith("rtamt.engine."), (cls, name, mod)
                assert part.triton.__module__ == mod, (cls, part.triton.__module__, mod)
            got = {f.__name__: f.__module__ for f in part.triton()}
            assert set(got) == set(part.numba), (cls, got, part.numba)
            mod = _module_of(next(iter(part.numba.values())))
            assert set(got.values()) == {mod + "_triton"}, (cls, got)
            twins.add(mod + "_triton")
    # a gradient rule declares its adjoints the same way, in the rule's own module or a
    # gradient module of its package (the loudness integrators' adjoint, shared by two
    # rules, in frames_grad); a set shared across packages (the biquad cascade's adjoint,
    # K-weighting's whole set) in rtamt.engine
    rules = {cls.grad_rule() for cls in every} - {None}
    for rule in rules:
        if rule.kernels is None:
            continue
        for part in rule.kernels.parts:
            if not part.numba:
                continue
            for name, fn in part.numba.items():
                mod = _module_of(fn)
                pkg = rule.__module__.rsplit(".", 1)[0]
                sibling = mod.endswith("_grad") and mod.rsplit(".", 1)[0] == pkg
                shared = mod.startswith("rtamt.engine.")
                assert (mod == rule.__module__ or sibling or shared) \
                    if part is rule.kernels else shared, (rule, name, mod)
            got = {f.__name__: f.__module__ for f in part.triton()}
            assert set(got) == set(part.numba), (rule, got, part.numba)
            mod = _module_of(next(iter(part.numba.values())))
            assert set(got.values()) == {mod + "_triton"}, (rule, got)
            twins.add(mod + "_triton")
    # and every Triton module of a stage package is a declared twin module
    on_disk = {p.relative_to(ROOT.parent).with_suffix("").as_posix().replace("/", ".")
               for p in ROOT.rglob("*_triton.py")}
    assert on_disk - twins - {"rtamt.engine.triton_lanes"} == set()


def test_to_binds_the_kernels_once_and_copies_share_them():
    """``to()`` stores the bound kernel set on each stage (the Triton twins on the device);
    back on numba the stage uses its class's numba set again; a deep copy of a stage (the
    scheduler's probes, warm-up) shares the bound set."""
    pytest.importorskip("triton")
    m = rtamt.Dau1997(16000.0, fhigh=2000.0)
    assert all(type(s).kern is s.kern and isinstance(s.kern, NumbaKernels) for s in m.stages)
    m.to("cpu", backend="triton")
    for s in m.stages:
        assert isinstance(s.kern, TritonKernels) and "kern" in s.__dict__
        assert str(s.kern.device) == "cpu"
        assert set(s.kern.names) == set(type(s).kern.names)
    c = copy.deepcopy(m)
    assert all(a.kern is b.kern for a, b in zip(m.stages, c.stages))
    m.to("cpu", backend="numba")
    assert all(s.kern is type(s).kern and "kern" not in s.__dict__ for s in m.stages)


@pytest.mark.parametrize("name", ["glasberg2002", "moore2016"])
def test_loudness_models_bind_their_frame_stages_once(name):
    """A loudness model's ``to()`` binds the kernels of each of its frame stages once (the
    Triton twins on the device), a deep copy shares them, and back on numba every stage
    runs its class's numba set."""
    pytest.importorskip("triton")
    m = rtamt.MODELS[name](32000.0)
    assert [type(s).__name__ for s in m.stages][:4] == ["InputCalibration", "Spectrum",
                                                         "Excitation", "SpecificLoudness"]
    m.to("cpu", backend="triton")
    kerned = [s for s in m.stages if s.kernels is not None]
    for s in kerned:
        assert isinstance(s.kern, TritonKernels) and str(s.kern.device) == "cpu"
        assert set(s.kern.names) == set(type(s).kern.names)
    c = copy.deepcopy(m)
    assert all(a.kern is b.kern for a, b in zip(m.stages, c.stages))
    m.to("cpu", backend="numba")
    assert all(s.kern is type(s).kern and "kern" not in s.__dict__ for s in m.stages)


def test_process_tm_runs_the_kernels_bound_to_the_stage():
    """A stage object runs the kernels bound to it, whatever its input; the class (the pure
    functional form) runs the class's numba kernels."""
    from rtamt.filterbank.gammatone import Gammatone, GammatoneParams

    calls = []
    numba = Gammatone.kern

    def recorded(*a):
        calls.append(a[-1].shape)
        return numba.gammatone4(*a)

    g = Gammatone(GammatoneParams(fs=16000.0, flow=500.0, fhigh=2000.0))
    ref = Gammatone(GammatoneParams(fs=16000.0, flow=500.0, fhigh=2000.0))
    g.kern = NumbaKernels({"gammatone4": recorded})
    x = np.random.default_rng(1).standard_normal(64)
    assert np.array_equal(g(x), ref(x)) and calls == [(1, 64, g.coeffs.fc.size)]
    st = Gammatone.init_state(g.coeffs, 1, 1, np.float64)
    Gammatone.process(g.coeffs, st, x[None])
    assert len(calls) == 1


def test_no_stage_params_carry_spl_ref():
    """Calibration has one home (issue 30 item 5): no stage's ``Params`` but the
    calibration stage's has an ``spl_ref`` field; the stages work in the internal units the
    models' calibration stage scales to."""
    import dataclasses

    stages = rtamt_stage_classes() + frame_stage_classes()
    assert {"AdaptLoop", "BrokenStick", "PowerCompression", "Spectrum",
            "InputCalibration"} <= {c.__name__ for c in stages}
    carry = [c.__qualname__ for c in stages
             if dataclasses.is_dataclass(c.Params)
             and "spl_ref" in {f.name for f in dataclasses.fields(c.Params)}]
    assert carry == ["InputCalibration"]


def test_no_former_params_in_stage_code():
    """Issue 40 item 3: the stages whose ``Params`` lost ``spl_ref`` carry no
    ``former_params``; old snapshots are migrated on load (rtamt.engine.migrate)."""
    from rtamt.adaptation.adaptloop import AdaptLoop
    from rtamt.nonlinear.compression import BrokenStick, PowerCompression

    for cls in (AdaptLoop, BrokenStick, PowerCompression):
        assert not getattr(cls, "former_params", None), cls
    # no class of rtamt declares one (the Stage base neither)
    found = [f"{path}:{n.lineno}" for path, tree in _sources() for c in ast.walk(tree)
             if isinstance(c, ast.ClassDef) for n in c.body
             if isinstance(n, (ast.Assign, ast.AnnAssign)) and any(
                 isinstance(t, ast.Name) and t.id == "former_params"
                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
    assert not found, found


MODULATION_MODELS = ("dau1997", "osses2021", "king2019", "paulick2024")


@pytest.mark.parametrize("name", MODULATION_MODELS)
def test_every_modulation_model_is_headed_by_its_calibration_stage(name):
    """Every modulation model is a chain headed by an InputCalibration: its ``spl_ref``,
    ``input_gain``, ``input_limit`` and ``max_spl`` are the calibration's, the stages after
    it are designed the same for every ``spl_ref``, and the model's output is its stages'
    output for ``x`` times the calibration's gain in ``x``'s dtype (the same model with a
    unit-gain calibration)."""
    from rtamt.ear.calibration import InputCalibration

    fs = 44100.0 if name == "paulick2024" else 16000.0
    cls = rtamt.MODELS[name]
    m, m100 = cls(fs, spl_ref=94.0), cls(fs, spl_ref=100.0)
    cal = m.calibration
    assert isinstance(cal, InputCalibration) and cal.spl_ref == m.spl_ref == 94.0
    assert m.stages[0] is cal and m["calibration"] is cal     # issue 40: stages[0]
    assert "calibration" not in m.outputs and "calibration" not in m.output_info()
    assert m.input_gain == cal.gain and m.input_limit == cal.limit == cal.input_limit
    m.max_spl = 150.0
    assert cal.max_spl == 150.0 and m.input_limit == 10.0 ** ((150.0 - 94.0) / 20.0)
    assert [s.design_identity()["fingerprint"] for s in m.stages[1:]] == \
        [s.design_identity()["fingerprint"] for s in m100.stages[1:]]
    assert m.stages[0].design_identity() != m100.stages[0].design_identity()
    for dt in (np.float32, np.float64):
        x = (np.random.default_rng(1).standard_normal(600) * 0.1).astype(dt)
        a = cls(fs, spl_ref=94.0)
        b = Chain([InputCalibration(100.0)] + cls(fs, spl_ref=94.0).stages[1:])  # gain 1
        assert b.input_gain == 1.0
        np.testing.assert_array_equal(a(x), b(x * dt(a.input_gain)))
        assert set(a.process_all(x)) == set(a.outputs)
    assert cls(fs, spl_ref=94.0).calibration.gain == pytest.approx(
        20e-6 * 10 ** (94 / 20) if name == "paulick2024" else 10 ** (-6 / 20), rel=1e-15)


@pytest.mark.parametrize("name", ["glasberg2002", "moore2016"])
def test_loudness_models_are_headed_by_their_calibration_stage(name):
    """Glasberg2002 and Moore2016 are headed by an InputCalibration too (``stages[0]``,
    issue 40): ``spl_ref``, ``input_limit`` and ``max_spl`` are the calibration's, their
    frame stages are designed the same for every ``spl_ref``, and the model's output for
    ``x`` is the output of the same model at ``spl_ref`` 100 for ``x`` (as float64) times
    the calibration's gain."""
    from rtamt.calibration import InputCalibration

    cls = rtamt.MODELS[name]
    m, m100 = cls(32000.0, spl_ref=94.0), cls(32000.0, spl_ref=100.0)
    cal = m.calibration
    assert isinstance(cal, InputCalibration) and cal.spl_ref == m.spl_ref == 94.0
    assert m.stages[0] is cal and m["calibration"] is cal
    assert m.input_limit == cal.limit
    m.max_spl = 150.0
    assert cal.max_spl == 150.0 and m.input_limit == 10.0 ** ((150.0 - 94.0) / 20.0)
    assert [s.design_identity() for s in m.stages[1:]] == \
        [s.design_identity() for s in m100.stages[1:]]
    assert m.stages[0].design_identity() != m100.stages[0].design_identity()
    assert cal.gain == pytest.approx(10 ** (-6 / 20), rel=1e-15)
    lead = (2,) if name == "moore2016" else ()
    x = np.random.default_rng(1).standard_normal(lead + (600,)) * 0.1
    for dt in (np.float32, np.float64):
        a, b = cls(32000.0, spl_ref=94.0)(x.astype(dt)), m100(x.astype(dt).astype(np.float64)
                                                               * cal.gain)
        m100.reset()
        for k in a:
            want = b[k] if k == "frame_time" else b[k].astype(dt)
            np.testing.assert_array_equal(a[k], want, err_msg=k)


def test_loudness_models_recognise_their_former_design_fingerprint():
    """The snapshot migration (rtamt.loudness.migrate, issue 40) computes the design
    fingerprints of the monolithic models before they were built from stages (issue 30
    item 3; values of that code on this machine), for ``spl_ref`` 100 and others (that
    fingerprint took the spectrum designed at the model's ``spl_ref``, as the earlier
    spectrum gains held it): their snapshots load.  The present fingerprint (calibration
    gain and every stage's) tells the same designs apart."""
    from rtamt.loudness.migrate import _former_model_identity

    fp = [(rtamt.Glasberg2002, 32000.0, {}, "97ff26a690d2275a"),
          (rtamt.Glasberg2002, 44100.0, {}, "7ca1475d741fccbd"),
          (rtamt.Moore2016, 48000.0, {}, "6bcad4dcde02003f"),
          (rtamt.Glasberg2002, 32000.0, {"spl_ref": 94.0}, "a0ba30b0cfcdb5bb"),
          (rtamt.Moore2016, 32000.0, {"spl_ref": 120.0, "field": "eardrum"},
           "1fd3210d09972c2a"),
          (rtamt.Moore2016, 44100.0, {"C": 0.0631, "middle_ear": "1997"}, "90487db3cefc80e7")]
    now = set()
    for cls, fs, kw, want in fp:
        m = cls(fs, **kw)
        assert _former_model_identity(m)["fingerprint"] == want, (cls, fs, kw)
        now.add(m.design_identity()["fingerprint"])
    assert len(now) == len(fp)
