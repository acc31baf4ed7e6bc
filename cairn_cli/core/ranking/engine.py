"""What ranking keeps warm, and the only part of the rank path that reads the memory store.

A `RankEngine` holds the embedding encoder (None in the lexical fallback), the cross-encoder (None: no rerank
stage) and a cache of scoring tables keyed by the store's version, refreshed in place by the rows that changed.
The daemon keeps one engine for its lifetime; an in-process call builds one for itself. Memories that arrived
without a usable embedding are embedded here and the embedding stored. The lexical fallback loads no table: it
reads the store's full-text index (core/ranking/fallback.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from cairn_cli import config
from cairn_cli.config import Settings
from cairn_cli.core.ranking.lexical import GLOBAL_SCOPE, Candidate, ScoreTable, candidate_of

if TYPE_CHECKING:
    from cairn_cli.core.ranking.scoring import ScoringTable


class Reranker(Protocol):
    name: str
    floor: float

    def logits(self, query: str, texts: list[str], *, prompt: str | None = None) -> list[float]: ...

    def score_from_logits(self, raw: list[float]) -> list[float]: ...


def store_version(settings: Settings) -> tuple:
    """(url, max id, max updated_at): changes whenever a memory is added, merged, superseded or re-scored.
    Two index lookups (no COUNT: cairn never deletes a memory, it supersedes it)."""
    from peewee import fn

    from cairn_cli.db.tables import Memory

    # two queries: SQLite answers a lone MAX() from the index, two MAX()es in one SELECT scan the table
    max_id = Memory.select(fn.MAX(Memory.id)).scalar() or 0
    max_updated = Memory.select(fn.MAX(Memory.updated_at)).scalar()
    return config.memory_db_url(settings.DB_URL), max_id, str(max_updated)


@dataclass
class _Table:
    """The warm scoring table of one store and what is needed to refresh it by the rows that changed."""

    version: tuple
    table: ScoringTable
    since: object  # the newest updated_at already applied
    meta_scopes: dict = field(default_factory=dict)  # prefiltered memory id -> its scope
    scopes: list = field(default_factory=list)

    def prefiltered(self, scope: str | None) -> int:
        if not scope:
            return len(self.meta_scopes)
        return sum(1 for s in self.meta_scopes.values() if s in (scope, GLOBAL_SCOPE))

    def in_scope_count(self, scope: str | None) -> int:
        return int(self.table.in_scope(scope).sum()) if len(self.table) else 0


class RankEntry(Protocol):
    """What a ranking reads of a store: its table, its known scopes, how many memories are in scope and how many
    the prefilter dropped (the daemon's _Table; the fallback's IndexedEntry)."""

    @property
    def table(self) -> ScoreTable: ...

    @property
    def scopes(self) -> list[str]: ...

    def prefiltered(self, scope: str | None) -> int: ...

    def in_scope_count(self, scope: str | None) -> int: ...


class RankEngine:
    def __init__(
        self,
        encoder=None,
        reranker: Reranker | None = None,
        *,
        ranker: str = "cairn",
        notes: list[str] | None = None,
        warnings: list[str] | None = None,
        indexed: bool = False,
    ):
        self.encoder = encoder
        self.reranker = reranker
        self.ranker = ranker
        self.indexed = indexed  # rank from the store's full-text index (the fallback), no table kept
        self.notes = list(notes or [])  # about how every ranking of this engine is made (the fallback's reason)
        self.warnings = list(warnings or [])  # about the models (one missing, one that failed to load)
        self._tables: dict[tuple, _Table] = {}

    @classmethod
    def in_process(cls, settings: Settings, *, with_reranker: bool = True) -> RankEngine:
        """Load the configured models in this process (slow: for the daemon, tests and CAIRN_DAEMON=off)."""
        from cairn_cli.core.ranking.reranking import load_reranker
        from cairn_cli.ml.models import get_encoder

        reranker, warnings = load_reranker(settings) if with_reranker else (None, [])
        return cls(get_encoder(settings.EMBED_MODEL, settings.EMBED_DTYPE), reranker, warnings=warnings)

    @classmethod
    def lexical_fallback(cls, reason: str) -> RankEngine:
        """No model at all: keywords and scope over every live memory, read from the store's full-text index (a
        hook must answer fast even with a huge store and no daemon). Its provenance says so."""
        return cls(None, None, ranker="cairn-fallback", notes=[f"fallback: {reason}"], indexed=True)

    @property
    def embed_model(self) -> str | None:
        return self.encoder.name if self.encoder else None

    def table(self, settings: Settings) -> RankEntry:
        """The store's table, refreshed in place by the rows changed since it was built (rebuilt when rows
        disappeared or half its slots are dead); the fallback's reads the full-text index instead."""
        if self.indexed:
            from cairn_cli.core.ranking.fallback import IndexedEntry

            return IndexedEntry(settings, self.notes)
        return self._warm_table(settings)

    def _warm_table(self, settings: Settings) -> _Table:
        version = store_version(settings)
        key = (
            version[0],
            settings.RELEVANCE_PREFILTER_ENABLED,
            settings.KEYWORD_FIELD_WEIGHT,
            self.embed_model,
        )
        entry = self._tables.get(key)
        if entry is not None and entry.version == version:
            return entry
        if entry is None or version[1] < entry.version[1] or entry.table.dead_fraction > 0.5:
            entry = self._build(settings, version)
        else:
            self._apply(
                entry,
                _load_rows(settings, self.embed_model, changed_since=entry.since, after_id=entry.version[1]),
                settings,
            )
            entry.version = version
        entry.scopes = sorted(entry.table.live_scopes() | set(entry.meta_scopes.values()) | {GLOBAL_SCOPE})
        self._tables[key] = entry
        return entry

    def _build(self, settings: Settings, version: tuple) -> _Table:
        from cairn_cli.core.ranking.scoring import ScoringTable

        dim = self.encoder.dim if self.encoder else None
        entry = _Table(version, ScoringTable([], settings.KEYWORD_FIELD_WEIGHT, dim=dim), None)
        self._apply(entry, _load_rows(settings, self.embed_model), settings)
        entry.table.index.freeze()
        entry.table.arrays()  # stack the embedding matrix now, not on the first prompt
        return entry

    def _apply(self, entry: _Table, rows, settings: Settings) -> None:
        import numpy as np

        from cairn_cli.core.prefilter import is_self_referential_meta

        unembedded: list[Candidate] = []
        for cand, blob, superseded, updated in rows:
            entry.since = updated if entry.since is None or updated > entry.since else entry.since
            entry.table.remove(cand.id)
            entry.meta_scopes.pop(cand.id, None)
            if superseded:
                continue
            if settings.RELEVANCE_PREFILTER_ENABLED and is_self_referential_meta(cand.content, cand.kind):
                entry.meta_scopes[cand.id] = cand.scope
                continue
            if blob is None and self.encoder is not None:
                unembedded.append(cand)  # e.g. written by a Stop hook while no embedder answered
                continue
            entry.table.upsert(cand, np.frombuffer(blob, dtype=np.float32) if blob is not None else None)
        for cand, vec in zip(unembedded, self._embed_and_store(unembedded)):
            cand.has_embedding = True
            entry.table.upsert(cand, vec)

    def _embed_and_store(self, cands: list[Candidate]):
        """Embed memories that have no usable embedding and store it (updated_at untouched: not a new version)."""
        from cairn_cli.core.store.memories import embedding_text, store_embeddings

        if not cands:
            return []
        vecs = self.encoder.encode([embedding_text(c.content, c.keywords) for c in cands])
        store_embeddings([c.id for c in cands], vecs, self.encoder.name)
        return vecs

    def embed(self, texts: list[str]):
        return self.encoder.encode(texts)


def _load_rows(settings: Settings, embed_model: str | None, *, changed_since=None, after_id: int = 0):
    """(Candidate, embedding blob or None, superseded?, updated_at) per memory: all live ones, or the rows
    changed since a point (superseded ones included, so that they leave the table)."""
    from cairn_cli.db.tables import Memory

    fields = [
        Memory.id,
        Memory.content,
        Memory.keywords,
        Memory.scope,
        Memory.kind,
        Memory.confidence,
        Memory.updated_at,
        Memory.source_ref,
        Memory.embedding_model,
        Memory.superseded_by,
        Memory.session_id,
    ]
    if embed_model:
        fields.append(Memory.embedding)
    query = Memory.select(*fields)
    if changed_since is not None:
        query = query.where((Memory.updated_at >= changed_since) | (Memory.id > after_id))
    else:
        query = query.where(Memory.superseded_by.is_null())
    query = query.order_by(Memory.id)
    for m in query:
        usable = bool(embed_model) and m.embedding is not None and m.embedding_model == embed_model
        yield (
            candidate_of(m, has_embedding=usable),
            m.embedding if usable else None,
            m.superseded_by is not None,
            m.updated_at,
        )
