"""The memory store: add with dedup (keyword union), import, supersede, corroborate / contradict.

Confidence rule (a Beta-Bernoulli posterior mean; stored, shown as `reliability`, weighs 0 in ranking):
    confidence = (CONFIDENCE_PRIOR_POS + corroborations) / (PRIOR_POS + PRIOR_NEG + corroborations + contradictions)
With the default prior 3/1 a new memory is 0.75, one corroboration makes it 0.80, one contradiction 0.60, and
the evidence outweighs the prior after a handful of observations. An exact (or normalised) duplicate is not a
corroboration (it is the same write again); a semantic merge is (another write that states the same thing).

Semantic dedup: a new memory whose cosine with a live memory of its own scope (same embedding model) is at least
CAIRN_DEDUP_SEMANTIC_MIN, and which states the same numbers, merges into the closest such memory. The threshold was
calibrated on labelled LoCoMo observation pairs (scripts/bench_dedup.py, bench/dedup.md). Without an embedding (no
model answered) only exact duplicates merge, and the caller is told so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.store import fulltext
from cairn_cli.core.text import clean_keywords, normalise, sha256, stated_numbers
from cairn_cli.errors import InvalidInput, NotFound

GLOBAL = "global"
KINDS = ("fact", "procedure", "correction", "preference", "decision", "pitfall", "meta")
MAX_CONTENT_CHARS = 4000
_ENTRY_KEYS = {"content", "keywords", "scope", "kind", "source_ref", "session_id"}


@dataclass
class MemoryInput:
    content: str
    keywords: list[str] = field(default_factory=list)
    scope: str = "global"
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


@dataclass
class AddResult:
    id: int
    action: str  # "added" | "merged"
    keywords_added: list[str] = field(default_factory=list)
    method: str | None = None  # a merge's: exact | normalised | semantic
    similarity: float | None = None  # a semantic merge's cosine


@dataclass
class ImportReport:
    added: int = 0
    merged: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    results: list[AddResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def confidence_of(corroborations: int, contradictions: int, settings: Settings) -> float:
    pos, neg = settings.CONFIDENCE_PRIOR_POS, settings.CONFIDENCE_PRIOR_NEG
    return (pos + corroborations) / (pos + neg + corroborations + contradictions)


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
    scope = raw.get("scope") or "global"
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
    return MemoryInput(
        content=content.strip(),
        keywords=clean_keywords(keywords),
        scope=scope.strip(),
        kind=kind,
        source_ref=source_ref,
        session_id=raw.get("session_id"),
    )


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def embedding_text(content: str, keywords: list[str]) -> str:
    return f"{content}\nkeywords: {', '.join(keywords)}" if keywords else content


Embedder = Callable[[list[str]], "tuple[str, Sequence[Sequence[float]]] | None"]


def local_embedder(settings: Settings) -> Embedder:
    """The configured model loaded in this process: (model name, vectors)."""

    def embed(texts: list[str]):
        from cairn_cli.ml.models import get_encoder

        encoder = get_encoder(settings.EMBED_MODEL, settings.EMBED_DTYPE)
        return encoder.name, encoder.encode(texts)

    return embed


def store_embeddings(ids: list[int], vectors, model: str) -> None:
    """Write embeddings (float32 blobs) and their model's name; updated_at is untouched (the content is not)."""
    from array import array

    from cairn_cli.db.tables import Memory, memory_proxy

    with memory_proxy.atomic():
        for memory_id, vec in zip(ids, vectors):
            blob = vec.astype("float32").tobytes() if hasattr(vec, "astype") else array("f", vec).tobytes()
            Memory.update(embedding=blob, embedding_model=model).where(Memory.id == memory_id).execute()


