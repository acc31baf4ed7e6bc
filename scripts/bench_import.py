"""#30 point 1: `cairn memory import` against the embedder's own time, and its cost per line as the store grows.

    python scripts/bench_import.py                       # both parts, results in bench/import.{md,json}
    python scripts/bench_import.py --lines 3000 --curve 1000,10000,100000

Part A (the real bundled model, through the daemon, one machine): for real text (LoCoMo dev's dialogue turns, read in
place) and templated text (`<18 words> ticket <i>`, the shape that made the old import quadratic), the same lines
(a) embedded by the daemon alone, in the import's batches, and (b) imported by `cairn memory import` into a fresh
store (a new process, as a user runs it), then (c) imported again (every line an exact repeat: the "embeddings
already known" case). The two arms run interleaved, `--reps` times, and the ratio import / embedder is reported per
rep with its median. Token lengths are the model's tokenizer's.

Part B (cairn's own cost, the hashing encoder in process, no model time): the cost per line of importing N new
templated lines into an empty store, for N in `--curve`: flat means linear.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

# 18 words, then "ticket <i>": release notes, ticket logs and generated notes have this shape
WORDS = ["the", "release", "pipeline", "publishes", "the", "signed", "wheel", "to", "the", "internal", "package"]
WORDS += ["index", "after", "the", "nightly", "build", "passes", "checks"]


def templated(n: int) -> list[dict]:
    return [{"content": " ".join(WORDS) + f" ticket {i}", "scope": "releases"} for i in range(n)]


def real(n: int) -> list[dict]:
    import locomo

    out: list[dict] = []
    for conv in locomo.conversations():
        turns, _ = locomo.turns_and_index(conv)
        out += [{"content": t, "scope": conv["sample_id"]} for t in turns]
    if len(out) < n:
        print(f"LoCoMo dev has {len(out)} turns; using them all", file=sys.stderr)
    return out[:n]


def write_jsonl(rows: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def tokens(texts: list[str]) -> dict:
    """The lines' length in the bundled model's tokens (its own tokenizer, offline)."""
    from transformers import AutoTokenizer

    from cairn_cli.ml.student import bundled_base

    tok = AutoTokenizer.from_pretrained(str(bundled_base()))
    lengths = sorted(len(ids) for ids in tok(texts)["input_ids"])
    return {"mean": round(statistics.fmean(lengths), 1), "p95": lengths[int(0.95 * (len(lengths) - 1))]}


def cairn(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / ".venv" / "bin" / "cairn"), *args], env=env, capture_output=True, text=True)


def embed_alone(rows: list[dict], batch: int) -> float:
    """The daemon embedding the import's texts (content + keywords, as the import embeds them) in its batches."""
    from cairn_cli.core.store.embeddings import embedding_text
    from cairn_cli.daemon import dispatch

    texts = [embedding_text(r["content"], r.get("keywords", [])) for r in rows]
    started = time.perf_counter()
    for start in range(0, len(texts), batch):
        got = dispatch.embed_with_model(texts[start : start + batch], timeout_ms=600_000)
        if got is None:
            raise SystemExit("the daemon did not embed: is it running?")
    return time.perf_counter() - started


def part_a(lines: int, reps: int, batch: int, work: Path) -> dict:
    home = work / "home"
    env = {**os.environ, "CAIRN_HOME": str(home), "HF_HUB_OFFLINE": "1", "CAIRN_DAEMON": "auto"}
    env.pop("CAIRN_EMBED_MODEL", None)
    os.environ.update({k: v for k, v in env.items() if k.startswith("CAIRN_") or k == "HF_HUB_OFFLINE"})
    started = cairn(env, "daemon", "start")
    if started.returncode != 0:
        raise SystemExit(f"daemon start failed: {started.stderr}")
    out: dict = {}
    try:
        for name, rows in (("real (LoCoMo turns)", real(lines)), ("templated", templated(lines))):
            path = write_jsonl(rows, work / f"{name.split()[0]}.jsonl")
            runs = []
            for rep in range(reps):
                url = f"sqlite:///{work / f'{name.split()[0]}-{rep}.db'}"
                order = ("embed", "import") if rep % 2 == 0 else ("import", "embed")
                t: dict[str, float] = {}
                for arm in order:
                    if arm == "embed":
                        t["embed_s"] = embed_alone(rows, batch)
                    else:
                        began = time.perf_counter()
                        done = cairn(env, "--db-url", url, "memory", "import", str(path), "--json")
                        t["import_s"] = time.perf_counter() - began
                        if done.returncode != 0:
                            raise SystemExit(f"import failed: {done.stderr}")
                        t["added"] = json.loads(done.stdout)["added"]
                began = time.perf_counter()
                again = cairn(env, "--db-url", url, "memory", "import", str(path), "--json")
                t["reimport_s"] = time.perf_counter() - began
                t["reimport_merged"] = json.loads(again.stdout)["merged"]
                t["ratio"] = t["import_s"] / t["embed_s"]
                runs.append({k: round(v, 3) if isinstance(v, float) else v for k, v in t.items()})
                print(name, runs[-1], file=sys.stderr)
            out[name] = {
                "lines": len(rows),
                "tokens": tokens([r["content"] for r in rows]),
                "runs": runs,
                "ratio_median": round(statistics.median(r["ratio"] for r in runs), 3),
                "import_lines_per_s": round(len(rows) / statistics.median(r["import_s"] for r in runs), 1),
                "embed_lines_per_s": round(len(rows) / statistics.median(r["embed_s"] for r in runs), 1),
                "reimport_lines_per_s": round(len(rows) / statistics.median(r["reimport_s"] for r in runs), 1),
            }
    finally:
        cairn(env, "daemon", "stop")
    return out


