"""Relevance of what cairn injects, on LoCoMo dev (read in place from ../shared/data, never copied):

- turns as memories: BM25 (cairn's own keywords component alone, and bm25s) vs dense vs the composite's profiles
  (`default`: the seed's weights; `dialog`: opt-in, keywords 0.30 and neighbour smoothing): R@5 / R@10 / nDCG@10;
- abstention: a floor on the composite score. "Nothing relevant" prompts are the adversarial (category 5)
  questions of the conversation and the answerable questions of ANOTHER conversation; the floor is the highest that
  loses at most 0.01 R@5 on the answerable dev questions (the goal is 0.02: a margin for unseen conversations). Fitted per (profile, path): the daemon's composite with the
  bundled model, and the lexical fallback (no similarity).

Everything is fitted on the first 4 conversations (dev) and reported on the other 3 (held-out), side by side in
one run. Usage: .venv/bin/python scripts/bench_relevance.py [--out bench]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_ranking as br  # noqa: E402  (the shared LoCoMo loader and baselines)

DEV, HELD = range(0, 4), range(4, 7)
FLOORS = [round(x, 3) for x in np.arange(0.0, 0.80, 0.005)]
MAX_LOST = 0.01  # the goal allows 0.02: a margin for unseen conversations and for real prompts (a shipped example
# prompt, "I want to ship this fix to production today", scores 0.322 and must keep its memory)
SCOPE = "conv"


def table_of(store):
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking.scoring import Candidate, ScoringTable

    def build(s):
        cands = [Candidate(i, t, [], SCOPE, "fact", 0.75, br.NOW) for i, t in enumerate(s.texts)]
        return ScoringTable(cands, Settings().KEYWORD_FIELD_WEIGHT)

    return store.cached("scope-table", build)


def scored(store, query, profile: str, lexical: bool = False):
    """(ids best first, the relevance part of their composite: what the floor reads) as the product ranks: the
    scope requested, the profile's weights."""
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking.profiles import profile as get_profile

    p = get_profile(Settings(), profile)
    weights = {**p.weights, "similarity": 0.0} if lexical else p.weights
    sims = None if lexical else br.cosine(store, query)
    out = table_of(store).score(
        query.text,
        sims,
        scope=SCOPE,
        weights=weights,
        half_life_days=30.0,
        now=br.NOW,
        neighbour_weight=p.neighbour_weight,
    )
    return np.array([s.candidate.id for s in out]), np.array([s.components["relevance"] for s in out])


def systems(profile_names=("default", "dialog")):
    out = {
        "bm25 (bm25s)": lambda s, q: br._rank(br.bm25s_scores(s, q)),
        "bm25 (cairn keywords)": lambda s, q: br._rank(table_of(s).index.scores(_terms(q.text))),
        "dense": lambda s, q: br._rank(br.cosine(s, q)),
    }
    for name in profile_names:
        out[f"composite {name}"] = lambda s, q, name=name: scored(s, q, name)[0]
    return out


def _terms(text):
    from cairn_cli.core.text import terms

    return terms(text)


def ranking_quality(stores, variant):
    rows = {}
    for split, idx in (("dev", DEV), ("held-out", HELD)):
        res = br.evaluate([stores[variant][i] for i in idx], systems(), br.LOCOMO_METRICS)
        rows[split] = {
            name: {m: round(r["all"][m], 4) for m in br.LOCOMO_METRICS} | {"n": r["all"]["n"]}
            for name, r in res.items()
        }
    return rows


def abstention_curves(stores, idx, profile, lexical):
    """Per floor: share of nothing-relevant prompts that inject nothing, and R@5 of the answerable ones."""
    answerable, tops = [], []
    ss = [stores["observations"][i] for i in idx] if profile == "default" else [stores["turns"][i] for i in idx]
    for si, store in enumerate(ss):
        for q in store.queries:
            ids, scores = scored(store, q, profile, lexical)
            if q.category == 5:
                tops.append(float(scores[0]) if len(scores) else 0.0)
            else:
                answerable.append((ids[:5], scores[:5], set(q.relevant)))
        other = ss[(si + 1) % len(ss)]
        for q in other.queries:
            if q.category != 5:
                _, scores = scored(store, q, profile, lexical)
                tops.append(float(scores[0]) if len(scores) else 0.0)
    curve = []
    for f in FLOORS:
        r5 = [len({i for i, s in zip(ids, sc) if s >= f} & rel) / len(rel) for ids, sc, rel in answerable]
        curve.append({"floor": f, "abstain": sum(t < f for t in tops) / len(tops), "r5": sum(r5) / len(r5)})
    return curve, len(tops), len(answerable)


def fit_floor(curve, max_lost=MAX_LOST):
    base = curve[0]["r5"]
    ok = [c for c in curve if base - c["r5"] <= max_lost]
    return max(ok, key=lambda c: c["floor"])["floor"]