def add_memories(
    entries: list[MemoryInput],
    settings: Settings,
    *,
    progress: Callable[[int], None] | None = None,
    embed: Embedder | None = None,
    notes: list[str] | None = None,
) -> list[AddResult]:
    """Add or merge each entry, all in one transaction. The entries that are not exact duplicates are embedded
    first, in one batch, by `embed` (default: the configured model in this process); when it answers None the
    memories are stored without an embedding (the daemon embeds them when it next refreshes its table), semantic
    dedup is skipped and a note saying so is appended to `notes`.

    Exact dedup is per scope: an entry merges into a live memory with the same (or the same normalised) text in its
    own scope or in `global` (which every scope sees); a global entry merges only into a global memory. Semantic
    dedup (see the module docstring) only ever merges within the entry's own scope, and counts as a corroboration.
    A merge unions the keywords and records what was written in `memory_merges`."""
    from cairn_cli.db.tables import Memory, memory_proxy

    results: list[AddResult] = []
    fresh: list[tuple[int, object]] = []
    hashes = [(sha256(e.content), sha256(normalise(e.content))) for e in entries]
    # embedded before the transaction (a model call takes seconds; a SQLite read snapshot held that long could not
    # become a write if another process wrote meanwhile); exact repeats of stored memories need no vector
    repeats = _stored_repeats(entries, hashes)
    todo = [embedding_text(e.content, e.keywords) for e, repeat in zip(entries, repeats) if not repeat]
    model, vectors = _embed_texts(list(dict.fromkeys(todo)), embed or local_embedder(settings))
    index = _SemanticIndex(model, settings.DEDUP_SEMANTIC_MIN) if model is not None else None
    if todo and notes is not None:
        if model is None:
            notes.append("semantic dedup skipped: no embedding model answered (exact duplicates only)")
        elif not index:
            notes.append(f"semantic dedup off (CAIRN_DEDUP_SEMANTIC_MIN={settings.DEDUP_SEMANTIC_MIN:g})")
    with memory_proxy.atomic():
        for entry, (h, nh) in zip(entries, hashes):
            existing = _duplicate_of(entry, h, nh)
            vec = vectors.get(embedding_text(entry.content, entry.keywords))
            match = index.nearest(entry, vec) if existing is None and index and vec is not None else None
            if existing is not None:
                method = "exact" if existing.content_hash == h else "normalised"
                results.append(AddResult(existing.id, "merged", merge_into(existing, entry, method), method))
            elif match is not None:
                existing, cos = match
                added = merge_into(existing, entry, "semantic", cos)
                add_evidence(existing.id, corroborate=True, settings=settings)
                results.append(AddResult(existing.id, "merged", added, "semantic", cos))
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
                if vec is not None:
                    fresh.append((mem.id, vec))
                    if index:
                        index.add(entry.scope, mem.id, vec)
                results.append(AddResult(mem.id, "added", list(entry.keywords)))
            if progress:
                progress(1)
        fulltext.sync()  # the new memories and the merged ones' keywords, in this transaction
        if fresh and model is not None:
            store_embeddings([i for i, _ in fresh], [v for _, v in fresh], model)
    return results


def _stored_repeats(entries: list[MemoryInput], hashes: list[tuple[str, str]]) -> list[bool]:
    """Which entries repeat (same or same normalised text) a live memory of their scope or of global, in a few
    queries: the ones that need no embedding. The transaction decides for good (`_duplicate_of`)."""
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
    return [any((x, scope) in seen for x in pair for scope in {e.scope, GLOBAL}) for e, pair in zip(entries, hashes)]


def _embed_texts(texts: list[str], embed: Embedder) -> tuple[str | None, dict[str, object]]:
    """(model name, text -> vector), or (None, {}) when nothing answered (or there was nothing to embed)."""
    got = embed(texts) if texts else None
    if got is None:
        return None, {}
    return got[0], dict(zip(texts, got[1]))


