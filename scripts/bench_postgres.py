"""Storage benchmark: the same 10,000-memory store on SQLite (files in CAIRN_HOME) and on PostgreSQL (a throw-away
server started here, tests/pgserver.py), measured side by side in one run, interleaved in rotating order.

Both backends run with their daemon warm, the composite floor off and the reranker off, so that the differences
are the storage's: `cairn hook prompt` as a new process (vs bare `python -c pass`), `cairn hook stop` grading what
the prompt showed and writing one new memory, concurrent hook prompts (N sessions at once), and the daemon-down
fallback's full-text query (`cairn rank`, ranker `cairn-fallback`: SQLite postings vs tsvector + GIN).

The stores are bench_hot_path.py's (generated text, random unit vectors stamped as the bundled model's): latency
depends on their number and size, not their meaning. Loopback only.

    PYTHONPATH=. .venv/bin/python scripts/bench_postgres.py [--memories 10000] [--runs 30]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cairn_cli.core import metrics
from scripts.bench_hot_path import (
    CAIRN,
    ROOT,
    TRANSCRIPT,
    WORDS,
    check_path,
    daemon,
    env_for,
    fresh,
    make_store,
    rank_cmd,
    stores_of,
)
from tests.pgserver import PgServer

BACKENDS = ("sqlite", "postgresql")
SHOWN = re.compile(r'<memory id="(\d+)"')
CPU_FLAGS_CMD = "grep -o -w 'avx2\\|avx512f\\|avx512_bf16\\|amx_tile' /proc/cpuinfo | sort -u"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def summary(ms: list[float]) -> dict:
    return {
        "p50_ms": round(statistics.median(ms), 1),
        "p95_ms": round(metrics.percentile(ms, 95), 1),
        "n": len(ms),
    }


def rotation(i: int, names: tuple[str, ...]) -> list[str]:
    """The names in the order of iteration i: each one goes first, second, ... in turn."""
    k = i % len(names)
    return list(names[k:] + names[:k])


def prompt_payload(session: str, prompt: str) -> str:
    payload = {"session_id": session, "cwd": "/src/bench", "hook_event_name": "UserPromptSubmit", "prompt": prompt}
    if TRANSCRIPT.exists():
        payload["transcript_path"] = str(TRANSCRIPT)
    return json.dumps(payload)


def run(args: list[str], env: dict, stdin: str | None = None) -> tuple[float, str]:
    """(wall ms, stdout) of one new process; a non-zero exit stops the bench."""
    t0 = time.perf_counter()
    proc = subprocess.run(args, env=env, capture_output=True, text=True, input=stdin)
    ms = (time.perf_counter() - t0) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return ms, proc.stdout


def hook_prompt(env: dict, session: str, i: int) -> tuple[float, str]:
    return run([CAIRN, "hook", "prompt"], env, prompt_payload(session, fresh(i)))


def stop_message(shown: list[int], i: int, rng: random.Random) -> str:
    """A response whose `[cm]` block grades every shown memory (the first 3, the rest 0) and writes one new
    memory (its own numbers, so that semantic dedup never merges two of them)."""
    words = " ".join(rng.choice(WORDS) for _ in range(12))
    memory = {
        "content": f"Bench note {i}-{rng.randrange(10**6)}: the {words} setting is {rng.randrange(10**4)}",
        "keywords": rng.sample(WORDS, 3),
        "scope": "bench",
        "kind": "fact",
    }
    grades = [f"{m}:{3 if j == 0 else 0}" for j, m in enumerate(shown)]
    return f"Answer {i}: done.\n[cm]{json.dumps({'m': [memory], 'rg': grades})}[/cm]"


def hook_stop(env: dict, session: str, message: str) -> float:
    payload = {"hook_event_name": "Stop", "session_id": session, "cwd": "/src/bench", "last_assistant_message": message}
    return run([CAIRN, "hook", "stop"], env, json.dumps(payload))[0]


def socket_probe(server: PgServer, database: str, env: dict) -> dict:
    """Does cairn's URL parsing reach the server's Unix socket? `postgresql://postgres@:PORT/DB?host=<socket dir>`
    (libpq's spelling): what cairn resolves it to, and whether a command can open the store with it."""
    from cairn_cli.db import _connect

    url = f"postgresql://postgres@:{server.port}/{database}?host={server.sock}"  # the socket file names the port
    params = _connect("memory", url, create=False).connect_params
    proc = subprocess.run(
        [CAIRN, "memory", "list", "--json"],
        env={**env, "CAIRN_DB_URL": url},
        capture_output=True,
        text=True,
    )
    return {
        "url": url,
        "resolved": {k: params.get(k) for k in ("host", "port", "user")},
        "exit_code": proc.returncode,
        "stderr": proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else "",
        "works": proc.returncode == 0,
    }


def build(home: Path, n: int, urls: dict | None) -> float:
    """The bench_hot_path store under `home` (on PostgreSQL when `urls` are given), its full-text index synced."""
    for key in ("CAIRN_DB_URL", "CAIRN_EPHEMERAL_DB_URL"):
        os.environ.pop(key, None)
    os.environ.update(urls or {})
    t0 = time.perf_counter()
    make_store(home, n)
    from cairn_cli import config
    from cairn_cli.core.store import search_index
    from cairn_cli.db import close_all, open_db

    open_db(config.memory_db_url(), config.ephemeral_db_url())
    search_index.sync()
    close_all()
    for key in ("CAIRN_DB_URL", "CAIRN_EPHEMERAL_DB_URL"):
        os.environ.pop(key, None)
    return round(time.perf_counter() - t0, 1)


def store_counts(env: dict) -> dict:
    """What the hooks wrote, read back: memories, deliveries, graded deliveries, hook errors logged."""
    from cairn_cli import config
    from cairn_cli.db import open_db
    from cairn_cli.db.tables import Memory, MemoryDelivery

    with stores_of(env):
        open_db(config.memory_db_url(), config.ephemeral_db_url())
        out = {
            "memories": Memory.select().count(),
            "deliveries": MemoryDelivery.select().count(),
            "graded": MemoryDelivery.select().where(MemoryDelivery.grade.is_null(False)).count(),
        }
    log = Path(env["CAIRN_HOME"]) / "logs" / "hook.log"
    text = log.read_text() if log.exists() else ""
    out["hook_errors"] = text.count(" error:")
    out["first_error"] = next((line for line in text.splitlines() if " error:" in line), None)
    return out


def concurrent(env: dict, backend: str, n: int, per: int, tag: str) -> dict:
    """n sessions at once, each `per` hook prompts in a row: prompts per second over the whole wall time."""

    def session(k: int) -> list[float]:
        return [hook_prompt(env, f"conc-{backend}-{tag}-{k}", j)[0] for j in range(per)]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as pool:
        lat = [ms for one in pool.map(session, range(n)) for ms in one]
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 2), "prompts": n * per, "per_s": round(n * per / wall, 2), "latencies": lat}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--memories", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument("--per-session", type=int, default=10, help="hook prompts per concurrent session")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the concurrency sweep")
    ap.add_argument("--name", default="postgres")
    ap.add_argument("--out", default=str(ROOT / "bench"))
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    flags = subprocess.run(CPU_FLAGS_CMD, shell=True, capture_output=True, text=True).stdout.split()
    results: dict = {"cpu_flags": flags, "cores": os.cpu_count(), "load_start": load(), "memories": args.memories}
    server = PgServer().start()
    envs: dict[str, dict] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            extra = {"CAIRN_RERANKER_ENABLED": "false", "CAIRN_HOOK_SCOPE": "bench"}
            mem, eph = server.create_database("mem"), server.create_database("eph")
            urls = {"CAIRN_DB_URL": mem, "CAIRN_EPHEMERAL_DB_URL": eph}
            envs["sqlite"] = env_for(Path(tmp) / "sqlite", **extra)
            envs["postgresql"] = env_for(Path(tmp) / "postgresql", **extra, **urls)
            results["build_s"] = {
                "sqlite": build(Path(tmp) / "sqlite", args.memories, None),
                "postgresql": build(Path(tmp) / "postgresql", args.memories, urls),
            }
            results["socket_probe"] = socket_probe(server, mem.rsplit("/", 1)[1], envs["postgresql"])
            results["connection"] = "unix socket" if results["socket_probe"]["works"] else "tcp loopback"
            if results["socket_probe"]["works"]:
                sock = {
                    k: f"postgresql://postgres@:{server.port}/{u.rsplit('/', 1)[1]}?host={server.sock}"
                    for k, u in urls.items()
                }
                envs["postgresql"].update(sock)
            results["postgres_url"] = envs["postgresql"]["CAIRN_DB_URL"]
            results["postgres_server"] = subprocess.run(
                [str(server.bin / "postgres"), "--version"], capture_output=True, text=True
            ).stdout.strip()
            print(f"built {results['build_s']}; socket probe {results['socket_probe']}", file=sys.stderr)
            for b in BACKENDS:
                daemon(Path(envs[b]["CAIRN_HOME"]), envs[b], "start")
                check_path(Path(envs[b]["CAIRN_HOME"]), envs[b], "cairn", "none")
                for i in range(3):  # warm: the scoring table, the connection's caches
                    hook_prompt(envs[b], f"warm-{b}", i)
            results["load_after_build"] = load()

            # 1. hook prompt, new process per prompt, unique prompts; bare python in the same rotation
            times: dict[str, list[float]] = {"bare": [], "sqlite": [], "postgresql": []}
            for i in range(args.runs):
                for name in rotation(i, ("bare", *BACKENDS)):
                    if name == "bare":
                        times["bare"].append(run([sys.executable, "-c", "pass"], dict(os.environ))[0])
                    else:
                        times[name].append(hook_prompt(envs[name], f"prompt-{name}", i)[0])
            results["hook_prompt"] = {k: summary(v) for k, v in times.items()}
            print(f"hook prompt {results['hook_prompt']}", file=sys.stderr)

            # 1b. where a ranking's time goes: `cairn rank --json` through the same daemons, the daemon's own laps
            # (table: the scoring table, refreshed when the store changed; log: the deliveries and turn written)
            laps: dict[str, list[dict]] = {b: [] for b in BACKENDS}
            whole: dict[str, list[float]] = {b: [] for b in BACKENDS}
            for i in range(args.runs):
                for b in rotation(i, BACKENDS):
                    ms, out = run([a.replace("{prompt}", fresh(i)) for a in rank_cmd()] + ["--json"], envs[b])
                    whole[b].append(ms)
                    laps[b].append(json.loads(out)["timings_ms"])
            results["rank_stages"] = {
                b: {
                    "process": summary(whole[b]),
                    "laps_p50_ms": {
                        k: round(statistics.median(t.get(k, 0.0) for t in laps[b]), 2) for k in sorted(laps[b][0])
                    },
                    "laps_p95_ms": {
                        k: round(metrics.percentile([t.get(k, 0.0) for t in laps[b]], 95), 2)
                        for k in sorted(laps[b][0])
                    },
                }
                for b in BACKENDS
            }
            print(f"rank stages {results['rank_stages']}", file=sys.stderr)

            # 2. hook stop: a prompt (not timed), then its Stop grading what it showed and writing one memory
            rng = random.Random(11)
            stops: dict[str, list[float]] = {b: [] for b in BACKENDS}
            shown_n: dict[str, list[int]] = {b: [] for b in BACKENDS}
            for i in range(args.runs + 2):
                for b in rotation(i, BACKENDS):
                    out = hook_prompt(envs[b], f"stop-{b}", i)[1]
                    shown = [int(x) for x in SHOWN.findall(out)]
                    ms = hook_stop(envs[b], f"stop-{b}", stop_message(shown, i, rng))
                    if i >= 2:  # the first two warm the Stop's path
                        stops[b].append(ms)
                        shown_n[b].append(len(shown))
            results["hook_stop"] = {
                b: {**summary(stops[b]), "graded_per_stop": statistics.mean(shown_n[b])} for b in BACKENDS
            }
            print(f"hook stop {results['hook_stop']}", file=sys.stderr)

            # 3. concurrent hook prompts: N sessions at once, rounds x levels x backends in rotating order
            conc: dict[str, dict[int, list[dict]]] = {b: {n: [] for n in levels} for b in BACKENDS}
            step = 0
            for r in range(args.rounds):
                for n in levels:
                    for b in rotation(step, BACKENDS):
                        conc[b][n].append(concurrent(envs[b], b, n, args.per_session, f"{r}-{n}"))
                    step += 1
            results["concurrent"] = {
                b: {
                    n: {
                        "prompts_per_s_median": round(statistics.median(x["per_s"] for x in conc[b][n]), 2),
                        "prompts_per_s_rounds": [x["per_s"] for x in conc[b][n]],
                        "latency": summary([ms for x in conc[b][n] for ms in x["latencies"]]),
                    }
                    for n in levels
                }
                for b in BACKENDS
            }
            print(f"concurrent {results['concurrent']}", file=sys.stderr)
            results["daemon_status"] = {}
            for b in BACKENDS:
                status = daemon(Path(envs[b]["CAIRN_HOME"]), envs[b], "status")
                results["daemon_status"][b] = {"rss_mb": status.get("rss_mb")}
                daemon(Path(envs[b]["CAIRN_HOME"]), envs[b], "stop")

            # 4. daemon down: `cairn rank` ranks in-process from the full-text index
            fb: dict[str, list[float]] = {b: [] for b in BACKENDS}
            for b in BACKENDS:
                check_path(Path(envs[b]["CAIRN_HOME"]), envs[b], "cairn-fallback", "none")
                for i in range(2):
                    run([a.replace("{prompt}", fresh(i)) for a in rank_cmd()], envs[b])
            for i in range(args.runs):
                for b in rotation(i, BACKENDS):
                    fb[b].append(run([a.replace("{prompt}", fresh(i)) for a in rank_cmd()], envs[b])[0])
            results["fallback"] = {b: summary(fb[b]) for b in BACKENDS}
            print(f"fallback {results['fallback']}", file=sys.stderr)
            results["written"] = {b: store_counts(envs[b]) for b in BACKENDS}
    finally:
        for env in envs.values():
            subprocess.run([CAIRN, "daemon", "stop"], env=env, capture_output=True, timeout=120)
        server.stop()
    bare = results["hook_prompt"]["bare"]["p50_ms"]
    for b in BACKENDS:
        results["hook_prompt"][b]["x_bare"] = round(results["hook_prompt"][b]["p50_ms"] / bare, 2)
    results["pg_over_sqlite"] = {
        "hook_prompt_p50": ratio(results["hook_prompt"], "p50_ms"),
        "hook_prompt_p95": ratio(results["hook_prompt"], "p95_ms"),
        "hook_stop_p50": ratio(results["hook_stop"], "p50_ms"),
        "hook_stop_p95": ratio(results["hook_stop"], "p95_ms"),
        "fallback_p50": ratio(results["fallback"], "p50_ms"),
        "fallback_p95": ratio(results["fallback"], "p95_ms"),
        **{
            f"throughput_n{n}": round(
                results["concurrent"]["postgresql"][n]["prompts_per_s_median"]
                / results["concurrent"]["sqlite"][n]["prompts_per_s_median"],
                2,
            )
            for n in levels
        },
    }
    results["load_end"] = load()
    write(results, Path(args.out), args, levels)
    return 0


