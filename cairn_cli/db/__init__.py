"""open_db(): the only place a database connection is made: peewee's (`open_db`, `connect_store`, migrations applied
on open) and the lean stdlib sqlite3 one of the hook's daemon-down fallback (`open_lean`); `execute` / `transaction`
take either kind. peewee is imported only when a peewee connection is made (docs/store.md).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from cairn_cli.errors import ConfigError, MissingDependency, NotFound

if TYPE_CHECKING:
    import peewee

    from cairn_cli.db.lean import LeanSqlite

_SQLITE_PRAGMAS = {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 5000, "synchronous": "normal"}
WRITE_LOCK = "IMMEDIATE"  # how a SQLite transaction begins (peewee's and the lean connection's alike)
_open: dict[tuple[str, str], peewee.Database] = {}
_lean: dict[str, LeanSqlite] = {}  # kind -> the lean connection this process ranks through (open_lean)


_URL_FLAG = {"memory": "--db-url / CAIRN_DB_URL", "ephemeral": "--ephemeral-db-url / CAIRN_EPHEMERAL_DB_URL"}
_HOLDS = {"memory": "memories", "ephemeral": "deliveries"}


def _other(kind: str) -> str:
    return "ephemeral" if kind == "memory" else "memory"


def _missing_hint(kind: str, url: str, flag: str | None = None) -> str:
    """How to get past a store that is not there: the URL may be mistyped, or the store was never made."""
    import shlex

    return f"check {flag or _URL_FLAG[kind]}, or create it: `cairn db init {shlex.quote(safe_url(url))} --store {kind}`"


def _sqlite_path(url: str) -> Path | None:
    """The file of a sqlite:/// URL; None for an in-memory one (ValueError: not a SQLite URL)."""
    parsed = urlparse(url)
    if parsed.scheme != "sqlite":
        raise ValueError(url)
    raw = unquote(parsed.path if not parsed.netloc else parsed.netloc + parsed.path)
    if raw in ("", "/:memory:", ":memory:"):
        return None
    return Path(raw[1:] if raw.startswith("//") else raw)


def _connect(kind: str, url: str, *, create: bool, flag: str | None = None) -> peewee.Database:
    import peewee

    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        path = _sqlite_path(url)
        if path is None:
            return peewee.SqliteDatabase(":memory:", pragmas=_SQLITE_PRAGMAS)
        if not path.exists():
            if not create:  # only a command that makes a store on purpose does (a mistyped --db-url would)
                raise NotFound(f"no {kind} store at {path}", _missing_hint(kind, url, flag))
            from cairn_cli.files import private_file

            try:  # private: prompts and memories are nobody else's to read (SQLite gives -wal/-shm the same mode)
                private_file(path)
            except OSError as exc:
                raise ConfigError(f"cannot create {path}: {exc.strerror}", "set CAIRN_HOME to a writable dir") from None
        # every transaction takes the write lock at BEGIN: a deferred one that read first and then wrote after
        # another writer committed fails at once (SQLITE_BUSY_SNAPSHOT) instead of waiting on busy_timeout
        return peewee.SqliteDatabase(str(path), pragmas=_SQLITE_PRAGMAS, lock_type=WRITE_LOCK)
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


def _open_one(kind: str, url: str, *, create: bool) -> peewee.Database:
    from cairn_cli.db import tables

    proxy = tables.PROXIES[kind]
    lean = _lean.pop(kind, None)  # from here on this process writes `kind` through peewee
    if lean is not None:
        lean.close()
    key = (kind, url)
    db = _open.get(key)
    if db is None:
        db = _connect(kind, url, create=create)
        db = _checked(kind, url, db, create=create, migrate=True)
        _open[key] = db
    proxy.initialize(db)
    return db


def _checked(
    kind: str, url: str, db: peewee.Database, *, create: bool, migrate: bool, flag: str | None = None
) -> peewee.Database:
    """`db` connected, found to hold the `kind` store (or, with `create`, nothing of cairn's yet) and, with `migrate`,
    brought to this cairn's schema; a SQLite store this process cannot write, opened read-only instead. Closed and
    a one-line error raised when it is not the store it should be, or cannot be opened."""
    import peewee

    from cairn_cli.db import migrations

    try:
        db.connect(reuse_if_open=True)
        _check_store(kind, url, recorded_migrations(db), create=create, flag=flag)
        if migrate:
            migrations.apply_pending(db, migrations.REGISTRIES[kind])
        return db
    except peewee.DatabaseError as exc:
        db.close()
        ro = _read_only(kind, url, db, flag) if "readonly" in str(exc) else None
        if ro is None:
            raise _open_error(kind, url, exc, flag) from None
        return ro
    except BaseException:
        db.close()
        raise


