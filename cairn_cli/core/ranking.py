"""The rank pipeline: context window -> candidates in scope -> prefilter -> composite -> rerank stage -> top k.

The rerank stage is a seam: `Reranker` is anything with a name, a floor and `score(query, texts)`. With no
reranker the stage is "none" and the composite order stands; the provenance says so on every delivery.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from cairn_cli.config import Settings
from cairn_cli.core import deliveries
from cairn_cli.core.context import ContextWindow, build_context_window
from cairn_cli.core.injection import format_block
from cairn_cli.core.prefilter import is_self_referential_meta
from cairn_cli.core.scoring import GLOBAL_SCOPE, Candidate, Scored, composite
from cairn_cli.core.store import open_stores
from cairn_cli.errors import InvalidInput

NO_RERANKER = "none"


class Reranker(Protocol):
    name: str
    floor: float

    def score(self, query: str, texts: list[str]) -> list[float]: ...


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


def known_scopes(settings: Settings) -> list[str]:
    from cairn_cli.db.tables import Memory

    open_stores(settings)
    rows = Memory.select(Memory.scope).where(Memory.superseded_by.is_null()).distinct()
    return sorted({r.scope for r in rows} | {GLOBAL_SCOPE})


def load_candidates(settings: Settings, scope: str | None, embed_model: str | None):
    """Live memories in scope (scope + global; all when no scope) and their embeddings from `embed_model`."""
    from cairn_cli.db.tables import Memory

    query = Memory.select().where(Memory.superseded_by.is_null()).order_by(Memory.id)
    if scope and scope != GLOBAL_SCOPE:
        query = query.where(Memory.scope.in_([scope, GLOBAL_SCOPE]))
    elif scope == GLOBAL_SCOPE:
        query = query.where(Memory.scope == GLOBAL_SCOPE)
    cands, blobs = [], []
    for m in query:
        usable = m.embedding is not None and m.embedding_model == embed_model
        cands.append(Candidate(id=m.id, content=m.content, keywords=list(m.keywords), scope=m.scope, kind=m.kind,
                               confidence=m.confidence, updated_at=m.updated_at, source_ref=m.source_ref,
                               has_embedding=usable))
        blobs.append(m.embedding if usable else None)
    return cands, blobs


def prefilter(cands: list[Candidate], settings: Settings) -> tuple[list[Candidate], int]:
    if not settings.RELEVANCE_PREFILTER_ENABLED:
        return cands, 0
    kept = [c for c in cands if not is_self_referential_meta(c.content, c.kind)]
    return kept, len(cands) - len(kept)


def select(scored: list[Scored], settings: Settings, k: int, reranker: Reranker | None) -> tuple[list[Scored], dict]:
    """Apply the rerank stage (none yet: composite order) and the minimum score; keep the top k."""
    dropped = {"min_score": 0}
    kept = []
    for s in scored:
        s.components["reranker"] = reranker.name if reranker else NO_RERANKER
        if s.score < settings.RANK_MIN_SCORE or s.score <= 0.0:
            dropped["min_score"] += 1
            continue
        kept.append(s)
    return kept[:k], dropped


def rank(request: RankRequest, settings: Settings, *, reranker: Reranker | None = None) -> RankResult:
    """Rank the memories in scope for the prompt (+ transcript), print-ready, and log each delivery."""
    import numpy as np

    from cairn_cli.ml.models import get_encoder

    open_stores(settings)
    k = request.k if request.k is not None else settings.RANK_K
    if k < 1:
        raise InvalidInput(f"-k must be at least 1 (got {k})", "pass -k 5")
    if not request.session_id or not request.session_id.strip():
        raise InvalidInput("the session id is empty", "pass --session NAME")
    context = build_context_window(request.prompt, request.transcript, max_turns=settings.CONTEXT_MAX_TURNS,
                                   max_chars=settings.CONTEXT_MAX_CHARS)
    if request.scope and request.scope not in known_scopes(settings):
        raise InvalidInput(f"unknown scope {request.scope!r} (known: {', '.join(known_scopes(settings))})",
                           "pass one of the known scopes or add memories with --scope first")
    encoder = get_encoder(settings.EMBED_MODEL)
    cands, blobs = load_candidates(settings, request.scope, encoder.name)
    total = len(cands)
    cands_kept, n_meta = prefilter(cands, settings)
    keep_ids = {c.id for c in cands_kept}
    blobs = [b for c, b in zip(cands, blobs) if c.id in keep_ids]
    sims = None
    if cands_kept:
        query_vec = encoder.encode([context.text])[0]
        matrix = np.stack([np.frombuffer(b, dtype=np.float32) if b is not None else
                           np.zeros(encoder.dim, dtype=np.float32) for b in blobs])
        sims = (matrix @ query_vec).tolist()
    scored = composite(cands_kept, context.text, sims, scope=request.scope, weights=settings.weights(),
                       half_life_days=settings.RECENCY_HALF_LIFE_DAYS, keyword_weight=settings.KEYWORD_FIELD_WEIGHT)
    chosen, dropped = select(scored, settings, k, reranker)
    dropped["prefilter"] = n_meta
    return _deliver(request, settings, context, chosen, dropped, total, encoder.name, reranker)


def _deliver(request: RankRequest, settings: Settings, context: ContextWindow, chosen: list[Scored], dropped: dict,
             total: int, embed_model: str | None, reranker: Reranker | None) -> RankResult:
    turn = request.turn if request.turn is not None else deliveries.next_turn(request.session_id, settings)
    items = []
    for position, s in enumerate(chosen, start=1):
        c = s.candidate
        s.components["embed_model"] = embed_model
        s.components["weights"] = settings.weights()
        items.append(RankedMemory(id=c.id, content=c.content, kind=c.kind, scope=c.scope, confidence=c.confidence,
                                  source_ref=c.source_ref, rank=position, score=round(s.score, 6),
                                  components=s.components))
    block = format_block([vars(i) for i in items], session=request.session_id, turn=turn, context_key=context.key,
                         max_chars=settings.INJECTION_MAX_CHARS)
    shown = block.count("<memory ")
    items = items[:shown]
    reranker_model = reranker.name if reranker else NO_RERANKER
    result = RankResult(session_id=request.session_id, turn=turn, context=context, items=items, block=block,
                        reranker_model=reranker_model, ranker="cairn", embed_model=embed_model, candidates=total,
                        dropped=dropped)
    if request.log and items:
        result.delivery_ids = deliveries.record([
            deliveries.DeliveryInput(session_id=request.session_id, turn=turn, memory_id=i.id,
                                     context_window=context.text, context_key=context.key, rank=i.rank,
                                     final_score=i.score, score_components=i.components,
                                     reranker_model=reranker_model, layer=request.layer,
                                     scope=request.scope or GLOBAL_SCOPE)
            for i in items], settings)
    return result
