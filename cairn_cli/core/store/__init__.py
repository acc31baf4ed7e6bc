"""The memory store and the delivery log as the domain sees them. `open_stores` binds both databases named by the
settings (db.open_db does the connecting); it is called once per command, per daemon request or per hook at the
edge, never inside a core function: every function below assumes the stores are bound. Opening also brings the
memory store's full-text index up to date (core/store/fulltext.py)."""

from __future__ import annotations

from cairn_cli import config
from cairn_cli.config import Settings


def open_stores(settings: Settings, *, create: bool = True) -> None:
    """Bind the memory store and the delivery log. `create=False` (commands that only read): a store that does
    not exist yet is an error naming it, never a new empty file (a mistyped --db-url must not make a store)."""
    from cairn_cli.core.store import fulltext
    from cairn_cli.db import open_db

    open_db(config.memory_db_url(settings.DB_URL), config.ephemeral_db_url(settings.EPHEMERAL_DB_URL), create=create)
    fulltext.sync_if_behind()  # memories a write did not index (the migration that made the index queues them all)
