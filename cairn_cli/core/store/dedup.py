"""Adding memories with dedup: an entry that repeats a live memory (the same text, the same normalised text, or, by
its embedding, the same statement) merges into it instead of being added (docs/store.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from cairn_cli.config import Settings
from cairn_cli.core.ids import GLOBAL_SCOPE
from cairn_cli.core.store import search_index
from cairn_cli.core.store.embedders import local_embedder
from cairn_cli.core.store.embeddings import Embedder, embed_texts, embedding_text, store_embeddings
from cairn_cli.core.store.evidence import add_evidence, confidence_of
from cairn_cli.core.store.memories import MemoryInput
from cairn_cli.core.store.merges import fold, record_writes
from cairn_cli.core.store.semantic_index import SemanticIndexes
from cairn_cli.core.text import normalise, sha256


@dataclass
class AddResult:
    id: int
    action: str  # "added" | "merged"
    keywords_added: list[str] = field(default_factory=list)
    method: str | None = None  # a merge's: exact | normalised | semantic
    similarity: float | None = None  # a semantic merge's cosine


@dataclass
class Embedded:
    """A batch's entries with their hashes and the texts they need embedded (the exact repeats of stored memories
    need none), then the vectors: planned by reading the store, embedded by a call that touches no database (an
    import embeds the next batch while it writes this one)."""

    entries: list[MemoryInput]
    hashes: list[tuple[str, str]]
    todo: list[str]
    model: str | None = None
    vectors: dict[str, object] = field(default_factory=dict)

    def embed(self, embedder: Embedder) -> Embedded:
        self.model, self.vectors = embed_texts(list(dict.fromkeys(self.todo)), embedder)
        return self


def plan(entries: list[MemoryInput]) -> Embedded:
    """What a batch needs embedded: the entries that repeat no live memory (a few queries)."""
    hashes = [(sha256(e.content), sha256(normalise(e.content))) for e in entries]
    repeats = stored_repeats(entries, hashes)
    todo = [embedding_text(e.content, e.keywords) for e, repeat in zip(entries, repeats) if not repeat]
    return Embedded(entries, hashes, todo)


def add_memories(
    entries: list[MemoryInput],
    settings: Settings,
    *,
    progress: Callable[[int], None] | None = None,
    embed: Embedder | None = None,
    notes: list[str] | None = None,
    indexes: SemanticIndexes | None = None,
    embedded: Embedded | None = None,
) -> list[AddResult]:
    """Add or merge each entry, all in one transaction. The entries that are not exact duplicates are embedded
    first, in one batch, by `embed` (default: the configured model in this process); when it answers None the
    memories are stored without an embedding (the daemon embeds them when it next refreshes its table), semantic
    dedup is skipped and a note saying so is appended to `notes`.

    Exact dedup is per scope: an entry merges into a live memory with the same (or the same normalised) text in its
    own scope or in `global` (which every scope sees); a global entry merges only into a global memory. Semantic
    dedup (docs/store.md) only ever merges within the entry's own scope, and counts as a corroboration.
    A merge unions the keywords and records what was written in `memory_merges`. `indexes`: the semantic indexes
    an import keeps across its batches (default: this call's own); `embedded`: the batch planned and embedded
    already (`plan(entries).embed(...)`), else done here."""
    from cairn_cli.db.tables import Memory, memory_proxy

    results: list[AddResult] = []
    fresh: list[tuple[int, object]] = []
    # embedded before the transaction (a model call takes seconds; a SQLite read snapshot held that long could not
    # become a write if another process wrote meanwhile); exact repeats of stored memories need no vector
    if embedded is None:
        embedded = plan(entries).embed(embed or local_embedder(settings))
    hashes, todo, model, vectors = embedded.hashes, embedded.todo, embedded.model, embedded.vectors
    if indexes is None:
        indexes = SemanticIndexes(settings.DEDUP_SEMANTIC_MIN)
    index = indexes.of(model) if model is not None else None
    if todo and notes is not None:
        if model is None:
            notes.append("semantic dedup skipped: no embedding model answered (exact duplicates only)")
        elif not index:
            notes.append(f"semantic dedup off (CAIRN_DEDUP_SEMANTIC_MIN={settings.DEDUP_SEMANTIC_MIN:g})")
    with memory_proxy.atomic():
        # the live memories the entries may repeat, read in a few queries (not one per entry: a per-entry lookup
        # that scanned the table made an import quadratic); the memories this call adds join them as it goes
        known = _live_by_hash(hashes)
        writes: list[tuple[int, MemoryInput, str, float | None]] = []
        touched: dict[int, Any] = {}  # merged into (Memory rows): saved once, at the end
        batch_vectors = [vectors.get(embedding_text(e.content, e.keywords)) for e in entries]
        if index:
            index.prepare(entries, batch_vectors)
        for position, (entry, (h, nh), vec) in enumerate(zip(entries, hashes, batch_vectors)):
            existing = _repeated(known, entry, h, nh)
            match = index.nearest(entry, vec, position) if existing is None and index and vec is not None else None
            if existing is not None:
                method = "exact" if existing.content_hash == h else "normalised"
                existing = touched.setdefault(existing.id, existing)
                writes.append((existing.id, entry, method, None))
                results.append(AddResult(existing.id, "merged", fold(existing, entry), method))
            elif match is not None:
                existing, cos = match
                existing = touched.setdefault(existing.id, existing)
                writes.append((existing.id, entry, "semantic", cos))
                add_evidence(existing.id, corroborate=True, settings=settings)
                results.append(AddResult(existing.id, "merged", fold(existing, entry), "semantic", cos))
            else:
                mem = Memory.create(
                    content=entry.content,
                    content_hash=h,
                    norm_hash=nh,
                    keywords=entry.keywords,
                    scope=entry.scope,
                    kind=entry.kind,
                    source_ref=entry.source_ref,
                    session_id=entry.session_id,
                    confidence=confidence_of(0, 0, settings),
                )
                for key in (h, nh):
                    known.setdefault(key, []).append(mem)
                if vec is not None:
                    fresh.append((mem.id, vec))
                    if index:
                        index.add(entry, mem.id, vec)
                results.append(AddResult(mem.id, "added", list(entry.keywords)))
            if progress:
                progress(1)
        _save_merged(list(touched.values()))
        record_writes(writes)
        search_index.sync()  # the new memories and the merged ones' keywords, in this transaction
        if fresh and model is not None:
            store_embeddings([i for i, _ in fresh], [v for _, v in fresh], model)
    return results


def precomputed_embedder(entries: list[MemoryInput], embed_with_model, notes: list[str]) -> Embedder:
    """Embed new memories now, outside any transaction (a writer that retries its transaction under contention
    embeds once); an embedder for add_memories that answers from these vectors for the entries that really are new
    (not merged into an existing one). `embed_with_model(texts)` -> (model, vectors) | None."""
    texts = [embedding_text(e.content, e.keywords) for e in entries]
    got = embed_with_model(texts) if texts else None
    if texts and got is None:
        notes.append("no embedder answered: new memories are embedded when the daemon next ranks")
    by_text = dict(zip(texts, got[1])) if got else {}

    def precomputed(fresh: list[str]):
        return (got[0], [by_text[t] for t in fresh]) if got else None

    return precomputed


def stored_repeats(entries: list[MemoryInput], hashes: list[tuple[str, str]]) -> list[bool]:
    """Which entries repeat (same or same normalised text) a live memory of their scope or of global, in a few
    queries: the ones that need no embedding. The transaction decides for good (`_repeated`)."""
    from cairn_cli.db.tables import Memory

    wanted = sorted({x for pair in hashes for x in pair})
    seen: set[tuple[str, str]] = set()  # (hash, scope)
    for start in range(0, len(wanted), 400):
        chunk = wanted[start : start + 400]
        rows = Memory.select(Memory.content_hash, Memory.norm_hash, Memory.scope).where(
            (Memory.content_hash.in_(chunk) | Memory.norm_hash.in_(chunk)) & Memory.superseded_by.is_null()
        )
        for content_hash, norm_hash, scope in cast(Iterable[tuple[str, str, str]], rows.tuples()):
            seen.update(((content_hash, scope), (norm_hash, scope)))
    return [
        any((x, scope) in seen for x in pair for scope in {e.scope, GLOBAL_SCOPE}) for e, pair in zip(entries, hashes)
    ]


def _live_by_hash(hashes: list[tuple[str, str]]) -> dict[str, list]:
    """The live memories whose text or normalised text has one of these hashes, by hash (a few queries)."""
    from cairn_cli.db.tables import Memory

    wanted = sorted({x for pair in hashes for x in pair})
    found: dict[int, Any] = {}
    for start in range(0, len(wanted), 400):
        chunk = wanted[start : start + 400]
        for column in (Memory.content_hash, Memory.norm_hash):  # one index each (an OR of both scanned the table)
            for mem in Memory.select().where(column.in_(chunk)):
                if mem.superseded_by is None:
                    found.setdefault(mem.id, mem)
    known: dict[str, list] = {}
    for mem in found.values():
        for key in {mem.content_hash, mem.norm_hash}:
            known.setdefault(key, []).append(mem)
    return known


def _repeated(known: dict[str, list], entry: MemoryInput, content_hash: str, norm_hash: str):
    """The live memory `entry` repeats (the same text, or the same normalised text), in its scope first, then in
    global (a global entry only in global); None."""
    scopes = {entry.scope, GLOBAL_SCOPE}
    candidates = {m.id: m for key in (content_hash, norm_hash) for m in known.get(key, ()) if m.scope in scopes}
    return min(candidates.values(), key=lambda m: (m.scope != entry.scope, m.id), default=None)


def _save_merged(memories: list) -> None:
    """The memories merged into: keywords and source_ref as folded, updated_at now; one update per memory whose
    fields changed, one for all the others."""
    from cairn_cli.clock import utcnow
    from cairn_cli.db.tables import Memory

    now = utcnow()
    unchanged = []
    for mem in memories:
        mem.updated_at = now
        if mem.is_dirty() and set(mem.dirty_fields) - {Memory.updated_at}:
            mem.save(only=mem.dirty_fields)
        else:
            unchanged.append(mem.id)
    for start in range(0, len(unchanged), 400):
        Memory.update(updated_at=now).where(Memory.id.in_(unchanged[start : start + 400])).execute()