class _SemanticIndex:
    """The live memories of each scope an entry is written to, embedded by this call's model (loaded on first use as
    one matrix of unit rows per scope, grown in place by the memories this call adds); `nearest` is the closest one
    at or above the threshold that states the same numbers."""

    def __init__(self, model: str, threshold: float):
        self.model, self.threshold = model, threshold
        self.enabled = 0.0 < threshold <= 1.0
        self._scopes: dict[str, tuple[list[int], list[Any]]] = {}  # scope -> (ids, [matrix with spare rows])

    def __bool__(self) -> bool:
        return self.enabled

    def _scope(self, scope: str, dim: int) -> tuple[list[int], list[Any]]:
        import numpy as np

        from cairn_cli.db.tables import Memory

        if scope not in self._scopes:
            rows = Memory.select(Memory.id, Memory.embedding).where(
                (Memory.scope == scope)
                & Memory.superseded_by.is_null()
                & (Memory.embedding_model == self.model)
                & Memory.embedding.is_null(False)
            )
            ids: list[int] = []
            blobs: list[bytes] = []
            for memory_id, blob in cast(Iterable[tuple[int, bytes]], rows.tuples()):
                if len(blob) == 4 * dim:  # another dimension: not this model's vector after all
                    ids.append(memory_id)
                    blobs.append(bytes(blob))
            matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dim).copy()
            self._scopes[scope] = (ids, [_unit_rows(matrix)])
        return self._scopes[scope]

    def add(self, scope: str, memory_id: int, vec) -> None:
        import numpy as np

        v = _unit_rows(np.asarray(vec, dtype=np.float32)[None, :])[0]
        ids, holder = self._scope(scope, len(v))
        if len(ids) == len(holder[0]):  # full: double the rows (an import adds thousands)
            grown = np.zeros((max(64, 2 * len(ids)), len(v)), dtype=np.float32)
            grown[: len(ids)] = holder[0]
            holder[0] = grown
        holder[0][len(ids)] = v
        ids.append(memory_id)

    def nearest(self, entry: MemoryInput, vec):
        """(the live Memory, cosine) the entry merges into, or None."""
        import numpy as np

        from cairn_cli.db.tables import Memory

        v = _unit_rows(np.asarray(vec, dtype=np.float32)[None, :])[0]
        ids, holder = self._scope(entry.scope, len(v))
        if not ids or not v.any():
            return None
        # einsum, not `@`: one thread; a BLAS matrix-vector product spins up its thread pool per call and, on a busy
        # 2-core machine, was 10-80x slower for an import's thousands of small products
        cos = np.einsum("ij,j->i", holder[0][: len(ids)], v)
        above = np.flatnonzero(cos >= self.threshold)
        numbers = stated_numbers(entry.content)
        for k in above[np.argsort(-cos[above], kind="stable")]:
            mem = Memory.get_or_none(Memory.id == ids[k])
            if mem is not None and mem.superseded_by is None and stated_numbers(mem.content) == numbers:
                return mem, round(float(cos[k]), 4)
        return None


def _unit_rows(matrix):
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def _duplicate_of(entry: MemoryInput, content_hash: str, norm_hash: str):
    """The live memory `entry` repeats, in its scope first, then in global; None."""
    from cairn_cli.db.tables import Memory

    scopes = [entry.scope] if entry.scope == GLOBAL else [entry.scope, GLOBAL]
    candidates = (
        Memory.select()
        .where(
            ((Memory.content_hash == content_hash) | (Memory.norm_hash == norm_hash))
            & Memory.superseded_by.is_null()
            & Memory.scope.in_(scopes)
        )
        .order_by(Memory.id)
    )
    return min(candidates, key=lambda m: (m.scope != entry.scope, m.id), default=None)


def merge_into(existing, entry: MemoryInput, method: str, similarity: float | None = None) -> list[str]:
    """Merge a written entry into an existing memory: keywords unioned, a missing source_ref filled, and what was
    written recorded in memory_merges. Returns the keywords it added."""
    from cairn_cli.db.tables import MemoryMerge

    new_kws = [k for k in entry.keywords if k not in existing.keywords]
    if new_kws:
        existing.keywords = existing.keywords + new_kws
    if existing.source_ref is None and entry.source_ref:
        existing.source_ref = entry.source_ref
    existing.updated_at = utcnow()
    existing.save()
    MemoryMerge.create(
        memory_id=existing.id,
        content=entry.content,
        keywords=entry.keywords,
        scope=entry.scope,
        kind=entry.kind,
        source_ref=entry.source_ref,
        session_id=entry.session_id,
        method=method,
        similarity=similarity,
    )
    return new_kws


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


