"""The daemon-down fallback: wall time of `cairn rank` as a new process, ranked from the store's full-text index.

Side by side in one run, at 1k / 10k / 100k memories: every run times bare python and both paths at every size, in
an order rotating from run to run, so that a change in the machine's load falls on all of them alike:

- bare `python -c pass`;
- the indexed fallback (this tree: core/ranking/fallback.py, every live memory);
- the baseline: the fallback as it was before the index (`--baseline-ref`, by default f477d66, cairn's last commit
  without it), a BM25 scan in Python (numpy) over the 5,000 most recently updated memories, run from a
  `git archive` of that commit on the same store.

Then, in this process and on the same stores: the index query alone (IndexedTable.score) against SQLite FTS5's
`bm25()` (one `MATCH ... ORDER BY rank LIMIT 10` over the same terms: the index the issue proposed), both against
the rank engine's own BM25 table (scoring.py): top 10 identical or tied, per query.

The stores: LoCoMo dev's dialog turns and observations (real text, when ../shared/data is present), then memories
sampled word by word from the same text's word frequencies up to the size (no meaning, a real vocabulary and
real document frequencies); one scope per conversation and `global`, a session per 20 memories. The prompts are
LoCoMo's questions, the context window the prompt plus a real Claude Code transcript's last turns (as
bench_hot_path.py). Without ../shared/data a synthetic Zipf vocabulary and prompts stand in (said in the report).

    .venv/bin/python scripts/bench_fallback.py [--sizes 1000,10000,100000] [--runs 21]
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import itertools
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
LOCOMO = DATA / "locomo" / "locomo_dev.json"
TRANSCRIPT = DATA / "claude_code" / "spotter" / "tool_heavy.jsonl"
SCOPE = "conv-26"  # the scope the prompts ask for (LoCoMo's first dev conversation; "bench" without the data)
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16")
# what the daemon-down `cairn rank` imports before it does anything: the floor under the fallback's time
HOT_PATH = (
    "cairn_cli.entry, cairn_cli.daemon.dispatch, cairn_cli.core.hooks.prompt, cairn_cli.core.ranking.fallback, "
    "cairn_cli.db.lean"
)
PATHS = {  # the timed paths: (label, the note its --json result must carry)
    "indexed": ("fallback from the full-text index (every memory), lean: no peewee", "fallback"),
    "peewee": ("the same index read through peewee (before the lean connection)", "fallback"),
    "baseline": ("baseline: Python BM25 scan of the 5,000 newest", "most recently updated memories only"),
}


def cpu_flags() -> dict[str, bool]:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return {}
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    return {f: f in flags for f in CPU_FLAGS}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --- the stores and prompts -------------------------------------------------------------------------------------


def corpus(seed: int = 7) -> tuple[list[dict], list[str], list[float], list[str], str]:
    """(real memories, a word list, its weights, the prompts, what the text is)."""
    if LOCOMO.exists():
        data = json.loads(LOCOMO.read_text())
        real: list[dict] = []
        for conv in data:
            c, scope = conv["conversation"], conv["sample_id"]
            sessions = sorted((k for k in c if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
            real += [
                {"content": f"{t['speaker']}: {t['text']}", "scope": scope}
                for key in sessions
                for t in c[key]
                if t["text"].strip()
            ]
            for facts in conv["observation"].values():
                real += [{"content": f[0], "scope": "global"} for speaker in facts.values() for f in speaker]
        random.Random(seed).shuffle(real)
        counts: dict[str, int] = {}
        for m in real:
            for w in re.findall(r"[A-Za-z][A-Za-z'’-]*|\d+", m["content"]):
                counts[w] = counts.get(w, 0) + 1
        prompts = [qa["question"] for conv in data for qa in conv["qa"]]
        random.Random(seed).shuffle(prompts)
        words = sorted(counts, key=lambda w: -counts[w])
        return real, words, [counts[w] for w in words], prompts, "LoCoMo dev turns + observations, then sampled"
    rng = random.Random(seed)
    syll = ["ka", "lo", "mi", "ner", "tu", "sa", "vi", "dor", "pe", "ra", "qui", "zen", "ul", "bo", "fa", "ge"]
    words = sorted({"".join(rng.choices(syll, k=rng.randint(2, 4))) for _ in range(20000)})
    rng.shuffle(words)
    weights = [1.0 / (i + 1) for i in range(len(words))]
    prompts = [" ".join(rng.choices(words, weights, k=rng.randint(5, 14))) for _ in range(200)]
    return [], words, weights, prompts, "synthetic Zipf vocabulary (../shared/data absent)"


def memories_for(n: int, real: list[dict], words: list[str], weights: list[float], seed: int = 11) -> list[dict]:
    rng = random.Random(seed)
    out = [dict(m) for m in real[:n]]
    scopes = sorted({m["scope"] for m in real} - {"global"}) or ["bench"]
    cum = []
    total = 0.0
    for w in weights:
        total += w
        cum.append(total)
    while len(out) < n:
        text = " ".join(rng.choices(words, cum_weights=cum, k=rng.randint(6, 40)))
        out.append({"content": f"{text} (note {len(out)})", "scope": rng.choice([*scopes, "global"])})
    for i, m in enumerate(out):
        m["session_id"] = f"s{i // 20}"
        m["keywords"] = rng.sample(words[:2000], rng.randint(0, 3)) if len(words) > 2000 else []
    return out


def make_store(home: Path, entries: list[dict]) -> float:
    """The store under `home`, written straight to its table (as an import of that size would) and indexed by the
    full-text index's sync (what a migrated store's first open does); returns the seconds the indexing took."""
    os.environ["CAIRN_HOME"] = str(home)
    from cairn_cli import config
    from cairn_cli.core.store import search_index
    from cairn_cli.core.text import normalise, sha256
    from cairn_cli.db import close_all, open_db
    from cairn_cli.db.tables import Memory, memory_proxy

    close_all()
    open_db(config.memory_db_url(), config.ephemeral_db_url())
    now = dt.datetime(2026, 11, 1)
    rows = [
        {
            "content": e["content"],
            "content_hash": sha256(e["content"]),
            "norm_hash": sha256(normalise(e["content"])),
            "keywords": e["keywords"],
            "scope": e["scope"],
            "kind": "fact",
            "confidence": 0.75,
            "session_id": e["session_id"],
            "created_at": now,
            "updated_at": now + dt.timedelta(seconds=i),
        }
        for i, e in enumerate(entries)
    ]
    with memory_proxy.atomic():
        for start in range(0, len(rows), 2000):
            Memory.insert_many(rows[start : start + 2000]).execute()
    t0 = time.perf_counter()
    search_index.sync()
    took = time.perf_counter() - t0
    close_all()
    return took


def baseline_tree(ref: str, into: Path) -> Path:
    """The cairn_cli package of commit `ref`, extracted (git archive) under `into`."""
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "cairn_cli"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(blob.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def precompile(tree: Path) -> None:
    """Byte-compile a tree's cairn_cli (pip does it on install; a checkout run with PYTHONDONTWRITEBYTECODE would
    compile every module on every run)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "cairn_cli")], check=True)


