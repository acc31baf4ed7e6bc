"""The machine_state table read in plain SQL, so that the hook's hot path reads it through the lean connection too."""

from __future__ import annotations

from cairn_cli import db as _store


def value_json(key: str) -> tuple[str | None] | None:
    """(the value's JSON,) of `key`, or None when the key was never set."""
    rows = _store.execute("memory", "SELECT value FROM machine_state WHERE key = ?", (key,))
    return (rows[0][0],) if rows else None


def values_json(keys: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """(key, the value's JSON) of those of `keys` that are set, in one query."""
    sql = f"SELECT key, value FROM machine_state WHERE key IN ({_store.marks(len(keys))})"
    return [(key, value) for key, value in _store.execute("memory", sql, keys)]
