"""Relevance of what cairn injects (#26's report, bench/relevance.md): the shipped default against BM25, dense, the
peers' hybrids (RRF, the 0.5/0.5 blend) and the old default, per set and LoCoMo category, on the held-out parts;
then abstention: the composite floor per kind of store, its trade-off, and what it costs on stores never fitted on;
then the redundant pairs per injected block (bench/diversity.json, scripts/bench_diversity.py, when present).

- Ranking: scripts/bench_ranking.py's held-out run (written to bench/ranking.md / ranking.json alongside), whose
  tables are quoted here.
- Abstention, per kind (core/ranking/kinds.py; profiles.py ships one floor per kind): "nothing relevant" prompts are
  LoCoMo's unanswerable questions (category 5) of the conversation, the answerable questions of ANOTHER conversation,
  and questions of another kind of store (TREC DL 2019 queries against LoCoMo; LoCoMo questions against DL19 and
  Cranfield). The floor is the highest losing <= 0.01 R@5 on the answerable questions of the kind's LoCoMo dev
  conversations, reported on the held-out ones. The kinds: dialog (LoCoMo turns), sequence (LoCoMo observations),
  default (the same observations ranked by the seed's composite: plain notes), and the fallback (lexical).

Data is read in place from ../shared/data, never copied. Usage: .venv/bin/python scripts/bench_relevance.py
[--out bench]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_ranking as br  # noqa: E402  (the loaders, systems and the ranking report)

FLOORS = [round(x, 3) for x in np.arange(0.0, 1.2, 0.005)]
MAX_LOST = 0.01
TOLERANCES = (0.005, 0.01, 0.015, 0.02, 0.03)
SCOPE = "conv"
FOREIGN_QUERIES = 24  # questions of another kind of store asked of each store (seeded sample)
# (the floor's key, what it ranks, the LoCoMo variant it is fitted on, the profile forced or auto, lexical?)
PATHS = (
    ("dialog:all-MiniLM-L6-v2", "daemon, dialog kind (LoCoMo turns)", "turns", "auto", False),
    ("sequence:all-MiniLM-L6-v2", "daemon, sequence kind (LoCoMo observations)", "observations", "auto", False),
    (
        "default:all-MiniLM-L6-v2",
        "daemon, plain notes (observations, seed's composite)",
        "observations",
        "default",
        False,
    ),
    ("default:lexical", "fallback, lexical (observations)", "observations", "default", True),
)


def table_of(store: br.Store):
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking.scoring import Candidate, ScoringTable

    def build(s: br.Store):
        cands = [Candidate(i, t, [], SCOPE, "fact", 0.75, br.NOW) for i, t in enumerate(s.texts)]
        return ScoringTable(cands, Settings().KEYWORD_FIELD_WEIGHT, vectors=s.vecs)

    return store.cached("scope-table", build)


def scored(store: br.Store, text: str, vec: np.ndarray, profile: str, lexical: bool) -> tuple[list[int], list[float]]:
    """(ids best first, the relevance their floor reads) as core/ranking/pipeline.py ranks: the scope requested,
    the profile of the store's kind (or the one forced), the lexical path without similarity."""
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking.profiles import profile as get_profile

    table = table_of(store)
    p = get_profile(Settings(), profile, kind=None if lexical else table.kind(SCOPE))
    out = table.score(
        text,
        None if lexical else store.vecs @ vec,
        scope=SCOPE,
        weights={**p.weights, "similarity": 0.0} if lexical else p.weights,
        half_life_days=30.0,
        now=br.NOW,
        top=10,
        neighbour_weight=p.neighbour_weight,
        context_keywords=0.0 if lexical else p.context_keywords,
        coverage=p.coverage and not lexical,
    )
    return [s.candidate.id for s in out], [s.components["relevance"] for s in out]


def _top(store, text, vec, profile, lexical) -> float:
    rel = scored(store, text, vec, profile, lexical)[1]
    return float(rel[0]) if rel else 0.0


