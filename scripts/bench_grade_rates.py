"""Teacher demotion's learning curves (#27 point 4): the loop (scripts/bench_loop.py loop) run at several forced grade
rates (CAIRN_GRADE_RATE), read back and set side by side: the held-out lift over the composite against the labels
the loop had, per rate, and the grading tokens each rate costs per 100 prompts. Does a label bought at rate 0.2
teach as much as one bought at rate 1 (the inverse-propensity weights' promise), and what does the lower rate save?

    .venv/bin/python scripts/bench_grade_rates.py 1.0=/tmp/loop/out/loop.json 0.5=/tmp/r05/out/loop.json \
        0.2=/tmp/r02/out/loop.json [--regime oracle] [--out bench --name grade_rates]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORMS = ("window", "prompt")


def curve(result: dict, regime: str) -> tuple[list[dict], dict]:
    """(the regime's curve without its composite point, its grading cost) of one loop.json."""
    r = next(x for x in result["regimes"] if x["regime"] == regime)
    return r["curve"][1:], r.get("grading_cost") or {}


def cell(point: dict, form: str, metric: str = "R@5") -> str:
    d = (point.get("vs_composite") or {}).get(form, {}).get(metric)
    return "–" if not d else f"{d['delta']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"


def report(runs: dict[str, dict], regime: str, command: str) -> str:
    first = next(iter(runs.values()))
    lines = [
        "# Teacher demotion: learning curves at forced grade rates (#27 point 4)",
        "",
        f"`{command}` — each rate a run of `scripts/bench_loop.py loop` (the command of each below), regime "
        f"{regime}; CPU: {first.get('cpu')}.",
        "",
        "Δ: the live ranking (after `cairn train-reranker --auto` at each point) minus the composite as main ships it, "
        "R@5 on the held-out conversations' questions, paired 95% bootstrap interval per question. Labels: graded "
        "deliveries when cron ran (an unasked turn gives none, so a lower rate needs more prompts for as many).",
        "",
        "| grade rate | labels | prompts | outcome | window Δ R@5 [95%] | bare question Δ R@5 [95%] |",
        "|---|---|---|---|---|---|",
    ]
    for rate, result in runs.items():
        points, _ = curve(result, regime)
        for p in points:
            lines.append(
                f"| {rate} | {p['labels']} | {p['prompts']} | {p.get('outcome', '')} | {cell(p, 'window')} "
                f"| {cell(p, 'prompt')} |"
            )
    lines += [
        "",
        "## Grading cost per 100 prompts",
        "",
        "| grade rate | turns asked | rule tokens | `[cm]` tokens | rule tokens saved vs rate 1 | `[cm]` tokens saved |",
        "|---|---|---|---|---|---|",
    ]
    full = None
    for rate, result in runs.items():
        cost = curve(result, regime)[1].get("per_100_prompts") or {}
        if full is None and float(rate) == 1.0:
            full = cost
        base = full or {}
        saved = (
            (
                f"{base['rule_tokens'] - cost['rule_tokens']:.0f}",
                f"{base['cm_tokens'] - cost['cm_tokens']:.0f}",
            )
            if base and cost
            else ("–", "–")
        )
        lines.append(
            f"| {rate} | {cost.get('asked', '–')} | {cost.get('rule_tokens', '–')} | {cost.get('cm_tokens', '–')} "
            f"| {saved[0]} | {saved[1]} |"
        )
    lines += ["", "Runs:", ""]
    lines += [f"- rate {rate}: `{result['command']}` ({result.get('date')})" for rate, result in runs.items()]
    return "\n".join(lines) + "\n"


def plot(runs: dict[str, dict], regime: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, form in zip(axes, FORMS):
        for rate, result in runs.items():
            points = [p for p in curve(result, regime)[0] if (p.get("vs_composite") or {}).get(form)]
            xs = [p["labels"] for p in points]
            ys = [p["vs_composite"][form]["R@5"]["delta"] for p in points]
            lo = [p["vs_composite"][form]["R@5"]["ci95"][0] for p in points]
            hi = [p["vs_composite"][form]["R@5"]["ci95"][1] for p in points]
            ax.plot(xs, ys, marker="o", label=f"grade rate {rate}")
            ax.fill_between(xs, lo, hi, alpha=0.15)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(f"held-out {'hook windows' if form == 'window' else 'bare questions'}")
        ax.set_xlabel("labels (graded deliveries)")
    axes[0].set_ylabel("R@5 − composite")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="rate=path/to/loop.json, one per grade rate")
    ap.add_argument("--regime", default="oracle")
    ap.add_argument("--out", default=str(ROOT / "bench"))
    ap.add_argument("--name", default="grade_rates")
    args = ap.parse_args()
    runs = {}
    for item in args.runs:
        rate, _, path = item.partition("=")
        runs[rate] = json.loads(Path(path).read_text())
    out = Path(args.out)
    (out / f"{args.name}.md").write_text(report(runs, args.regime, " ".join(sys.argv)))
    plot(runs, args.regime, out / f"{args.name}.png")
    summary = {rate: {"curve": curve(r, args.regime)[0], "cost": curve(r, args.regime)[1]} for rate, r in runs.items()}
    for points in (s["curve"] for s in summary.values()):
        for p in points:
            for f in (p.get("forms") or {}).values():
                f.pop("per_query", None)
    (out / f"{args.name}.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
