"""The gate: a trained student deploys only when the ranking users would get with it blended in beats the live
ranking on the same held-out queries, in every form users send them (the hook's window and the prompt alone):
nDCG@10 over both forms up by a margin, and neither form's nDCG@10 or R@5 down by more than a tolerance. The method
is written out in docs/learning.md."""

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
from cairn_cli.core.ranking.context import ContextWindow, window_of
from cairn_cli.core.ranking.profiles import Profile
from cairn_cli.core.text import context_key

AUTO_PROMOTE_SAFE = 0.90
GATE_K = 10  # the gate ranks each held-out query's top 10: R@5 and nDCG@10
RELEVANT_GRADE = 2  # a memory graded >= 2 counts as relevant for R@5
WINDOW, PROMPT, QUERY = "window", "prompt", "query"  # the forms: the hook's window, its prompt alone, a --data query
STORE_FORMS = (WINDOW, PROMPT)


@dataclass
class RankingCase:
    """One held-out query as the gate ranks it. From graded deliveries: its context window (`query`, with the
    prompt hook_state kept, `prompt`) over the memory store in its scope (`rows` None, `grades` by memory id). From
    `--data` rows: over the query's own rows (`rows` are the candidates' texts, `grades` by position)."""

    key: str
    query: str
    scope: str | None
    grades: dict[int, int]
    rows: list[str] | None = None
    prompt: str | None = None

    @property
    def relevant(self) -> set[int]:
        return {i for i, g in self.grades.items() if g >= RELEVANT_GRADE}

    @property
    def forms(self) -> tuple[str, ...]:
        return (QUERY,) if self.rows is not None else STORE_FORMS

    def context(self, form: str) -> ContextWindow:
        """The query in `form`: the window as the hook ranked it (its prompt the query, its earlier turns context:
        core/ranking/query.py), or the prompt alone (a window's first part: context.window_of)."""
        window = window_of(self.query, self.prompt)
        if form == PROMPT:
            return ContextWindow(text=window.prompt, key=context_key(window.prompt), prompt=window.prompt)
        return window


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
            prompt = next((r.prompt for r in reversed(group) if r.prompt), None)
            out.append(RankingCase(key, group[-1].query, group[-1].scope, grades, prompt=prompt))
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


class _Remembered:
    """An encoder that embeds each text once across the gate's rankings (the same prompt and window are ranked
    once per reranker); the same model, so the engine's warm table is the same."""

    def __init__(self, encoder) -> None:
        self.encoder, self.name, self.dim = encoder, encoder.name, encoder.dim
        self._vecs: dict = {}

    def encode(self, texts: list[str], *, progress: bool = False):
        import numpy as np

        todo = [t for t in dict.fromkeys(texts) if t not in self._vecs]
        if todo:
            self._vecs.update(zip(todo, self.encoder.encode(todo)))
        return np.asarray([self._vecs[t] for t in texts])


def pipeline_rankings(
    cases: list[RankingCase],
    rerankers: dict,
    settings: Settings,
    *,
    form: str = WINDOW,
    profile: Callable[[Profile], Profile] | None = None,
    engine=None,
) -> dict[str, list[list[int]]]:
    """Each held-out query, in `form`, ranked by the production pipeline once per reranker (None: the composite
    alone). A store's query goes through `rank()` itself, as `cairn rank` and the hook rank it (core/ranking/rank.py:
    the window's query plan, the scope's profile and composite floor, the best RERANK_CANDIDATES reranked, floor,
    blend); a `--data` query over its own rows. `profile`: what a scope's shipped profile is ranked as (a candidate
    learned profile's weights, core/learning/fusion.py; None: as served now, the live learned one where deployed).
    `engine`: the models and table to rank with (None: the live ones, loaded in this process; a candidate embedder's:
    core/learning/embedder.py). Returns, per reranker name, each case's ranking as deep as the rerank stage goes
    (ranking_quality condenses it to the graded memories, then cuts it at 5 and GATE_K)."""
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.core.ranking.rank import RankQuery, rank

    engine = engine or RankEngine.in_process(settings, with_reranker=False)
    encoder = _Remembered(engine.encoder)
    depth = max(GATE_K, settings.RERANK_CANDIDATES)  # an explored memory may sit below the top 10
    out: dict[str, list[list[int]]] = {name: [] for name in rerankers}
    for name, reranker in rerankers.items():
        view = engine.view(encoder=encoder, reranker=reranker, store_encoder=engine.encoder, profile_as=profile)
        for case in cases:
            if case.rows is not None:
                out[name].append(_rows_ranking(case, reranker, view, settings, depth, profile))
                continue
            query = RankQuery(case.context(form), k=depth, scope=case.scope, strict_scope=False)
            out[name].append([item.id for item in rank(query, settings, view).items])
    return out


