"""The Stop spool: the last resort for a Stop whose transaction could not be written within its budget (a store
locked by other writers for that long, a full disk, a store that cannot be opened). Each such Stop is kept as one
private file under $CAIRN_HOME/spool/ (0600, fsynced, written atomically) holding what is needed to apply it later
exactly as it would have been applied then: the session, the turn it answered, the response text and the
subagent fields. The next Stop hook, the daemon and `cairn doctor --apply` apply what is waiting.

Never twice: an applier claims a file by renaming it (one rename wins), applies it in one transaction that first
checks the turn's recorded response digest (a Stop already applied changes nothing), and deletes it after the
commit. A claim whose process died is taken over (its pid is in the name)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

from cairn_cli.files import pid_alive

SPOOL_DIR = "spool"
_PREFIX, _SUFFIX, _CLAIM = "stop-", ".json", ".applying-"


def spool_dir(home: str) -> str:
    return os.path.join(home, SPOOL_DIR)


def write(home: str, record: dict) -> str:
    """Keep one Stop durably (file and directory fsynced); returns its path."""
    from cairn_cli.files import atomic_write, private_dir

    folder = private_dir(spool_dir(home))
    name = f"{_PREFIX}{time.time_ns()}-{os.getpid()}{_SUFFIX}"
    path = os.path.join(folder, name)
    from cairn_cli.core.redact import scrub_tree

    # the record is scrubbed already (the payload was); again, whole, so that no entrance can bypass it
    atomic_write(path, json.dumps({"version": 1, **scrub_tree(record)}, ensure_ascii=False), mode=0o600)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a crash
    finally:
        os.close(fd)
    return path


@dataclass
class Waiting:
    """A spooled Stop as `cairn doctor` shows it."""

    path: str
    spooled_at: float
    claimed_by: int | None  # the pid applying it now (a live claim), else None

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def waiting(home: str) -> list[Waiting]:
    """The spooled Stops not yet applied, oldest first (a claim whose process died counts as waiting)."""
    folder = spool_dir(home)
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for name in names:
        base, _, claim = name.partition(_CLAIM)
        if not name.startswith(_PREFIX) or not base.endswith(_SUFFIX):
            continue  # a temporary file being written, or one set aside as .bad
        try:
            stamp = int(base[len(_PREFIX) :].split("-", 1)[0]) / 1e9
            pid = int(claim) if claim else None
        except ValueError:
            continue
        out.append(Waiting(os.path.join(folder, name), stamp, pid if pid and pid_alive(pid) else None))
    return sorted(out, key=lambda w: (w.spooled_at, w.name))


def set_aside(home: str) -> list[str]:
    """Spool files that could not be read as a Stop (kept as `.bad` for a person to look at)."""
    try:
        return sorted(n for n in os.listdir(spool_dir(home)) if n.startswith(_PREFIX) and n.endswith(".bad"))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _claim(item: Waiting) -> str | None:
    """Rename the file to a claim of this process; None when another process got there first."""
    base = item.path.split(_CLAIM, 1)[0]
    claimed = f"{base}{_CLAIM}{os.getpid()}"
    try:
        os.rename(item.path, claimed)
    except FileNotFoundError:
        return None
    return claimed


def _release(claimed: str) -> None:
    """Give a claim back (the Stop could not be applied now: it waits for the next applier)."""
    try:
        os.rename(claimed, claimed.split(_CLAIM, 1)[0])
    except OSError:
        pass


@dataclass
class SpoolRun:
    applied: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # file -> why it still waits
    unreadable: list[str] = field(default_factory=list)  # kept aside as .bad: not JSON, not a spooled Stop
    left: int = 0  # waiting files not tried (the limit or the time was reached, or another process holds them)

    def as_dict(self) -> dict:
        return {"applied": self.applied, "failed": self.failed, "unreadable": self.unreadable, "left": self.left}


def apply_waiting(home: str, apply_one, *, limit: int | None = None, budget_s: float | None = None) -> SpoolRun:
    """Apply the waiting Stops oldest first with `apply_one(record)` (raises when it cannot be written now), each
    claimed first so that concurrent appliers never take the same one; stop after `limit` files or `budget_s`."""
    run = SpoolRun()
    start = time.monotonic()
    items = [w for w in waiting(home) if w.claimed_by is None]
    for i, item in enumerate(items):
        if (limit is not None and i >= limit) or (budget_s is not None and time.monotonic() - start >= budget_s):
            run.left = len(items) - i
            break
        claimed = _claim(item)
        if claimed is None:
            continue
        try:
            with open(claimed, encoding="utf-8") as fh:
                record = json.load(fh)
            if not isinstance(record, dict) or not isinstance(record.get("payload"), dict):
                raise ValueError("not a spooled Stop")
        except (OSError, ValueError) as exc:
            os.replace(claimed, claimed.split(_CLAIM, 1)[0] + ".bad")
            run.unreadable.append(f"{item.name}: {exc}")
            continue
        try:
            apply_one(record)
        except Exception as exc:  # the store still cannot take it: it waits for the next applier
            _release(claimed)
            run.failed[item.name] = f"{type(exc).__name__}: {exc}"
            continue
        os.unlink(claimed)
        run.applied.append(item.name)
    return run
