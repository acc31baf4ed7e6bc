"""Does the fusion learner (core/learning/fusion.py) lift ranking on conversations it never saw? LoCoMo dev's
observations as one memory store (one scope a conversation, as bench_loop builds it); labels from the replayed
conversations' questions only: each question ranked by the shipped pipeline, its top 5 and 3 explored from ranks
6-20 graded by the oracle (3: the memory stands for a turn of the question's evidence, else 0; the noisy regime
flips 20%). The weights are fit on those labels (per kind of store, as `cairn train-reranker --learner fusion`
fits them) and reported on the held-out conversations' bare questions (bench_loop's HELD_OUT, never labelled): R@5
and nDCG@10 of the production pipeline under the learned profile vs the shipped one, with a paired bootstrap 95%
interval per question.

    .venv/bin/python scripts/bench_fusion.py [--work /tmp/cairn-fusion] [--budgets 250,500,1000,2000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
import loopdata  # noqa: E402
from bench_loop import HELD_OUT, SEED, build_store, cpu, log  # noqa: E402

# loop: bench_loop's seeded held-out conversations (the numbers); ranking: the last three of locomo_dev.json,
# which the shipped dialog and sequence profiles were not fitted on (scripts/locomo.py)
SPLITS = {"loop": HELD_OUT, "ranking": locomo.HELD_OUT}
EXPLORED = 3  # graded per question beside the top 5, drawn from ranks 6-20 (exploration)
BOOT = 2000


def oracle(mem: dict, question: loopdata.Question, mid: int) -> int:
    return 3 if mem[mid][1] & question.evidence else 0


def label_rows(settings, dev: list[loopdata.Conversation], mem: dict, budget: int, noise: float, rng) -> list:
    """Label rows of the dev questions (seeded order) until `budget` labels: each question's shipped top 5 and
    EXPLORED memories from ranks 6-20, graded by the oracle (flipped with probability `noise`)."""
    from cairn_cli.core.learning.export import LabelRow
    from cairn_cli.core.learning.gate import RankingCase, pipeline_rankings

    questions = [q for conv in dev for q in conv.questions]
    random.Random(SEED).shuffle(questions)
    cases = [RankingCase(f"{q.conv}/{q.index}", q.text, q.conv, {}) for q in questions]
    ranked = pipeline_rankings(cases, {"shipped": None}, settings)["shipped"]
    texts = _texts()
    rows: list = []
    for q, ids in zip(questions, ranked):
        if len(rows) >= budget:
            break
        shown = ids[:5] + rng.sample(ids[5:20], min(EXPLORED, len(ids[5:20])))
        for mid in shown:
            grade = oracle(mem, q, mid)
            if noise and rng.random() < noise:
                grade = 3 - grade
            key = f"{q.conv}/{q.index}"  # one query a question (a question text may repeat across conversations)
            rows.append(LabelRow(q.text, texts[mid], grade, False, key, None, memory_id=mid, scope=q.conv))
    return rows[:budget]


def _texts() -> dict[int, str]:
    from cairn_cli.db.tables import Memory

    return {m.id: m.content for m in Memory.select(Memory.id, Memory.content)}


def held_out_cases(held: list[loopdata.Conversation], mem: dict) -> list:
    """Every held-out bare question with every memory of its conversation graded by the oracle (nothing condensed)."""
    from cairn_cli.core.learning.gate import RankingCase

    by_conv: dict[str, list[int]] = {}
    for mid, (conv, _) in mem.items():
        by_conv.setdefault(conv, []).append(mid)
    return [
        RankingCase(f"{q.conv}/{q.index}", q.text, q.conv, {mid: oracle(mem, q, mid) for mid in by_conv[q.conv]})
        for conv in held
        for q in conv.questions
    ]


def paired(a: list[float], b: list[float], seed: int = SEED) -> dict:
    """Mean of a - b and its paired percentile-bootstrap 95% interval over questions."""
    diffs = [x - y for x, y in zip(a, b)]
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(BOOT))
    return {
        "delta": round(sum(diffs) / n, 4),
        "lo": round(means[int(0.025 * BOOT)], 4),
        "hi": round(means[int(0.975 * BOOT) - 1], 4),
    }


def evaluate(settings, cases: list, artifact: dict | None) -> tuple[list[tuple[float, float]], dict]:
    from cairn_cli.core.learning.gate import pipeline_rankings, ranking_quality
    from cairn_cli.core.ranking import learned

    model = settings.EMBED_MODEL
    profile = None if artifact is None else (lambda p: learned.apply(p, artifact, model))
    ranked = pipeline_rankings(cases, {"x": None}, settings, profile=profile)["x"]
    q = ranking_quality(cases, ranked)
    return q.per_query, {"r5": round(q.r5, 4), "ndcg10": round(q.ndcg10, 4), "queries": q.queries}


def judged(settings, rows: list, keys: set[str], artifact: dict) -> str:
    """The gate's verdict on the learned profile: the labelled questions held out of the fit, ranked by the
    production pipeline under the learned and the shipped profile (condensed to what was graded, as the gate does)."""
    from cairn_cli.core.learning import gate
    from cairn_cli.core.ranking import learned

    cases = gate.ranking_cases(rows, keys, from_store=True)
    model = settings.EMBED_MODEL
    live = gate.pipeline_rankings(cases, {"x": None}, settings)["x"]
    mine = gate.pipeline_rankings(cases, {"x": None}, settings, profile=lambda p: learned.apply(p, artifact, model))[
        "x"
    ]
    a, b = gate.ranking_quality(cases, mine), gate.ranking_quality(cases, live)
    passed, _ = gate.gate(a, b, margin=0.02, recall_tolerance=0.02)
    return f"{'deploy' if passed else 'refuse'} (nDCG@10 {b.ndcg10:.3f} -> {a.ndcg10:.3f}, {a.queries} q)"


def run(args) -> dict:
    from cairn_cli.config import Settings
    from cairn_cli.core.learning import fusion
    from cairn_cli.core.learning.pairs import split_by_query

    MIN_GAIN = fusion.MIN_GAIN
    convs = loopdata.conversations()
    held_out = SPLITS[args.split]
    dev = [c for c in convs if c.sample_id not in held_out]
    held = [c for c in convs if c.sample_id in held_out]
    home = Path(args.work) / "home"
    if not (home / "memory.db").exists():
        log(f"building the store in {home}")
        mem = build_store(home, convs)
        (Path(args.work) / "mem.json").write_text(json.dumps({k: [c, sorted(v)] for k, (c, v) in mem.items()}))
    else:
        loopdata.use_home(home)
        mem = {int(k): (c, set(v)) for k, (c, v) in json.loads((Path(args.work) / "mem.json").read_text()).items()}
    import cairn_cli

    cairn_cli.open_store(create=None)
    settings = Settings()
    cases = held_out_cases(held, mem)
    shipped_pq, shipped = evaluate(settings, cases, None)
    log(f"shipped on held-out bare questions: {shipped}")
    out = {"shipped": shipped, "runs": [], "cpu": cpu(), "held_out": list(held_out), "split": args.split}
    # "forced": the fit served even where the learner keeps the shipped weights (its adoption rule off), to show
    # what the fitted weights themselves do on held-out questions
    for regime, noise in (("oracle", 0.0), ("noisy", 0.2), ("oracle, forced", 0.0), ("noisy, forced", 0.2)):
        fusion.MIN_GAIN = -1.0 if "forced" in regime else MIN_GAIN
        for budget in [int(b) for b in args.budgets.split(",")]:
            t0 = time.perf_counter()
            rows = label_rows(settings, dev, mem, budget, noise, random.Random(SEED))
            keys = {r.query_key for r in rows}
            # as `train-reranker` does: fit on 80% of the labelled questions, the gate on the other 20%
            train_keys, gate_keys = split_by_query(rows, holdout=0.2, seed=SEED)
            pairs, profiles = fusion.collect(settings, rows, train_keys, min_gap=2)
            fits = {name: fusion.fit(p, fusion.learned.shipped_params(profiles[name])) for name, p in pairs.items()}
            seconds = round(time.perf_counter() - t0, 1)
            artifact = fusion.artifact_of(fits, profiles, settings, f"bench-{regime}-{budget}")
            verdict = judged(settings, rows, gate_keys, artifact) if artifact["profiles"] else "nothing to judge"
            pq, quality = evaluate(settings, cases, artifact)
            run = {
                "regime": regime,
                "labels": len(rows),
                "queries": len(keys),
                "fit_seconds": seconds,
                "gate": verdict,
                "fits": {
                    n: {"adopted": f.adopted, "params": f.params, "pairs": f.pairs, "reason": f.reason}
                    for n, f in fits.items()
                },
                "learned": quality,
                "r5": paired([a for a, _ in pq], [a for a, _ in shipped_pq]),
                "ndcg10": paired([b for _, b in pq], [b for _, b in shipped_pq]),
            }
            log(f"{regime} {len(rows)} labels: {quality} R@5 {run['r5']} nDCG@10 {run['ndcg10']}")
            out["runs"].append(run)
    return out


def report(result: dict) -> str:
    s = result["shipped"]
    lines = [
        "# The fusion learner: learned composite weights on held-out conversations",
        "",
        f"Split `{result['split']}`: held out {', '.join(result['held_out'])}.",
        "",
        "`scripts/bench_fusion.py`: LoCoMo dev observations as one store (a scope per conversation). Labels: the "
        f"replayed conversations' questions (not {', '.join(result['held_out'])}), each question's shipped top 5 + "
        f"{EXPLORED} explored from ranks 6-20, oracle grades (noisy: 20% flipped). The weights are fit per kind of store "
        "(core/learning/fusion.py, as `cairn train-reranker --learner fusion` fits them); reported on the held-out "
        "conversations' **bare questions** through the production pipeline (gate.pipeline_rankings, composite floor "
        "on, no reranker), every memory of the conversation graded by the oracle. Deltas are learned - shipped with "
        f"a paired bootstrap 95% interval over questions ({BOOT} resamples).",
        "",
        f"Shipped profile: R@5 {s['r5']:.3f}, nDCG@10 {s['ndcg10']:.3f} on {s['queries']} held-out questions.",
        "",
        "| regime | labels | questions | fit s | gate (dev, 20% of the questions) | learned R@5 | Δ R@5 [95%] | learned nDCG@10 | Δ nDCG@10 [95%] | weights (per kind) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        weights = "; ".join(
            f"{n}: "
            + (
                ", ".join(f"{k[:3]} {v:.2f}" for k, v in f["params"]["weights"].items() if v)
                + f", ctx {f['params']['context_keywords']:.2f}, nb {f['params']['neighbour_weight']:.2f}"
                if f["adopted"]
                else "shipped (not adopted)"
            )
            for n, f in r["fits"].items()
        )
        lines.append(
            f"| {r['regime']} | {r['labels']} | {r['queries']} | {r['fit_seconds']} | {r['gate']} | {r['learned']['r5']:.3f} | "
            f"{r['r5']['delta']:+.3f} [{r['r5']['lo']:+.3f}, {r['r5']['hi']:+.3f}] | {r['learned']['ndcg10']:.3f} | "
            f"{r['ndcg10']['delta']:+.3f} [{r['ndcg10']['lo']:+.3f}, {r['ndcg10']['hi']:+.3f}] | {weights} |"
        )
    c = result["cpu"]
    lines += ["", f"CPU: {c['model']}, {c['cores']} cores, flags {' '.join(c['flags'])}.", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/tmp/cairn-fusion")
    parser.add_argument("--budgets", default="250,500,1000,2000")
    parser.add_argument("--split", choices=sorted(SPLITS), default="loop")
    parser.add_argument("--out", default=None, help="default: bench/fusion (split loop), bench/fusion_<split>")
    args = parser.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    result = run(args)
    args.out = args.out or str(ROOT / "bench" / ("fusion" if args.split == "loop" else f"fusion_{args.split}"))
    Path(args.out + ".json").write_text(json.dumps(result, indent=2) + "\n")
    Path(args.out + ".md").write_text(report(result))
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
