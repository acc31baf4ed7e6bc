"""Ranking-quality benchmark: BM25 vs dense vs cairn's composite, side by side, on Cranfield and LoCoMo dev.

    .venv/bin/python scripts/bench_ranking.py                      # full run -> bench/ranking.md + ranking.json
    .venv/bin/python scripts/bench_ranking.py --limit-queries 20 --datasets cranfield --out /tmp/bench

Data is read in place from ../shared/data (never copied into the repo). A system is a function
`(store, query) -> memory indices, best first`; add a row by adding one entry to SYSTEMS.
`--diagnose` also prints (stdout only) composite variants: other weights and score normalisations.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
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

    name: str
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
    retriever.index(bm25s.tokenize(store.texts, stopwords="en", stemmer=stemmer, show_progress=False),
                    show_progress=False)
    return retriever, stemmer


def bm25s_scores(store: Store, query: Query) -> np.ndarray:
    import bm25s

    retriever, stemmer = store.cached("bm25s", _bm25s_index)
    tokens = bm25s.tokenize([query.text], stopwords="en", stemmer=stemmer, return_ids=False,
                            show_progress=False)[0]
    ids = retriever.get_tokens_ids(tokens)
    return retriever.get_scores_from_ids(ids) if ids else np.zeros(len(store.texts), dtype=np.float32)


def cosine(store: Store, query: Query) -> np.ndarray:
    return store.vecs @ query.vec


def _cairn_index(store: Store) -> tuple[Any, list[Any], Any]:
    from cairn_cli.config import Settings
    from cairn_cli.core.scoring import Candidate, LexicalIndex, lexical_field

    settings = Settings()
    cands = [Candidate(id=i, content=text, keywords=[], scope="bench", kind="fact", confidence=0.75,
                       updated_at=NOW) for i, text in enumerate(store.texts)]
    index = LexicalIndex([lexical_field(c, settings.KEYWORD_FIELD_WEIGHT) for c in cands])
    return settings, cands, index


def composite_system(store: Store, query: Query) -> np.ndarray:
    """cairn's scorer, called exactly as the product calls it."""
    from cairn_cli.core.scoring import composite

    s, cands, index = store.cached("cairn", _cairn_index)
    sims = cosine(store, query).tolist()
    scored = composite(cands, query.text, sims, scope=None, weights=s.weights(),
                       half_life_days=s.RECENCY_HALF_LIFE_DAYS, keyword_weight=s.KEYWORD_FIELD_WEIGHT,
                       index=index, now=NOW)
    return np.array([sc.candidate.id for sc in scored])


SYSTEMS: dict[str, System] = {
    "bm25": lambda store, q: _rank(bm25s_scores(store, q)),
    "dense": lambda store, q: _rank(cosine(store, q)),
    "composite": composite_system,
}


# ---------------------------------------------------------------- diagnostic variants (stdout only)

def cairn_bm25_scores(store: Store, query: Query) -> np.ndarray:
    from cairn_cli.core.text import terms

    _, _, index = store.cached("cairn", _cairn_index)
    return np.array(index.scores(terms(query.text)))


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
        score = w_sim * np.round(sims, 6) + w_lex * np.round(_normalise(lex(store, query), norm), 6)
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
    "minmax both 0.5/0.5": fusion(0.5, 0.5, "minmax"),
    "minmax both 0.3/0.7": fusion(0.3, 0.7, "minmax"),
    "z-score both 0.5/0.5": fusion(0.5, 0.5, "z"),
    "bm25s max-norm 0.15/0.50": fusion(0.15, lex=bm25s_scores),
    "RRF(bm25s, dense) k=60": rrf,
}


# ---------------------------------------------------------------- metrics

def ndcg(ranking: np.ndarray, relevant: dict[int, int], k: int = K_NDCG) -> float:
    dcg = sum(relevant.get(int(d), 0) / math.log2(i + 2) for i, d in enumerate(ranking[:k]))
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(relevant.values(), reverse=True)[:k]))
    return dcg / ideal


