"""How big each store is (`cairn stats stores`): per store its URL (password masked), backend and size on disk; per
table its rows, its size with its indexes, and the characters of the long text it holds (what retention expires,
core/store/retention.py, and what else grows with use); and the logs under $CAIRN_HOME/logs. A SQLite store's size is
its file plus its -wal and -shm; the engines' own measures are db/measure.py's."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from cairn_cli import config
from cairn_cli.config import Settings

# the long text of each table: what grows with use besides the row count
LONG_TEXT = {
    "memories": "content",
    "memory_merges": "content",
    "replay_calls": "answer",
    "memory_deliveries": "context_window",
    "hook_state": "data",
}
STORES = ("memory", "ephemeral")


@dataclass
class TableSize:
    table: str
    rows: int
    bytes: int | None  # the table with its indexes on disk; None when the engine cannot say
    long_text: str | None = None  # the column counted in text_chars
    text_chars: int | None = None


@dataclass
class StoreSize:
    store: str  # memory | ephemeral
    backend: str  # sqlite | postgresql
    url: str  # as it may be shown: a password is ***
    bytes: int | None  # on disk: SQLite's file + -wal + -shm, PostgreSQL's database
    files: dict[str, int] = field(default_factory=dict)  # SQLite: each file's size
    tables: list[TableSize] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)


@dataclass
class SizesReport:
    stores: list[StoreSize]
    logs: dict[str, int]  # file under $CAIRN_HOME/logs -> bytes

    def as_dict(self) -> dict:
        return {
            "stores": [{**asdict(s), "rows": s.rows} for s in self.stores],
            "logs": self.logs,
            "logs_bytes": sum(self.logs.values()),
        }


def store_sizes(settings: Settings) -> SizesReport:
    """Both stores (bound: core/store.open_stores) and the logs."""
    from cairn_cli import db
    from cairn_cli.db import measure

    urls = {
        "memory": config.memory_db_url(settings.DB_URL),
        "ephemeral": config.ephemeral_db_url(settings.EPHEMERAL_DB_URL),
    }
    stores = []
    for kind in STORES:
        conn = db.connection(kind)
        sqlite = conn.param == "?"
        size = StoreSize(kind, "sqlite" if sqlite else "postgresql", db.safe_url(urls[kind]), None)
        if sqlite:
            size.files = _sqlite_files(getattr(conn, "database", None))
            size.bytes = sum(size.files.values()) if size.files else None
        else:
            size.bytes = measure.database_bytes(conn)
        on_disk = measure.sqlite_table_bytes(conn) if sqlite else None
        for table in sorted(measure.tables(conn, sqlite)):
            column = LONG_TEXT.get(table)
            size.tables.append(
                TableSize(
                    table,
                    measure.row_count(conn, table),
                    measure.pg_table_bytes(conn, table)
                    if not sqlite
                    else None
                    if on_disk is None
                    else on_disk.get(table),
                    column,
                    measure.text_chars(conn, table, column) if column else None,
                )
            )
        stores.append(size)
    return SizesReport(stores, log_sizes())


def log_sizes() -> dict[str, int]:
    """Each file under $CAIRN_HOME/logs (the logs and their rotated generations) and its size."""
    folder = os.path.join(config.home_dir(), "logs")
    out = {}
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return {}
    for name in names:
        if name.endswith(".lock"):
            continue
        try:
            out[name] = os.stat(os.path.join(folder, name)).st_size
        except OSError:
            continue
    return out


def _sqlite_files(path: str | None) -> dict[str, int]:
    if not path or path == ":memory:":
        return {}
    out = {}
    for suffix in ("", "-wal", "-shm"):
        try:
            out[os.path.basename(path) + suffix] = os.stat(path + suffix).st_size
        except OSError:
            continue
    return out
