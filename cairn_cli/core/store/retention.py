"""Retention: the delivery log's long text expires after CAIRN_RETENTION_DAYS (0: never); its labels never do.

What expires, once older than the retention period:

- `memory_deliveries.context_window` of the deliveries that carry no label: no grade and no engagement decision.
  It becomes '' (the mark: a logged window is never empty). A graded or engagement-decided delivery is training
  data: `train-reranker` pairs its window with the memory (core/learning/pairs.py), so its window is kept
  whatever its age. What goes is the provenance of deliveries nothing ever judged.
- in `hook_state.data`, the turn's `prompt` (what the Stop's engagement removes from the response's terms and
  `backfill-semantic` finds the transcript turn by) and any other top-level string longer than LONG_TEXT_CHARS:
  removed, and `expired_at` (when) and `expired` (which keys) set. The arm, scope, versions, the delivered ids,
  the abstention, the Stop's record and every column stay.

Never touched: ids, sessions and turns, context keys, scores and their components, rankers and models, grades,
hard negatives, engagement (decision, scores, method), arms, instances, timestamps; no row is deleted.

Batched (BATCH rows per transaction, never one transaction over the whole log) and idempotent: a rerun finds
nothing left to do and changes nothing. Each run (not a dry run) is recorded in $CAIRN_HOME/retention.json; the
daemon applies it at most once a day from that record (daemon/housekeeping.py), `cairn doctor --apply` on demand.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Sequence
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
DELIVERIES, HOOK_STATE = "memory_deliveries", "hook_state"
_LABELLED = "(grade IS NOT NULL OR engaged IS NOT NULL)"
_UNLABELLED = "grade IS NULL AND engaged IS NULL"


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

    conn = database if database is not None else db.connection("ephemeral")
    due = apply_retention(settings, dry_run=True, now=now, database=conn)
    expired = {
        DELIVERIES: _scalar(conn, f"SELECT COUNT(*) FROM {DELIVERIES} WHERE context_window = ''"),
        HOOK_STATE: _scalar(conn, f"SELECT COUNT(*) FROM {HOOK_STATE} WHERE data LIKE ?", (_mark_pattern(),)),
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
    out = TableRetention(DELIVERIES, "context_window")
    when = _ts(conn, cutoff)
    last = 0
    while True:
        rows = _run(
            conn,
            f"SELECT id, LENGTH(context_window) FROM {DELIVERIES} WHERE id > ? AND delivered_at < ? "
            f"AND context_window <> '' AND {_UNLABELLED} ORDER BY id LIMIT ?",
            (last, when, batch),
        ).fetchall()
        if not rows:
            break
        last = rows[-1][0]
        ids = [r[0] for r in rows]
        if dry_run:
            changed = len(ids)
        else:
            with conn.atomic():  # the label test again: a grade that arrived since the SELECT keeps its window
                changed = _run(
                    conn,
                    f"UPDATE {DELIVERIES} SET context_window = '' WHERE id IN ({', '.join('?' * len(ids))}) "
                    f"AND {_UNLABELLED}",
                    ids,
                ).rowcount
            report.batches += 1
        out.expired += changed
        out.chars += sum(int(r[1] or 0) for r in rows)
    out.kept_labelled = _scalar(
        conn,
        f"SELECT COUNT(*) FROM {DELIVERIES} WHERE delivered_at < ? AND context_window <> '' AND {_LABELLED}",
        (when,),
    )
    return out


def _expire_hook_text(
    conn, cutoff: dt.datetime, dry_run: bool, batch: int, report: RetentionReport, now: dt.datetime
) -> TableRetention:
    """hook_state rows past the cutoff not yet marked: their long text removed, and every one marked (one that
    held none too, so that no later run reads it again)."""
    import orjson

    out = TableRetention(HOOK_STATE, "data")
    stamp = _iso(now)
    last = 0
    while True:
        rows = _run(
            conn,
            f"SELECT id, data FROM {HOOK_STATE} WHERE id > ? AND created_at < ? AND data NOT LIKE ? "
            "ORDER BY id LIMIT ?",
            (last, _ts(conn, cutoff), _mark_pattern(), batch),
        ).fetchall()
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
                done = [
                    _run(
                        conn, f"UPDATE {HOOK_STATE} SET data = ? WHERE id = ? AND data = ?", (new, row_id, old)
                    ).rowcount
                    for new, row_id, old, _, _ in updates
                ]
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


def _run(conn, sql: str, params: Sequence = ()):
    """One statement written with `?` placeholders on `conn` (peewee's or the lean one); its cursor."""
    if conn.param != "?":
        sql = sql.replace("?", conn.param)
    return conn.execute_sql(sql, tuple(params))


def _scalar(conn, sql: str, params: Sequence = ()) -> int:
    row = _run(conn, sql, params).fetchone()
    return int(row[0] or 0) if row else 0


def _ts(conn, value: dt.datetime):
    """A datetime as the store's timestamp columns hold it: SQLite's text (what peewee writes), PostgreSQL's own."""
    return str(value) if conn.param == "?" else value


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
