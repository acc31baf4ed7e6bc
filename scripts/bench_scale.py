"""#30 point 2: ranking at 10k / 100k / 1M memories — the hook path, the daemon's resident memory, its start and
restart, the daemon-down fallback, and how often the big store's candidates miss the whole table's top k.

    .venv/bin/python scripts/bench_ann.py vectors --out /tmp/ann      # the bundled model's vectors of real text, once
    .venv/bin/python scripts/bench_scale.py --sizes 10000,100000 [--runs 30] [--quality 200]

The stores: the 9,355 real texts of bench_ann (LoCoMo turns, TREC DL 2019 passages, Cranfield abstracts) with the
bundled model's vectors, grown to each size with mixtures of two of them (synthetic, said so in the report): the
mixture's vector is w a + (1 - w) b normalised, its text the first part of a's words and the rest of b's, so that
words and vectors agree roughly. 80% in one project scope, 20% global; twenty memories a session (neighbours).
The prompts are LoCoMo's and TREC's real questions, embedded live by the daemon.

Per size, side by side: bare `python -c pass`; the prompt hook as `cairn hook install` writes it (`<python> -S
…/cairn_cli/launcher.py hook prompt`, a UserPromptSubmit payload on stdin) and `cairn rank` (the console script), each
a new process against the warm daemon, composite only (the reranker off), and the in-daemon stage times
(`timings_ms`); the daemon's RSS composite only and with
a student loaded (CAIRN_RERANKER_ENABLED on, the bundled MiniLM with a fresh head); the daemon's first start
(builds the vector index above CAIRN_VECTOR_INDEX_ABOVE) and its restart (opens the saved one); the fallback with
the daemon down; and, in process, the whole-store table against the big store's candidates (the same model, the
same questions): the share of identical top 10s and the mean overlap. Results: bench/scale.{md,json}.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import bench_ann  # noqa: E402
import bench_hot_path as hot  # noqa: E402

SCOPE = "proj"
SESSION_LEN = 20


def questions() -> list[str]:
    _, queries = bench_ann.real_texts()
    return [q for q in queries if len(q.split()) >= 3]


def grown_store(texts: list[str], vecs: np.ndarray, n: int, seed: int = 7):
    """(text, vector) per memory: the real ones, then mixtures of two (synthetic)."""
    rng = np.random.default_rng(seed)
    words = [t.split() for t in texts]
    for i in range(min(n, len(texts))):
        yield texts[i], vecs[i]
    for _ in range(max(0, n - len(texts))):
        a, b = int(rng.integers(len(texts))), int(rng.integers(len(texts)))
        w = float(rng.uniform(0.5, 1.0))
        mix = w * vecs[a] + (1 - w) * vecs[b] + rng.normal(0, 0.01, vecs.shape[1]).astype(np.float32)
        cut_a, cut_b = max(1, int(len(words[a]) * w)), int(len(words[b]) * w)
        text = " ".join(words[a][:cut_a] + words[b][cut_b:])
        yield text, (mix / np.linalg.norm(mix)).astype(np.float32)


def make_store(home: Path, n: int, vectors: Path) -> dict:
    """The store at `home` (SQLite, the bundled model's name on every vector) and its full-text index."""
    os.environ["CAIRN_HOME"] = str(home)
    from cairn_cli import config
    from cairn_cli.core.store import search_index
    from cairn_cli.core.text import normalise, sha256
    from cairn_cli.db import close_all, open_db
    from cairn_cli.db.tables import Memory, memory_proxy
    from cairn_cli.ml.models import BUNDLED_EMBEDDER

    texts, _ = bench_ann.real_texts()
    vecs = np.load(vectors / "memories.npy")
    close_all()
    open_db(config.memory_db_url(), config.ephemeral_db_url())
    rnd = random.Random(7)
    now = dt.datetime(2026, 11, 1)
    t0 = time.perf_counter()
    rows = []
    for i, (text, vec) in enumerate(grown_store(texts[: len(vecs)], vecs, n)):
        text = f"{text} [{i}]"  # every memory its own (the store dedups exact repeats)
        rows.append(
            {
                "content": text,
                "content_hash": sha256(text),
                "norm_hash": sha256(normalise(text)),
                "keywords": [],
                "scope": SCOPE if rnd.random() < 0.8 else "global",
                "kind": "fact",
                "confidence": 0.75,
                "created_at": now + dt.timedelta(seconds=i),  # written one after another, as a store grows
                "updated_at": now + dt.timedelta(seconds=i),
                "session_id": f"s{i // SESSION_LEN}",
                "embedding": vec.tobytes(),
                "embedding_model": BUNDLED_EMBEDDER,
            }
        )
        if len(rows) == 5000:
            with memory_proxy.atomic():
                Memory.insert_many(rows).execute()
            rows = []
    if rows:
        with memory_proxy.atomic():
            Memory.insert_many(rows).execute()
    inserted = time.perf_counter() - t0
    t0 = time.perf_counter()
    while search_index.sync(batch=5000):
        pass
    indexed = time.perf_counter() - t0
    close_all()
    return {"insert_s": round(inserted, 1), "fulltext_s": round(indexed, 1)}


def rank_cmd(prompt: str, *, json_out: bool = False) -> list[str]:
    return [hot.CAIRN, "rank", prompt, "--scope", SCOPE, "--session", "bench", "-k", "5"] + (
        ["--json"] if json_out else []
    )


def hook_cmd() -> list[str]:
    """The prompt hook exactly as `cairn hook install` writes it (core/hooks/agent_settings.default_command)."""
    from cairn_cli.core.hooks.agent_settings import default_command

    return [*shlex.split(default_command()), "hook", "prompt"]


def hook_input(prompt: str) -> str:
    """A UserPromptSubmit payload from a session in a folder named like the store's project scope."""
    return json.dumps(
        {"session_id": "bench-hook", "cwd": f"/work/{SCOPE}", "hook_event_name": "UserPromptSubmit", "prompt": prompt}
    )


def timed_ranks(
    env: dict, prompts: list[str], runs: int, beside: list[float], hooks: list[float] | None = None
) -> tuple[list[float], dict]:
    """Whole-process ms of `cairn rank` and the daemon's own stage times (timings_ms) per stage; with `hooks`,
    the installed prompt hook on the same prompt in each round too (which of the two goes first alternates)."""
    whole, stages = [], {}
    for i in range(runs):
        hot.bare_run(beside)
        prompt = prompts[i % len(prompts)]
        if hooks is not None and i % 2:
            hooks.append(_timed_hook(env, prompt))
        t0 = time.perf_counter()
        proc = subprocess.run(rank_cmd(prompt, json_out=True), env=env, capture_output=True, text=True)
        whole.append((time.perf_counter() - t0) * 1000)
        if proc.returncode != 0:
            raise SystemExit(f"cairn rank failed: {proc.stderr}")
        if hooks is not None and not i % 2:
            hooks.append(_timed_hook(env, prompt))
        res = json.loads(proc.stdout)
        for stage, ms in (res.get("timings_ms") or {}).items():
            stages.setdefault(stage, []).append(ms)
    return whole, stages


def _timed_hook(env: dict, prompt: str) -> float:
    cmd, payload = hook_cmd(), hook_input(prompt)  # made before the clock starts, as the agent has them
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, input=payload)
    took = (time.perf_counter() - t0) * 1000
    if proc.returncode != 0 or "<cairn-memories" not in proc.stdout:
        raise SystemExit(f"the prompt hook gave no memories: {proc.stdout[-300:]} {proc.stderr[-300:]}")
    return took


