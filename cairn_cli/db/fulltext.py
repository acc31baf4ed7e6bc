"""The full-text index's SQL: what core/store/search_index.py writes and core/ranking/fallback.py reads, as plain SQL
through the memory store's connection (db.execute), lean or peewee's: this is the hook's hot path. The tables
and how they stay in step on SQLite and PostgreSQL are in docs/hot-path.md."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from cairn_cli import db as _store

TSV_MAX_BYTES = 2046  # PostgreSQL's longest lexeme in a tsvector / tsquery (2 KB less one)


class Doc(NamedTuple):
    """One memory's row of the index."""

    memory_id: int
    scope: str
    meta: int  # 1: a bucket-4 memory (ranked only with the prefilter off)
    content_len: int
    keyword_len: int
    terms: str  # JSON {term: [in content, in keywords]}
    grp: str  # its neighbour group: the writing session, else the scope


class ScopeStats(NamedTuple):
    """One scope's BM25 collection statistics over the index (n: not bucket 4; *_meta: bucket 4)."""

    scope_id: int | None  # None: not from fulltext_scopes (PostgreSQL, or rows held in memory)
    scope: str
    n: int
    n_meta: int
    content_len: int
    keyword_len: int
    content_len_meta: int
    keyword_len_meta: int


_DOC_COLUMNS = "memory_id, scope, meta, content_len, keyword_len, terms, grp"


def _db():
    return _store.connection("memory")


def is_postgres() -> bool:
    return _store.is_postgres("memory")


def _sql(sql: str, params: Sequence = ()) -> list[tuple]:
    return _store.execute("memory", sql, params)


# --- writing --------------------------------------------------------------------------------------------------


def pending(limit: int | None = None) -> list[int]:
    """Memories whose index row is out of date (queued by the memories' triggers), oldest first."""
    rows = _sql("SELECT memory_id FROM fulltext_pending ORDER BY memory_id" + (f" LIMIT {int(limit)}" if limit else ""))
    return [r[0] for r in rows]


def live_memories(ids: Sequence[int]) -> list[tuple]:
    """(id, content, keywords JSON, kind, scope, session id) of the live memories among `ids`."""
    if not ids:
        return []
    return _sql(
        f"SELECT id, content, keywords, kind, scope, session_id FROM memories WHERE superseded_by IS NULL AND id IN ({_store.marks(len(ids))})",
        list(ids),
    )


def replace(ids: Sequence[int], docs: Iterable[tuple], tsvectors: Sequence[str] | None = None) -> None:
    """Drop the index rows of `ids`, insert `docs` (those of `ids` that are live), and clear them from the queue.
    The caller holds the transaction. On PostgreSQL `tsvectors` are the docs' tsvector literals."""
    ids = list(ids)
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        _sql(f"DELETE FROM fulltext_docs WHERE memory_id IN ({_store.marks(len(chunk))})", chunk)
        _sql(f"DELETE FROM fulltext_pending WHERE memory_id IN ({_store.marks(len(chunk))})", chunk)
    db = _db()
    docs = list(docs)
    if not docs:
        return
    if tsvectors is None:
        sql = f"INSERT INTO fulltext_docs ({_DOC_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
        rows: list[tuple] = docs
    else:
        sql = f"INSERT INTO fulltext_docs ({_DOC_COLUMNS}, tsv) VALUES (?, ?, ?, ?, ?, ?, ?, ?::tsvector)"
        rows = [(*d, v) for d, v in zip(docs, tsvectors)]
    if db.param != "?":
        sql = sql.replace("?", db.param)
    cursor = db.cursor()
    cursor.executemany(sql, rows)


def all_memory_rows() -> list[tuple]:
    """(id, content, keywords JSON, kind, scope, session id) of every live memory (a store whose index is behind and
    that this process cannot write ranks from these)."""
    return _sql(
        "SELECT id, content, keywords, kind, scope, session_id FROM memories WHERE superseded_by IS NULL ORDER BY id"
    )


# --- reading ----------------------------------------------------------------------------------------------------


