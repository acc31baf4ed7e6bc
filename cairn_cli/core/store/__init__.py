"""The memory store and the delivery log as the domain sees them. `open_stores` binds both databases named by the
settings (db.open_db does the connecting); it is called once per command, per daemon request or per hook at the
edge, never inside a core function: every function below assumes the stores are bound. Opening also brings the
memory store's full-text index up to date (core/store/search_index.py)."""

from __future__ import annotations

from cairn_cli import config
from cairn_cli.config import Settings

INSTANCE_FILE = "instance-id"
_instances: dict[str, str] = {}  # home -> its instance id, read once per process


def instance_id(settings: Settings) -> str:
    """The instance that writes through these settings: CAIRN_INSTANCE, else the id made once per CAIRN_HOME
    (`<host>-<6 hex>`, kept in $CAIRN_HOME/instance-id: a machine's own, never the shared store's)."""
    if settings.INSTANCE:
        return settings.INSTANCE
    home = config.home_dir()
    if home not in _instances:
        import os
        import socket

        path = os.path.join(home, INSTANCE_FILE)
        host = "".join(c if c.isalnum() or c in "-." else "-" for c in socket.gethostname())[:40] or "host"
        try:
            with open(path, encoding="utf-8") as fh:
                value = fh.read().strip()
        except FileNotFoundError:
            value = ""
        except OSError:  # another account's home (a read-only store): the host alone, nothing written
            value = host
        if not value:  # the first run in this home (the hot path only reads it, with no more imports than this)
            import secrets

            from cairn_cli.files import atomic_write, private_dir

            value = f"{host}-{secrets.token_hex(3)}"
            try:
                private_dir(home)
                atomic_write(path, value + "\n", mode=0o600)
            except OSError:
                value = host  # a home this process cannot write: ranking goes on, the rows say the host
        _instances[home] = value
    return _instances[home]


def open_stores(settings: Settings, *, create: bool | None = None, lean: bool = False) -> bool:
    """Bind the memory store and the delivery log. Which stores may be made when they do not exist: by default
    (`create=None`) only the default ones under CAIRN_HOME, so that a store at a URL given by --db-url /
    CAIRN_DB_URL must exist (a mistyped URL is an error naming it, never a new empty store: `cairn db init` makes
    one); `create=True`: both (a command that makes its stores on purpose: `memory add`, `memory import`);
    `create=False`: none, not even the default ones (commands that only read).
    `lean` (the daemon-down fallback of the hook's hot path): SQLite stores at the current schema are opened
    without peewee (db.open_lean; True returned), and only what ranking and logging a turn need may be used until
    db.close_lean(). Every row written from here on carries this instance's id (`instance_id`)."""
    from cairn_cli import db
    from cairn_cli.core.store import search_index
    from cairn_cli.db.instance import set_writing_instance

    memory_url = config.memory_db_url(settings.DB_URL)
    ephemeral_url = config.ephemeral_db_url(settings.EPHEMERAL_DB_URL)
    opened_lean = lean and db.open_lean(memory_url, ephemeral_url)
    if not opened_lean:
        db.open_memory_db(memory_url, create=may_create("memory", memory_url, create))
        db.open_ephemeral_db(ephemeral_url, create=may_create("ephemeral", ephemeral_url, create))
    set_writing_instance(instance_id(settings))
    search_index.sync_if_behind()  # memories a write did not index (the migration that made the index queues them all)
    return opened_lean


def may_create(kind: str, url: str, create: bool | None) -> bool:
    """Whether opening the `kind` store at `url` may make it (open_stores' `create`): by default only when `url` is
    the default one under CAIRN_HOME."""
    return create if create is not None else url == config.default_db_url(kind)
