"""``rtamt features``: rtamt features of a corpus as a lhotse ``CutSet`` (extra ``[lhotse]``).

::

    rtamt features DIR_OR_WAV_OR_MANIFEST... --out OUT [--model dau1997] [--output modfb]
                   [--pooling db] [--frame-shift 0.01] [--jobs N | --dask tcp://host:8786]

Inputs: WAV (or FLAC) files, directories (searched recursively for ``*.wav``, ``*.wave``,
``*.flac``), or lhotse manifests (``.jsonl[.gz]``, ``.json[.gz]``, ``.yaml``) of
recordings or cuts.  Every cut is one item, computed by
:class:`rtamt.integrations.lhotse.RtamtExtractor` in this process (``--jobs 1``), a pool
of ``N`` processes (``--jobs N``) or the workers of a running Dask scheduler (``--dask``;
the workers need rtamt with the extra installed and ``OUT`` on a shared file system).

``OUT`` holds:

* ``extractor.yaml``: the configuration (a rerun with another one is refused);
* ``feats/``: one lilcom (``--storage lilcom``, lossy to 2^-5) or ``.npy`` file per item
  (lhotse's ``LilcomFilesWriter`` / ``NumpyFilesWriter``);
* ``done/``: one JSON cut manifest per finished item, written atomically (a temporary
  file renamed into place) after its features are on disk;
* ``cuts.jsonl.gz``: every finished item's cut with its features (the lhotse ``CutSet``):
  every ``done/`` entry, this run's inputs first in their order, then any earlier run's
  (sorted by file name), so a run over fewer inputs or one whose items all fail never
  shrinks it; rebuilt at the end of each run and renamed into place (not written while
  no item has features: lhotse reads an empty manifest as ``None``);
* ``failures.jsonl``: the items that could not be computed in the last run (unreadable or
  corrupt audio, a truncated file with the frames that could be read, audio too short for
  one frame, a model error), one JSON object per line with the error.

Audio files are opened and read through :class:`rtamt.signals.AudioReader`, as in every
other app (:mod:`rtamt_apps.files`): an input file's length is what reading gives (a WAV
streamed through a pipe, an MP3 without a length tag), and a truncated file (its header
announces more frames than it holds, or decoding fails part way) is a failure naming the
frames read, unless ``--partial``: then its features are computed from those frames, a line
on stderr and the summary say so, and its cut carries ``custom["rtamt_truncated"]``.  The
recordings of a manifest are read by the same reader when they are one audio file each
(else by lhotse); their length is the manifest's, and a file shorter than its cut fails.

Resumable: an item whose ``done/`` entry exists is skipped, so a run that was killed
continues where it stopped; an item killed half way has no ``done/`` entry and is computed
again (its orphaned features file, if any, is never referenced).  A ``done/`` entry made
from other audio under the same id (another file, length or rate) is refused before
anything is computed.  Ctrl-C stops the run with one line saying how many items are kept
(exit status 130); the rerun resumes.  ``--jobs`` is capped at the number of usable cores
unless ``--force`` (:func:`rtamt_apps.files.cap_jobs`).

Exit status: 0 when at least one input of the run has features (computed now or done
before), even if others failed (each failed item is reported, listed in
``failures.jsonl`` and retried by the next run); 1 when every input failed (a
configuration or corpus problem rather than a few bad files; ``cuts.jsonl.gz`` keeps
what earlier runs computed); 2 for a usage error
(found before anything is written: a missing input, a manifest that holds an id twice,
an output path that is a file or not writable, a frame shift or model no input's sampling
rate allows, recordings with more channels than ``--channels`` takes, an unreachable
``--dask`` scheduler).  A write error
in ``OUT`` while computing (a full disk) stops the run: it is not the item's fault, so it
is never listed as a failure.

A progress bar (tqdm, on a terminal) shows audio hours done and the speed in hours of
audio per hour of wall time.
"""
from __future__ import annotations

import collections
import hashlib
import json
import os
import pathlib
import sys
import tempfile
import time

from rtamt.integrations import LHOTSE_INSTALL_HINT
from rtamt.io.atomic import write_text_atomic
from rtamt.models import MODELS

from .args import UsageError, int_range, positive_float, spl_ref_db
from .files import add_partial_argument, cap_jobs, partial_note, read_error
from .modelopts import add_fhigh_argument, model_kwargs

