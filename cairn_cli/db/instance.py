"""Which instance writes this process's rows: the value every `instance` column defaults to (db/tables.py), set
once when the stores are opened (core/store.open_stores). Its own module so that the tables need not import db."""

from __future__ import annotations

_writing: dict[str, str | None] = {"instance": None}


def set_writing_instance(instance: str | None) -> None:
    _writing["instance"] = instance


def writing_instance() -> str | None:
    """Who writes the rows of this process (every `instance` column): a store several machines share says which."""
    return _writing["instance"]
