"""`rank()`: one ranking, pure: a query (the context window, scope, k) in, the ranked memories out — the engine's
warm table, then the pipeline (core/ranking/pipeline.py). The prompt turn around it (the A/B arm, the window, the
injection block, the delivery log) is core/hooks/prompt.py."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cairn_cli.config import Settings
from cairn_cli.core.ids import GLOBAL_SCOPE
from cairn_cli.core.ranking import learned
from cairn_cli.core.ranking.context import ContextWindow
from cairn_cli.core.ranking.engine import RankEngine
from cairn_cli.core.ranking.pipeline import Selection, rerank, shortlist
from cairn_cli.core.ranking.profiles import composite_floor
from cairn_cli.core.ranking.profiles import profile as get_profile
from cairn_cli.core.ranking.query import embed_texts, has_context, term_weights, window_weights
from cairn_cli.errors import InvalidInput


@dataclass
class RankQuery:
    context: ContextWindow
    k: int
    scope: str | None = None
    strict_scope: bool = True  # False: an unknown scope ranks the global memories (a new project) instead of failing
    explore: bool = False  # explore at CAIRN_EXPLORE_RATE (the hook's prompts only: they get graded)


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
class Ranking:
    items: list[RankedMemory]  # best first, before the injection block's limit
    scope: str | None  # the scope ranked: the query's, or global for an unknown one (strict_scope False)
    reranker_model: str
    ranker: str
    embed_model: str | None
    candidates: int
    dropped: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def rank(query: RankQuery, settings: Settings, engine: RankEngine, clock: Clock | None = None) -> Ranking:
    """Rank the memories in scope for the query's context window; `clock` gets a lap per stage."""
    clock = clock or Clock()
    notes: list[str] = []
    context = query.context
    entry = engine.table(settings)
    clock.lap("table")
    scope = query.scope
    if scope and scope not in entry.scopes:
        if query.strict_scope:
            raise InvalidInput(
                f"unknown scope {scope!r} (known: {', '.join(entry.scopes)})",
                "pass one of the known scopes or add memories with --scope first",
            )
        notes.append(f"scope {scope!r} has no memories yet: global memories only")
        scope = GLOBAL_SCOPE
    # the prompt is the query, the earlier turns context that can only add (core/ranking/query.py): one vector for
    # the prompt alone, two (prompt, window) in one call when there are earlier turns
    weights = window_weights(settings)
    vecs = None
    if engine.encoder is not None and len(entry.table):
        vecs = engine.embed(embed_texts(context, weights))
        clock.lap("embed")
    with engine.reading(entry):  # the table as it is: no refresh applies rows while the composite reads it
        profile = get_profile(settings, kind=entry.table.kind(scope))  # auto: the scope's kind of store
        if engine.profile_as is not None:  # the gate ranking a candidate learned profile
            profile = engine.profile_as(profile)
        else:
            profile = learned.served(profile, settings, engine.embed_model)  # its learned weights, when deployed
        floor, _ = composite_floor(settings, profile.name, engine.embed_model)
        sims = floor_sims = None
        if vecs is not None and len(vecs) > 1:  # the floor reads the window's cosine without the margin (query.py)
            sims, floor_sims = entry.table.window_similarities(vecs[0], vecs[1], weights.margin)
        elif vecs is not None:
            sims = entry.table.similarities(vecs[0])
        short = shortlist(
            entry.table,
            context.text,
            sims,
            scope=scope,
            k=query.k,
            settings=settings,
            reranker=engine.reranker,
            ranker=engine.ranker,
            prompt=context.prompt,
            profile=profile,
            floor=floor,
            explore=settings.EXPLORE_RATE if query.explore else 0.0,
            query_terms=term_weights(context, weights),
            window=weights.as_dict(context.turns_used) if has_context(context) else None,
            floor_similarities=floor_sims,
        )
        prefiltered, in_scope = entry.prefiltered(scope), entry.in_scope_count(scope)
    selection = rerank(short)  # the cross-encoder's stage, the table no longer held
    clock.lap("score")
    if selection.reranked:  # the composite's scoring and the rerank stage apart: the plan's budget bounds the latter
        clock.split("score", "rerank", selection.rerank_ms)
    notes.extend(selection.notes)
    embed_model = engine.encoder.name if engine.encoder else None
    return Ranking(
        items=_ranked(selection, embed_model),
        scope=scope,
        reranker_model=selection.reranker_model,
        ranker=engine.ranker,
        embed_model=embed_model,
        candidates=in_scope + prefiltered,
        dropped={"prefilter": prefiltered, **selection.dropped},
        notes=notes,
    )


def _ranked(selection: Selection, embed_model: str | None) -> list[RankedMemory]:
    """The chosen memories in their order, each with its score components (the embedder and the weights too)."""
    items = []
    for position, s in enumerate(selection.chosen, start=1):
        c = s.candidate
        s.components["embed_model"] = embed_model
        s.components["weights"] = selection.weights
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
    return items


class Clock:
    """Per-stage wall time, reported with every ranking (where the hot path's milliseconds go)."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round((now - self.last) * 1000, 2)
        self.last = now

    def split(self, name: str, part: str, part_ms: float) -> None:
        """Move `part_ms` of lap `name` into a lap of its own, `part`."""
        self.laps[part] = round(part_ms, 2)
        self.laps[name] = round(max(0.0, self.laps[name] - part_ms), 2)