def recorded_migrations(database) -> set[str] | None:
    """The migrations recorded in `database`'s ledger; None when it has no ledger (nothing of cairn's in it)."""
    if not database.table_exists("cairn_migrations"):
        return None
    return {name for (name,) in database.execute_sql("SELECT name FROM cairn_migrations").fetchall()}


def _check_store(kind: str, url: str, done: set[str] | None, *, create: bool, flag: str | None = None) -> None:
    """Refuse a database that is not the `kind` store before anything is written to it: one that holds the other
    store (a --db-url pointing at ephemeral.db would get the memory schema migrated into it), or, unless the
    caller makes the store on purpose (`create`), one that holds no cairn store at all (an empty PostgreSQL
    database, an empty file: a mistyped URL must not become a new, empty store)."""
    from cairn_cli.db.schema import MIGRATIONS

    done = done or set()
    if done & set(MIGRATIONS[kind]):
        return
    other = _other(kind)
    if done & set(MIGRATIONS[other]):
        raise ConfigError(
            f"{safe_url(url)} holds the {other} store ({_HOLDS[other]}), not the {kind} store",
            f"check {flag or _URL_FLAG[kind]}",
        )
    if not create:
        raise NotFound(
            f"no {kind} store in {safe_url(url)} (the database holds no cairn tables)", _missing_hint(kind, url, flag)
        )


RETRY_PGCODES = {"40001": "serialization failure", "40P01": "deadlock detected", "55P03": "lock timeout"}
_SQLITE_BUSY = {5: "database is locked", 6: "a table is locked", 517: "busy snapshot"}  # SQLITE_BUSY, _LOCKED, …


def conflict_code(exc: BaseException) -> str | None:
    """Why a transaction lost to another writer, when that is worth retrying: PostgreSQL's serialization failure,
    deadlock or lock timeout (the code), SQLite's busy or locked database (the words); else None."""
    for cause in (exc, exc.args[0] if exc.args else None, exc.__cause__, exc.__context__):
        code = getattr(cause, "pgcode", None)
        if code in RETRY_PGCODES:
            return code
        sqlite_code = getattr(cause, "sqlite_errorcode", None)
        if sqlite_code in _SQLITE_BUSY:
            return _SQLITE_BUSY[sqlite_code]
        if isinstance(cause, BaseException) and str(cause).startswith(("database is locked", "database table is")):
            return "database is locked"
    return None


def retry_conflicts(fn, *, attempts: int = 5, budget_s: float | None = None, sleep=None, clock=None):
    """fn() (one whole unit of work in its own transaction), run again when it lost to another writer: a
    PostgreSQL serialization failure or deadlock, a SQLite store that stayed locked past busy_timeout (the
    transaction was rolled back, nothing of it was written). Retried `attempts` times, or — with `budget_s` —
    for as long as another attempt can start within that many seconds; other errors, and the last attempt's, go
    through. Backoff 50 ms, 100 ms, ... (at most 1 s) with jitter, so that writers that collided spread out."""
    import random
    import time

    sleep = sleep or time.sleep
    clock = clock or time.monotonic
    start = clock()
    attempt = 0
    while True:
        try:
            return fn()
        except errors() as exc:
            attempt += 1
            pause = min(1.0, 0.05 * (2 ** min(attempt - 1, 5))) * (0.5 + random.random())
            out = clock() - start + pause >= budget_s if budget_s is not None else attempt >= attempts
            if out or conflict_code(exc) is None:
                raise
            sleep(pause)


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


def driver_message(exc: BaseException) -> str:
    """The first line of a driver's error (its class when it says nothing): what a one-line error quotes."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def _open_error(kind: str, url: str, exc: Exception, flag: str | None = None) -> ConfigError:
    """One line: which store, where (no password), the driver's first line of why, and the fix."""
    why = driver_message(exc)
    if why.startswith("file is not a database"):
        return ConfigError(f"{safe_url(url)} is not a SQLite database", f"check {flag or _URL_FLAG[kind]}")
    return ConfigError(f"cannot open the {kind} database at {safe_url(url)}: {why}", _hint(url))


