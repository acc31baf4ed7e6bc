"""Sessions side by side: is anything lost, and how much slower does each hook get?

1 / 2 / 4 / 8 / 16 Claude Code sessions run at once against one CAIRN_HOME, each a thread driving the real hooks
as new processes, as Claude Code does: per turn, the prompt goes into the session's transcript, `cairn hook prompt`
ranks it, the agent's answer (the question's gold answer and a `[cm]` block grading every memory shown and writing
two new memories of its own) goes into the transcript, `cairn hook stop` applies it, then a pause (2 s: a busy
developer's pace) before the next turn. Sessions start at seeded offsets within the first pause (`--start
together` releases them at once).

Each (backend, mode, sessions) runs in a fresh CAIRN_HOME (on PostgreSQL two fresh databases on one throw-away
server, tests/pgserver.py) holding a copy of one store built once: every configuration ranks the same memories
and sends the same prompts and answers. Modes: `daemon` (warm, composite only: CAIRN_RERANKER_ENABLED=false),
`daemon-student` (warm, a student reranker deployed through CAIRN_CROSS_ENCODER_STUDENT_PATH and planned for
CAIRN_RERANK_BUDGET_MS), `down` (no daemon, and none may start: this script holds daemon.lock as a starting daemon
would, so every prompt takes the lexical fallback). The single-session figures are each configuration's own, from
the same run: `--single-sessions` sessions run one at a time.

After a level: Stops spooled (files under $CAIRN_HOME/spool) are applied with `cairn doctor --apply` when the
command exists, then the store is read back. A Stop is lost when none of what it sent (its two memories, its
grades) is in the store, partial when only some is; memories and grades stored vs sent; the share of prompts the
daemon ranked (hook.log's `ranker=`: `cairn`, vs `cairn-fallback`); hook errors logged; prompt and Stop wall time
p50 / p95 and their ratio to the single-session figures; load average; CPU flags.

The store: LoCoMo dev's observations (read in place, `--locomo`), one project per conversation (cwd
/locomo/<sample id>, so the hooks' scope is the sample id), its questions as the prompts; padded with variants to
`--memories`. Without LoCoMo, the shipped example memories (and their variants) and bench_hot_path's prompts.
The student is the bundled MiniLM with a fresh head (a trained student's architecture and cost; its weights do
not matter for what is measured here).

    PYTHONPATH=. .venv/bin/python scripts/bench_concurrency.py [--sessions 1,2,4,8,16] [--turns 6] \\
        [--backends sqlite,postgresql] [--modes daemon,daemon-student,down] [--memories 2000] [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo
import loopdata

from cairn_cli.core import metrics
from cairn_cli.daemon import client
from scripts.bench_hot_path import CAIRN, PROMPTS, ROOT, precompile, stores_of

BACKENDS = ("sqlite", "postgresql")
MODES = ("daemon", "daemon-student", "down")
EXAMPLES = ROOT / "cairn_cli" / "data" / "example_memories.jsonl"
SHOWN = re.compile(r'<memory id="(\d+)"')
PROMPT_LINE = re.compile(r" prompt session=(\S+) turn=\S+ delivered=\d+ ranker=(\S+)")
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
SEED = 24
WARM_K = 900  # the warm-up turns' session numbers (900, 901, ...): none of the measured sessions' payloads
FULL = {
    "sessions": "1,2,4,8,16",
    "turns": 6,
    "single_sessions": 3,
    "backends": ",".join(BACKENDS),
    "modes": ",".join(MODES),
    "memories": 2000,
}
MODE_TEXT = {
    "daemon": "`daemon` warm, composite only (CAIRN_RERANKER_ENABLED=false)",
    "daemon-student": "`daemon-student` warm, a student (bundled MiniLM + fresh head) deployed with its rerank plan "
    "(CAIRN_RERANK_BUDGET_MS default)",
    "down": "`down` no daemon and none may start (the lexical fallback)",
}
QUICK = {
    "sessions": "1,4",
    "turns": 2,
    "single_sessions": 1,
    "backends": "sqlite",
    "modes": "daemon,down",
    "memories": 300,
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu() -> dict:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    return {"model": model, "cores": os.cpu_count(), "flags": [f for f in CPU_FLAGS if f in flags]}


# -- the store and the sessions' payloads (the same for every configuration) ---------------------------------------


class Project:
    """One conversation of LoCoMo (or the example webshop): its scope, its memories, its prompts and answers."""

    def __init__(self, name: str, memories: list[str], questions: list[tuple[str, str]]):
        self.name, self.memories, self.questions = name, memories, questions

    @property
    def cwd(self) -> str:
        return f"/locomo/{self.name}"


def projects(path: Path, n: int) -> tuple[list[Project], str]:
    """The projects and their memories, `n` memories in all (round-robin over the projects, then variants)."""
    if path.is_file():
        out = []
        for conv in locomo.conversations(path):
            seen: dict[str, None] = {}
            for _, by_speaker in sorted(conv["observation"].items()):
                for facts in by_speaker.values():
                    for text, _ in facts:
                        if str(text).strip():
                            seen[str(text).strip()] = None
            qs = [
                (str(q["question"]).strip(), "I could not find that." if q.get("answer") is None else str(q["answer"]))
                for q in conv["qa"]
                if q.get("category") in locomo.CATEGORIES
            ]
            out.append(Project(conv["sample_id"], list(seen), qs))
        source = f"LoCoMo dev ({path}): {sum(len(p.memories) for p in out)} observations of {len(out)} conversations"
    else:
        lines = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
        out = [Project("webshop", [m["content"] for m in lines], [(p, "Done.") for p in PROMPTS])]
        source = f"the {len(lines)} shipped example memories (LoCoMo not found at {path})"
    pools = [list(p.memories) for p in out]
    for p in out:
        p.memories = []
    taken, variant = 0, 0
    while taken < n:
        for p, pool in zip(out, pools):
            if taken == n:
                break
            i = len(p.memories)
            # a variant carries a number of its own: semantic dedup merges only memories with the same numbers
            p.memories.append(pool[i] if i < len(pool) else f"{pool[i % len(pool)]} (variant {i // len(pool)})")
            variant += i >= len(pool)
            taken += 1
    return out, f"{source}; {n} taken ({variant} of them variants)"


def new_memories(project: Project, k: int, t: int, question: str, answer: str) -> list[dict]:
    """Session k's two new memories at turn t: each states a number of its own, so that no dedup may merge two of
    them (a near-duplicate merges only into a memory that states the same set of numbers)."""
    return [
        {
            "content": f"Note {100000 + 1000 * k + 10 * t + j}: asked '{question[:80]}', the answer was '{answer[:80]}'",
            "keywords": [f"s{k}t{t}n{j}", project.name],
            "scope": project.name,
            "kind": "fact",
        }
        for j in range(2)
    ]


def turn_payload(projs: list[Project], k: int, t: int, turns: int) -> tuple[Project, str, str]:
    """(project, prompt, answer) of session k's turn t: session k works on project k mod P, its questions from
    (k div P) * turns on."""
    project = projs[k % len(projs)]
    q, answer = project.questions[((k // len(projs)) * turns + t) % len(project.questions)]
    return project, f"{q} (session {k}, turn {t})", answer


TAG = re.compile(r"\(session \d+, turn \d+\)$")


def _tag(prompt: str) -> str:
    """The "(session k, turn t)" a bench prompt ends with (turn_payload)."""
    found = TAG.search(prompt)
    return found.group(0) if found else prompt


def response(project: Project, k: int, t: int, prompt: str, answer: str, shown: list[int]) -> tuple[str, list, list]:
    """(the agent's whole answer, its text blocks, the contents of the memories it writes): the gold answer, then
    the [cm] block grading every memory shown (grades cycle 3, 2, 1, 0) and writing two new memories."""
    mems = new_memories(project, k, t, prompt, answer)
    grades = [f"{m}:{3 - (j + k + t) % 4}" for j, m in enumerate(shown)]
    blocks = [answer, "[cm]\n" + json.dumps({"m": mems, "rg": grades}) + "\n[/cm]"]
    return "\n\n".join(blocks), blocks, [m["content"] for m in mems]


# -- one configuration ---------------------------------------------------------------------------------------------


def base_env(home: Path, extra: dict) -> dict:
    """The hooks' environment: cairn's defaults (daemon timeout, back-off, floor) except what the mode sets."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "CAIRN_HOME": str(home),
            "CAIRN_AB_SEED": "bench-concurrency",
            "HF_HUB_OFFLINE": "1",
            **extra,
        }
    )
    return env


