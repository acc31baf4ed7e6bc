"""Binds the domain to the two databases named by the settings (db.open_db does the connecting)."""

from __future__ import annotations

from cairn_cli import config
from cairn_cli.config import Settings


def open_stores(settings: Settings) -> None:
    from cairn_cli.db import open_db

    open_db(config.memory_db_url(settings.DB_URL), config.ephemeral_db_url(settings.EPHEMERAL_DB_URL))
