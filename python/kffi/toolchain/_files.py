"""python/kffi/toolchain/_files.py: the build cache's files: atomic writes, the records beside
each built file (its size and SHA-256), and the per-build lock.

A built file that does not match its record (truncated by a full disk or a killed copy,
overwritten, edited) is built again instead of failing every later load. kffi.cpp (cpp.py) and
kffi.cuda's cache use these.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from typing import Protocol


def cache_dir() -> str:
    """Root of the build cache: $KFFI_CACHE_DIR, else $XDG_CACHE_HOME/kffi, else ~/.cache/kffi."""
    root = os.environ.get("KFFI_CACHE_DIR")
    if root:
        return os.path.abspath(os.path.expanduser(root))
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(xdg), "kffi")


def _write_atomic(path: str, data: str | bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a shared cache is read by others
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ---------------------------------------------------------------------------------------------
# The cache's records: beside each built file, `<file>.sha256` holds its size and SHA-256. A file
# that does not match (truncated by a full disk or a killed copy, overwritten, edited) is built
# again instead of failing every later load.
# ---------------------------------------------------------------------------------------------


def _file_record(path: str) -> str | None:
    """``"<size> <sha256 hex>"`` of the regular file at path; None when it cannot be read."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # a FIFO would block the read; anything else is no build output
        h = hashlib.sha256()
        size = 0
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
                size += len(chunk)
    except OSError:
        return None
    return f"{size} {h.hexdigest()}"


def _cache_entry_intact(path: str) -> bool:
    """Whether the built file at path is the one its record describes (size first: no read)."""
    record_path = path + ".sha256"
    try:
        if not stat.S_ISREG(os.stat(record_path).st_mode):
            return False
        with open(record_path, encoding="ascii", errors="replace") as f:
            record = f.read(256).strip()
        size = os.stat(path).st_size
    except OSError:
        return False
    if record.split(" ", 1)[0] != str(size):
        return False
    return _file_record(path) == record


def _keep_record(path: str) -> None:
    """Writes the record of the file just built at path.

    After the file: a reader that sees the new file with an old record takes the entry as damaged
    and waits for the build's lock.
    """
    record = _file_record(path)
    if record is None:
        raise OSError(f"kffi.cpp: cannot read back the file just built: {path}")
    _write_atomic(path + ".sha256", record + "\n")


class _LockSite(Protocol):
    """What names a build's lock file: ``<dir>/.<name>_<hash>.lock``.

    A _Plan, or a cache entry of kffi.cuda's.
    """

    @property
    def dir(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def hash(self) -> str: ...


@contextlib.contextmanager
def _locked(plan: _LockSite, quiet: bool) -> Iterator[None]:
    os.makedirs(plan.dir, exist_ok=True)
    lock_path = os.path.join(plan.dir, f".{plan.name}_{plan.hash}.lock")
    with open(lock_path, "a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not quiet:
                print(
                    f"kffi.cpp: waiting for another process building {plan.name!r} in {plan.dir}",
                    file=sys.stderr,
                    flush=True,
                )
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