#: exit status when every input of the run failed (none of them has features in ``OUT``)
EXIT_ALL_FAILED = 1
#: failed items printed in the summary (all of them are in ``failures.jsonl``)
MAX_PRINTED_FAILURES = 20

#: file endings taken from a directory
DIR_EXTENSIONS = (".wav", ".wave", ".flac")
MANIFEST_EXTENSIONS = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".yaml", ".yml")
STORAGES = {"lilcom": "LilcomFilesWriter", "numpy": "NumpyFilesWriter"}


def add_arguments(p):
    p.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="WAV/FLAC files, directories (searched recursively) or lhotse "
                        "recordings/cuts manifests")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="output directory (created; a rerun resumes it)")
    p.add_argument("--model", default="dau1997", choices=sorted(MODELS))
    p.add_argument("--output", default=None, metavar="NAME",
                   help="model output to pool (default: modfb for the modulation models, "
                        "specific_loudness for the loudness models)")
    p.add_argument("--pooling", default=None, choices=["mean", "power", "rms", "db"],
                   help="per-frame pooling (default: db for modfb, mean otherwise)")
    p.add_argument("--frame-shift", type=positive_float(10.0), default=0.01, metavar="S",
                   help="frame shift in seconds (default 0.01)")
    p.add_argument("--spl-ref", type=spl_ref_db, default=100.0,
                   help="dB SPL of a digital RMS of 1.0 (default 100)")
    p.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    p.add_argument("--channels", default="auto", choices=["auto", "first", "mean"],
                   help="multi-channel audio: auto (mono; moore2016 left/right), first, mean")
    p.add_argument("--storage", default="lilcom", choices=sorted(STORAGES),
                   help="feature files: lilcom (compressed, to 2^-5) or numpy (exact float32)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--jobs", type=int_range(1, 1024), default=1, metavar="N",
                   help="worker processes on this machine (default 1: this process; at "
                        "most the number of usable cores unless --force)")
    g.add_argument("--dask", default=None, metavar="ADDRESS",
                   help="a running Dask scheduler, e.g. tcp://host:8786")
    p.add_argument("--force", action="store_true",
                   help="run --jobs processes even when that is more than the usable cores")
    add_partial_argument(p)
    add_fhigh_argument(p)


def run(args) -> int:
    try:
        import lhotse  # noqa: F401

        from rtamt.integrations import lhotse as rl
    except ImportError as e:
        raise UsageError(f"needs the [lhotse] extra ({' '.join(str(e).split())}): "
                         f"{LHOTSE_INSTALL_HINT}") from None
    if not args.inputs:
        raise UsageError("give one or more inputs (WAV files, directories, manifests)")
    if not args.out:
        raise UsageError("argument --out: give an output directory")
    try:
        cfg = rl.RtamtConfig(model=args.model, output=args.output, pooling=args.pooling,
                             frame_shift=args.frame_shift, spl_ref=args.spl_ref,
                             dtype=args.dtype, channels=args.channels,
                             model_kwargs=model_kwargs(args, MODELS[args.model]))
    except ValueError as e:
        raise UsageError(str(e).removeprefix("RtamtConfig: ")) from None
    out = pathlib.Path(args.out)
    cuts, failures, notes = _collect(args.inputs, args.partial)
    _check_inputs(rl.RtamtExtractor(cfg), cuts)
    jobs = cap_jobs("rtamt features", args.jobs, args.force)
    client = _connect(args.dask) if args.dask is not None else None
    try:
        _prepare_out(out, cfg)
        _check_done(out, cuts)
        return _Job(out, cfg, args.storage, cuts, failures, args.partial,
                    notes).run(jobs, client)
    finally:
        if client is not None:
            client.close()


# ------------------------------------------------------------------ inputs
def _is_manifest(p: pathlib.Path) -> bool:
    return p.name.lower().endswith(MANIFEST_EXTENSIONS)


def _recording(f: pathlib.Path, rid: str, partial: bool):
    """The lhotse ``Recording`` of audio file ``f`` (absolute path: the CutSet, and a Dask
    worker, must not depend on the cwd) with the length reading gives
    (:class:`rtamt.signals.AudioReader`), and the note of a truncated file read with
    ``partial`` (else None).  Raises :class:`rtamt.signals.AudioFileError`."""
    from lhotse import Recording
    from lhotse.audio import AudioSource

    from rtamt.signals import AudioReader

    path = f.resolve()
    with AudioReader(path, partial=partial) as r:
        rec = Recording(id=rid, sources=[AudioSource(type="file",
                                                     channels=list(range(r.channels)),
                                                     source=str(path))],
                        sampling_rate=int(r.fs), num_samples=r.frames,
                        duration=r.frames / r.fs)
        return rec, partial_note(r)