def against_bare(ms: list[float], bare: list[float]) -> dict:
    """hot.stats, and the p95 against bare python's p50 and p95 (the runs interleaved: the same load)."""
    from cairn_cli.core import metrics

    out = hot.stats(ms, bare)
    p95, bare_p95 = metrics.percentile(ms, 95), metrics.percentile(bare, 95)
    out["bare_p95_ms"] = round(bare_p95, 1)
    out["p95_x_bare_p50"] = round(p95 / statistics.median(bare), 2)
    out["p95_x_bare_p95"] = round(p95 / bare_p95, 2)
    return out


def pct(values: list[float]) -> dict:
    from cairn_cli.core import metrics

    return {"p50_ms": round(statistics.median(values), 2), "p95_ms": round(metrics.percentile(values, 95), 2)}


def started(home: Path, env: dict) -> tuple[float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [hot.CAIRN, "daemon", "start", "--json", "--wait", "3600"], env=env, capture_output=True, text=True
    )
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"daemon start failed: {proc.stdout} {proc.stderr}")
    return took, hot.daemon(home, env, "status")


def quality(home: Path, prompts: list[str], n_queries: int) -> dict:
    """In process: the whole-store table and the big store's candidates, the same model and questions."""
    os.environ["CAIRN_HOME"] = str(home)
    os.environ["CAIRN_COMPOSITE_FLOOR"] = "off"
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking.context import window_of
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.core.ranking.rank import RankQuery, rank
    from cairn_cli.core.store import embedders, open_stores
    from cairn_cli.db import close_all

    close_all()
    settings = Settings()
    open_stores(settings)
    encoder = embedders.live_encoder(settings)
    whole, big = RankEngine(encoder), RankEngine(encoder)
    big.vector_index_above = 0
    same, overlap, ms_whole, ms_big = 0, [], [], []
    for q in prompts[:n_queries]:
        t0 = time.perf_counter()
        a = [m.id for m in rank(RankQuery(window_of(q), 10, SCOPE), settings, whole).items]
        t1 = time.perf_counter()
        b = [m.id for m in rank(RankQuery(window_of(q), 10, SCOPE), settings, big).items]
        t2 = time.perf_counter()
        ms_whole.append((t1 - t0) * 1000)
        ms_big.append((t2 - t1) * 1000)
        same += a == b
        overlap.append(len(set(a) & set(b)) / max(1, len(a)))
    close_all()
    return {
        "queries": min(n_queries, len(prompts)),
        "identical_top10": round(same / min(n_queries, len(prompts)), 4),
        "mean_overlap_at_10": round(statistics.fmean(overlap), 4),
        "in_process_whole_table_ms": pct(ms_whole[1:]),
        "in_process_candidates_ms": pct(ms_big[1:]),
    }


