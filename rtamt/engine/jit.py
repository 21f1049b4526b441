"""numba compilation options shared by every rtamt kernel.

``fastmath={'contract'}`` only (FMA contraction, deterministic per element); no
reassociation and no ``nnan``/``ninf`` assumptions, so a kernel gives the same bits for
a sample whatever block it arrives in.  ``cache=True`` keeps the machine code on disk.

numba finds a cache directory for a kernel's file in this order: ``NUMBA_CACHE_DIR``,
the ``__pycache__`` folder beside the file, the user's cache folder (``~/.cache/numba``).
Where none can be written (a read-only install with no writable ``HOME``, an
unwritable ``NUMBA_CACHE_DIR``), numba refuses to define a cached function at all
("cannot cache function ...: no locator available").  :func:`_choose_cache` checks this
once, before any kernel is defined, and falls back to a private folder under the
system's temporary directory (kept across runs), or, failing that (no writable temporary
directory either: ``tempfile.gettempdir()`` raises), to compiling in memory; it logs one
warning (logger ``rtamt``) saying which.
"""
import contextlib
import logging
import os
import tempfile

JIT = dict(nogil=True, cache=True, fastmath={"contract"}, error_model="numpy")

#: where the kernels' compiled code is cached when numba's own choices are unwritable
#: (``None``: numba's choice works, or nothing could be written and kernels compile in
#: memory); set at import by :func:`_choose_cache`
CACHE_FALLBACK: str | None = None


def _cache_probe():
    """A function in this file, handed to numba's cache locator as a probe."""


def _numba_can_cache() -> bool:
    """True if numba finds a writable cache directory for this package's files (the
    check numba itself makes when a function is defined with ``cache=True``)."""
    from numba.core.caching import FunctionCache

    try:
        FunctionCache(_cache_probe)
    except (RuntimeError, OSError):         # "cannot cache function ...: no locator"
        return False
    return True


def _private_dir(path: str) -> bool:
    """Create ``path`` (mode 0700) or accept it if it is a real folder of this user that
    nobody else can write (the cache holds pickled code: another user's folder is never
    trusted)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    import stat

    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & 0o022 and os.access(path, os.W_OK | os.X_OK))


def _choose_cache() -> None:
    """Keep numba's cache where numba can write it; otherwise point ``NUMBA_CACHE_DIR``'s
    setting (``numba.config.CACHE_DIR``) at a private temporary folder, or switch the
    disk cache off (``JIT['cache'] = False``), and log one warning."""
    global CACHE_FALLBACK
    if _numba_can_cache():
        return
    from numba.core import config

    log = logging.getLogger("rtamt")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    try:
        tmp = tempfile.gettempdir()
    except OSError:       # FileNotFoundError: "No usable temporary directory found"
        tmp = None
    path = None if tmp is None else os.path.join(tmp, f"rtamt-numba-cache-{uid}")
    if path is not None and hasattr(os, "getuid") and _private_dir(path):
        old = config.CACHE_DIR
        config.CACHE_DIR = path
        if _numba_can_cache():
            CACHE_FALLBACK = path
            log.warning("rtamt: numba cannot write its kernel cache (NUMBA_CACHE_DIR, the "
                        "package folder and ~/.cache are not writable); caching kernels in %s "
                        "(set NUMBA_CACHE_DIR to a writable folder to choose)", path)
            return
        config.CACHE_DIR = old
    JIT["cache"] = False
    log.warning("rtamt: numba cannot write its kernel cache anywhere (NUMBA_CACHE_DIR, the "
                "package folder, ~/.cache, %s); compiling kernels in memory, every run "
                "(set NUMBA_CACHE_DIR to a writable folder to keep them)",
                path or "no writable temporary directory")

_choose_cache()


# --- the first-run message: one line when numba starts compiling an rtamt kernel -------

#: the line logged (logger ``rtamt``, once per process) when a kernel is compiled rather
#: than loaded from the cache; :func:`warmup` with a ``progress`` callback leaves the
#: announcing to its caller
FIRST_COMPILE = ("rtamt: compiling kernels (first run, ~15-60 s per model on a 2-core "
                 "machine; cached afterwards)")
_first = {"announced": False, "quiet": 0}


def _on_compile_start(fn) -> None:
    if _first["announced"] or _first["quiet"] or not getattr(
            fn, "__module__", "").startswith("rtamt"):
        return
    _first["announced"] = True
    if JIT["cache"]:                   # else the import's warning said it compiles each run
        logging.getLogger("rtamt").warning(FIRST_COMPILE)


def mark_first_run_announced() -> None:
    """Say that the caller has told the user that kernels compile (as the apps' warm-up
    does): the global one-line notice is not logged after that in this process."""
    _first["announced"] = True


@contextlib.contextmanager
def _announced_by_caller(yes: bool):
    """No first-run line from the global listener while this is active (``yes``)."""
    _first["quiet"] += yes
    try:
        yield
    finally:
        _first["quiet"] -= yes


def _listen_for_compiles() -> None:
    from numba.core import event as nb_event

    class _FirstCompile(nb_event.Listener):
        def on_start(self, ev):
            _on_compile_start(getattr(ev.data.get("dispatcher"), "py_func", None))

        def on_end(self, ev):
            pass

    nb_event.register("numba:compile", _FirstCompile())


_listen_for_compiles()

# helpers inlined into the kernels that call them (numba IR inlining); made after
# _choose_cache, so it carries the same cache setting
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
        if self.cold and not JIT["cache"]:
            return (f"kernels: compiled in {self.seconds:.1f} s ({self.compiled} compiled, in "
                    "memory: not cached, no writable cache folder; set NUMBA_CACHE_DIR)")
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


def _parts(obj, seen=None):
    """``obj`` and every streaming object inside it (a chain's ``stages``, a
    :class:`~rtamt.engine.parallel.Parallel`'s children, a wrapper's ``model``), each once."""
    seen = set() if seen is None else seen
    if obj is None or id(obj) in seen:
        return
    seen.add(id(obj))
    yield obj
    kids = list(getattr(obj, "stages", None) or ())
    kids += list((getattr(obj, "children_map", None) or {}).values())
    kids.append(getattr(obj, "model", None))
    for k in kids:
        if not isinstance(k, (str, int, float, bytes)):
            yield from _parts(k, seen)


def _hooks(model) -> list:
    """The objects in ``model`` (see :func:`_parts`) with a ``warm_kernels()`` method.
    An object defines it when some of its kernels are reached only later in a stream than
    a short warm-up signal goes (e.g. the loudness meter's integrated loudness, after its
    first 400 ms gating block, and loudness range, after 3 s): the method calls them with
    arguments of the types real processing passes, leaving the object's state as it was."""
    return [p for p in _parts(model) if callable(getattr(p, "warm_kernels", None))
            and not isinstance(p, type)]


