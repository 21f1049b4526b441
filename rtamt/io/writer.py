"""Incremental output writer: named arrays appended block by block along their last (time)
axis, with memory independent of the stream's length, and an atomic result.

Format
------
A directory with one ``NAME.npy`` per output, opened with ``np.load(path, mmap_mode='r')``
(or :func:`read_outputs`), plus small metadata arrays (``NAME.npy`` as well) and a JSON
sidecar ``rtamt.json`` describing the outputs.  An output of shape ``(..., T)`` is stored
in Fortran order: the time axis is the slowest in the file, so every block is one
contiguous run of bytes appended at the end, a longer stream only extends the file, and a
time window of a large output is read from one contiguous region.  ``np.load`` returns an
ordinary ``(..., T)`` array (``arr.flags.f_contiguous``).

Several such directories (one per channel of a run) can be committed together as one,
``DEST/NAME/``: :class:`OutputSet`.

Alternatively the same ``.npy`` members in one ``.npz`` (``np.load(path)``), assembled at
:meth:`OutputWriter.commit` by streaming each part into a ``ZIP_STORED`` archive, never
holding an output in memory.

Memory
------
Blocks are written with ``os.pwrite`` into a file whose header numpy's own ``.npy`` header
writer made, not through a memory map of the whole file: the pages of a mapping that the
writer touched would stay resident (and count in the process' RSS) for the whole run.
When the expected length of an output is known, its file is preallocated
(``posix_fallocate``, where the file system supports it), so a disk too small for the
result is reported at the first block instead of at the end.  The length written wins:
the header is rewritten with the final shape at the end (numpy's header reserves room for
the growth axis, so its size never changes) and the file is cut to it.

Nothing lost
------------
Everything is written into a hidden temporary directory beside the destination
(``.NAME.rtamt-tmp-PID@HOST-XXXX``: the writing process' id and host name), which also
proves, before any processing, that the destination's directory exists and is writable.
:meth:`OutputWriter.commit` fsyncs the parts and renames the result into place; an existing
destination is replaced only then (a directory only if it is empty or an earlier rtamt
output, i.e. holds ``rtamt.json``).
:meth:`OutputWriter.abort` (or leaving the ``with`` block by an exception) removes the
temporary directory: a failed run leaves neither a truncated output nor a damaged older
one.  Only a killed process (``SIGKILL``, a power cut) can leave the hidden temporary
directory behind: the next :class:`OutputWriter` in the same directory removes it
(:func:`remove_stale`), only where the name proves it is rtamt's and that its process, on
this host, is gone, never another run's that is still writing.
"""
from __future__ import annotations

import errno
import json
import os
import pathlib
import re
import secrets
import shutil
import zipfile

import numpy as np
from numpy.lib import format as npformat

__all__ = ["OutputWriter", "OutputSet", "read_outputs", "remove_stale", "MARKER"]

#: the JSON sidecar of an output directory (also what marks a directory as replaceable)
MARKER = "rtamt.json"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
#: a hidden working directory of a writer: ``.DEST.rtamt-(tmp|old)-PID@HOST-HEX``
_HIDDEN = re.compile(r"^\.(?P<dest>.+)\.rtamt-(?P<kind>tmp|old)-(?P<pid>\d+)"
                     r"@(?P<host>[A-Za-z0-9-]*)-[0-9a-f]{8}$")


def _host() -> str:
    """This machine's name, reduced to ``[A-Za-z0-9-]`` (at most 32 characters)."""
    return re.sub(r"[^A-Za-z0-9-]", "", os.uname().nodename)[:32]


def _owner() -> str:
    return f"{os.getpid()}@{_host()}"