def cairn(env: dict, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([CAIRN, *args], env=env, input=stdin, capture_output=True, text=True, timeout=1800)
    if check and proc.returncode != 0:
        raise SystemExit(f"cairn {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc


def timed(env: dict, hook: str, payload: dict) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [CAIRN, "hook", hook], env=env, input=json.dumps(payload), capture_output=True, text=True, timeout=600
    )
    return (time.perf_counter() - t0) * 1000, proc


def status(env: dict) -> dict:
    proc = cairn(env, "daemon", "status", "--json", check=False)
    try:
        return json.loads(proc.stdout) if proc.stdout.strip() else {}
    except ValueError:
        return {}


def wait_for_daemon(env: dict, projs: list[Project], student: bool, timeout_s: float = 900) -> dict:
    """Rank (nothing logged) until the daemon serves what the mode asks for: the composite only, or the student
    with its rerank plan for the budget; the scoring table is warm when this returns."""
    deadline = time.time() + timeout_s
    i = 0
    while time.time() < deadline:
        p = projs[i % len(projs)]
        cairn(env, "rank", p.questions[0][0], "--scope", p.name, "--no-log", "--json")
        i += 1
        s = status(env)
        serving = s.get("reranker") or ""
        planned = bool((s.get("rerank_plan") or {}).get("budget_ms"))
        # "running": `daemon status`'s word for a daemon that answers ready
        if (
            s.get("state") == "running"
            and i >= 3
            and (serving.startswith("student:") and planned if student else serving == "none")
        ):
            return s
        time.sleep(0.5)  # another process's state (a benchmark, not a test)
    raise SystemExit(f"the daemon did not serve the {'student' if student else 'composite'} in {timeout_s} s")


def fresh_home(root: Path, name: str, template: Path, server, env_extra: dict) -> tuple[Path, dict]:
    """A new CAIRN_HOME holding a copy of the template's memory store (SQLite: the file; PostgreSQL: `cairn db
    copy` into a new database, and a new one made by `cairn db init` for the delivery log)."""
    home = root / name
    home.mkdir(mode=0o700, parents=True)
    extra = dict(env_extra)
    if server is None:
        src, dst = sqlite3.connect(template / "memory.db"), sqlite3.connect(home / "memory.db")
        src.backup(dst)
        src.close()
        dst.close()
        os.chmod(home / "memory.db", 0o600)
    else:
        tag = re.sub(r"\W", "_", name)
        extra["CAIRN_DB_URL"] = server.create_database(f"m_{tag}")
        extra["CAIRN_EPHEMERAL_DB_URL"] = server.create_database(f"e_{tag}")
        env = base_env(home, extra)
        source = f"sqlite:///{template / 'memory.db'}"
        cairn(env, "db", "copy", "--from", source, "--to", extra["CAIRN_DB_URL"], "--store", "memory")
        cairn(env, "db", "init", extra["CAIRN_EPHEMERAL_DB_URL"], "--store", "ephemeral")  # made on purpose
    return home, base_env(home, extra)


def run_session(
    env: dict, root: Path, projs: list[Project], k: int, turns: int, pause: float, delay: float, sid: str = ""
) -> list:
    """One Claude Code session: `turns` prompts, each followed by its Stop; the records of its turns."""
    time.sleep(delay)
    project = projs[k % len(projs)]
    sid = sid or f"bench-session-{k}"
    path = root / "transcripts" / f"{sid}.jsonl"
    writer = loopdata.TranscriptWriter(path, sid, project.cwd)
    common = {"session_id": sid, "transcript_path": str(path), "cwd": project.cwd, "permission_mode": "default"}
    out = []
    for t in range(turns):
        project, prompt, answer = turn_payload(projs, k, t, turns)
        writer.user(prompt)
        p_ms, p = timed(env, "prompt", {**common, "hook_event_name": "UserPromptSubmit", "prompt": prompt})
        shown = [int(x) for x in SHOWN.findall(p.stdout)]
        text, blocks, contents = response(project, k, t, prompt, answer, shown)
        writer.assistant(blocks)
        stop = {**common, "hook_event_name": "Stop", "stop_hook_active": False, "last_assistant_message": text}
        s_ms, s = timed(env, "stop", stop)
        out.append(
            {
                "session": sid,
                "turn": t,
                "prompt": prompt,
                "shown": shown,
                "memories": contents,
                "sha256": hashlib.sha256(text.encode()).hexdigest(),
                "prompt_ms": p_ms,
                "stop_ms": s_ms,
                "exit": [p.returncode, s.returncode],
            }
        )
        if t < turns - 1:
            time.sleep(pause)
    return out


def drive(env: dict, root: Path, projs: list[Project], n: int, args) -> tuple[list[dict], float]:
    """n sessions side by side (n == 1: `--single-sessions` sessions one at a time); (turn records, wall s)."""
    rng = random.Random(SEED)
    delays = [0.0 if args.start == "together" else rng.uniform(0, args.pause) for _ in range(max(n, 16))]
    t0 = time.perf_counter()
    if n == 1:
        records = [
            r
            for k in range(args.single_sessions)
            for r in run_session(env, root, projs, k, args.turns, args.pause, 0.0)
        ]
        return records, time.perf_counter() - t0
    results: list[list] = [[] for _ in range(n)]

    def one(k: int) -> None:
        results[k] = run_session(env, root, projs, k, args.turns, args.pause, delays[k])

    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return [r for rs in results for r in rs], time.perf_counter() - t0


def warm_up(env: dict, home: Path, projs: list[Project], mode: str, tries: int = 5) -> None:
    """Turns of a session of its own until its prompt is ranked by the daemon (one turn when it is down): the hooks'
    paths warm (the daemon's first rerank, embed and table refresh after a write), as in a daemon that has served a
    while. A warm-up that timed out leaves no back-off behind; its records are not counted."""
    for t in range(tries if mode != "down" else 1):
        run_session(env, home, projs, WARM_K + t, 1, 0.0, 0.0, sid="bench-warm-up")
        Path(home, client.BACKOFF_NAME).unlink(missing_ok=True)
        text = (home / "logs" / "hook.log").read_text()
        served = [m[2] for m in PROMPT_LINE.finditer(text) if m[1] == "bench-warm-up"]
        if served and served[-1] == "cairn":
            return
    if mode != "down":
        log(f"warm-up: the daemon did not rank a prompt in {tries} tries")


def apply_spool(home: Path, env: dict) -> dict:
    """Stops spooled during the level, applied by `cairn doctor --apply` when the command exists."""
    spool = home / "spool"
    files = sorted(p for p in spool.rglob("*") if p.is_file()) if spool.is_dir() else []
    out: dict = {"spooled_files": len(files), "doctor": None}
    if files:
        if cairn(env, "doctor", "--help", check=False).returncode != 0:
            out["doctor"] = "no `cairn doctor` command: the spooled Stops stay unapplied"
        else:
            proc = cairn(env, "doctor", "--apply", check=False)
            out["doctor"] = {"exit": proc.returncode, "stdout": proc.stdout[-1000:], "stderr": proc.stderr[-1000:]}
        left = [p for p in spool.rglob("*") if p.is_file()] if spool.is_dir() else []
        out["spool_files_after"] = len(left)
    return out


def read_back(env: dict, records: list[dict]) -> dict:
    """What the store holds of what each Stop sent, and what hook.log says."""
    import cairn_cli
    from cairn_cli.db.tables import HookState, Memory, MemoryDelivery

    with stores_of(env, ("CAIRN_HOME", "CAIRN_DB_URL", "CAIRN_EPHEMERAL_DB_URL", "CAIRN_EMBED_MODEL")):
        cairn_cli.open_store(create=None)
        sessions = sorted({r["session"] for r in records})
        # a turn is found by its prompt's "(session k, turn t)" tag: hook state keeps a long prompt's tail alone
        turns = {
            (h.session_id, _tag((h.data or {}).get("prompt") or "")): h
            for h in HookState.select().where(HookState.session_id.in_(sessions))
        }
        contents = [c for r in records for c in r["memories"]]
        stored = set()
        for i in range(0, len(contents), 200):
            batch = contents[i : i + 200]
            stored |= {m.content for m in Memory.select(Memory.content).where(Memory.content.in_(batch))}
        graded = {
            (d.session_id, d.turn, d.memory_id)
            for d in MemoryDelivery.select().where(
                MemoryDelivery.session_id.in_(sessions) & MemoryDelivery.grade.is_null(False)
            )
        }
        counts = {"ok": 0, "partial": 0, "lost": 0, "prompt_not_logged": 0, "marked_applied": 0}
        mem_stored = grades_stored = 0
        for r in records:
            row = turns.get((r["session"], _tag(r["prompt"])))
            counts["prompt_not_logged"] += row is None
            mems = sum(c in stored for c in r["memories"])
            grades = 0 if row is None else sum((r["session"], row.turn, m) in graded for m in r["shown"])
            counts["marked_applied"] += (
                row is not None and ((row.data or {}).get("stop") or {}).get("response_sha256") == r["sha256"]
            )
            mem_stored, grades_stored = mem_stored + mems, grades_stored + grades
            got, sent = mems + grades, len(r["memories"]) + len(r["shown"])
            counts["ok" if got == sent else "lost" if got == 0 else "partial"] += 1
    log_path = Path(env["CAIRN_HOME"]) / "logs" / "hook.log"
    text = log_path.read_text() if log_path.exists() else ""
    rankers: dict[str, int] = {}
    for m in PROMPT_LINE.finditer(text):
        if m[1] in sessions:  # not the warm-up's
            rankers[m[2]] = rankers.get(m[2], 0) + 1
    errors = [line for line in text.splitlines() if " error:" in line]
    return {
        "stops": counts,
        "memories": {"sent": len(contents), "stored": mem_stored},
        "grades": {"sent": sum(len(r["shown"]) for r in records), "stored": grades_stored},
        "prompt_rankers": rankers,
        "prompt_errors": text.count(" prompt error:"),
        "stop_errors": text.count(" stop error:"),
        "first_errors": sorted({re.sub(r"^\S+ ", "", e)[:200] for e in errors})[:5],
    }


def summary(ms: list[float]) -> dict:
    if not ms:
        return {"p50_ms": None, "p95_ms": None, "n": 0}
    return {"p50_ms": round(statistics.median(ms), 1), "p95_ms": round(metrics.percentile(ms, 95), 1), "n": len(ms)}


def level(backend: str, mode: str, n: int, args, ctx: dict) -> dict:
    name = f"{backend}-{mode}-{n}"
    extra = dict(ctx["modes"][mode])
    home, env = fresh_home(
        ctx["root"], name, ctx["template"], ctx["server"] if backend == "postgresql" else None, extra
    )
    held = False
    daemon_status: dict = {}
    try:
        if mode == "down":
            from cairn_cli.daemon import singleton

            held = singleton.hold(home)  # as a starting daemon would: the hooks may not start one
        else:
            cairn(env, "daemon", "start", "--wait", "600", "--json")
            daemon_status = wait_for_daemon(env, ctx["projects"], student=mode == "daemon-student")
        warm_up(env, home, ctx["projects"], mode)
        load_start = load()
        log(f"{name}: start (load {load_start})")
        records, wall = drive(env, home, ctx["projects"], n, args)
        load_end = load()
        if mode != "down":
            end = status(env)
            daemon_status = {
                "reranker": end.get("reranker"),
                "rss_mb": end.get("rss_mb"),
                "requests": end.get("requests"),
                "plan": {
                    k: (end.get("rerank_plan") or {}).get(k)
                    for k in ("precision", "candidates", "max_length", "budget_ms", "margin")
                },
            }
    finally:
        if mode == "down" and held:
            from cairn_cli.daemon import singleton

            singleton.release(home)
        else:
            cairn(env, "daemon", "stop", check=False)
    spool = apply_spool(home, env)
    back = read_back(env, records)
    prompts = len(records)
    out = {
        "backend": backend,
        "mode": mode,
        "sessions": n,
        "turns": args.turns,
        "prompts": prompts,
        "wall_s": round(wall, 1),
        "load_start": load_start,
        "load_end": load_end,
        "hook_exit_nonzero": sum(1 for r in records for c in r["exit"] if c != 0),
        "prompt": summary([r["prompt_ms"] for r in records]),
        "stop": summary([r["stop_ms"] for r in records]),
        "shown_per_prompt": round(sum(len(r["shown"]) for r in records) / max(1, prompts), 2),
        "daemon_share": round(back["prompt_rankers"].get("cairn", 0) / max(1, prompts), 3),
        "daemon": daemon_status,
        **spool,
        **back,
    }
    log(
        f"{name}: {out['stops']}, memories {back['memories']}, grades {back['grades']}, rankers "
        f"{back['prompt_rankers']}, prompt {out['prompt']}, stop {out['stop']}, spool {spool['spooled_files']}"
    )
    if not args.keep:
        shutil.rmtree(home / "transcripts", ignore_errors=True)
    return out


# -- the store, built once ------------------------------------------------------------------------------------------


def build_template(root: Path, projs: list[Project], student: Path | None) -> Path:
    """The memory store every configuration copies: the memories imported and embedded with the bundled model;
    with a student, its rerank plan measured once by a daemon (cached in the store's machine state)."""
    home = root / "template"
    home.mkdir(mode=0o700, parents=True)
    lines = root / "memories.jsonl"
    lines.write_text(
        "".join(json.dumps({"content": m, "scope": p.name, "kind": "fact"}) + "\n" for p in projs for m in p.memories)
    )
    t0 = time.perf_counter()
    report = json.loads(cairn(base_env(home, {"CAIRN_DAEMON": "off"}), "memory", "import", str(lines), "--json").stdout)
    log(f"template: imported in {time.perf_counter() - t0:.0f} s: {report if len(str(report)) < 300 else '...'}")
    if student is not None:
        env = base_env(home, {"CAIRN_CROSS_ENCODER_STUDENT_PATH": str(student)})
        cairn(env, "daemon", "start", "--wait", "600", "--json")
        try:
            s = wait_for_daemon(env, projs, student=True)
            log(f"template: the student's plan measured: {(s.get('rerank_plan') or {}).get('reason')}")
        finally:
            cairn(env, "daemon", "stop", check=False)
    return home


def make_student(path: Path) -> None:
    code = (
        "import sys; from cairn_cli.ml.student import CrossEncoderModel, bundled_base; "
        "CrossEncoderModel(bundled_base()).save(sys.argv[1])"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], env=base_env(path.parent, {}), check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", help=f"levels: sessions side by side (default {FULL['sessions']})")
    ap.add_argument("--turns", type=int, help=f"turns (prompt + Stop) per session (default {FULL['turns']})")
    ap.add_argument("--pause", type=float, default=2.0, help="seconds between a Stop and the session's next prompt")
    ap.add_argument("--start", choices=("spread", "together"), default="spread")
    ap.add_argument(
        "--single-sessions",
        type=int,
        help=f"sessions run one at a time for the 1-session row (default {FULL['single_sessions']})",
    )
    ap.add_argument("--backends", help=f"default {FULL['backends']}")
    ap.add_argument("--modes", help=f"default {FULL['modes']}")
    ap.add_argument("--memories", type=int, help=f"default {FULL['memories']}")
    ap.add_argument("--locomo", default=str(locomo.DATA), help="LoCoMo dev JSON (read in place)")
    ap.add_argument("--quick", action="store_true", help=f"a smoke run, by default {QUICK}")
    ap.add_argument("--name", default=None, help="results file name in --out (default concurrency[_quick])")
    ap.add_argument("--label", default="", help="said in the report's title, e.g. 'before the fix'")
    ap.add_argument("--out", default=str(ROOT / "bench"))
    ap.add_argument("--work", default=None, help="keep the homes here (default: a temporary directory, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the sessions' transcripts in the homes")
    args = ap.parse_args()
    for k, v in (QUICK if args.quick else FULL).items():  # what is given explicitly wins
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.name = args.name or ("concurrency_quick" if args.quick else "concurrency")
    levels = sorted({int(x) for x in args.sessions.split(",")} | {1})
    backends = [b for b in args.backends.split(",") if b]
    modes = [m for m in args.modes.split(",") if m]
    unknown = [x for x in backends if x not in BACKENDS] + [x for x in modes if x not in MODES]
    if unknown:
        raise SystemExit(f"unknown backend or mode: {unknown}")
    projs, source = projects(Path(args.locomo), args.memories)
    if min(len(p.questions) for p in projs) < args.turns:
        raise SystemExit("a project has fewer questions than --turns")
    results: dict = {
        "label": args.label,
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(["scripts/bench_concurrency.py", *sys.argv[1:]]),
        "git": subprocess.run(
            ["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"], capture_output=True, text=True
        ).stdout.strip()[:120],
        "cpu": cpu(),
        "load_start": load(),
        "store": source,
        "memories": args.memories,
        "turns": args.turns,
        "pause_s": args.pause,
        "start": args.start,
        "single_sessions": args.single_sessions,
        "levels": levels,
        "runs": [],
    }
    precompile()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="cairn-conc-"))
    work.mkdir(parents=True, exist_ok=True)
    server = None
    try:
        student = None
        if "daemon-student" in modes:
            student = work / "student"
            make_student(student)
        template = build_template(work, projs, student)
        if "postgresql" in backends:
            from tests.pgserver import PgServer, available

            why = available()
            if why:
                raise SystemExit(f"PostgreSQL: {why}")
            server = PgServer().start()
        ctx = {
            "root": work / "homes",
            "template": template,
            "server": server,
            "projects": projs,
            "modes": {
                "daemon": {"CAIRN_RERANKER_ENABLED": "false"},
                "daemon-student": {"CAIRN_CROSS_ENCODER_STUDENT_PATH": str(student)},
                "down": {},
            },
        }
        for backend in backends:
            for mode in modes:
                for n in levels:
                    results["runs"].append(level(backend, mode, n, args, ctx))
                    ratios(results)
                    write(results, Path(args.out), args.name)
    finally:
        if server is not None:
            server.stop()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    results["load_end"] = load()
    ratios(results)
    write(results, Path(args.out), args.name)
    return 0


