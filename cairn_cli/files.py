"""Files cairn owns: a private home (0700) with private files in it (0600), atomic writes, advisory locks.

Prompts, memories and transcripts' content live under CAIRN_HOME: nothing there is readable by another account.
Stdlib only, and light: the prompt hook writes its log line through here (no contextlib, whose import pulls in
collections and functools).
"""

from __future__ import annotations

import errno
import fcntl
import os

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


def append_line(
    path: str | os.PathLike[str],
    line: str,
    *,
    max_bytes: int = 0,
    keep: int = 0,
    copy_truncate: bool = False,
    make_dirs: bool = True,
    scrub: bool = True,
) -> None:
    """Append one line to a private log file (created 0600), whole or not at all, scrubbed (core/redact.py: an
    error may quote a prompt) unless `scrub` is False: a line made only of cairn's own words and ids (the prompt
    hook's summary line, which then imports nothing more).

    The line goes out in one os.write on an O_APPEND descriptor, so lines of concurrent writers never interleave.
    On a full disk (or a file size limit) a write may be short: what it wrote is cut off again, so no partial line
    is left for the next one to be glued to, and OSError is raised (a log's caller decides whether that matters).
    `max_bytes` > 0: once the file has grown past it, it is rotated (`rotate`: `keep` old generations).
    `make_dirs` False: a missing directory is FileNotFoundError, never created (an orphaned daemon's deleted home)."""
    if scrub:
        from cairn_cli.core.redact import scrub as scrubbed

        line = scrubbed(line)  # a log keeps no secret: an error may quote a prompt (docs/privacy.md)
    path = os.fspath(path)
    data = (line if line.endswith("\n") else line + "\n").encode("utf-8", errors="replace")
    if make_dirs:
        private_file(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
    try:
        written = os.write(fd, data)  # an error here wrote nothing (POSIX reports a partial write as a count)
        end = os.lseek(fd, 0, os.SEEK_CUR)  # O_APPEND: the end of what this write put in the file
        if written < len(data):
            if os.fstat(fd).st_size >= end:  # not when a copy_truncate rotation has just cut the file
                os.ftruncate(fd, end - written)
            raise OSError(errno.ENOSPC, f"{path}: only {written} of {len(data)} bytes fitted, the line was cut off")
    finally:
        os.close(fd)
    if max_bytes > 0 and end > max_bytes:
        try:
            rotate(path, keep, over=max_bytes, copy_truncate=copy_truncate)
        except OSError:
            pass  # the line is written; the next one tries the rotation again


def append_log(path: str | os.PathLike[str], line: str, *, copy_truncate: bool = False, scrub: bool = True) -> None:
    """append_line with the log rotation settings (CAIRN_LOG_MAX_BYTES, CAIRN_LOG_KEEP), resolved now."""
    from cairn_cli import config

    max_bytes, keep = config.get("LOG_MAX_BYTES"), config.get("LOG_KEEP")
    append_line(
        path, line, max_bytes=int(str(max_bytes)), keep=int(str(keep)), copy_truncate=copy_truncate, scrub=scrub
    )


def generation(path: str | os.PathLike[str], n: int) -> str:
    """The name of a log's `n`-th old generation (`hook.log.1` is the newest)."""
    return f"{os.fspath(path)}.{n}"


def rotate(path: str | os.PathLike[str], keep: int, *, over: int = 0, copy_truncate: bool = False) -> bool:
    """When `path` holds more than `over` bytes, make it `path.1` (`path.1` becomes `path.2`, ..., and the
    generations past `keep` are deleted); True when it rotated. One process rotates at a time (a non-blocking
    flock on `path.lock`): one that finds it taken, or finds the file already small again (another process
    rotated it since this one wrote), leaves it alone; a writer that lost the race simply appended to the file
    that was current, which is now `path.1`: nothing is lost.

    `copy_truncate`: the file is copied to `path.1` and cut to nothing in place, instead of renamed. For a log that
    a long-lived process also writes through a descriptor it holds (the daemon's stderr): after a rename it would
    go on writing into `path.1`, and once that was deleted, into a file no one can see or bound. A line that
    arrives between the copy and the cut is lost; writers append at the new end after it."""
    path = os.fspath(path)
    try:
        if os.stat(path).st_size <= over:
            return False
    except FileNotFoundError:
        return False
    with exclusive_lock(path + ".lock", make_dirs=False) as held:
        if not held:
            return False
        try:
            if os.stat(path).st_size <= over:  # again, holding the lock: another process may have rotated it
                return False
        except FileNotFoundError:
            return False
        n = max(0, keep) + 1
        while os.path.exists(generation(path, n)):  # generations a larger CAIRN_LOG_KEEP left behind
            os.unlink(generation(path, n))
            n += 1
        if keep <= 0:
            if copy_truncate:
                os.truncate(path, 0)
            else:
                os.unlink(path)
            return True
        for i in range(keep - 1, 0, -1):
            if os.path.exists(generation(path, i)):
                os.replace(generation(path, i), generation(path, i + 1))
        if copy_truncate:
            _copy_then_truncate(path, generation(path, 1))
        else:
            os.replace(path, generation(path, 1))
        return True


def _copy_then_truncate(path: str, to: str) -> None:
    """Copy `path` to `to` (private, whole or not at all), then cut `path` to nothing in place (its inode, and every
    descriptor open on it, stay)."""
    import shutil

    tmp = f"{to}.tmp"
    fd = os.open(path, os.O_RDWR)
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
        try:
            with open(fd, "rb", closefd=False) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)  # to the end as it is now: what arrived while copying included
            os.replace(tmp, to)
        except BaseException:
            _unlink_if_there(tmp)
            raise
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)


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
        _unlink_if_there(tmp)
        raise


def _unlink_if_there(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class _ExclusiveLock:
    __slots__ = ("fd", "held", "make_dirs", "path")

    def __init__(self, path: str, make_dirs: bool):
        self.path, self.make_dirs, self.fd, self.held = path, make_dirs, -1, False

    def __enter__(self) -> bool:
        if self.make_dirs:
            private_file(self.path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.held = True
        except BlockingIOError:
            self.held = False
        except BaseException:
            os.close(self.fd)
            raise
        return self.held

    def __exit__(self, *exc: object) -> None:
        try:
            if self.held:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)


def exclusive_lock(path: str | os.PathLike[str], *, make_dirs: bool = True) -> _ExclusiveLock:
    """`with exclusive_lock(path) as held:` holds an exclusive flock on `path` (created 0600) for the block, without
    waiting: `held` is False (holding nothing) when another process has it. The lock dies with its process, so a
    crash never leaves it stuck. `make_dirs` False: a missing directory is FileNotFoundError, never created."""
    return _ExclusiveLock(os.fspath(path), make_dirs)


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (one of another user's counts; a zombie child of ours does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True
