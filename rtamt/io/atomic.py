"""Replace a small text file atomically: the whole new content or the old file, never a part."""
from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile

__all__ = ["write_text_atomic"]


def write_text_atomic(path, text: str, mode: int | None = None) -> pathlib.Path:
    """Write ``text`` to ``path`` through a temporary file in the same directory.

    The temporary file is flushed to disk (``fsync``), given ``mode`` (default: the
    permission bits of the file it replaces, else ``0o644``) and renamed over ``path``
    (``os.replace``, atomic on POSIX); the directory is then synced so the rename survives
    a crash.  On any failure (a full disk, a read-only directory, an interrupt) the
    temporary file is removed, the previous file is left unchanged and the error is
    raised.  Returns ``path`` as a :class:`pathlib.Path`."""
    p = pathlib.Path(path)
    if mode is None:
        try:
            mode = p.stat().st_mode & 0o777 if p.exists() else 0o644
        except OSError:
            mode = 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError, AttributeError):   # make the rename durable (POSIX)
        dfd = os.open(p.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return p
