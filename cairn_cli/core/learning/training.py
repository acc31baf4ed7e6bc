"""The student reranker's data, split, gate and deployment (`cairn train-reranker`).

Data: `relevance_silver.jsonl` rows `(query = context window, memory text, grade 0-3, hard_negative, query_key,
delivery_id)` exported from graded deliveries, or any JSONL of that shape (e.g. TREC DL pairs converted by a script).
Split: by query key (never by pair), seeded. Pairs: within a query, (better, worse) when the grades differ by at
least `min_gap`. Engagement pseudo-labels (engaged -> 3, not engaged -> 0) are merged into TRAINING pairs only,
after the split, and never for a held-out query: the gate is judged on agent grades alone.
Gate: what users get. Each held-out query is ranked by the production pipeline (core/ranking: its context window
over the memory store in its scope as the engine scores it, or for `--data` rows over the query's own rows; the
ranking profile and composite floor in force, the best RERANK_CANDIDATES reranked, floor, min-max blend) twice:
with the student blended in as it would be deployed, and as it ranks live (the composite, or composite + the live
cross-encoder). Relevance comes from the held-out grades (>= 2 relevant). A memory nobody graded is left out of
both rankings before they are scored (condensed lists, Sakai 2007): counting it irrelevant would score the live
ranking, which chose what was graded, R@5 1.0 by construction and refuse every student that lifts an unshown memory.
What a student is credited for is then its order of what was graded: the memories shown, plus the ones exploration
(CAIRN_EXPLORE_RATE, core/ranking/pipeline.py) showed from below the top k. Deploy only if the
student's nDCG@10 >= live + deploy_margin and its R@5 >= live - recall_tolerance, on the same queries. Pairwise agreement on the held-out pairs is reported beside
it: a student that only reorders pairs nobody is shown raises agreement and not the ranking, and is refused.
Deploy: the student is written to a new version directory and published by atomically replacing a symlink, so a
killed run leaves the live student untouched; the previous version stays for `--rollback`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cairn_cli import config
from cairn_cli.clock import iso_now, utcnow
from cairn_cli.config import Settings
from cairn_cli.core.metrics import ndcg
from cairn_cli.core.store import state
from cairn_cli.errors import InvalidInput, NotFound
from cairn_cli.files import atomic_write, private_dir

SILVER_NAME = "relevance_silver.jsonl"
STATE_KEY = "reranker_training"  # the last attempt: when, on how many labels, the numbers, the outcome
DEPLOY_KEY = "reranker_student"  # the deployed student version and its card
AUTO_PROMOTE_SAFE = 0.90
Scorer = Callable[[str, list[str]], list[float]]
SILVER_FIELDS = ("query", "memory", "grade", "hard_negative", "query_key", "delivery_id")
GATE_K = 10  # the gate ranks each held-out query's top 10: R@5 and nDCG@10
RELEVANT_GRADE = 2  # a memory graded >= 2 counts as relevant for R@5


@dataclass
class LabelRow:
    query: str
    memory: str
    grade: int
    hard_negative: bool = False
    query_key: str = ""
    delivery_id: int | None = None
    source: str = "grade"  # grade | engagement
    memory_id: int | None = None  # a graded delivery's memory (the ranking gate finds it in the store's ranking)
    scope: str | None = None  # the scope the delivery was ranked in


def silver_path() -> Path:
    return config.home() / "training_data" / SILVER_NAME


def query_key(query: str) -> str:
    from cairn_cli.core.text import context_key

    return context_key(query)


# -- data -------------------------------------------------------------------------------------------------------


def graded_rows(settings: Settings, *, instance: str | None = None) -> list[LabelRow]:
    """Every graded delivery as a label row (the memory's current text; query = the delivery's context window);
    `instance`: only that instance's (default: every instance sharing the store, pooled)."""
    from cairn_cli.db.tables import Memory, MemoryDelivery

    query = MemoryDelivery.select().where(MemoryDelivery.grade.is_null(False))
    if instance:
        query = query.where(MemoryDelivery.instance == instance)
    rows = list(query.order_by(MemoryDelivery.id))
    texts = (
        {
            m.id: m.content
            for m in Memory.select(Memory.id, Memory.content).where(Memory.id.in_({r.memory_id for r in rows}))
        }
        if rows
        else {}
    )
    return [
        LabelRow(
            r.context_window,
            texts[r.memory_id],
            int(r.grade or 0),
            bool(r.hard_negative),
            r.context_key,
            r.id,
            memory_id=r.memory_id,
            scope=r.scope,
        )
        for r in rows
        if r.memory_id in texts and r.context_window  # '': expired (core/store/retention.py), no query to pair
    ]