PATHS = {  # name -> what the keyword side of a big store's ranking is
    "sqlite": "MaxScore over SQLite's postings (no postings held)",
    "held": "the postings held in memory, deeper reads of the nearest begun within DEEPER_BEFORE_MS",
    "held_uncut": "the postings held, every deeper read the bound asks for (no time guard)",
}


def paths(home: Path, prompts: list[str], n_queries: int) -> dict:
    """In process, one after another on the same store and questions: `CandidateTable.score`'s time and top 5 on each
    keyword path (PATHS), and how often each gives the uncut path's top 5."""
    os.environ["CAIRN_HOME"] = str(home)
    from cairn_cli.config import Settings
    from cairn_cli.core.ranking import candidates
    from cairn_cli.core.ranking.context import window_of
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.core.ranking.rank import RankQuery, rank
    from cairn_cli.core.store import embedders, open_stores
    from cairn_cli.db import close_all

    close_all()
    settings = Settings()
    open_stores(settings)
    encoder = embedders.live_encoder(settings)
    real_score, real_keywords, guard = (
        candidates.CandidateTable.score,
        RankEngine._catch_up_keywords,
        candidates.DEEPER_BEFORE_MS,
    )
    timed: list[float] = []

    def score(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return real_score(self, *args, **kwargs)
        finally:
            timed.append((time.perf_counter() - t0) * 1000)

    out: dict = {}
    tops: dict[str, list] = {}
    try:
        candidates.CandidateTable.score = score
        for name in PATHS:
            RankEngine._catch_up_keywords = real_keywords
            if name == "sqlite":
                RankEngine._catch_up_keywords = lambda self, held, version, directory: None
            candidates.DEEPER_BEFORE_MS = float("inf") if name == "held_uncut" else guard
            engine = RankEngine(encoder)
            engine.vector_index_above = 0
            rank(RankQuery(window_of("a first question"), 5, SCOPE), settings, engine)  # opens the indexes
            timed.clear()
            tops[name] = [
                [m.id for m in rank(RankQuery(window_of(q), 5, SCOPE), settings, engine).items]
                for q in prompts[:n_queries]
            ]
            out[name] = {"what": PATHS[name], "score_ms": pct(list(timed))}
    finally:
        candidates.CandidateTable.score, RankEngine._catch_up_keywords = real_score, real_keywords
        candidates.DEEPER_BEFORE_MS = guard
        close_all()
    for name in PATHS:
        same = sum(a == b for a, b in zip(tops[name], tops["held_uncut"]))
        out[name]["same_top5_as_uncut"] = f"{same}/{len(tops[name])}"
    return out


def index_recall(home: Path, vectors: Path, n_queries: int = 500) -> dict:
    """The daemon's saved vector index of `home` against the exact scan over the same vectors: recall@50 of a search
    for 50, and of the 50 nearest by exact cosine among the VECTOR_DEPTH the ranking fetches (what it scores)."""
    from cairn_cli.core.ranking.candidates import VECTOR_DEPTH
    from cairn_cli.core.store.vector_index import VectorIndex
    from cairn_cli.ml.models import BUNDLED_EMBEDDER

    (record,) = list(home.glob("indexes/*/*/index.json"))
    index = VectorIndex.open(BUNDLED_EMBEDDER, 384, record.parent)
    scopes = [SCOPE, "global"]
    keys = np.concatenate([np.asarray(index._graphs[s].keys, dtype=np.int64) for s in scopes])
    held = index.vectors(keys.tolist())
    matrix = np.stack([held[int(k)] for k in keys])
    queries = np.load(vectors / "queries.npy")[:n_queries]
    plain, fetched, ms = [], [], []
    for q in queries:
        cos = matrix @ q
        kth = -np.partition(-cos, 49)[49]  # a found memory counts when it is at least as near as the exact 50th
        t0 = time.perf_counter()
        wide = index.nearest(q, VECTOR_DEPTH, scopes)
        ms.append((time.perf_counter() - t0) * 1000)
        top50 = index.nearest(q, 50, scopes)
        plain.append(float(np.sum(top50.cosines >= kth - 1e-6)) / 50)
        got = np.asarray([held[int(i)] @ q for i in wide.ids])
        fetched.append(float(np.sum(np.sort(got)[::-1][:50] >= kth - 1e-6)) / 50)
    return {
        "vectors": len(keys),
        "queries": len(queries),
        "recall@50_search_50": round(statistics.fmean(plain), 4),
        f"recall@50_of_{VECTOR_DEPTH}_fetched": round(statistics.fmean(fetched), 4),
        "search_ms": pct(ms),
        "index_mb_on_disk": round(sum(f.stat().st_size for f in record.parent.iterdir()) / 2**20, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--quality", type=int, default=200, help="questions for the table-vs-candidates check (0: none)")
    ap.add_argument("--quality-up-to", type=int, default=100_000, help="the largest size checked in process")
    ap.add_argument("--vectors", type=Path, default=Path("/tmp/ann"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "scale"))
    ap.add_argument("--keep", type=Path, default=None, help="build the stores here and keep them")
    ap.add_argument("--recall", action="store_true", help="only: the saved indexes' recall, added to --out's JSON")
    ap.add_argument("--paths", type=int, default=0, help="only: in process, the keyword paths on N questions (--keep)")
    args = ap.parse_args()
    if args.paths:
        prompts = questions()
        random.Random(30).shuffle(prompts)
        got = {"machine": hot.machine(), "command": " ".join(sys.argv), "load_start": os.getloadavg(), "sizes": {}}
        for n in [int(s) for s in args.sizes.split(",")]:
            got["sizes"][str(n)] = paths(args.keep / f"s{n}", prompts, args.paths)
            print(n, json.dumps(got["sizes"][str(n)]), file=sys.stderr)
        got["load_end"] = os.getloadavg()
        out = Path(args.out)
        out.with_suffix(".json").write_text(json.dumps(got, indent=2) + "\n")
        out.with_suffix(".md").write_text(paths_report(got))
        print(paths_report(got))
        return 0
    if args.recall:
        out = Path(args.out)
        results = json.loads(out.with_suffix(".json").read_text())
        for n, row in results["sizes"].items():
            if list((args.keep / f"s{n}").glob("indexes/*/*/index.json")):
                row["index_recall"] = index_recall(args.keep / f"s{n}", args.vectors)
                print(n, row["index_recall"], file=sys.stderr)
        out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
        out.with_suffix(".md").write_text(report(results))
        return 0
    if not (args.vectors / "memories.npy").exists():
        raise SystemExit(f"no vectors in {args.vectors}: run scripts/bench_ann.py vectors --out {args.vectors}")
    hot.precompile()
    prompts = questions()
    random.Random(30).shuffle(prompts)
    results: dict = {"machine": hot.machine(), "sizes": {}, "runs": args.runs, "command": " ".join(sys.argv)}
    results["load_start"] = [round(x, 2) for x in os.getloadavg()]
    base = args.keep or Path(tempfile.mkdtemp(prefix="cairn-scale-"))
    for n in [int(s) for s in args.sizes.split(",")]:
        home = base / f"s{n}"
        row: dict = {}
        if not (home / "memory.db").exists():
            home.mkdir(parents=True, exist_ok=True)
            row["store"] = make_store(home, n, args.vectors)
            hot.make_student(home)
        print(f"[{n}] store {row.get('store')}", file=sys.stderr)
        env = hot.env_for(home, CAIRN_RERANKER_ENABLED="false")
        took, status = started(home, env)
        row["first_start_s"] = round(took, 1)
        row["search"] = status.get("search")
        hot.timed(rank_cmd("{prompt}"), env, 3)
        beside: list[float] = []
        hooks: list[float] = []
        whole, stages = timed_ranks(env, prompts, args.runs, beside, hooks)
        row["daemon_composite"] = {**against_bare(whole, beside), "stages": {k: pct(v) for k, v in stages.items()}}
        row["hook_composite"] = against_bare(hooks, beside)
        row["rss_composite_mb"] = hot.daemon(home, env, "status").get("rss_mb")
        hot.daemon(home, env, "stop")
        took, status = started(home, env)
        row["restart_s"] = round(took, 1)
        hot.daemon(home, env, "stop")
        env_s = hot.env_for(home, CAIRN_RERANK_BUDGET_MS="150")
        started(home, env_s)
        for prompt in prompts[:5]:
            subprocess.run(rank_cmd(prompt), env=env_s, capture_output=True)
        status = hot.daemon(home, env_s, "status")
        row["rss_with_student_mb"] = status.get("rss_mb")
        row["reranker"] = status.get("reranker")
        hot.daemon(home, env_s, "stop")
        beside = []
        whole, _ = timed_ranks(env, prompts, args.runs, beside)
        row["fallback"] = against_bare(whole, beside)
        if args.quality and n <= args.quality_up_to:
            row["quality"] = quality(home, prompts, args.quality)
        results["sizes"][str(n)] = row
        print(f"[{n}] {json.dumps(row)}", file=sys.stderr)
        results["load_end"] = [round(x, 2) for x in os.getloadavg()]
        out = Path(args.out)  # written after every size: a long run keeps what it measured
        out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
        out.with_suffix(".md").write_text(report(results))
    print(report(results))
    return 0


def paths_report(got: dict) -> str:
    lines = [
        "# Big stores: the keyword side held in memory or read from SQLite, in process (#30)",
        "",
        f"- machine: {json.dumps(got['machine'])}",
        f"- command: `{got['command']}`; load average at the start {[round(x, 2) for x in got['load_start']]}, at"
        f" the end {[round(x, 2) for x in got['load_end']]}",
        "- `CandidateTable.score` alone (the query embedded before), the same real questions on each path one after"
        " another, k=5; stores as bench/scale.md",
        "",
        "| memories | keyword path | score p50 / p95 ms | the uncut path's top 5 |",
        "|---:|---|---|---:|",
    ]
    for n, row in got["sizes"].items():
        for r in row.values():
            lines.append(
                f"| {int(n):,} | {r['what']} | {r['score_ms']['p50_ms']} / {r['score_ms']['p95_ms']} | "
                f"{r['same_top5_as_uncut']} |"
            )
    return "\n".join(lines) + "\n"


def report(results: dict) -> str:
    m = results["machine"]
    lines = [
        "# Big stores: the hot path, the daemon's memory and start, at 10k / 100k / 1M (#30)",
        "",
        f"- machine: {json.dumps(m)}",
        f"- command: `{results['command']}`; load average at the start {results['load_start']}, at the end "
        f"{results['load_end']}",
        "- stores: 9,355 real texts (LoCoMo, TREC DL 2019, Cranfield) with the bundled model's vectors, grown with"
        " mixtures of two (synthetic); 80% in one project scope; prompts: real LoCoMo / TREC questions, k=5",
        "",
        "| memories | path | p50 ms | p95 ms | bare python p50 / p95 ms | p50 × bare p50 | p95 × bare p50 |"
        " p95 × bare p95 |",
        "|---:|---|---:|---:|---|---:|---:|---:|",
    ]
    for n, row in results["sizes"].items():
        for key, label in (
            ("hook_composite", "the prompt hook as installed, daemon composite only"),
            ("daemon_composite", "`cairn rank`, daemon composite only"),
            ("fallback", "`cairn rank`, daemon down: fallback"),
        ):
            if key not in row:
                continue
            r = row[key]
            lines.append(
                f"| {int(n):,} | {label} | {r['p50_ms']} | {r['p95_ms']} | {r.get('bare_p50_ms')} / "
                f"{r.get('bare_p95_ms', '-')} | {r['x_bare']} | {r.get('p95_x_bare_p50', '-')} | "
                f"{r.get('p95_x_bare_p95', '-')} |"
            )
    lines += [
        "",
        "| memories | candidates from | stages in the daemon p50 / p95 ms: table; embed; score | RSS MB composite |"
        " RSS MB with student | first start s | restart s |",
        "|---:|---|---|---:|---:|---:|---:|",
    ]
    for n, row in results["sizes"].items():
        st = row["daemon_composite"]["stages"]
        stage = "; ".join(
            f"{st.get(k, {}).get('p50_ms', '-')} / {st.get(k, {}).get('p95_ms', '-')}"
            for k in ("table", "embed", "score")
        )
        lines.append(
            f"| {int(n):,} | {(row.get('search') or {}).get('path')} | {stage} | {row['rss_composite_mb']} | "
            f"{row['rss_with_student_mb']} | {row['first_start_s']} | {row['restart_s']} |"
        )
    lines += [
        "",
        "| memories | questions | identical top 10 | mean overlap@10 | whole table p50/p95 ms | candidates p50/p95 ms |",
        "|---:|---:|---:|---:|---|---|",
    ]
    for n, row in results["sizes"].items():
        q = row.get("quality")
        if q:
            w, c = q["in_process_whole_table_ms"], q["in_process_candidates_ms"]
            lines.append(
                f"| {int(n):,} | {q['queries']} | {q['identical_top10']} | {q['mean_overlap_at_10']} | "
                f"{w['p50_ms']} / {w['p95_ms']} | {c['p50_ms']} / {c['p95_ms']} |"
            )
    recalls = {n: row["index_recall"] for n, row in results["sizes"].items() if row.get("index_recall")}
    if recalls:
        lines += [
            "",
            "| memories | vectors in scope + global | recall@50, a search for 50 | recall@50 of the 200 fetched |"
            " search for 200 p50 / p95 ms | index on disk MB |",
            "|---:|---:|---:|---:|---|---:|",
        ]
        for n, r in recalls.items():
            fetched = next(v for k, v in r.items() if k.startswith("recall@50_of_"))
            lines.append(
                f"| {int(n):,} | {r['vectors']:,} | {r['recall@50_search_50']} | {fetched} | "
                f"{r['search_ms']['p50_ms']} / {r['search_ms']['p95_ms']} | {r['index_mb_on_disk']} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
