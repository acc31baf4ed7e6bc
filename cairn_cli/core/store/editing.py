"""The user's own memories, out and changed: `cairn memory export` writes the store as the JSONL `cairn memory
import` reads (what a user wrote: text, keywords, scope, kind, source and session), and `cairn memory edit` changes
one memory's text or keywords (scrubbed as any entrance's, re-embedded, re-indexed, the old text kept as a merge
record unless `cairn forget` removes it)."""

from __future__ import annotations

from collections.abc import Iterator

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.store import memories, merges, search_index
from cairn_cli.core.store.embeddings import Embedder, embed_texts, embedding_text, store_embeddings
from cairn_cli.errors import InvalidInput

EXPORT_FIELDS = ("content", "keywords", "scope", "kind", "source_ref", "session_id")


def export_entries(*, scope: str | None = None, include_superseded: bool = False) -> Iterator[dict]:
    """Each memory as an import line (oldest first); fields that are empty are left out, as import defaults them."""
    from cairn_cli.db.tables import Memory

    query = Memory.select().order_by(Memory.id)
    if scope is not None:
        query = query.where(Memory.scope == scope)
    if not include_superseded:
        query = query.where(Memory.superseded_by.is_null())
    for mem in query.iterator():
        entry = {name: getattr(mem, name) for name in EXPORT_FIELDS}
        yield {k: v for k, v in entry.items() if v not in (None, [])}


def edit(
    memory_id: int,
    settings: Settings,
    *,
    content: str | None = None,
    keywords: list[str] | None = None,
    embed: Embedder,
) -> memories.MemoryView:
    """Change a memory's text and/or keywords. The new text is validated and scrubbed like `memory add`'s; the
    memory's former text and keywords are recorded as a merge (method "edit"); it is re-embedded (the store's model
    answers through `embed`; when none does, the daemon embeds it later) and its index row replaced."""
    from cairn_cli.core.text import normalise, sha256
    from cairn_cli.db.tables import Memory, MemoryVector, memory_proxy

    if content is None and keywords is None:
        raise InvalidInput("nothing to change", "pass --content TEXT and/or --keywords a,b")
    current = memories.get_memory(memory_id, settings)
    entry = memories.validate_entry(
        {
            "content": current.content if content is None else content,
            "keywords": current.keywords if keywords is None else keywords,
            "scope": current.scope,
            "kind": current.kind,
            "source_ref": current.source_ref,
            "session_id": current.session_id,
        }
    )
    if entry.content == current.content and entry.keywords == current.keywords:
        return current
    model, vectors = embed_texts([embedding_text(entry.content, entry.keywords)], embed)
    with memory_proxy.atomic():
        row = memories.row_of(memory_id)
        old = memories.MemoryInput(row.content, row.keywords, row.scope, row.kind, row.source_ref, row.session_id)
        merges.record_write(row.id, old, "edit")
        Memory.update(
            content=entry.content,
            keywords=entry.keywords,
            content_hash=sha256(entry.content),
            norm_hash=sha256(normalise(entry.content)),
            embedding=None,
            embedding_model=None,
            updated_at=utcnow(),
        ).where(Memory.id == row.id).execute()
        MemoryVector.delete().where(MemoryVector.memory_id == row.id).execute()  # a learned embedder's: stale
        search_index.sync()
        if model is not None:
            store_embeddings([row.id], list(vectors.values()), model)
    return memories.get_memory(memory_id, settings)
