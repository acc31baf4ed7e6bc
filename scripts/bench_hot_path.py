"""Hot-path benchmark: wall time of `cairn rank` as a new process (what the UserPromptSubmit hook runs).

Side by side in one run, at 1k / 10k / 100k memories: bare `python -c pass`, the daemon warm with the
composite only, the daemon warm with a cross-encoder reranking the top 20, and the in-process lexical
fallback (daemon down). Reports p50 / p95 and the ratio to bare python, and the daemon's resident memory.

The stores are synthetic (generated text, random unit vectors stamped as the bundled model's, so the daemon
uses them) — latency depends on their number and size, not their meaning. The cross-encoder is the bundled
MiniLM with a fresh head, saved as a student (the same architecture as ms-marco-MiniLM-L-6-v2). The context
window is the real prompt plus a real Claude Code transcript's last turns (when ../shared/data is present).

    .venv/bin/python scripts/bench_hot_path.py [--sizes 1000,10000,100000] [--runs 30]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from cairn_cli.core import metrics
from cairn_cli.core.ranking.plan import OBSERVE_MIN

ROOT = Path(__file__).resolve().parents[1]
CAIRN = str(Path(sys.executable).with_name("cairn"))
TRANSCRIPT = ROOT.parent / "shared" / "data" / "claude_code" / "spotter" / "tool_heavy.jsonl"
WORDS = [
    "deploy",
    "test",
    "database",
    "migration",
    "cache",
    "index",
    "query",
    "server",
    "client",
    "socket",
    "timeout",
    "retry",
    "config",
    "env",
    "import",
    "module",
    "function",
    "class",
    "error",
    "exception",
    "log",
    "trace",
    "build",
    "release",
    "branch",
    "merge",
    "commit",
    "review",
    "docker",
    "image",
    "container",
    "volume",
    "network",
    "port",
    "proxy",
    "header",
    "token",
    "session",
    "cookie",
    "auth",
    "user",
    "role",
    "admin",
    "payment",
    "invoice",
    "order",
    "cart",
    "checkout",
    "price",
    "tax",
    "report",
    "email",
    "template",
    "queue",
    "worker",
    "job",
    "schedule",
    "cron",
    "search",
    "vector",
    "embedding",
    "model",
    "rerank",
    "floor",
    "grade",
    "label",
    "memory",
    "store",
    "scope",
    "kind",
    "keyword",
    "daemon",
    "hook",
]
PROMPTS = [
    "the integration tests fail with connection refused, what should I start first?",
    "how do we deploy the release branch to production?",
    "why is the search index missing the new products after the import?",
    "the worker queue keeps retrying the same job, where is the retry config?",
    "which port does the proxy forward the api to?",
]


def make_store(home: Path, n: int, seed: int = 7) -> None:
    os.environ["CAIRN_HOME"] = str(home)
    from cairn_cli import config
    from cairn_cli.core.text import normalise, sha256
    from cairn_cli.db import close_all, open_db
    from cairn_cli.db.tables import Memory, memory_proxy

    close_all()
    open_db(config.memory_db_url(), config.ephemeral_db_url())
    rng = random.Random(seed)
    vecs = np.random.default_rng(seed).standard_normal((n, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    now = dt.datetime(2026, 11, 1)
    rows = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(15, 45))) + f" (note {i})"
        rows.append(
            {
                "content": text,
                "content_hash": sha256(text),
                "norm_hash": sha256(normalise(text)),
                "keywords": rng.sample(WORDS, 3),
                "scope": "bench" if i % 2 else "global",
                "kind": "fact",
                "confidence": 0.75,
                "created_at": now,
                "updated_at": now,
                "embedding": vecs[i].tobytes(),
                "embedding_model": "all-MiniLM-L6-v2",
            }
        )
    with memory_proxy.atomic():
        for start in range(0, n, 2000):
            Memory.insert_many(rows[start : start + 2000]).execute()
    close_all()


def make_student(home: Path, layers: int | None = None) -> None:
    """The bundled MiniLM with a fresh head (ms-marco-MiniLM-L-6-v2's architecture), or its first `layers` layers
    (what `cairn train-reranker --layers N` deploys)."""
    from cairn_cli.ml.student import CrossEncoderModel, bundled_base

    CrossEncoderModel(bundled_base(), layers=layers).save(home / "training_data" / "reranker-student")


def deploy_learned_embedder(home: Path) -> str:
    """What a deployed learned embedder leaves behind (core/learning/embedder.py): a version directory (the bundled
    model saved: the same architecture and cost as a tuned one), a calibration of 101 knots per map fitted on these
    vectors (a real version's size: the table maps every cosine through it), the store's vectors stamped as the
    version's, and the embedder record naming it live. Returns its name."""
    os.environ["CAIRN_HOME"] = str(home)
    from cairn_cli import config
    from cairn_cli.core.store import embedders, state
    from cairn_cli.db import close_all, open_db
    from cairn_cli.db.tables import Memory
    from cairn_cli.ml.models import BUNDLED_EMBEDDER, get_encoder
    from cairn_cli.ml.tuning import save_encoder

    close_all()
    open_db(config.memory_db_url(), config.ephemeral_db_url())
    name = embedders.learned_name(BUNDLED_EMBEDDER, "bench")
    target = embedders.version_dir(name)
    save_encoder(get_encoder(BUNDLED_EMBEDDER, "auto"), target)
    vecs = np.stack([np.frombuffer(m.embedding, dtype=np.float32) for m in Memory.select().limit(500)])
    cos = (vecs @ vecs.T)[np.triu_indices(len(vecs), k=1)]
    calibration = embedders.Calibration.fit(cos, cos * 0.9 + 0.05, cos, cos * 0.9 + 0.05)
    (target / embedders.CALIBRATION_FILE).write_text(calibration.to_json() + "\n")
    Memory.update(embedding_model=name).execute()
    state.put(embedders.KEY, {"live": name, "pending": None}, config.Settings(), by="bench", reason="bench")
    close_all()
    return name


RUN_ENV: dict[str, str] = {}  # set for every timed process (--rank-profile)


def env_for(home: Path, **extra: str) -> dict:
    """The environment of the timed processes: byte code cached as an installed cairn has it (`precompile`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(RUN_ENV)
    # the stores are random vectors, which no composite floor would let through: the floor is off so that every
    # prompt pays the full path (abstaining is cheaper)
    env.update({"CAIRN_HOME": str(home), "CAIRN_DAEMON_TIMEOUT_MS": "60000", "CAIRN_COMPOSITE_FLOOR": "off", **extra})
    return env


@contextlib.contextmanager
def stores_of(env: dict, keys=("CAIRN_HOME", "CAIRN_DB_URL", "CAIRN_EPHEMERAL_DB_URL")):
    """This process reads the stores a benchmark's hooks wrote: `keys` taken from `env` (those it lacks unset), the
    connections closed before and after, the environment put back."""
    from cairn_cli import db

    saved = {k: os.environ.pop(k, None) for k in keys}
    os.environ.update({k: env[k] for k in keys if env.get(k)})
    db.close_all()
    try:
        yield
    finally:
        db.close_all()
        for k in keys:
            os.environ.pop(k, None)
        os.environ.update({k: v for k, v in saved.items() if v is not None})


def precompile() -> None:
    """Byte-compile the cairn_cli that `cairn` imports (pip does it on install; a checkout run under
    PYTHONDONTWRITEBYTECODE would compile every changed module in every timed process)."""
    where = subprocess.run(
        [sys.executable, "-c", "import cairn_cli, os; print(os.path.dirname(cairn_cli.__file__))"],
        env=env_for(Path(tempfile.gettempdir())),
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run([sys.executable, "-m", "compileall", "-q", where], check=True)


def hook_payload(prompt: str) -> str:
    payload = {"session_id": "bench-hook", "cwd": "/src/bench", "hook_event_name": "UserPromptSubmit", "prompt": prompt}
    if TRANSCRIPT.exists():
        payload["transcript_path"] = str(TRANSCRIPT)
    return json.dumps(payload)


WARM_WINDOWS = 5  # at most this many windows of OBSERVE_MIN stage calls for the learnt margin to settle
_RUN = iter(range(10**9))


def fresh(i: int) -> str:
    """A prompt never ranked before in this run: the daemon caches scores per window, so a repeated prompt would
    time the cache (a retried prompt costs nothing), not the stage."""
    return f"{PROMPTS[i % len(PROMPTS)]} (attempt {next(_RUN)})"


def bare_run(into: list[float] | None) -> None:
    """One `python -c pass`, timed into `into` (a row's own baseline, run by run beside it); None: nothing."""
    if into is not None:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], capture_output=True)
        into.append((time.perf_counter() - t0) * 1000)


def timed(cmd: list[str], env: dict, runs: int, *, hook: bool = False, bare: list[float] | None = None) -> list[float]:
    out = []
    for i in range(runs):
        bare_run(bare)
        args = [a.replace("{prompt}", fresh(i)) for a in cmd]
        stdin = hook_payload(fresh(i)) if hook else None
        t0 = time.perf_counter()
        proc = subprocess.run(args, env=env, capture_output=True, text=True, input=stdin)
        out.append((time.perf_counter() - t0) * 1000)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed: {proc.stderr}")
    return out


def rank_cmd() -> list[str]:
    cmd = [CAIRN, "rank", "{prompt}", "--scope", "bench", "--session", "bench", "-k", "5"]
    return cmd + (["--transcript", str(TRANSCRIPT)] if TRANSCRIPT.exists() else [])


def check_path(home: Path, env: dict, expect_ranker: str, expect_reranker: str) -> None:
    proc = subprocess.run(
        [a.replace("{prompt}", PROMPTS[0]) for a in rank_cmd()] + ["--json"], env=env, capture_output=True, text=True
    )
    res = json.loads(proc.stdout)
    if res["ranker"] != expect_ranker or (expect_reranker and res["reranker_model"].split(":")[0] != expect_reranker):
        raise SystemExit(f"unexpected path: {res['ranker']} / {res['reranker_model']} ({res['notes']})")


def wait_for_plan(home: Path, env: dict, budget: float, timeout_s: float = 900) -> dict:
    """The daemon measures and plans a changed reranker in the background: rank until it serves the student with
    a plan for `budget`; returns that plan."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        check_path(home, env, "cairn", None)
        status = daemon(home, env, "status")
        plan = status.get("rerank_plan") or {}
        if budget > 0 and plan.get("budget_ms") == budget:
            return plan
        # no budget: the student as configured, without a plan
        student = str(status.get("reranker")).startswith("student")
        dtype = status.get("reranker_dtype") == env.get("CAIRN_RERANKER_DTYPE", status.get("reranker_dtype"))
        if budget <= 0 and not plan and student and dtype:
            return {"reason": "no budget: the stage as configured", "budget_ms": 0}
        time.sleep(0.5)
    raise SystemExit(f"the daemon did not plan the student for a {budget} ms budget")


def stage_times(env: dict, runs: int, bare: list[float] | None = None) -> tuple[list[float], list[float], dict]:
    """(whole-process ms, the rerank stage's ms as the daemon timed it, one result's plan) of `cairn rank`."""
    whole, stage, plan = [], [], {}
    for i in range(runs):
        bare_run(bare)
        args = [a.replace("{prompt}", fresh(i)) for a in rank_cmd()] + ["--json"]
        t0 = time.perf_counter()
        proc = subprocess.run(args, env=env, capture_output=True, text=True)
        whole.append((time.perf_counter() - t0) * 1000)
        res = json.loads(proc.stdout)
        if "rerank" in res["timings_ms"]:
            stage.append(res["timings_ms"]["rerank"])
        if res["memories"]:
            plan = res["memories"][0]["components"].get("rerank_plan") or plan
    return whole, stage, plan


def stats(ms: list[float], bare: float | list[float]) -> dict:
    """p50, p95 and the ratio of the p50 to bare python's: `bare` a p50, or the row's own interleaved bare runs."""
    p50 = statistics.median(ms)
    p95 = metrics.percentile(ms, 95)
    out = {"p50_ms": round(p50, 1), "p95_ms": round(p95, 1), "n": len(ms)}
    if isinstance(bare, list):
        out["bare_p50_ms"] = round(statistics.median(bare), 1)
        bare = statistics.median(bare)
    return {**out, "x_bare": round(p50 / bare, 2)}


def daemon(home: Path, env: dict, action: str) -> dict:
    proc = subprocess.run(
        [CAIRN, "daemon", action, "--json", *(["--wait", "600"] if action == "start" else [])],
        env=env,
        capture_output=True,
        text=True,
    )
    return json.loads(proc.stdout) if proc.stdout.strip() else {}


PLANS = {  # name -> (environment, what the row is)
    "plan": ({"CAIRN_RERANK_BUDGET_MS": "150"}, "budgeted plan (CAIRN_RERANK_BUDGET_MS=150)"),
    "fp32_20@128": (
        {"CAIRN_RERANK_BUDGET_MS": "0", "CAIRN_RERANKER_DTYPE": "fp32", "CAIRN_RERANKER_MAX_LENGTH": "128"},
        "unbudgeted: fp32, top 20, 128 tokens",
    ),
}


# --redaction: the prompt hook with redaction as shipped beside the same hook with it replaced by identity (#28)
NO_SCRUB = "CAIRN_BENCH_NO_SCRUB"
REDACT_MODULE = "cairn_cli.core.redact"  # the one redaction step (it was core/privacy/redact.py before 91f0a90)
# on PYTHONPATH for both arms' hooks and daemons; with NO_SCRUB=1 it swaps the module's functions for identity as
# the module is imported (a finder first on sys.meta_path patches it right after it runs, before anything binds its
# names), so that the hook's prompt, the daemon's window and every log line go through untouched; a process that
# never imports the module (the prompt hook's, with the daemon up) pays nothing for it in either arm
SITECUSTOMIZE = f'''import os
import sys

if os.environ.get("{NO_SCRUB}") == "1":
    from importlib.machinery import PathFinder

    def _same(text):
        return text

    class _PatchRedaction:
        def find_spec(self, name, path=None, target=None):
            if name != "{REDACT_MODULE}":
                return None
            spec = PathFinder.find_spec(name, path)
            run = spec.loader.exec_module

            def run_then_patch(module):
                run(module)
                module.scrub = _same
                module._redact = lambda text: module.Redaction(text, {{}}, 0)

            spec.loader.exec_module = run_then_patch
            return spec

    sys.meta_path.insert(0, _PatchRedaction())
'''
ARMS = ("shipped", "identity")  # redaction as shipped; redaction replaced by identity (the baseline)
BOOTSTRAP = 5000
CPU_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile")
SECRET_PROMPT_MARK = "the deploy step printed"  # in every hook prompt of --redaction, kept by the window
PROBE = "export GITHUB_TOKEN=ghp_" + "A1b2C3d4E5" * 3 + "F6g7H8"  # a secret scrub must take out


def machine() -> dict:
    """The CPU model and the flags the brief of #28 asks for, beside the script's simd summary."""
    from cairn_cli.ml.device import cpu_flags

    model = ""
    with contextlib.suppress(OSError):
        info = Path("/proc/cpuinfo").read_text(errors="replace")
        model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "")
    flags = cpu_flags()
    return {"model": model or "unknown", "flags": [f for f in CPU_FLAGS if f in flags]}