def _rows_ranking(case: RankingCase, reranker, engine, settings: Settings, depth: int, profile=None) -> list[int]:
    """A `--data` query over its own rows (the candidates already chosen: no composite floor), by the pipeline."""
    import numpy as np

    from cairn_cli.core.ids import GLOBAL_SCOPE
    from cairn_cli.core.ranking.pipeline import select
    from cairn_cli.core.ranking.profiles import profile as get_profile
    from cairn_cli.core.ranking.scoring import Candidate, ScoringTable

    assert case.rows is not None
    now = utcnow()
    encoded = engine.embed([case.query, *case.rows])
    table = ScoringTable([], settings.KEYWORD_FIELD_WEIGHT, dim=engine.encoder.dim)
    for i, (text, vec) in enumerate(zip(case.rows, encoded[1:])):
        table.upsert(Candidate(i, text, [], GLOBAL_SCOPE, "fact", 0.75, now), vec)
    chosen = select(
        table,
        case.query,
        table.similarities(np.asarray(encoded[0])),
        scope=None,
        k=depth,
        settings=settings,
        reranker=reranker,
        ranker="gate",
        profile=(profile or (lambda p: p))(get_profile(settings, kind=table.kind(None))),
        floor=0.0,
    ).chosen
    return [s.candidate.id for s in chosen]


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


FORM_NAMES = {WINDOW: "the hook's window", PROMPT: "the prompt alone", QUERY: "the query"}


def pooled(rankings: list[Ranking]) -> Ranking:
    """One Ranking over several forms' rankings of the same queries: every (query, form) counts once."""
    judged = [r for r in rankings if r.queries and not math.isnan(r.ndcg10)]
    n = sum(r.queries for r in judged)
    if not n:
        return Ranking(float("nan"), float("nan"), 0)
    return Ranking(
        sum(r.r5 * r.queries for r in judged) / n,
        sum(r.ndcg10 * r.queries for r in judged) / n,
        n,
        [q for r in judged for q in r.per_query],
    )


def gate(
    candidate: dict[str, Ranking], live: dict[str, Ranking], *, margin: float, recall_tolerance: float
) -> tuple[bool, str]:
    """Deploy when the deployed pipeline ranks the held-out queries better than the live one in the forms users send
    them (`candidate` and `live`: form -> Ranking, on the same queries): nDCG@10 over every form at least `margin`
    higher, and no form's nDCG@10 or R@5 (what the agent is shown) more than `recall_tolerance` lower. A student
    that helps one form and costs the other is refused, and the reason names the form. With one form (`--data`) the
    margin is its nDCG@10 rule (a negative margin lets it rank worse, as asked)."""
    forms = [f for f in candidate if candidate[f].queries and not math.isnan(candidate[f].ndcg10)]
    if not forms or any(math.isnan(live[f].ndcg10) for f in forms):
        return False, "no held-out query with a relevant (grade >= 2) memory to judge on"
    mine, theirs = pooled([candidate[f] for f in forms]), pooled([live[f] for f in forms])
    per_form = "; ".join(
        f"{FORM_NAMES.get(f, f)}: nDCG@10 {candidate[f].ndcg10:.3f} vs live {live[f].ndcg10:.3f}, "
        f"R@5 {candidate[f].r5:.3f} vs live {live[f].r5:.3f}"
        for f in forms
    )
    numbers = (
        f"nDCG@10 {mine.ndcg10:.3f} vs live {theirs.ndcg10:.3f} (margin {margin:+.3f}), "
        f"R@5 {mine.r5:.3f} vs live {theirs.r5:.3f} (tolerance {recall_tolerance:.3f})"
        + (f" over {len(forms)} forms ({per_form})" if len(forms) > 1 else "")
        + f", {max(candidate[f].queries for f in forms)} held-out queries"
    )
    for f in forms:
        name = FORM_NAMES.get(f, f)
        if candidate[f].r5 < live[f].r5 - recall_tolerance:
            return False, f"fewer relevant memories shown for {name}: {numbers}"
        if len(forms) > 1 and candidate[f].ndcg10 < live[f].ndcg10 - recall_tolerance:
            return False, f"{name} ranks worse: {numbers}"
    if mine.ndcg10 < theirs.ndcg10 + margin:
        return False, f"the ranking does not improve enough: {numbers}"
    return True, f"the ranking improves: {numbers}"


