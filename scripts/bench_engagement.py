"""Engagement-detection benchmark: lexical, semantic and combined "did the response use this memory?" on LoCoMo dev.

    .venv/bin/python scripts/bench_engagement.py [--limit-conversations 2 --out /tmp/b]

Per LoCoMo question (categories 1-4): prompt = the question, response = the gold answer, memories = the
conversation's turns; evidence turns are "used", negatives are (a) every other turn, (b) the 10 non-evidence
turns nearest the question (delivered-like). Thresholds are picked on the first 4 conversations (max F1 on set b),
reported on the other 3 and on all 7. Data is read in place from ../shared/data, never copied.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import locomo  # noqa: E402  (scripts/locomo.py)

from cairn_cli.config import SETTINGS  # noqa: E402
from cairn_cli.core.labels.engagement import chunks, distinctive_terms, lexical_overlap  # noqa: E402
from cairn_cli.core.text import term_set  # noqa: E402

DEFAULT_DATA = locomo.DATA
CATEGORIES = locomo.CATEGORIES
LEXICAL_SWEEP = [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0]
SEMANTIC_SWEEP = [round(0.25 + 0.05 * i, 2) for i in range(12)]  # 0.25 … 0.80
SHIPPED = {
    "lexical": SETTINGS["ENGAGEMENT_LEXICAL_MIN"].default,
    "semantic": SETTINGS["ENGAGEMENT_SEMANTIC_MIN"].default,
}
SHIPPED_BY_METHOD = {
    "lexical": {"lexical": SHIPPED["lexical"]},
    "semantic": {"semantic": SHIPPED["semantic"]},
    "combined": SHIPPED,
}
METHODS = ("lexical", "semantic", "combined")
CHUNK_CHARS = SETTINGS["ENGAGEMENT_CHUNK_CHARS"].default
DELIVERED_NEGATIVES = 10
DEV_CONVERSATIONS = 4


@dataclass
class Question:
    conv: int
    category: int
    lex: np.ndarray  # lexical ratio of every turn of the conversation
    sem: np.ndarray  # cosine of every turn with the best answer chunk
    pos: np.ndarray  # bool: evidence turn
    delivered: np.ndarray  # bool: one of the 10 non-evidence turns nearest the question


def load(path: Path, limit: int | None) -> tuple[list[dict], int]:
    """Conversations as {turns, questions: [(question, answer, evidence indices, category)]}; skipped count."""
    convs, skipped = [], 0
    for conv in locomo.conversations(path, limit):
        turns, index = locomo.turns_and_index(conv)
        questions = []
        for q in conv["qa"]:
            if q.get("category") not in CATEGORIES:
                continue
            answer = q.get("answer")
            evidence = sorted(locomo.evidence(q, index))
            if answer is None or not str(answer).strip() or not evidence:
                skipped += 1
                continue
            questions.append((q["question"], str(answer), evidence, q["category"]))
        convs.append({"id": conv["sample_id"], "turns": turns, "questions": questions})
    return convs, skipped


def build(convs: list[dict], encode) -> list[Question]:
    """Lexical ratios with the shipped code, cosines by matrix product (all vectors unit-norm)."""
    out = []
    for ci, conv in enumerate(convs):
        turns, qs = conv["turns"], conv["questions"]
        mem_terms = [distinctive_terms(t) for t in turns]
        owners, parts = [], []
        for qi, (_, answer, _, _) in enumerate(qs):
            for part in chunks(answer, CHUNK_CHARS) or [answer]:
                owners.append(qi)
                parts.append(part)
        vecs = encode(turns + [q[0] for q in qs] + parts)
        turn_v, q_v, part_v = vecs[: len(turns)], vecs[len(turns) : len(turns) + len(qs)], vecs[len(turns) + len(qs) :]
        part_cos, q_cos = turn_v @ part_v.T, turn_v @ q_v.T
        owners = np.array(owners)
        for qi, (question, answer, evidence, category) in enumerate(qs):
            response, prompt = term_set(answer), term_set(question)
            lex = np.array([lexical_overlap(m, response, prompt)[0] for m in mem_terms])
            sem = part_cos[:, owners == qi].max(axis=1)
            pos = np.isin(np.arange(len(turns)), evidence)
            order = np.argsort(-q_cos[:, qi], kind="stable")
            delivered = np.isin(np.arange(len(turns)), order[~pos[order]][:DELIVERED_NEGATIVES])
            out.append(Question(ci, category, lex, sem, pos, delivered))
    return out


def pairs(qs: list[Question], negatives: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lexical, cosine, label) of every (question, memory) pair: positives + negative set a (all) or b."""
    keep = [q.pos | (q.delivered if negatives == "b" else ~q.pos) for q in qs]
    cat = lambda attr: np.concatenate([getattr(q, attr)[k] for q, k in zip(qs, keep)] or [np.zeros(0)])  # noqa: E731
    return cat("lex"), cat("sem"), cat("pos").astype(bool)