def _collect(inputs, partial: bool = False):
    """The cuts of every input, by cut id, the files that could not be opened (or are
    truncated, without ``partial``) ``[(id, source, error)]``, and the notes of truncated
    files read with ``partial`` ``{id: note}``.  Raises :class:`UsageError` for a missing
    input, a manifest of another kind, or two inputs with the same id."""
    from lhotse import CutSet, RecordingSet, load_manifest

    from rtamt.signals import AudioFileError

    cuts, failures, sources, notes = {}, [], {}, {}

    def add(cut, source):
        if cut.id in sources:
            raise UsageError(f"two inputs have the id {cut.id!r}: {sources[cut.id]} and "
                             f"{source} (rename one, or give a manifest with unique ids)")
        sources[cut.id] = source
        cuts[cut.id] = cut

    for inp in inputs:
        p = pathlib.Path(inp)
        if not p.exists():
            raise UsageError(f"no such file or directory: {inp}")
        if p.is_file() and _is_manifest(p):
            try:
                m = load_manifest(p)
            except Exception as e:        # lhotse raises plain Exceptions for bad manifests
                raise UsageError(f"{inp}: not a lhotse manifest ({_one_line(e)})") from None
            if isinstance(m, RecordingSet):
                _check_unique(inp, "recording", [r.id for r in m])
                m = CutSet.from_manifests(recordings=m)
            elif isinstance(m, CutSet):
                _check_unique(inp, "cut", [c.id for c in m])
            else:
                raise UsageError(f"{inp}: a {type(m).__name__}; expected recordings or cuts")
            for c in m:
                add(c, f"{inp}:{c.id}")
            continue
        files = ([p] if p.is_file() else
                 sorted(f for f in p.rglob("*") if f.is_file()
                        and f.name.lower().endswith(DIR_EXTENSIONS)))
        if not files:
            raise UsageError(f"{inp}: no {', '.join(DIR_EXTENSIONS)} files in this directory")
        for f in files:
            rid = f.stem if p.is_file() else _rel_id(f, p)
            try:
                rec, note = _recording(f, rid, partial)
            except (AudioFileError, OSError) as e:
                if rid in sources:
                    raise UsageError(f"two inputs have the id {rid!r}: {sources[rid]} and "
                                     f"{f}") from None
                sources[rid] = str(f)
                failures.append((rid, str(f), f"{type(e).__name__}: {read_error(e)}"))
                continue
            cut = CutSet.from_manifests(recordings=RecordingSet.from_recordings([rec]))[0]
            if note:
                cut.custom = {**(cut.custom or {}), "rtamt_truncated": note}
                notes[rid] = note
                print(f"rtamt features: {note}", file=sys.stderr, flush=True)
            add(cut, str(f))
    return cuts, failures, notes


def _check_unique(inp, what: str, ids) -> None:
    """Refuse a manifest in which an id occurs more than once (lhotse loads it, and the
    cuts made from two recordings of one id get ids of their own, so both would be computed
    and stored as features of one recording)."""
    dup = [f"{i!r} ({n}x)" for i, n in collections.Counter(ids).items() if n > 1]
    if dup:
        more = f" and {len(dup) - 5} more" if len(dup) > 5 else ""
        raise UsageError(f"{inp}: duplicate {what} id(s) {', '.join(dup[:5])}{more}; the "
                         f"{what} ids of a manifest must be unique")


def _check_inputs(ext, cuts) -> None:
    """Refuse, before anything is computed, a configuration that an input's sampling rate
    does not allow (a frame shift that is not a whole number of samples, a loudness model
    below 32 kHz; the model is built once per rate found) or its channel count does not
    (stereo recordings with ``--channels auto`` for a monaural model): those would fail
    every such item alike."""
    from rtamt.integrations.lhotse import BINAURAL

    rates, chans = {}, {}
    for c in cuts.values():
        rates.setdefault(c.sampling_rate, c.id)
        chans.setdefault(c.num_channels, c.id)
    for sr, cid in sorted(rates.items()):
        try:
            ext.feature_dim(sr)
        except ValueError as e:
            raise UsageError(f"{_one_line(e).removeprefix('ValueError: ')} (input {cid!r} and "
                             f"every other one at {sr} Hz; resample them or change the "
                             "options)") from None
    for n, cid in sorted(chans.items()):
        try:
            ext.check_channels(n)
        except ValueError:
            takes = ("1 (diotic) or 2 (left, right) channels" if ext.config.model in
                     BINAURAL else "1 channel")
            raise UsageError(f"input {cid!r} (and every other one with {n} channels): "
                             f"{ext.config.model} takes {takes} with --channels auto; give "
                             "--channels first (channel 0) or mean (down-mix)") from None


