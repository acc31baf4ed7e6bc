"""The rank pipeline: context window -> candidates in scope -> prefilter -> composite -> rerank -> floor -> top k.

A `RankEngine` holds what ranking needs warm: the embedding encoder (None in the lexical fallback), the
cross-encoder (None: the stage is "none") and a cache of scoring tables keyed by the memory store's version.
The daemon keeps one engine for its lifetime; an in-process call builds one for itself.

Rerank stage: the cross-encoder scores the composite's top RERANK_CANDIDATES against the context window;
memories whose native score is under the model's floor are dropped; the rest are ordered by
    final = (1 - RERANK_BLEND) * composite_norm + RERANK_BLEND * reranker_norm
where both are min-max normalised over the surviving candidates (a lone survivor gets 1 for both), so that
neither scale (composite 0..0.7, logits -11..+11) dominates by accident. Raw, native and normalised reranker
scores go into score_components.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from cairn_cli import config
from cairn_cli.config import Settings
from cairn_cli.core.ranking.context import ContextWindow, build_context_window
from cairn_cli.core.ranking.injection import format_block
from cairn_cli.core.ranking.prefilter import is_self_referential_meta
from cairn_cli.core.ranking.scoring import GLOBAL_SCOPE, Candidate, Scored, ScoringTable
from cairn_cli.core.store import deliveries
from cairn_cli.core.store.memories import embedding_text
from cairn_cli.errors import DeadlineExceeded, InvalidInput, NotFound

NO_RERANKER = "none"


class Reranker(Protocol):
    name: str
    floor: float

    def logits(self, query: str, texts: list[str]) -> list[float]: ...

    def score_from_logits(self, raw: list[float]) -> list[float]: ...


@dataclass
class RankRequest:
    prompt: str
    session_id: str = "cli"
    scope: str | None = None
    transcript: str | None = None
    k: int | None = None
    layer: str = "prompt"
    turn: int | None = None
    log: bool = True
    commit_deadline: float | None = None  # epoch seconds: past it, log nothing (the caller has fallen back)
    hook: dict | None = None  # set by `cairn hook prompt`: recorded in hook_state; a bad transcript is a note
    strict_scope: bool = True  # False: an unknown scope ranks the global memories (a new project) instead of failing
    with_rules: bool = False  # prepend the live generation rules to the block (what the hook prints)


@dataclass
class RankedMemory:
    id: int
    content: str
    kind: str
    scope: str
    confidence: float
    source_ref: str | None
    rank: int
    score: float
    components: dict


@dataclass
class RankResult:
    session_id: str
    turn: int
    context: ContextWindow
    items: list[RankedMemory]
    block: str
    reranker_model: str
    ranker: str
    embed_model: str | None
    candidates: int
    dropped: dict = field(default_factory=dict)
    delivery_ids: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    timings_ms: dict = field(default_factory=dict)
    rules: str = ""
    generation_version: str | None = None
    arm: str | None = None
    arm_instruction: str = ""

    @property
    def injection(self) -> str:
        """What the prompt hook prints: the rules, the memories, and last (after the part of the context that
        stays the same turn to turn) arm B's instruction; bounded by INJECTION_MAX_CHARS together."""
        return "\n".join(part for part in (self.rules, self.block, self.arm_instruction) if part)

    def as_dict(self) -> dict:
        return {
            "session_id": self.session_id,
            "turn": self.turn,
            "context_key": self.context.key,
            "context_window": self.context.text,
            "reranker_model": self.reranker_model,
            "embed_model": self.embed_model,
            "ranker": self.ranker,
            "candidates": self.candidates,
            "dropped": self.dropped,
            "delivery_ids": self.delivery_ids,
            "notes": self.notes,
            "timings_ms": self.timings_ms,
            "block": self.block,
            "rules": self.rules,
            "injection": self.injection,
            "generation_version": self.generation_version,
            "arm": self.arm,
            "memories": [vars(i) for i in self.items],
        }


def known_scopes(settings: Settings) -> list[str]:
    from cairn_cli.db.tables import Memory

    rows = Memory.select(Memory.scope).where(Memory.superseded_by.is_null()).distinct()
    return sorted({r.scope for r in rows} | {GLOBAL_SCOPE})


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


