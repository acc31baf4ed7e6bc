"""`cairn forget`: memories deleted on request (by id, by pattern, by scope), and their text purged from everywhere
else cairn kept it — deliveries, hook state, merges, the spool, the logs, exported training data — on either
backend; with a pattern, the matching text too, wherever it is (prompts and context windows included). The SQLite
files are compacted so that nothing is left in their free pages; a deployed learner trained on forgotten text is
reported (docs/privacy.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from cairn_cli.config import Settings
from cairn_cli.core.privacy.stored import Rewrites, compact_stores, rewrite_files, rewrite_tables, tainted_learners
from cairn_cli.core.redact import placeholder
from cairn_cli.errors import InvalidInput, NotFound

FORGOTTEN = placeholder("forgotten")  # a placeholder: a Stop never makes it a memory, a scan never counts it
_MIN_LITERAL = 8  # a forgotten memory's text shorter than this is not searched for elsewhere (it would hit words)


@dataclass
class ForgetReport:
    dry_run: bool
    memories: list[int] = field(default_factory=list)  # the memories deleted
    deliveries: int = 0  # their deliveries deleted (labels included)
    evidence: int = 0
    merges: int = 0
    vectors: int = 0
    purged: Rewrites = field(default_factory=Rewrites)  # the text removed elsewhere
    learners: list[dict] = field(default_factory=list)  # deployed learners trained on forgotten text
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "dry_run": self.dry_run,
            "memories": self.memories,
            "deliveries": self.deliveries,
            "evidence": self.evidence,
            "merges": self.merges,
            "vectors": self.vectors,
            "purged": self.purged.as_dict(),
            "learners_trained_on_forgotten_text": self.learners,
            "notes": self.notes,
        }


def compile_pattern(pattern: str) -> re.Pattern[str]:
    if not pattern.strip():
        raise InvalidInput("the pattern is empty", "pass --pattern TEXT (a regular expression, any case)")
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise InvalidInput(
            f"--pattern is not a regular expression: {exc}", "escape special characters, e.g. 'acme\\.com'"
        ) from None


def select(ids: list[int], pattern: re.Pattern[str] | None, scope: str | None) -> list[int]:
    """The memories to forget: the ids given (each must exist), and those of the scope and/or matching the
    pattern in their text or keywords (both: those of the scope that match), superseded ones included."""
    from cairn_cli.db.tables import Memory

    found = {m.id for m in Memory.select(Memory.id).where(Memory.id.in_(ids))} if ids else set()
    missing = sorted(set(ids) - found)
    if missing:
        raise NotFound(f"no memory {', '.join(map(str, missing))}", "see `cairn memory list`")
    chosen = set(found)
    if pattern is not None or scope is not None:
        query = Memory.select(Memory.id, Memory.content, Memory.keywords)
        if scope is not None:
            query = query.where(Memory.scope == scope)
        for m in query.iterator():
            if pattern is None or pattern.search(m.content) or any(pattern.search(k) for k in m.keywords or []):
                chosen.add(m.id)
    return sorted(chosen)


def forget(
    settings: Settings,
    home: Path,
    *,
    ids: list[int] | None = None,
    pattern: str | None = None,
    scope: str | None = None,
    dry_run: bool = False,
) -> ForgetReport:
    """Forget the selected memories and purge their text (and the pattern's) everywhere; `dry_run`: count only."""
    from cairn_cli import db
    from cairn_cli.core.store import search_index
    from cairn_cli.db.tables import EvidenceApplied, HookState, Memory, MemoryDelivery, MemoryMerge, MemoryVector

    if not ids and pattern is None and scope is None:
        raise InvalidInput("nothing to forget", "pass memory ids, --pattern TEXT or --scope NAME")
    regex = compile_pattern(pattern) if pattern is not None else None
    report = ForgetReport(dry_run=dry_run)
    report.memories = select(list(ids or []), regex, scope)
    chosen = report.memories
    texts = [m.content for m in Memory.select(Memory.content).where(Memory.id.in_(chosen))] if chosen else []
    merged = [m.content for m in MemoryMerge.select(MemoryMerge.content).where(MemoryMerge.memory_id.in_(chosen))]
    literals = sorted({t for t in texts + merged if len(t) >= _MIN_LITERAL}, key=len, reverse=True)
    parts = [re.escape(t) for t in literals] + ([regex.pattern] if regex is not None else [])
    purge = re.compile("|".join(f"(?:{p})" for p in parts), re.IGNORECASE) if parts else None

    deliveries = MemoryDelivery.select().where(MemoryDelivery.memory_id.in_(chosen)) if chosen else None
    label_times = [d.graded_at or d.engaged_at for d in deliveries] if deliveries is not None else []
    if purge is not None:  # windows that held the text and were labelled: a learner may have read them
        label_times += [
            d.graded_at or d.engaged_at
            for d in MemoryDelivery.select(
                MemoryDelivery.context_window, MemoryDelivery.graded_at, MemoryDelivery.engaged_at
            ).where(MemoryDelivery.graded_at.is_null(False) | MemoryDelivery.engaged_at.is_null(False))
            if purge.search(d.context_window or "")
        ]
    report.learners = tainted_learners(label_times)

    with db.transaction("memory"):
        if chosen:
            report.merges = MemoryMerge.select().where(MemoryMerge.memory_id.in_(chosen)).count()
            report.vectors = MemoryVector.select().where(MemoryVector.memory_id.in_(chosen)).count()
            if not dry_run:
                MemoryMerge.delete().where(MemoryMerge.memory_id.in_(chosen)).execute()
                MemoryVector.delete().where(MemoryVector.memory_id.in_(chosen)).execute()
                Memory.delete().where(Memory.id.in_(chosen)).execute()
                search_index.sync()  # their index rows (their terms) go in this transaction
    with db.transaction("ephemeral"):
        if chosen:
            report.deliveries = MemoryDelivery.select().where(MemoryDelivery.memory_id.in_(chosen)).count()
            report.evidence = EvidenceApplied.select().where(EvidenceApplied.memory_id.in_(chosen)).count()
            if not dry_run:
                MemoryDelivery.delete().where(MemoryDelivery.memory_id.in_(chosen)).execute()
                EvidenceApplied.delete().where(EvidenceApplied.memory_id.in_(chosen)).execute()
                _drop_delivered(HookState, set(chosen))

    if purge is not None:

        def transform(text: str) -> tuple[str, int]:
            return purge.subn(FORGOTTEN, text)

        def in_memories(text: str) -> tuple[str, int]:
            """Another memory loses only what --pattern names: a forgotten memory's text is purged from the log, the
            spool and the exports, never cut out of a memory the user did not ask to forget."""
            return regex.subn(FORGOTTEN, text) if regex is not None else (text, 0)

        rewrite_tables(
            transform, apply=not dry_run, out=report.purged, skip=frozenset(chosen), memory_transform=in_memories
        )
        rewrite_files(home, transform, apply=not dry_run, out=report.purged)
    if not dry_run:
        report.notes += compact_stores()
        _audit(report, settings)
    return report


def _drop_delivered(hook_state, ids: set[int]) -> None:
    """The forgotten ids out of each turn's `delivered` list (what Stop and engagement read)."""
    for row in hook_state.select(hook_state.id, hook_state.data).iterator():
        delivered = (row.data or {}).get("delivered") or []
        if any(i in ids for i in delivered):
            data = {**row.data, "delivered": [i for i in delivered if i not in ids]}
            hook_state.update(data=data).where(hook_state.id == row.id).execute()


def _audit(report: ForgetReport, settings: Settings) -> None:
    """What was forgotten, counted (never the text or the pattern), in the machine state's history."""
    from cairn_cli.core.store import state

    summary = {
        "memories": len(report.memories),
        "deliveries": report.deliveries,
        "purged": dict(report.purged.hits),
        "learners": report.learners,
    }
    state.put("privacy_forget", summary, settings, by="cairn forget", reason=f"{len(report.memories)} forgotten")
