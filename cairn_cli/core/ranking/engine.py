"""What ranking keeps warm, and the only part of the rank path that reads the memory store.

A `RankEngine` holds the embedding encoder (None in the lexical fallback), the cross-encoder (None: no rerank
stage) and a cache of scoring tables keyed by the store's version, refreshed in place by the rows that changed.
The daemon keeps one engine for its lifetime and ranks many requests at once through per-request views of it
(`view`: the same tables, the request's own queued encoder and reranker); an in-process call builds one for
itself. Memories that arrived without a usable embedding are embedded here and the embedding stored. The lexical
fallback loads no table: it reads the store's full-text index (core/ranking/fallback.py).

Threads: a table is read by any number of rankings at once (`reading`: a shared hold for the composite's few
milliseconds) and refreshed by one thread at a time; the others meanwhile rank with the table as it is. The rows
are read and new memories embedded first; only applying them holds the table alone (the refresh waits for the
readers in its way, and new readers wait for it: it applies a few rows).
"""

from __future__ import annotations

import _thread  # threading's lock without threading's import (the fallback's hot path ranks through this module)
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from cairn_cli import config
from cairn_cli.config import Settings
from cairn_cli.core.ids import GLOBAL_SCOPE
from cairn_cli.core.ranking.lexical import Candidate, ScoreTable, candidate_of

if TYPE_CHECKING:
    from cairn_cli.core.ranking.scoring import ScoringTable


class Reranker(Protocol):
    name: str
    floor: float

    def logits(self, query: str, texts: list[str], *, prompt: str | None = None) -> list[float]: ...

    def score_from_logits(self, raw: list[float]) -> list[float]: ...


class RerankSkipped(Exception):
    """A reranker that could not score this request in time (the daemon's cross-encoder queue under load): the
    ranking goes on with the composite's order and its notes and provenance say why."""