def average_precision(ranking: np.ndarray, relevant: dict[int, int], k: int = K_MAP) -> float:
    hits, total = 0, 0.0
    for i, d in enumerate(ranking[:k]):
        if int(d) in relevant:
            hits += 1
            total += hits / (i + 1)
    return total / len(relevant)


def recall(ranking: np.ndarray, relevant: dict[int, int], k: int) -> float:
    return len(relevant.keys() & {int(d) for d in ranking[:k]}) / len(relevant)


CRAN_METRICS = {"NDCG@10": ndcg, "MAP@100": average_precision}
LOCOMO_METRICS = {"R@5": lambda r, rel: recall(r, rel, 5), "R@10": lambda r, rel: recall(r, rel, 10),
                  "NDCG@10": ndcg}


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
        out[name] = {group: {"n": len(v), **dict(zip(metrics, np.mean(v, axis=0).tolist()))}
                     for group, v in rows.items()}
    return out


# ---------------------------------------------------------------- datasets

def _encode(texts: list[str]) -> np.ndarray:
    from cairn_cli.ml.models import get_encoder

    return get_encoder("all-MiniLM-L6-v2").encode(texts)


def _cran_records(path: Path) -> list[dict[str, str]]:
    """`.I n` starts a record; `.T/.A/.B/.W` start fields (a repeated marker appends to its field)."""
    records: list[dict[str, str]] = []
    key = ""
    for line in path.read_text().splitlines():
        line = line.rstrip("\r")
        if line.startswith(".I"):
            records.append({"id": line[2:].strip()})
        elif re.fullmatch(r"\.[TABW]", line):
            key = line[1]
            records[-1].setdefault(key, "")
        elif records and key:
            records[-1][key] += line + "\n"
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
    store = Store("cranfield", texts, _encode(texts))
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
        sessions = sorted((int(m.group(1)), v) for k, v in conv["conversation"].items()
                          if (m := re.fullmatch(r"session_(\d+)", k)) and isinstance(v, list))
        turns = [(dia_ids(t["dia_id"]), f"{t['speaker']}: {t['text']}") for _, s in sessions for t in s]
        observations = [(dia_ids(ref), text) for _, by_speaker in sorted(conv["observation"].items())
                        for facts in by_speaker.values() for text, ref in facts]
        qa = conv["qa"][:limit]
        print(f"locomo {conv['sample_id']}: embedding {len(turns)} turns, {len(observations)} observations, "
              f"{len(qa)} questions", file=sys.stderr)
        qvecs = _encode([q["question"] for q in qa])
        for variant, memories in (("turns", turns), ("observations", observations)):
            store = Store(f"{conv['sample_id']}/{variant}", [t for _, t in memories], _encode([t for _, t in memories]))
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
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in cells])


def cranfield_table(res: dict) -> str:
    return table(["system", "queries", *CRAN_METRICS], [[s, r["all"]["n"], *(r["all"][m] for m in CRAN_METRICS)]
                                                        for s, r in res.items()])


def locomo_table(res: dict) -> str:
    systems = list(res)
    header = ["category", "n", *(f"{s} {m}" for s in systems for m in LOCOMO_METRICS)]
    rows = []
    for group in [*sorted(LOCOMO_CATEGORIES), "all"]:
        first = res[systems[0]].get(group)
        if first is None:
            continue
        label = (f"**overall (excl. 5)**" if group == "all" else
                 f"{group} {LOCOMO_CATEGORIES[group]}" + (" (excluded)" if group == EXCLUDED_CATEGORY else ""))
        rows.append([label, first["n"], *(res[s][group][m] for s in systems for m in LOCOMO_METRICS)])
    return table(header, rows)


