"""The gate: a trained student deploys only when the ranking users would get with it blended in beats the live
ranking on the same held-out queries (nDCG@10 up by a margin, R@5 down by no more than a tolerance). The method is
written out in docs/learning.md."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings
from cairn_cli.core.learning.attempt import TrainOptions, TrainReport
from cairn_cli.core.learning.export import LabelRow
from cairn_cli.core.learning.incumbent import Incumbent
from cairn_cli.core.learning.pairs import Split, agreement, by_query
from cairn_cli.core.metrics import ndcg
from cairn_cli.core.ranking import learned as learned_profile
from cairn_cli.core.ranking.profiles import Profile

AUTO_PROMOTE_SAFE = 0.90
GATE_K = 10  # the gate ranks each held-out query's top 10: R@5 and nDCG@10
RELEVANT_GRADE = 2  # a memory graded >= 2 counts as relevant for R@5


@dataclass
class RankingCase:
    """One held-out query as the gate ranks it. From graded deliveries: its context window over the memory store
    in its scope (`rows` None, `grades` by memory id). From `--data` rows: over the query's own rows (`rows` are
    the candidates' texts, `grades` by position)."""

    key: str
    query: str
    scope: str | None
    grades: dict[int, int]
    rows: list[str] | None = None

    @property
    def relevant(self) -> set[int]:
        return {i for i, g in self.grades.items() if g >= RELEVANT_GRADE}


@dataclass
class Ranking:
    """The held-out ranking quality of one pipeline: mean R@5 (grade >= 2 relevant; what the agent is shown)
    and nDCG@10 (gain 2^grade - 1) over the held-out queries that have a relevant memory, each ranking condensed to
    the memories that were graded (see docs/learning.md)."""

    r5: float
    ndcg10: float
    queries: int
    per_query: list[tuple[float, float]] = field(default_factory=list)


def ranking_cases(split_rows: list[LabelRow], keys: set[str], *, from_store: bool) -> list[RankingCase]:
    """The held-out queries of `keys` with their grades (the newest grade of a memory wins)."""
    out = []
    for key, group in by_query(split_rows, keys):
        if from_store:
            grades = {r.memory_id: r.grade for r in group if r.memory_id is not None}
            out.append(RankingCase(key, group[-1].query, group[-1].scope, grades))
        else:
            texts = list(dict.fromkeys(r.memory for r in group))
            grades = {}
            for r in group:
                grades[texts.index(r.memory)] = r.grade
            out.append(RankingCase(key, group[0].query, None, grades, texts))
    return out


class StudentReranker:
    """A freshly trained student as the rank pipeline would serve it once deployed (its logit is its native
    score; the floor a new student version gets is CAIRN_CROSS_ENCODER_STUDENT_FLOOR)."""

    def __init__(self, model, floor: float, name: str = "candidate"):
        self.model, self.floor, self.name = model, floor, name

    def logits(self, query: str, texts: list[str], *, prompt: str | None = None) -> list[float]:
        # the pair cut as in training (the tokenizer's truncation); served, a window too long for max length
        # loses its oldest end and keeps `prompt`: the gate and production differ only on such windows
        return self.model.score([(query, t) for t in texts]) if texts else []

    def score_from_logits(self, raw: list[float]) -> list[float]:
        return list(raw)


def pipeline_rankings(
    cases: list[RankingCase],
    rerankers: dict,
    settings: Settings,
    *,
    profile: Callable[[Profile], Profile] | None = None,
) -> dict[str, list[list[int]]]:
    """Each held-out query ranked by the production pipeline (core/ranking: the engine's table over the memory
    store, or the query's own rows; composite -> the best RERANK_CANDIDATES reranked, floor, blend) once per
    reranker (None: the composite alone). `profile`: what a scope's shipped profile is ranked as (a learned
    profile's weights, core/learning/fusion.py; None: the shipped one). Returns, per reranker name, each case's
    ranking as deep as the rerank stage goes (ranking_quality condenses it to the graded memories, then cuts it at 5
    and GATE_K)."""
    import numpy as np

    from cairn_cli.core.ids import GLOBAL_SCOPE
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.core.ranking.pipeline import select
    from cairn_cli.core.ranking.profiles import composite_floor
    from cairn_cli.core.ranking.profiles import profile as get_profile
    from cairn_cli.core.ranking.scoring import Candidate, ScoringTable

    engine = RankEngine.in_process(settings, with_reranker=False)
    out: dict[str, list[list[int]]] = {name: [] for name in rerankers}
    store_cases = [c for c in cases if c.rows is None]
    entry = engine.table(settings) if store_cases else None
    vecs = dict(zip((c.key for c in store_cases), engine.embed([c.query for c in store_cases])))
    now = utcnow()
    for case in cases:
        if case.rows is None:
            assert entry is not None
            table, scope = entry.table, case.scope if case.scope in entry.scopes else GLOBAL_SCOPE
            sims = table.similarities(np.asarray(vecs[case.key])) if len(table) else None
        else:
            encoded = engine.embed([case.query, *case.rows])
            table, scope = ScoringTable([], settings.KEYWORD_FIELD_WEIGHT, dim=engine.encoder.dim), None
            for i, (text, vec) in enumerate(zip(case.rows, encoded[1:])):
                table.upsert(Candidate(i, text, [], GLOBAL_SCOPE, "fact", 0.75, now), vec)
            sims = table.similarities(np.asarray(encoded[0]))
        # the profile and composite floor `cairn rank` ranks the scope with (auto: its kind of store's)
        shipped = get_profile(settings, kind=table.kind(scope))
        ranked_as = profile(shipped) if profile is not None else shipped
        floor, _ = composite_floor(settings, ranked_as.name, engine.embed_model)
        for name, reranker in rerankers.items():
            chosen = select(
                table,
                case.query,
                sims,
                scope=scope,
                k=max(GATE_K, settings.RERANK_CANDIDATES),  # an explored memory may sit below the top 10
                settings=settings,
                reranker=reranker,
                ranker="gate",
                profile=ranked_as,
                floor=floor if case.rows is None else 0.0,  # --data rows are the candidates already chosen
            ).chosen
            out[name].append([s.candidate.id for s in chosen])
    return out