class RankEngine:
    def __init__(
        self,
        encoder=None,
        reranker: Reranker | None = None,
        *,
        ranker: str = "cairn",
        notes: list[str] | None = None,
        max_candidates: int | None = None,
    ):
        self.encoder = encoder
        self.reranker = reranker
        self.ranker = ranker
        self.max_candidates = max_candidates
        self.notes = list(notes or [])
        self._tables: dict[tuple, _Table] = {}

    @classmethod
    def in_process(cls, settings: Settings, *, with_reranker: bool = True) -> RankEngine:
        """Load the configured models in this process (slow: for the daemon, tests and CAIRN_DAEMON=off)."""
        from cairn_cli.core.ranking.reranking import load_reranker
        from cairn_cli.ml.models import get_encoder

        reranker, notes = load_reranker(settings) if with_reranker else (None, [])
        return cls(get_encoder(settings.EMBED_MODEL, settings.EMBED_DTYPE), reranker, notes=notes)

    @classmethod
    def lexical_fallback(cls, reason: str, max_candidates: int | None = None) -> RankEngine:
        """No model at all: keywords and scope over the newest `max_candidates` memories (a hook must answer
        fast even with a huge store and no daemon). Its provenance says so."""
        cap = f"; the {max_candidates} most recently updated memories only" if max_candidates else ""
        return cls(
            None, None, ranker="cairn-fallback", notes=[f"fallback: {reason}{cap}"], max_candidates=max_candidates
        )

    @property
    def embed_model(self) -> str | None:
        return self.encoder.name if self.encoder else None

    def table(self, settings: Settings) -> _Table:
        """The store's table, refreshed in place by the rows changed since it was built (rebuilt when rows
        disappeared or half its slots are dead)."""
        version = store_version(settings)
        key = (
            version[0],
            settings.RELEVANCE_PREFILTER_ENABLED,
            settings.KEYWORD_FIELD_WEIGHT,
            self.embed_model,
            self.max_candidates,
        )
        entry = self._tables.get(key)
        if entry is not None and entry.version == version:
            return entry
        if entry is None or self.max_candidates or version[1] < entry.version[1] or entry.table.dead_fraction > 0.5:
            entry = self._build(settings, version)
        else:
            self._apply(
                entry,
                _load_rows(settings, self.embed_model, changed_since=entry.since, after_id=entry.version[1]),
                settings,
            )
            entry.version = version
        entry.scopes = (
            known_scopes(settings)
            if self.max_candidates
            else sorted(entry.table.live_scopes() | set(entry.meta_scopes.values()) | {GLOBAL_SCOPE})
        )
        self._tables[key] = entry
        return entry

    def _build(self, settings: Settings, version: tuple) -> _Table:
        dim = self.encoder.dim if self.encoder else None
        entry = _Table(version, ScoringTable([], settings.KEYWORD_FIELD_WEIGHT, dim=dim), None)
        self._apply(entry, _load_rows(settings, self.embed_model, limit=self.max_candidates), settings)
        entry.table.index.freeze()
        entry.table.arrays()  # stack the embedding matrix now, not on the first prompt
        return entry

    def _apply(self, entry: _Table, rows, settings: Settings) -> None:
        import numpy as np

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
        from cairn_cli.core.store.memories import store_embeddings

        if not cands:
            return []
        vecs = self.encoder.encode([embedding_text(c.content, c.keywords) for c in cands])
        store_embeddings([c.id for c in cands], vecs, self.encoder.name)
        return vecs

    def embed(self, texts: list[str]):
        return self.encoder.encode(texts)


def _load_rows(
    settings: Settings, embed_model: str | None, *, changed_since=None, after_id: int = 0, limit: int | None = None
):
    """(Candidate, embedding blob or None, superseded?, updated_at) per memory: all live ones, or the rows
    changed since a point (superseded ones included, so that they leave the table), or the newest `limit`."""
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
    ]
    if embed_model:
        fields.append(Memory.embedding)
    query = Memory.select(*fields)
    if changed_since is not None:
        query = query.where((Memory.updated_at >= changed_since) | (Memory.id > after_id))
    else:
        query = query.where(Memory.superseded_by.is_null())
    query = (
        query.order_by(Memory.updated_at.desc(), Memory.id.desc()).limit(limit) if limit else query.order_by(Memory.id)
    )
    for m in query:
        usable = bool(embed_model) and m.embedding is not None and m.embedding_model == embed_model
        yield (
            Candidate(
                id=m.id,
                content=m.content,
                keywords=list(m.keywords),
                scope=m.scope,
                kind=m.kind,
                confidence=m.confidence,
                updated_at=m.updated_at,
                source_ref=m.source_ref,
                has_embedding=usable,
            ),
            m.embedding if usable else None,
            m.superseded_by is not None,
            m.updated_at,
        )