def prf(pred: np.ndarray, y: np.ndarray) -> dict:
    tp, fp, fn = int((pred & y).sum()), int((pred & ~y).sum()), int((~pred & y).sum())
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    return {
        "precision": round(p, 4),
        "recall": round(r, 4),
        "f1": round(2 * p * r / (p + r) if p + r else 0.0, 4),
        "tp": tp,
        "fp": fp,
        "fn": fn,
    }


def predict(th: dict, lex: np.ndarray, sem: np.ndarray) -> np.ndarray:
    """Engaged when lexical >= th["lexical"] OR cosine >= th["semantic"] (the shipped rule; either key optional)."""
    pred = np.zeros(len(lex), bool)
    if "lexical" in th:
        pred |= lex >= th["lexical"]
    if "semantic" in th:
        pred |= sem >= th["semantic"]
    return pred


def sweep(qs: list[Question], negatives: str) -> dict:
    lex, sem, y = pairs(qs, negatives)
    grids = {
        "lexical": [{"lexical": t} for t in LEXICAL_SWEEP],
        "semantic": [{"semantic": s} for s in SEMANTIC_SWEEP],
        "combined": [{"lexical": t, "semantic": s} for t in LEXICAL_SWEEP for s in SEMANTIC_SWEEP],
    }
    return {
        "pairs": len(y),
        "positives": int(y.sum()),
        **{m: [{**th, **prf(predict(th, lex, sem), y)} for th in grid] for m, grid in grids.items()},
    }


def distributions(qs: list[Question]) -> dict:
    def stats(x: np.ndarray) -> dict:
        if not len(x):
            return {"n": 0}
        return {
            "n": len(x),
            "median": round(float(np.median(x)), 4),
            "p90": round(float(np.quantile(x, 0.9)), 4),
            "mean": round(float(x.mean()), 4),
            "share_zero": round(float((x == 0).mean()), 4),
        }

    (lex_a, sem_a, y_a), (lex_b, sem_b, y_b) = pairs(qs, "a"), pairs(qs, "b")
    return {
        name: {"positives": stats(a[y_a]), "negatives_all": stats(a[~y_a]), "negatives_delivered": stats(b[~y_b])}
        for name, a, b in (("lexical", lex_a, lex_b), ("semantic", sem_a, sem_b))
    }


def evaluate(qs: list[Question], chosen: dict) -> dict:
    """Chosen and shipped thresholds, each method, both negative sets."""
    out = {}
    for negatives in ("a", "b"):
        lex, sem, y = pairs(qs, negatives)
        out[negatives] = {
            which: {m: {**th, **prf(predict(th, lex, sem), y)} for m, th in ths.items()}
            for which, ths in (("chosen", chosen), ("shipped", SHIPPED_BY_METHOD))
        }
    return out


def choose(dev: list[Question]) -> dict:
    """Per method, the thresholds with the best F1 on the dev conversations, negative set b (grid order breaks ties)."""
    sw = sweep(dev, "b")
    return {
        m: {k: v for k, v in max(sw[m], key=lambda row: row["f1"]).items() if k in ("lexical", "semantic")}
        for m in METHODS
    }


def per_category(qs: list[Question], chosen: dict) -> dict:
    """Combined detection per question category, set b, chosen vs shipped."""
    out = {}
    for cat, name in CATEGORIES.items():
        lex, sem, y = pairs([q for q in qs if q.category == cat], "b")
        out[f"{cat} {name}"] = {
            "questions": sum(q.category == cat for q in qs),
            "positives": int(y.sum()),
            **{w: prf(predict(th, lex, sem), y) for w, th in (("chosen", chosen["combined"]), ("shipped", SHIPPED))},
        }
    return out