def secret_prompt(prompt: str, i: int, pre_redacted: bool = False) -> str:
    """`prompt` with two secrets a user pastes (a GitHub token, a database URL's password), new ones each run;
    `pre_redacted`: the placeholders scrub puts in their place instead (both arms then rank the same text, and
    scrub finds nothing to replace: the difference is the scan alone)."""
    if pre_redacted:
        return (
            f"{prompt} {SECRET_PROMPT_MARK} DATABASE_URL=postgres://deploy:[redacted:url-password]@db.internal:5432/shop"
            " and I exported GITHUB_TOKEN=[redacted:github-token] before it, is that why the release job cannot push?"
        )
    rng = random.Random(i)
    token = "ghp_" + "".join(
        rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789") for _ in range(36)
    )
    password = "".join(rng.choice("abcdefghijkmnopqrstuvwxyz0123456789") for _ in range(14))
    return (
        f"{prompt} {SECRET_PROMPT_MARK} DATABASE_URL=postgres://deploy:{password}@db.internal:5432/shop and I "
        f"exported GITHUB_TOKEN={token} before it, is that why the release job cannot push?"
    )


def hook_once(env: dict, prompt: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [CAIRN, "hook", "prompt"], env=env, capture_output=True, text=True, input=hook_payload(prompt)
    )
    ms = (time.perf_counter() - t0) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"cairn hook prompt failed: {proc.stderr}")
    return ms