def part_b(sizes: list[int], work: Path) -> dict:
    """Per-line cost of importing N new templated lines (and re-importing them), in process, hashing encoder."""
    code = """
import json, sys, time
from pathlib import Path
from cairn_cli.config import Settings
from cairn_cli.core.store import open_stores, importing
s = Settings(); open_stores(s, create=True)
path = Path(sys.argv[1])
t = time.perf_counter(); r = importing.import_jsonl(path, s); first = time.perf_counter() - t
t = time.perf_counter(); again = importing.import_jsonl(path, s); second = time.perf_counter() - t
print(json.dumps({"import_s": first, "reimport_s": second, "added": r.added, "merged": again.merged}))
"""
    out = {}
    for n in sizes:
        home = work / f"curve-{n}"
        path = write_jsonl(templated(n), work / f"curve-{n}.jsonl")
        env = {**os.environ, "CAIRN_HOME": str(home), "CAIRN_EMBED_MODEL": "hashing", "CAIRN_DAEMON": "off"}
        done = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        got = json.loads(done.stdout)
        out[str(n)] = {
            "import_ms_per_line": round(1000 * got["import_s"] / n, 3),
            "reimport_ms_per_line": round(1000 * got["reimport_s"] / n, 3),
            "added": got["added"],
            "merged_again": got["merged"],
        }
        print(n, out[str(n)], file=sys.stderr)
    return out


def report(results: dict) -> str:
    m = results["machine"]
    lines = [
        "# `cairn memory import`: against the embedder, and per line as it grows (#30)",
        "",
        f"Machine: {m['model']}, {os.cpu_count()} cores, CPU flags `{' '.join(m['flags']) or 'none of avx512/bf16/amx'}`."
        " Produced by `scripts/bench_import.py`.",
        "",
        "## Through the daemon, the bundled model (all-MiniLM-L6-v2)",
        "",
        "| text | lines | tokens mean / p95 | embedder alone lines/s | import lines/s | import / embedder (median; per rep)"
        " | re-import lines/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results["through_daemon"].items():
        per = ", ".join(f"{x['ratio']:.2f}" for x in r["runs"])
        lines.append(
            f"| {name} | {r['lines']} | {r['tokens']['mean']} / {r['tokens']['p95']} | {r['embed_lines_per_s']} "
            f"| {r['import_lines_per_s']} | {r['ratio_median']:.2f} ({per}) | {r['reimport_lines_per_s']} |"
        )
    lines += [
        "",
        "Import is a new `cairn memory import` process (start-up included) into a fresh store; the embedder alone is",
        "the daemon's `embed` op on the same texts in the import's batches; re-import is the same file again (every",
        "line an exact repeat, no embedding).",
        "",
        "## Cost per line as the import grows (hashing encoder, in process: cairn's own work, no model time)",
        "",
        "| lines | import ms/line | re-import ms/line |",
        "|---|---|---|",
    ]
    for n, r in results["curve"].items():
        lines.append(f"| {n} | {r['import_ms_per_line']} | {r['reimport_ms_per_line']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--batch", type=int, default=512, help="the import's batch size")
    parser.add_argument("--curve", default="1000,10000,100000")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "import")
    parser.add_argument("--skip-daemon", action="store_true", help="part B only")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_hot_path import machine

    results: dict = {"machine": machine(), "through_daemon": {}, "curve": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if not args.skip_daemon:
            results["through_daemon"] = part_a(args.lines, args.reps, args.batch, work)
        results["curve"] = part_b([int(x) for x in args.curve.split(",")], work)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(report(results))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