def at(curve, floor):
    return next(c for c in curve if abs(c["floor"] - floor) < 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=br.DEFAULT_DATA)
    ap.add_argument("--out", type=Path, default=ROOT / "bench")
    args = ap.parse_args()
    t0 = time.time()
    stores, _ = br.load_locomo(args.data, None)
    result = {"date": dt.datetime.now().isoformat(timespec="seconds"), "split": {"dev": list(DEV), "held": list(HELD)}}
    result["turns"] = ranking_quality(stores, "turns")
    result["observations"] = ranking_quality(stores, "observations")
    result["abstention"] = {}
    for profile, lexical, what in (
        ("default", False, "daemon, default profile (observations)"),
        ("default", True, "fallback, default profile (observations)"),
        ("dialog", False, "daemon, dialog profile (turns)"),
    ):
        dev, n_none, n_ans = abstention_curves(stores, DEV, profile, lexical)
        floor = fit_floor(dev)
        held, h_none, h_ans = abstention_curves(stores, HELD, profile, lexical)
        key = f"{profile}:{'lexical' if lexical else 'all-MiniLM-L6-v2'}"
        result["abstention"][key] = {
            "what": what,
            "floor": floor,
            "dev": {
                "abstain": round(at(dev, floor)["abstain"], 4),
                "r5_lost": round(dev[0]["r5"] - at(dev, floor)["r5"], 4),
                "n_nothing": n_none,
                "n_answerable": n_ans,
            },
            "held": {
                "abstain": round(at(held, floor)["abstain"], 4),
                "r5_lost": round(held[0]["r5"] - at(held, floor)["r5"], 4),
                "n_nothing": h_none,
                "n_answerable": h_ans,
            },
            "tradeoff": [
                {
                    "max_lost_dev": tol,
                    "floor": (f := fit_floor(dev, tol)),
                    "dev_abstain": round(at(dev, f)["abstain"], 4),
                    "dev_r5_lost": round(dev[0]["r5"] - at(dev, f)["r5"], 4),
                    "held_abstain": round(at(held, f)["abstain"], 4),
                    "held_r5_lost": round(held[0]["r5"] - at(held, f)["r5"], 4),
                }
                for tol in (0.005, 0.01, 0.015, 0.02, 0.03)
            ],
            "curve": {"dev": dev, "held": held},
        }
    result["run_time_s"] = round(time.time() - t0, 1)
    args.out.mkdir(exist_ok=True)
    (args.out / "relevance.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "relevance.md").write_text(render(result))
    print(render(result))


def render(r) -> str:
    lines = [
        "# Relevance: turns as memories, and abstention (LoCoMo dev)\n",
        f"- date: {r['date']}",
        "- command: `python scripts/bench_relevance.py`",
        "- split: fitted on conversations 1-4 (dev), reported on 5-7 (held-out); category 5 excluded from recall",
        f"- run time: {r['run_time_s']} s\n",
    ]
    for variant in ("turns", "observations"):
        lines.append(f"## {variant} as memories (questions as queries)\n")
        names = list(r[variant]["dev"])
        lines.append("| system | dev R@5 | dev R@10 | dev nDCG@10 | held-out R@5 | held-out R@10 | held-out nDCG@10 |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|")
        for n in names:
            d, h = r[variant]["dev"][n], r[variant]["held-out"][n]
            lines.append(
                f"| {n} | {d['R@5']:.3f} | {d['R@10']:.3f} | {d['NDCG@10']:.3f} | {h['R@5']:.3f} | "
                f"{h['R@10']:.3f} | {h['NDCG@10']:.3f} |"
            )
        lines.append("")
    lines.append(f"## Abstention: the composite floor (fitted on dev: the highest floor losing <= {MAX_LOST} R@5)\n")
    lines.append(
        "| path | floor | dev: nothing-relevant prompts that abstain | dev: R@5 lost | held-out: abstain | "
        "held-out: R@5 lost | held-out n (nothing / answerable) |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for key, a in r["abstention"].items():
        lines.append(
            f"| {a['what']} (`{key}`) | {a['floor']:.3f} | {a['dev']['abstain']:.1%} | {a['dev']['r5_lost']:.3f} | "
            f"{a['held']['abstain']:.1%} | {a['held']['r5_lost']:.3f} | {a['held']['n_nothing']} / "
            f"{a['held']['n_answerable']} |"
        )
    from cairn_cli.core.ranking.profiles import SHIPPED_FLOORS

    lines.append("\n## The floors cairn ships (cairn_cli/core/ranking/profiles.py), on the same curves\n")
    lines.append("| path | shipped floor | dev abstain | dev R@5 lost | held-out abstain | held-out R@5 lost |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for key, a in r["abstention"].items():
        f = SHIPPED_FLOORS[tuple(key.split(":"))]
        d, h = a["curve"]["dev"], a["curve"]["held"]
        lines.append(
            f"| `{key}` | {f:.3f} | {at(d, f)['abstain']:.1%} | {d[0]['r5'] - at(d, f)['r5']:.3f} | "
            f"{at(h, f)['abstain']:.1%} | {h[0]['r5'] - at(h, f)['r5']:.3f} |"
        )
    lines.append("\n## The floor's trade-off: tolerance on dev -> floor -> abstention and R@5 lost\n")
    lines.append(
        "| path | R@5 loss allowed on dev | floor | dev abstain | dev lost | held-out abstain | held-out lost |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for key, a in r["abstention"].items():
        for t in a["tradeoff"]:
            lines.append(
                f"| `{key}` | {t['max_lost_dev']:.3f} | {t['floor']:.3f} | {t['dev_abstain']:.1%} | "
                f"{t['dev_r5_lost']:.3f} | {t['held_abstain']:.1%} | {t['held_r5_lost']:.3f} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