def curves(stores, foreign, profile: str, lexical: bool) -> dict:
    """Per floor: the share of nothing-relevant prompts that inject nothing (overall and per source) and R@5 of the
    answerable ones (a memory under the floor is not injected)."""
    answerable, nothing = [], {"unanswerable": [], "another conversation": [], "another kind of store": []}
    for si, store in enumerate(stores):
        for q in store.queries:
            if q.category == br.EXCLUDED_CATEGORY:
                nothing["unanswerable"].append(_top(store, q.text, q.vec, profile, lexical))
                continue
            relevant = set(q.recall_relevant if q.recall_relevant is not None else q.relevant)
            if relevant:
                ids, rel = scored(store, q.text, q.vec, profile, lexical)
                answerable.append((ids[:5], rel[:5], relevant))
        if len(stores) > 1:
            for q in stores[(si + 1) % len(stores)].queries:
                if q.category != br.EXCLUDED_CATEGORY:
                    nothing["another conversation"].append(_top(store, q.text, q.vec, profile, lexical))
        for text, vec in foreign:
            nothing["another kind of store"].append(_top(store, text, vec, profile, lexical))
    tops = [t for values in nothing.values() for t in values]
    points = []
    for f in FLOORS:
        r5 = [
            len({i for i, x in zip(ids, rel) if x >= f} & relevant) / len(relevant) for ids, rel, relevant in answerable
        ]
        points.append(
            {
                "floor": f,
                "abstain": sum(t < f for t in tops) / len(tops) if tops else 0.0,
                "by_source": {k: (sum(t < f for t in v) / len(v) if v else None) for k, v in nothing.items()},
                "r5": sum(r5) / len(r5) if r5 else 0.0,
            }
        )
    return {"points": points, "n_nothing": len(tops), "n_answerable": len(answerable)}


def fit(curve: dict, max_lost: float = MAX_LOST) -> float:
    base = curve["points"][0]["r5"]
    return max(p["floor"] for p in curve["points"] if base - p["r5"] <= max_lost)


def at(curve: dict, floor: float) -> dict:
    return min(curve["points"], key=lambda p: abs(p["floor"] - floor))


def lost(curve: dict, floor: float) -> float:
    return round(curve["points"][0]["r5"] - at(curve, floor)["r5"], 4)


def questions(stores, n: int, seed: int) -> list[tuple[str, np.ndarray]]:
    pool = [(q.text, q.vec) for s in stores for q in s.queries if q.category != br.EXCLUDED_CATEGORY]
    return random.Random(seed).sample(pool, min(n, len(pool)))