def paired_bootstrap(a: list[float], b: list[float], q: float, reps: int = BOOTSTRAP, seed: int = 28) -> dict:
    """The difference of the q-th nearest-rank percentiles (a - b) and its 95% interval over `reps` resamples of the
    runs, pairs kept together (run i of each arm, timed back to back, resampled as one)."""
    x, y = np.asarray(a), np.asarray(b)
    idx = np.random.default_rng(seed).integers(0, len(x), (reps, len(x)))
    rank = max(0, min(len(x) - 1, int(np.ceil(q / 100 * len(x))) - 1))  # metrics.percentile's nearest rank
    diffs = np.sort(x[idx], axis=1)[:, rank] - np.sort(y[idx], axis=1)[:, rank]
    point = metrics.percentile(a, q) - metrics.percentile(b, q)
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return {"diff_ms": round(point, 2), "ci95_ms": [round(float(lo), 2), round(float(hi), 2)], "resamples": reps}


def median_pair_difference(a: list[float], b: list[float], reps: int = BOOTSTRAP, seed: int = 28) -> dict:
    """The median of the per-run differences (a - b, run i of each timed back to back) and its bootstrap 95% interval:
    steadier than a difference of p95s, which rests on the few slowest runs of each arm."""
    d = np.asarray(a) - np.asarray(b)
    meds = np.median(d[np.random.default_rng(seed).integers(0, len(d), (reps, len(d)))], axis=1)
    lo, hi = np.percentile(meds, [2.5, 97.5])
    return {"diff_ms": round(float(np.median(d)), 2), "ci95_ms": [round(float(lo), 2), round(float(hi), 2)]}