DEFAULT_ENGAGEMENT_METHODS = ("lexical", "semantic")  # semantic-backfill's weaker labels are opt-in


def engagement_methods(text: str) -> tuple[str, ...]:
    """The engagement bases of `--engagement-methods` (a comma list of engagement.METHODS)."""
    from cairn_cli.core.labels.engagement import METHODS

    asked = tuple(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    unknown = [m for m in asked if m not in METHODS]
    if unknown or not asked:
        raise InvalidInput(
            f"unknown engagement method {unknown[0] if unknown else text!r}",
            f"pass a comma list of {', '.join(METHODS)}, e.g. --engagement-methods lexical,semantic",
        )
    return asked


def engagement_rows(
    settings: Settings,
    *,
    min_pos: float,
    methods: tuple[str, ...] = DEFAULT_ENGAGEMENT_METHODS,
    instance: str | None = None,
) -> list[LabelRow]:
    """Ungraded deliveries with an engagement decision of one of `methods`, as 0/3 pseudo-grades. A lexical row is
    a positive only when its overlap reaches `min_pos` (lexical engaged rows under it are left out); semantic and
    semantic-backfill rows are positives as decided."""
    from cairn_cli.core.labels.engagement import LEXICAL
    from cairn_cli.db.tables import Memory, MemoryDelivery

    query = MemoryDelivery.select().where(
        MemoryDelivery.grade.is_null()
        & MemoryDelivery.engaged.is_null(False)
        & MemoryDelivery.engaged_method.in_(list(methods))
    )
    if instance:
        query = query.where(MemoryDelivery.instance == instance)
    rows = list(query.order_by(MemoryDelivery.id))
    texts = (
        {
            m.id: m.content
            for m in Memory.select(Memory.id, Memory.content).where(Memory.id.in_({r.memory_id for r in rows}))
        }
        if rows
        else {}
    )
    out = []
    for r in rows:
        if r.memory_id not in texts or not r.context_window:  # '': expired (core/store/retention.py)
            continue
        if r.engaged and r.engaged_method == LEXICAL and (r.engaged_score or 0.0) < min_pos:
            continue
        out.append(
            LabelRow(
                r.context_window, texts[r.memory_id], 3 if r.engaged else 0, False, r.context_key, r.id, "engagement"
            )
        )
    return out


def write_jsonl(rows: list[LabelRow], path: Path) -> None:
    """The label rows as JSONL, written atomically and private (they hold prompts and memories)."""
    private_dir(path.parent)
    atomic_write(
        path,
        "".join(
            json.dumps({k: v for k, v in asdict(r).items() if k in SILVER_FIELDS}, ensure_ascii=False) + "\n"
            for r in rows
        ),
    )


def read_jsonl(path: Path) -> list[LabelRow]:
    """Rows of the silver shape; `query_key` defaults to the query's hash. A bad line is an error naming it."""
    if not path.is_file():
        raise NotFound(f"no training data at {path}", "run `cairn train-reranker --export` or pass --data FILE")
    out = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise InvalidInput(f"{path}:{n}: not valid JSON", "one JSON object a line") from None
            if not isinstance(obj, dict):
                raise InvalidInput(f"{path}:{n}: not a JSON object", "one JSON object a line")
            query, memory, grade = obj.get("query"), obj.get("memory"), obj.get("grade")
            if not isinstance(query, str) or not query.strip() or not isinstance(memory, str) or not memory.strip():
                raise InvalidInput(f"{path}:{n}: query and memory must be non-empty strings", "fix that line")
            if not isinstance(grade, int) or isinstance(grade, bool) or not 0 <= grade <= 3:
                raise InvalidInput(f"{path}:{n}: grade must be an integer 0-3", "fix that line")
            out.append(
                LabelRow(
                    query,
                    memory,
                    grade,
                    bool(obj.get("hard_negative", False)),
                    str(obj.get("query_key") or query_key(query)),
                    obj.get("delivery_id"),
                )
            )
    return out


def split_by_query(rows: list[LabelRow], *, holdout: float, seed: int) -> tuple[set[str], set[str]]:
    """(train keys, held-out keys): whole queries, shuffled with `seed`; at least one of each when there are two."""
    keys = sorted({r.query_key for r in rows})
    random.Random(seed).shuffle(keys)
    n_held = min(len(keys) - 1, max(1, round(len(keys) * holdout))) if len(keys) > 1 else 0
    return set(keys[n_held:]), set(keys[:n_held])


def make_pairs(rows: list[LabelRow], keys: set[str], *, min_gap: int) -> list[tuple[str, str, str, str]]:
    """(query_key, query, better, worse) for every pair of one query whose grades differ by >= min_gap."""
    by_key: dict[str, list[LabelRow]] = {}
    for r in rows:
        if r.query_key in keys:
            by_key.setdefault(r.query_key, []).append(r)
    out = []
    for key in sorted(by_key):
        group = by_key[key]
        for a in group:
            for b in group:
                if a.grade - b.grade >= min_gap:
                    out.append((key, a.query, a.memory, b.memory))
    return out


# -- scoring ----------------------------------------------------------------------------------------------------


def agreement(scorer: Scorer, pairs: list[tuple[str, str, str, str]]) -> float:
    """Share of pairs the scorer orders like the grades (a tie counts half)."""
    if not pairs:
        return float("nan")
    by_query: dict[str, tuple[str, dict[str, None]]] = {}  # key -> (query, its texts in order, each once)
    for key, query, better, worse in pairs:
        texts = by_query.setdefault(key, (query, {}))[1]
        texts.setdefault(better)
        texts.setdefault(worse)
    scores = {key: dict(zip(texts, scorer(query, list(texts)))) for key, (query, texts) in by_query.items()}
    won = 0.0
    for key, _, better, worse in pairs:
        s_b, s_w = scores[key][better], scores[key][worse]
        won += 1.0 if s_b > s_w else 0.5 if s_b == s_w else 0.0
    return won / len(pairs)


def composite_scorer(settings: Settings) -> Scorer:
    """The composite as it orders a query's candidates in production (similarity + BM25 within the candidates +
    scope; confidence and recency weigh 0): the incumbent when no cross-encoder is live."""
    import numpy as np

    from cairn_cli.core.ranking.scoring import Candidate, ScoringTable
    from cairn_cli.core.text import GLOBAL_SCOPE
    from cairn_cli.ml.models import get_encoder

    encoder = get_encoder(settings.EMBED_MODEL, settings.EMBED_DTYPE)
    now = utcnow()

    def score(query: str, texts: list[str]) -> list[float]:
        vecs = encoder.encode([query] + texts)
        table = ScoringTable([], settings.KEYWORD_FIELD_WEIGHT, dim=encoder.dim)
        for i, (text, vec) in enumerate(zip(texts, vecs[1:])):
            table.upsert(Candidate(i, text, [], GLOBAL_SCOPE, "fact", 0.75, now), vec)
        scored = table.score(
            query,
            table.similarities(np.asarray(vecs[0])),
            scope=None,
            weights=settings.weights(),
            half_life_days=settings.RECENCY_HALF_LIFE_DAYS,
        )
        by_id = {s.candidate.id: s.score for s in scored}
        return [by_id[i] for i in range(len(texts))]

    return score


@dataclass
class Incumbent:
    name: str
    scorer: Scorer
    base: Path | None  # its weights, when it is a cross-encoder (the default base to fine-tune)
    reranker: object | None = None  # the loaded cross-encoder the pipeline blends in (None: the composite alone)


def incumbent(settings: Settings) -> Incumbent:
    """What ranks now: the live cross-encoder (resolve_reranker) or, with none, the composite."""
    from cairn_cli.core.ranking.reranking import load_reranker, resolve

    resolution = resolve(settings)
    reranker, _ = load_reranker(settings, resolution)
    if reranker is None:
        return Incumbent("composite", composite_scorer(settings), None, None)
    return Incumbent(reranker.name, reranker.logits, resolution.path, reranker)


# -- the ranking users get ------------------------------------------------------------------------------------


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
    the memories that were graded (see the module note)."""

    r5: float
    ndcg10: float
    queries: int
    per_query: list[tuple[float, float]] = field(default_factory=list)


def ranking_cases(split_rows: list[LabelRow], keys: set[str], *, from_store: bool) -> list[RankingCase]:
    """The held-out queries of `keys` with their grades (the newest grade of a memory wins)."""
    by_key: dict[str, list[LabelRow]] = {}
    for r in split_rows:
        if r.query_key in keys:
            by_key.setdefault(r.query_key, []).append(r)
    out = []
    for key in sorted(by_key):
        group = by_key[key]
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


def pipeline_rankings(cases: list[RankingCase], rerankers: dict, settings: Settings) -> dict[str, list[list[int]]]:
    """Each held-out query ranked by the production pipeline (core/ranking: the engine's table over the memory
    store, or the query's own rows; composite -> the best RERANK_CANDIDATES reranked, floor, blend) once per
    reranker (None: the composite alone). Returns, per reranker name, each case's ranking as deep as the rerank
    stage goes (ranking_quality condenses it to the graded memories, then cuts it at 5 and GATE_K)."""
    import numpy as np

    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.core.ranking.pipeline import select
    from cairn_cli.core.ranking.profiles import composite_floor
    from cairn_cli.core.ranking.profiles import profile as get_profile
    from cairn_cli.core.ranking.scoring import Candidate, ScoringTable
    from cairn_cli.core.text import GLOBAL_SCOPE

    engine = RankEngine.in_process(settings, with_reranker=False)
    profile = get_profile(settings)  # the profile and composite floor `cairn rank` ranks the store with
    floor, _ = composite_floor(settings, profile.name, engine.embed_model)
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
                profile=profile,
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


# -- deployment -------------------------------------------------------------------------------------------------


def versions_dir(student: Path) -> Path:
    return student.parent / f"{student.name}.versions"


def deploy(model_dir: Path, student: Path) -> Path | None:
    """Publish `model_dir` (already under versions_dir) as the live student: one atomic symlink replacement.
    Returns the previous version's directory, if any."""
    previous = student.resolve() if student.is_symlink() else None
    if student.exists() and not student.is_symlink():  # a student from before versioning: keep it as a version
        legacy = versions_dir(student) / f"legacy-{dt.datetime.now():%Y%m%dT%H%M%S}"
        os.replace(student, legacy)
        previous = legacy
    link_tmp = student.parent / f".{student.name}.link-{os.getpid()}"
    if link_tmp.is_symlink() or link_tmp.exists():
        link_tmp.unlink()
    os.symlink(os.path.relpath(model_dir, student.parent), link_tmp)
    os.replace(link_tmp, student)
    return previous


def new_version_dir(student: Path) -> Path:
    root = versions_dir(student)
    private_dir(root)
    return root / f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S%fZ}-{os.getpid()}"


def rollback(settings: Settings) -> dict:
    """Point the live student back at the version deployed before it."""
    student = config.student_path(settings.CROSS_ENCODER_STUDENT_PATH)
    record = state.get(DEPLOY_KEY, settings) or {}
    previous = record.get("previous")
    if not previous or not Path(previous).is_dir():
        raise NotFound("there is no previous student to roll back to", "train and deploy one first")
    current = str(student.resolve()) if student.is_symlink() else None
    deploy(Path(previous), student)
    value = {**record, "version": previous, "previous": current, "rolled_back_at": iso_now()}
    state.put(DEPLOY_KEY, value, settings, by="cairn train-reranker --rollback", reason="rollback")
    return value


# -- the run ----------------------------------------------------------------------------------------------------


@dataclass
class TrainOptions:
    data: Path | None = None
    base: str = "incumbent"  # incumbent | bundled | a directory
    epochs: int | None = None  # None: scaled to the training pairs (epochs_for)
    batch_size: int = 16
    lr: float = 5e-5
    margin: float = 1.0
    seed: int = 13
    device: str = "auto"
    holdout: float = 0.2
    min_gap: int = 2
    deploy_margin: float = 0.02
    recall_tolerance: float = 0.02
    engagement: bool = False
    engagement_min_pos: float = 0.2
    engagement_max_pairs: int = 2000
    engagement_methods: tuple[str, ...] = DEFAULT_ENGAGEMENT_METHODS
    instance: str | None = None  # train on one instance's labels (default: the pool of every instance)
    max_length: int | None = None
    layers: int | None = None
    max_train_pairs: int | None = None
    dry_run: bool = False
    deploy: bool = True


@dataclass
class TrainReport:
    data: str
    rows: int
    queries: int
    train_queries: int
    held_queries: int
    train_pairs: int
    engagement_pairs: int
    held_pairs: int
    min_gap: int
    seed: int
    outcome: str = "dry-run"  # dry-run | deployed | refused | trained (no deploy)
    engagement_methods: list[str] = field(default_factory=list)  # the bases pseudo-labels came from (--engagement)
    instance: str | None = None  # whose labels (None: every instance sharing the store)
    reason: str = ""
    incumbent: str | None = None
    base: str | None = None
    layers: int | None = None
    student_agreement: float | None = None
    incumbent_agreement: float | None = None
    ranking_queries: int | None = None  # held-out queries with a relevant memory: the gate's sample
    student_r5: float | None = None  # the deployed pipeline (composite + the student's blend) on them
    incumbent_r5: float | None = None  # the live pipeline (composite, or composite + the live reranker)
    student_ndcg10: float | None = None
    incumbent_ndcg10: float | None = None
    queries_better: int | None = None  # held-out queries whose nDCG@10 the student raises / lowers
    queries_worse: int | None = None
    deploy_margin: float | None = None
    recall_tolerance: float | None = None
    auto_promote_safe: bool | None = None
    student_dir: str | None = None
    train_stats: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Split:
    """The labels, split by query, and the pairs each side gives."""

    rows: list[LabelRow]
    data: str
    train_keys: set[str]
    held_keys: set[str]
    train_pairs: list[tuple[str, str, str, str]]
    held_pairs: list[tuple[str, str, str, str]]
    weak_pairs: list[tuple[str, str, str, str]]


def prepare(settings: Settings, opts: TrainOptions) -> Split:
    """Export (unless --data), split by query, pair; engagement pseudo-labels join the TRAINING side only."""
    if opts.data is None:
        rows = graded_rows(settings, instance=opts.instance)
        write_jsonl(rows, silver_path())
        data = str(silver_path())
    else:
        rows = read_jsonl(opts.data)
        data = str(opts.data)
    train_keys, held_keys = split_by_query(rows, holdout=opts.holdout, seed=opts.seed)
    train_pairs = make_pairs(rows, train_keys, min_gap=opts.min_gap)
    held_pairs = make_pairs(rows, held_keys, min_gap=opts.min_gap)
    weak: list[tuple[str, str, str, str]] = []
    if opts.engagement:
        pseudo = [
            r
            for r in engagement_rows(
                settings, min_pos=opts.engagement_min_pos, methods=opts.engagement_methods, instance=opts.instance
            )
            if r.query_key not in held_keys
        ]
        weak = make_pairs(pseudo, {r.query_key for r in pseudo}, min_gap=opts.min_gap)
        random.Random(opts.seed).shuffle(weak)
        weak = weak[: opts.engagement_max_pairs]
    if opts.max_train_pairs and len(train_pairs) > opts.max_train_pairs:
        train_pairs = random.Random(opts.seed).sample(train_pairs, opts.max_train_pairs)
    return Split(rows, data, train_keys, held_keys, train_pairs, held_pairs, weak)


def train_reranker(
    settings: Settings, opts: TrainOptions, *, progress: Callable[[int, str], Callable[[int], None]] | None = None
) -> TrainReport:
    """Prepare, and unless a dry run: train, judge against the incumbent on the same held-out queries, deploy when
    the gate passes, and record the attempt. `progress(total, what)` gives a callback."""
    split = prepare(settings, opts)
    report = TrainReport(
        split.data,
        len(split.rows),
        len(split.train_keys | split.held_keys),
        len(split.train_keys),
        len(split.held_keys),
        len(split.train_pairs),
        len(split.weak_pairs),
        len(split.held_pairs),
        opts.min_gap,
        opts.seed,
    )
    report.engagement_methods = list(opts.engagement_methods) if opts.engagement else []
    report.instance = opts.instance
    if opts.dry_run:
        return report
    if not split.train_pairs + split.weak_pairs or not split.held_pairs:
        raise InvalidInput(
            f"not enough labels: {len(split.train_pairs) + len(split.weak_pairs)} training and "
            f"{len(split.held_pairs)} held-out pairs with a grade gap of {opts.min_gap}",
            "collect more graded deliveries, or lower --min-gap / --holdout",
        )
    inc = incumbent(settings)
    model = _train_student(settings, opts, split, inc, report, progress)
    passed = _judge(model, inc, split, opts, report, settings)
    if passed and opts.deploy:
        _deploy_student(model, settings, report)
    else:
        report.outcome = "refused" if not passed else "trained"
    _record_attempt(report, settings)
    return report


AUTO_PAIR_PASSES = 3000  # auto epochs: about this many pairs seen in all
AUTO_EPOCHS = (3, 10)


def epochs_for(pairs: int) -> int:
    """Epochs scaled to the training pairs: few labels need more passes. Measured on the LoCoMo loop (bench/loop.md):
    472 pairs at 2 epochs, lr 3e-5 reached agreement 0.65 and lost R@5; 5-10 epochs at lr 5e-5 reached 0.84-0.86."""
    lo, hi = AUTO_EPOCHS
    return max(lo, min(hi, math.ceil(AUTO_PAIR_PASSES / max(1, pairs))))


def _train_student(settings: Settings, opts: TrainOptions, split: Split, inc: Incumbent, report: TrainReport, progress):
    from cairn_cli.ml.training import CrossEncoderModel, bundled_base

    base = (
        bundled_base()
        if opts.base == "bundled" or (opts.base == "incumbent" and inc.base is None)
        else (inc.base if opts.base == "incumbent" else Path(opts.base).expanduser())
    )
    if base is None or not Path(base).is_dir():
        raise NotFound(f"base model {base} does not exist", "pass --base bundled, incumbent or a model directory")
    report.incumbent, report.base, report.layers = inc.name, str(base), opts.layers
    model = CrossEncoderModel(
        base, device=opts.device, max_length=opts.max_length or settings.RERANKER_MAX_LENGTH, layers=opts.layers
    )
    triples = [(q, b, w) for _, q, b, w in split.train_pairs + split.weak_pairs]
    epochs = opts.epochs or epochs_for(len(triples))
    callback = progress(len(triples) * epochs, "training") if progress else None
    stats = model.train_pairwise(
        triples,
        epochs=epochs,
        batch_size=opts.batch_size,
        lr=opts.lr,
        margin=opts.margin,
        seed=opts.seed,
        progress=callback,
    )
    report.train_stats = {**asdict(stats), "epochs": epochs, "lr": opts.lr}
    return model.serve_mode()


def _judge(model, inc: Incumbent, split: Split, opts: TrainOptions, report: TrainReport, settings: Settings) -> bool:
    """Student and incumbent on the SAME held-out queries. Pairwise agreement is reported; the gate is the ranking
    users get: each held-out query ranked by the production pipeline with the student blended in vs the live one."""

    def student_scorer(query: str, texts: list[str]) -> list[float]:
        return model.score([(query, t) for t in texts])

    report.student_agreement = round(agreement(student_scorer, split.held_pairs), 4)
    report.incumbent_agreement = round(agreement(inc.scorer, split.held_pairs), 4)
    cases = ranking_cases(split.rows, split.held_keys, from_store=opts.data is None)
    student = StudentReranker(model, settings.CROSS_ENCODER_STUDENT_FLOOR)
    ranked = pipeline_rankings(cases, {"student": student, "live": inc.reranker}, settings)
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


def _deploy_student(model, settings: Settings, report: TrainReport) -> None:
    """A new version directory, then one atomic symlink swap; the previous version is kept for --rollback."""
    student = config.student_path(settings.CROSS_ENCODER_STUDENT_PATH)
    version = new_version_dir(student)
    model.save(version)
    atomic_write(version / "model_card.json", json.dumps(_card(report), indent=2) + "\n")
    previous = deploy(version, student)
    report.outcome, report.student_dir = "deployed", str(version)
    state.put(
        DEPLOY_KEY,
        {
            "version": str(version),
            "previous": str(previous) if previous else None,
            "deployed_at": iso_now(),
            "card": _card(report),
        },
        settings,
        by="cairn train-reranker",
        reason=report.reason,
    )
    from cairn_cli.core.learning import shared

    shared.publish(version, settings)  # a store machines share: every instance's daemon installs it


def _card(report: TrainReport) -> dict:
    return {
        "created_at": iso_now(),
        "base": report.base,
        "layers": report.layers,
        "data": report.data,
        "rows": report.rows,
        "split": {
            "seed": report.seed,
            "train_queries": report.train_queries,
            "held_queries": report.held_queries,
            "min_gap": report.min_gap,
        },
        "pairs": {"train": report.train_pairs, "engagement": report.engagement_pairs, "held": report.held_pairs},
        "engagement_methods": report.engagement_methods,
        "instance": report.instance or "all (pooled)",
        "held_out": {
            "incumbent": report.incumbent,
            "student_agreement": report.student_agreement,
            "incumbent_agreement": report.incumbent_agreement,
            "ranking_queries": report.ranking_queries,
            "student_r5": report.student_r5,
            "incumbent_r5": report.incumbent_r5,
            "student_ndcg10": report.student_ndcg10,
            "incumbent_ndcg10": report.incumbent_ndcg10,
        },
        "gate": {"deploy_margin": report.deploy_margin, "recall_tolerance": report.recall_tolerance},
        "auto_promote_safe": report.auto_promote_safe,
        "train": report.train_stats,
    }


def _record_attempt(report: TrainReport, settings: Settings) -> None:
    from cairn_cli.db.tables import MemoryDelivery

    labels = MemoryDelivery.select().where(MemoryDelivery.grade.is_null(False)).count()
    state.put(
        STATE_KEY,
        {
            "at": iso_now(),
            "outcome": report.outcome,
            "reason": report.reason,
            "labels": labels,
            "incumbent": report.incumbent,
            "student_agreement": report.student_agreement,
            "incumbent_agreement": report.incumbent_agreement,
            "ranking_queries": report.ranking_queries,
            "student_r5": report.student_r5,
            "incumbent_r5": report.incumbent_r5,
            "student_ndcg10": report.student_ndcg10,
            "incumbent_ndcg10": report.incumbent_ndcg10,
        },
        settings,
        by="cairn train-reranker",
        reason=f"{report.outcome}: {report.reason}",
    )


def new_labels(settings: Settings) -> tuple[int, int]:
    """(graded deliveries now, graded deliveries at the last training attempt)."""
    from cairn_cli.db.tables import MemoryDelivery

    now = MemoryDelivery.select().where(MemoryDelivery.grade.is_null(False)).count()
    last = (state.get(STATE_KEY, settings) or {}).get("labels", 0)
    return now, int(last)


@dataclass
class Job:
    """What `cairn train-reranker` was asked to do besides training: roll back, export, or train for cron."""

    rollback: bool = False
    export: bool = False
    auto: bool = False
    min_new_labels: int = 200


def run_job(settings: Settings, opts: TrainOptions, job: Job, *, progress=None) -> dict:
    """The whole command: one JSON-ready outcome (`outcome` says which: rolled-back | exported | locked | skipped |
    dry-run | deployed | refused | trained). Training runs one at a time per CAIRN_HOME (cron may overlap a slow
    run); with --auto it runs only when enough graded deliveries arrived since the last attempt."""
    from cairn_cli.core.job_locks import store_lock

    if job.rollback:
        return {"outcome": "rolled-back", **rollback(settings)}
    if job.export:
        rows = graded_rows(settings, instance=opts.instance)
        write_jsonl(rows, silver_path())
        return {"outcome": "exported", "path": str(silver_path()), "rows": len(rows)}
    with store_lock("train-reranker") as locked:
        if not locked:
            return {"outcome": "locked", "reason": "another train-reranker run holds the lock; nothing done"}
        if job.auto:
            now, last = new_labels(settings)
            if now - last < job.min_new_labels:
                reason = f"{now - last} new labels since the last training (< --min-new-labels {job.min_new_labels})"
                return {"outcome": "skipped", "reason": reason}
        return train_reranker(settings, opts, progress=progress).as_dict()
