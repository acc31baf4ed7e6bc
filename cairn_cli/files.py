"""Files cairn owns: a private home (0700) with private files in it (0600), atomic writes, advisory locks.

Prompts, memories and transcripts' content live under CAIRN_HOME: nothing there is readable by another account.
Stdlib only (the hooks use it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dir(path: str | os.PathLike[str]) -> str:
    """Create `path` (and its missing parents) mode 0700; an existing directory is left as it is."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        os.makedirs(path, mode=PRIVATE_DIR, exist_ok=True)
        os.chmod(path, PRIVATE_DIR)  # makedirs' mode is masked by the umask
    return path


def private_file(path: str | os.PathLike[str]) -> str:
    """Create `path` empty with mode 0600 when it does not exist (its directory private too)."""
    path = os.fspath(path)
    private_dir(os.path.dirname(path) or ".")
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE))
    except FileExistsError:
        pass
    return path


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append one line to a private log file (created 0600)."""
    fd = os.open(private_file(path), os.O_WRONLY | os.O_APPEND)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(line if line.endswith("\n") else line + "\n")


def atomic_write(
    path: str | os.PathLike[str], data: str | bytes, *, mode: int | None = None, fsync: bool = True
) -> None:
    """Write `data` to `path` via a temp file in the same directory and os.replace: a reader sees the old file or
    the new one, never half of one. `mode`: the new file's mode (default: the existing file's, else 0600)."""
    path = os.path.realpath(os.fspath(path))  # a symlinked file (dotfiles) is written through to its target
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    if mode is None:
        mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else PRIVATE_FILE
    import tempfile  # here: the hook's log line (append_line) is on the hot path, tempfile is not

    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike[str]) -> Iterator[bool]:
    """Hold an exclusive flock on `path` (created 0600) for the block, without waiting: yields False (holding
    nothing) when another process has it. The lock dies with its process, so a crash never leaves it stuck."""
    fd = os.open(private_file(path), os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
