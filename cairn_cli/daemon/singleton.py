"""One daemon per CAIRN_HOME (daemon.lock, held for the daemon's life) and one caller at a time deciding to start
one (the daemon.spawn marker); docs/daemon.md. Stdlib only (the hook's hot path uses it).
"""

from __future__ import annotations

import fcntl
import os
import time

from cairn_cli.files import private_file

LOCK_NAME = "daemon.lock"
SPAWN_NAME = "daemon.spawn"
SPAWN_GRACE_S = 30.0  # a spawned daemon that has not taken the lock by then failed to start: a new spawn may go
HOLD_TRIES = 10  # a client's probe holds daemon.lock for microseconds: a starting daemon retries a little
HOLD_RETRY_S = 0.02

_held: dict[str, int] = {}  # CAIRN_HOME -> the fd whose flock this process holds


def lock_path(home: str | os.PathLike[str]) -> str:
    return os.path.join(str(home), LOCK_NAME)


def spawn_path(home: str | os.PathLike[str]) -> str:
    return os.path.join(str(home), SPAWN_NAME)


def hold(home) -> bool:
    """Take daemon.lock for the rest of this process's life (True), or False when another process holds it.
    Idempotent: a process that holds it already gets True. Taking it empties the spawn marker (we arrived)."""
    home = str(home)
    if home in _held:
        return True
    fd = os.open(private_file(lock_path(home)), os.O_RDWR)
    for attempt in range(HOLD_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if attempt == HOLD_TRIES - 1:
                os.close(fd)
                return False
            time.sleep(HOLD_RETRY_S)
    _held[home] = fd
    try:
        os.truncate(spawn_path(home), 0)
    except FileNotFoundError:
        pass
    return True


def release(home) -> None:
    fd = _held.pop(str(home), None)
    if fd is not None:
        os.close(fd)  # closing the only descriptor drops the flock


def held_identity(home) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the lock file this process holds: a daemon whose lock file was replaced is an orphan."""
    fd = _held.get(str(home))
    if fd is None:
        return None
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def held(home) -> bool:
    """Whether a process holds daemon.lock (a daemon is alive: starting, loading, serving or hung)."""
    path = lock_path(home)
    if not os.path.exists(path):
        return False
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops our flock, if we got it
    return False


def claim_spawn(home) -> str | None:
    """None when this caller may start a daemon now (the spawn is recorded in the marker); otherwise why not.
    Only one caller at a time decides (the marker's flock); the others are told a spawn is being decided."""
    fd = os.open(private_file(spawn_path(home)), os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "another process is starting the daemon"
        raw = os.pread(fd, 64, 0).split()
        try:
            age = time.time() - float(raw[0])
        except (IndexError, ValueError):
            age = None
        # the marker first, then the lock: a daemon takes the lock before it empties the marker
        if age is not None and -1.0 < age < SPAWN_GRACE_S:  # (-1: the stamp is rounded; a clock set back a lot)
            return f"a daemon was started {max(0.0, age):.0f} s ago and is coming up"
        if held(home):
            return "a daemon holds daemon.lock (starting, loading or hung)"
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{time.time():.3f} {os.getpid()}\n".encode(), 0)
        return None
    finally:
        os.close(fd)