class SharedLock:
    """Many readers or one writer; a waiting writer holds back new readers (a refresh is never starved by a stream
    of prompts, and it only waits for the few milliseconds of the readers already in)."""

    def __init__(self) -> None:
        import threading

        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


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
    lock: SharedLock = field(default_factory=SharedLock)  # readers share it, a refresh in place holds it alone

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
        self._refreshing = _thread.allocate_lock()  # one thread builds or refreshes a table at a time
        self.store_encoder = None  # what a refresh embeds the store's new memories with (None: `encoder`)
        self.profile_as = None  # the gate's: a scope's shipped profile -> the one to rank with (None: as served)
        # the gate's: never write to the store (memories without a vector of this encoder are embedded in memory
        # only: a table of the whole store under a candidate embedder)
        self.scratch = False
        self.calibration = None  # its embedder's cosines -> the base's scale (None: embedders.calibration of it)
        # the daemon's: a store with more live memories than this ranks from indexes (core/ranking/candidates.py),
        # not a table of the whole store (None: always the table)
        self.vector_index_above: int | None = None
        self._vectors: dict[tuple, _Vectors] = {}

    def view(self, *, encoder, reranker: Reranker | None, store_encoder=None, profile_as=None) -> RankEngine:
        """This engine's warm tables with other models: the daemon's per-request engine (its queued encoder, the
        reranker the request started with, and `store_encoder`, which embeds memories for the table without the
        request's deadline: that work is the store's, not the prompt's). The encoders must be the same model (the
        tables are keyed by its name). `profile_as` (the gate's): a scope's shipped profile -> the one to rank with
        (None: as served, core/ranking/learned.py)."""
        other = RankEngine(
            encoder, reranker, ranker=self.ranker, notes=self.notes, warnings=self.warnings, indexed=self.indexed
        )
        other._tables, other._refreshing, other.store_encoder = self._tables, self._refreshing, store_encoder
        other.profile_as, other.scratch, other.calibration = profile_as, self.scratch, self.calibration
        other.vector_index_above, other._vectors = self.vector_index_above, self._vectors
        return other

    @classmethod
    def in_process(cls, settings: Settings, *, with_reranker: bool = True) -> RankEngine:
        """Load the configured models in this process (slow: for the daemon, tests and CAIRN_DAEMON=off)."""
        from cairn_cli.core.ranking.reranking import load_reranker
        from cairn_cli.core.store.embedders import live_encoder

        reranker, warnings = load_reranker(settings) if with_reranker else (None, [])
        return cls(live_encoder(settings), reranker, warnings=warnings)

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
        disappeared or half its slots are dead); the fallback's reads the full-text index instead. Read its
        table through `reading` where another thread may refresh it."""
        if self.indexed:
            from cairn_cli.core.ranking.fallback import IndexedEntry

            return IndexedEntry(settings, self.notes)
        if self.vector_index_above is not None and self.encoder is not None:
            big = self._indexed_entry(settings)
            if big is not None:
                return big
        return self._warm_table(settings)

    def search_path(self, settings: Settings) -> dict:
        """How this engine finds a store's candidates (what `cairn daemon status` shows)."""
        if self.indexed or self.encoder is None:
            return {"path": "full-text index (no embedder)"}
        held = self._vectors.get(_vectors_key(settings, self.embed_model))
        postings: dict[str, Any] = (
            {} if held is None or held.keywords is None else {"postings_held": len(held.keywords)}
        )
        if held is not None and held.counters:
            postings["rankings"] = dict(held.counters)
        if held is not None and held.pg is not None:
            return {"path": "pgvector HNSW in PostgreSQL + full-text index", "above": None, **postings}
        if held is not None and held.big and held.index is not None:
            return {
                "path": "vector index (usearch HNSW) + full-text index",
                "vectors": len(held.index),
                **postings,
                "above": self.vector_index_above,
                "directory": str(held.index.directory),
            }
        out = {"path": "exact scan of the whole store in memory", "above": self.vector_index_above}
        if held is not None and held.pg_note:
            out["pgvector"] = held.pg_note  # why the vector search is not PostgreSQL's
        return out

    def _indexed_entry(self, settings: Settings):
        """A big store's entry (core/ranking/candidates.py) with its vector index caught up, or None while the store
        has no more than `vector_index_above` live memories (its table is then the whole store, in memory)."""
        from cairn_cli.core.ranking.candidates import CandidateEntry
        from cairn_cli.db import fulltext as sql

        key = _vectors_key(settings, self.embed_model)
        held = self._vectors.get(key)
        if held is None:
            from cairn_cli.core.store.vector_index import pgvector_source

            with self._refreshing:  # the first ranking of this store: the others wait for the answer
                held = self._vectors.get(key)
                if held is None:
                    held = _Vectors()
                    held.pg, held.pg_note = pgvector_source(self.embed_model or "", self.encoder.dim)
                    self._vectors[key] = held
        cal = self.calibration
        if cal is None:
            from cairn_cli.core.store.embedders import calibration

            cal = calibration(self.embed_model)
        version = store_version(settings)
        if held.pg is not None:  # a team store searched in PostgreSQL: no vector of it held here
            if held.version != version and self._refreshing.acquire(blocking=False):
                try:  # memories written without a vector (no embedder answered): embedded here, as a table does
                    self._embed_missing(settings)
                    self._catch_up_keywords(held, version, None)
                    held.version = version
                finally:
                    self._refreshing.release()
            return _checked(
                CandidateEntry(settings, [], held.pg, held.lock, cal, held.kinds, held.keywords, held.counters), held
            )
        if held.size_version != version[1]:
            live = sum(r.n + r.n_meta for r in sql.scope_stats())
            threshold = self.vector_index_above or 0
            # once big, a store stays so until it has shrunk to half the threshold (no flapping at the edge)
            held.big = live > threshold or (held.big and live > threshold // 2)
            held.size_version = version[1]
        if not held.big:
            if held.index is not None:  # shrunk: the index is let go, the whole table ranks again
                held.index, held.keywords, held.version = None, None, None
            return None
        if held.index is not None and held.index.stale():  # a forget dropped the saved index: built again
            held.index, held.keywords, held.version = None, None, None
            held.kinds.clear()
        if held.index is None or held.version != version:
            blocking = held.index is None  # the first time: every ranking needs it, all wait for it
            if self._refreshing.acquire(blocking=blocking):
                try:
                    self._catch_up(settings, held, version)
                finally:
                    self._refreshing.release()
        return _checked(
            CandidateEntry(settings, [], held.index, held.lock, cal, held.kinds, held.keywords, held.counters), held
        )

    def _embed_missing(self, settings: Settings, batch: int = 256) -> None:
        """Embed (and store) the live memories without a vector of this embedder, `batch` at a time: only when it is
        the embedder the store's vectors are made with (a swap's re-embedding is embedders.py's)."""
        from cairn_cli.core.ranking.lexical import Candidate
        from cairn_cli.core.store.embedders import store_model
        from cairn_cli.db.tables import Memory

        if self.scratch or (self.store_encoder or self.encoder).name != store_model(settings):
            return

        rows = (
            Memory.select(Memory.id, Memory.content, Memory.keywords, Memory.scope, Memory.updated_at)
            .where(
                Memory.superseded_by.is_null()
                & (Memory.embedding.is_null() | (Memory.embedding_model != self.embed_model))
            )
            .limit(batch)
        )
        cands = [Candidate(m.id, m.content, list(m.keywords or []), m.scope, "", 0.0, m.updated_at) for m in rows]
        self._embed_and_store(cands, settings)

    def _catch_up(self, settings: Settings, held: _Vectors, version: tuple) -> None:
        """Open the saved index (or start one) and apply the memories changed since it was saved: embedded first (a
        model call for those written without a vector), applied holding the readers back."""
        import datetime as dt

        from cairn_cli.core.store import vector_index

        if held.index is None:
            directory = vector_index.index_dir(config.home_dir(), version[0], self.embed_model or "")
            held.index = vector_index.VectorIndex.open(self.embed_model or "", self.encoder.dim, directory)
        index = held.index
        since = dt.datetime.fromisoformat(index.since) if index.since else None
        worth_saving = False
        for batch in _vector_rows(self.embed_model, since, index.max_id):
            rows = self._embedded_vectors(batch, settings)
            with held.lock.exclusive():
                worth_saving = index.apply(rows, threads=0 if since is None else 1) or worth_saving
        self._catch_up_keywords(held, version, index.directory)
        held.version = version
        if worth_saving or since is None:
            index.save()

    def _catch_up_keywords(self, held: _Vectors, version: tuple, directory) -> None:
        """Bring the postings held in memory up to `version` (core/store/keyword_index.py): opened from their save
        in `directory` (beside the vector index; None: a team store's, never saved here, since another instance
        changes and forgets its memories), or built from the full-text index page by page, then the memories
        changed since applied; readers see them only once whole. The full-text index is brought up to date first.
        On PostgreSQL the changes are read from TEAM_WINDOW_S before the last one applied: another instance's
        transaction may commit a little after a later one."""
        import datetime as dt

        from cairn_cli.core.store import search_index
        from cairn_cli.core.store.keyword_index import KeywordIndex
        from cairn_cli.db import fulltext as sql

        if search_index.sync_if_behind() is not None:
            return  # the full-text index cannot be written here: its rows are not the store's (SQLite's path reads)
        keywords = held.keywords
        if keywords is None:  # opened from its save, unless that save was found to hold a memory that left
            reopen = directory is not None and not held.keywords_outdated
            keywords = KeywordIndex.open(directory) if reopen else KeywordIndex(directory)
        worth_saving = keywords.since is None
        if keywords.since is None:  # built from every row of the index, at the store's version read before them
            after = 0
            while page := sql.docs_after(after, 20_000):
                keywords.apply([d.memory_id for d in page], page, bulk=True)
                after = page[-1].memory_id
            keywords.since = version[2] if version[2] != "None" else str(dt.datetime.min)
            keywords.max_id = max(keywords.max_id, version[1])
        else:
            since = dt.datetime.fromisoformat(keywords.since)
            if sql.is_postgres():
                since -= dt.timedelta(seconds=TEAM_WINDOW_S)
            for batch in _changed_ids(since, keywords.max_id):
                ids = [i for i, _ in batch]
                with held.lock.exclusive():
                    worth_saving = keywords.apply(ids, sql.docs(ids), since=max(u for _, u in batch)) or worth_saving
        keywords.settle(held.lock.exclusive)
        held.keywords, held.keywords_outdated = keywords, False
        if worth_saving and directory is not None:
            keywords.merge(held.lock.exclusive)
            keywords.save()

    @contextmanager
    def reading(self, entry: RankEntry) -> Iterator[RankEntry]:
        """Hold `entry` (from `table`) unchanged for the block: no refresh applies rows to it meanwhile."""
        lock = getattr(entry, "lock", None)
        if lock is None:  # the fallback's entry: nothing warm, nothing refreshed in place
            yield entry
            return
        with lock.shared():
            yield entry

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
        if entry is None:
            self._refreshing.acquire()  # the first of this store: every ranking needs it, all wait for it
        elif not self._refreshing.acquire(blocking=False):
            return entry  # another thread is refreshing it: rank with the table as it is, a few rows behind
        try:
            entry = self._tables.get(key)  # another thread may have brought it up to date meanwhile
            if entry is not None and entry.version == version:
                return entry
            if entry is None or version[1] < entry.version[1] or entry.table.dead_fraction > 0.5:
                entry = self._build(settings, version)  # a new entry: nobody reads it before it is in the cache
                entry.scopes = _scopes(entry)
                self._tables[key] = entry
                return entry
            changed = _load_rows(settings, self.embed_model, changed_since=entry.since, after_id=entry.version[1])
            rows = self._embedded(list(changed), settings)  # before the readers are held back: a model call
            with entry.lock.exclusive():
                self._apply(entry, rows, settings)
                entry.table.arrays()  # stacked here: readers never build them (two at once would stack rows twice)
                entry.version = version
                entry.scopes = _scopes(entry)
            return entry
        finally:
            self._refreshing.release()

    def _build(self, settings: Settings, version: tuple) -> _Table:
        from cairn_cli.core.ranking.scoring import ScoringTable

        dim = self.encoder.dim if self.encoder else None
        cal = self.calibration
        if cal is None and self.encoder is not None:
            from cairn_cli.core.store.embedders import calibration

            cal = calibration(self.embed_model)
        entry = _Table(version, ScoringTable([], settings.KEYWORD_FIELD_WEIGHT, dim=dim, calibration=cal), None)
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
            vec = blob if blob is None or isinstance(blob, np.ndarray) else np.frombuffer(blob, dtype=np.float32)
            entry.table.upsert(cand, vec)
        for cand, vec in zip(unembedded, self._embed_and_store(unembedded, settings)):
            cand.has_embedding = True
            entry.table.upsert(cand, vec)

    def _embedded(self, rows: list, settings: Settings) -> list:
        """`rows` (of _load_rows) with the live memories that lack a usable embedding embedded (and it stored), so
        that applying them to a table is quick."""
        from cairn_cli.core.prefilter import is_self_referential_meta

        if self.encoder is None:
            return rows
        missing = [
            i
            for i, (cand, blob, superseded, _) in enumerate(rows)
            if blob is None
            and not superseded
            and not (settings.RELEVANCE_PREFILTER_ENABLED and is_self_referential_meta(cand.content, cand.kind))
        ]
        for i, vec in zip(missing, self._embed_and_store([rows[i][0] for i in missing], settings)):
            cand, _, superseded, updated = rows[i]
            cand.has_embedding = True
            rows[i] = (cand, vec, superseded, updated)
        return rows

    def _embed_and_store(self, cands: list[Candidate], settings: Settings):
        """Embed memories that have no usable embedding and store it (updated_at untouched: not a new version) when
        this engine's embedder is the one the store's vectors are made with: a scratch engine (the gate's candidate)
        or one still warm with the embedder a swap just replaced keeps them in memory only, never writing another
        model's vectors over the store's."""
        from cairn_cli.core.store.embedders import store_model
        from cairn_cli.core.store.embeddings import embedding_text, store_embeddings

        if not cands:
            return []
        encoder = self.store_encoder or self.encoder
        vecs = encoder.encode([embedding_text(c.content, c.keywords) for c in cands])
        if not self.scratch and encoder.name == store_model(settings):
            store_embeddings([c.id for c in cands], vecs, encoder.name)
        return vecs

    def _embedded_vectors(self, batch: list, settings: Settings) -> list:
        """`batch` (of _vector_rows) as the vector index applies it: (id, scope, unit vector or None, updated_at),
        the live memories without a vector of this embedder embedded (and it stored)."""
        import numpy as np

        from cairn_cli.core.ranking.lexical import Candidate

        missing = [r for r in batch if r[2] is None and not r[3]]
        cands = [Candidate(r[0], r[5], list(r[6] or []), r[1], "", 0.0, r[4]) for r in missing]
        made = dict(zip([r[0] for r in missing], self._embed_and_store(cands, settings)))
        out = []
        for memory_id, scope, blob, superseded, updated, _, _ in batch:
            vec = None
            if not superseded:
                vec = made.get(memory_id) if blob is None else np.frombuffer(blob, dtype=np.float32)
            out.append((memory_id, scope, vec, updated))
        return out

    def embed(self, texts: list[str]):
        return self.encoder.encode(texts)


@dataclass
class _Vectors:
    """A big store's vector index as the engine keeps it: is the store big, at which max id that was read, the index
    and the store version it has applied, the lock its refresh takes alone, and the kinds read of its scopes."""

    big: bool = False
    size_version: int = -1
    index: Any = None
    keywords: Any = None  # the full-text index's postings in memory (core/store/keyword_index.py), once built
    keywords_outdated: bool = False  # they held a memory that left: built again from the store, not their save
    version: tuple | None = None
    lock: SharedLock = field(default_factory=SharedLock)
    kinds: dict = field(default_factory=dict)
    counters: dict = field(default_factory=dict)  # its rankings, and those stopped short of the bound (candidates.py)
    pg: Any = None  # the vectors searched in PostgreSQL (core/store/vector_index.py PgVectors), when pgvector is there
    pg_note: str = ""  # why not, or "pgvector"


TEAM_WINDOW_S = 60  # a team store's changes are read again from this long before the last one applied


def _vectors_key(settings: Settings, embed_model: str | None) -> tuple:
    return config.memory_db_url(settings.DB_URL), embed_model


def _vector_rows(embed_model: str | None, since, after_id: int, batch: int = 10_000):
    """The memories changed since a point (every live one when `since` is None), in batches of (id, scope, stored
    vector of `embed_model` or None, superseded?, updated_at, content, keywords) tuples."""
    from cairn_cli.db.tables import Memory

    query = Memory.select(
        Memory.id,
        Memory.scope,
        Memory.embedding,
        Memory.embedding_model,
        Memory.superseded_by,
        Memory.updated_at,
        Memory.content,
        Memory.keywords,
    )
    if since is None:
        query = query.where(Memory.superseded_by.is_null())
    else:
        query = query.where((Memory.updated_at >= since) | (Memory.id > after_id))
    rows = []
    row: Any
    for row in query.order_by(Memory.id).tuples():
        memory_id, scope, blob, model, superseded, updated, content, keywords = row
        usable = blob is not None and model == embed_model
        rows.append((memory_id, scope, blob if usable else None, superseded is not None, updated, content, keywords))
        if len(rows) >= batch:
            yield rows
            rows = []
    if rows:
        yield rows


def _checked(entry, held: _Vectors):
    """`entry` reading the held postings only when they hold no memory the full-text index no longer has (one was
    forgotten, on a team store by another instance): else they are let go, built again at the next catch-up, and
    this ranking reads the store's own index."""
    from cairn_cli.db import fulltext as sql

    keywords = entry.keywords
    if keywords is None:
        return entry
    # on PostgreSQL the statistics are the postings' own (candidates.py): the index's rows are counted instead
    live = sql.indexed_count() if sql.is_postgres() else sum(r.n + r.n_meta for r in entry.lexical.scope_rows)
    if len(keywords) > live:
        held.keywords = entry.keywords = None
        held.version, held.keywords_outdated = None, True
    return entry


def _changed_ids(since, after_id: int, batch: int = 10_000):
    """(id, updated_at text) of the memories updated since `since` or written after `after_id`, in batches."""
    from cairn_cli.db.tables import Memory

    query = Memory.select(Memory.id, Memory.updated_at).where((Memory.updated_at >= since) | (Memory.id > after_id))
    found: Any = query.order_by(Memory.id).tuples()
    rows = [(row[0], str(row[1])) for row in found]
    for start in range(0, len(rows), batch):
        yield rows[start : start + batch]


def _scopes(entry: _Table) -> list[str]:
    return sorted(entry.table.live_scopes() | set(entry.meta_scopes.values()) | {GLOBAL_SCOPE})


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
