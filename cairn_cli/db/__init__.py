"""open_db(): the only place a database connection is made."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlparse

import peewee

from cairn_cli.db import migrations, tables
from cairn_cli.errors import ConfigError, MissingDependency, NotFound
from cairn_cli.files import private_file

_SQLITE_PRAGMAS = {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 5000, "synchronous": "normal"}
_open: dict[tuple[str, str], peewee.Database] = {}


_MISSING_HINT = {
    "memory": "add memories first (`cairn memory add` / `cairn memory import`), or check --db-url / CAIRN_DB_URL",
    "ephemeral": "nothing has been ranked yet (`cairn rank`), or check --ephemeral-db-url / CAIRN_EPHEMERAL_DB_URL",
}


def _connect(kind: str, url: str, *, create: bool) -> peewee.Database:
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        raw = unquote(parsed.path if not parsed.netloc else parsed.netloc + parsed.path)
        if raw in ("", "/:memory:", ":memory:"):
            return peewee.SqliteDatabase(":memory:", pragmas=_SQLITE_PRAGMAS)
        path = Path(raw[1:] if raw.startswith("//") else raw)
        if not path.exists():
            if not create:  # a command that only reads never makes a store (a mistyped --db-url would)
                raise NotFound(f"no {kind} store at {path}", _MISSING_HINT[kind])
            try:  # private: prompts and memories are nobody else's to read (SQLite gives -wal/-shm the same mode)
                private_file(path)
            except OSError as exc:
                raise ConfigError(f"cannot create {path}: {exc.strerror}", "set CAIRN_HOME to a writable dir") from None
        return peewee.SqliteDatabase(str(path), pragmas=_SQLITE_PRAGMAS)
    if parsed.scheme in ("postgres", "postgresql"):
        try:
            import psycopg2  # noqa: F401
        except ImportError:
            raise MissingDependency("PostgreSQL URLs need psycopg2", "pip install 'cairn_cli[postgres]'") from None
        from cairn_cli import config

        # another instance's long transaction must not hang a hook: a statement waits this long for a lock at most
        wait_ms = int(str(config.get("DB_LOCK_TIMEOUT_MS")))
        return peewee.PostgresqlDatabase(
            (parsed.path or "/").lstrip("/") or "postgres",
            user=unquote(parsed.username) if parsed.username else None,
            password=unquote(parsed.password) if parsed.password else None,
            host=_pg_host(parsed),
            port=parsed.port or 5432,
            options=f"-c lock_timeout={wait_ms}",
        )
    raise ConfigError(f"unsupported database URL {safe_url(url)!r}", "use sqlite:///path or postgresql://user@host/db")


def _open_one(kind: str, url: str, proxy: peewee.DatabaseProxy, registry, *, create: bool) -> peewee.Database:
    key = (kind, url)
    db = _open.get(key)
    if db is None:
        db = _connect(kind, url, create=create)
        try:
            db.connect(reuse_if_open=True)
            migrations.apply_pending(db, registry)
        except peewee.OperationalError as exc:
            db.close()
            db = _read_only(db, registry) if "readonly" in str(exc) else None
            if db is None:
                raise _open_error(kind, url, exc) from None
        _open[key] = db
    proxy.initialize(db)
    return db


RETRY_PGCODES = {"40001": "serialization failure", "40P01": "deadlock detected"}


def conflict_code(exc: BaseException) -> str | None:
    """The PostgreSQL error code of a transaction that lost a conflict with another (worth retrying), else None."""
    for cause in (exc.args[0] if exc.args else None, exc.__cause__, exc.__context__):
        code = getattr(cause, "pgcode", None)
        if code in RETRY_PGCODES:
            return code
    return None


def retry_conflicts(fn, *, attempts: int = 5, sleep=None):
    """fn() (one whole transaction), run again when PostgreSQL aborts it for a conflict with another writer (a
    serialization failure or a deadlock: the transaction was rolled back, nothing of it was written); other
    errors, and the last attempt's, go through. Backoff 50 ms, 100 ms, ... with jitter."""
    import random
    import time

    sleep = sleep or time.sleep
    for attempt in range(attempts):
        try:
            return fn()
        except peewee.DatabaseError as exc:
            if attempt == attempts - 1 or conflict_code(exc) is None:
                raise
            sleep(0.05 * (2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def safe_url(url: str) -> str:
    """The URL as it may be printed or logged: a password replaced by ***."""
    parsed = urlparse(url)
    if not parsed.password:
        return url
    netloc = parsed.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return parsed._replace(netloc=f"{user}:***@{netloc[1]}").geturl()


def _pg_host(parsed) -> str:
    """The server's host: `?host=/run/postgresql` (a Unix socket's directory, as libpq takes it), else the URL's
    host name, else loopback."""
    from urllib.parse import parse_qs

    socket_dir = parse_qs(parsed.query).get("host")
    return socket_dir[-1] if socket_dir else parsed.hostname or "127.0.0.1"


def _open_error(kind: str, url: str, exc: Exception) -> ConfigError:
    """One line: which store, where (no password), the driver's first line of why, and the fix."""
    why = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    return ConfigError(f"cannot open the {kind} database at {safe_url(url)}: {why}", _hint(url))


def _hint(url: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql"):
        where = f"{_pg_host(parsed)}:{parsed.port or 5432}"
        return f"check that PostgreSQL is running at {where}, that the database exists and the user may connect"
    return "check the URL and permissions"


def _read_only(db: peewee.Database, registry) -> peewee.Database | None:
    """A SQLite store this process may read but not write (another account's, a read-only mount): opened
    read-only so that ranking still works; every write then fails and its caller says so. None when it cannot be
    read either, or lacks a migration (its tables would not be what cairn expects)."""
    if not isinstance(db, peewee.SqliteDatabase) or db.database == ":memory:":
        return None
    # mode=ro reads a WAL store whose shared-memory file it may use; else immutable: read as it is on disk
    for flags in ("mode=ro", "mode=ro&immutable=1"):
        ro = peewee.SqliteDatabase(f"file:{db.database}?{flags}", uri=True, pragmas={"busy_timeout": 5000})
        try:
            ro.connect()
            done = {n for (n,) in ro.execute_sql("SELECT name FROM cairn_migrations").fetchall()}
        except peewee.DatabaseError:
            ro.close()
            continue
        if all(name in done for name, _ in registry):
            return ro
        ro.close()
        return None
    return None


def open_memory_db(url: str, *, create: bool = True) -> peewee.Database:
    """Connect the persistent memory store, apply pending migrations once per process, bind the models."""
    return _open_one("memory", url, tables.memory_proxy, migrations.MEMORY_MIGRATIONS, create=create)


def open_ephemeral_db(url: str, *, create: bool = True) -> peewee.Database:
    """Connect the ephemeral store (deliveries, hook state) the same way."""
    return _open_one("ephemeral", url, tables.ephemeral_proxy, migrations.EPHEMERAL_MIGRATIONS, create=create)


def open_db(memory_url: str, ephemeral_url: str, *, create: bool = True) -> tuple[peewee.Database, peewee.Database]:
    return open_memory_db(memory_url, create=create), open_ephemeral_db(ephemeral_url, create=create)


REGISTRIES = {"memory": migrations.MEMORY_MIGRATIONS, "ephemeral": migrations.EPHEMERAL_MIGRATIONS}
PROXIES = {"memory": tables.memory_proxy, "ephemeral": tables.ephemeral_proxy}


def connect_store(kind: str, url: str, *, create: bool = True, migrate: bool = True) -> peewee.Database:
    """A connection of its own to the `kind` store at `url` ("memory" or "ephemeral"), migrated to the current
    schema unless `migrate` is False, neither cached nor bound to the models' proxies: a caller that holds two
    databases at once (`cairn db copy`). The caller closes it."""
    database = _connect(kind, url, create=create)
    try:
        database.connect(reuse_if_open=True)
        if migrate:
            migrations.apply_pending(database, REGISTRIES[kind])
    except peewee.OperationalError as exc:
        database.close()
        raise _open_error(kind, url, exc) from None
    return database


def pending_migrations(kind: str, database: peewee.Database) -> list[str]:
    """The migrations of the `kind` registry not yet applied to `database` (all of them on an empty database)."""
    if not database.table_exists("cairn_migrations"):
        return [name for name, _ in REGISTRIES[kind]]
    done = {name for (name,) in database.execute_sql("SELECT name FROM cairn_migrations").fetchall()}
    return [name for name, _ in REGISTRIES[kind] if name not in done]


@contextmanager
def bound(kind: str, database: peewee.Database) -> Iterator[peewee.Database]:
    """Bind the `kind` models (and every core function that reads through them) to `database` for the block, then
    give the proxy back what it held."""
    proxy = PROXIES[kind]
    previous = proxy.obj
    proxy.initialize(database)
    try:
        yield database
    finally:
        proxy.initialize(previous)


def close_all() -> None:
    """Close every connection this process opened (tests and the daemon's shutdown use this)."""
    for db in _open.values():
        if not db.is_closed():
            db.close()
    _open.clear()
