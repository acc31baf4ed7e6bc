"""Advisory locks for the jobs cron may overlap (training, A/B promotion): under CAIRN_HOME for one machine, and on
a PostgreSQL store also a session advisory lock in the store itself, so that the machines sharing it run the job
one at a time (the A/B promotes once for the team, one student is trained at a time)."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

from cairn_cli import config
from cairn_cli.files import exclusive_lock


@contextlib.contextmanager
def home_lock(name: str) -> Iterator[bool]:
    """Hold $CAIRN_HOME/<name>.lock for the block; yields False (and holds nothing) when another process has it."""
    with exclusive_lock(config.home() / f"{name}.lock") as held:
        yield held


@contextlib.contextmanager
def store_lock(name: str) -> Iterator[bool]:
    """`home_lock(name)`, and on a PostgreSQL memory store `pg_try_advisory_lock` too (on a SQLite one, a lock file
    beside it, for homes sharing the file); the stores are bound. Yields False (and holds nothing) when this
    machine or another one sharing the store has it."""
    import peewee

    from cairn_cli.db.tables import memory_proxy

    with home_lock(name) as held:
        db = memory_proxy.obj
        if held and isinstance(db, peewee.SqliteDatabase) and db.database != ":memory:":
            # homes sharing one SQLite file (CAIRN_DB_URL): a lock file beside it
            with exclusive_lock(f"{db.database}.{name}.lock") as beside:
                yield beside
            return
        if not held or not isinstance(db, peewee.PostgresqlDatabase):
            yield held
            return
        key = int.from_bytes(hashlib.sha256(f"cairn:{name}".encode()).digest()[:8], "big", signed=True)
        got = bool(db.execute_sql("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0])
        try:
            yield got
        finally:
            if got:
                db.execute_sql("SELECT pg_advisory_unlock(%s)", (key,))
