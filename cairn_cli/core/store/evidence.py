"""Evidence on a memory: corroborations and contradictions, and the confidence they imply (a Beta-Bernoulli
posterior mean; docs/store.md)."""

from __future__ import annotations

from collections.abc import Iterable

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.store.memories import MemoryView, row_of, view_of
from cairn_cli.errors import NotFound


def confidence_of(corroborations: int, contradictions: int, settings: Settings) -> float:
    pos, neg = settings.CONFIDENCE_PRIOR_POS, settings.CONFIDENCE_PRIOR_NEG
    return (pos + corroborations) / (pos + neg + corroborations + contradictions)


def add_evidence(memory_id: int, *, corroborate: bool, settings: Settings) -> bool:
    """One corroboration (cu) or contradiction (-!) and the confidence it implies, in one UPDATE (concurrent
    writers never lose a count). False when there is no such memory."""
    from cairn_cli.db.tables import Memory

    c = Memory.corroborations + (1 if corroborate else 0)
    x = Memory.contradictions + (0 if corroborate else 1)
    pos, neg = float(settings.CONFIDENCE_PRIOR_POS), float(settings.CONFIDENCE_PRIOR_NEG)
    query = Memory.update(
        corroborations=c, contradictions=x, confidence=(pos + c) / (pos + neg + c + x), updated_at=utcnow()
    )
    return query.where(Memory.id == memory_id).execute() == 1


def record_evidence(memory_ids: Iterable[int], settings: Settings, *, corroborate: bool) -> list[MemoryView]:
    """Corroborate (cu) or contradict (-!) memories and recompute their confidence, in one transaction."""
    from cairn_cli.db.tables import memory_proxy

    with memory_proxy.atomic():
        for memory_id in memory_ids:
            if not add_evidence(memory_id, corroborate=corroborate, settings=settings):
                raise NotFound(f"no memory with id {memory_id}", "see `cairn memory list`")
    return [view_of(row_of(memory_id)) for memory_id in memory_ids]
