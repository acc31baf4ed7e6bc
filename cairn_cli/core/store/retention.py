"""Retention: the delivery log's long text expires after CAIRN_RETENTION_DAYS (0: never); its labels never do.
Unlabelled deliveries lose their context window, hook state its prompt and other long text; nothing else changes and
no row is deleted. Batched and idempotent; each run is recorded in $CAIRN_HOME/retention.json (docs/retention.md).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from cairn_cli import config
from cairn_cli.clock import utcnow
from cairn_cli.config import Settings

BATCH = 500  # rows a transaction (and ids an IN (...): under SQLite's bound-variable limit)
LONG_TEXT_CHARS = 256  # a hook_state string longer than this is long text, whatever its key
EXPIRING_KEYS = ("prompt",)  # hook_state keys that expire whatever their length
MARK = "expired_at"
RECORD_NAME = "retention.json"


@dataclass
class TableRetention:
    table: str
    field: str  # what expires
    expired: int = 0  # rows whose long text expired in this run (a dry run: would expire)
    chars: int = 0  # characters of text those rows held (what the run frees, before the database reuses it)
    kept_labelled: int = (
        0  # deliveries past the cutoff whose window is kept: a grade or engagement makes it training data
    )


@dataclass
class RetentionReport:
    days: float
    cutoff: str | None  # None: retention is off (CAIRN_RETENTION_DAYS = 0)
    dry_run: bool
    tables: list[TableRetention] = field(default_factory=list)
    batches: int = 0  # transactions written
    seconds: float = 0.0

    @property
    def expired(self) -> int:
        return sum(t.expired for t in self.tables)

    @property
    def chars(self) -> int:
        return sum(t.chars for t in self.tables)

    def summary(self) -> str:
        if self.cutoff is None:
            return "retention off (CAIRN_RETENTION_DAYS=0): nothing expires"
        verb = "would expire" if self.dry_run else "expired"
        parts = [f"{t.table}.{t.field}: {t.expired} rows, {t.chars} chars" for t in self.tables]
        kept = sum(t.kept_labelled for t in self.tables)
        return f"{verb} text older than {self.days:g} days (before {self.cutoff}): {'; '.join(parts)}" + (
            f"; {kept} labelled deliveries keep their window (training data)" if kept else ""
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "expired": self.expired, "chars": self.chars}


@dataclass
class RetentionStatus:
    days: float
    cutoff: str | None
    due: list[TableRetention]  # what a run would expire now
    expired_so_far: dict[str, int]  # rows expired by earlier runs, per table
    last_run: dict | None  # the last run's record ($CAIRN_HOME/retention.json), None before the first

    def as_dict(self) -> dict:
        return asdict(self)


def cutoff_of(settings: Settings, now: dt.datetime | None = None) -> dt.datetime | None:
    """The moment before which long text expires (naive UTC, as the log stores it); None when retention is off."""
    days = float(settings.RETENTION_DAYS)
    if days <= 0:
        return None
    return (now or utcnow()) - dt.timedelta(days=days)


def apply_retention(
    settings: Settings,
    *,
    dry_run: bool = False,
    now: dt.datetime | None = None,
    batch_size: int = BATCH,
    database: Any = None,
    by: str = "cairn",
) -> RetentionReport:
    """Expire the long text older than the retention period (see the module note); a dry run counts what would go
    and changes nothing. `database`: the delivery log's connection to work on (default: the bound ephemeral store;
    the daemon passes one of its own). `by` names the caller in the run's record."""
    from cairn_cli import db

    conn = database if database is not None else db.connection("ephemeral")
    t0 = time.perf_counter()
    cutoff = cutoff_of(settings, now)
    report = RetentionReport(float(settings.RETENTION_DAYS), _iso(cutoff), dry_run)
    if cutoff is None:
        return report
    batch_size = max(1, int(batch_size))
    report.tables.append(_expire_windows(conn, cutoff, dry_run, batch_size, report))
    report.tables.append(_expire_hook_text(conn, cutoff, dry_run, batch_size, report, now or utcnow()))
    report.seconds = round(time.perf_counter() - t0, 3)
    if not dry_run:
        _record(report, by)
    return report