def ranking_quality(cases: list[RankingCase], ranked: list[list[int]]) -> Ranking:
    """R@5 and nDCG@10 of one pipeline's rankings of `cases` (see Ranking)."""
    per_query = []
    for case, ids in zip(cases, ranked):
        relevant = case.relevant
        if not relevant:
            continue
        ids = [i for i in ids if i in case.grades]  # condensed: a memory nobody graded says nothing either way
        r5 = len(relevant & set(ids[:5])) / len(relevant)
        nd = ndcg([case.grades.get(i, 0) for i in ids[:GATE_K]], list(case.grades.values()), GATE_K) or 0.0
        per_query.append((r5, nd))
    if not per_query:
        return Ranking(float("nan"), float("nan"), 0)
    n = len(per_query)
    return Ranking(sum(r for r, _ in per_query) / n, sum(d for _, d in per_query) / n, n, per_query)


def gate(candidate: Ranking, live: Ranking, *, margin: float, recall_tolerance: float) -> tuple[bool, str]:
    """Deploy when the deployed pipeline ranks the held-out queries better than the live one: nDCG@10 at least
    `margin` higher, and R@5 (what the agent is shown) at most `recall_tolerance` lower. Both on the same queries."""
    if not candidate.queries or math.isnan(candidate.ndcg10) or math.isnan(live.ndcg10):
        return False, "no held-out query with a relevant (grade >= 2) memory to judge on"
    numbers = (
        f"nDCG@10 {candidate.ndcg10:.3f} vs live {live.ndcg10:.3f} (margin {margin:+.3f}), "
        f"R@5 {candidate.r5:.3f} vs live {live.r5:.3f} (tolerance {recall_tolerance:.3f}), "
        f"{candidate.queries} held-out queries"
    )
    if candidate.ndcg10 < live.ndcg10 + margin:
        return False, f"the ranking does not improve enough: {numbers}"
    if candidate.r5 < live.r5 - recall_tolerance:
        return False, f"fewer relevant memories shown: {numbers}"
    return True, f"the ranking improves: {numbers}"


def judge(model, inc: Incumbent, split: Split, opts: TrainOptions, report: TrainReport, settings: Settings) -> bool:
    """Student and incumbent on the SAME held-out queries. Pairwise agreement is reported; the gate is the ranking
    users get: each held-out query ranked by the production pipeline with the student blended in vs the live one."""

    def student_scorer(query: str, texts: list[str]) -> list[float]:
        return model.score([(query, t) for t in texts])

    report.student_agreement = round(agreement(student_scorer, split.held_pairs), 4)
    report.incumbent_agreement = round(agreement(inc.scorer, split.held_pairs), 4)
    cases = ranking_cases(split.rows, split.held_keys, from_store=opts.data is None)
    student = StudentReranker(model, settings.CROSS_ENCODER_STUDENT_FLOOR)
    # both under the profile users get now (a deployed learned profile's weights: core/ranking/learned.py)
    served = learned_profile.live(settings)
    ranked = pipeline_rankings(cases, {"student": student, "live": inc.reranker}, settings, profile=served)
    mine, live = ranking_quality(cases, ranked["student"]), ranking_quality(cases, ranked["live"])
    report.ranking_queries = mine.queries
    report.student_r5, report.incumbent_r5 = _round(mine.r5), _round(live.r5)
    report.student_ndcg10, report.incumbent_ndcg10 = _round(mine.ndcg10), _round(live.ndcg10)
    pairs = list(zip(mine.per_query, live.per_query))
    report.queries_better = sum(a[1] > b[1] + 1e-9 for a, b in pairs)
    report.queries_worse = sum(a[1] < b[1] - 1e-9 for a, b in pairs)
    report.deploy_margin, report.recall_tolerance = opts.deploy_margin, opts.recall_tolerance
    report.auto_promote_safe = report.student_agreement >= AUTO_PROMOTE_SAFE
    passed, report.reason = gate(mine, live, margin=opts.deploy_margin, recall_tolerance=opts.recall_tolerance)
    return passed


def _round(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)
