"""What the daemon does besides answering: its log rotated in place, the Stop spool applied, the delivery log's
retention run at most once a day, none of them in a request's way (docs/daemon.md).
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cairn_cli.config import Settings
from cairn_cli.files import append_line, private_file, rotate

DAEMON_LOG = "daemon.log"
RETENTION_EVERY_S = 24 * 3600.0
RETRY_S = 3600.0  # a run that failed (the store unreachable) is tried again this much later, not every watch

SPOOL_EVERY_S = 30.0
_running = threading.Lock()  # one retention run at a time in this process
_spooler: dict = {"proc": None, "at": None}  # the spool's applier process, and when it was started
_failed_at: list[float] = []  # monotonic time of the last failed run


def log_path(home: Path | str) -> str:
    return os.path.join(str(home), "logs", DAEMON_LOG)


def daemon_logger(home: Path | str, settings: Settings) -> Callable[[str], None]:
    """The daemon's `log(msg)`: a timestamped line with the pid; a line that cannot be written (a full disk, a
    deleted home: an orphan never recreates it) is dropped, never raised into a request."""
    path = private_file(log_path(home))

    def log(msg: str) -> None:
        line = f"{dt.datetime.now().isoformat(timespec='seconds')} [{os.getpid()}] {msg}"
        try:
            append_line(
                path,
                line,
                max_bytes=settings.LOG_MAX_BYTES,
                keep=settings.LOG_KEEP,
                copy_truncate=True,
                make_dirs=False,
            )
        except OSError:
            pass

    return log


def run_due(home: Path | str, settings: Settings, log: Callable[[str], None]) -> threading.Thread | None:
    """The watch loop's chores (never raises): daemon.log rotated when over its cap; the retention started in the
    background when due. Returns the retention's thread when one was started."""
    try:
        if settings.LOG_MAX_BYTES > 0:
            rotate(log_path(home), settings.LOG_KEEP, over=settings.LOG_MAX_BYTES, copy_truncate=True)
    except OSError as exc:
        log(f"daemon.log not rotated: {exc}")
    apply_spool(home, log)
    try:
        if not retention_due(settings):
            return None
    except Exception as exc:  # a bad CAIRN_RETENTION_DAYS: said, and tried again RETRY_S later
        _failed_at[:] = [time.monotonic()]
        log(f"retention skipped: {exc}")
        return None
    if not _running.acquire(blocking=False):
        return None
    thread = threading.Thread(target=_retention, args=(settings, log), name="cairn-retention", daemon=True)
    try:
        thread.start()
    except BaseException:
        _running.release()
        raise
    return thread


def apply_spool(home: Path | str, log: Callable[[str], None]):
    """Start `cairn doctor --only spool --apply` when Stops wait in the spool and no applier runs (its own process:
    the models' proxies are the requests'); returns the process when one was started."""
    import subprocess
    import sys

    from cairn_cli.core.hooks import spool

    proc, at = _spooler["proc"], _spooler["at"]
    if proc is not None and proc.poll() is None:
        return None
    if at is not None and time.monotonic() - at < SPOOL_EVERY_S:
        return None
    try:
        if not spool.waiting(str(home)):
            return None
        _spooler["proc"] = subprocess.Popen(
            [sys.executable, "-m", "cairn_cli", "doctor", "--only", "spool", "--apply", "--json"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "CAIRN_HOME": str(home)},
        )
    except OSError as exc:
        log(f"spool not applied: {exc}")
        return None
    _spooler["at"] = time.monotonic()
    log(f"spool: applying the Stops waiting in {spool.spool_dir(str(home))} (pid {_spooler['proc'].pid})")
    return _spooler["proc"]


def retention_due(settings: Settings) -> bool:
    from cairn_cli.core.store.retention import seconds_since_last_run

    if float(settings.RETENTION_DAYS) <= 0:
        return False
    if _failed_at and time.monotonic() - _failed_at[-1] < RETRY_S:
        return False
    since = seconds_since_last_run()
    return since is None or since >= RETENTION_EVERY_S


def _retention(settings: Settings, log: Callable[[str], None]) -> None:
    from cairn_cli import config, db
    from cairn_cli.core.store.retention import apply_retention

    database = None
    try:
        url = config.ephemeral_db_url(settings.EPHEMERAL_DB_URL)
        database = db.connect_store("ephemeral", url, create=False, migrate=False)
        report = apply_retention(settings, database=database, by=f"daemon {os.getpid()}")
        log(f"retention: {report.summary()} in {report.seconds:.1f}s")
    except Exception as exc:
        _failed_at[:] = [time.monotonic()]
        log(f"retention failed (tried again in {RETRY_S / 60:.0f} min): {type(exc).__name__}: {exc}")
    finally:
        if database is not None:
            database.close()
        _running.release()