def _alive(pid: int) -> bool:
    """True unless process ``pid`` certainly does not exist (``kill(pid, 0)``)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True        # someone else's process (or a pid we cannot ask about)
    return True


def remove_stale(parent) -> list[pathlib.Path]:
    """Remove the hidden directories (:data:`_HIDDEN` names) that killed writers left in
    ``parent``: only those written on this host by a process that no longer exists.  A
    ``tmp`` directory (an unfinished output) is deleted; an ``old`` one (the previous output,
    moved aside while the new one was renamed into place) is deleted when its destination
    exists, and renamed back to it when the kill came between the two renames.  Returns the
    paths deleted or restored; errors are ignored (the next run tries again)."""
    parent = pathlib.Path(parent)
    done = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return done
    host = _host()
    for e in entries:
        m = _HIDDEN.match(e.name)
        if m is None or m["host"] != host or int(m["pid"]) == os.getpid() \
                or _alive(int(m["pid"])) or not e.is_dir(follow_symlinks=False):
            continue
        path, dest = pathlib.Path(e.path), parent / m["dest"]
        try:
            if m["kind"] == "old" and not dest.exists() and not dest.is_symlink():
                os.rename(path, dest)
            else:
                shutil.rmtree(path)
        except OSError:
            continue
        done.append(path)
    return done


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


class _Part:
    """One ``.npy`` file being appended to along its last axis (Fortran order)."""

    def __init__(self, path: pathlib.Path, lead: tuple, dtype: np.dtype, expected: int | None,
                 preallocate: bool):
        self.path, self.lead, self.dtype = path, tuple(lead), np.dtype(dtype)
        self.step = int(np.prod(self.lead, dtype=np.int64)) * self.dtype.itemsize  # bytes/sample
        self.length = 0
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            self.offset = self._write_header(self.length if expected is None else expected)
            if preallocate and expected and self.step:
                try:
                    os.posix_fallocate(self.fd, self.offset, int(expected) * self.step)
                except OSError as e:
                    if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                        raise
        except BaseException:
            os.close(self.fd)
            raise

    def _header(self, length: int) -> dict:
        return {"descr": npformat.dtype_to_descr(self.dtype), "fortran_order": len(self.lead) > 0,
                "shape": self.lead + (int(length),)}

    def _write_header(self, length: int) -> int:
        with os.fdopen(os.dup(self.fd), "r+b") as f:
            f.seek(0)
            npformat.write_array_header_1_0(f, self._header(length))
            return f.tell()

    def append(self, block: np.ndarray) -> None:
        if block.shape[:-1] != self.lead or block.dtype != self.dtype:
            raise ValueError(f"{self.path.stem}: block of shape {block.shape} {block.dtype} "
                             f"does not continue an output of shape {self.lead + ('T',)} "
                             f"{self.dtype}")
        n = block.shape[-1]
        if n == 0:
            return
        # the block's bytes in Fortran order = its transpose's in C order (one copy at most)
        buf = memoryview(np.ascontiguousarray(block.T)).cast("B")
        pos = self.offset + self.length * self.step
        while len(buf):
            k = os.pwrite(self.fd, buf, pos)
            buf, pos = buf[k:], pos + k
        self.length += n

    def finish(self, fsync: bool) -> None:
        """Header with the final shape, file cut to the data written."""
        if self._write_header(self.length) != self.offset:     # cannot happen (numpy pads)
            raise OSError(f"{self.path}: the .npy header changed size")
        os.ftruncate(self.fd, self.offset + self.length * self.step)
        if fsync:
            os.fsync(self.fd)
        self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class _AbortUnlessDone:
    """``with`` support: leaving the block before ``done`` (an exception) calls
    ``abort()``."""

    done = False

    def abort(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if not self.done:
            self.abort()
        return False


class OutputWriter(_AbortUnlessDone):
    """Write named arrays incrementally along their last (time) axis.

    ``dest``: a directory (one ``.npy`` per output, see the module docstring) or a file
    name ending in ``.npz`` (one archive, same members).  The destination is checked and
    the temporary directory made here, before any data exists: a missing or read-only
    parent directory, or a destination of the wrong kind, raises :class:`OSError` with a
    one-line message.

    ``lengths``: ``{name: expected number of samples}`` where known (preallocation only;
    the length written is what the result holds).  Outputs take their leading shape and
    dtype from their first block (a block may have zero samples).

    Use::

        with OutputWriter("out/", lengths={"adaptloop": n}) as w:
            for block in blocks:
                w.write(model.process_all(block))
            w.add_meta(fs=np.float64(fs))
            w.commit(info={"model": "dau1997"})

    Leaving the ``with`` block without :meth:`commit` (an exception) calls :meth:`abort`.
    """

    def __init__(self, dest, *, lengths: dict | None = None, preallocate: bool = True,
                 fsync: bool = True):
        self.dest = pathlib.Path(dest)
        self.kind = "npz" if self.dest.suffix.lower() == ".npz" else "dir"
        self.lengths_expected = dict(lengths or {})
        self.preallocate, self.fsync = preallocate, fsync
        self.check_destination(self.dest)
        parent = self.dest.parent
        self.removed = remove_stale(parent)     # leftovers of killed runs
        try:
            self.tmp = _new_dir(parent, f".{self.dest.name}.rtamt-tmp-{_owner()}-")
        except OSError as e:
            raise OSError(f"cannot write in {parent or '.'}: {e.strerror or _one_line(e)}") \
                from None
        self._parts: dict[str, _Part] = {}
        self._meta: dict[str, np.ndarray] = {}
        self.done = False

    # -- checks ------------------------------------------------------------------------
    @staticmethod
    def check_destination(dest) -> None:
        """Raise :class:`OSError` (one line) if ``dest`` cannot receive an output: its
        directory does not exist or is no directory, or ``dest`` exists and is not what
        would be written there (a ``.npz`` name that is a directory, a directory name that
        is a file, a non-empty directory that is not an earlier rtamt output).  Whether the
        directory is writable is learnt by writing (the constructor makes its temporary
        directory there)."""
        dest = pathlib.Path(dest)
        parent = dest.parent
        if not parent.exists():
            raise OSError(f"output directory {parent} does not exist")
        if not parent.is_dir():
            raise OSError(f"{parent} is not a directory")
        if dest.suffix.lower() == ".npz":
            if dest.is_dir():
                raise OSError(f"{dest} is a directory, not a .npz file")
        elif dest.exists() or dest.is_symlink():
            if not dest.is_dir():
                raise OSError(f"{dest} exists and is not a directory (give a directory, or a "
                              f"name ending in .npz for one file)")
            if any(dest.iterdir()) and not (dest / MARKER).is_file():
                raise OSError(f"{dest} is a non-empty directory that is not an rtamt output "
                              f"(no {MARKER}); give a new or empty directory")

    # -- writing -----------------------------------------------------------------------
    @property
    def lengths(self) -> dict:
        """Samples written so far, per output."""
        return {k: p.length for k, p in self._parts.items()}

    @property
    def shapes(self) -> dict:
        """Shape of each output so far (leading shape + samples written)."""
        return {k: p.lead + (p.length,) for k, p in self._parts.items()}

    def _part(self, name: str, block: np.ndarray) -> _Part:
        p = self._parts.get(name)
        if p is None:
            self._check_name(name)
            p = self._parts[name] = _Part(self.tmp / f"{name}.npy", block.shape[:-1],
                                          block.dtype, self.lengths_expected.get(name),
                                          self.preallocate)
        return p

    def _check_name(self, name: str) -> None:
        if self.done:
            raise ValueError("OutputWriter: already committed or aborted")
        if not _NAME.match(name) or name == MARKER.removesuffix(".json"):
            raise ValueError(f"OutputWriter: {name!r} cannot be an output name")
        if name in self._parts or name in self._meta:
            raise ValueError(f"OutputWriter: {name!r} given twice")

    def write(self, outputs: dict) -> None:
        """Append one block of each named output (``{name: (..., n) array}``)."""
        for name, v in outputs.items():
            v = np.asarray(v)
            if v.ndim == 0:
                raise ValueError(f"{name}: a block needs a time axis, got a scalar")
            self._part(name, v).append(v)

    def add_meta(self, **arrays) -> None:
        """Small arrays stored whole beside the outputs (``NAME.npy``), e.g. ``fs``."""
        for name, v in arrays.items():
            self._check_name(name)
            self._meta[name] = np.asarray(v)

    # -- the end -----------------------------------------------------------------------
    def commit(self, info: dict | None = None) -> pathlib.Path:
        """Finish every part, write the metadata and ``rtamt.json`` (``info`` plus the
        outputs' shapes and dtypes), and move the result into place.  Returns ``dest``.
        On failure the temporary directory is removed and the exception re-raised."""
        if self.done:
            raise ValueError("OutputWriter: already committed or aborted")
        try:
            for p in self._parts.values():
                p.finish(self.fsync)
            for k, v in self._meta.items():
                np.save(self.tmp / f"{k}.npy", v, allow_pickle=False)
            side = dict(info or {})
            side["outputs"] = {k: {**side.get("outputs", {}).get(k, {}),
                                   "shape": list(p.lead + (p.length,)), "dtype": p.dtype.str}
                               for k, p in self._parts.items()}
            side["meta"] = sorted(self._meta)
            (self.tmp / MARKER).write_text(json.dumps(side, indent=1, default=_jsonable) + "\n")
            if self.kind == "npz":
                self._commit_npz()
            else:
                self._commit_dir()
        except BaseException:
            self.abort()
            raise
        self.done = True
        return self.dest

    def _sync_dir(self, d: pathlib.Path) -> None:
        if self.fsync:
            _sync_dir(d)

    def _commit_dir(self) -> None:
        _move_into_place(self.tmp, self.dest, self.fsync)

    def _commit_npz(self) -> None:
        names = list(self._parts) + list(self._meta)
        zpath = self.tmp / MARKER.replace(".json", ".npz")
        with zipfile.ZipFile(zpath, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for k in names:
                zf.write(self.tmp / f"{k}.npy", arcname=f"{k}.npy")   # streamed in chunks
        if self.fsync:
            fd = os.open(zpath, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(zpath, self.dest)
        self._sync_dir(self.dest.parent)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def abort(self) -> None:
        """Drop everything written: the temporary directory goes, the destination is
        untouched."""
        for p in self._parts.values():
            p.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.done = True


class OutputSet(_AbortUnlessDone):
    """Several outputs of :class:`OutputWriter` committed together, as one directory.

    ``dest/NAME/`` per member (each a complete output directory: ``NAME.npy`` files,
    metadata, its own ``rtamt.json``; :func:`read_outputs` opens it) and ``dest/rtamt.json``
    (the ``info`` given to :meth:`commit` plus every member's output shapes).  The members
    are written inside one hidden temporary directory beside ``dest`` (named like an
    :class:`OutputWriter`'s, so :func:`remove_stale` clears what a killed run leaves), and
    :meth:`commit` renames the whole set into place: a run that fails or is aborted leaves
    neither a partial set nor a mix of new and old members, and an older ``dest`` (an
    earlier rtamt output, or an empty directory) is replaced only by a complete set.

    dest    : the directory to create (not a ``.npz`` name: :class:`OSError`).
    names   : the members, e.g. ``['ch0', 'ch1']``.
    lengths : ``{output: expected samples}``, the same for every member (preallocation,
              see :class:`OutputWriter`).

    ``self[name]`` is the member's :class:`OutputWriter` (``write`` / ``add_meta``; do not
    commit members yourself).  Leaving a ``with`` block without :meth:`commit` aborts.
    """

    def __init__(self, dest, names, *, lengths: dict | None = None, preallocate: bool = True,
                 fsync: bool = True):
        self.dest = pathlib.Path(dest)
        if self.dest.suffix.lower() == ".npz":
            raise OSError(f"{dest}: a set of outputs is a directory, not a .npz file")
        OutputWriter.check_destination(self.dest)
        parent = self.dest.parent
        self.removed = remove_stale(parent)
        names = list(names)
        bad = [n for n in names if not _NAME.match(str(n)) or n == MARKER.removesuffix(".json")]
        if bad or not names or len(set(names)) != len(names):
            raise ValueError(f"OutputSet: member names must be distinct file names, got {names}")
        try:
            self.tmp = _new_dir(parent, f".{self.dest.name}.rtamt-tmp-{_owner()}-")
        except OSError as e:
            raise OSError(f"cannot write in {parent or '.'}: {e.strerror or _one_line(e)}") \
                from None
        self.fsync = fsync
        self.done = False
        self.writers: dict[str, OutputWriter] = {}
        try:
            for n in names:
                self.writers[n] = OutputWriter(self.tmp / n, lengths=lengths,
                                               preallocate=preallocate, fsync=fsync)
        except BaseException:
            self.abort()
            raise

    def __getitem__(self, name: str) -> OutputWriter:
        return self.writers[name]

    @property
    def nbytes(self) -> int:
        """Bytes of output data written so far, every member."""
        return sum(p.length * p.step for w in self.writers.values() for p in w._parts.values())

    def commit(self, info: dict | None = None, member_info: dict | None = None) -> pathlib.Path:
        """Commit every member (``member_info[name]``: the ``info`` of its ``rtamt.json``),
        write ``dest/rtamt.json`` and move the set into place.  Returns ``dest``.  On
        failure everything written is removed (an older ``dest`` stays) and the exception
        is re-raised."""
        if self.done:
            raise ValueError("OutputSet: already committed or aborted")
        try:
            members = {}
            for n, w in self.writers.items():
                w.commit((member_info or {}).get(n))
                members[n] = {k: list(s) for k, s in w.shapes.items()}
            side = dict(info or {})
            side["members"] = members
            (self.tmp / MARKER).write_text(json.dumps(side, indent=1, default=_jsonable) + "\n")
            _move_into_place(self.tmp, self.dest, self.fsync)
        except BaseException:
            self.abort()
            raise
        self.done = True
        return self.dest

    def abort(self) -> None:
        """Drop everything written; ``dest`` is untouched."""
        for w in self.writers.values():
            if not w.done:
                w.abort()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.done = True


def _sync_dir(d: pathlib.Path) -> None:
    """fsync directory ``d`` (its entries: a rename into it survives a crash); errors are
    ignored (not every file system can)."""
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _move_into_place(tmp: pathlib.Path, dest: pathlib.Path, fsync: bool) -> None:
    """Rename the finished directory ``tmp`` to ``dest``; an existing ``dest`` directory is
    first moved aside (hidden ``old`` name, see :func:`remove_stale`), put back if the
    rename fails, and removed once the new one is in place."""
    if fsync:
        _sync_dir(tmp)
    old = None
    if dest.is_dir():
        old = _new_dir(dest.parent, f".{dest.name}.rtamt-old-{_owner()}-")
        old.rmdir()
        os.rename(dest, old)
    try:
        os.rename(tmp, dest)
    except BaseException:
        if old is not None:
            os.rename(old, dest)
        raise
    if fsync:
        _sync_dir(dest.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _new_dir(parent: pathlib.Path, prefix: str) -> pathlib.Path:
    """A new directory ``parent/prefix<random>`` (mode 0777 less the umask)."""
    for _ in range(100):
        d = parent / f"{prefix}{secrets.token_hex(4)}"
        try:
            os.mkdir(d, 0o777)
            return d
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(parent / prefix))


def _jsonable(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, pathlib.Path):
        return str(v)
    raise TypeError(f"{type(v).__name__} is not JSON serialisable")


def read_outputs(path, mmap: bool = True) -> dict:
    """Open an output of :class:`OutputWriter`: ``{name: array}`` of every output and
    metadata array.  A directory's arrays are memory-mapped read-only when ``mmap``
    (nothing is read until used); a ``.npz`` is loaded member by member."""
    path = pathlib.Path(path)
    if path.is_dir():
        return {p.stem: np.load(p, mmap_mode="r" if mmap else None, allow_pickle=False)
                for p in sorted(path.glob("*.npy"))}
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