def scope_stats() -> list[ScopeStats]:
    """Per scope, its statistics over the indexed memories."""
    if not is_postgres():
        rows = _sql(
            "SELECT id, scope, n, n_meta, content_len, keyword_len, content_len_meta, keyword_len_meta "
            "FROM fulltext_scopes WHERE n + n_meta > 0"
        )
        return [ScopeStats._make(r) for r in rows]
    out: dict[str, list] = {}
    for scope, meta, n, clen, klen in _sql(
        "SELECT scope, meta, count(*), sum(content_len), sum(keyword_len) FROM fulltext_docs GROUP BY scope, meta"
    ):
        row = out.setdefault(scope, [None, scope, 0, 0, 0, 0, 0, 0])
        if meta:
            row[3], row[6], row[7] = n, int(clen), int(klen)
        else:
            row[2], row[4], row[5] = n, int(clen), int(klen)
    return [ScopeStats._make(r) for r in out.values()]


def joined_length(weight: int, *, with_meta: bool) -> tuple[int, int]:
    """(memories, the sum of their lengths joined with their previous neighbour's) over the indexed memories,
    bucket-4 ones only `with_meta`: every length counted once for itself and once for the memory after it in its
    group, the last of each group once. A full pass: read once and kept while the store grows by little."""
    meta = "" if with_meta else " WHERE meta = 0"
    n, total = _sql(
        f"SELECT count(*), coalesce(sum(content_len + ? * keyword_len), 0) FROM fulltext_docs{meta}", (weight,)
    )[0]
    last = _sql(
        "SELECT coalesce(sum(d.content_len + ? * d.keyword_len), 0) FROM fulltext_docs d JOIN "
        f"(SELECT max(memory_id) AS last FROM fulltext_docs{meta} GROUP BY grp) g ON d.memory_id = g.last",
        (weight,),
    )[0][0]
    return int(n), int(2 * total - last)


def term_stats(terms: Sequence[str]) -> dict[str, tuple[int, int, int, int]]:
    """term -> (df, df of bucket-4 memories, the largest tf and the shortest length among the others) (SQLite)."""
    out = {}
    for start in range(0, len(terms), 500):
        chunk = list(terms[start : start + 500])
        for term, df, df_meta, tf_max, dl_min in _sql(
            f"SELECT term, df, df_meta, tf_max, dl_min FROM fulltext_terms WHERE term IN ({_store.marks(len(chunk))})",
            chunk,
        ):
            out[term] = (df, df_meta, tf_max, dl_min)
    return out


def postings_query(scope_ids: Sequence[int] | None):
    """A function term -> [(memory_id, tf, length)] of the not-bucket-4 memories in `scope_ids` (None: all), at
    keyword weight 2 (SQLite). The statement is prepared once, the cursor reused: this runs once per query term."""
    sql = "SELECT memory_id, tf, dl FROM fulltext_postings WHERE term = ?"
    if scope_ids is not None:
        sql += f" AND scope_id IN ({', '.join(str(int(i)) for i in scope_ids)})"
    cursor = _db().cursor()

    def run(term: str) -> list[tuple]:
        return cursor.execute(sql, (term,)).fetchall()

    return run


def _docs(sql: str, params: Sequence = ()) -> list[Doc]:
    return list(map(Doc._make, _sql(sql, params)))


def _by_ids(sql: str, ids: Sequence[int]) -> list[tuple]:
    """The rows of `sql`, whose `{}` is an IN list's placeholders, for `ids` 500 at a time (SQLite's limit of bound
    variables)."""
    out: list[tuple] = []
    ids = list(ids)
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        out += _sql(sql.format(_store.marks(len(chunk))), chunk)
    return out


def docs(ids: Sequence[int]) -> list[Doc]:
    return list(map(Doc._make, _by_ids(f"SELECT {_DOC_COLUMNS} FROM fulltext_docs WHERE memory_id IN ({{}})", ids)))


def indexed_count() -> int:
    """How many memories have an index row."""
    return int(_sql("SELECT count(*) FROM fulltext_docs")[0][0])


