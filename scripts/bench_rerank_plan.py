"""What the latency-budgeted rerank plan costs in quality, and what it buys in time (issue 13 §1).

LoCoMo dev, split by conversation (seeded, as bench_student.py): each conversation is a store of its dialog turns;
each question (categories 1-4) becomes a hot-path-like context window (the question as the prompt, then the
conversation's last turns, bounded at 2,000 characters), and the candidates are the composite's top 20. A student
cross-encoder is trained from the bundled MiniLM on the training conversations (or --student DIR is loaded), then
the held-out questions are ranked by cairn's own rerank stage (`pipeline.rerank_stage`: the student's logits, the
normalised blend, best first; no reranker floor, to isolate the plan) under each plan:

- composite only (no rerank stage);
- unbudgeted: fp32, 20 candidates at 128 tokens (the stage before the budget);
- the plan `plan.choose` makes on this machine for CAIRN_RERANK_BUDGET_MS from the stage measured here
  (`plan.measure_stage`: throughput per precision and max length, fidelity of bf16 / int8 against fp32);
- the plan it makes from the same measurements when bf16 is not available (an AVX2-only CPU runs fp32 / int8 only;
  its fp32 is slower than this machine's, so the candidates it can afford are an upper bound).

Reported per plan: R@5 (of all evidence) and nDCG@10 of the final order, R@5 lost against the unbudgeted stage, and
the stage's p50 / p95 over the held-out questions on this machine (scores uncached), with the CPU flags and the load.

    .venv/bin/python scripts/bench_rerank_plan.py [--student DIR] [--max-train 1500] [--budget-ms 150] [--out bench]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("CAIRN_EMBED_MODEL", "all-MiniLM-L6-v2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("CAIRN_HOME", tempfile.mkdtemp(prefix="cairn-plan-"))


from cairn_cli.config import Settings  # noqa: E402
from cairn_cli.core import metrics  # noqa: E402
from cairn_cli.core.learning.export import LabelRow  # noqa: E402
from cairn_cli.core.learning.pairs import make_pairs  # noqa: E402
from cairn_cli.core.ranking import plan as planning  # noqa: E402
from cairn_cli.core.ranking.pipeline import rerank_stage  # noqa: E402
from cairn_cli.core.ranking.scoring import Candidate, Scored  # noqa: E402

NOW = dt.datetime(2026, 12, 1)
TOP = 20


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def queries(settings: Settings) -> list[dict]:
    """Per question (bench_student's hot-path-like windows): the prompt, its window, the composite's top 20 (turn
    index, text, grade, composite score)."""
    import bench_student

    return [
        {
            "conv": q["conv"],
            "prompt": q["prompt"],
            "window": q["query"],
            "cands": [(i, text, g, s) for i, (text, g, s) in zip(q["ids"], q["cands"])],
            "n": q["n_evidence"],
        }
        for q in bench_student.locomo_queries(settings, True, TOP)
    ]


def train_student(train_q: list[dict], args, out_dir: Path) -> dict:
    from cairn_cli.ml.student import CrossEncoderModel, bundled_base

    rows = [
        LabelRow(q["window"], text, g, query_key=f"{q['conv']}:{i}")
        for i, q in enumerate(train_q)
        for _, text, g, _ in q["cands"]
    ]
    triples = [(p.query, p.better, p.worse) for p in make_pairs(rows, {r.query_key for r in rows}, min_gap=2)]
    random.Random(args.seed).shuffle(triples)
    triples = triples[: args.max_train]
    log(f"training a student on {len(triples)} triples")
    model = CrossEncoderModel(bundled_base(), max_length=128)
    stats = model.train_pairwise(triples, epochs=1, batch_size=16, lr=5e-5, margin=1.0, seed=args.seed)
    model.serve_mode()
    model.save(out_dir)
    return {"triples": len(triples), **{k: v for k, v in vars(stats).items() if isinstance(v, (int, float, str))}}


def run_plan(reranker, held: list[dict], precision: str | None, n: int, length: int, blend: float) -> dict:
    r5, nd, times = [], [], []
    for q in held:
        scored = [Scored(Candidate(i, t, [], "global", "fact", 0.75, NOW), s, {}) for i, t, _, s in q["cands"]]
        grade = {i: g for i, _, g, _ in q["cands"]}
        if precision is None:
            order = [s.candidate.id for s in scored]
        else:
            reranker.plan = {"precision": precision, "candidates": n, "max_length": length}
            t0 = time.perf_counter()
            kept, _ = rerank_stage(scored[:n], q["window"], reranker, blend, prompt=q["prompt"])
            times.append((time.perf_counter() - t0) * 1000)
            head = [s.candidate.id for s in kept]
            order = head + [s.candidate.id for s in scored if s.candidate.id not in set(head)]
        grades = [grade[i] for i in order]
        r5.append(sum(g == 3 for g in grades[:5]) / q["n"])
        nd.append(metrics.ndcg(grades, [3] * q["n"], 10) or 0.0)
    out = {"R@5": round(statistics.mean(r5), 4), "nDCG@10": round(statistics.mean(nd), 4)}
    if times:
        out["stage_p50_ms"] = round(statistics.median(times), 1)
        out["stage_p95_ms"] = round(metrics.percentile(times, 95) or 0.0, 1)
    return out


def locomo_fidelity(reranker, held: list[dict], precisions: list[str]) -> dict:
    """bf16 / int8 against fp32 on LoCoMo's held-out windows x their top 20 (the calibration set the issue names)."""
    ref = [
        reranker.logits(
            q["window"],
            [t for _, t, _, _ in q["cands"]],
            prompt=q["prompt"],
            precision="fp32",
            max_length=128,
            cache=False,
        )
        for q in held
    ]
    out = {}
    for p in precisions:
        if p != "fp32":
            got = [
                reranker.logits(
                    q["window"],
                    [t for _, t, _, _ in q["cands"]],
                    prompt=q["prompt"],
                    precision=p,
                    max_length=128,
                    cache=False,
                )
                for q in held
            ]
            out[p] = planning.fidelity(ref, got)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--student", type=Path, default=None, help="a trained student directory (default: train one)")
    ap.add_argument("--max-train", type=int, default=1500)
    ap.add_argument("--budget-ms", type=float, default=None, help="default: CAIRN_RERANK_BUDGET_MS")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--max-queries", type=int, default=0, help="a seeded sample of the held-out questions (0: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench")
    args = ap.parse_args()
    t0 = time.time()
    settings = Settings()
    budget = args.budget_ms if args.budget_ms is not None else settings.RERANK_BUDGET_MS
    from cairn_cli.ml.device import simd_summary
    from cairn_cli.ml.reranker import CrossEncoderReranker, Resolution

    qs = queries(settings)
    convs = sorted({q["conv"] for q in qs})
    held_convs = set(random.Random(args.seed).sample(convs, 3))
    train_q = [q for q in qs if q["conv"] not in held_convs]
    held = [q for q in qs if q["conv"] in held_convs]
    if args.max_queries and len(held) > args.max_queries:
        held = random.Random(args.seed).sample(held, args.max_queries)
    log(f"{len(qs)} questions; held-out conversations {sorted(held_convs)} ({len(held)} questions)")
    result: dict = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "cpu": simd_summary(),
        "budget_ms": budget,
        "held_out_conversations": sorted(held_convs),
        "questions": {"train": len(train_q), "held": len(held)},
        "ranked": len(held),
    }
    student = args.student
    if student is None:
        student = Path(tempfile.mkdtemp(prefix="cairn-plan-student-"))
        result["training"] = train_student(train_q, args, student)
    result["student"] = str(student)
    reranker = CrossEncoderReranker(
        Resolution("student", f"student:{student}", student, float("-inf"), "cpu", "identity"), max_length=128
    )
    log("measuring the stage on this machine")
    result["load_before_measure"] = os.getloadavg()
    throughput, report = planning.measure_stage(reranker, settings)
    accepted = [p for p, r in report.items() if r.get("accepted")]
    here = planning.choose(throughput, accepted, budget_ms=budget, max_candidates=TOP)
    no_bf16 = planning.choose(
        {p: t for p, t in throughput.items() if p != "bf16"},
        [p for p in accepted if p != "bf16"],
        budget_ms=budget,
        max_candidates=TOP,
    )
    result["measured"] = {
        "pairs_per_s_at_20": {p: {n: round(f.pairs_per_s(), 1) for n, f in by.items()} for p, by in throughput.items()},
        "fidelity_shipped_calibration": report,
        "fidelity_locomo_held": locomo_fidelity(reranker, held, reranker.available()),
    }
    plans = [
        ("composite only", None, 0, 0, ""),
        ("unbudgeted: fp32, 20 at 128", "fp32", TOP, 128, "the stage before the budget"),
        (f"plan on this machine ({budget:g} ms)", here.precision, here.candidates, here.max_length, here.reason),
        (
            "plan without bf16 (AVX2-only CPUs)",
            no_bf16.precision,
            no_bf16.candidates,
            no_bf16.max_length,
            no_bf16.reason,
        ),
    ]
    result["load_before_rank"] = os.getloadavg()
    result["plans"] = []
    for name, precision, n, length, reason in plans:
        if precision is None and name != "composite only":
            result["plans"].append({"name": name, "skipped": True, "reason": reason})
            continue
        log(f"ranking the held-out questions: {name}")
        m = run_plan(reranker, held, precision, n, length, settings.RERANK_BLEND)
        result["plans"].append(
            {"name": name, "precision": precision, "candidates": n, "max_length": length, "reason": reason, **m}
        )
    ref = next(p for p in result["plans"] if p["name"].startswith("unbudgeted"))
    for p in result["plans"]:
        if "R@5" in p:
            p["R@5_lost_vs_unbudgeted"] = round(ref["R@5"] - p["R@5"], 4)
    result["load_after"] = os.getloadavg()
    result["seconds"] = round(time.time() - t0, 1)
    args.out.mkdir(exist_ok=True)
    (args.out / "rerank_plan.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "rerank_plan.md").write_text(render(result))
    print(render(result))
    return 0


def render(r: dict) -> str:
    load = ", ".join(f"{x:.2f}" for x in r["load_before_rank"])
    lines = [
        "# The rerank plan: quality lost to the latency budget, and stage time (LoCoMo dev)\n",
        f"- date: {r['date']}; command: `scripts/bench_rerank_plan.py`; run time {r['seconds']} s",
        f"- CPU: {r['cpu']}; load average before ranking: {load}",
        f"- budget: CAIRN_RERANK_BUDGET_MS = {r['budget_ms']:g}; held-out conversations {r['held_out_conversations']} "
        f"({r.get('ranked', r['questions']['held'])} questions as context windows, candidates = the composite's top {TOP})",
        f"- student: {'trained here on ' + str(r['training']['triples']) + ' triples' if 'training' in r else r['student']}"
        "; no reranker floor (the plan alone is measured)\n",
        "| plan | precision | candidates | max length | R@5 | nDCG@10 | R@5 lost vs unbudgeted | stage p50 ms | "
        "stage p95 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in r["plans"]:
        if p.get("skipped"):
            lines.append(f"| {p['name']} | skipped: {p['reason']} | | | | | | | |")
            continue
        lines.append(
            f"| {p['name']} | {p['precision'] or '-'} | {p['candidates'] or '-'} | {p['max_length'] or '-'} | "
            f"{p['R@5']:.3f} | {p['nDCG@10']:.3f} | {p['R@5_lost_vs_unbudgeted']:+.3f} | "
            f"{p.get('stage_p50_ms', '-')} | {p.get('stage_p95_ms', '-')} |"
        )
    lines.append("\n## Measured on this machine (daemon start)\n")
    lines.append(
        "| precision | pairs/s at 128 | at 96 | at 64 | fidelity vs fp32, shipped set (top-5 / Spearman) | "
        "on LoCoMo held-out windows |"
    )
    lines.append("|---|---:|---:|---:|---|---|")
    m = r["measured"]
    for p, by in m["pairs_per_s_at_20"].items():
        f1 = m["fidelity_shipped_calibration"].get(p, {})
        f2 = m["fidelity_locomo_held"].get(p, {"top5": 1.0, "spearman": 1.0, "accepted": True})
        lines.append(
            f"| {p} | {by.get(128, by.get('128'))} | {by.get(96, by.get('96'))} | {by.get(64, by.get('64'))} | "
            f"{f1.get('top5')} / {f1.get('spearman')} ({'accepted' if f1.get('accepted') else 'refused'}) | "
            f"{f2['top5']} / {f2['spearman']} |"
        )
    lines.append("")
    for p in r["plans"]:
        if p.get("reason"):
            lines.append(f"- {p['name']}: {p['reason']}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