def _rel_id(f: pathlib.Path, root: pathlib.Path) -> str:
    """A recording id from a file's path below ``root`` (``a/b/x.wav`` -> ``a_b_x``)."""
    rel = f.relative_to(root).with_suffix("")
    return "_".join(rel.parts)


def _one_line(e: BaseException) -> str:
    """``Type: message`` on one line, without lhotse's audio-loading boilerplate (the
    hint about ``LHOTSE_AUDIO_LOADING_EXCEPTION_VERBOSE`` and the ``[extra info]`` dumps of
    the whole recording)."""
    msg = " ".join(str(e).split())
    msg = msg.split(" [extra info]")[0]
    msg = msg.replace(" Set LHOTSE_AUDIO_LOADING_EXCEPTION_VERBOSE=1 environment variable "
                      "for full stack traces.", "")
    return f"{type(e).__name__}: {msg}"


def _connect(address: str):
    """A ``distributed.Client`` of the scheduler at ``address`` (:class:`UsageError` when
    distributed is missing or the scheduler cannot be reached within 10 s)."""
    try:
        import distributed
    except ImportError:
        raise UsageError(f"--dask needs distributed: {LHOTSE_INSTALL_HINT}") from None
    try:
        return distributed.Client(address, timeout="10s")
    except (OSError, TimeoutError, ValueError) as e:
        raise UsageError(f"argument --dask: cannot reach the Dask scheduler at {address}: "
                         f"{_one_line(e)}") from None


# ------------------------------------------------------------------ output directory
def _prepare_out(out: pathlib.Path, cfg) -> None:
    """Create ``out`` (and ``done/``, ``feats/``) and check that files can be written in
    them; refuse one made with another configuration."""
    import yaml

    if out.exists() and not out.is_dir():
        raise UsageError(f"argument --out: {out} exists and is not a directory")
    want = cfg.to_dict()
    yml = out / "extractor.yaml"
    if yml.exists():
        have = yaml.safe_load(yml.read_text())
        have.pop("feature_type", None)
        if have != want:
            diff = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
            raise UsageError(f"argument --out: {out} holds features of another configuration "
                             f"({', '.join(f'{k}: {have.get(k)!r} there, {want.get(k)!r} now' for k in diff)}); "  # noqa: E501
                             "give another --out or the same options")
    elif out.exists() and any(out.iterdir()):
        raise UsageError(f"argument --out: {out} is not empty and holds no extractor.yaml "
                         "(not an rtamt features directory)")
    try:
        for d in (out, out / "done", out / "feats"):
            d.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=d).close()        # writable? (also for root's
        if not yml.exists():                             # read-only mounts)
            write_text_atomic(yml, yaml.safe_dump({**want, "feature_type": "rtamt"},
                                                  sort_keys=True))
    except OSError as e:
        raise UsageError(f"argument --out: cannot write in {out}: {_one_line(e)}") from None


def _done_path(out: pathlib.Path, cut_id: str) -> pathlib.Path:
    """``done/<id>.json``; ids that are not plain file names are hashed."""
    safe = (cut_id if cut_id and all(c.isalnum() or c in "-_." for c in cut_id)
            and not cut_id.startswith(".") else
            "h-" + hashlib.sha256(cut_id.encode()).hexdigest()[:32])
    return out / "done" / f"{safe}.json"


def _audio_key(d: dict) -> tuple:
    """What a cut's features depend on besides the configuration: its recording's sources
    (file paths made absolute), rate and length, and the cut's start, duration and
    channels."""
    rec = d.get("recording") or {}
    srcs = tuple((s.get("type"), os.path.abspath(s["source"]) if s.get("type") == "file"
                  else s.get("source"), tuple(s.get("channels") or ()))
                 for s in rec.get("sources", ()))
    ch = d.get("channel")
    return (srcs, rec.get("sampling_rate"), rec.get("num_samples"), float(d.get("start", 0)),
            float(d.get("duration", 0)), tuple(ch) if isinstance(ch, list) else ch)