def docs_after(after_id: int, limit: int) -> list[Doc]:
    """The index rows of the `limit` memories after `after_id`, by id (every row, page by page)."""
    return _docs(
        f"SELECT {_DOC_COLUMNS} FROM fulltext_docs WHERE memory_id > ? ORDER BY memory_id LIMIT ?", (after_id, limit)
    )


def newest(scopes: Sequence[str] | None, k: int, *, with_meta: bool) -> list[int]:
    """The ids of the `k` newest indexed memories in `scopes` (None: all)."""
    meta = "" if with_meta else "meta = 0"
    if scopes is None:
        where = f"WHERE {meta}" if meta else ""
        return [
            r[0] for r in _sql(f"SELECT memory_id FROM fulltext_docs {where} ORDER BY memory_id DESC LIMIT ?", (k,))
        ]
    out: list[int] = []
    for scope in scopes:  # one index range per scope
        rows = _sql(
            "SELECT memory_id FROM fulltext_docs WHERE scope = ?"
            + (f" AND {meta}" if meta else "")
            + " ORDER BY memory_id DESC LIMIT ?",
            (scope, k),
        )
        out += [r[0] for r in rows]
    return sorted(out, reverse=True)[:k]


def ids_in(scopes: Sequence[str] | None, *, with_meta: bool) -> list[int]:
    """The ids of the indexed memories in `scopes` (None: all), in id order."""
    where = [] if with_meta else ["meta = 0"]
    params: list = []
    if scopes is not None:
        where.append(f"scope IN ({_store.marks(len(scopes))})")
        params = list(scopes)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    return [r[0] for r in _sql(f"SELECT memory_id FROM fulltext_docs{clause} ORDER BY memory_id", params)]


def neighbours(docs: Sequence[Doc], *, with_meta: bool) -> dict[int, tuple[int | None, int | None]]:
    """memory id -> the ids of the indexed memories written just before and after it in its neighbour group (the
    writing session, else the scope), bucket-4 ones only `with_meta`: two index seeks per memory, a statement per
    NEIGHBOUR_BATCH memories (the seeks run inside the database, not one round trip each)."""
    meta = "" if with_meta else " AND d.meta = 0"
    out: dict[int, tuple[int | None, int | None]] = {}
    for start in range(0, len(docs), NEIGHBOUR_BATCH):
        chunk = docs[start : start + NEIGHBOUR_BATCH]
        values = ", ".join(["(?, ?)"] * len(chunk))
        params = [p for doc in chunk for p in (doc.memory_id, doc.grp)]
        for memory_id, before, after in _sql(
            f"WITH c(id, grp) AS (VALUES {values}) SELECT c.id, "
            f"(SELECT max(d.memory_id) FROM fulltext_docs d WHERE d.grp = c.grp AND d.memory_id < c.id{meta}), "
            f"(SELECT min(d.memory_id) FROM fulltext_docs d WHERE d.grp = c.grp AND d.memory_id > c.id{meta}) FROM c",
            params,
        ):
            out[memory_id] = (before, after)
    return out


NEIGHBOUR_BATCH = 400


def meta_docs(scopes: Sequence[str] | None) -> list[Doc]:
    """The bucket-4 memories in `scopes` (None: all) (ranked only with the prefilter off)."""
    if scopes is None:
        return _docs(f"SELECT {_DOC_COLUMNS} FROM fulltext_docs WHERE meta = 1")
    return _docs(
        f"SELECT {_DOC_COLUMNS} FROM fulltext_docs WHERE meta = 1 AND scope IN ({_store.marks(len(scopes))})",
        list(scopes),
    )


def scope_docs(scopes: Sequence[str] | None) -> list[Doc]:
    """Every indexed memory in `scopes` (None: all)."""
    if scopes is None:
        return _docs(f"SELECT {_DOC_COLUMNS} FROM fulltext_docs")
    return _docs(f"SELECT {_DOC_COLUMNS} FROM fulltext_docs WHERE scope IN ({_store.marks(len(scopes))})", list(scopes))


