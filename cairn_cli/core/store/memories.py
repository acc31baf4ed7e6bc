"""The memory store's records: a memory entry validated, read, listed and superseded. Adding with dedup is in
dedup.py, confidence in evidence.py, import in importing.py (docs/store.md tells the whole write path)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.ids import GLOBAL_SCOPE
from cairn_cli.core.redact import assess, holds_placeholder, mostly_secret, scrub
from cairn_cli.core.store import search_index
from cairn_cli.core.text import clean_keywords
from cairn_cli.errors import InvalidInput, NotFound

KINDS = ("fact", "procedure", "correction", "preference", "decision", "pitfall", "meta")
MAX_CONTENT_CHARS = 4000
_ENTRY_KEYS = {"content", "keywords", "scope", "kind", "source_ref", "session_id"}


@dataclass
class MemoryInput:
    content: str
    keywords: list[str] = field(default_factory=list)
    scope: str = GLOBAL_SCOPE
    kind: str = "fact"
    source_ref: str | None = None
    session_id: str | None = None


@dataclass
class MemoryView:
    id: int
    content: str
    keywords: list[str]
    scope: str
    kind: str
    confidence: float
    corroborations: int
    contradictions: int
    source_ref: str | None
    session_id: str | None
    created_at: str
    updated_at: str
    superseded_by: int | None
    embedding_model: str | None


def validate_entry(raw: object, *, default_source_ref: str | None = None) -> MemoryInput:
    """A memory entry from JSON or flags, validated strictly. source_ref: entry's own > the call's > NULL."""
    if not isinstance(raw, dict):
        raise InvalidInput("a memory entry must be a JSON object", 'write {"content": "...", "keywords": [...]}')
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        raise InvalidInput(f"unknown field(s) {sorted(unknown)}", f"allowed: {sorted(_ENTRY_KEYS)}")
    content = raw.get("content")
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput("content is empty or not a string", "give the memory's text as content")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidInput(f"content has {len(content)} characters (max {MAX_CONTENT_CHARS})", "split the memory")
    keywords = raw.get("keywords", [])
    if not isinstance(keywords, (list, str)) or (
        isinstance(keywords, list) and not all(isinstance(k, str) for k in keywords)
    ):
        raise InvalidInput("keywords must be a list of strings", 'write "keywords": ["a", "b"]')
    kind = raw.get("kind") or "fact"
    if kind not in KINDS:
        raise InvalidInput(f"unknown kind {kind!r}", f"use one of {', '.join(KINDS)}")
    scope = raw.get("scope") or GLOBAL_SCOPE
    if not isinstance(scope, str) or not scope.strip() or len(scope) > 200:
        raise InvalidInput("scope must be a non-empty string", "use a project name or global")
    source_ref = raw.get("source_ref") or default_source_ref
    for name, value in (("source_ref", source_ref), ("session_id", raw.get("session_id"))):
        if value is not None and not isinstance(value, str):
            raise InvalidInput(f"{name} must be a string", f"quote the {name}")
    texts = [("content", content), ("scope", scope), ("source_ref", source_ref), ("session_id", raw.get("session_id"))]
    for name, value in [*texts, *(("keywords", k) for k in ([keywords] if isinstance(keywords, str) else keywords))]:
        if value is not None and not _is_utf8(value):  # a lone surrogate ("\ud800" in JSON) cannot be stored
            raise InvalidInput(f"{name} is not valid UTF-8 text (a lone surrogate)", "write the text as UTF-8")
    content = _scrubbed_content(content)
    given = keywords.split(",") if isinstance(keywords, str) else keywords
    scrubbed = (scrub(str(k)) for k in given)  # before case-folding: a key's shape has its case
    return MemoryInput(
        content=content,
        keywords=clean_keywords([k for k in scrubbed if not holds_placeholder(k)]),
        scope=scope.strip(),
        kind=kind,
        source_ref=source_ref,
        session_id=raw.get("session_id"),
    )


class MostlySecret(InvalidInput):
    """A memory whose text is mostly a credential: refused, never stored (docs/privacy.md)."""


def _scrubbed_content(content: str) -> str:
    """The memory's text as stored: `<private>` spans out, secrets redacted; refused when it is mostly secret."""
    found = assess(content)
    text = found.text.strip()
    if not text:
        raise InvalidInput("content is only a <private> span", "write what the memory should say outside <private>")
    if mostly_secret(found, content):
        kinds = ", ".join(sorted(found.counts)) or "redacted"
        raise MostlySecret(
            f"the memory is mostly a secret ({kinds}) and was not stored",
            "keep credentials in a secret manager; a memory may say where one lives, not what it is",
        )
    return text


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def view_of(mem) -> MemoryView:
    return MemoryView(
        id=mem.id,
        content=mem.content,
        keywords=list(mem.keywords),
        scope=mem.scope,
        kind=mem.kind,
        confidence=round(mem.confidence, 4),
        corroborations=mem.corroborations,
        contradictions=mem.contradictions,
        source_ref=mem.source_ref,
        session_id=mem.session_id,
        created_at=mem.created_at.isoformat(timespec="seconds"),
        updated_at=mem.updated_at.isoformat(timespec="seconds"),
        superseded_by=mem.superseded_by,
        embedding_model=mem.embedding_model,
    )


def row_of(memory_id: int):
    from cairn_cli.db.tables import Memory

    mem = Memory.get_or_none(Memory.id == memory_id)
    if mem is None:
        raise NotFound(f"no memory with id {memory_id}", "see `cairn memory list`")
    return mem


def get_memory(memory_id: int, settings: Settings) -> MemoryView:
    return view_of(row_of(memory_id))


def list_memories(
    settings: Settings,
    *,
    scope: str | None = None,
    kind: str | None = None,
    include_superseded: bool = False,
    limit: int | None = None,
) -> list[MemoryView]:
    from cairn_cli.db.tables import Memory

    query = Memory.select().order_by(Memory.id)
    if scope:
        query = query.where(Memory.scope == scope)
    if kind:
        query = query.where(Memory.kind == kind)
    if not include_superseded:
        query = query.where(Memory.superseded_by.is_null())
    if limit:
        query = query.limit(limit)
    return [view_of(m) for m in query]


def supersede(old_id: int, new_id: int, settings: Settings) -> MemoryView:
    """Mark OLD as replaced by NEW: OLD never ranks again. Refuses self-loops and cycles."""
    from cairn_cli.db.tables import memory_proxy

    if old_id == new_id:
        raise InvalidInput("a memory cannot supersede itself", "give two different ids")
    with memory_proxy.atomic():
        old, new = row_of(old_id), row_of(new_id)
        if new.superseded_by is not None:
            raise InvalidInput(
                f"memory {new_id} is itself superseded by {new.superseded_by}",
                f"supersede with {new.superseded_by} instead",
            )
        old.superseded_by = new.id
        old.updated_at = utcnow()
        old.save()
        search_index.sync()  # OLD leaves the full-text index in this transaction
    return view_of(old)


def exists(memory_id: int) -> bool:
    from cairn_cli.db.tables import Memory

    return Memory.select(Memory.id).where(Memory.id == memory_id).exists()


def as_dict(view: MemoryView) -> dict:
    return asdict(view)