def abstention(data: Path) -> dict:
    from cairn_cli.core.ranking.profiles import SHIPPED_FLOORS

    locomo = {part: br.load_locomo(data, None, part)[0] for part in ("dev", "held-out")}
    dl19 = br.load_dl19(data, None)
    cran = br.load_cranfield(data, None, "held-out")
    dl19_queries = [(s.queries[0].text, s.queries[0].vec) for s in dl19]
    out = {}
    for key, what, variant, profile, lexical in PATHS:
        # DL19's queries are split between the parts: the dev curve never sees the held-out part's foreigners
        dev = curves(locomo["dev"][variant], dl19_queries[:20], profile, lexical)
        held = curves(locomo["held-out"][variant], dl19_queries[20:], profile, lexical)
        floor = fit(dev)
        shipped = SHIPPED_FLOORS.get(tuple(key.split(":")), 0.0)  # type: ignore[arg-type]
        row = {
            "what": what,
            "fitted": floor,
            "shipped": shipped,
            "dev": {"abstain": at(dev, shipped)["abstain"], "r5_lost": lost(dev, shipped), "n": dev["n_nothing"]},
            "held": {
                "abstain": at(held, shipped)["abstain"],
                "by_source": at(held, shipped)["by_source"],
                "r5_lost": lost(held, shipped),
                "n_nothing": held["n_nothing"],
                "n_answerable": held["n_answerable"],
            },
            "tradeoff": [
                {
                    "max_lost_dev": tol,
                    "floor": (f := fit(dev, tol)),
                    "dev_abstain": at(dev, f)["abstain"],
                    "dev_r5_lost": lost(dev, f),
                    "held_abstain": at(held, f)["abstain"],
                    "held_r5_lost": lost(held, f),
                }
                for tol in TOLERANCES
            ],
        }
        if not lexical:  # stores never fitted on, LoCoMo questions as their nothing-relevant prompts
            foreign = questions(locomo["held-out"]["turns"], FOREIGN_QUERIES, seed=5)
            for name, stores in (("dl19", dl19), ("cranfield", cran)):
                kinds = {table_of(s).kind(SCOPE) for s in stores}
                profile_here = {"dialog": "dialog", "sequence": "sequence"}.get(next(iter(kinds)), "default")
                if profile == "auto" and profile_here != key.split(":")[0]:
                    continue  # that store is another kind: its own floor's row reports it
                if profile == "default" and profile_here != "default":
                    continue
                c = curves(stores, foreign if name == "cranfield" else foreign[:8], profile, lexical)
                row[name] = {
                    "kind": sorted(kinds),
                    "abstain": at(c, shipped)["abstain"],
                    "r5_lost": lost(c, shipped),
                    "n_nothing": c["n_nothing"],
                    "n_answerable": c["n_answerable"],
                }
        out[key] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=br.DEFAULT_DATA)
    ap.add_argument("--out", type=Path, default=ROOT / "bench")
    ap.add_argument("--skip-ranking", action="store_true", help="reuse --out/ranking.json (no ranking run)")
    args = ap.parse_args()
    from cairn_cli.ml.device import simd_summary

    t0 = time.time()
    if not args.skip_ranking:
        br.main(["--part", "held-out", "--out", str(args.out), "--data", str(args.data), "--reranker", "none"])
    ranking = json.loads((args.out / "ranking.json").read_text())
    result = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "cpu_flags": simd_summary(),
        "abstention": abstention(args.data),
    }
    diversity = args.out / "diversity.json"
    result["diversity"] = json.loads(diversity.read_text()) if diversity.exists() else None
    result["run_time_s"] = round(time.time() - t0, 1)
    (args.out / "relevance.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "relevance.md").write_text(render(result, ranking))
    print(render(result, ranking))


SETS = (
    ("cranfield", "Cranfield, held-out queries (never fitted on)"),
    ("locomo_turns", "LoCoMo turns, held-out conversations"),
    ("locomo_observations", "LoCoMo observations, held-out conversations"),
    ("dl19", "TREC DL 2019, all 43 queries (never fitted on)"),
)


def _iv(iv: dict | None) -> str:
    if not iv or iv.get("diff") is None:
        return "–"
    if iv.get("low") is None:
        return f"{iv['diff']:+.3f}"
    return f"{iv['diff']:+.3f} [{iv['low']:+.3f}, {iv['high']:+.3f}]"


def render(r: dict, ranking: dict) -> str:
    meta = ranking["meta"]
    lines = [
        "# Relevance: the shipped default against BM25, dense, the peers' hybrids and the old default (#26)\n",
        f"- date: {r['date']}; ranking run: {meta['date']}",
        f"- machine: {meta['machine']}; CPU flags: {r['cpu_flags']}",
        "- command: `python scripts/bench_relevance.py` (runs scripts/bench_ranking.py --part held-out: "
        "bench/ranking.md has every table in full)",
        "- fitted on the four LoCoMo dev conversations only; reported on the three held-out ones "
        f"({', '.join(br.locomo.HELD_OUT)}), on Cranfield's held-out queries and on all of TREC DL 2019 (never fitted)",
        "- default: CAIRN_RANK_PROFILE=auto, each store ranked by its kind; kinds detected: "
        + "; ".join(meta["kinds"]),
        f"- intervals: paired bootstrap over questions ({meta['bootstrap']['resamples']} resamples), against the old "
        "default, and the default against the best peer on the set",
        f"- run time: {r['run_time_s']} s\n",
        "## Ranking, per set (R@5, nDCG@10; LoCoMo overall excludes category 5)\n",
        "| set | system | n | R@5 | R@5 − old default [95%] | nDCG@10 | nDCG@10 − old default [95%] |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for key, title in SETS:
        if key not in ranking:
            continue
        for name, groups in ranking[key].items():
            a = groups["all"]
            ref = a.get("vs_reference", {})
            bold = f"**{name}**" if name == "default" else name
            lines.append(
                f"| {title} | {bold} | {a['n']} | {a['R@5']:.3f} | {_iv(ref.get('R@5'))} | {a['NDCG@10']:.3f} | "
                f"{_iv(ref.get('NDCG@10'))} |"
            )
    lines += ["", "The default against the best peer (BM25, dense, RRF, blend) of each set, paired 95% intervals:\n"]
    lines += ["| set | metric | best peer | default − best peer [95%] | ≥ +0.02? |", "|---|---|---|---:|---|"]
    for key, title in SETS:
        best = ranking.get(key, {}).get("default", {}).get("all", {}).get("vs_best_peer", {})
        for metric, iv in best.items():
            lines.append(f"| {title} | {metric} | {iv['peer']} | {_iv(iv)} | {'yes' if iv['diff'] >= 0.02 else 'no'} |")
    lines += ["", "## Per LoCoMo category (held-out conversations)\n"]
    for key in ("locomo_turns", "locomo_observations"):
        res = ranking[key]
        lines += [f"### {key.split('_')[1]}\n", "| category | system | n | R@5 | R@5 − old default [95%] |"]
        lines.append("|---|---|---:|---:|---:|")
        for cat in ("1", "2", "3", "4"):
            for name, groups in res.items():
                g = groups.get(cat)
                if g:
                    label = f"{cat} {br.LOCOMO_CATEGORIES[int(cat)]}"
                    lines.append(
                        f"| {label} | {name} | {g['n']} | {g['R@5']:.3f} | {_iv(g.get('vs_reference', {}).get('R@5'))} |"
                    )
        lines.append("")
    lines += ["## Ablation: what moved each number (held-out)\n", "| set | the default less | R@5 | nDCG@10 |"]
    lines.append("|---|---|---:|---:|")
    for key, title in SETS:
        for name, groups in ranking.get(f"{key}_ablation", {}).items():
            lines.append(f"| {title} | {name} | {groups['all']['R@5']:.3f} | {groups['all']['NDCG@10']:.3f} |")
    lines += ["", "## The weakest questions: what the literature does for them, on top of the default (held-out R@5)\n"]
    lines += [
        "The default already reads each memory with its neighbours. Kept only if it lifts multi-hop (1) and "
        "open-domain (3) without costing the rest:\n",
        "| set | variant | 1 multi-hop | 2 temporal | 3 open-domain | 4 single-hop | overall |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for key in ("locomo_turns", "locomo_observations"):
        for name, groups in ranking.get(f"{key}_tried", {}).items():
            cells = " | ".join(f"{groups[c]['R@5']:.3f}" if c in groups else "–" for c in ("1", "2", "3", "4", "all"))
            lines.append(f"| {key.split('_')[1]} | {name} | {cells} |")
    lines += [
        "",
        f"## Abstention: the composite floor per kind of store (shipped; the fit: the highest floor losing <= "
        f"{MAX_LOST} R@5 on dev)\n",
        "| path (floor key) | fitted on dev | shipped | dev: abstain | dev: R@5 lost | held-out: abstain | "
        "held-out: R@5 lost | held-out abstain by source (unanswerable / another conversation / another kind) | "
        "held-out n (nothing / answerable) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for key, a in r["abstention"].items():
        src = a["held"]["by_source"]
        by = " / ".join("–" if v is None else f"{v:.0%}" for v in src.values())
        lines.append(
            f"| {a['what']} (`{key}`) | {a['fitted']:.3f} | {a['shipped']:.3f} | {a['dev']['abstain']:.1%} | "
            f"{a['dev']['r5_lost']:.3f} | {a['held']['abstain']:.1%} | {a['held']['r5_lost']:.3f} | {by} | "
            f"{a['held']['n_nothing']} / {a['held']['n_answerable']} |"
        )
    lines += [
        "",
        "On stores never fitted on, at the shipped floor of their kind (LoCoMo questions as nothing relevant):\n",
    ]
    lines += [
        "| store | kind | floor key | abstain | R@5 lost | n (nothing / answerable) |",
        "|---|---|---|---:|---:|---:|",
    ]
    for key, a in r["abstention"].items():
        for name in ("dl19", "cranfield"):
            if name in a:
                u = a[name]
                lines.append(
                    f"| {name} | {', '.join(u['kind'])} | `{key}` | {u['abstain']:.1%} | {u['r5_lost']:.3f} | "
                    f"{u['n_nothing']} / {u['n_answerable']} |"
                )
    lines += ["", "### The floor's trade-off: tolerance on dev -> floor -> abstention and R@5 lost\n"]
    lines += ["| path | R@5 loss allowed on dev | floor | dev abstain | dev lost | held-out abstain | held-out lost |"]
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for key, a in r["abstention"].items():
        for t in a["tradeoff"]:
            lines.append(
                f"| `{key}` | {t['max_lost_dev']:.3f} | {t['floor']:.3f} | {t['dev_abstain']:.1%} | "
                f"{t['dev_r5_lost']:.3f} | {t['held_abstain']:.1%} | {t['held_r5_lost']:.3f} |"
            )
    lines += ["", "## Redundant pairs per injected block\n"]
    if r["diversity"] is None:
        lines.append("bench/diversity.json is absent: run scripts/bench_diversity.py first.")
    else:
        lines += [
            f"From bench/diversity.md ({r['diversity']['meta'].get('date', '')}): pairs of memories repeating each other "
            "(core/ranking/diversity.py's rule) per top-5 block, before and after the near-duplicate skip, and R@5.\n",
            "| path | store / part | pairs per block before | after | R@5 before | R@5 after | after − before [95%] |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for path, rows in r["diversity"]["blocks"].items():
            for name, b in rows.items():
                lines.append(
                    f"| {path} | {name} | {b['before_pairs_per_block']:.3f} | {b['after_pairs_per_block']:.3f} | "
                    f"{b['before_r5']:.3f} | {b['after_r5']:.3f} | {_iv(b['r5_diff'])} |"
                )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
