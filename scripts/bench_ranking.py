"""Ranking-quality benchmark: BM25 vs dense vs cairn's composite, side by side, on Cranfield and LoCoMo dev.

    .venv/bin/python scripts/bench_ranking.py [--diagnose] [--limit-queries 20 --datasets cranfield --out /tmp/b]

Data is read in place from ../shared/data, never copied. A system is `(store, query) -> memory indices, best
first`: add a row by adding one entry to SYSTEMS. `--diagnose` prints composite variants (stdout only).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cairn_cli.core import metrics

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
NOW = dt.datetime(2026, 1, 1)  # every memory is "updated now": recency is constant (and weighs 0 anyway)
CRAN_GRADES = {1: 3, 2: 2, 3: 1, 4: 1}  # Cleverdon codes run backwards; -1 is ungraded
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
EXCLUDED_CATEGORY = 5
DIA_ID = re.compile(r"D:?(\d+):0*(\d+)")
K_NDCG, K_MAP = 10, 100


@dataclass
class Query:
    text: str
    vec: np.ndarray
    relevant: dict[int, int]  # memory index -> grade (>= 1)
    category: int | None = None


@dataclass
class Store:
    """One memory store: its texts, their embeddings, its queries, and per-system indexes built on first use."""

    texts: list[str]
    vecs: np.ndarray
    queries: list[Query] = field(default_factory=list)
    _built: dict[str, Any] = field(default_factory=dict, repr=False)

    def cached(self, key: str, build: Callable[[Store], Any]) -> Any:
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
    import bm25s

    retriever, stemmer = store.cached("bm25s", _bm25s_index)
    tokens = bm25s.tokenize([query.text], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)[0]
    ids = retriever.get_tokens_ids(tokens)
    return retriever.get_scores_from_ids(ids) if ids else np.zeros(len(store.texts), dtype=np.float32)


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
    return settings, ScoringTable(cands, settings.KEYWORD_FIELD_WEIGHT)


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
        model, notes = reranking.load_reranker(settings)
        return model, "; ".join(notes) or "resolved by resolve_reranker()"
    res = Resolution(
        "student", f"student:{choice}", Path(choice), settings.CROSS_ENCODER_STUDENT_FLOOR, "cpu", "identity"
    )
    return CrossEncoderReranker(res, dtype=settings.RERANKER_DTYPE, max_length=settings.RERANKER_MAX_LENGTH), choice


SYSTEMS: dict[str, System] = {
    "bm25": lambda store, q: _rank(bm25s_scores(store, q)),
    "dense": lambda store, q: _rank(cosine(store, q)),
    "composite": composite_system,
}


# ---------------------------------------------------------------- diagnostic variants (stdout only)


def cairn_bm25_scores(store: Store, query: Query) -> np.ndarray:
    from cairn_cli.core.text import terms

    _, table = store.cached("cairn", _cairn_table)
    return np.asarray(table.index.scores(terms(query.text)), dtype=np.float64)


def _normalise(x: np.ndarray, how: str) -> np.ndarray:
    if how == "max":  # cairn's: BM25 / best BM25, cosine clipped at 0 (not rescaled)
        return x / (x.max() or 1.0)
    if how == "minmax":
        return (x - x.min()) / ((x.max() - x.min()) or 1.0)
    return (x - x.mean()) / (x.std() or 1.0)  # "z"


def fusion(w_lex: float, w_sim: float = 0.50, norm: str = "max", lex: Callable = cairn_bm25_scores) -> System:
    def system(store: Store, query: Query) -> np.ndarray:
        sims = cosine(store, query).astype(np.float64)
        sims = np.maximum(sims, 0.0) if norm == "max" else _normalise(sims, norm)
        score = w_sim * sims + w_lex * _normalise(lex(store, query), norm)
        return np.lexsort((-np.arange(len(score)), -score))  # composite's tie-break: newer (higher) id first

    return system


def rrf(store: Store, query: Query, k: int = 60) -> np.ndarray:
    score = np.zeros(len(store.texts))
    for ranking in (_rank(bm25s_scores(store, query)), _rank(cosine(store, query))):
        score[ranking] += 1.0 / (k + 1 + np.arange(len(ranking)))
    return _rank(score)


DIAGNOSTICS: dict[str, System] = {
    "composite (reimpl, 0.15/0.50 max)": fusion(0.15),
    "cairn BM25 alone": fusion(1.0, 0.0),
    **{f"max-norm w_lex={w}": fusion(w) for w in (0.05, 0.30, 0.50, 1.00, 2.00)},
    **{f"minmax both {a}/{b}": fusion(a, b, "minmax") for a, b in ((0.5, 0.5), (0.3, 0.7))},
    "z-score both 0.5/0.5": fusion(0.5, 0.5, "z"),
    "bm25s max-norm 0.15/0.50": fusion(0.15, lex=bm25s_scores),
    "RRF(bm25s, dense) k=60": rrf,
}


# ---------------------------------------------------------------- metrics


def ndcg(ranking: np.ndarray, relevant: dict[int, int], k: int = K_NDCG) -> float:
    # linear gain: Cranfield's graded judgments were reported that way from the first run
    return (
        metrics.ndcg([relevant.get(int(d), 0) for d in ranking[:k]], list(relevant.values()), k, exponential=False)
        or 0.0
    )


def average_precision(ranking: np.ndarray, relevant: dict[int, int], k: int = K_MAP) -> float:
    hits = np.array([int(d) in relevant for d in ranking[:k]])
    return float((np.cumsum(hits) / np.arange(1, len(hits) + 1))[hits].sum() / len(relevant))


def recall(ranking: np.ndarray, relevant: dict[int, int], k: int) -> float:
    return metrics.recall_at([int(d) for d in ranking[:k]], set(relevant), k) or 0.0


CRAN_METRICS = {"NDCG@10": ndcg, "MAP@100": average_precision}
LOCOMO_METRICS = {"R@5": lambda r, rel: recall(r, rel, 5), "R@10": lambda r, rel: recall(r, rel, 10), "NDCG@10": ndcg}


def evaluate(stores: list[Store], systems: dict[str, System], metrics: dict[str, Callable]) -> dict:
    """Per system: {"all": means over every query, per-category means, "n"}; category 5 is left out of "all"."""
    out: dict[str, dict] = {}
    for name, system in systems.items():
        rows: dict[Any, list[list[float]]] = {}
        for store in stores:
            for q in store.queries:
                ranking = system(store, q)
                values = [fn(ranking, q.relevant) for fn in metrics.values()]
                if q.category is not None:
                    rows.setdefault(q.category, []).append(values)
                if q.category != EXCLUDED_CATEGORY:
                    rows.setdefault("all", []).append(values)
        out[name] = {
            group: {"n": len(v), **dict(zip(metrics, np.mean(v, axis=0).tolist()))} for group, v in rows.items()
        }
    return out


# ---------------------------------------------------------------- datasets


def _encode(texts: list[str]) -> np.ndarray:
    from cairn_cli.ml.models import get_encoder

    return get_encoder("all-MiniLM-L6-v2").encode(texts)


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


def load_cranfield(data: Path, limit: int | None) -> list[Store]:
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
    keep = [i for i in range(len(queries)) if judged.get(i)][:limit]
    print(f"cranfield: embedding {len(texts)} docs + {len(keep)} queries", file=sys.stderr)
    store = Store(texts, _encode(texts))
    qvecs = _encode([queries[i] for i in keep])
    store.queries = [Query(queries[i], qvecs[j], judged[i]) for j, i in enumerate(keep)]
    return [store]


def dia_ids(raw: Any) -> set[str]:
    """Normalise messy evidence ("D8:6; D9:17", "D:11:26", "D30:05") to {"D8:6", ...}."""
    items = raw if isinstance(raw, list) else [raw]
    return {f"D{n}:{k}" for item in items for n, k in DIA_ID.findall(str(item))}


def load_locomo(data: Path, limit: int | None) -> tuple[dict[str, list[Store]], dict[str, int]]:
    convs = json.loads((data / "locomo" / "locomo_dev.json").read_text())
    stores: dict[str, list[Store]] = {"turns": [], "observations": []}
    skipped = {"turns": 0, "observations": 0}
    for conv in convs:
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
            for q, vec in zip(qa, qvecs):
                evidence = dia_ids(q["evidence"])
                relevant = {i: 3 for i, (ids, _) in enumerate(memories) if ids & evidence}  # constant gain = binary
                if relevant:
                    store.queries.append(Query(q["question"], vec, relevant, int(q["category"])))
                else:
                    skipped[variant] += 1
            stores[variant].append(store)
    return stores, skipped


# ---------------------------------------------------------------- reporting


def table(header: list[str], rows: list[list[Any]]) -> str:
    cells = [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    rule = "|---|" + "---:|" * (len(header) - 1)
    return "\n".join(["| " + " | ".join(header) + " |", rule, *("| " + " | ".join(r) + " |" for r in cells)])


def overall_table(res: dict[str, dict], metrics: dict, first: str = "system") -> str:
    """One row per system, overall figures (Cranfield, and the diagnostic section)."""
    return table(
        [first, "queries", *metrics], [[s, r["all"]["n"], *(r["all"][m] for m in metrics)] for s, r in res.items()]
    )


def category_table(res: dict[str, dict], metrics: dict) -> str:
    """One row per LoCoMo category (then overall), systems side by side."""
    systems = list(res)
    rows = []
    for group in [*sorted(LOCOMO_CATEGORIES), "all"]:
        if (first := res[systems[0]].get(group)) is None:
            continue
        label = (
            "**overall (excl. 5)**"
            if group == "all"
            else f"{group} {LOCOMO_CATEGORIES[group]}" + (" (excluded)" if group == EXCLUDED_CATEGORY else "")
        )
        rows.append([label, first["n"], *(res[s][group][m] for s in systems for m in metrics)])
    return table(["category", "n", *(f"{s} {m}" for s in systems for m in metrics)], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data dir (default: ../shared/data)")
    parser.add_argument("--datasets", default="cranfield,locomo", help="comma-separated: cranfield,locomo")
    parser.add_argument(
        "--limit-queries",
        type=int,
        default=None,
        metavar="N",
        help="at most N queries per store (quick run; LoCoMo has 7 stores per variant)",
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
    if unknown := set(datasets) - {"cranfield", "locomo"}:
        parser.error(f"unknown datasets: {', '.join(sorted(unknown))}")
    if missing := [d for d in datasets if not (args.data / d).is_dir()]:
        sys.exit(
            f"error: benchmark data not found: {', '.join(str(args.data / d) for d in missing)} "
            "(the shared data folder sits next to the project; pass --data DIR)"
        )
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(var, "1")
    from cairn_cli.config import Settings

    start, diag_seconds = time.perf_counter(), 0.0
    systems = dict(SYSTEMS)
    model, why = load_reranker(args.reranker)
    if model is not None:
        systems["composite+reranker"] = reranker_system(model)
    reranker_line = (
        f"composite+reranker: {model.name} ({model.dtype}, floor {model.floor}, blend {Settings().RERANK_BLEND})"
        if model
        else f"composite+reranker: no row — {why}"
    )
    # (results key, section title, stores, metrics, size line)
    jobs: list[tuple[str, str, list[Store], dict[str, Callable], str]] = []
    results: dict[str, Any] = {}
    if "cranfield" in datasets:
        stores = load_cranfield(args.data, args.limit_queries)
        jobs.append(
            (
                "cranfield",
                "Cranfield (graded NDCG@10, MAP@100; text = title + abstract)",
                stores,
                CRAN_METRICS,
                f"Cranfield: {len(stores[0].texts)} docs, {len(stores[0].queries)} queries with a relevant judgment",
            )
        )
    if "locomo" in datasets:
        by_variant, skipped = load_locomo(args.data, args.limit_queries)
        results["locomo_skipped_no_relevant"] = skipped
        for variant, stores in by_variant.items():
            jobs.append(
                (
                    f"locomo_{variant}",
                    f"LoCoMo dev: {variant} (binary NDCG@10; overall excludes category 5)",
                    stores,
                    LOCOMO_METRICS,
                    f"LoCoMo dev {variant}: {len(stores)} stores, {sum(len(s.texts) for s in stores)} memories, "
                    f"{sum(len(s.queries) for s in stores)} questions "
                    f"({skipped[variant]} skipped: no resolvable relevant memory)",
                )
            )
    sections, diagnostics = [], []
    for key, title, stores, metric_set, _ in jobs:
        results[key] = evaluate(stores, systems, metric_set)
        render = overall_table if key == "cranfield" else category_table
        sections.append(f"## {title}\n\n{render(results[key], metric_set)}")
        if args.diagnose:
            t0 = time.perf_counter()
            diagnostics.append(
                f"### {key} (overall)\n\n" + overall_table(evaluate(stores, DIAGNOSTICS, metrics), metrics, "variant")
            )
            diag_seconds += time.perf_counter() - t0
    elapsed = time.perf_counter() - start - diag_seconds
    command = " ".join(["python", *sys.argv]) if argv is None else f"main({argv!r})"
    meta = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} cores CPU "
        f"({platform.machine()}, {platform.python_implementation()} {platform.python_version()}), no GPU",
        "command": command,
        "weights": Settings().weights(),
        "sizes": [job[4] for job in jobs],
        "seconds": round(elapsed, 1),
        "diagnostic_seconds": round(diag_seconds, 1),
        "reranker": reranker_line,
    }
    header = "\n".join(
        [
            "# Ranking benchmark: BM25 vs dense vs composite",
            "",
            f"- date: {meta['date']}",
            f"- machine: {meta['machine']}",
            f"- command: `{command}`",
            f"- composite weights: {meta['weights']}",
            "- dense: all-MiniLM-L6-v2 cosine; bm25: bm25s (Lucene BM25, k1=1.5, b=0.75, PyStemmer English, "
            "bm25s's 33-word English stop list)",
            f"- {reranker_line}",
            *(f"- {line}" for line in meta["sizes"]),
            f"- run time: {elapsed:.0f} s (model load, embedding, all systems; diagnostics excluded)",
        ]
    )
    report = header + "\n\n" + "\n\n".join(sections) + "\n"
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