def warmup(model, dtype="float64", lead=(), block=None, progress=None) -> WarmupReport:
    """Run ``model`` once on a short signal so that every kernel it uses is loaded from
    numba's disk cache (or compiled, on a first run) before real processing starts.

    The model itself is not touched: a deep copy processes the signal and is thrown
    away.  ``dtype`` and ``lead`` (the leading shape of one block, e.g. ``()`` for mono,
    ``(2,)`` for two channels) should be those of the real stream, since numba compiles
    per argument type (dtype, number of dimensions, memory layout, read-only flag: the
    signal is writable and, with ``lead``, goes through in every layout real blocks
    come in).  ``block`` defaults to 0.1 s of signal (4800 samples at 48 kHz),
    long enough for the models that work in frames.  ``progress(step)`` is called with
    a :class:`WarmupStep` when a kernel starts compiling and after each stage; nothing
    is printed here.  Objects whose kernels a short signal does not reach (see
    :func:`_hooks`) then load them too, each as one more step named after the object.
    Returns a :class:`WarmupReport`.
    """
    import copy
    import time

    import numpy as np
    from numba.core import event as nb_event

    t_start = time.perf_counter()
    work = copy.deepcopy(model)
    fs = getattr(work, "fs", None)
    # one step per stage that is an output: the calibration (internal, no kernel to
    # compile) counts in the next stage's step, as the chain's input check does
    stages = [s for s in getattr(work, "stages", []) or [] if not getattr(s, "internal", False)]
    if fs is None:          # the first stage with a sample rate (not the calibration)
        fs = next((s.params.fs for s in stages if hasattr(getattr(s, "params", None), "fs")),
                  None)
    n = int(block) if block else max(256, int(round(0.1 * float(fs or 48000.0))))
    t = np.arange(n) / float(fs or 48000.0)
    x = (0.01 * np.sin(2 * np.pi * 1000.0 * t)).astype(dtype)
    # a writable copy: numba compiles separately for read-only arrays (what broadcast_to
    # returns), and real blocks are writable
    x = np.broadcast_to(x, tuple(lead) + (n,)).copy()
    # numba also compiles per memory layout.  A block with channels comes C-contiguous
    # (a (lead, T) array), as a slice of a longer one (`rtamt process`: layout 'A') or
    # as the transpose of a (T, channels) device buffer (the runtime: 'F'); the input
    # checks see that layout, so all three pass through (the later stages get copies)
    before = [x, np.asfortranarray(x)] if lead else []
    if lead:
        x = np.concatenate([x, x], axis=-1)[..., :n]

    names = [getattr(s, "name", type(s).__name__) for s in stages] or [
        getattr(work, "name", type(work).__name__)]
    hooks = _hooks(work)
    names += [getattr(h, "name", type(h).__name__) for h in hooks]
    total = len(names)
    cur = {"i": 1, "compiled": 0, "report": False}
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
    with _announced_by_caller(progress is not None), \
            nb_event.install_listener("numba:compile", _Listener()):
        for i, st in enumerate(stages, 1):
            # timed inside the copy's own block loop: same code path and argument types
            # as real processing
            def timed(*a, _f=st.process_tm, _i=i):
                cur["i"] = _i
                y = _f(*a)
                if cur["report"]:
                    finish(_i)
                    # what the model does after its last stage is the first hook's step
                    cur["i"] = min(_i + (_i == len(stages)), total)
                return y
            st.process_tm = timed
        last.update(t=time.perf_counter(), hits=hits_start)
        for xv in before:               # counted in the first stage's step
            work(xv)
        cur["report"] = True
        work(x)
        if not stages:
            finish(1)
        cur["report"] = False
        for i, h in enumerate(hooks, total - len(hooks) + 1):
            cur["i"] = i
            h.warm_kernels()
            finish(i)
    return WarmupReport(time.perf_counter() - t_start, hits() - hits_start,
                        cur["compiled"], steps)
