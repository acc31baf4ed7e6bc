"""Whether an open store is whole (`cairn doctor`): SQLite's quick_check; a PostgreSQL store that answers is."""

from __future__ import annotations

from cairn_cli import db as _store


def verdict(database) -> str:
    """`ok`, or SQLite's first complaints (up to five, joined); a driver error when the store cannot be read."""
    if _store.is_postgres_database(database):
        database.execute_sql("SELECT 1").fetchall()
        return "ok"
    rows = database.execute_sql("PRAGMA quick_check").fetchall()
    return "; ".join(str(r[0]) for r in rows[:5])