# --- timing -----------------------------------------------------------------------------------------------------


def rank_cmd(prompt: str) -> list[str]:
    cmd = [sys.executable, "-m", "cairn_cli", "rank", prompt, "--scope", SCOPE, "--session", "bench", "-k", "5"]
    return cmd + (["--transcript", str(TRANSCRIPT)] if TRANSCRIPT.exists() else [])


def env_for(home: Path, pythonpath: Path) -> dict:
    """The environment of one path's runs: its tree first on the path, byte code cached as an installed cairn has
    it (compiled beforehand: `precompile`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update({"CAIRN_HOME": str(home), "CAIRN_DAEMON": "auto", "PYTHONPATH": str(pythonpath)})
    return env


def run(cmd: list[str], env: dict) -> tuple[float, dict | None]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())  # not this tree
    ms = (time.perf_counter() - t0) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed: {proc.stderr}")
    return ms, (json.loads(proc.stdout) if "--json" in cmd else None)


def check(cmd: list[str], env: dict, want_note: str) -> dict:
    _, res = run(cmd + ["--json"], env)
    assert res is not None
    if res["ranker"] != "cairn-fallback" or not any(want_note in n for n in res["notes"]):
        raise SystemExit(f"not the expected fallback: {res['ranker']} {res['notes']}")
    return res


def summary(ms: list[float], bare: float) -> dict:
    p50 = statistics.median(ms)
    q = statistics.quantiles(ms, n=20) if len(ms) > 1 else [p50] * 19
    return {"p50_ms": round(p50, 1), "p95_ms": round(q[18], 1), "x_bare": round(p50 / bare, 2), "n": len(ms)}


# --- the index query alone, and FTS5 bm25() ---------------------------------------------------------------------


def in_process(home: Path, prompts: list[str]) -> dict:
    """Per prompt, the top 10 (scope: all) by the rank engine's BM25 table, by the index (IndexedTable.score) and by
    FTS5's bm25() over the same terms; query-only times of the last two; how many top 10s are identical or tied."""
    import sqlite3

    import orjson

    from cairn_cli import config
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.core.text import terms
    from cairn_cli.db import close_all, open_db

    os.environ["CAIRN_HOME"] = str(home)
    close_all()
    open_db(config.memory_db_url(), config.ephemeral_db_url())
    settings = Settings()
    weights = {"keywords": 1.0}  # BM25 alone: the order both indexes are asked for
    table = RankEngine(None, None).table(settings).table
    indexed = RankEngine.lexical_fallback("bench").table(settings).table
    # FTS5 over the same lexical fields (keywords counted twice, as the rank engine does), cairn's terms mapped to
    # plain tokens so that FTS5's tokenizer sees exactly cairn's terms
    fts = sqlite3.connect(":memory:")
    fts.execute("CREATE VIRTUAL TABLE f USING fts5(t, tokenize = 'ascii')")
    src = sqlite3.connect(str(home / "memory.db"))
    token: dict[str, str] = {}
    rows = []
    for memory_id, terms_json in src.execute("SELECT memory_id, terms FROM fulltext_docs WHERE meta = 0"):
        field = []
        for term, (c, k) in orjson.loads(terms_json).items():
            field += [token.setdefault(term, f"t{len(token)}")] * (c + 2 * k)
        rows.append((memory_id, " ".join(field)))
    fts.executemany("INSERT INTO f (rowid, t) VALUES (?, ?)", rows)
    fts.commit()
    out: dict = {"queries": 0, "index_same": 0, "fts5_same": 0, "index_ms": [], "fts5_ms": []}
    for prompt in prompts:
        want = table.score(prompt, None, scope=None, weights=weights, half_life_days=30, top=10)
        if not want or want[0].score <= 0:
            continue
        t0 = time.perf_counter()
        got = indexed.score(prompt, None, scope=None, weights=weights, half_life_days=30, top=10)
        out["index_ms"].append((time.perf_counter() - t0) * 1000)
        qterms = [token[t] for t in sorted(set(terms(prompt))) if t in token]
        t0 = time.perf_counter()
        hits = fts.execute(
            "SELECT rowid FROM f WHERE f MATCH ? ORDER BY rank LIMIT 10", (" OR ".join(f'"{t}"' for t in qterms),)
        ).fetchall()
        out["fts5_ms"].append((time.perf_counter() - t0) * 1000)
        exact = {
            s.candidate.id: s.components["keywords_bm25"]
            for s in table.score(prompt, None, scope=None, weights=weights, half_life_days=30)
        }
        out["queries"] += 1
        out["index_same"] += same_or_tied([s.candidate.id for s in want], [s.candidate.id for s in got], exact)
        out["fts5_same"] += same_or_tied([s.candidate.id for s in want], [r[0] for r in hits], exact)
    close_all()
    return {
        "queries": out["queries"],
        "index_identical_or_tied": out["index_same"],
        "fts5_identical_or_tied": out["fts5_same"],
        "index_query_p50_ms": round(statistics.median(out["index_ms"]), 2),
        "fts5_query_p50_ms": round(statistics.median(out["fts5_ms"]), 2),
    }