def ratio(table: dict, key: str) -> float:
    return round(table["postgresql"][key] / table["sqlite"][key], 2)


def write(results: dict, out: Path, args, levels: list[int]) -> None:
    out.mkdir(exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(results, indent=2))
    probe, hp, hs, fb, x = (
        results["socket_probe"],
        results["hook_prompt"],
        results["hook_stop"],
        results["fallback"],
        results["pg_over_sqlite"],
    )
    if probe["works"]:
        how = f"the server's Unix socket (`{results['postgres_url']}`)"
    else:
        how = (
            f"TCP loopback (`{results['postgres_url']}`), not the Unix socket: cairn's URL parsing "
            f"(`db/__init__.py` `_connect`) takes only the URL's host name and port, so `{probe['url']}` resolves to "
            f"host {probe['resolved']['host']}, port {probe['resolved']['port']} (the `host=` query is ignored) and "
            f"opening it fails (exit {probe['exit_code']}: {probe['stderr'].split(' failed: ')[-1].split(' (check')[0]})"
        )
    cmd = (
        f"PYTHONPATH=. .venv/bin/python scripts/bench_postgres.py --memories {args.memories} --runs {args.runs} "
        f"--concurrency {args.concurrency} --per-session {args.per_session} --rounds {args.rounds}"
    )
    lines = [
        "# SQLite vs PostgreSQL under the hooks (same run, interleaved)",
        "",
        f"- date: {dt.datetime.now().isoformat(timespec='seconds')}; machine: {results['cores']} cores shared with "
        f"other work, no GPU; CPU flags (`{CPU_FLAGS_CMD}`): {' '.join(results['cpu_flags']) or 'none'}",
        f"- load average (1, 5, 15 min) at the start {results['load_start']}, after building the stores "
        f"{results['load_after_build']}, at the end {results['load_end']}",
        f"- command: `{cmd}`",
        f"- store: {results['memories']:,} memories (bench_hot_path.py's builder: generated text, random unit "
        f"vectors), built in {results['build_s']['sqlite']} s on SQLite, {results['build_s']['postgresql']} s on "
        "PostgreSQL (with the full-text index)",
        "- SQLite: `memory.db` and `ephemeral.db` in CAIRN_HOME (WAL, synchronous=normal). PostgreSQL: "
        f"{results['postgres_server']}, a throw-away server (tests/pgserver.py: initdb, `fsync=off`), both the "
        "memory store and the delivery log as databases on it",
        f"- PostgreSQL connection: {how}",
        "- each backend has its own CAIRN_HOME and daemon, both running; `CAIRN_COMPOSITE_FLOOR=off`, "
        "`CAIRN_RERANKER_ENABLED=false`, `CAIRN_HOOK_SCOPE=bench`; context: prompt + the last turns of "
        f"{TRANSCRIPT.name}; every prompt unique; the order of the backends (and bare python) rotates each iteration",
        "",
        f"## 1. `cairn hook prompt` (new process per prompt, {args.runs} runs each)",
        "",
        "| path | p50 ms | p95 ms | × bare python (p50) |",
        "|---|---:|---:|---:|",
        f"| bare `python -c pass` | {hp['bare']['p50_ms']} | {hp['bare']['p95_ms']} | 1.0 |",
    ]
    for b in BACKENDS:
        lines.append(f"| `cairn hook prompt`, {b} | {hp[b]['p50_ms']} | {hp[b]['p95_ms']} | {hp[b]['x_bare']} |")
    lines += [
        "",
        f"PostgreSQL / SQLite: p50 × {x['hook_prompt_p50']}, p95 × {x['hook_prompt_p95']}",
        "",
        f"Where a ranking's time goes: `cairn rank --json` through the same daemons ({args.runs} runs each, "
        "interleaved), the daemon's own laps (`timings_ms`; table: the scoring table, refreshed when the store "
        "changed; log: the deliveries and the turn written), p50 (p95) ms:",
        "",
        "| backend | whole process | " + " | ".join(results["rank_stages"]["sqlite"]["laps_p50_ms"]) + " |",
        "|---|" + "---:|" * (1 + len(results["rank_stages"]["sqlite"]["laps_p50_ms"])),
        *[
            f"| {b} | {results['rank_stages'][b]['process']['p50_ms']} ({results['rank_stages'][b]['process']['p95_ms']}) | "
            + " | ".join(
                f"{v} ({results['rank_stages'][b]['laps_p95_ms'][k]})"
                for k, v in results["rank_stages"][b]["laps_p50_ms"].items()
            )
            + " |"
            for b in BACKENDS
        ],
        "",
        f"## 2. `cairn hook stop` ({args.runs} runs each: grades what the prompt showed, writes one new memory)",
        "",
        "| backend | p50 ms | p95 ms | grades per Stop (mean) |",
        "|---|---:|---:|---:|",
    ]
    for b in BACKENDS:
        lines.append(f"| {b} | {hs[b]['p50_ms']} | {hs[b]['p95_ms']} | {hs[b]['graded_per_stop']:.1f} |")
    lines += [
        "",
        f"PostgreSQL / SQLite: p50 × {x['hook_stop_p50']}, p95 × {x['hook_stop_p95']}",
        "",
        f"## 3. Concurrent hook prompts (N sessions at once, {args.per_session} prompts each, {args.rounds} rounds)",
        "",
        "| N | SQLite prompts/s (median; rounds) | PostgreSQL prompts/s (median; rounds) | PG / SQLite | "
        "SQLite latency p50 / p95 ms | PostgreSQL latency p50 / p95 ms |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n in levels:
        s, p = results["concurrent"]["sqlite"][n], results["concurrent"]["postgresql"][n]
        lines.append(
            f"| {n} | {s['prompts_per_s_median']} ({', '.join(map(str, s['prompts_per_s_rounds']))}) | "
            f"{p['prompts_per_s_median']} ({', '.join(map(str, p['prompts_per_s_rounds']))}) | "
            f"{x[f'throughput_n{n}']} | {s['latency']['p50_ms']} / {s['latency']['p95_ms']} | "
            f"{p['latency']['p50_ms']} / {p['latency']['p95_ms']} |"
        )
    lines += [
        "",
        f"## 4. Daemon down: the fallback's full-text query (`cairn rank`, ranker `cairn-fallback`, {args.runs} runs)",
        "",
        "| backend | index | p50 ms | p95 ms |",
        "|---|---|---:|---:|",
        f"| sqlite | postings tables | {fb['sqlite']['p50_ms']} | {fb['sqlite']['p95_ms']} |",
        f"| postgresql | tsvector + GIN | {fb['postgresql']['p50_ms']} | {fb['postgresql']['p95_ms']} |",
        "",
        f"PostgreSQL / SQLite: p50 × {x['fallback_p50']}, p95 × {x['fallback_p95']}",
        "",
        "## What the hooks wrote (read back after the run)",
        "",
        "| backend | memories | deliveries | graded deliveries | hook errors logged | daemon RSS MB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for b in BACKENDS:
        w = results["written"][b]
        rss = results["daemon_status"][b]["rss_mb"]
        lines.append(f"| {b} | {w['memories']} | {w['deliveries']} | {w['graded']} | {w['hook_errors']} | {rss} |")
    lines += ["", "## Reading", "", "(written by hand from the numbers above after each run)", ""]
    (out / f"{args.name}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
