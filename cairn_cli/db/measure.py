"""What a store measures of itself (`cairn stats stores`): its tables, their rows and long text, and their size on
disk (SQLite's `dbstat` when it was built with it; PostgreSQL's relation sizes, indexes and TOAST included)."""

from __future__ import annotations


def database_bytes(conn) -> int | None:
    """A PostgreSQL database's size on disk."""
    return _scalar(conn, "SELECT pg_database_size(current_database())")


def row_count(conn, table: str) -> int:
    return _scalar(conn, f"SELECT COUNT(*) FROM {table}") or 0


def text_chars(conn, table: str, column: str) -> int | None:
    """The characters `column` holds over the whole table."""
    return _scalar(conn, f"SELECT COALESCE(SUM(LENGTH({column})), 0) FROM {table}")


def tables(conn, sqlite: bool) -> list[str]:
    if sqlite:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    else:
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    return [r[0] for r in conn.execute_sql(sql).fetchall()]


def sqlite_table_bytes(conn) -> dict[str, int] | None:
    """table -> bytes of its pages and its indexes' (dbstat); None when this SQLite lacks dbstat."""
    try:
        pages = conn.execute_sql("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
        owner = dict(
            conn.execute_sql("SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')").fetchall()
        )
    except Exception as exc:  # no such table: dbstat (the driver's own error class, sqlite3's or peewee's)
        if "dbstat" not in str(exc):
            raise
        return None
    out: dict[str, int] = {}
    for name, size in pages:
        table = owner.get(name, name)
        out[table] = out.get(table, 0) + int(size or 0)
    return out


def pg_table_bytes(conn, table: str) -> int | None:
    return _scalar(conn, f"SELECT pg_total_relation_size({conn.param})", (table,))


def _scalar(conn, sql: str, params: tuple = ()) -> int | None:
    row = conn.execute_sql(sql, params).fetchone()
    return None if row is None or row[0] is None else int(row[0])
