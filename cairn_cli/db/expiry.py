"""The statements of retention (core/store/retention.py): the delivery log's windows and the hook state's long text
past a cutoff, read in batches by id and expired with a compare-and-set, on a connection of either kind (peewee's
or the lean one, `?` placeholders translated)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

DELIVERIES, HOOK_STATE = "memory_deliveries", "hook_state"
_LABELLED = "(grade IS NOT NULL OR engaged IS NOT NULL)"
_UNLABELLED = "grade IS NULL AND engaged IS NULL"


def expired_windows(conn) -> int:
    """Deliveries whose window expired (the mark: a logged window is never empty)."""
    return _scalar(conn, f"SELECT COUNT(*) FROM {DELIVERIES} WHERE context_window = ''")


def marked_hook_rows(conn, pattern: str) -> int:
    return _scalar(conn, f"SELECT COUNT(*) FROM {HOOK_STATE} WHERE data LIKE ?", (pattern,))


def unlabelled_windows(conn, after_id: int, before: dt.datetime, limit: int) -> list[tuple[int, int | None]]:
    """(id, window length) of the next unlabelled deliveries logged before `before` whose window is not expired."""
    return _run(
        conn,
        f"SELECT id, LENGTH(context_window) FROM {DELIVERIES} WHERE id > ? AND delivered_at < ? "
        f"AND context_window <> '' AND {_UNLABELLED} ORDER BY id LIMIT ?",
        (after_id, _ts(conn, before), limit),
    ).fetchall()


def expire_windows(conn, ids: Sequence[int]) -> int:
    """Empty the windows of `ids` that are still unlabelled (a grade that arrived since keeps its window)."""
    return _run(
        conn,
        f"UPDATE {DELIVERIES} SET context_window = '' WHERE id IN ({', '.join('?' * len(ids))}) AND {_UNLABELLED}",
        ids,
    ).rowcount


def labelled_windows(conn, before: dt.datetime) -> int:
    """Labelled deliveries logged before `before` that keep their window (training data)."""
    return _scalar(
        conn,
        f"SELECT COUNT(*) FROM {DELIVERIES} WHERE delivered_at < ? AND context_window <> '' AND {_LABELLED}",
        (_ts(conn, before),),
    )


def unmarked_hook_rows(
    conn, after_id: int, before: dt.datetime, pattern: str, limit: int
) -> list[tuple[int, str | None]]:
    """(id, data) of the next hook_state rows created before `before` whose data does not match `pattern`."""
    return _run(
        conn,
        f"SELECT id, data FROM {HOOK_STATE} WHERE id > ? AND created_at < ? AND data NOT LIKE ? ORDER BY id LIMIT ?",
        (after_id, _ts(conn, before), pattern, limit),
    ).fetchall()


def replace_hook_data(conn, row_id: int, new: str, old: str | None) -> int:
    """Compare-and-set: 1 when the row still held `old` and now holds `new`, else 0."""
    return _run(conn, f"UPDATE {HOOK_STATE} SET data = ? WHERE id = ? AND data = ?", (new, row_id, old)).rowcount


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