def _check_done(out: pathlib.Path, cuts) -> None:
    """Refuse inputs whose id has a ``done/`` entry computed from other audio (a rerun
    would skip them and keep the other features)."""
    for cid, c in cuts.items():
        p = _done_path(out, cid)
        if not p.exists():
            continue
        try:
            have = json.loads(p.read_text())
        except ValueError:            # damaged (never by this app: written atomically):
            p.unlink()                # computed again
            continue
        if _audio_key(have) != _audio_key(c.to_dict()):
            src = (have.get("recording") or {}).get("sources") or [{}]
            raise UsageError(f"argument --out: {out} holds item {cid!r} computed from other "
                             f"audio ({src[0].get('source')!r}, not this input's); give "
                             "another --out, or rename the input")


# ------------------------------------------------------------------ one item (a worker)
_EXTRACTORS: dict = {}


class _Store:
    """A lhotse ``FeaturesWriter`` whose write errors stop the run: an ``OSError`` while
    storing is the output directory's fault (a full disk), never the item's."""

    def __init__(self, writer):
        self.writer = writer
        self.name = writer.name
        self.error = None

    @property
    def storage_path(self):
        return self.writer.storage_path

    def write(self, key, value):
        try:
            return self.writer.write(key, value)
        except OSError as e:
            self.error = e
            raise


def _cut_samples(cut, partial: bool = False):
    """The samples of ``cut``, ``(channels, samples)``: read by
    :class:`rtamt.signals.AudioReader` (float64) when its recording is one audio file
    without transforms (every input file; most manifests), else by lhotse's loader.  A
    file shorter than the cut is :class:`rtamt.signals.AudioFileError`."""
    from lhotse.utils import compute_num_samples

    from rtamt.signals import AudioFileError, AudioReader

    rec = getattr(cut, "recording", None)
    srcs = [] if rec is None else rec.sources
    if len(srcs) != 1 or srcs[0].type != "file" or rec.transforms:
        return cut.load_audio()
    src, fs = srcs[0], rec.sampling_rate
    start, n = compute_num_samples(cut.start, fs), cut.num_samples
    with AudioReader(src.source, partial=partial) as r:
        if r.fs != fs or r.channels != len(src.channels):
            raise ValueError(f"{src.source}: {r.fs:g} Hz, {r.channels} channel(s); the "
                             f"recording says {fs} Hz, {len(src.channels)} channel(s)")
        if r.frames < start + n:
            raise AudioFileError(f"{src.source}: truncated: holds {r.frames} frames, the cut "
                                 f"needs frames {start} to {start + n}")
        if start:
            r.seek(start)
        x = r.read(n)
    ids = cut.channel if isinstance(cut.channel, list) else [cut.channel]
    return x[[src.channels.index(c) for c in ids]]


def compute_item(cut_dict: dict, cfg_dict: dict, out: str, storage: str,
                 partial: bool = False):
    """Compute, store and mark done one cut: ``("ok", id, seconds, cut dict)``,
    ``("fail", id, seconds, error)`` for an item that cannot be computed (unreadable or
    truncated audio, audio shorter than half a frame, a model error), or ``("stop", id,
    seconds, error)`` when ``out`` cannot be written.  Runs in a worker (this process, a
    pool process or a Dask worker); the extractor (and its model) is kept per
    configuration.  The audio is read by :func:`_cut_samples` (``partial``: a truncated
    file's frames read)."""
    import lhotse
    from lhotse import CutSet
    from lhotse.utils import compute_num_frames_from_samples, fastcopy

    from rtamt.integrations.lhotse import RtamtConfig, RtamtExtractor

    key = json.dumps(cfg_dict, sort_keys=True)
    ext = _EXTRACTORS.get(key)
    if ext is None:
        ext = _EXTRACTORS[key] = RtamtExtractor(RtamtConfig.from_dict(dict(cfg_dict)))
    cut = CutSet.from_dicts([cut_dict])[0]
    outp = pathlib.Path(out)
    dur = float(cut.duration)
    n, fs = cut.num_samples, cut.sampling_rate
    if compute_num_frames_from_samples(n, ext.frame_shift, fs) == 0:
        return ("fail", cut.id, dur, f"too short: {n} sample(s) ({n / fs * 1e3:.3g} ms at "
                f"{fs} Hz) give no feature frame (a frame needs at least half of "
                f"--frame-shift {ext.frame_shift:g} s)")
    try:
        writer = getattr(lhotse, STORAGES[storage])(outp / "feats")
    except OSError as e:
        return ("stop", cut.id, dur, _one_line(e))
    store = _Store(writer)
    try:
        with writer:       # lhotse's compute_and_store_features, with rtamt's reader
            info = ext.extract_from_samples_and_store(
                samples=_cut_samples(cut, partial), storage=store,
                sampling_rate=cut.sampling_rate, offset=cut.start, channel=cut.channel)
            done = fastcopy(cut, features=info)
    except Exception as e:             # unreadable audio, a model error: report, go on
        if store.error is not None:
            return ("stop", cut.id, dur, _one_line(store.error))
        return ("fail", cut.id, dur, _one_line(e))
    d = done.to_dict()
    try:
        write_text_atomic(_done_path(outp, cut.id), json.dumps(d))
    except OSError as e:
        return ("stop", cut.id, dur, _one_line(e))
    return ("ok", cut.id, dur, d)