def retention_status(settings: Settings, *, now: dt.datetime | None = None, database: Any = None) -> RetentionStatus:
    """What a run would expire now, what earlier runs expired, and the last run's record."""
    from cairn_cli import db
    from cairn_cli.db import expiry

    conn = database if database is not None else db.connection("ephemeral")
    due = apply_retention(settings, dry_run=True, now=now, database=conn)
    expired = {
        expiry.DELIVERIES: expiry.expired_windows(conn),
        expiry.HOOK_STATE: expiry.marked_hook_rows(conn, _mark_pattern()),
    }
    return RetentionStatus(due.days, due.cutoff, due.tables, expired, last_run())


def last_run() -> dict | None:
    """The record of the last run (when, by whom, its report), or None."""
    import orjson

    try:
        with open(record_path(), "rb") as fh:
            value = orjson.loads(fh.read())
    except (OSError, orjson.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def record_path() -> str:
    return os.path.join(config.home_dir(), RECORD_NAME)


def seconds_since_last_run() -> float | None:
    """How long ago the last run was recorded (the record's modification time), None when never."""
    try:
        return max(0.0, time.time() - os.stat(record_path()).st_mtime)
    except OSError:
        return None


# -- the two tables ---------------------------------------------------------------------------------------------


def _expire_windows(conn, cutoff: dt.datetime, dry_run: bool, batch: int, report: RetentionReport) -> TableRetention:
    from cairn_cli.db import expiry

    out = TableRetention(expiry.DELIVERIES, "context_window")
    last = 0
    while True:
        rows = expiry.unlabelled_windows(conn, last, cutoff, batch)
        if not rows:
            break
        last = rows[-1][0]
        ids = [r[0] for r in rows]
        if dry_run:
            changed = len(ids)
        else:
            with conn.atomic():  # the label test again: a grade that arrived since the SELECT keeps its window
                changed = expiry.expire_windows(conn, ids)
            report.batches += 1
        out.expired += changed
        out.chars += sum(int(r[1] or 0) for r in rows)
    out.kept_labelled = expiry.labelled_windows(conn, cutoff)
    return out


def _expire_hook_text(
    conn, cutoff: dt.datetime, dry_run: bool, batch: int, report: RetentionReport, now: dt.datetime
) -> TableRetention:
    """hook_state rows past the cutoff not yet marked: their long text removed, and every one marked (one that
    held none too, so that no later run reads it again)."""
    import orjson

    from cairn_cli.db import expiry

    out = TableRetention(expiry.HOOK_STATE, "data")
    stamp = _iso(now)
    last = 0
    while True:
        rows = expiry.unmarked_hook_rows(conn, last, cutoff, _mark_pattern(), batch)
        if not rows:
            break
        last = rows[-1][0]
        updates = []
        for row_id, text in rows:
            try:
                record = orjson.loads(text) if text else {}
            except orjson.JSONDecodeError:
                continue  # not cairn's JSON: left as it is
            if not isinstance(record, dict) or MARK in record:
                continue
            gone = {k: v for k, v in record.items() if k in EXPIRING_KEYS or _long(v)}
            kept = {k: v for k, v in record.items() if k not in gone}
            new = orjson.dumps({**kept, MARK: stamp, "expired": sorted(gone)}).decode()
            chars = sum(len(v) if isinstance(v, str) else len(orjson.dumps(v)) for v in gone.values())
            updates.append((new, row_id, text, bool(gone), chars))
        if updates and not dry_run:
            with conn.atomic():  # compare-and-set: a row the Stop changed since the SELECT waits for the next run
                done = [expiry.replace_hook_data(conn, row_id, new, old) for new, row_id, old, _, _ in updates]
            report.batches += 1
        else:
            done = [1] * len(updates)
        for changed, (_, _, _, had_text, chars) in zip(done, updates):
            if changed and had_text:
                out.expired += 1
                out.chars += chars
    return out


# -- helpers ----------------------------------------------------------------------------------------------------


def _long(value: object) -> bool:
    return isinstance(value, str) and len(value) > LONG_TEXT_CHARS


def _mark_pattern() -> str:
    return f'%"{MARK}":%'  # orjson writes no space after a key's colon


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat(timespec="seconds")


def _record(report: RetentionReport, by: str) -> None:
    """The run's record in $CAIRN_HOME/retention.json (private): when, by whom, what it expired."""
    import orjson

    from cairn_cli.files import atomic_write

    if not os.path.isdir(config.home_dir()):
        return  # an orphaned daemon's home was deleted while it ran: never recreated
    record = {"at": _iso(utcnow()), "by": by, "report": report.as_dict()}
    atomic_write(record_path(), orjson.dumps(record, option=orjson.OPT_INDENT_2), fsync=False)