def _hint(url: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql"):
        where = f"{_pg_host(parsed)}:{parsed.port or 5432}"
        return f"check that PostgreSQL is running at {where}, that the database exists and the user may connect"
    return "check the URL and permissions"


def _read_only(kind: str, url: str, db: peewee.Database, flag: str | None = None) -> peewee.Database | None:
    """A SQLite store this process may read but not write (another account's, a read-only mount or CAIRN_HOME):
    opened read-only so that ranking still works; every write then fails and its caller says so. None when it
    cannot be read either, or lacks a migration (its tables would not be what cairn expects); the other store's
    database is refused as on any open."""
    import peewee

    from cairn_cli.db.schema import MIGRATIONS

    if not isinstance(db, peewee.SqliteDatabase) or db.database == ":memory:":
        return None
    # mode=ro reads a WAL store whose shared-memory file it may use; else immutable: read as it is on disk
    for flags in ("mode=ro", "mode=ro&immutable=1"):
        ro = peewee.SqliteDatabase(f"file:{db.database}?{flags}", uri=True, pragmas={"busy_timeout": 5000})
        try:
            ro.connect()
            done = recorded_migrations(ro)
        except peewee.DatabaseError:
            ro.close()
            continue
        try:
            _check_store(kind, url, done, create=False, flag=flag)
        except BaseException:
            ro.close()
            raise
        if done is not None and set(MIGRATIONS[kind]) <= done:
            return ro
        ro.close()
        return None
    return None


def open_memory_db(url: str, *, create: bool = True) -> peewee.Database:
    """Connect the persistent memory store, apply pending migrations once per process, bind the models."""
    return _open_one("memory", url, create=create)


def open_ephemeral_db(url: str, *, create: bool = True) -> peewee.Database:
    """Connect the ephemeral store (deliveries, hook state) the same way."""
    return _open_one("ephemeral", url, create=create)


def open_db(memory_url: str, ephemeral_url: str, *, create: bool = True) -> tuple[peewee.Database, peewee.Database]:
    return open_memory_db(memory_url, create=create), open_ephemeral_db(ephemeral_url, create=create)


def connect_store(
    kind: str, url: str, *, create: bool = True, migrate: bool = True, flag: str | None = None
) -> peewee.Database:
    """A connection of its own to the `kind` store at `url` ("memory" or "ephemeral"), migrated to the current
    schema unless `migrate` is False, neither cached nor bound to the models' proxies: a caller that holds two
    databases at once (`cairn db copy`; `flag`: the option that gave the URL, named in errors). The caller closes
    it."""
    database = _connect(kind, url, create=create, flag=flag)
    return _checked(kind, url, database, create=create, migrate=migrate, flag=flag)


def init_store(kind: str, url: str) -> tuple[bool, list[str]]:
    """Make the `kind` store at `url` on purpose (`cairn db init`): the SQLite file or the cairn tables created
    when missing, the pending migrations applied. Returns whether it held no `kind` store before, and the
    migrations applied (a rerun applies none)."""
    import peewee

    from cairn_cli.db import migrations
    from cairn_cli.db.schema import MIGRATIONS

    database = _checked(kind, url, _connect(kind, url, create=True), create=True, migrate=False)
    try:
        done = recorded_migrations(database) or set()
        applied = migrations.apply_pending(database, migrations.REGISTRIES[kind])
    except peewee.DatabaseError as exc:
        raise _open_error(kind, url, exc) from None
    finally:
        database.close()
    return not done & set(MIGRATIONS[kind]), applied


def pending_migrations(kind: str, database: peewee.Database) -> list[str]:
    """The migrations of the `kind` registry not yet applied to `database` (all of them on an empty database)."""
    from cairn_cli.db import migrations

    if not database.table_exists("cairn_migrations"):
        return [name for name, _ in migrations.REGISTRIES[kind]]
    done = {name for (name,) in database.execute_sql("SELECT name FROM cairn_migrations").fetchall()}
    return [name for name, _ in migrations.REGISTRIES[kind] if name not in done]


@contextmanager
def bound(kind: str, database: peewee.Database) -> Iterator[peewee.Database]:
    """Bind the `kind` models (and every core function that reads through them) to `database` for the block, then
    give the proxy back what it held."""
    from cairn_cli.db import tables

    proxy = tables.PROXIES[kind]
    previous = proxy.obj
    proxy.initialize(database)
    try:
        yield database
    finally:
        proxy.initialize(previous)


def close_thread_connections() -> None:
    """Close this thread's connections to the databases this process opened (peewee keeps one per thread), at the
    end of a thread that used them: the daemon's requests (a thread each) and its background work. A thread that
    ends without this leaves its connection, file descriptors and page cache included, to the cyclic garbage
    collector (sqlite3's statement cache makes a cycle of it); one left in a transaction is left as it is."""
    import peewee

    for database in list(_open.values()):
        if not database.is_closed():
            try:
                database.close()
            except peewee.OperationalError:  # a transaction still open: never closed from under it
                pass


def close_all() -> None:
    """Close every connection this process opened (tests and the daemon's shutdown use this)."""
    for db in _open.values():
        if not db.is_closed():
            db.close()
    _open.clear()
    close_lean()


# --- the lean connection, and the SQL both kinds run ---------------------------------------------------------------


def open_lean(memory_url: str, ephemeral_url: str) -> bool:
    """Open both stores through the stdlib's sqlite3 alone (the daemon-down fallback: `execute` and `transaction`
    then go through these connections). Only when both are SQLite files that exist, that this process may write,
    and that have every migration this cairn knows; False otherwise, nothing opened: the caller opens them with
    `open_db` (which creates, migrates, or opens read-only what needs it)."""
    import os

    from cairn_cli.db.lean import LeanSqlite
    from cairn_cli.db.schema import MIGRATIONS

    opened: dict[str, LeanSqlite] = {}
    try:
        for kind, url in (("memory", memory_url), ("ephemeral", ephemeral_url)):
            try:
                path = _sqlite_path(url)
            except ValueError:
                return False
            if path is None or not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
                return False
            conn = LeanSqlite.open(str(path), _SQLITE_PRAGMAS)
            if conn is None:
                return False
            opened[kind] = conn
            if conn.migrations() != set(MIGRATIONS[kind]):
                return False
        close_lean()
        _lean.update(opened)
        opened = {}
        return True
    finally:
        for conn in opened.values():
            conn.close()


def close_lean() -> None:
    """Close the lean connections: `execute` and `transaction` go through peewee's again."""
    for lean in _lean.values():
        lean.close()
    _lean.clear()


def connection(kind: str) -> Any:
    """The connection `kind` ("memory" or "ephemeral") is read and written through: the lean one when this process
    opened it, else the database bound to the models (core/store.open_stores)."""
    lean = _lean.get(kind)
    if lean is not None:
        return lean
    from cairn_cli.db import tables

    return tables.PROXIES[kind].obj


def is_postgres(kind: str) -> bool:
    return is_postgres_database(connection(kind))


def is_postgres_database(database) -> bool:
    """Whether a connection (peewee's or the lean one) speaks to PostgreSQL."""
    return database.param != "?"


def execute(kind: str, sql: str, params: Sequence = ()) -> list[tuple]:
    """Run one statement written with `?` placeholders on the `kind` store; its rows (none for a write)."""
    conn = connection(kind)
    if conn.param != "?":
        sql = sql.replace("?", conn.param)
    cursor = conn.execute_sql(sql, params)
    return cursor.fetchall() if cursor.description is not None else []  # psycopg2: a write has no rows to fetch


def marks(n: int) -> str:
    """`n` placeholders, as `execute` takes them."""
    return ", ".join("?" * n)


def insert(kind: str, table: str, values: dict, *, returning: str | None = None):
    """Insert one row of `values` (column -> value) into `table`; the new row's `returning` column when asked."""
    sql = f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks(len(values))})"
    rows = execute(kind, sql + (f" RETURNING {returning}" if returning else ""), list(values.values()))
    return rows[0][0] if returning else None