def _compute_args(args: tuple):
    return compute_item(*args)


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


# ------------------------------------------------------------------ the run
class _Job:
    def __init__(self, out, cfg, storage, cuts, failures, partial=False, notes=None):
        self.out, self.cfg, self.storage = out, cfg, storage
        self.cuts, self.failures = cuts, list(failures)
        self.partial, self.notes = bool(partial), dict(notes or {})

    def run(self, jobs: int, client=None) -> int:
        """Compute every item not done, write ``cuts.jsonl.gz`` and ``failures.jsonl``,
        print the summary; the exit status (module docstring)."""
        todo = [c for cid, c in self.cuts.items() if not _done_path(self.out, cid).exists()]
        skipped = len(self.cuts) - len(todo)
        total = sum(c.duration for c in todo)
        cfg_dict = self.cfg.to_dict()
        t0 = time.perf_counter()
        done_s = 0.0
        n_ok = 0
        bar = _progress(total)
        workers = jobs
        results = self._results(todo, cfg_dict, jobs, client)
        try:
            for status, cid, dur, info in results:
                if status == "stop":
                    raise OSError(f"cannot write in {self.out}: {info} (while storing item "
                                  f"{cid!r}; {n_ok} item(s) of this run are kept: rerun "
                                  "to resume)")
                if status == "ok":
                    n_ok += 1
                    done_s += dur
                else:
                    self.failures.append((cid, self._source(cid), info))
                if bar is not None:
                    wall = time.perf_counter() - t0
                    bar.update(dur / 3600.0)
                    bar.set_postfix_str(f"{done_s / max(wall, 1e-9):.1f} h audio/h wall",
                                        refresh=False)
            workers = self._workers
        except KeyboardInterrupt:
            if bar is not None:
                bar.close()
                bar = None
            results.close()            # stops the pool or the Dask futures
            n_done = sum(_done_path(self.out, cid).exists() for cid in self.cuts)
            print(f"rtamt features: interrupted; {n_done} of {len(self.cuts)} item(s) are "
                  f"done and kept in {self.out}: run the same command again to resume",
                  file=sys.stderr)
            raise
        finally:
            results.close()
            if bar is not None:
                bar.close()
        wall = time.perf_counter() - t0
        n_mine, n_cuts = self._write_cutset()
        self._write_failures()
        self._report(n_ok, skipped, done_s, wall, workers, n_cuts)
        if self.failures and n_mine == 0:
            print(f"rtamt features: every input failed, none has features (exit status "
                  f"{EXIT_ALL_FAILED})", file=sys.stderr)
            return EXIT_ALL_FAILED
        return 0

    def _source(self, cid) -> str:
        c = self.cuts.get(cid)
        try:
            return str(c.recording.sources[0].source)
        except (AttributeError, IndexError):
            return cid

    def _results(self, todo, cfg_dict, jobs, client):
        """(status, id, seconds, info) of every item, as they finish."""
        out = str(self.out.resolve())
        self._workers = jobs
        if client is None and jobs == 1:
            for c in todo:
                yield compute_item(c.to_dict(), cfg_dict, out, self.storage, self.partial)
            return
        if client is not None:
            import distributed

            self._workers = max(1, len(client.scheduler_info().get("workers", {})))
            window = 4 * self._workers
            pending = iter(todo)
            ac = distributed.as_completed()
            for c in _take(pending, window):
                ac.add(client.submit(compute_item, c.to_dict(), cfg_dict, out,
                                     self.storage, self.partial, pure=False))
            for fut in ac:
                yield fut.result()
                for c in _take(pending, 1):
                    ac.add(client.submit(compute_item, c.to_dict(), cfg_dict, out,
                                         self.storage, self.partial, pure=False))
            return
        import multiprocessing

        # workers ignore SIGINT: Ctrl-C reaches the whole process group, and the parent
        # decides; stopping early kills the running items, which is safe (an item's
        # done/ entry is written, atomically, only after its features)
        pool = multiprocessing.get_context("spawn").Pool(jobs, initializer=_ignore_sigint)
        try:
            yield from pool.imap_unordered(
                _compute_args, ((c.to_dict(), cfg_dict, out, self.storage, self.partial)
                                for c in todo))
        finally:
            pool.terminate()
            pool.join()

    def _write_cutset(self) -> tuple[int, int]:
        """``cuts.jsonl.gz`` from every ``done/`` entry (this run's inputs first, in their
        order, then the others by file name), renamed into place; returns the number of
        this run's inputs in it and the number of cuts."""
        from lhotse import CutSet

        done = self.out / "done"
        mine = [_done_path(self.out, cid) for cid in self.cuts]
        mine_set = set(mine)
        others = sorted(p for p in done.glob("*.json") if p not in mine_set)
        dicts, n_mine = [], 0
        for i, p in enumerate(mine + others):
            try:
                dicts.append(json.loads(p.read_text()))
            except FileNotFoundError:
                continue
            n_mine += i < len(mine)
        if not dicts:                  # lhotse would read an empty file back as None
            return 0, 0
        dest = self.out / "cuts.jsonl.gz"
        tmp = self.out / ".cuts.tmp.jsonl.gz"
        CutSet.from_dicts(dicts).to_file(tmp)
        os.replace(tmp, dest)
        return n_mine, len(dicts)

    def _write_failures(self) -> None:
        lines = "".join(json.dumps({"id": i, "source": s, "error": e}) + "\n"
                        for i, s, e in self.failures)
        write_text_atomic(self.out / "failures.jsonl", lines)

    def _report(self, n_ok, skipped, done_s, wall, workers, n_cuts) -> None:
        cfg = self.cfg
        print(f"rtamt features: {cfg.model} {cfg.output} ({cfg.pooling}, "
              f"{cfg.frame_shift * 1e3:g} ms frames) -> {self.out}")
        speed = done_s / wall if wall > 0 else 0.0
        print(f"  computed {n_ok} item(s), {done_s / 3600:.4f} h of audio in {wall:.1f} s "
              f"wall: {speed:.1f} h audio per h wall ({speed / workers:.1f} per worker, "
              f"{workers} worker(s))")
        print(f"  skipped {skipped} item(s) already done")
        if self.notes:
            print(f"  {len(self.notes)} truncated file(s) computed from the frames read "
                  "(--partial; their cuts carry custom['rtamt_truncated']):")
            for note in list(self.notes.values())[:MAX_PRINTED_FAILURES]:
                print(f"    {note}")
        if self.failures:
            print(f"  FAILED {len(self.failures)} item(s), listed in "
                  f"{self.out / 'failures.jsonl'}:")
            for _id, s, e in self.failures[:MAX_PRINTED_FAILURES]:
                print(f"    {s}: {e}")
            if len(self.failures) > MAX_PRINTED_FAILURES:
                print(f"    ... and {len(self.failures) - MAX_PRINTED_FAILURES} more")
        else:
            print("  no failures")
        if n_cuts:
            print(f"  wrote {self.out / 'cuts.jsonl.gz'} ({n_cuts} cut(s) with features)")
        else:
            print("  no cut has features: cuts.jsonl.gz not written")


def _take(it, n):
    out = []
    for _ in range(n):
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out


def _progress(total_s: float):
    """A tqdm bar in hours of audio on a terminal's stderr (None otherwise)."""
    if total_s <= 0 or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total_s / 3600.0, unit="h", desc="rtamt features", file=sys.stderr,
                dynamic_ncols=True,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.3f}/{total:.3f} h audio "
                           "[{elapsed}<{remaining}, {postfix}]")