def same_or_tied(want: list[int], got: list[int], exact: dict[int, float]) -> bool:
    """The same top 10, position by position, up to ties in the exact BM25 (to 6 places)."""
    if len(want) != len(got):
        return False
    return all(w == g or round(exact.get(w, -1), 5) == round(exact.get(g, -2), 5) for w, g in zip(want, got))


# --- the run ----------------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--baseline-ref", default="f477d66", help="the commit whose fallback is the baseline")
    ap.add_argument("--peewee-ref", default="d7f0dd4", help="the last commit whose fallback read through peewee")
    ap.add_argument("--queries", type=int, default=50, help="prompts compared in process (top 10)")
    ap.add_argument("--out", default=str(ROOT / "bench"))
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    real, words, weights, prompts, text = corpus()
    results: dict = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cores": os.cpu_count(),
        "baseline_ref": args.baseline_ref,
        "peewee_ref": args.peewee_ref,
        "text": text,
        "transcript": TRANSCRIPT.name if TRANSCRIPT.exists() else None,
        "sizes": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        trees = {
            "indexed": ROOT,
            "peewee": baseline_tree(args.peewee_ref, Path(tmp) / "peewee"),
            "baseline": baseline_tree(args.baseline_ref, Path(tmp) / "baseline"),
        }
        for tree in trees.values():
            precompile(tree)
        envs: dict[tuple[str, int], dict] = {}
        index_s: dict[int, float] = {}
        for n in sizes:
            home = Path(tmp) / f"s{n}"
            t0 = time.perf_counter()
            index_s[n] = make_store(home, memories_for(n, real, words, weights))
            print(f"[{n}] store in {time.perf_counter() - t0:.1f}s (indexing {index_s[n]:.1f}s)", file=sys.stderr)
            for path, tree in trees.items():
                envs[path, n] = env_for(home, tree)
                check(rank_cmd(prompts[0]), envs[path, n], PATHS[path][1])
            for _ in range(2):  # warm the page cache for every path
                for path in trees:
                    run(rank_cmd(prompts[1]), envs[path, n])
        # one loop over every (path, size), the order rotating run by run: a change in the machine's load falls
        # on all of them alike, so the sizes compare with each other as well as with bare python
        items: list[tuple[str, int]] = [("bare", 0), ("imports", 0)]
        items += [(path, n) for n in sizes for path in PATHS]
        times: dict[tuple[str, int], list[float]] = {item: [] for item in items}
        loads = [load()]
        for i in range(args.runs):
            prompt = prompts[i % len(prompts)]
            shift = i % len(items)
            for path, n in items[shift:] + items[:shift]:
                if path == "bare":
                    times[path, n].append(run([sys.executable, "-c", "pass"], dict(os.environ))[0])
                elif path == "imports":
                    times[path, n].append(
                        run([sys.executable, "-c", f"import {HOT_PATH}"], envs["indexed", sizes[0]])[0]
                    )
                else:
                    times[path, n].append(run(rank_cmd(prompt), envs[path, n])[0])
            loads.append(load())
        bare = statistics.median(times["bare", 0])
        results["bare_python"] = summary(times["bare", 0], bare)
        results["imports_only"] = summary(times["imports", 0], bare)
        results["loadavg_1min"] = {
            "min": min(x[0] for x in loads),
            "median": statistics.median(x[0] for x in loads),
            "max": max(x[0] for x in loads),
        }
        results["loadavg_before"], results["loadavg_after"] = loads[0], loads[-1]
        for n in sizes:
            home = Path(tmp) / f"s{n}"
            row = {
                **{path: summary(times[path, n], bare) for path in PATHS},
                "indexed_stages_ms": check(rank_cmd(prompts[2]), envs["indexed", n], "fallback")["timings_ms"],
                "index_build_s": round(index_s[n], 1),
            }
            row["query"] = in_process(home, prompts[: args.queries])
            results["sizes"][n] = row
            print(f"[{n}] {json.dumps(row)}", file=sys.stderr)
        results["loadavg_end"] = load()
    for a, b in itertools.pairwise(sizes):
        results[f"growth_{a}_to_{b}"] = {
            name: round(results["sizes"][b][name]["p50_ms"] / results["sizes"][a][name]["p50_ms"], 2) for name in PATHS
        }
    write(results, Path(args.out), args, sizes)
    return 0


