"""Ranking-quality benchmark: BM25 vs dense vs the generic hybrids peers ship (RRF, a min-max blend) vs cairn's
composite, side by side, on Cranfield, LoCoMo dev (turns and observations) and TREC DL 2019.

    .venv/bin/python scripts/bench_ranking.py [--part held-out|dev|all] [--reference composite] [--diagnose]
        [--limit-queries 20 --datasets cranfield,locomo,dl19 --out /tmp/b]

Data is read in place from ../shared/data, never copied. A system is `(store, query) -> memory indices, best
first`: add a row by adding one entry to SYSTEMS. Every set is split once, the same way in every run: LoCoMo by
conversation (locomo.HELD_OUT), Cranfield by query (seeded 70/30), DL19 not at all (43 queries: all reported).
`--part` picks the part reported; every system's R@5 and nDCG@10 come with a paired 95% bootstrap interval of its
difference to `--reference` (default: the composite as shipped, the old default). `--diagnose` prints composite
variants (stdout only).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import locomo  # noqa: E402  (scripts/locomo.py: the held-out conversations)

from cairn_cli.core import metrics  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data"
NOW = dt.datetime(2026, 1, 1)  # every memory is "updated now": recency is constant (and weighs 0 anyway)
CRAN_GRADES = {1: 3, 2: 2, 3: 1, 4: 1}  # Cleverdon codes run backwards; -1 is ungraded
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
EXCLUDED_CATEGORY = 5
DIA_ID = re.compile(r"D:?(\d+):0*(\d+)")
K_NDCG, K_MAP = 10, 100
SEED = 13
BOOTSTRAP = 2000  # paired bootstrap resamples of the questions
CRAN_HELD_OUT_SHARE = 0.30  # Cranfield: a seeded 30% of the judged queries (by query number) is held out
DL19_RECALL_GRADE = 2  # DL19 R@5 counts passages graded >= 2 (highly / perfectly relevant) as relevant
PARTS = ("held-out", "dev", "all")
DATASETS = {"cranfield": "cranfield", "locomo": "locomo", "dl19": "trec_dl"}  # name -> folder in the data dir


@dataclass
class Query:
    text: str
    vec: np.ndarray
    relevant: dict[int, int]  # memory index -> grade (>= 1)
    category: int | None = None
    qid: str = ""
    ideal: list[int] | None = None  # every judged grade of the query, when some are outside the store (DL19)
    recall_relevant: frozenset[int] | None = None  # recall's relevant set when it is not `relevant` (DL19: grade >= 2)


@dataclass
class Store:
    """One memory store: its texts, their embeddings, its queries, and per-system indexes built on first use."""

    texts: list[str]
    vecs: np.ndarray
    queries: list[Query] = field(default_factory=list)
    _built: dict[Any, Any] = field(default_factory=dict, repr=False)

    def cached(self, key: Any, build: Callable[[Store], Any]) -> Any:
        if key not in self._built:
            self._built[key] = build(self)
        return self._built[key]


System = Callable[[Store, Query], np.ndarray]


def _rank(scores: np.ndarray) -> np.ndarray:
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")


# ---------------------------------------------------------------- systems


def _bm25s_index(store: Store) -> tuple[Any, Any]:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(store.texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    return retriever, stemmer


def bm25s_scores(store: Store, query: Query) -> np.ndarray:
    """bm25s's BM25 of every memory (0 when no query term matches), computed once per (store, query)."""
    import bm25s

    def build(store: Store) -> np.ndarray:
        retriever, stemmer = store.cached("bm25s", _bm25s_index)
        tokens = bm25s.tokenize([query.text], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
        ids = retriever.get_tokens_ids(tokens[0])
        return retriever.get_scores_from_ids(ids) if ids else np.zeros(len(store.texts), dtype=np.float32)

    return store.cached(("bm25s", query.text), build)  # the scores depend on the text alone


def cosine(store: Store, query: Query) -> np.ndarray:
    return store.vecs @ query.vec


def _cairn_table(store: Store) -> tuple[Any, Any]:
    """cairn's ScoringTable over the store, built once (as the daemon keeps one warm per scope)."""
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking.scoring import Candidate, ScoringTable

    settings = Settings()
    cands = [
        Candidate(id=i, content=text, keywords=[], scope="bench", kind="fact", confidence=0.75, updated_at=NOW)
        for i, text in enumerate(store.texts)
    ]
    return settings, ScoringTable(cands, settings.KEYWORD_FIELD_WEIGHT, vectors=store.vecs)


def _composite_scored(store: Store, query: Query):
    """(settings, cairn's scorer over the whole store, called as core/ranking/pipeline.py calls it: full ranking,
    top=None, no score > 0 filter)."""
    s, table = store.cached("cairn", _cairn_table)
    return s, table.score(
        query.text,
        cosine(store, query),
        scope=None,
        weights=s.weights(),
        half_life_days=s.RECENCY_HALF_LIFE_DAYS,
        now=NOW,
    )


def composite_system(store: Store, query: Query) -> np.ndarray:
    return np.array([sc.candidate.id for sc in _composite_scored(store, query)[1]])


def _scored(store: Store, query: Query, profile_name: str = "auto", changes: dict[str, Any] | None = None) -> list:
    """The shipped default's scored memories, best first: the profile of the store's kind (core/ranking/kinds.py,
    profiles.py), scored as core/ranking/pipeline.py scores (full ranking); `profile_name` forces one instead,
    `changes` alters it."""
    from dataclasses import replace

    from cairn_cli.core.ranking.profiles import profile

    s, table = store.cached("cairn", _cairn_table)
    p = profile(s, profile_name, kind=table.kind(None))
    if changes and p.name != "default":
        p = replace(p, **changes)
    return table.score(
        query.text,
        cosine(store, query),
        scope=None,
        weights=p.weights,
        half_life_days=s.RECENCY_HALF_LIFE_DAYS,
        now=NOW,
        neighbour_weight=p.neighbour_weight,
        context_keywords=p.context_keywords,
    )


def cairn_system(
    store: Store, query: Query, profile_name: str = "auto", changes: dict[str, Any] | None = None
) -> np.ndarray:
    """The shipped default's ranking (see `_scored`)."""
    return np.array([sc.candidate.id for sc in _scored(store, query, profile_name, changes)])


def _default_scores(store: Store, text: str, vec: np.ndarray) -> np.ndarray:
    """The shipped default's score of every memory for a query given as text and vector."""
    return _default_scores_of(store, Query(text, vec, {}))


def _default_scores_of(store: Store, query: Query) -> np.ndarray:
    out = np.zeros(len(store.texts))
    for sc in _scored(store, query):
        out[sc.candidate.id] = sc.score
    return out


def second_hop(weight: float) -> System:
    """The default, plus `weight` of the default's scores for the best memory's own text (a second hop)."""

    def system(store: Store, query: Query) -> np.ndarray:
        first = _default_scores_of(store, query)
        best = int(np.argmax(first))
        hop = _default_scores(store, store.texts[best], store.vecs[best])
        hop[best] = 0.0
        return _rank(first + weight * hop)

    return system


def dense_prf(beta: float, m: int = 3) -> System:
    """The default, re-run with the query vector moved toward its top `m` memories (Rocchio)."""

    def system(store: Store, query: Query) -> np.ndarray:
        top = np.argsort(-_default_scores_of(store, query))[:m]
        vec = query.vec + beta * store.vecs[top].mean(axis=0)
        return _rank(_default_scores(store, query.text, vec / np.linalg.norm(vec)))

    return system


def vocabulary_expansion(weight: float, m: int = 3, n_terms: int = 10) -> System:
    """The default, plus `weight` of the max-normalised BM25 of the `n_terms` terms its top `m` memories share most
    (by count x IDF), the query's own left out (RM3-like expansion from the store's own vocabulary)."""
    from collections import Counter

    from cairn_cli.core.text import terms

    def system(store: Store, query: Query) -> np.ndarray:
        first = _default_scores_of(store, query)
        _, table = store.cached("cairn", _cairn_table)
        counts = Counter(t for i in np.argsort(-first)[:m] for t in set(terms(store.texts[i])))
        own = set(terms(query.text))
        ranked = sorted(counts, key=lambda t: -counts[t] * table.index.idf(t))
        extra = np.asarray(table.index.scores([t for t in ranked if t not in own][:n_terms]), dtype=np.float64)
        return _rank(first + weight * extra / (extra.max() or 1.0))

    return system


# Point 6 of #26: what the literature does for multi-hop and open-domain questions, on top of the default (the
# neighbours are in the default already); reported per LoCoMo category, none shipped (bench/relevance.md says why)
TRIED: dict[str, System] = {
    "default": cairn_system,
    "+ second hop from the best memory (0.15)": second_hop(0.15),
    "+ dense pseudo-relevance feedback (Rocchio 0.3, top 3)": dense_prf(0.3),
    "+ expansion from the store's vocabulary (RM3-like, 10 terms of the top 3, 0.15)": vocabulary_expansion(0.15),
    "+ the same expansion at 0.30": vocabulary_expansion(0.30),
}


def store_kind(store: Store) -> str:
    _, table = store.cached("cairn", _cairn_table)
    return table.kind(None)


def reranker_system(model) -> System:
    """The product's rerank stage over the composite's top RERANK_CANDIDATES: floor, blend, then the rest of the
    composite order; memories under the floor are not delivered (they go last)."""
    from cairn_cli.core.ranking.pipeline import rerank_stage

    def system(store: Store, query: Query) -> np.ndarray:
        s, scored = _composite_scored(store, query)
        head = scored[: s.RERANK_CANDIDATES]
        kept, _ = rerank_stage(head, query.text, model, s.RERANK_BLEND)
        kept_ids = [x.candidate.id for x in kept]
        dropped = [x.candidate.id for x in head if x.candidate.id not in set(kept_ids)]
        rest = [x.candidate.id for x in scored[s.RERANK_CANDIDATES :]]
        return np.array(kept_ids + rest + dropped)

    return system


def _bind_stores(settings) -> None:
    """resolve_reranker() reads calibrated floors from the store's machine state: open this user's stores
    read-only, or, when there are none, empty throwaway ones (no calibrated floor: the configured floors hold)."""
    import atexit
    import shutil
    import tempfile

    from cairn_cli import db
    from cairn_cli.core.store import open_stores
    from cairn_cli.errors import NotFound

    try:
        open_stores(settings, create=False)
    except NotFound:
        home = Path(tempfile.mkdtemp(prefix="bench-ranking-"))
        atexit.register(shutil.rmtree, home, True)
        db.open_db(f"sqlite:///{home / 'memory.db'}", f"sqlite:///{home / 'ephemeral.db'}", create=True)


def load_reranker(choice: str):
    """`auto`: whatever cairn's resolve_reranker() makes live on this machine; a path: a cross-encoder directory
    (e.g. a trained student); `none`: no reranker row. Returns (model or None, why)."""
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking import reranking
    from cairn_cli.ml.reranker import CrossEncoderReranker, Resolution

    if choice == "none":
        return None, "not requested (--reranker none)"
    settings = Settings()
    if choice == "auto":
        _bind_stores(settings)
        model, notes = reranking.load_reranker(settings)
        return model, "; ".join(notes) or "resolved by resolve_reranker()"
    res = Resolution(
        "student", f"student:{choice}", Path(choice), settings.CROSS_ENCODER_STUDENT_FLOOR, "cpu", "identity"
    )
    return CrossEncoderReranker(res, dtype=settings.RERANKER_DTYPE, max_length=settings.RERANKER_MAX_LENGTH), choice


def keyword_list(store: Store, query: Query) -> np.ndarray:
    """What a keyword engine returns: the memories with a matching term, best BM25 first."""
    scores = bm25s_scores(store, query)
    order = _rank(scores)
    return order[scores[order] > 0]


def rrf(store: Store, query: Query, k: int = 60) -> np.ndarray:
    """Reciprocal rank fusion (k = 60) of the bm25s list (matching memories only) and the dense list (all):
    score = sum over lists of 1 / (k + rank), rank from 1; a memory missing from a list gets nothing from it."""
    score = np.zeros(len(store.texts))
    for ranking in (keyword_list(store, query), _rank(cosine(store, query))):
        score[ranking] += 1.0 / (k + 1 + np.arange(len(ranking)))
    return _rank(score)


def _normalise(x: np.ndarray, how: str) -> np.ndarray:
    if how == "max":  # cairn's: BM25 / best BM25, cosine clipped at 0 (not rescaled)
        return x / (x.max() or 1.0)
    if how == "minmax":
        return (x - x.min()) / ((x.max() - x.min()) or 1.0)
    return (x - x.mean()) / (x.std() or 1.0)  # "z"


def blend(store: Store, query: Query, w_lex: float = 0.5) -> np.ndarray:
    """The peers' other hybrid: per query, bm25s scores and dense cosines each min-max normalised over the store,
    then w_lex / (1 - w_lex)."""
    lex = _normalise(bm25s_scores(store, query).astype(np.float64), "minmax")
    sim = _normalise(cosine(store, query).astype(np.float64), "minmax")
    return _rank(w_lex * lex + (1.0 - w_lex) * sim)


def run_order(store: Store, query: Query) -> np.ndarray:
    """The store's own order: for DL19, the first-stage BM25 run over the whole MS MARCO collection (its corpus
    statistics, not the 100 candidates'), the ranking every DL19 reranker is compared with."""
    return np.arange(len(store.texts))


def ablated(**changes: Any) -> System:
    """The shipped default with one of its parts taken out (`changes` replace fields of the profile it picks)."""

    def system(store: Store, query: Query) -> np.ndarray:
        return cairn_system(store, query, changes=changes)

    return system


SYSTEMS: dict[str, System] = {
    "bm25": lambda store, q: _rank(bm25s_scores(store, q)),
    "dense": lambda store, q: _rank(cosine(store, q)),
    "rrf": rrf,
    "blend": blend,
    "old default": composite_system,
    "default": cairn_system,
}
# What moved each number: the default less one part at a time (the dialog and sequence kinds have parts to take
# out; on a store of plain notes every row is the default)
ABLATIONS: dict[str, System] = {
    "default": cairn_system,
    "- joined keywords (a turn with the turn it answers)": ablated(context_keywords=0.0),
    "- neighbour share": ablated(neighbour_weight=0.0),
    "- both (= the seed's weights)": ablated(context_keywords=0.0, neighbour_weight=0.0),
    "old dialog profile (keywords 0.30, neighbours 0.5)": ablated(
        context_keywords=0.0, weights={"similarity": 0.5, "keywords": 0.30, "scope": 0.05}
    ),
}


# ---------------------------------------------------------------- diagnostic variants (stdout only)


def cairn_bm25_scores(store: Store, query: Query) -> np.ndarray:
    from cairn_cli.core.text import terms

    _, table = store.cached("cairn", _cairn_table)
    return np.asarray(table.index.scores(terms(query.text)), dtype=np.float64)


def fusion(w_lex: float, w_sim: float = 0.50, norm: str = "max", lex: Callable = cairn_bm25_scores) -> System:
    def system(store: Store, query: Query) -> np.ndarray:
        sims = cosine(store, query).astype(np.float64)
        sims = np.maximum(sims, 0.0) if norm == "max" else _normalise(sims, norm)
        score = w_sim * sims + w_lex * _normalise(lex(store, query), norm)
        return np.lexsort((-np.arange(len(score)), -score))  # composite's tie-break: newer (higher) id first

    return system


DIAGNOSTICS: dict[str, System] = {
    "composite (reimpl, 0.15/0.50 max)": fusion(0.15),
    "cairn BM25 alone": fusion(1.0, 0.0),
    **{f"max-norm w_lex={w}": fusion(w) for w in (0.05, 0.30, 0.50, 1.00, 2.00)},
    **{f"minmax both {a}/{b}": fusion(a, b, "minmax") for a, b in ((0.5, 0.5), (0.3, 0.7))},
    "z-score both 0.5/0.5": fusion(0.5, 0.5, "z"),
    "bm25s max-norm 0.15/0.50": fusion(0.15, lex=bm25s_scores),
}


# ---------------------------------------------------------------- metrics


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def ndcg(ranking: np.ndarray, query: Query, k: int = K_NDCG) -> float:
    """Linear gain (trec_eval's; Cranfield's graded judgments were reported that way from the first run); a memory
    without a judgment counts 0; the ideal ranking is over every judged grade of the query (`ideal`, as TREC)."""
    ideal = query.ideal if query.ideal is not None else list(query.relevant.values())
    return _or_nan(metrics.ndcg([query.relevant.get(int(d), 0) for d in ranking[:k]], ideal, k, exponential=False))


def average_precision(ranking: np.ndarray, query: Query, k: int = K_MAP) -> float:
    hits = np.array([int(d) in query.relevant for d in ranking[:k]])
    return float((np.cumsum(hits) / np.arange(1, len(hits) + 1))[hits].sum() / len(query.relevant))


def recall(ranking: np.ndarray, query: Query, k: int) -> float:
    """Share of the query's relevant memories in the first k; NaN (left out of the means) when it has none."""
    relevant = query.recall_relevant if query.recall_relevant is not None else set(query.relevant)
    return _or_nan(metrics.recall_at([int(d) for d in ranking[:k]], set(relevant), k))


def r_at(k: int) -> Callable[[np.ndarray, Query], float]:
    return lambda ranking, query: recall(ranking, query, k)


CRAN_METRICS = {"R@5": r_at(5), "NDCG@10": ndcg, "MAP@100": average_precision}
LOCOMO_METRICS = {"R@5": r_at(5), "R@10": r_at(10), "NDCG@10": ndcg}
DL19_METRICS = {"R@5": r_at(5), "NDCG@10": ndcg}
COMPARED = ("R@5", "NDCG@10")  # the metrics with a paired interval against the reference


def evaluate(
    stores: list[Store], systems: dict[str, System], metrics: dict[str, Callable], per_query: dict | None = None
) -> dict:
    """Per system: {"all": means over every query, per-category means, "n"}; category 5 is left out of "all".
    A metric a query cannot be scored on (NaN) is left out of that metric's mean. When `per_query` is given, it is
    filled with each system's per-query values: {system: {group: array (queries x metrics)}}, queries in the same
    order for every system."""
    out: dict[str, dict] = {}
    for name, system in systems.items():
        rows: dict[Any, list[list[float]]] = {}
        for store in stores:
            for q in store.queries:
                ranking = system(store, q)
                values = [fn(ranking, q) for fn in metrics.values()]
                if q.category is not None:
                    rows.setdefault(q.category, []).append(values)
                if q.category != EXCLUDED_CATEGORY:
                    rows.setdefault("all", []).append(values)
        arrays = {group: np.array(v, dtype=np.float64) for group, v in rows.items()}
        if per_query is not None:
            per_query[name] = arrays
        out[name] = {
            group: {"n": len(a), **dict(zip(metrics, np.nanmean(a, axis=0).tolist()))} for group, a in arrays.items()
        }
    return out


def paired_interval(diff: np.ndarray, resamples: int = BOOTSTRAP, seed: int = SEED) -> dict[str, float | None]:
    """Mean of the per-question differences and its 95% percentile interval from a seeded paired bootstrap (the
    questions are resampled, each keeping both systems' values). Questions a metric cannot score are left out."""
    d = diff[~np.isnan(diff)]
    if len(d) == 0:
        return {"diff": None, "low": None, "high": None, "n": 0}
    if len(d) == 1:
        return {"diff": float(d[0]), "low": None, "high": None, "n": 1}
    idx = np.random.default_rng(seed).integers(0, len(d), size=(resamples, len(d)))
    low, high = np.percentile(d[idx].mean(axis=1), [2.5, 97.5])
    return {"diff": float(d.mean()), "low": float(low), "high": float(high), "n": len(d)}


def compare(res: dict[str, dict], per_query: dict, metric_names: list[str], reference: str) -> None:
    """Adds to every system's groups `vs_reference`: {metric: paired interval of (system - reference)}."""
    for name, groups in res.items():
        for group, summary in groups.items():
            summary["vs_reference"] = {
                m: paired_interval(per_query[name][group][:, j] - per_query[reference][group][:, j])
                for j, m in enumerate(metric_names)
                if m in COMPARED
            }


PEERS = ("bm25", "dense", "rrf", "blend")  # what peer memory tools ship (#26's bar: the best of them + 0.02)


def versus_best_peer(res: dict[str, dict], per_query: dict, system: str = "default") -> list[str]:
    """Per compared metric: `system` against the best peer on this set (by its mean), a paired 95% interval."""
    lines = []
    metrics = [m for m in next(iter(res.values()))["all"] if m not in ("n", "vs_reference", "vs_best_peer")]
    for j, metric in enumerate(metrics):
        if metric not in COMPARED:
            continue
        peers = [p for p in PEERS if p in res]
        best = max(peers, key=lambda p: res[p]["all"][metric])
        iv = paired_interval(per_query[system]["all"][:, j] - per_query[best]["all"][:, j])
        res[system]["all"].setdefault("vs_best_peer", {})[metric] = {"peer": best, **iv}
        lines.append(f"{system} − best peer on {metric} ({best}): {_delta(iv)}")
    return lines


# ---------------------------------------------------------------- datasets


def _encode(texts: list[str]) -> np.ndarray:
    from cairn_cli.ml.models import get_encoder

    return get_encoder("all-MiniLM-L6-v2").encode(texts)


def in_part(held_out: bool, part: str) -> bool:
    return part == "all" or (part == "held-out") == held_out


def _cran_records(path: Path) -> list[dict[str, str]]:
    """`.I n` starts a record, `.T/.A/.B/.W` a field (a repeated marker appends); read_text folds CRLF."""
    records = []
    for chunk in re.split(r"^\.I ", path.read_text(), flags=re.M)[1:]:
        rec_id, *parts = re.split(r"^\.([TABW])[ \t]*$", chunk, flags=re.M)
        record = {"id": rec_id.strip()}
        for key, body in zip(parts[::2], parts[1::2]):
            record[key] = record.get(key, "") + body
        records.append(record)
    return records


def cranfield_held_out(query_numbers: list[int]) -> set[int]:
    """The held-out Cranfield queries: a seeded CRAN_HELD_OUT_SHARE of the judged ones, by query number (the
    1-based position cranqrel uses), drawn once from all of them (--limit-queries does not move it)."""
    ordered = sorted(query_numbers)
    random.Random(SEED).shuffle(ordered)
    return set(ordered[: round(CRAN_HELD_OUT_SHARE * len(ordered))])


def load_cranfield(data: Path, limit: int | None, part: str = "all") -> list[Store]:
    base = data / "cranfield"
    docs = _cran_records(base / "cran.all.1400")
    doc_index = {int(d["id"]): i for i, d in enumerate(docs)}
    texts = [" ".join((d.get("T", "") + "\n" + d.get("W", "")).split()) for d in docs]
    queries = [" ".join(q.get("W", "").split()) for q in _cran_records(base / "cran.qry")]
    judged: dict[int, dict[int, int]] = {}
    for line in (base / "cranqrel").read_text().splitlines():
        if line.strip():
            qpos, doc, code = (int(x) for x in line.split())
            if code in CRAN_GRADES:
                judged.setdefault(qpos - 1, {})[doc_index[doc]] = CRAN_GRADES[code]
    with_judgment = [i for i in range(len(queries)) if judged.get(i)]
    held = cranfield_held_out([i + 1 for i in with_judgment])
    keep = [i for i in with_judgment if in_part(i + 1 in held, part)][:limit]
    print(f"cranfield: embedding {len(texts)} docs + {len(keep)} queries ({part})", file=sys.stderr)
    store = Store(texts, _encode(texts))
    qvecs = _encode([queries[i] for i in keep])
    store.queries = [Query(queries[i], qvecs[j], judged[i], qid=str(i + 1)) for j, i in enumerate(keep)]
    return [store]


def dia_ids(raw: Any) -> set[str]:
    """Normalise messy evidence ("D8:6; D9:17", "D:11:26", "D30:05") to {"D8:6", ...}."""
    items = raw if isinstance(raw, list) else [raw]
    return {f"D{n}:{k}" for item in items for n, k in DIA_ID.findall(str(item))}


def load_locomo(data: Path, limit: int | None, part: str = "all") -> tuple[dict[str, list[Store]], dict[str, int]]:
    """One store per conversation and variant (its turns; its observations). `part` keeps the held-out
    conversations (locomo.HELD_OUT), the others (dev) or all (the default: seven stores, in the file's order)."""
    convs = json.loads((data / "locomo" / "locomo_dev.json").read_text())
    stores: dict[str, list[Store]] = {"turns": [], "observations": []}
    skipped = {"turns": 0, "observations": 0}
    for conv in convs:
        if not in_part(conv["sample_id"] in locomo.HELD_OUT, part):
            continue
        sessions = sorted(
            (int(m.group(1)), v)
            for k, v in conv["conversation"].items()
            if (m := re.fullmatch(r"session_(\d+)", k)) and isinstance(v, list)
        )
        turns = [(dia_ids(t["dia_id"]), f"{t['speaker']}: {t['text']}") for _, s in sessions for t in s]
        observations = [
            (dia_ids(ref), text)
            for _, by_speaker in sorted(conv["observation"].items())
            for facts in by_speaker.values()
            for text, ref in facts
        ]
        qa = conv["qa"][:limit]
        print(
            f"locomo {conv['sample_id']}: embedding {len(turns)} turns, {len(observations)} observations, "
            f"{len(qa)} questions",
            file=sys.stderr,
        )
        qvecs = _encode([q["question"] for q in qa])
        for variant, memories in (("turns", turns), ("observations", observations)):
            texts = [text for _, text in memories]
            store = Store(texts, _encode(texts))
            for j, (q, vec) in enumerate(zip(qa, qvecs)):
                evidence = dia_ids(q["evidence"])
                relevant = {i: 3 for i, (ids, _) in enumerate(memories) if ids & evidence}  # constant gain = binary
                if relevant:
                    store.queries.append(
                        Query(q["question"], vec, relevant, int(q["category"]), qid=f"{conv['sample_id']}/{j}")
                    )
                else:
                    skipped[variant] += 1
            stores[variant].append(store)
    return stores, skipped


def load_dl19(data: Path, limit: int | None) -> list[Store]:
    """TREC DL 2019 passages, reranking: each query's store is BM25's top 100 for it (with their text, as the
    run file gives them); grades 0-3 from the qrels, a passage without a judgment counts 0 (as TREC scores it).
    nDCG@10's ideal ranking is over every judged passage of the query (trec_eval's), R@5 over the store's passages
    graded >= DL19_RECALL_GRADE. All 43 judged queries: the set is too small to split."""
    base = data / "trec_dl"
    qrels: dict[str, dict[str, int]] = {}
    for line in (base / "qrels.dl19-passage.txt").read_text().splitlines():
        if line.strip():
            qid, _, docid, grade = line.split()
            qrels.setdefault(qid, {})[docid] = int(grade)
    run = json.loads((base / "retrieve_results_BM25_dl19.json").read_text())
    entries = [e for e in run if e["hits"] and str(e["hits"][0]["qid"]) in qrels][:limit]
    texts_all = [h["content"] for e in entries for h in e["hits"]]
    print(f"dl19: embedding {len(texts_all)} passages of {len(entries)} queries", file=sys.stderr)
    vecs_all = _encode(texts_all)
    qvecs = _encode([e["query"] for e in entries])
    stores, at = [], 0
    for e, qvec in zip(entries, qvecs):
        hits = sorted(e["hits"], key=lambda h: h["rank"])
        qid = str(hits[0]["qid"])
        judged = qrels[qid]
        grades = [judged.get(str(h["docid"]), 0) for h in hits]
        store = Store([h["content"] for h in hits], vecs_all[at : at + len(hits)])
        at += len(hits)
        store.queries = [
            Query(
                e["query"],
                qvec,
                {i: g for i, g in enumerate(grades) if g >= 1},
                qid=qid,
                ideal=[g for g in judged.values() if g >= 1],
                recall_relevant=frozenset(i for i, g in enumerate(grades) if g >= DL19_RECALL_GRADE),
            )
        ]
        stores.append(store)
    return stores


# ---------------------------------------------------------------- reporting


def table(header: list[str], rows: list[list[Any]], left: int = 1) -> str:
    """A markdown table: floats to 3 decimals, the first `left` columns left-aligned, the others right-aligned."""
    cells = [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    rule = "|" + "---|" * left + "---:|" * (len(header) - left)
    return "\n".join(["| " + " | ".join(header) + " |", rule, *("| " + " | ".join(r) + " |" for r in cells)])


def overall_table(res: dict[str, dict], metrics: dict, first: str = "system") -> str:
    """One row per system, overall figures (Cranfield, DL19, and the diagnostic section)."""
    return table(
        [first, "queries", *metrics], [[s, r["all"]["n"], *(r["all"][m] for m in metrics)] for s, r in res.items()]
    )


def _group_label(group: Any) -> str:
    if group == "all":
        return "**overall (excl. 5)**"
    return f"{group} {LOCOMO_CATEGORIES[group]}" + (" (excluded)" if group == EXCLUDED_CATEGORY else "")


def _groups(res: dict[str, dict]) -> list[Any]:
    first = res[next(iter(res))]
    return [g for g in [*sorted(LOCOMO_CATEGORIES), "all"] if g in first]


def category_table(res: dict[str, dict], metrics: dict) -> str:
    """One row per LoCoMo category (then overall), systems side by side."""
    systems = list(res)
    rows = [
        [_group_label(g), res[systems[0]][g]["n"], *(res[s][g][m] for s in systems for m in metrics)]
        for g in _groups(res)
    ]
    return table(["category", "n", *(f"{s} {m}" for s in systems for m in metrics)], rows)


def _delta(iv: dict[str, float | None]) -> str:
    if iv["diff"] is None:
        return "–"
    if iv["low"] is None:
        return f"{iv['diff']:+.3f}"
    return f"{iv['diff']:+.3f} [{iv['low']:+.3f}, {iv['high']:+.3f}]"


def interval_table(res: dict[str, dict], reference: str, groups: list[Any], label_groups: bool) -> str:
    """Per group and system: R@5 and nDCG@10, each with the paired 95% interval of its difference to `reference`."""
    header = ["system", "n", "R@5", f"R@5 − {reference} [95%]", "nDCG@10", f"nDCG@10 − {reference} [95%]"]
    if label_groups:
        header = ["category", *header]
    rows = []
    for g in groups:
        for name, by_group in res.items():
            summary = by_group[g]
            cells: list[Any] = [f"**{name}**" if name == reference else name, summary["n"]]
            for m in COMPARED:
                cells += [summary[m], "(reference)" if name == reference else _delta(summary["vs_reference"][m])]
            rows.append(([_group_label(g)] if label_groups else []) + cells)
    return table(header, rows, left=2 if label_groups else 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data dir (default: ../shared/data)")
    parser.add_argument(
        "--datasets", default="cranfield,locomo,dl19", help="comma-separated: cranfield,locomo,dl19 (default: all)"
    )
    parser.add_argument(
        "--part",
        choices=PARTS,
        default="held-out",
        help="the part reported: LoCoMo's held-out conversations and Cranfield's held-out queries (default), the "
        "dev part, or all; DL19 always reports its 43 queries",
    )
    parser.add_argument(
        "--reference",
        default="old default",
        help="the system the paired intervals are taken against (default: the old default, the composite as shipped "
        "before #26)",
    )
    parser.add_argument(
        "--limit-queries",
        type=int,
        default=None,
        metavar="N",
        help="at most N queries per store (quick run; LoCoMo has 7 stores per variant, DL19 one per query)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench", help="where ranking.md / ranking.json go")
    parser.add_argument("--diagnose", action="store_true", help="also print composite variants (stdout only)")
    parser.add_argument(
        "--reranker",
        default="auto",
        help="composite + reranker row: auto (the live resolve_reranker()), none, or a model dir",
    )
    args = parser.parse_args(argv)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if unknown := set(datasets) - set(DATASETS):
        parser.error(f"unknown datasets: {', '.join(sorted(unknown))}")
    if missing := [d for d in datasets if not (args.data / DATASETS[d]).is_dir()]:
        sys.exit(
            f"error: benchmark data not found: {', '.join(str(args.data / DATASETS[d]) for d in missing)} "
            "(the shared data folder sits next to the project; pass --data DIR)"
        )
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(var, "1")
    from cairn_cli.config import Settings
    from cairn_cli.ml.device import simd_summary

    start, diag_seconds = time.perf_counter(), 0.0
    systems = dict(SYSTEMS)
    model, why = load_reranker(args.reranker)
    if model is not None:
        systems["composite+reranker"] = reranker_system(model)
    if args.reference not in systems:
        parser.error(f"--reference must be one of: {', '.join(systems)}")
    reranker_line = (
        f"composite+reranker: {model.name} ({model.dtype}, floor {model.floor}, blend {Settings().RERANK_BLEND})"
        if model
        else f"composite+reranker: no row — {why}"
    )
    part_name = {"held-out": "held-out part", "dev": "dev part", "all": "whole set"}[args.part]
    # (results key, section title, stores, metrics, size line, extra systems first)
    jobs: list[tuple[str, str, list[Store], dict[str, Callable], str, dict[str, System]]] = []
    results: dict[str, Any] = {}
    split: dict[str, str] = {}
    if "cranfield" in datasets:
        stores = load_cranfield(args.data, args.limit_queries, args.part)
        split["cranfield"] = (
            f"by query number, seeded (random.Random({SEED})) {1 - CRAN_HELD_OUT_SHARE:.0%} dev / "
            f"{CRAN_HELD_OUT_SHARE:.0%} held-out of the queries with a judgment"
        )
        jobs.append(
            (
                "cranfield",
                f"Cranfield, {part_name} (graded NDCG@10, MAP@100; R@5 counts every judged document; "
                "text = title + abstract)",
                stores,
                CRAN_METRICS,
                f"Cranfield ({args.part}): {len(stores[0].texts)} docs, {len(stores[0].queries)} queries with a "
                "relevant judgment",
                {},
            )
        )
    if "locomo" in datasets:
        by_variant, skipped = load_locomo(args.data, args.limit_queries, args.part)
        results["locomo_skipped_no_relevant"] = skipped
        split["locomo"] = (
            f"by conversation: held out {', '.join(locomo.HELD_OUT)} (scripts/locomo.py HELD_OUT: the last three of "
            "the seven, as bench_relevance.py / bench_dedup.py split and #26's held-out targets were measured), "
            "dev the other four"
        )
        for variant, stores in by_variant.items():
            jobs.append(
                (
                    f"locomo_{variant}",
                    f"LoCoMo {variant}, {part_name} (binary NDCG@10; overall excludes category 5)",
                    stores,
                    LOCOMO_METRICS,
                    f"LoCoMo {variant} ({args.part}): {len(stores)} stores, {sum(len(s.texts) for s in stores)} "
                    f"memories, {sum(len(s.queries) for s in stores)} questions "
                    f"({skipped[variant]} skipped: no resolvable relevant memory)",
                    {},
                )
            )
    if "dl19" in datasets:
        stores = load_dl19(args.data, args.limit_queries)
        split["dl19"] = "not split: all its 43 queries are reported whatever --part says (too few to hold some out)"
        n_recall = sum(bool(q.recall_relevant) for s in stores for q in s.queries)
        jobs.append(
            (
                "dl19",
                f"TREC DL 2019 passages, all {len(stores)} queries (rerank BM25's top 100: each query's store is its 100 "
                f"candidates; graded NDCG@10 as trec_eval; R@5 counts grade ≥ {DL19_RECALL_GRADE} as relevant)",
                stores,
                DL19_METRICS,
                f"TREC DL 2019: {len(stores)} queries × their BM25 top 100 ({sum(len(s.texts) for s in stores)} "
                f"passages), unjudged = 0; R@5 over the {n_recall} queries with a grade ≥ {DL19_RECALL_GRADE} "
                "passage among their candidates; `bm25 run order` = the run file's own order (BM25 over the whole "
                "collection), for reference — `bm25` is bm25s over each query's 100 candidates, as a store of them sees "
                "it",
                {"bm25 run order": run_order},
            )
        )
    summary_sections, sections, diagnostics, ablations, kinds = [], [], [], [], []
    for key, title, stores, metric_set, _, extra in jobs:
        per_query: dict[str, dict] = {}
        found = [store_kind(st) for st in stores]
        kinds.append(
            f"{key}: " + ", ".join(f"{k} ({found.count(k)} of {len(found)} stores)" for k in sorted(set(found)))
        )
        results[key] = evaluate(stores, {**extra, **systems}, metric_set, per_query)
        ablation = evaluate(stores, ABLATIONS, metric_set)
        results[f"{key}_ablation"] = ablation
        if key.startswith("locomo"):
            results[f"{key}_tried"] = evaluate(stores, TRIED, metric_set)
        ablations.append(f"### {title.split(' (')[0]}\n\n" + overall_table(ablation, metric_set, "default less"))
        compare(results[key], per_query, list(metric_set), args.reference)
        is_locomo = key.startswith("locomo")
        peer_lines = versus_best_peer(results[key], per_query) if "default" in results[key] else []
        summary_sections.append(
            f"### {title.split(' (')[0]}\n\n"
            + interval_table(results[key], args.reference, ["all"], False)
            + "".join(f"\n- {line}" for line in peer_lines)
        )
        if is_locomo:
            sections.append(
                f"## {title}\n\n{category_table(results[key], metric_set)}\n\n"
                f"Per category, paired 95% intervals against {args.reference}:\n\n"
                + interval_table(results[key], args.reference, _groups(results[key]), True)
            )
        else:
            sections.append(f"## {title}\n\n{overall_table(results[key], metric_set)}")
        if args.diagnose:
            t0 = time.perf_counter()
            diagnostics.append(
                f"### {key} (overall)\n\n"
                + overall_table(evaluate(stores, DIAGNOSTICS, metric_set), metric_set, "variant")
            )
            diag_seconds += time.perf_counter() - t0
    elapsed = time.perf_counter() - start - diag_seconds
    command = " ".join(["python", *sys.argv]) if argv is None else f"main({argv!r})"
    meta = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} cores CPU "
        f"({platform.machine()}, {platform.python_implementation()} {platform.python_version()}), no GPU",
        "cpu_flags": simd_summary(),
        "command": command,
        "part": args.part,
        "split": split,
        "reference": args.reference,
        "bootstrap": {"resamples": BOOTSTRAP, "seed": SEED, "interval": "2.5-97.5 percentiles, paired by question"},
        "weights": Settings().weights(),
        "kinds": kinds,
        "sizes": [job[4] for job in jobs],
        "seconds": round(elapsed, 1),
        "diagnostic_seconds": round(diag_seconds, 1),
        "reranker": reranker_line,
    }
    header = "\n".join(
        [
            "# Ranking benchmark: BM25 vs dense vs RRF vs blend vs the old default vs the default",
            "",
            f"- date: {meta['date']}",
            f"- machine: {meta['machine']}; CPU flags: {meta['cpu_flags']}",
            f"- command: `{command}`",
            f"- part reported: **{args.part}**",
            *(f"- split, {name}: {how}" for name, how in split.items()),
            f"- old default: the composite as shipped before #26, weights {meta['weights']} everywhere",
            "- default: as shipped now (CAIRN_RANK_PROFILE=auto): each store ranked with the profile of its kind "
            "(core/ranking/kinds.py; dialog: the same weights + the keywords of a turn joined with the one before it "
            "0.30 + half the better neighbour's score; notes: the old default)",
            "- kinds detected: " + "; ".join(kinds),
            "- dense: all-MiniLM-L6-v2 cosine; bm25: bm25s (Lucene BM25, k1=1.5, b=0.75, PyStemmer English, "
            "bm25s's 33-word English stop list), over each store",
            "- rrf: reciprocal rank fusion, k = 60, of the bm25s list (memories with a matching term) and the dense "
            "list (all); blend: per query, bm25s scores and cosines each min-max normalised over the store, 0.5 / 0.5",
            f"- intervals: paired bootstrap over questions ({BOOTSTRAP} resamples, seed {SEED}) of the per-question "
            f"difference to **{args.reference}**, 2.5–97.5 percentiles",
            f"- {reranker_line}",
            *(f"- {line}" for line in meta["sizes"]),
            f"- run time: {elapsed:.0f} s (model load, embedding, all systems; diagnostics excluded)",
        ]
    )
    summary = (
        f"## Summary: R@5 and nDCG@10 on the {part_name}, paired 95% intervals against {args.reference}\n\n"
        "LoCoMo overall excludes category 5 (adversarial).\n\n" + "\n\n".join(summary_sections)
    )
    ablation_text = (
        "## Ablation: what moved each number (the default less one part; overall, same part)\n\n"
        + "\n\n".join(ablations)
    )
    report = header + "\n\n" + summary + "\n\n" + ablation_text + "\n\n" + "\n\n".join(sections) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ranking.md").write_text(report)
    (args.out / "ranking.json").write_text(json.dumps({"meta": meta, **results}, indent=2) + "\n")
    print(report)
    if diagnostics:
        print(f"## Diagnostics: composite variants ({diag_seconds:.0f} s; cairn BM25 unless named; stdout only)\n")
        print("\n\n".join(diagnostics))
    print(f"wrote {args.out / 'ranking.md'} and ranking.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
