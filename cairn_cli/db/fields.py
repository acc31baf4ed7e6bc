"""Portable field types shared by the live tables and the migration snapshots."""

from __future__ import annotations

import orjson
import peewee


class JSONField(peewee.TextField):
    """JSON stored as text: portable across SQLite and PostgreSQL."""

    def db_value(self, value):
        return None if value is None else orjson.dumps(value).decode()

    def python_value(self, value):
        return None if value is None else orjson.loads(value)
