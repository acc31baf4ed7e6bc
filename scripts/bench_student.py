"""Student reranker benchmark: does a student trained on (query, memory, grade) labels beat the incumbent, and does
the gate say yes only when the deployed ranking is better?

Primary — LoCoMo dev, split by conversation (seeded): each conversation is a memory store of its dialog turns; per
question (categories 1-4) the candidates are what the reranker really sees, the composite's top RERANK_CANDIDATES;
evidence turns are grade 3, the other candidates grade 0 (realistic hard negatives). The student is trained on the
training conversations and scored on the held-out ones: R@5 and NDCG@10 of the composite alone, the student alone
and the deployed blend (cairn's rerank stage), pairwise agreement (min-gap 2) of student vs incumbent on the same
held-out pairs, and the gate's verdict. Queries are the question alone, or (--windows) a hot-path-like context
window: the question followed by the conversation's last turns, newest first, bounded at 2,000 characters; the
window run also serves the student at several max lengths (the latency/relevance trade of the hot path).
Secondary — TREC DL 2019 split by query (seeded 30/13): held-out agreement and NDCG@10 reranking BM25's top 100
for BM25, the bi-encoder, the composite, the untrained head and the student.

    .venv/bin/python scripts/bench_student.py [--max-train 3000] [--epochs 1] [--skip-trec] [--windows]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CAIRN_EMBED_MODEL", "all-MiniLM-L6-v2")

import locomo  # noqa: E402  (scripts/locomo.py)

from cairn_cli.config import Settings  # noqa: E402
from cairn_cli.core import metrics  # noqa: E402
from cairn_cli.core.learning.export import LabelRow  # noqa: E402
from cairn_cli.core.learning.incumbent import composite_scorer  # noqa: E402
from cairn_cli.core.learning.pairs import agreement, make_pairs  # noqa: E402
from cairn_cli.core.ranking.pipeline import _minmax  # noqa: E402
from cairn_cli.core.ranking.scoring import Candidate, ScoringTable  # noqa: E402
from cairn_cli.ml.models import get_encoder  # noqa: E402
from cairn_cli.ml.student import CrossEncoderModel, bundled_base  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
NOW = dt.datetime(2026, 12, 1)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def gate(student: float, incumbent: float, margin: float) -> tuple[bool, str]:
    """The agreement gate this benchmark measured (train-reranker's gate is now the held-out ranking itself)."""
    if student >= incumbent + margin:
        return True, f"student {student:.3f} >= incumbent {incumbent:.3f} + {margin:.3f}"
    return False, f"student {student:.3f} < incumbent {incumbent:.3f} + {margin:.3f}"


def ndcg(ranked_grades: list[int], all_grades: list[int], k: int = 10) -> float:
    return metrics.ndcg(ranked_grades, all_grades, k) or 0.0


# -- LoCoMo ----------------------------------------------------------------------------------------------------


def locomo_queries(settings: Settings, windows: bool, candidates: int):
    """Per conversation, per question: (query, [(turn text, grade)] of the composite's top candidates, n evidence)."""
    encoder = get_encoder("all-MiniLM-L6-v2")
    out = []
    for ci, conv in enumerate(locomo.conversations()):
        turns, index = locomo.turns_and_index(conv)
        tail = " ".join(f"user: {t}" for t in reversed(turns[-6:]))
        vecs = encoder.encode(turns)
        table = ScoringTable([], settings.KEYWORD_FIELD_WEIGHT, dim=encoder.dim)
        for i, (text, v) in enumerate(zip(turns, vecs)):
            table.upsert(Candidate(i, text, [], "global", "fact", 0.75, NOW), v)
        qs = [q for q in conv["qa"] if q.get("category") in locomo.CATEGORIES]
        texts = [(q["question"] + " " + tail)[:2000] if windows else q["question"] for q in qs]
        qvecs = encoder.encode(texts)
        for q, text, qv in zip(qs, texts, qvecs):
            evidence = locomo.evidence(q, index)
            if not evidence:
                continue
            scored = table.score(
                text,
                table.similarities(qv),
                scope=None,
                weights=settings.weights(),
                half_life_days=30.0,
                top=candidates,
            )
            cands = [(s.candidate.content, 3 if s.candidate.id in evidence else 0, s.score) for s in scored]
            out.append(
                {
                    "conv": ci,
                    "query": text,
                    "prompt": q["question"],
                    "cands": cands,
                    "ids": [s.candidate.id for s in scored],
                    "n_evidence": len(evidence),
                }
            )
    return out


def rank_metrics(queries, scores_for) -> dict:
    """R@5 (of all evidence, even what the composite missed) and NDCG@10 over the candidates."""
    r5, nd = [], []
    for q in queries:
        scores = scores_for(q)
        order = sorted(range(len(q["cands"])), key=lambda i: -scores[i])
        grades = [q["cands"][i][1] for i in order]
        r5.append(sum(g == 3 for g in grades[:5]) / q["n_evidence"])
        nd.append(ndcg(grades, [3] * q["n_evidence"]))
    return {"R@5": round(float(np.mean(r5)), 4), "NDCG@10": round(float(np.mean(nd)), 4)}


def blend(composite: list[float], student: list[float], b: float) -> list[float]:
    return [(1 - b) * c + b * s for c, s in zip(_minmax(composite), _minmax(student))]


def run_locomo(args, settings: Settings, windows: bool) -> dict:
    t0 = time.time()
    queries = locomo_queries(settings, windows, settings.RERANK_CANDIDATES)
    convs = sorted({q["conv"] for q in queries})
    held_convs = set(random.Random(args.seed).sample(convs, 3))
    train_q = [q for q in queries if q["conv"] not in held_convs]
    held_q = [q for q in queries if q["conv"] in held_convs]

    def rows(qs):
        return [
            LabelRow(q["query"], text, g, query_key=f"{q['conv']}:{i}")
            for i, q in enumerate(qs)
            for text, g, _ in q["cands"]
        ]

    train_rows, held_rows = rows(train_q), rows(held_q)
    triples = [
        (p.query, p.better, p.worse) for p in make_pairs(train_rows, {r.query_key for r in train_rows}, min_gap=2)
    ]
    random.Random(args.seed).shuffle(triples)
    triples = triples[: args.max_train]
    held_pairs = make_pairs(held_rows, {r.query_key for r in held_rows}, min_gap=2)
    log(
        f"locomo{' windows' if windows else ''}: {len(queries)} questions, held-out conversations {sorted(held_convs)}"
        f", {len(triples)} training triples, {len(held_pairs)} held-out pairs"
    )
    model = CrossEncoderModel(bundled_base(), max_length=args.max_length, layers=args.layers)
    stats = model.train_pairwise(triples, epochs=args.epochs, batch_size=16, lr=args.lr, margin=1.0, seed=args.seed)
    log(f"trained: {stats}")
    model.serve_mode()
    comp_score = {(q["query"], t): s for q in held_q for t, _, s in q["cands"]}
    incumbent = lambda query, texts: [comp_score[query, t] for t in texts]  # noqa: E731
    result: dict = {
        "held_out_conversations": sorted(held_convs),
        "questions": {"train": len(train_q), "held": len(held_q)},
        "train_triples": len(triples),
        "held_pairs": len(held_pairs),
        "train": vars(stats),
        "serve": {},
    }
    composite = rank_metrics(held_q, lambda q: [s for _, _, s in q["cands"]])
    for serve_len in args.serve_lengths if windows else [args.max_length]:
        model.max_length = serve_len
        t1 = time.time()
        student = {q["query"]: model.score([(q["query"], t) for t, _, _ in q["cands"]]) for q in held_q}
        secs = time.time() - t1
        cached = {(q["query"], t): s for q in held_q for (t, _, _), s in zip(q["cands"], student[q["query"]])}

        def scorer(query, texts, cached=cached):
            return [cached[query, t] for t in texts]

        st_agree = agreement(scorer, held_pairs)
        inc_agree = agreement(incumbent, held_pairs)
        deployed = rank_metrics(
            held_q,
            lambda q, student=student: blend([s for _, _, s in q["cands"]], student[q["query"]], settings.RERANK_BLEND),
        )
        passed, reason = gate(st_agree, inc_agree, 0.02)
        result["serve"][serve_len] = {
            "composite": composite,
            "student": rank_metrics(held_q, lambda q, student=student: student[q["query"]]),
            "deployed_blend": deployed,
            "student_agreement": round(st_agree, 4),
            "incumbent_agreement": round(inc_agree, 4),
            "gate": passed,
            "gate_reason": reason,
            "blend_beats_composite": deployed["NDCG@10"] > composite["NDCG@10"],
            "scoring_pairs_per_s": round(sum(len(q["cands"]) for q in held_q) / secs, 1),
        }
        log(f"serve@{serve_len}: {result['serve'][serve_len]}")
    result["seconds"] = round(time.time() - t0, 1)
    return result


# -- TREC DL 2019 -----------------------------------------------------------------------------------------------


def run_trec(args, settings: Settings) -> dict:
    t0 = time.time()
    judged = [json.loads(x) for x in (DATA / "trec_dl" / "judged_pairs_dl19.jsonl").read_text().splitlines()]
    qrels: dict[str, dict[str, int]] = {}
    for line in (DATA / "trec_dl" / "qrels.dl19-passage.txt").read_text().split("\n"):
        if line.strip():
            qid, _, docid, grade = line.split()
            qrels.setdefault(qid, {})[docid] = int(grade)
    runs = {
        str(r["hits"][0]["qid"]): r
        for r in json.loads((DATA / "trec_dl" / "retrieve_results_BM25_dl19.json").read_text())
        if r["hits"]
    }
    qids = sorted({str(r["qid"]) for r in judged})
    random.Random(args.seed).shuffle(qids)
    held, train = set(qids[:13]), set(qids[13:])
    rows = [LabelRow(r["query"], r["passage"], int(r["grade"]), query_key=str(r["qid"])) for r in judged]
    triples = [(p.query, p.better, p.worse) for p in make_pairs(rows, train, min_gap=2)]
    random.Random(args.seed).shuffle(triples)
    triples = triples[: args.max_train]
    held_pairs = make_pairs(rows, held, min_gap=2)
    log(f"trec: {len(train)} training queries ({len(triples)} triples), {len(held)} held-out ({len(held_pairs)} pairs)")
    encoder = get_encoder("all-MiniLM-L6-v2")
    composite = composite_scorer(settings)

    def bm25_scores(query, texts):  # BM25 over the held-out query's candidates (a rank proxy for judged pairs)
        return composite_with(query, texts, {"keywords": 1.0})

    def composite_with(query, texts, weights):
        vecs = encoder.encode([query] + texts)
        table = ScoringTable([], settings.KEYWORD_FIELD_WEIGHT, dim=encoder.dim)
        for i, (t, v) in enumerate(zip(texts, vecs[1:])):
            table.upsert(Candidate(i, t, [], "global", "fact", 0.75, NOW), v)
        scored = table.score(query, table.similarities(vecs[0]), scope=None, weights=weights, half_life_days=30.0)
        by = {s.candidate.id: s.score for s in scored}
        return [by[i] for i in range(len(texts))]

    def bi_encoder(query, texts):
        vecs = encoder.encode([query] + texts)
        return [float(v @ vecs[0]) for v in vecs[1:]]

    untrained = CrossEncoderModel(bundled_base(), max_length=args.trec_max_length)
    student = CrossEncoderModel(bundled_base(), max_length=args.trec_max_length)
    stats = student.train_pairwise(triples, epochs=args.epochs, batch_size=16, lr=args.lr, margin=1.0, seed=args.seed)
    log(f"trec trained: {stats}")
    student.serve_mode()
    untrained.serve_mode()
    scorers = {
        "BM25": bm25_scores,
        "bi-encoder": bi_encoder,
        "composite (incumbent)": composite,
        "untrained head": lambda q, ts: untrained.score([(q, t) for t in ts]),
        "student": lambda q, ts: student.score([(q, t) for t in ts]),
    }
    out: dict = {
        "held_out_queries": sorted(held),
        "train_triples": len(triples),
        "held_pairs": len(held_pairs),
        "train": vars(stats),
        "models": {},
    }
    for name, scorer in scorers.items():
        nd = []
        for qid in sorted(held):
            run = runs.get(qid)
            if run is None:
                continue
            hits = run["hits"][:100]
            if name == "BM25":
                order = list(range(len(hits)))  # BM25's own ranking
            else:
                scores = scorer(run["query"], [h["content"] for h in hits])
                order = sorted(range(len(hits)), key=lambda i: -scores[i])
            grades = [qrels.get(qid, {}).get(str(hits[i]["docid"]), 0) for i in order]
            nd.append(ndcg(grades, list(qrels.get(qid, {}).values())))
        out["models"][name] = {
            "agreement": round(agreement(scorer, held_pairs), 4),
            "NDCG@10 (BM25 top-100)": round(float(np.mean(nd)), 4),
        }
        log(f"trec {name}: {out['models'][name]}")
    passed, reason = gate(
        out["models"]["student"]["agreement"], out["models"]["composite (incumbent)"]["agreement"], 0.02
    )
    out["gate"], out["gate_reason"] = passed, reason
    out["seconds"] = round(time.time() - t0, 1)
    return out


def markdown(r: dict) -> str:
    lines = [
        "# Student reranker benchmark",
        "",
        f"- date: {r['date']}; machine: 2 cores, no GPU; command: `{r['command']}`; total {r['seconds']} s",
        f"- student: the bundled all-MiniLM-L6-v2 ({r['args'].get('layers') or 6} layers) + a fresh 1-logit head, "
        "pairwise MarginRankingLoss, "
        f"{r['args']['epochs']} epoch(s), lr {r['args']['lr']}, ≤ {r['args']['max_train']} training triples "
        f"(seeded sample), bf16 autocast; incumbent = the composite (no cross-encoder is live on this machine)",
        "- gate: deploy when student agreement ≥ incumbent agreement + 0.02 on the same held-out pairs",
        "",
    ]
    for key, title in (
        ("locomo", "LoCoMo dev, question as the query"),
        ("locomo_windows", "LoCoMo dev, hot-path-like context window as the query"),
    ):
        if key not in r:
            continue
        x = r[key]
        lines += [
            f"## {title}",
            "",
            f"Held-out conversations {x['held_out_conversations']} ({x['questions']['held']} questions; "
            f"trained on {x['questions']['train']} questions' {x['train_triples']} triples in "
            f"{x['train']['seconds']} s, peak RSS {x['train']['peak_rss_mb']} MB); {x['held_pairs']} held-out "
            "pairs. Candidates: the composite's top 20.",
            "",
            "| served at max_length | composite R@5 / NDCG@10 | student R@5 / NDCG@10 | deployed blend R@5 / "
            "NDCG@10 | agreement student / incumbent | gate | blend beats composite | scoring pairs/s |",
            "|---:|---|---|---|---|---|---|---:|",
        ]
        for length, s in x["serve"].items():
            f = lambda m: f"{m['R@5']:.3f} / {m['NDCG@10']:.3f}"  # noqa: E731
            lines.append(
                f"| {length} | {f(s['composite'])} | {f(s['student'])} | {f(s['deployed_blend'])} | "
                f"{s['student_agreement']:.3f} / {s['incumbent_agreement']:.3f} | "
                f"{'deploy' if s['gate'] else 'refuse'} | {'yes' if s['blend_beats_composite'] else 'no'} | "
                f"{s['scoring_pairs_per_s']} |"
            )
        lines.append("")
    if "trec" in r:
        t = r["trec"]
        lines += [
            "## TREC DL 2019, split by query (30 train / 13 held-out)",
            "",
            f"{t['train_triples']} training triples ({t['train']['seconds']} s, peak RSS "
            f"{t['train']['peak_rss_mb']} MB); {t['held_pairs']} held-out judged pairs (min-gap 2). "
            "NDCG@10 reranks BM25's top 100 (unjudged = 0).",
            "",
            "| model | held-out agreement | NDCG@10 |",
            "|---|---:|---:|",
        ]
        for name, m in t["models"].items():
            lines.append(f"| {name} | {m['agreement']:.3f} | {m['NDCG@10 (BM25 top-100)']:.3f} |")
        lines += ["", f"Gate: {'deploy' if t['gate'] else 'refuse'} ({t['gate_reason']}).", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-train", type=int, default=3000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--trec-max-length", type=int, default=192)
    ap.add_argument("--serve-lengths", default="64,96,128,256")
    ap.add_argument("--windows", action="store_true", help="also run the context-window queries")
    ap.add_argument("--windows-only", action="store_true", help="only the context-window queries")
    ap.add_argument("--layers", type=int, default=None, help="a shallower student: the first N layers")
    ap.add_argument("--skip-locomo", action="store_true")
    ap.add_argument("--skip-trec", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "bench")
    ap.add_argument("--name", default=None, help="results file name (default: student)")
    args = ap.parse_args()
    args.serve_lengths = [int(x) for x in args.serve_lengths.split(",")]
    if not (DATA / "locomo" / "locomo_dev.json").is_file():
        sys.exit(f"error: {DATA} not found (the benchmark reads ../shared/data in place)")
    t0 = time.time()
    settings = Settings()
    result: dict = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "args": {k: v for k, v in vars(args).items() if k != "out"},
    }
    if not args.skip_locomo:
        if not args.windows_only:
            result["locomo"] = run_locomo(args, settings, windows=False)
        if args.windows or args.windows_only:
            result["locomo_windows"] = run_locomo(args, settings, windows=True)
    if not args.skip_trec:
        result["trec"] = run_trec(args, settings)
    result["seconds"] = round(time.time() - t0, 1)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    args.out.mkdir(exist_ok=True)
    name = args.name or "student"
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (args.out / f"{name}.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