def transaction(kind: str):
    """A transaction on the `kind` store (nested: a savepoint), whichever kind of connection it is."""
    return connection(kind).atomic()


def errors() -> tuple[type[BaseException], ...]:
    """The exceptions a failed statement raises here: sqlite3's (the lean connection) and peewee's (which wraps the
    drivers'), peewee's only once it is loaded (a process that never imported it cannot have raised them)."""
    import sqlite3

    peewee = sys.modules.get("peewee")
    return (sqlite3.Error,) if peewee is None else (sqlite3.Error, peewee.DatabaseError)


def timestamp(kind: str, value):
    """A datetime as the `kind` store's columns hold it: SQLite's text (what peewee writes), PostgreSQL's own."""
    return str(value) if not is_postgres(kind) else value


def compact(kind: str) -> str | None:
    """A SQLite store rebuilt (VACUUM) and its write-ahead log emptied, so that deleted or rewritten rows are gone
    from the file too (`cairn forget`, `cairn redact --scan`); a PostgreSQL one vacuumed (its dead row versions
    reclaimed). What kept it from being done (a reader holding the log: a running daemon), or None."""
    conn = connection(kind)
    if is_postgres(kind):
        try:  # outside a transaction: peewee runs it in autocommit; the dead row versions are reclaimed now
            conn.execute_sql("VACUUM")
        except errors() as exc:
            return (
                f"{kind} store (PostgreSQL) not vacuumed: {driver_message(exc)}; its autovacuum will reclaim the rows"
            )
        return None
    try:
        conn.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute_sql("VACUUM")
        busy = conn.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except errors() as exc:
        return f"{kind} store not compacted: {exc}; run `cairn daemon stop` and again"
    if busy and busy[0]:
        return f"{kind} store: its write-ahead log is in use; run `cairn daemon stop` and again"
    return None
