"""numba compilation options shared by every rtamt kernel.

``fastmath={'contract'}`` only (FMA contraction, deterministic per element); no
reassociation and no ``nnan``/``ninf`` assumptions, so a kernel gives the same bits for
a sample whatever block it arrives in.  ``cache=True`` keeps the machine code on disk.
"""
JIT = dict(nogil=True, cache=True, fastmath={"contract"}, error_model="numpy")
# helpers inlined into the kernels that call them (numba IR inlining)
INLINE = dict(JIT, inline="always")


# --- warm-up: load (or, on a first run, compile) the kernels a model needs -----------------

from dataclasses import dataclass, field  # noqa: E402


@dataclass
class WarmupStep:
    """One progress report of :func:`warmup`.

    ``event`` is ``"compile"`` when numba starts compiling ``kernel`` (its disk cache had
    no valid entry: the first run after an install or an edit), or ``"done"`` when step
    ``index`` of ``total`` (a stage of a chain, or the whole model) has run, taking
    ``seconds`` with ``loaded`` kernels read from the cache and ``compiled`` compiled.
    """

    event: str
    index: int
    total: int
    stage: str
    kernel: str = ""
    seconds: float = 0.0
    loaded: int = 0
    compiled: int = 0


@dataclass
class WarmupReport:
    """What :func:`warmup` did: wall ``seconds`` in all, kernels ``loaded`` from numba's
    cache and ``compiled``, and the ``"done"`` step of every stage."""

    seconds: float
    loaded: int
    compiled: int
    steps: list = field(default_factory=list)

    @property
    def cold(self) -> bool:
        """True if anything was compiled (the cache was cold or stale)."""
        return self.compiled > 0

    def describe(self) -> str:
        """One line, e.g. ``kernels: loaded from cache in 0.41 s (5 kernels)``."""
        if self.cold:
            return (f"kernels: compiled in {self.seconds:.1f} s (once; {self.compiled} compiled, "
                    f"{self.loaded} from cache; later runs load them from the cache)")
        return f"kernels: loaded from cache in {self.seconds:.2f} s ({self.loaded} kernels)"


def _dispatchers():
    """Every numba dispatcher defined in a loaded ``rtamt`` module."""
    import sys

    from numba.core.dispatcher import Dispatcher

    seen = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "rtamt" or name.startswith("rtamt.")):
            continue
        for v in list(vars(mod).values()):
            if isinstance(v, Dispatcher):
                seen[id(v)] = v
    return list(seen.values())


def warmup(model, dtype="float64", lead=(), block=None, progress=None) -> WarmupReport:
    """Run ``model`` once on a short signal so that every kernel it uses is loaded from
    numba's disk cache (or compiled, on a first run) before real processing starts.

    The model itself is not touched: a deep copy processes the signal and is thrown
    away.  ``dtype`` and ``lead`` (the leading shape of one block, e.g. ``()`` for mono,
    ``(2,)`` for two channels) should be those of the real stream, since numba compiles
    per argument type.  ``block`` defaults to 0.1 s of signal (4800 samples at 48 kHz),
    long enough for the models that work in frames.  ``progress(step)`` is called with
    a :class:`WarmupStep` when a kernel starts compiling and after each stage; nothing
    is printed here.  Returns a :class:`WarmupReport`.
    """
    import copy
    import time

    import numpy as np
    from numba.core import event as nb_event

    t_start = time.perf_counter()
    work = copy.deepcopy(model)
    fs = getattr(work, "fs", None)
    stages = list(getattr(work, "stages", []) or [])
    if fs is None and stages:
        fs = getattr(stages[0].params, "fs", None)
    n = int(block) if block else max(256, int(round(0.1 * float(fs or 48000.0))))
    t = np.arange(n) / float(fs or 48000.0)
    x = (0.01 * np.sin(2 * np.pi * 1000.0 * t)).astype(dtype)
    x = np.ascontiguousarray(np.broadcast_to(x, tuple(lead) + (n,)))

    names = [getattr(s, "name", type(s).__name__) for s in stages] or [
        getattr(work, "name", type(work).__name__)]
    total = len(names)
    cur = {"i": 1, "compiled": 0}
    steps = []

    def report(step):
        if progress is not None:
            progress(step)

    class _Listener(nb_event.Listener):
        def on_start(self, ev):
            # numba also compiles its own helpers (string formatting, ...) through
            # dispatchers; only rtamt's kernels are announced and counted
            fn = getattr(ev.data.get("dispatcher"), "py_func", None)
            if not getattr(fn, "__module__", "").startswith("rtamt"):
                return
            cur["compiled"] += 1
            report(WarmupStep("compile", cur["i"], total, names[cur["i"] - 1],
                              kernel=fn.__name__))

        def on_end(self, ev):
            pass

    disps = _dispatchers()

    def hits() -> int:
        return sum(sum(d.stats.cache_hits.values()) for d in disps)

    # a stage's step runs from the end of the previous one, so the chain's input check
    # and the thread's FTZ set-up count in the first stage
    last = {"t": 0.0, "hits": 0, "compiled": 0}

    def finish(i):
        now, h = time.perf_counter(), hits()
        step = WarmupStep("done", i, total, names[i - 1], seconds=now - last["t"],
                          loaded=h - last["hits"], compiled=cur["compiled"] - last["compiled"])
        last.update(t=now, hits=h, compiled=cur["compiled"])
        steps.append(step)
        report(step)

    hits_start = hits()
    with nb_event.install_listener("numba:compile", _Listener()):
        for i, st in enumerate(stages, 1):
            # timed inside the copy's own block loop: same code path and argument types
            # as real processing
            def timed(*a, _f=st.process_tm, _i=i):
                cur["i"] = _i
                y = _f(*a)
                finish(_i)
                return y
            st.process_tm = timed
        last.update(t=time.perf_counter(), hits=hits_start)
        work(x)
        if not stages:
            finish(1)
    return WarmupReport(time.perf_counter() - t_start, hits() - hits_start,
                        cur["compiled"], steps)
