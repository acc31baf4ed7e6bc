"""Merges: a written entry folded into the memory it repeats (keywords unioned, what was written recorded in
memory_merges), and what was merged into a memory."""

from __future__ import annotations

from dataclasses import dataclass

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.store.memories import MemoryInput


def fold(existing, entry: MemoryInput) -> list[str]:
    """What merging `entry` changes in `existing` (in memory, not saved): keywords unioned, a missing source_ref
    filled. Returns the keywords it added."""
    new_kws = [k for k in entry.keywords if k not in existing.keywords]
    if new_kws:
        existing.keywords = existing.keywords + new_kws
    if existing.source_ref is None and entry.source_ref:
        existing.source_ref = entry.source_ref
    return new_kws


def record_write(memory_id: int, entry: MemoryInput, method: str, similarity: float | None = None) -> None:
    """What was written into a memory (a merged entry, or the text an edit replaced), in memory_merges."""
    record_writes([(memory_id, entry, method, similarity)])


def record_writes(writes: list[tuple[int, MemoryInput, str, float | None]]) -> None:
    """Many writes' records in memory_merges, a few inserts for all (an import merges thousands)."""
    from cairn_cli.db.tables import MemoryMerge

    rows = [
        {
            "memory_id": memory_id,
            "content": entry.content,
            "keywords": entry.keywords,
            "scope": entry.scope,
            "kind": entry.kind,
            "source_ref": entry.source_ref,
            "session_id": entry.session_id,
            "method": method,
            "similarity": similarity,
            "merged_at": utcnow(),
        }
        for memory_id, entry, method, similarity in writes
    ]
    for start in range(0, len(rows), 100):  # 11 parameters a row: well within every backend's limit
        MemoryMerge.insert_many(rows[start : start + 100]).execute()


@dataclass
class MergeView:
    memory_id: int
    content: str
    keywords: list[str]
    scope: str
    kind: str
    source_ref: str | None
    session_id: str | None
    method: str
    similarity: float | None
    merged_at: str


def merges_of(memory_id: int, settings: Settings) -> list[MergeView]:
    """What was merged into a memory, oldest first."""
    from cairn_cli.db.tables import MemoryMerge

    rows = MemoryMerge.select().where(MemoryMerge.memory_id == memory_id).order_by(MemoryMerge.id)
    return [
        MergeView(
            r.memory_id,
            r.content,
            list(r.keywords),
            r.scope,
            r.kind,
            r.source_ref,
            r.session_id,
            r.method,
            r.similarity,
            r.merged_at.isoformat(timespec="seconds"),
        )
        for r in rows
    ]