def ratios(results: dict) -> None:
    """Each row's p50 / p95 over its configuration's single-session row."""
    single = {(r["backend"], r["mode"]): r for r in results["runs"] if r["sessions"] == 1}
    for r in results["runs"]:
        one = single.get((r["backend"], r["mode"]))
        for hook in ("prompt", "stop"):
            for q in ("p50_ms", "p95_ms"):
                base = one and one[hook][q]
                r[hook][f"x_single_{q[:3]}"] = round(r[hook][q] / base, 2) if base and r[hook][q] else None


# -- the report -----------------------------------------------------------------------------------------------------


def write(results: dict, out: Path, name: str) -> None:
    out.mkdir(exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    c = results["cpu"]
    lines = [
        "# Sessions side by side: lost Stops, the daemon's share, latency against one session"
        + (f" ({results['label']})" if results.get("label") else ""),
        "",
        f"- date: {results['date']}; code: `{results['git']}`",
        f"- machine: {c['cores']} cores shared with other work, {c['model']}; CPU flags (of {', '.join(CPU_FLAGS)}): "
        f"{' '.join(c['flags']) or 'none'}; load average (1, 5, 15 min) at the start {results['load_start']}, at "
        f"the end {results.get('load_end')}",
        f"- command: `PYTHONPATH=. .venv/bin/python {results['command']}`",
        f"- store: {results['store']}; embedded with the bundled all-MiniLM-L6-v2; each configuration a fresh "
        "CAIRN_HOME with a copy of it (PostgreSQL: fresh databases on one throw-away server, `fsync=off`)",
        f"- each session: {results['turns']} turns of `cairn hook prompt` (the session's transcript in Claude Code's "
        "shape, LoCoMo questions as prompts) then `cairn hook stop` (the gold answer and a [cm] block grading "
        f"every memory shown, writing 2 new memories), {results['pause_s']} s between turns; sessions start "
        + (
            "together"
            if results["start"] == "together"
            else f"at seeded offsets within the first {results['pause_s']} s"
        )
        + f"; the 1-session row is {results['single_sessions']} sessions run one at a time",
        "- modes: "
        + "; ".join(MODE_TEXT[m] for m in MODES if m in {r["mode"] for r in results["runs"]})
        + "; cairn's defaults otherwise (daemon timeout 1.5 s, back-off 10 s, composite floor auto)",
        "- a Stop is lost when nothing it sent (2 memories, its grades) is in the store after the spooled Stops "
        "were applied (`cairn doctor --apply`), partial when some is; ranked by the daemon: hook.log `ranker=cairn`",
        "",
        "| backend | mode | sessions | Stops | lost | partial | spooled | stop errors | memories stored / sent | "
        "grades stored / sent | ranked by the daemon | prompt p50 / p95 ms | × single p95 | Stop p50 / p95 ms | "
        "× single p95 | load (1 min) at the end |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["runs"]:
        s = r["stops"]
        lines.append(
            f"| {r['backend']} | {r['mode']} | {r['sessions']} | {r['prompts']} | {s['lost']} | {s['partial']} | "
            f"{r['spooled_files']} | {r['stop_errors']} | {r['memories']['stored']} / {r['memories']['sent']} | "
            f"{r['grades']['stored']} / {r['grades']['sent']} | {r['daemon_share']:.0%} | "
            f"{r['prompt']['p50_ms']} / {r['prompt']['p95_ms']} | {r['prompt'].get('x_single_p95')} | "
            f"{r['stop']['p50_ms']} / {r['stop']['p95_ms']} | {r['stop'].get('x_single_p95')} | {r['load_end'][0]} |"
        )
    lines += ["", "## Goals", ""]
    lost = sum(r["stops"]["lost"] + r["stops"]["partial"] for r in results["runs"])
    sent = sum(r["prompts"] for r in results["runs"])
    lines.append(f"- lost or partial Stops, all configurations (goal 0): {lost} of {sent}")
    top = max(results["levels"])
    for r in [r for r in results["runs"] if r["sessions"] == top and r["mode"] != "down"]:
        goal = " (goal ≥ 95%)" if r["mode"] == "daemon" else " (beside the goal)"
        lines.append(
            f"- {r['backend']}, {r['mode']}, {top} sessions: ranked by the daemon {r['daemon_share']:.0%}{goal}"
        )
    for r in [r for r in results["runs"] if r["sessions"] == top]:
        lines.append(
            f"- {r['backend']}, {r['mode']}, {top} sessions: p95 × single, prompt {r['prompt'].get('x_single_p95')}, "
            f"Stop {r['stop'].get('x_single_p95')} (goal ≤ 3)"
        )
    errors = sorted({e for r in results["runs"] for e in r["first_errors"]})
    if errors:
        lines += ["", "Hook errors logged (first distinct lines):", ""]
        lines += [f"- `{e}`" for e in errors[:8]]
    lines += ["", "## Reading", "", "(written by hand from the numbers above after each run)", ""]
    (out / f"{name}.md").write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