def _minmax(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    return [1.0] * len(values) if hi - lo < 1e-12 else [(v - lo) / (hi - lo) for v in values]


def rerank_stage(scored: list[Scored], query: str, reranker: Reranker, blend: float) -> tuple[list[Scored], int]:
    """Cross-encoder scores, the floor, the normalised blend. Returns the survivors best first and the drop count."""
    if not scored:
        return [], 0
    raw = reranker.logits(query, [s.candidate.content for s in scored])
    native = reranker.score_from_logits(raw)
    for s, r, n in zip(scored, raw, native):
        s.components.update(
            reranker_raw=round(r, 6),
            reranker_score=round(n, 6),
            reranker_floor=reranker.floor,
            reranker_dropped=n < reranker.floor,
        )
    kept = [s for s, n in zip(scored, native) if n >= reranker.floor]
    if not kept:
        return [], len(scored)
    comp_norm = _minmax([s.score for s in kept])
    rer_norm = _minmax([s.components["reranker_score"] for s in kept])
    for s, c, r in zip(kept, comp_norm, rer_norm):
        s.components.update(composite_norm=round(c, 6), reranker_norm=round(r, 6), blend=blend)
        s.score = (1 - blend) * c + blend * r
        s.components["final"] = round(s.score, 6)
    kept.sort(key=lambda s: (-s.score, -s.candidate.id))
    return kept, len(scored) - len(kept)


def rank(request: RankRequest, settings: Settings, engine: RankEngine) -> RankResult:
    """Rank the memories in scope for the prompt (+ transcript), format the block, and log each delivery."""
    clock = _Clock()
    k = request.k if request.k is not None else settings.RANK_K
    if k < 1:
        raise InvalidInput(f"-k must be at least 1 (got {k})", "pass -k 5")
    if not request.session_id or not request.session_id.strip():
        raise InvalidInput("the session id is empty", "pass --session NAME")
    notes: list[str] = []
    try:
        context = build_context_window(
            request.prompt,
            request.transcript,
            max_turns=settings.CONTEXT_MAX_TURNS,
            max_chars=settings.CONTEXT_MAX_CHARS,
        )
    except NotFound as exc:
        if request.hook is None:
            raise
        context = build_context_window(
            request.prompt, None, max_turns=settings.CONTEXT_MAX_TURNS, max_chars=settings.CONTEXT_MAX_CHARS
        )
        notes.append(f"transcript ignored: {exc.message}")
    clock.lap("context")
    entry = engine.table(settings)
    clock.lap("table")
    scope = request.scope
    if scope and scope not in entry.scopes:
        if request.strict_scope:
            raise InvalidInput(
                f"unknown scope {scope!r} (known: {', '.join(entry.scopes)})",
                "pass one of the known scopes or add memories with --scope first",
            )
        notes.append(f"scope {scope!r} has no memories yet: global memories only")
        scope = GLOBAL_SCOPE
    sims = None
    if engine.encoder is not None and len(entry.table):
        query_vec = engine.embed([context.text])[0]
        clock.lap("embed")
        sims = entry.table.similarities(query_vec)
    reranker = engine.reranker
    pool = max(k, settings.RERANK_CANDIDATES) if reranker else k
    scored = entry.table.score(
        context.text,
        sims,
        scope=scope,
        weights=settings.weights(),
        half_life_days=settings.RECENCY_HALF_LIFE_DAYS,
        top=pool,
    )
    dropped = {"prefilter": entry.prefiltered(scope), "min_score": 0, "floor": 0}
    positive = [s for s in scored if s.score > 0 and s.score >= settings.RANK_MIN_SCORE]
    dropped["min_score"] = len(scored) - len(positive)
    for s in positive:
        s.components["reranker"] = reranker.name if reranker else NO_RERANKER
        s.components["ranker"] = engine.ranker
    clock.lap("score")
    if reranker is not None:
        positive, dropped["floor"] = rerank_stage(
            positive[: settings.RERANK_CANDIDATES], context.text, reranker, settings.RERANK_BLEND
        )
        clock.lap("rerank")
    in_scope = int(entry.table.in_scope(scope).sum()) if len(entry.table) else 0
    result = _deliver(
        request,
        settings,
        context,
        positive[:k],
        dropped,
        in_scope + dropped["prefilter"],
        engine,
        scope=scope,
        notes=notes,
    )
    clock.lap("log")
    result.timings_ms = clock.laps
    return result


class _Clock:
    """Per-stage wall time, reported with every ranking (where the hot path's milliseconds go)."""

    def __init__(self):
        self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round((now - self.last) * 1000, 2)
        self.last = now


def _deliver(
    request: RankRequest,
    settings: Settings,
    context: ContextWindow,
    chosen: list[Scored],
    dropped: dict,
    total: int,
    engine: RankEngine,
    *,
    scope: str | None,
    notes: list[str],
) -> RankResult:
    from cairn_cli.core.experiment import ab
    from cairn_cli.core.experiment import rules as generation_rules
    from cairn_cli.core.store import hookstate
    from cairn_cli.db.tables import ephemeral_proxy

    turn = request.turn if request.turn is not None else deliveries.next_turn(request.session_id, settings)
    rules_text, version, arm, b_text = "", None, None, ""
    if request.with_rules or request.log:
        live = generation_rules.live(settings)
        version = live.version
        if request.hook is not None:  # the write-side A/B: this prompt's arm, and the version its memories carry
            arm, version, instruction = ab.assign(
                request.session_id,
                turn,
                is_subagent=bool(request.hook.get("is_subagent")),
                settings=settings,
                live=live,
            )
            b_text = ab.render_b(instruction, version) if instruction else ""
        if request.with_rules:
            rules_text = generation_rules.render(live, request.scope or GLOBAL_SCOPE)
    embed_model = engine.encoder.name if engine.encoder else None
    items = []
    for position, s in enumerate(chosen, start=1):
        c = s.candidate
        s.components["embed_model"] = embed_model
        s.components["weights"] = settings.weights()
        items.append(
            RankedMemory(
                id=c.id,
                content=c.content,
                kind=c.kind,
                scope=c.scope,
                confidence=c.confidence,
                source_ref=c.source_ref,
                rank=position,
                score=round(s.score, 6),
                components=s.components,
            )
        )
    budget = settings.INJECTION_MAX_CHARS - sum(len(t) + 1 for t in (rules_text, b_text) if t)
    block = format_block(
        [vars(i) for i in items], session=request.session_id, turn=turn, context_key=context.key, max_chars=budget
    )
    items = items[: block.count("<memory ")]
    reranker_model = engine.reranker.name if engine.reranker else NO_RERANKER
    result = RankResult(
        session_id=request.session_id,
        turn=turn,
        context=context,
        items=items,
        block=block,
        reranker_model=reranker_model,
        ranker=engine.ranker,
        embed_model=embed_model,
        candidates=total,
        dropped=dropped,
        notes=list(engine.notes) + context.notes + notes,
        rules=rules_text,
        generation_version=version,
        arm=arm,
        arm_instruction=b_text,
    )
    if request.commit_deadline is not None and time.time() > request.commit_deadline:
        raise DeadlineExceeded(
            "the caller stopped waiting before the deliveries were logged", "raise CAIRN_DAEMON_TIMEOUT_MS"
        )
    with ephemeral_proxy.atomic():
        if request.log and items:
            result.delivery_ids = deliveries.record(
                [
                    deliveries.DeliveryInput(
                        session_id=request.session_id,
                        turn=turn,
                        memory_id=i.id,
                        context_window=context.text,
                        context_key=context.key,
                        rank=i.rank,
                        final_score=i.score,
                        score_components=i.components,
                        reranker_model=reranker_model,
                        ranker=engine.ranker,
                        layer=request.layer,
                        scope=scope or GLOBAL_SCOPE,
                        arm=arm,
                    )
                    for i in items
                ],
                settings,
            )
        if request.log:  # the turn's prompt, scope and rules version: what Stop and engagement need later
            hookstate.record_turn(
                request.session_id,
                turn,
                context_key=context.key,
                hook={
                    **(request.hook or {}),
                    "arm": arm,
                    "prompt": context.prompt,
                    "scope": request.scope,
                    "generation_version": version,
                    "source_ref": version,
                    "delivered": [i.id for i in items],
                },
            )
    return result
