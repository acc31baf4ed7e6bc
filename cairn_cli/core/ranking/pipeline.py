"""The rank pipeline, pure: the scoring table and the query in, the chosen memories out (no database, no model
loading; the engine's encoder and reranker are passed in, already warm). The stages (composite,
floors, the rerank blend, exploration) are described in docs/hot-path.md."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from cairn_cli.config import Settings
from cairn_cli.core.ranking.diversity import SHIPPED, Distinct, Rule
from cairn_cli.core.ranking.engine import Reranker, RerankSkipped
from cairn_cli.core.ranking.lexical import Scored, ScoreTable
from cairn_cli.core.ranking.profiles import Profile

NO_RERANKER = "none"


@dataclass
class Selection:
    """What the pipeline chose, best first, how many it dropped at each stage, and which reranker ordered it."""

    chosen: list[Scored]
    dropped: dict = field(default_factory=dict)
    reranked: bool = False
    reranker_model: str = NO_RERANKER
    notes: list[str] = field(default_factory=list)
    weights: dict = field(default_factory=dict)  # the profile's, as applied
    rerank_ms: float = 0.0  # the rerank stage's wall time (cross-encoder, floor, blend): what the plan's budget bounds


def select(table: ScoreTable, query: str, similarities, **options) -> Selection:
    """The best `k` memories of `table` in `scope` for `query` (`similarities`: the query's cosine per slot, or
    None without an embedding model; `prompt`: the part of the query a pair never loses to its token bound).

    A reranker with a plan (core/ranking/plan.py) rescores as many candidates as the plan's budget allows, in its
    precision and max length, and every delivery records that plan; a plan that found no room skips the stage,
    and so does a reranker that cannot score in time (RerankSkipped: the daemon's queue under load).
    `shortlist` (whose keywords `options` are) then `rerank`: the table is read by the first alone."""
    return rerank(shortlist(table, query, similarities, **options))


@dataclass
class Shortlist:
    """The composite's part of a selection: the candidates past the composite floor, best first, and what the
    rerank stage needs to finish it (no reference to the table: another thread may refresh it meanwhile)."""

    positive: list[Scored]
    dropped: dict
    notes: list[str]
    weights: dict
    query: str
    prompt: str | None
    k: int
    explore: float
    reranker: Reranker | None  # None: no stage (none live, or its plan skips it)
    plan: dict | None
    candidates: int  # how many the stage rescores
    depth: int  # how deep the ranking goes without the stage (exploration's pool)
    blend: float
    distinct: Distinct  # the near-duplicate test over these candidates (their embeddings' cosines, when any)


def shortlist(
    table: ScoreTable,
    query: str,
    similarities,
    *,
    scope: str | None,
    k: int,
    settings: Settings,
    reranker: Reranker | None,
    ranker: str,
    prompt: str | None = None,
    profile: Profile | None = None,
    floor: float = 0.0,
    explore: float = 0.0,
    repeats: Rule = SHIPPED,
    query_terms: Mapping[str, float] | None = None,
    window: dict | None = None,
    floor_similarities=None,
) -> Shortlist:
    """The composite's scores of the memories in scope and its floor (see `select`). `repeats`: the near-duplicate
    test's thresholds (core/ranking/diversity.py: the shipped ones; benchmarks sweep others); `query_terms`: BM25's
    query (term -> weight; None: every term of `query` at 1); `window`: how the context window's earlier turns were
    weighed (core/ranking/query.py), recorded with every delivery; `floor_similarities`: the similarity the floor's
    relevance reads when it is not the one that ranks (scoring.py)."""
    plan = getattr(reranker, "plan", None) if reranker is not None else None
    notes = []
    if plan and plan.get("skipped"):
        notes.append(plan.get("reason", "rerank skipped: no plan fits the budget"))
        reranker = None
    candidates = int(plan["candidates"]) if plan and not plan.get("skipped") else settings.RERANK_CANDIDATES
    pool = max(k, candidates) if reranker else max(k, settings.RERANK_CANDIDATES) if explore > 0 else k
    profile = profile or Profile("default", settings.weights())
    weights = profile.weights if similarities is not None else {**profile.weights, "similarity": 0.0}

    def composite(top: int) -> tuple[list[Scored], list[Scored], Distinct]:
        scored = table.score(
            query,
            similarities,
            scope=scope,
            weights=weights,
            half_life_days=settings.RECENCY_HALF_LIFE_DAYS,
            top=top,
            neighbour_weight=profile.neighbour_weight,
            # the joined keywords are the daemon's (with an embedder): lexically alone, a turn already borrows its
            # neighbour's keywords through the neighbour share, and the fallback ranks exactly as this table then does
            context_keywords=profile.context_keywords if similarities is not None else 0.0,
            coverage=profile.coverage and similarities is not None,
            query_terms=query_terms,
            floor_similarities=floor_similarities if similarities is not None else None,
        )
        # the composite floor reads the relevance part of the score (the composite without its scope part, which
        # alone lifts every memory in scope above zero); floor off (0) keeps every positive composite
        positive = [s for s in scored if s.score > 0 and (floor <= 0 or s.components["relevance"] >= floor)]
        return scored, positive, Distinct(table.cosines([s.candidate.id for s in positive]), repeats)

    scored, positive, distinct = composite(pool)
    # without the stage the block is the composite's order: when repeats of a better memory leave fewer than k
    # distinct ones in what was read and the table has more, read deeper (a store with no repeats pays nothing)
    while reranker is None and len(scored) >= pool and distinct.repeats(positive, k):
        pool *= 2
        scored, positive, distinct = composite(pool)
    dropped = {"min_score": len(scored) - len(positive), "floor": 0, "duplicate": 0}
    learned_by = (
        {"neighbour_weight": profile.neighbour_weight, "context_keywords": profile.context_keywords}
        if profile.chosen_by.startswith("learned:")
        else None
    )
    if scored and not positive:
        best = max(s.components["relevance"] for s in scored)
        notes.append(f"abstained: no memory reaches the composite floor {floor:g} (best relevance {best:.3f})")
    for s in positive:
        s.components["reranker"] = reranker.name if reranker else NO_RERANKER
        s.components["ranker"] = ranker
        s.components["profile"] = profile.name
        s.components["profile_by"] = profile.chosen_by
        if learned_by:  # a learned profile's neighbour terms (its weights are logged as every profile's are)
            s.components["profile_params"] = learned_by
        s.components["composite_floor"] = floor
        if window:
            s.components["window"] = window
        if plan:
            s.components["rerank_plan"] = {key: plan.get(key) for key in PLAN_FIELDS}
    return Shortlist(
        positive,
        dropped,
        notes,
        weights,
        query,
        prompt,
        k,
        explore,
        reranker,
        plan,
        candidates,
        max(k, settings.RERANK_CANDIDATES),
        settings.RERANK_BLEND,
        distinct,
    )


def rerank(short: Shortlist) -> Selection:
    """The rerank stage over the shortlist (when there is one), then exploration's draw and the top k."""
    query, k, explore, notes = short.query, short.k, short.explore, short.notes
    reranker, positive, dropped = short.reranker, short.positive, short.dropped
    if reranker is not None:
        t0 = time.perf_counter()
        try:
            kept, dropped["floor"] = rerank_stage(
                positive[: short.candidates], query, reranker, short.blend, prompt=short.prompt
            )
        except RerankSkipped as exc:  # no turn in time: the composite's order, and every delivery says so
            notes.append(str(exc))
            for s in positive:
                s.components["reranker"] = NO_RERANKER
                s.components["rerank_plan"] = {**s.components.get("rerank_plan", {}), "skipped": True}
        else:
            stage_ms = (time.perf_counter() - t0) * 1000.0
            kept, dropped["duplicate"] = short.distinct.select(kept, k)
            chosen = explored(kept, k, query, explore)
            return Selection(
                chosen,
                dropped,
                reranked=True,
                reranker_model=reranker.name,
                notes=notes,
                weights=short.weights,
                rerank_ms=stage_ms,
            )
    ranked, dropped["duplicate"] = short.distinct.select(positive, k)
    return Selection(explored(ranked[: short.depth], k, query, explore), dropped, notes=notes, weights=short.weights)


def _uniform(query: str, salt: str) -> float:
    """A number in [0, 1) drawn from the query: the same query draws the same number."""
    digest = hashlib.sha256(f"{salt}\0{query}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def explored(ranked: list[Scored], k: int, query: str, rate: float) -> list[Scored]:
    """The top `k` of `ranked`; on a `rate` share of queries, its last slot is one of ranked[k:] drawn uniformly
    (see the module note). Every shown memory records the rate; the explored one its rank and propensity."""
    top = ranked[:k]
    if rate <= 0:
        return top
    for s in top:
        s.components["explore_rate"] = rate
    pool = ranked[k:]
    if len(top) < k or not pool or _uniform(query, "explore?") >= rate:
        return top
    index = min(int(_uniform(query, "explore which") * len(pool)), len(pool) - 1)
    pick = pool[index]
    pick.components.update(
        explore_rate=rate, explored_from_rank=k + index + 1, explore_propensity=round(rate / len(pool), 6)
    )
    return [*top[:-1], pick]


PLAN_FIELDS = ("precision", "candidates", "max_length", "budget_ms", "skipped")


def _minmax(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    return [1.0] * len(values) if hi - lo < 1e-12 else [(v - lo) / (hi - lo) for v in values]


def rerank_stage(
    scored: list[Scored], query: str, reranker: Reranker, blend: float, *, prompt: str | None = None
) -> tuple[list[Scored], int]:
    """Cross-encoder scores, the floor, the normalised blend. Returns the survivors best first and the drop count."""
    if not scored:
        return [], 0
    texts = [s.candidate.content for s in scored]
    raw = reranker.logits(query, texts, prompt=prompt)
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
