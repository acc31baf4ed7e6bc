"""The memory store's full-text index: cairn's own terms of every live memory (what the rank engine scores), kept
in step with every write by triggers that queue a changed memory and `sync`, which indexes the queue (docs/store.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from cairn_cli.core.text import terms

# The keyword weight the SQLite postings are counted at (a literal in migration 0005's triggers): the fallback's
# fast path serves the default KEYWORD_FIELD_WEIGHT; any other weight is scored from the rows themselves.
FULLTEXT_KEYWORD_WEIGHT = 2


def index_row(
    memory_id: int, content: str, keywords: Sequence[str], kind: str, scope: str, session_id: str | None = None
) -> tuple:
    """(memory_id, scope, meta, content_len, keyword_len, terms JSON, neighbour group): a memory as the index stores
    it. The group is the ranking profile's (scoring.py): the writing session, else the scope."""
    from cairn_cli.core.prefilter import is_self_referential_meta  # its patterns compile on a write, not a read

    content_terms = terms(content)
    keyword_terms = [t for kw in keywords for t in terms(kw)]
    counts: dict[str, list[int]] = {}
    for t in content_terms:
        counts.setdefault(t, [0, 0])[0] += 1
    for t in keyword_terms:
        counts.setdefault(t, [0, 0])[1] += 1
    meta = int(is_self_referential_meta(content, kind))
    group = f"session:{session_id}" if session_id else f"scope:{scope}"
    return memory_id, scope, meta, len(content_terms), len(keyword_terms), orjson.dumps(counts).decode(), group


def rows_of(memories: Sequence[tuple]) -> list[tuple]:
    """Index rows of (id, content, keywords JSON or list, kind, scope, session id) tuples."""
    out = []
    for memory_id, content, keywords, kind, scope, session_id in memories:
        kws = orjson.loads(keywords) if isinstance(keywords, str | bytes) else keywords
        out.append(index_row(memory_id, content, kws or [], kind, scope, session_id))
    return out


def tsvector(terms_json: str) -> str:
    """A tsvector literal of the row's terms, each with one position per occurrence (PostgreSQL's GIN index; a term
    PostgreSQL cannot index, over 2,046 bytes, is left out of it, never failing the write)."""
    from cairn_cli.db.fulltext import TSV_MAX_BYTES, tsquote

    counts = orjson.loads(terms_json)
    parts, position = [], 1
    for term, (in_content, in_keywords) in counts.items():
        if len(term.encode()) > TSV_MAX_BYTES:
            continue
        n = min(in_content + FULLTEXT_KEYWORD_WEIGHT * in_keywords, 255)
        parts.append(f"{tsquote(term)}:{','.join(str(min(p, 16383)) for p in range(position, position + n))}")
        position += n
    return " ".join(parts)


def sync(batch: int = 2000) -> int:
    """Index the queued memories (their rows replaced, a superseded one's dropped), in the caller's transaction if
    there is one, else a transaction per batch: a first open that indexes a large store (~0.4 ms a memory) and is
    interrupted keeps what it did. Returns how many were queued."""
    from cairn_cli import db
    from cairn_cli.db import fulltext as sql

    done = 0
    while True:
        with db.transaction("memory"):
            ids = sql.pending(batch)
            if not ids:
                return done
            rows = rows_of(sql.live_memories(ids))
            sql.replace(ids, rows, [tsvector(r[5]) for r in rows] if sql.is_postgres() else None)
            done += len(ids)


def is_behind() -> bool:
    """True when some memory's index row is out of date (a write this process could not index)."""
    from cairn_cli.db import fulltext as sql

    return bool(sql.pending(1))


def sync_if_behind() -> str | None:
    """Index the queued memories if there are any; what failed (a read-only store) or None."""
    from cairn_cli import db

    try:
        if is_behind():
            sync()
    except db.errors() as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
