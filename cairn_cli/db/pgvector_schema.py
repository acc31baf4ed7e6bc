"""pgvector's part of the memory store's schema: the extension, the `embedding_vec` column, the conversion function
and the triggers that keep the column in step with `embedding` (why and how: db/vectors.py). Migration 0011 runs
`migrate`; db/vectors.py installs a store that gains the extension later. Nothing here opens the database (the
migrations run while it is being opened)."""

from __future__ import annotations

from collections.abc import Sequence

EXTENSION = "vector"
COLUMN = "embedding_vec"
PENDING_INDEX = "memories_embedding_vec_pending"  # rows whose vector is still to be filled (empty once backfilled)

_F32LE_VECTOR = """
CREATE OR REPLACE FUNCTION cairn_f32le_vector(b bytea) RETURNS vector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $body$
  SELECT CASE WHEN length(b) = 0 OR mod(length(b), 4) <> 0 THEN NULL ELSE (
    SELECT array_agg(
      (CASE WHEN b3 >= 128 THEN -1 ELSE 1 END * (CASE WHEN e = 0 THEN m ELSE m | 8388608 END))::float8 * p[e + 1]
      ORDER BY i)::real[]::vector
    FROM (SELECT i, b3, ((b3 & 127) << 1) | (b2 >> 7) AS e, ((b2 & 127) << 16) | (b1 << 8) | b0 AS m
          FROM (SELECT i, get_byte(b, 4 * i) AS b0, get_byte(b, 4 * i + 1) AS b1, get_byte(b, 4 * i + 2) AS b2,
                       get_byte(b, 4 * i + 3) AS b3
                FROM generate_series(0, length(b) / 4 - 1) AS i) AS r) AS f,
         (SELECT {powers} AS p) AS t) END
$body$
"""
# 2^(e - 150) for each biased exponent e (e = 0, subnormal: 2^-149): a float32 is sign * mantissa * 2^(e - 150)
_POWERS = "ARRAY[" + ",".join(repr(2.0 ** (max(e, 1) - 150)) for e in range(256)) + "]::float8[]"

_SYNC_FUNCTION = f"""
CREATE OR REPLACE FUNCTION cairn_memories_embedding_vec() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    NEW.{COLUMN} := cairn_f32le_vector(NEW.embedding);
    RETURN NEW;
END
$body$
"""
_TRIGGERS = (
    "DROP TRIGGER IF EXISTS memories_embedding_vec_insert ON memories",
    "DROP TRIGGER IF EXISTS memories_embedding_vec_update ON memories",
    "CREATE TRIGGER memories_embedding_vec_insert BEFORE INSERT ON memories FOR EACH ROW "
    "EXECUTE FUNCTION cairn_memories_embedding_vec()",
    "CREATE TRIGGER memories_embedding_vec_update BEFORE UPDATE ON memories FOR EACH ROW "
    f"WHEN (NEW.embedding IS DISTINCT FROM OLD.embedding OR NEW.{COLUMN} IS DISTINCT FROM OLD.{COLUMN}) "
    "EXECUTE FUNCTION cairn_memories_embedding_vec()",
)


def is_postgres(database) -> bool:
    import peewee

    return isinstance(database, peewee.PostgresqlDatabase)


def rows(database, sql: str, params: Sequence = ()) -> list[tuple]:
    """`sql` (psycopg2's %s placeholders, interpolated client-side: literals the planner matches against an index's
    predicate) run on `database`; its rows."""
    cursor = database.execute_sql(sql, params or None)
    return cursor.fetchall() if cursor.description is not None else []


def state(database) -> str | None:
    """Why the vector path cannot work on `database` even after installing, or None (installed or installable)."""
    if not is_postgres(database):
        return "SQLite store"
    if extension_installed(database):
        return None
    if not rows(database, "SELECT 1 FROM pg_available_extensions WHERE name = %s", (EXTENSION,)):
        return "PostgreSQL without the vector extension (pgvector is not installed on the server)"
    if not rows(database, "SELECT 1 FROM pg_roles WHERE rolname = current_user AND rolsuper"):
        return (
            "the vector extension is not created in this database and this role may not create it: "
            "a superuser runs CREATE EXTENSION vector"
        )
    return None


def extension_installed(database) -> bool:
    return bool(rows(database, "SELECT 1 FROM pg_extension WHERE extname = %s", (EXTENSION,)))


def install(database) -> str | None:
    """The extension, the column, the conversion function, the triggers and the backfill's index, on `database`
    when it can have them (idempotent; in the caller's transaction, the extension tried in a savepoint). Returns
    None when installed, else why not (and nothing was changed): what migration 0011 runs."""
    why = state(database)
    if why:
        return why
    if not extension_installed(database):
        import peewee

        try:
            with database.atomic():  # a savepoint: a refusal leaves the caller's transaction usable
                database.execute_sql(f"CREATE EXTENSION IF NOT EXISTS {EXTENSION}")
        except peewee.DatabaseError as exc:
            return f"cannot create the vector extension: {next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)}"
    for sql in (
        f"ALTER TABLE memories ADD COLUMN IF NOT EXISTS {COLUMN} vector",
        _F32LE_VECTOR.format(powers=_POWERS),
        _SYNC_FUNCTION,
        *_TRIGGERS,
        f"CREATE INDEX IF NOT EXISTS {PENDING_INDEX} ON memories (id) WHERE embedding IS NOT NULL AND {COLUMN} IS NULL",
    ):
        database.execute_sql(sql)
    return None


def migrate(database) -> None:
    """Migration 0011: install when the extension is available (a no-op on SQLite and without pgvector; the
    vectors of existing rows are filled by ensure_index's backfill, outside the migration's lock)."""
    if is_postgres(database):
        install(database)
