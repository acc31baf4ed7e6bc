"""Rows of a whole store read from one database and written to another (`cairn db copy`, core/store/copy.py).

Each table is read and written through its live model rebound to the given database, so every value arrives as
Python (JSON parsed, datetimes, booleans, blobs as bytes) and leaves in the target's own dialect. The full-text
index tables are derived data and are not listed: the target indexes the memories it receives itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import peewee

from cairn_cli.db import driver_message, tables
from cairn_cli.errors import Conflict

STORE_MODELS: dict[str, tuple[type[peewee.Model], ...]] = {
    "memory": (tables.Memory, tables.MemoryMerge, tables.MachineState, tables.ReplayCall, tables.ReplayRun),
    "ephemeral": (tables.MemoryDelivery, tables.HookState, tables.EvidenceApplied),
}
_bound: dict[tuple[str, int], type[peewee.Model]] = {}


def table_names(kind: str) -> list[str]:
    return [m._meta.table_name for m in STORE_MODELS[kind]]


def _model(table: str, database: peewee.Database) -> type[peewee.Model]:
    """The live model of `table`, as a subclass bound to `database` (the proxies are left alone)."""
    key = (table, id(database))
    model = _bound.get(key)
    if model is None or model._meta.database is not database:
        live = _live(table)
        meta = type("Meta", (), {"database": database, "table_name": table})
        model = type(live.__name__, (live,), {"Meta": meta})
        _bound[key] = model
    return model


def _live(table: str) -> type[peewee.Model]:
    return next(m for models in STORE_MODELS.values() for m in models if m._meta.table_name == table)


def _key(model: type[peewee.Model]) -> peewee.Field:
    pk = model._meta.primary_key
    assert isinstance(pk, peewee.Field)  # every table of a store has a one-column key
    return pk


def key_column(table: str) -> str:
    return _key(_live(table)).name


def _plain(row) -> dict:
    return {k: bytes(v) if isinstance(v, memoryview) else v for k, v in row.items()}


def count(database: peewee.Database, table: str) -> int:
    return _model(table, database).select().count()


def page(database: peewee.Database, table: str, after, limit: int) -> list[dict]:
    """Up to `limit` rows with a key above `after` (None: from the first), in key order."""
    model = _model(table, database)
    pk = _key(model)
    query = model.select().order_by(pk).limit(limit)
    if after is not None:
        query = query.where(pk > after)
    return [_plain(r) for r in query.dicts()]


def fetch(database: peewee.Database, table: str, keys: Sequence) -> dict:
    """key -> row of the rows of `table` whose key is in `keys`."""
    model = _model(table, database)
    pk = _key(model)
    out = {}
    for start in range(0, len(keys), 500):
        for found in model.select().where(pk.in_(list(keys[start : start + 500]))).dicts():
            row = _plain(found)
            out[row[pk.name]] = row
    return out


def insert(database: peewee.Database, table: str, rows: Sequence[dict]) -> None:
    """Insert `rows` with their keys as they are, in the caller's transaction. A row that another unique index
    refuses (a target row under another key holds its session and turn, say) is a Conflict naming it."""
    if not rows:
        return
    model = _model(table, database)
    try:
        with database.atomic():
            model.insert_many(list(rows)).execute()
        return
    except peewee.IntegrityError:
        pass
    key = _key(model).name
    for row in rows:  # which one: each alone, in a savepoint of its own
        try:
            with database.atomic():
                model.insert(row).execute()
        except peewee.IntegrityError as exc:
            why = driver_message(exc)
            raise Conflict(
                f"{table} {key} {row[key]!r} collides with a target row under another {key}: {why}",
                "remove that row from the target, or copy into another database",
            ) from None


def update(database: peewee.Database, table: str, row: dict) -> None:
    """Replace every column of the row with `row`'s key."""
    model = _model(table, database)
    pk = _key(model)
    values = {k: v for k, v in row.items() if k != pk.name}
    model.update(values).where(pk == row[pk.name]).execute()


def reset_sequences(database: peewee.Database, tables_: Sequence[str]) -> None:
    """PostgreSQL: each serial key's sequence set past the largest key, so that the next insert gets a fresh id.
    (SQLite's integer keys take max + 1 by themselves.)"""
    if not isinstance(database, peewee.PostgresqlDatabase):
        return
    for table in tables_:
        model = _model(table, database)
        if not isinstance(_key(model), peewee.AutoField):
            continue
        database.execute_sql(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), COALESCE(MAX(id), 0) + 1, false) FROM {table}"
        )
