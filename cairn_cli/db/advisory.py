"""Locks held in (or beside) the store itself, for the processes of every machine sharing it: PostgreSQL's advisory
locks, and a lock file beside a SQLite file."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

from cairn_cli import db as _store
from cairn_cli.files import exclusive_lock


@contextlib.contextmanager
def store_lock(name: str) -> Iterator[bool]:
    """Hold the bound memory store's lock `name` for the block: `pg_try_advisory_lock` on PostgreSQL, a lock file
    beside a SQLite file (homes sharing it through CAIRN_DB_URL); an in-memory store has no other user (True).
    Yields False (and holds nothing) when another process has it."""
    import peewee

    from cairn_cli.db.tables import memory_proxy

    db = memory_proxy.obj
    if isinstance(db, peewee.SqliteDatabase) and db.database != ":memory:":
        with exclusive_lock(f"{db.database}.{name}.lock") as beside:
            yield beside
        return
    if not isinstance(db, peewee.PostgresqlDatabase):
        yield True
        return
    key = int.from_bytes(hashlib.sha256(f"cairn:{name}".encode()).digest()[:8], "big", signed=True)
    got = bool(db.execute_sql("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0])
    try:
        yield got
    finally:
        if got:
            db.execute_sql("SELECT pg_advisory_unlock(%s)", (key,))


def transaction_lock(kind: str, name: str) -> None:
    """Take PostgreSQL's transaction advisory lock `name` (released when the caller's transaction ends); nothing on
    SQLite, which has one writer."""
    if _store.is_postgres(kind):
        _store.execute(kind, "SELECT pg_advisory_xact_lock(hashtext(?))", [name])