def import_cost(repeats: int = 30) -> dict:
    """Cumulative `-X importtime` of the redaction module in a fresh interpreter (median of `repeats`):
    with byte code cached as an installed cairn has it (PYTHONDONTWRITEBYTECODE unset, after `precompile`), with re
    and collections loaded first (the hook imports them anyway) and in a bare interpreter; and compiled from source
    (PYTHONDONTWRITEBYTECODE=1 and an empty PYTHONPYCACHEPREFIX: what this environment's default pays without a
    cache)."""
    target = f"import {REDACT_MODULE}"
    variants = {
        "cached_after_stdlib": ({}, "import re, collections, collections.abc; " + target),
        "cached_bare": ({}, target),
    }
    out: dict = {}
    with tempfile.TemporaryDirectory() as empty:
        variants["from_source"] = ({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": empty}, target)
        for name, (extra, code) in variants.items():
            env = {**env_for(Path(empty)), **extra}
            cost = []
            for _ in range(repeats):
                proc = subprocess.run(
                    [sys.executable, "-X", "importtime", "-c", code],
                    env=env,
                    cwd=empty,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                us = 0
                for line in proc.stderr.splitlines():
                    parts = line.split("|")
                    if line.startswith("import time:") and len(parts) == 3 and parts[2].strip() == REDACT_MODULE:
                        us += int(parts[1])
                cost.append(us / 1000)
            out[name] = {"p50_ms": round(statistics.median(cost), 2), "n": repeats}
    return out


def check_windows(envs: dict[str, dict], marker: str = "ghp_") -> dict:
    """Per arm, from its own store: the hook turns the daemon logged (their rankers: `cairn`, none in-process) and
    how many of their logged windows still hold the pasted GitHub token (identity: all; shipped: none)."""
    from cairn_cli import config
    from cairn_cli.db import open_db
    from cairn_cli.db.tables import MemoryDelivery

    seen = {}
    for arm, env in envs.items():
        with stores_of(env):
            open_db(config.memory_db_url(), config.ephemeral_db_url())
            rows = MemoryDelivery.select(
                MemoryDelivery.session_id, MemoryDelivery.turn, MemoryDelivery.ranker, MemoryDelivery.context_window
            )
            turns = {(r.session_id, r.turn): r for r in rows if SECRET_PROMPT_MARK in r.context_window}
            seen[arm] = {
                "turns": len(turns),
                "rankers": sorted({r.ranker for r in turns.values()}),
                "windows_with_secret": sum(marker in r.context_window for r in turns.values()),
                "windows_redacted": sum("[redacted:" in r.context_window for r in turns.values()),
            }
    return seen


def probe_arms(envs: dict[str, dict]) -> None:
    """Before any timing: in each arm's environment a fresh interpreter scrubs PROBE as that arm should (the shipped
    module takes the token out, identity leaves it); a sitecustomize that failed to patch is only a line on stderr."""
    code = f"import sys; from {REDACT_MODULE} import scrub; sys.stdout.write(scrub(sys.argv[1]))"
    for arm, env in envs.items():
        proc = subprocess.run([sys.executable, "-c", code, PROBE], env=env, capture_output=True, text=True)
        kept = proc.returncode == 0 and proc.stdout == PROBE
        if proc.returncode != 0 or "Error in sitecustomize" in proc.stderr or kept != (arm == "identity"):
            raise SystemExit(f"the {arm} arm does not scrub as it should: {proc.stdout!r} {proc.stderr.strip()}")


def code_state() -> dict:
    """HEAD and the uncommitted changes under cairn_cli/: the code the timed processes import (a checkout that
    changes during the run times two versions)."""

    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    return {
        "head": git("rev-parse", "--short", "HEAD"),
        "dirty": git("status", "--porcelain", "cairn_cli").splitlines(),
    }


def redaction_bench(args) -> int:
    """#28: `cairn hook prompt` with redaction as shipped vs replaced by identity, interleaved run by run, one daemon
    per arm (each its own CAIRN_HOME over copies of one store; the identity arm's daemon scrubs nothing either)."""
    import shutil

    from cairn_cli.ml.device import simd_summary

    n = int(args.sizes.split(",")[0])
    results: dict = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(["scripts/bench_hot_path.py", *sys.argv[1:]]),
        "memories": n,
        "pre_redacted": args.pre_redacted,
        "runs_per_arm": args.runs,
        "cpu": {**machine(), "simd_summary": simd_summary(), "cores": os.cpu_count()},
        "python": sys.version.split()[0],
        "transcript": TRANSCRIPT.name if TRANSCRIPT.exists() else None,
        "pythondontwritebytecode_in_environment": os.environ.get("PYTHONDONTWRITEBYTECODE"),
        "code_start": code_state(),
    }
    precompile()
    results["import_cost"] = import_cost()
    results["load_start"] = [round(x, 2) for x in os.getloadavg()]
    envs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        homes = {arm: Path(tmp) / arm for arm in ARMS}
        t0 = time.perf_counter()
        make_store(homes["shipped"], n)
        shutil.copytree(homes["shipped"], homes["identity"])
        print(f"[{n}] store built and copied in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
        for arm in ARMS:  # the composite only: the cross-encoder's stage adds the same to both arms, and its noise
            envs[arm] = env_for(homes[arm], CAIRN_RERANKER_ENABLED="false", CAIRN_HOOK_SCOPE="bench", PYTHONPATH=path)
        envs["identity"][NO_SCRUB] = "1"
        probe_arms(envs)
        try:
            for arm in ARMS:
                daemon(homes[arm], envs[arm], "start")
                check_path(homes[arm], envs[arm], "cairn", "none")
            for i in range(5):  # warm both daemons' scoring tables and the page cache
                for arm in ARMS:
                    hook_once(envs[arm], secret_prompt(fresh(i), -1 - i, args.pre_redacted))
            ms: dict[str, list[float]] = {arm: [] for arm in ARMS}
            beside: list[float] = []
            for i in range(args.runs):
                bare_run(beside)
                prompt = secret_prompt(
                    fresh(i), i, args.pre_redacted
                )  # the same prompt to both arms (each daemon sees it once)
                for arm in ARMS if i % 2 == 0 else ARMS[::-1]:  # alternate which arm goes first
                    ms[arm].append(hook_once(envs[arm], prompt))
            results["rss_mb"] = {arm: daemon(homes[arm], envs[arm], "status").get("rss_mb") for arm in ARMS}
        finally:
            for arm in ARMS:
                daemon(homes[arm], envs[arm], "stop")
        results["load_end"] = [round(x, 2) for x in os.getloadavg()]
        results["arms"] = {arm: stats(ms[arm], beside) for arm in ARMS}
        results["paired"] = {
            "p95": paired_bootstrap(ms["shipped"], ms["identity"], 95),
            "p50": paired_bootstrap(ms["shipped"], ms["identity"], 50),
            "median_of_pair_differences": median_pair_difference(ms["shipped"], ms["identity"]),
        }
        results["windows"] = check_windows(envs)
        results["code_end"] = code_state()
        w = results["windows"]
        results["valid"] = (
            results["code_start"] == results["code_end"]
            and all(w[arm]["turns"] == args.runs + 5 and w[arm]["rankers"] == ["cairn"] for arm in ARMS)
            and w["identity"]["windows_with_secret"] == (0 if args.pre_redacted else w["identity"]["turns"])
            and w["shipped"]["windows_with_secret"] == 0
        )
        results["runs_ms"] = {arm: [round(x, 2) for x in ms[arm]] for arm in ARMS}
    write_redaction(results, Path(args.out), args.name)
    return 0 if results["valid"] else 1


def write_redaction(results: dict, out: Path, name: str) -> None:
    out.mkdir(exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2))
    cpu, imp, pair = results["cpu"], results["import_cost"], results["paired"]
    ok = pair["p95"]["ci95_ms"][1] <= 2.0
    start, end = results["code_start"], results["code_end"]
    lines = [
        "# Redaction on the prompt hook: `cairn hook prompt` with redaction as shipped vs replaced by identity (#28)",
        "",
        *(
            []
            if results["valid"]
            else [
                "**NOT VALID: the code changed during the run, or an arm did not scrub as it should (the check at the "
                "end)**",
                "",
            ]
        ),
        f"- code: {start['head']}{' + uncommitted changes in cairn_cli/' if start['dirty'] else ''} at the start, "
        f"{end['head']}{' + uncommitted changes in cairn_cli/' if end['dirty'] else ''} at the end",
        f"- date: {results['date']}; machine: {cpu['model']}, {cpu['cores']} cores, no GPU; CPU flags: "
        f"{' '.join(cpu['flags']) or 'none of ' + '/'.join(CPU_FLAGS)}; python {results['python']}",
        f"- command: `python {results['command']}`; load average at the start {results['load_start']}, at the end "
        f"{results['load_end']}",
        f"- {results['memories']:,} synthetic memories (one store, copied: one CAIRN_HOME and one warm daemon per arm), "
        "composite only (the reranker off: its stage costs both arms the same and only adds noise), the composite "
        "floor off, k=5",
        f"- payload: a UserPromptSubmit with transcript_path = {results['transcript']} (the window keeps the prompt "
        "and the last turns, each scrubbed in the daemon) and a prompt of ~300 characters with two secrets pasted "
        "(a GitHub token, a postgres URL's password), new ones and a new prompt each run, the same to both arms"
        + (
            "; PRE-REDACTED: the placeholders scrub would put stand in the prompt instead of the secrets (both arms "
            "rank the same text; the difference is scrub's scan alone)"
            if results["pre_redacted"]
            else ""
        ),
        f"- identity: a sitecustomize.py on PYTHONPATH that, with {NO_SCRUB}=1, replaces scrub "
        "and _redact (core/redact.py) by identity as the module loads, in the hook "
        "processes and in that arm's daemon; both arms have it on PYTHONPATH, only the identity arm sets the variable",
        f"- interleaved: {results['runs_per_arm']} runs per arm, run i of each back to back with the same prompt, "
        "the arm that goes first alternating; one bare `python -c pass` before each pair",
        "",
        "| arm | p50 ms | p95 ms | runs | × bare python | bare python beside it, p50 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for arm, label in zip(ARMS, ("redaction as shipped", "redaction replaced by identity")):
        r = results["arms"][arm]
        lines.append(f"| {label} | {r['p50_ms']} | {r['p95_ms']} | {r['n']} | {r['x_bare']} | {r['bare_p50_ms']} |")
    lines += [
        "",
        f"Paired differences (shipped - identity), 95% intervals from {pair['p95']['resamples']} bootstrap resamples "
        "of the runs (pairs kept together):",
        "",
        "| measure | difference ms | 95% interval ms |",
        "|---|---:|---:|",
        f"| p95 | {pair['p95']['diff_ms']} | {pair['p95']['ci95_ms'][0]} .. {pair['p95']['ci95_ms'][1]} |",
        f"| p50 | {pair['p50']['diff_ms']} | {pair['p50']['ci95_ms'][0]} .. {pair['p50']['ci95_ms'][1]} |",
        f"| median of the per-run differences | {pair['median_of_pair_differences']['diff_ms']} | "
        f"{pair['median_of_pair_differences']['ci95_ms'][0]} .. {pair['median_of_pair_differences']['ci95_ms'][1]} |",
        "",
        (
            "Both arms rank the same text here, and scrub finds nothing to replace: the difference is its scan alone "
            "(the warm daemon's scrub of the window; the hook's own process imports the module only when it has work)."
            if results["pre_redacted"]
            else "The identity arm also ranks the raw secrets (random characters: likely more model tokens than their placeholders, "
            "not measured here): "
            "the difference mixes scrub's cost with what the placeholders save downstream (`--pre-redacted` times the "
            "scan alone)."
        ),
        "",
        f"Budget of #28, ≤ 2 ms p95: {'met' if ok else 'not shown'} (the upper end of the p95 difference's interval "
        f"{'≤' if ok else '>'} 2 ms).",
        "",
        "The prompt hook's own process imports the redaction module only when it has work (a prompt holding `<`, a "
        "summary line with notes); the daemon imports it once. The same processes import it in both arms (the "
        "identity arm's finder patches it as it loads), so its cost is in the differences above whenever it is paid. "
        f"What one import costs (`-X importtime`, cumulative of {REDACT_MODULE}, median of "
        f"{imp['cached_after_stdlib']['n']} fresh interpreters):",
        "",
        "| how | import ms |",
        "|---|---:|",
        f"| byte code cached, re and collections already loaded (as in the hook) | "
        f"{imp['cached_after_stdlib']['p50_ms']} |",
        f"| byte code cached, a bare interpreter | {imp['cached_bare']['p50_ms']} |",
        f"| compiled from source (PYTHONDONTWRITEBYTECODE=1, no cache) | {imp['from_source']['p50_ms']} |",
        "",
        f"This environment sets PYTHONDONTWRITEBYTECODE={results['pythondontwritebytecode_in_environment']}: a module "
        "without a cached .pyc is compiled from source in every process (the last row). The timed processes run "
        "without it, after `compileall` of cairn_cli, as an installed cairn (pip compiles on install).",
        "",
        "Check, from each arm's own store: the turns its daemon logged and how many logged windows kept a secret "
        f"(valid: every turn by the daemon, identity's windows all keep it unless pre-redacted, shipped's none): {results['valid']}",
        "",
        "| arm | turns logged | rankers | windows with the GitHub token | windows with a placeholder |",
        "|---|---:|---|---:|---:|",
    ]
    for arm in ARMS:
        w = results["windows"][arm]
        lines.append(
            f"| {arm} | {w['turns']} | {', '.join(w['rankers'])} | {w['windows_with_secret']} | "
            f"{w['windows_redacted']} |"
        )
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=None, help="memories per store (default 1000,10000,100000; --redaction: 1000)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument(
        "--rank-profile",
        default=None,
        help="force CAIRN_RANK_PROFILE (the synthetic stores are plain notes: dialog times the costliest profile)",
    )
    ap.add_argument("--student-layers", type=int, default=None, help="a shallower student (default: all 6 layers)")
    ap.add_argument(
        "--learned",
        action="store_true",
        help="also the hook with a learned embedder deployed (#27) beside the composite-only hook",
    )
    ap.add_argument(
        "--redaction",
        action="store_true",
        help="only the prompt hook with redaction as shipped vs replaced by identity, interleaved (#28), at the "
        "first of --sizes",
    )
    ap.add_argument(
        "--pre-redacted",
        action="store_true",
        help="with --redaction: the prompt holds the placeholders instead of the secrets (the scan's cost alone)",
    )
    ap.add_argument(
        "--name", default=None, help="results file name in --out (default hot_path; --redaction: redaction_hot_path)"
    )
    ap.add_argument("--out", default=str(ROOT / "bench"))
    ap.add_argument(
        "--plans", default=",".join(PLANS), help="rerank plans measured (empty: the composite and fallback)"
    )
    args = ap.parse_args()
    if args.rank_profile:
        RUN_ENV["CAIRN_RANK_PROFILE"] = args.rank_profile
    if args.redaction:
        args.sizes, args.name = (
            args.sizes or "1000",
            args.name or "redaction_hot_path" + ("_pre_redacted" if args.pre_redacted else ""),
        )
        return redaction_bench(args)
    args.sizes, args.name = args.sizes or "1000,10000,100000", args.name or "hot_path"
    from cairn_cli.ml.device import simd_summary

    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict = {"bare_python": None, "sizes": {}, "cpu_flags": simd_summary(), "cores": os.cpu_count()}
    results["rank_profile"] = args.rank_profile or "auto (the synthetic stores are plain notes)"
    precompile()
    results["load_start"] = [round(x, 2) for x in os.getloadavg()]
    bare = timed([sys.executable, "-c", "pass"], dict(os.environ), args.runs)
    results["bare_python"] = stats(bare, statistics.median(bare))
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            home = Path(tmp) / f"s{n}"
            t0 = time.perf_counter()
            make_store(home, n)
            make_student(home, args.student_layers)
            print(f"[{n}] store built in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
            row: dict = {}
            # composite only: the daemon with the reranker switched off
            env_c = env_for(home, CAIRN_RERANKER_ENABLED="false")
            daemon(home, env_c, "start")
            check_path(home, env_c, "cairn", "none")
            timed(rank_cmd(), env_c, 3)  # warm the scoring table
            beside: list[float] = []  # each row's own bare python runs, one before each of its runs
            row["daemon_composite"] = stats(timed(rank_cmd(), env_c, args.runs, bare=beside), beside)
            # composite + the student's rerank stage (same daemon, reranker on): the budgeted plan, then the
            # unbudgeted stage; and what Claude Code runs, the hook (rules, A/B draw, hook_state), on each
            env_r = env_c
            for name, (extra, _) in PLANS.items():
                if name not in args.plans.split(","):
                    continue
                env_r = env_for(home, **extra)
                plan = wait_for_plan(home, env_r, float(extra["CAIRN_RERANK_BUDGET_MS"]))
                # warm: with a budget, stage calls until the daemon's learnt p95 margin (core/ranking/plan.py) has
                # settled: a window of OBSERVE_MIN calls that leaves it unchanged, as in a daemon that has run a while
                stage_times(env_r, 3)
                if plan.get("budget_ms"):
                    margins = [(daemon(home, env_r, "status").get("rerank_plan") or {}).get("margin")]
                    for _ in range(WARM_WINDOWS):
                        stage_times(env_r, OBSERVE_MIN)
                        margins.append((daemon(home, env_r, "status").get("rerank_plan") or {}).get("margin"))
                        if len(margins) > 2 and margins[-1] == margins[-2]:
                            break
                    learnt = daemon(home, env_r, "status").get("rerank_plan") or {}
                    row["plan_learnt"] = {
                        k: learnt.get(k) for k in ("reason", "margin", "observed", "candidates", "max_length")
                    }
                    row["plan_learnt"]["margins"] = margins  # at the start, then after each warm-up window
                    row["plan_fitted"] = {k: plan.get(k) for k in ("reason", "margin", "candidates", "max_length")}
                beside = []
                whole, stage, used = stage_times(env_r, args.runs, bare=beside)
                row[f"daemon_rerank_{name}"] = {**stats(whole, beside), "plan": used}
                row[f"stage_{name}"] = (
                    {
                        "p50_ms": round(statistics.median(stage), 1),
                        "p95_ms": round(metrics.percentile(stage, 95), 1),
                        "n": len(stage),
                    }
                    if stage
                    else {"skipped": plan.get("reason") or "no rerank stage ran", "n": 0}
                )
                env_h = {**env_r, "CAIRN_HOOK_SCOPE": "bench"}
                timed([CAIRN, "hook", "prompt"], env_h, 2, hook=True)
                beside = []
                row[f"hook_prompt_{name}"] = stats(
                    timed([CAIRN, "hook", "prompt"], env_h, args.runs, hook=True, bare=beside), beside
                )
                if name == "plan":
                    row["plan_measured"] = {k: plan.get(k) for k in ("reason", "throughput", "fidelity")}
            health = daemon(home, env_r, "status")
            row["daemon_rss_mb"] = health.get("rss_mb")
            daemon(home, env_r, "stop")
            if args.learned:  # the learned ranking #27 deploys: the composite over a learned embedder's vectors
                env_h = {**env_c, "CAIRN_HOOK_SCOPE": "bench"}
                daemon(home, env_c, "start")
                timed([CAIRN, "hook", "prompt"], env_h, 2, hook=True)
                beside = []
                row["hook_prompt_composite"] = stats(
                    timed([CAIRN, "hook", "prompt"], env_h, args.runs, hook=True, bare=beside), beside
                )
                daemon(home, env_c, "stop")
                name = deploy_learned_embedder(home)
                daemon(home, env_c, "start")
                served = daemon(home, env_c, "status").get("embed_model")
                if served != name:
                    raise SystemExit(f"the daemon serves {served}, not the learned embedder {name}")
                timed(rank_cmd(), env_c, 3)
                beside = []
                row["daemon_learned_embedder"] = stats(timed(rank_cmd(), env_c, args.runs, bare=beside), beside)
                timed([CAIRN, "hook", "prompt"], env_h, 2, hook=True)
                beside = []
                row["hook_prompt_learned_embedder"] = stats(
                    timed([CAIRN, "hook", "prompt"], env_h, args.runs, hook=True, bare=beside), beside
                )
                daemon(home, env_c, "stop")
            # daemon down: the in-process lexical fallback
            check_path(home, env_c, "cairn-fallback", "none")
            beside = []
            row["fallback"] = stats(timed(rank_cmd(), env_c, args.runs, bare=beside), beside)
            results["sizes"][n] = row
            print(f"[{n}] {row}", file=sys.stderr)
    first = results["sizes"][sizes[0]]
    for n in sizes:
        for key in [k for k in first if isinstance(first[k], dict) and "p50_ms" in first[k] and k != "fallback"]:
            results["sizes"][n][key]["x_smallest"] = round(results["sizes"][n][key]["p50_ms"] / first[key]["p50_ms"], 2)
    results["load_end"] = [round(x, 2) for x in os.getloadavg()]
    write(results, Path(args.out), args, sizes)
    return 0


def write(results: dict, out: Path, args, sizes: list[int]) -> None:
    out.mkdir(exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(results, indent=2))
    b = results["bare_python"]
    lines = [
        "# Hot path: `cairn rank` and `cairn hook prompt` as new processes",
        "",
        f"- date: {dt.datetime.now().isoformat(timespec='seconds')}; machine: {results['cores']} cores, no GPU; "
        f"CPU flags: {results['cpu_flags']}",
        f"- command: `python scripts/bench_hot_path.py --sizes {args.sizes} --runs {args.runs}`"
        + (f" --plans '{args.plans}'" if args.plans != ",".join(PLANS) else "")
        + (f" --student-layers {args.student_layers}" if args.student_layers else "")
        + (" --learned" if args.learned else ""),
        f"- student: the bundled MiniLM + a fresh head, {args.student_layers or 6} transformer layers",
        f"- context: prompt + the last turns of a real transcript ({TRANSCRIPT.name}), k=5, deliveries logged; "
        "the hook rows also draw the A/B arm, print the rules and record hook_state",
        f"- bare `python -c pass`: p50 {b['p50_ms']} ms, p95 {b['p95_ms']} ms at the start; each row's ratio is to "
        "its own bare python runs, one before each of its runs (their p50 in the last column), so that a change in "
        f"the machine's load falls on both; load average at the start {results.get('load_start')}, at the end "
        f"{results.get('load_end')}",
        "- the composite floor is off (random-vector stores: every prompt pays the full path)",
        "",
        "| memories | path | p50 ms | p95 ms | × bare python | × the smallest store | bare python beside it, p50 ms |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        row = results["sizes"][n]
        labels = [("daemon_composite", "daemon, composite only")]
        for name, (_, what) in PLANS.items():
            if f"daemon_rerank_{name}" not in row:
                continue
            used = row[f"daemon_rerank_{name}"].get("plan") or {
                "precision": "fp32",
                "candidates": 20,
                "max_length": 128,
            }
            shape = f"{used.get('precision')}, {used.get('candidates')} candidates, {used.get('max_length')} tokens"
            labels += [
                (f"daemon_rerank_{name}", f"daemon + rerank, {what} [{shape}]"),
                (f"hook_prompt_{name}", f"`cairn hook prompt`, {what}"),
            ]
        if "daemon_learned_embedder" in row:
            labels += [
                ("hook_prompt_composite", "`cairn hook prompt`, composite only"),
                ("daemon_learned_embedder", "daemon, composite over a learned embedder's vectors (#27)"),
                ("hook_prompt_learned_embedder", "`cairn hook prompt`, composite over a learned embedder's vectors"),
            ]
        for key, label in labels + [("fallback", "daemon down: lexical fallback")]:
            r = row[key]
            lines.append(
                f"| {n:,} | {label} | {r['p50_ms']} | {r['p95_ms']} | {r['x_bare']} | {r.get('x_smallest', '')} | "
                f"{r.get('bare_p50_ms', '')} |"
            )
    lines += [
        "",
        "The rerank stage alone, as the daemon timed it (`timings_ms.rerank`):",
        "",
        "| memories | stage | p50 ms | p95 ms |",
        "|---:|---|---:|---:|",
    ]
    for n in sizes:
        for name, (_, what) in PLANS.items():
            if f"stage_{name}" not in results["sizes"][n]:
                continue
            s = results["sizes"][n][f"stage_{name}"]
            if s.get("n"):
                lines.append(f"| {n:,} | {what} | {s['p50_ms']} | {s['p95_ms']} |")
            else:
                lines.append(f"| {n:,} | {what} | skipped: {s.get('skipped')} | |")
    plan = results["sizes"][sizes[0]].get("plan_measured") or {}
    lines += [
        "",
        f"The plan the daemon measured on this CPU: {plan.get('reason')}",
        "",
        "| precision | pairs/s @128 | @96 | @64 | top-5 overlap vs fp32 | Spearman | accepted |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for precision, speed in (plan.get("throughput") or {}).items():
        fid = (plan.get("fidelity") or {}).get(precision, {})
        lines.append(
            f"| {precision} | {speed.get('128')} | {speed.get('96')} | {speed.get('64')} | {fid.get('top5')} | "
            f"{fid.get('spearman')} | {fid.get('accepted')} |"
        )
    lines += [
        "",
        "The plan as fitted at load and as learnt from the live stage (core/ranking/plan.py: the p95 of observed / "
        f"fitted time over windows of {OBSERVE_MIN} stage calls of warm-up, until a window left the margin as it was "
        f"or after {WARM_WINDOWS}, before the timed runs above):",
        "",
        "| memories | fitted: margin, plan | margin after each warm-up window | learnt: margin (observed p95 over calls), plan |",
        "|---:|---|---|---|",
    ]
    for n in sizes:
        fitted, learnt = results["sizes"][n].get("plan_fitted") or {}, results["sizes"][n].get("plan_learnt") or {}
        seen = learnt.get("observed") or {}
        lines.append(
            f"| {n:,} | {fitted.get('margin')}: {fitted.get('reason')} | {learnt.get('margins')} | {learnt.get('margin')} "
            f"({seen.get('p95_ms')} ms over {seen.get('calls')} calls): {learnt.get('reason')} |"
        )
    lines += ["", "| memories | daemon resident memory (MB) |", "|---:|---:|"]
    lines += [f"| {n:,} | {results['sizes'][n]['daemon_rss_mb']} |" for n in sizes]
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