def containing(terms: Sequence[str]) -> list[Doc]:
    """Every indexed memory, in any scope, that contains one of `terms` (the GIN index on PostgreSQL; SQLite: the
    postings, and the bucket-4 memories, which have none)."""
    if not terms:
        return []
    if is_postgres():
        query = " | ".join(tsquote(t) for t in terms if len(t.encode()) <= TSV_MAX_BYTES)
        if not query:
            return []
        return _docs(f"SELECT {_DOC_COLUMNS} FROM fulltext_docs WHERE tsv @@ ?::tsquery", (query,))
    ids: set[int] = set()
    for start in range(0, len(terms), 500):
        chunk = list(terms[start : start + 500])
        ids.update(
            r[0]
            for r in _sql(
                f"SELECT DISTINCT memory_id FROM fulltext_postings WHERE term IN ({_store.marks(len(chunk))})", chunk
            )
        )
    return docs(sorted(ids)) + meta_docs(None)


def pg_doc_freqs(terms: Sequence[str], *, with_meta: bool) -> dict[str, int]:
    """term -> how many indexed memories hold it (PostgreSQL: one pass over the GIN index's matches of them all),
    bucket-4 ones only `with_meta`."""
    terms = [t for t in terms if len(t.encode()) <= TSV_MAX_BYTES]
    if not terms:
        return {}
    counts = ", ".join(["count(*) FILTER (WHERE tsv @@ ?::tsquery)"] * len(terms))
    meta = "" if with_meta else " AND meta = 0"
    (row,) = _sql(
        f"SELECT {counts} FROM fulltext_docs WHERE tsv @@ ?::tsquery{meta}",
        [*map(tsquote, terms), " | ".join(map(tsquote, terms))],
    )
    return {t: int(n) for t, n in zip(terms, row) if n}


def pg_bm25_top(
    idf: dict[str, float],
    scopes: Sequence[str] | None,
    k: int,
    *,
    weight: int,
    avgdl: float,
    with_meta: bool,
    k1: float,
    b: float,
) -> list[tuple[int, float]]:
    """(memory id, BM25) of the `k` best memories of `scopes` (None: all) for the terms of `idf` (term -> its IDF at
    its weight in the query), newer first on a tie, computed inside PostgreSQL over the GIN index's matches: the
    keyword side of a team store's ranking without reading every match into Python (`k1`, `b`: BM25's)."""
    terms = [t for t in idf if len(t.encode()) <= TSV_MAX_BYTES]
    if not terms or k <= 0:
        return []
    tf = "(coalesce((j -> ? ->> 0)::int, 0) + ? * coalesce((j -> ? ->> 1)::int, 0))"
    parts, params = [], []
    for t in terms:
        parts.append(f"? * {tf} * ? / ({tf} + ? * (1 - ? + ? * dl / ?))")
        params += [idf[t], t, weight, t, k1 + 1, t, weight, t, k1, b, b, avgdl or 1.0]
    where = ["tsv @@ ?::tsquery"]
    where_params: list = [" | ".join(map(tsquote, terms))]
    if scopes is not None:
        where.append(f"scope IN ({_store.marks(len(scopes))})")
        where_params += list(scopes)
    if not with_meta:
        where.append("meta = 0")
    rows = _sql(
        f"SELECT memory_id, {' + '.join(parts)} AS s FROM (SELECT memory_id, terms::jsonb AS j, "
        f"content_len + {int(weight)} * keyword_len AS dl FROM fulltext_docs WHERE {' AND '.join(where)}) d "
        "ORDER BY s DESC, memory_id DESC LIMIT ?",
        [*params, *where_params, k],
    )
    return [(int(i), float(v)) for i, v in rows]


MEMORY_COLUMNS = ("id", "content", "keywords", "scope", "kind", "confidence", "updated_at", "source_ref", "session_id")


def memory_rows(ids: Sequence[int]) -> list[tuple]:
    """MEMORY_COLUMNS of the memories `ids` (keywords as stored: JSON; on SQLite's lean connection the datetimes
    are text), what the fallback's composite builds its candidates from."""
    return _by_ids(f"SELECT {', '.join(MEMORY_COLUMNS)} FROM memories WHERE id IN ({{}})", ids)


def tsquote(term: str) -> str:
    """A lexeme as a tsvector / tsquery literal takes it: quoted, taken as is (no parser, no dictionary)."""
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"
