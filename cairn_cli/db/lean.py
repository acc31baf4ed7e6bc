"""The lean connection: a SQLite store through the stdlib's sqlite3 alone, with the part of peewee's Database
interface that db.execute / db.transaction and the full-text index use (`param`, `execute_sql`, `cursor`,
`atomic`). db.open_lean makes them; nothing else does."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager


class LeanSqlite:
    param = "?"

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn
        self._depth = 0

    @classmethod
    def open(cls, path: str, pragmas: dict) -> LeanSqlite | None:
        """The store at `path` with `pragmas` (as peewee sets them), autocommit outside `atomic`; None when it
        cannot be opened."""
        try:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error:
            return None
        try:
            for name, value in pragmas.items():
                conn.execute(f"PRAGMA {name} = {value}")
        except sqlite3.Error:
            conn.close()
            return None
        return cls(conn)

    def migrations(self) -> set[str]:
        """The names in the store's migration ledger (none when it has no ledger)."""
        try:
            return {name for (name,) in self._conn.execute("SELECT name FROM cairn_migrations")}
        except sqlite3.Error:
            return set()

    def execute_sql(self, sql: str, params: Sequence = ()) -> sqlite3.Cursor:
        return self._conn.execute(sql, tuple(params))

    def cursor(self) -> sqlite3.Cursor:
        return self._conn.cursor()

    @contextmanager
    def atomic(self) -> Iterator[LeanSqlite]:
        """A transaction (BEGIN ... COMMIT, rolled back on an exception); nested, a savepoint."""
        self._depth += 1
        name = f"lean_{self._depth}"
        # BEGIN IMMEDIATE, as peewee's connection begins (db.WRITE_LOCK): the write lock is taken up front
        self._conn.execute("BEGIN IMMEDIATE" if self._depth == 1 else f"SAVEPOINT {name}")
        try:
            yield self
        except BaseException:
            self._conn.execute("ROLLBACK" if self._depth == 1 else f"ROLLBACK TO SAVEPOINT {name}")
            if self._depth > 1:
                self._conn.execute(f"RELEASE SAVEPOINT {name}")
            raise
        else:
            self._conn.execute("COMMIT" if self._depth == 1 else f"RELEASE SAVEPOINT {name}")
        finally:
            self._depth -= 1

    def close(self) -> None:
        self._conn.close()