def overall_table(results: dict[str, dict], metrics: dict) -> str:
    """One row per system: overall figures only (for the diagnostic section)."""
    return table(["variant", *metrics], [[s, *(r["all"][m] for m in metrics)] for s, r in results.items()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data dir (default: ../shared/data)")
    parser.add_argument("--datasets", default="cranfield,locomo", help="comma-separated: cranfield,locomo")
    parser.add_argument("--limit-queries", type=int, default=None, metavar="N",
                        help="at most N queries per store (quick run; LoCoMo has 7 stores per variant)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench", help="where ranking.md / ranking.json go")
    parser.add_argument("--diagnose", action="store_true", help="also print composite variants (stdout only)")
    args = parser.parse_args(argv)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if unknown := set(datasets) - {"cranfield", "locomo"}:
        parser.error(f"unknown datasets: {', '.join(sorted(unknown))}")
    if missing := [d for d in datasets if not (args.data / d).is_dir()]:
        sys.exit(f"error: benchmark data not found: {', '.join(str(args.data / d) for d in missing)} "
                 "(the shared data folder sits next to the project; pass --data DIR)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from cairn_cli.config import Settings

    start = time.perf_counter()
    results: dict[str, Any] = {}
    sections: list[str] = []
    sizes: list[str] = []
    diagnostics: list[str] = []
    if "cranfield" in datasets:
        stores = load_cranfield(args.data, args.limit_queries)
        results["cranfield"] = evaluate(stores, SYSTEMS, CRAN_METRICS)
        sizes.append(f"Cranfield: {len(stores[0].texts)} docs, {len(stores[0].queries)} queries with a relevant judgment")
        sections.append("## Cranfield (graded NDCG@10, MAP@100; text = title + abstract)\n\n"
                        + cranfield_table(results["cranfield"]))
        if args.diagnose:
            diagnostics.append("### Cranfield\n\n" + overall_table(evaluate(stores, DIAGNOSTICS, CRAN_METRICS),
                                                                   CRAN_METRICS))
    if "locomo" in datasets:
        by_variant, skipped = load_locomo(args.data, args.limit_queries)
        results["locomo"] = {"skipped_no_relevant": skipped}
        for variant, stores in by_variant.items():
            results["locomo"][variant] = evaluate(stores, SYSTEMS, LOCOMO_METRICS)
            n_mem, n_q = sum(len(s.texts) for s in stores), sum(len(s.queries) for s in stores)
            sizes.append(f"LoCoMo dev {variant}: {len(stores)} stores, {n_mem} memories, {n_q} questions "
                         f"({skipped[variant]} skipped: no resolvable relevant memory)")
            sections.append(f"## LoCoMo dev — {variant} (binary NDCG@10; overall excludes category 5)\n\n"
                            + locomo_table(results["locomo"][variant]))
            if args.diagnose:
                diagnostics.append(f"### LoCoMo {variant} (overall, excl. category 5)\n\n"
                                   + overall_table(evaluate(stores, DIAGNOSTICS, LOCOMO_METRICS), LOCOMO_METRICS))
    elapsed = time.perf_counter() - start
    script = Path(__file__).resolve()
    command = " ".join(["python", str(script.relative_to(ROOT) if script.is_relative_to(ROOT) else script),
                        *(argv if argv is not None else sys.argv[1:])])
    meta = {"date": dt.datetime.now().isoformat(timespec="seconds"), "machine": f"{os.cpu_count()} cores CPU "
            f"({platform.machine()}, {platform.python_implementation()} {platform.python_version()}), no GPU",
            "command": command, "weights": Settings().weights(), "sizes": sizes, "seconds": round(elapsed, 1)}
    header = "\n".join(["# Ranking benchmark: BM25 vs dense vs composite", "",
                        f"- date: {meta['date']}", f"- machine: {meta['machine']}", f"- command: `{command}`",
                        f"- composite weights (Settings()): {meta['weights']}", "- embedder: all-MiniLM-L6-v2; "
                        "bm25: bm25s (Lucene BM25, k1=1.5 b=0.75, PyStemmer English, English stop words)",
                        *(f"- {s}" for s in sizes), f"- run time: {elapsed:.0f} s (including diagnostics)"
                        if args.diagnose else f"- run time: {elapsed:.0f} s"])
    report = header + "\n\n" + "\n\n".join(sections) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ranking.md").write_text(report)
    (args.out / "ranking.json").write_text(json.dumps({"meta": meta, **results}, indent=2) + "\n")
    print(report)
    if diagnostics:
        print("## Diagnostics (composite variants; cairn BM25 unless named; not written to ranking.md)\n")
        print("\n\n".join(diagnostics))
    print(f"wrote {args.out / 'ranking.md'} and ranking.json in {elapsed:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
