"""Replace a file atomically: the whole new content or the old file, never a part.

:class:`AtomicFile` writes a text file of any length as it is produced (bounded memory)
under a hidden temporary name beside its final one and renames it into place at the end;
:func:`write_text_atomic` does it for a small text in one call."""
from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile

__all__ = ["AtomicFile", "write_text_atomic"]


def _sync_dir(d: pathlib.Path) -> None:
    """Make a rename in directory ``d`` durable (POSIX; a no-op where it cannot be)."""
    with contextlib.suppress(OSError, AttributeError):
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


class AtomicFile:
    """A text file (UTF-8) written under a temporary name in the directory of ``path``
    (``.NAME.XXXXXXXX.tmp``, hidden) and renamed over ``path`` by :meth:`commit`.

    Nothing appears under ``path`` before :meth:`commit`: the temporary file is flushed to
    disk (``fsync``), given ``mode`` (default: the permission bits of the file it replaces,
    else ``0o644``), renamed (``os.replace``, atomic on POSIX), and the directory synced
    so the rename survives a crash.  :meth:`discard` removes the temporary file and leaves
    any previous file at ``path`` unchanged.  As a context manager: committed at a normal
    end, discarded when the block raises (an error, an interrupt).  ``tmp``: the temporary
    file's path (other files may be put beside it under names starting with it, e.g.
    parts to append, and removed by the caller)."""

    def __init__(self, path, mode: int | None = None):
        self.path = p = pathlib.Path(path)
        if mode is None:
            try:
                mode = p.stat().st_mode & 0o777 if p.exists() else 0o644
            except OSError:
                mode = 0o644
        self.mode = mode
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        self.tmp = pathlib.Path(tmp)
        try:
            self.file = os.fdopen(fd, "w", encoding="utf-8", newline="")
        except BaseException:
            os.close(fd)
            self.discard()
            raise

    def write(self, text: str) -> None:
        """Append ``text`` to the temporary file."""
        self.file.write(text)

    def commit(self) -> pathlib.Path:
        """Flush, sync and rename the temporary file over ``path`` (on a failure: discarded,
        and the error raised).  Returns ``path``."""
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.chmod(self.tmp, self.mode)
            os.replace(self.tmp, self.path)
        except BaseException:
            self.discard()
            raise
        _sync_dir(self.path.parent)
        return self.path

    def discard(self) -> None:
        """Close and remove the temporary file (the file at ``path`` is unchanged)."""
        f = self.__dict__.get("file")
        if f is not None:
            with contextlib.suppress(OSError, ValueError):
                f.close()
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.discard()
        return False


def write_text_atomic(path, text: str, mode: int | None = None) -> pathlib.Path:
    """Write ``text`` to ``path`` through a temporary file in the same directory
    (:class:`AtomicFile`): flushed to disk, given ``mode`` (default: the permission bits of
    the file it replaces, else ``0o644``) and renamed over ``path``; on any failure (a full
    disk, a read-only directory, an interrupt) the temporary file is removed, the previous
    file is left unchanged and the error is raised.  Returns ``path`` as a
    :class:`pathlib.Path`."""
    with AtomicFile(path, mode) as f:
        f.write(text)
    return f.path