def markdown(r: dict) -> str:
    m, f = r["meta"], lambda x: f"{x:.3f}"
    row = lambda v: f"{f(v['precision'])} | {f(v['recall'])} | {f(v['f1'])}"  # noqa: E731
    edges = {"lexical": (LEXICAL_SWEEP[0], LEXICAL_SWEEP[-1]), "semantic": (SEMANTIC_SWEEP[0], SEMANTIC_SWEEP[-1])}
    th = lambda v: ", ".join(f"{k} {x}" + (" (grid edge)" if x in edges[k] else "") for k, x in v.items())  # noqa: E731
    lines = [
        "# Engagement detection benchmark (LoCoMo dev)",
        "",
        f"- date: {m['date']}",
        f"- machine: {m['machine']}",
        f"- command: `{m['command']}`",
        f"- data: {m['data']} ({m['conversations']} conversations; dev = first {DEV_CONVERSATIONS}, held-out = "
        f"the rest); {m['questions']} questions of categories 1-4 ({m['skipped']} skipped: null answer or no "
        "resolvable evidence turn)",
        f"- pairs (all conversations): set a {r['sweep_all']['a']['pairs']} "
        f"({r['sweep_all']['a']['positives']} positive), set b {r['sweep_all']['b']['pairs']}; a = evidence vs "
        f"every other turn, b = evidence vs the {DELIVERED_NEGATIVES} non-evidence turns nearest the question",
        "- prompt = the question (its terms removed from the memory's), response = the gold answer; lexical = "
        "shipped `distinctive_terms`/`lexical_overlap`; semantic = all-MiniLM-L6-v2 cosine(memory, best answer "
        f"chunk); combined = lexical >= t OR semantic >= s (the shipped rule); run time {m['run_seconds']} s",
        '- caveat: a LoCoMo gold answer is a very short "response" (often a date or a few words) compared with '
        "an agent's reply, so lexical ratios run far lower than on real responses and cosines compare a turn "
        "with a phrase; temporal answers come from session dates, not from the evidence turn's words.",
        "",
        "## Chosen (dev, max F1 on set b) vs shipped, held-out and all conversations",
        "",
        "| method | thresholds | split | neg set | P | R | F1 | shipped P | shipped R | shipped F1 |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method, v in r["chosen"].items():
        for split in ("held_out", "all"):
            for neg in ("b", "a"):
                e = r[split].get(neg) if r[split] else None
                if e:
                    lines.append(
                        f"| {method} | {th(v)} | {split.replace('_', '-')} | {neg} | "
                        f"{row(e['chosen'][method])} | {row(e['shipped'][method])} |"
                    )
    lines += [
        "",
        f"Shipped: lexical {SHIPPED['lexical']}, semantic {SHIPPED['semantic']}.",
        "",
        "## Distributions (all conversations)",
        "",
        "| score | pairs | n | median | p90 | mean | share = 0 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for score, d in r["distributions"].items():
        for group, s in d.items():
            lines.append(
                f"| {score} | {group} | {s['n']} | {f(s['median'])} | {f(s['p90'])} | {f(s['mean'])} | "
                f"{f(s['share_zero'])} |"
            )
    for name, key in (("lexical ratio >= t", "lexical"), ("cosine >= s", "semantic")):
        lines += [
            "",
            f"## Sweep, all conversations: {name}",
            "",
            "| threshold | P (a) | R (a) | F1 (a) | P (b) | R (b) | F1 (b) |",
            "|---:" * 7 + "|",
        ]
        for ra, rb in zip(r["sweep_all"]["a"][key], r["sweep_all"]["b"][key]):
            lines.append(f"| {ra[key]} | {row(ra)} | {row(rb)} |")
    lines += [
        "",
        "## Sweep, all conversations: combined F1 on set b (rows t, columns s; P/R in the JSON)",
        "",
        "| t \\ s | " + " | ".join(map(str, SEMANTIC_SWEEP)) + " |",
        "|---" * (len(SEMANTIC_SWEEP) + 1) + "|",
    ]
    grid = {(c["lexical"], c["semantic"]): c for c in r["sweep_all"]["b"]["combined"]}
    for t in LEXICAL_SWEEP:
        lines.append(f"| {t} | " + " | ".join(f(grid[t, s]["f1"]) for s in SEMANTIC_SWEEP) + " |")
    lines += [
        "",
        "## Combined per category, all conversations, set b (chosen vs shipped)",
        "",
        "| category | questions | positives | P | R | F1 | shipped P | shipped R | shipped F1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for cat, v in r["per_category"].items():
        lines.append(f"| {cat} | {v['questions']} | {v['positives']} | {row(v['chosen'])} | {row(v['shipped'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo_dev.json (default: ../shared/data)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench", help="where engagement.md / .json go")
    parser.add_argument("--limit-conversations", type=int, default=None, metavar="N", help="first N only (quick run)")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        sys.exit(f"error: LoCoMo data not found: {args.data} (expected ../shared/data/locomo/locomo_dev.json)")
    start = time.perf_counter()
    from cairn_cli.ml.models import get_encoder

    encoder = get_encoder("all-MiniLM-L6-v2", "auto")
    convs, skipped = load(args.data, args.limit_conversations)
    qs = build(convs, lambda texts: np.asarray(encoder.encode(texts), dtype=np.float32))
    dev = [q for q in qs if q.conv < DEV_CONVERSATIONS]
    held = [q for q in qs if q.conv >= DEV_CONVERSATIONS]
    chosen = choose(dev)
    result = {
        "chosen": chosen,
        "shipped": SHIPPED,
        "held_out": evaluate(held, chosen) if held else None,
        "dev": evaluate(dev, chosen),
        "all": evaluate(qs, chosen),
        "distributions": distributions(qs),
        "per_category": per_category(qs, chosen),
        **{
            f"sweep_{name}": {n: sweep(sub, n) for n in ("a", "b")} if sub else None
            for name, sub in (("all", qs), ("dev", dev), ("held_out", held))
        },
    }
    result["meta"] = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} cores CPU ({platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}), no GPU",
        "command": "python scripts/bench_engagement.py" + "".join(f" {a}" for a in (argv or sys.argv[1:])),
        "data": "locomo/locomo_dev.json" if args.data == DEFAULT_DATA else str(args.data),
        "conversations": len(convs),
        "dev_conversations": [c["id"] for c in convs[:DEV_CONVERSATIONS]],
        "held_out_conversations": [c["id"] for c in convs[DEV_CONVERSATIONS:]],
        "questions": len(qs),
        "skipped": skipped,
        "memories": sum(len(c["turns"]) for c in convs),
        "run_seconds": round(time.perf_counter() - start, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "engagement.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "engagement.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