def write(results: dict, out: Path, args, sizes: list[int]) -> None:
    out.mkdir(exist_ok=True)
    (out / "fallback.json").write_text(json.dumps(results, indent=2) + "\n")
    flags = ", ".join(f"{f} {'yes' if v else 'no'}" for f, v in results["cpu_flags"].items())
    lines = [
        "# The daemon-down fallback: `cairn rank` as a new process, from the full-text index",
        "",
        f"- date: {results['date']}; CPU: {results['cpu']}, {results['cores']} cores (shared); flags: {flags}",
        f"- command: `python scripts/bench_fallback.py --sizes {args.sizes} --runs {args.runs}`; every run times "
        "bare python and every path at every size, in an order rotating from run to run; p50 / p95 of each",
        f"- memories: {results['text']}; prompts: LoCoMo questions, scope `{SCOPE}`, k=5, deliveries logged; "
        f"context window: prompt + the last turns of {results['transcript'] or 'no transcript'}",
        f"- baseline: the fallback of {results['baseline_ref']} (before the index): BM25 in Python (numpy) over the "
        "5,000 most recently updated memories, the older ones invisible; and the fallback of "
        f"{results['peewee_ref']} (the same index, read and logged through peewee: before the lean connection)",
        f"- load average over the timed runs (1 min): min {results['loadavg_1min']['min']}, median "
        f"{results['loadavg_1min']['median']}, max {results['loadavg_1min']['max']} "
        f"(1/5/15 min before {results['loadavg_before']}, after {results['loadavg_after']}; this machine's 2 cores are "
        "shared with other work)",
        "",
        "| memories | path | p50 ms | p95 ms | × bare python |",
        "|---:|---|---:|---:|---:|",
    ]
    b = results["bare_python"]
    lines.append(f"| – | bare `python -c pass` | {b['p50_ms']} | {b['p95_ms']} | 1.0 |")
    m = results["imports_only"]
    lines.append(
        f"| – | imports only: `python -c 'import …'` of the fallback's modules | {m['p50_ms']} | {m['p95_ms']} | "
        f"{m['x_bare']} |"
    )
    for n in sizes:
        row = results["sizes"][n]
        for key, (label, _) in PATHS.items():
            r = row[key]
            lines.append(f"| {n:,} | {label} | {r['p50_ms']} | {r['p95_ms']} | {r['x_bare']} |")
    lines += ["", "| growth of the p50 | indexed, lean | indexed, peewee | baseline |", "|---|---:|---:|---:|"]
    for a, b in itertools.pairwise(sizes):
        g = results[f"growth_{a}_to_{b}"]
        lines.append(f"| {a:,} → {b:,} | {g['indexed']}× | {g['peewee']}× | {g['baseline']}× |")
    lines += [
        "",
        "Goal (issue 13 §2): ≤ 4× bare python at 10k, ≤ 1.5× growth from 10k to 100k.",
        "",
        "Where the indexed fallback's time goes inside the process (one run's `timings_ms`), and how long indexing "
        "the store took (`search_index.sync`, what the migration's first open does):",
        "",
        "| memories | stages ms | indexing s |",
        "|---:|---|---:|",
    ]
    for n in sizes:
        row = results["sizes"][n]
        lines.append(f"| {n:,} | {row['indexed_stages_ms']} | {row['index_build_s']} |")
    lines += [
        "",
        "The query alone, in process, top 10 of every memory by BM25 for the first "
        f"{args.queries} prompts, against the rank engine's own BM25 table (scoring.py): the index "
        "(IndexedTable.score) and SQLite FTS5's `bm25()` (`MATCH t1 OR t2 ... ORDER BY rank LIMIT 10` over the same "
        "terms and lexical fields). Identical or tied: the same memory at every position, or one of equal BM25.",
        "",
        "| memories | prompts | index: identical or tied | index p50 ms | FTS5 bm25(): identical or tied | "
        "FTS5 p50 ms |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        q = results["sizes"][n]["query"]
        lines.append(
            f"| {n:,} | {q['queries']} | {q['index_identical_or_tied']} | {q['index_query_p50_ms']} | "
            f"{q['fts5_identical_or_tied']} | {q['fts5_query_p50_ms']} |"
        )
    lines += ["", "Reading:", ""]
    ten = 10000 if 10000 in sizes else sizes[0]
    row, big = results["sizes"][ten], sizes[-1]
    lines.append(
        f"- At {ten:,} memories the fallback from the index is {row['indexed']['x_bare']}× bare python (goal ≤ 4×): "
        f"the same index read through peewee was {row['peewee']['x_bare']}×, the scan before the index "
        f"{row['baseline']['x_bare']}×. Importing the fallback's modules alone is {results['imports_only']['x_bare']}× "
        "bare python: the imports (dataclasses, sqlite3, socket, the hot path's cairn modules) are most of what is "
        "left; the ranking's own stages are below."
    )
    if big != ten and f"growth_{ten}_to_{big}" in results:
        lines.append(
            f"- From {ten:,} to {big:,} memories the fallback's p50 grows {results[f'growth_{ten}_to_{big}']['indexed']}× "
            "(goal ≤ 1.5×), while ranking every memory where the scan saw only the newest 5,000."
        )
    q = results["sizes"][big]["query"]
    lines.append(
        "- FTS5's `bm25()` is not cairn's BM25: its idf is log((N − n + 0.5) / (n + 0.5)) (floored at 1e-6), cairn's "
        f"log(1 + (N − n + 0.5) / (n + 0.5)); on the same terms it gave the same top 10 for {q['fts5_identical_or_tied']} "
        f"of {q['queries']} prompts at {big:,} memories, and it scores every memory holding any query term "
        f"({q['fts5_query_p50_ms']} ms p50 there, against {q['index_query_p50_ms']} ms for the index's MaxScore read, "
        "which leaves the long postings of common terms unread once they cannot change the top k)."
    )
    (out / "fallback.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