def rank_forms(
    cases: list[RankingCase], settings: Settings, forms, *, candidate: tuple, live: tuple
) -> tuple[dict[str, Ranking], dict[str, Ranking]]:
    """Per form: the candidate pipeline's and the live one's Ranking of the same `cases`. Each side is (its
    reranker, its profile_as: a shipped profile -> the one it ranks with, None: as served now[, its engine: None or
    absent, the live models])."""
    mine: dict[str, Ranking] = {}
    theirs: dict[str, Ranking] = {}
    c_engine, l_engine = (candidate[2:] or (None,))[0], (live[2:] or (None,))[0]
    for form in forms:
        if candidate[1] is live[1] and c_engine is l_engine:  # one pass over the queries ranks both rerankers
            ranked = pipeline_rankings(
                cases, {"candidate": candidate[0], "live": live[0]}, settings, form=form, profile=candidate[1]
            )
            a, b = ranked["candidate"], ranked["live"]
        else:
            a = pipeline_rankings(
                cases, {"c": candidate[0]}, settings, form=form, profile=candidate[1], engine=c_engine
            )["c"]
            b = pipeline_rankings(cases, {"l": live[0]}, settings, form=form, profile=live[1], engine=l_engine)["l"]
        mine[form], theirs[form] = ranking_quality(cases, a), ranking_quality(cases, b)
    return mine, theirs


def forms_report(mine: dict[str, Ranking], live: dict[str, Ranking], *, mine_name: str, live_name: str) -> dict:
    """Each form's queries, R@5 and nDCG@10 of both pipelines, as reports and model cards keep them."""
    return {
        form: {
            "queries": mine[form].queries,
            f"{mine_name}_r5": _round(mine[form].r5),
            f"{live_name}_r5": _round(live[form].r5),
            f"{mine_name}_ndcg10": _round(mine[form].ndcg10),
            f"{live_name}_ndcg10": _round(live[form].ndcg10),
        }
        for form in mine
    }


@dataclass
class Verdict:
    """A candidate against the live ranking on the same held-out queries, pooled over the forms, and the gate's
    answer: what every learner's judge reports (student, fusion, embedder)."""

    mine: Ranking
    live: Ranking
    queries: int
    forms: dict
    better: int  # held-out (query, form) rankings whose nDCG@10 the candidate raises / lowers
    worse: int
    passed: bool
    reason: str


def compare(
    mine: dict[str, Ranking], live: dict[str, Ranking], opts: TrainOptions, *, mine_name: str, live_name: str
) -> Verdict:
    a, b = pooled(list(mine.values())), pooled(list(live.values()))
    pairs = list(zip(a.per_query, b.per_query))
    passed, reason = gate(mine, live, margin=opts.deploy_margin, recall_tolerance=opts.recall_tolerance)
    return Verdict(
        mine=a,
        live=b,
        queries=max(r.queries for r in mine.values()),
        forms=forms_report(mine, live, mine_name=mine_name, live_name=live_name),
        better=sum(x[1] > y[1] + 1e-9 for x, y in pairs),
        worse=sum(x[1] < y[1] - 1e-9 for x, y in pairs),
        passed=passed,
        reason=reason,
    )


def judge(model, inc: Incumbent, split: Split, opts: TrainOptions, report: TrainReport, settings: Settings) -> bool:
    """Student and incumbent on the SAME held-out queries. Pairwise agreement is reported; the gate is the ranking
    users get: each held-out query ranked by the production pipeline with the student blended in vs the live one,
    in each form users send it (a store's: the hook's window and the prompt alone; a --data query: as it is)."""

    def student_scorer(query: str, texts: list[str]) -> list[float]:
        return model.score([(query, t) for t in texts])

    report.student_agreement = round(agreement(student_scorer, split.held_pairs), 4)
    report.incumbent_agreement = round(agreement(inc.scorer, split.held_pairs), 4)
    cases = ranking_cases(split.rows, split.held_keys, from_store=opts.data is None)
    student = StudentReranker(model, settings.CROSS_ENCODER_STUDENT_FLOOR)
    forms = (QUERY,) if opts.data is not None else STORE_FORMS
    mine, live = rank_forms(cases, settings, forms, candidate=(student, None), live=(inc.reranker, None))
    v = compare(mine, live, opts, mine_name="student", live_name="incumbent")
    report.ranking_queries, report.forms = v.queries, v.forms
    report.student_r5, report.incumbent_r5 = _round(v.mine.r5), _round(v.live.r5)
    report.student_ndcg10, report.incumbent_ndcg10 = _round(v.mine.ndcg10), _round(v.live.ndcg10)
    report.queries_better, report.queries_worse = v.better, v.worse
    report.deploy_margin, report.recall_tolerance = opts.deploy_margin, opts.recall_tolerance
    report.auto_promote_safe = report.student_agreement >= AUTO_PROMOTE_SAFE
    report.reason = v.reason
    return v.passed


def _round(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)
