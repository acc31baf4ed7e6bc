"""Stores made on purpose (`cairn db init`): the one way, besides the default ones under CAIRN_HOME and the
commands that add memories, that a store comes to exist. Idempotent: a store at the current schema is left as
it is."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from cairn_cli import config
from cairn_cli.config import Settings
from cairn_cli.errors import InvalidInput

STORES = ("memory", "ephemeral")


@dataclass
class StoreInit:
    store: str
    url: str  # as it may be printed (db.safe_url)
    created: bool  # it held no such store before
    applied: list[str] = field(default_factory=list)  # the migrations applied (none on a rerun)

    def as_dict(self) -> dict:
        return asdict(self)


def init_stores(settings: Settings, stores: Sequence[str] = STORES, url: str | None = None) -> list[StoreInit]:
    """Create and migrate `stores` at `url`, else each at its configured URL (--db-url / --ephemeral-db-url,
    CAIRN_DB_URL / CAIRN_EPHEMERAL_DB_URL, else CAIRN_HOME's). A URL names one store."""
    from cairn_cli import db

    unknown = [s for s in stores if s not in STORES]
    if unknown:
        raise InvalidInput(f"unknown store {unknown[0]!r}", "pass --store memory or --store ephemeral")
    if url is not None and len(stores) != 1:
        raise InvalidInput(
            "a URL holds one store, and which one was not said", "add --store memory or --store ephemeral"
        )
    configured = {
        "memory": config.memory_db_url(settings.DB_URL),
        "ephemeral": config.ephemeral_db_url(settings.EPHEMERAL_DB_URL),
    }
    results = []
    for store in stores:
        target = url or configured[store]
        created, applied = db.init_store(store, target)
        results.append(StoreInit(store, db.safe_url(target), created, applied))
    return results
