"""A long-lived daemon's memory and file descriptors over many prompts: does anything grow per prompt?

    .venv/bin/python scripts/bench_scale.py --sizes 100000 --keep /tmp/scale     # a 100k store, once
    .venv/bin/python scripts/bench_daemon_memory.py --home /tmp/scale/s100000 --prompts 1200 --label after

Starts the store's daemon (composite only), sends `--prompts` prompts through the prompt hook exactly as `cairn hook
install` writes it (each a new process, each a new question: LoCoMo's and TREC's real ones, numbered once they
repeat), and every `--every` prompts reads the daemon's resident memory (`daemon status`) and its open file
descriptors (/proc). Each run is kept under its `--label` in the JSON, so that a run of other code (the code before
a fix, checked out in place) is reported beside it. Results: bench/daemon_memory.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import bench_hot_path as hot  # noqa: E402
import bench_scale as scale  # noqa: E402


def run(home: Path, prompts: int, every: int) -> list[dict]:
    env = hot.env_for(home, CAIRN_RERANKER_ENABLED="false")
    questions = scale.questions()
    random.Random(31).shuffle(questions)
    scale.started(home, env)
    pid = hot.daemon(home, env, "status")["pid"]
    samples = []
    t0 = time.time()
    try:
        for i in range(prompts + 1):
            if i % every == 0:
                status = hot.daemon(home, env, "status")
                samples.append(
                    {
                        "prompts": i,
                        "rss_mb": status.get("rss_mb"),
                        "fds": len(os.listdir(f"/proc/{pid}/fd")),
                        "settle_ms": status.get("settle_ms"),
                        "seconds": round(time.time() - t0, 1),
                    }
                )
                print(json.dumps(samples[-1]), file=sys.stderr)
            if i == prompts:
                break
            question = questions[i % len(questions)] + (f" ({i // len(questions)})" if i >= len(questions) else "")
            proc = subprocess.run(
                scale.hook_cmd(), env=env, input=scale.hook_input(question), capture_output=True, text=True
            )
            if proc.returncode != 0 or "<cairn-memories" not in proc.stdout:
                raise SystemExit(f"prompt {i}: the hook gave no memories: {proc.stderr[-300:]}")
    finally:
        hot.daemon(home, env, "stop")
    return samples


def report(results: dict) -> str:
    labels = list(results["runs"])
    lines = [
        "# A long-lived daemon's memory and file descriptors, prompt after prompt",
        "",
        f"- machine: {json.dumps(results['machine'])}",
        "- each row: the daemon's resident memory (MB) and open file descriptors after that many prompts, each a new"
        " process running the prompt hook as installed, a new question each (composite only)",
        *(f"- `{label}`: {run['about']} (`{run['command']}`, {run['date']})" for label, run in results["runs"].items()),
        "",
        "| prompts | " + " | ".join(f"{label}: RSS MB | {label}: fds" for label in labels) + " |",
        "|---:|" + "---:|---:|" * len(labels),
    ]
    rows: dict[int, dict] = {}
    for label in labels:
        for s in results["runs"][label]["samples"]:
            rows.setdefault(s["prompts"], {})[label] = s
    for n in sorted(rows):
        cells = []
        for label in labels:
            s = rows[n].get(label)
            cells += [str(s["rss_mb"]), str(s["fds"])] if s else ["", ""]
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, required=True, help="a CAIRN_HOME with a store (bench_scale.py --keep)")
    ap.add_argument("--prompts", type=int, default=1200)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--label", default="now")
    ap.add_argument("--about", default="the code checked out", help="what the labelled run measured")
    ap.add_argument("--out", default=str(ROOT / "bench" / "daemon_memory"))
    args = ap.parse_args()
    if not (args.home / "memory.db").exists():
        raise SystemExit(f"no store in {args.home}: build one with scripts/bench_scale.py --keep")
    hot.precompile()
    out = Path(args.out)
    results = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {"runs": {}}
    results["machine"] = hot.machine()
    samples = run(args.home, args.prompts, args.every)
    results["runs"][args.label] = {
        "about": args.about,
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "home": str(args.home),
        "samples": samples,
    }
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    out.with_suffix(".md").write_text(report(results))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