def parse_jsonl(
    path: Path, *, default_source_ref: str | None = None
) -> tuple[list[tuple[int, MemoryInput]], list[tuple[int, str]]]:
    """Valid entries and rejected lines (1-based line numbers with the reason). Blank lines are skipped."""
    from cairn_cli.inputs import read_file

    data = read_file(path, "pass the path of a JSONL file")  # within CAIRN_MAX_INPUT_BYTES, never a FIFO's endless wait
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark (Windows editors write one): not content
        data = data[3:]
    valid, rejected = [], []
    for no, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            valid.append((no, validate_entry(orjson.loads(line), default_source_ref=default_source_ref)))
        except orjson.JSONDecodeError as exc:
            rejected.append((no, f"not valid JSON ({exc.msg})"))
        except InvalidInput as exc:
            rejected.append((no, exc.one_line()))
    return valid, rejected


def import_jsonl(
    path: Path,
    settings: Settings,
    *,
    source_ref: str | None = None,
    skip_invalid: bool = False,
    progress: Callable[[int], None] | None = None,
    embed: Embedder | None = None,
) -> ImportReport:
    """Import a JSONL file. Any rejected line aborts the whole import unless skip_invalid (then it is reported)."""
    valid, rejected = parse_jsonl(path, default_source_ref=source_ref)
    if rejected and not skip_invalid:
        first = ", ".join(f"line {no}: {why}" for no, why in rejected[:3])
        more = f" (+{len(rejected) - 3} more)" if len(rejected) > 3 else ""
        raise InvalidInput(
            f"{path}: {len(rejected)} invalid line(s), nothing imported — {first}{more}",
            "fix those lines or pass --skip-invalid",
        )
    notes: list[str] = []
    results = add_memories([entry for _, entry in valid], settings, progress=progress, embed=embed, notes=notes)
    return ImportReport(
        added=sum(r.action == "added" for r in results),
        merged=sum(r.action == "merged" for r in results),
        rejected=rejected,
        results=results,
        notes=notes,
    )


def _view(mem) -> MemoryView:
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


def _get(memory_id: int):
    from cairn_cli.db.tables import Memory

    mem = Memory.get_or_none(Memory.id == memory_id)
    if mem is None:
        raise NotFound(f"no memory with id {memory_id}", "see `cairn memory list`")
    return mem


def get_memory(memory_id: int, settings: Settings) -> MemoryView:
    return _view(_get(memory_id))


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
    return [_view(m) for m in query]


def supersede(old_id: int, new_id: int, settings: Settings) -> MemoryView:
    """Mark OLD as replaced by NEW: OLD never ranks again. Refuses self-loops and cycles."""
    from cairn_cli.db.tables import memory_proxy

    if old_id == new_id:
        raise InvalidInput("a memory cannot supersede itself", "give two different ids")
    with memory_proxy.atomic():
        old, new = _get(old_id), _get(new_id)
        if new.superseded_by is not None:
            raise InvalidInput(
                f"memory {new_id} is itself superseded by {new.superseded_by}",
                f"supersede with {new.superseded_by} instead",
            )
        old.superseded_by = new.id
        old.updated_at = utcnow()
        old.save()
        fulltext.sync()  # OLD leaves the full-text index in this transaction
    return _view(old)


def exists(memory_id: int) -> bool:
    from cairn_cli.db.tables import Memory

    return Memory.select(Memory.id).where(Memory.id == memory_id).exists()


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
    return [_view(_get(memory_id)) for memory_id in memory_ids]


def embed_missing(settings: Settings, *, progress: Callable[[int], None] | None = None) -> int:
    """(Re)embed live memories that lack an embedding from the configured model. Returns how many."""
    from cairn_cli.db.tables import Memory
    from cairn_cli.ml.models import get_encoder

    encoder = get_encoder(settings.EMBED_MODEL, settings.EMBED_DTYPE)
    stale = list(
        Memory.select().where(
            Memory.superseded_by.is_null()
            & ((Memory.embedding_model != encoder.name) | Memory.embedding_model.is_null())
        )
    )
    for start in range(0, len(stale), 256):
        batch = stale[start : start + 256]
        store_embeddings(
            [m.id for m in batch], encoder.encode([embedding_text(m.content, m.keywords) for m in batch]), encoder.name
        )
        if progress:
            progress(len(batch))
    return len(stale)


def as_dict(view: MemoryView) -> dict:
    return asdict(view)
