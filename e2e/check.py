"""`make e2e`: the three real agent CLIs drive cairn for two turns each, offline, and what cairn recorded is checked.

    python e2e/check.py                  # all three; `--agents codex,claude` for some
    python e2e/check.py --json           # the result as one JSON document on stdout

1. Node and npm: missing, it is a failure under ``CI=true`` (exit 1), else a skip with the reason (exit 0).
2. ``install_clis.py``: the pinned CLIs into the cache (``$CAIRN_E2E_NPM`` or ``~/.cache/cairn-e2e/npm``).
3. Inside ``unshare -n`` with only loopback up (when it works; as root it does): a fresh store (``CAIRN_HOME`` in
   the run dir) holding the example memories, cairn's daemon, and then Codex CLI, Gemini CLI and Claude Code in
   turn, each with its hooks installed by ``cairn hook install --agent <agent> --project`` (what a user runs) and
   two turns against the fake model API (``run_agent.py``). One store serves the three, as on a developer's machine.
4. The checks, from the fake model API's request log and cairn's own ``--json`` reports, per agent: both turns
   ran; each turn's delivered memories are in the model's request; deliveries logged for both turns; the grades
   the model gave applied; each turn's new memory written with the generation version of the turn's A/B arm;
   the agent recorded on every delivery; every Stop applied without a problem; a memory an earlier agent wrote
   shown to a later one; `cairn doctor` in the Codex project names the hooks Codex does not trust (asked of Codex
   itself); and nothing reached any address but loopback (the namespace had ``lo`` alone and a
   connection elsewhere failed at once), skipped with the reason where ``unshare`` is unavailable.

Exit 0 when every check passed (or the run was skipped outside CI), 1 when one failed, 2 when it could not run.
Everything is kept in the run dir (``~/.cache/cairn-e2e/runs/<time>``, the newest five are kept): ``e2e.json``,
each agent's ``summary.json``, requests, CLI output, and the store.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import install_clis  # noqa: E402
import run_agent  # noqa: E402
from fake_model_api import LEARNED  # noqa: E402

# Codex first, Claude Code last: each later agent can be shown what an earlier one wrote
AGENTS = ("codex", "gemini", "claude")
# the name the fake model writes its memories under, per agent (fake_model_api.AGENT_OF_API)
WRITER = {"claude": "claude-code", "codex": "codex", "gemini": "gemini"}
KEEP_RUNS = 5
EXAMPLES = REPO / "cairn_cli" / "data" / "example_memories.jsonl"


@dataclass
class Check:
    agent: str
    name: str
    status: str  # passed | failed | skipped
    detail: str


def cairn_exe() -> str:
    """The cairn of the interpreter running this (make e2e runs the project's .venv)."""
    exe = Path(sys.executable).parent / "cairn"
    return str(exe) if exe.exists() else shutil.which("cairn") or "cairn"


def cairn_env(home: Path) -> dict[str, str]:
    return {**os.environ, "CAIRN_HOME": str(home), "HF_HUB_OFFLINE": "1"}


def cairn(home: Path, *args: str) -> str:
    """`cairn *args` on the run's store; its stdout (a failure raises with its stderr)."""
    done = subprocess.run([cairn_exe(), *args], env=cairn_env(home), capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"cairn {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return done.stdout


def cairn_json(home: Path, *args: str) -> Any:
    return json.loads(cairn(home, *args, "--json"))


# --------------------------------------------------------------------------------------------------------------
# The checks of one agent's run


def request_bodies(workdir: Path) -> list[dict]:
    log = workdir / "requests.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [r for r in rows if (r.get("reply") or {}).get("ids") is not None]


def check_agent(agent: str, workdir: Path, home: Path, earlier: dict[str, str], stores: dict) -> list[Check]:
    """The checks of one agent; `earlier` maps the sessions of the agents run before to their agent."""
    out: list[Check] = []

    def check(name: str, ok: bool | None, detail: str) -> None:
        out.append(Check(agent, name, "skipped" if ok is None else "passed" if ok else "failed", detail))

    summary = json.loads((workdir / "summary.json").read_text())
    turns = summary.get("turns") or []
    exits = [t.get("exit") for t in turns]
    check("both turns ran", exits == [0, 0], f"exit codes {exits}, {[t.get('seconds') for t in turns]} s")
    session = next((t.get("session_id") for t in turns if t.get("session_id")), None)
    rows = [r for r in stores["deliveries"] if session and r["session_id"] == session]
    by_turn: dict[int, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["turn"], r["rank"])):
        by_turn.setdefault(r["turn"], []).append(r)
    check(
        "deliveries logged for both turns",
        len(by_turn) == 2 and all(by_turn.values()),
        f"session {session}: {', '.join(f'turn {t}: {len(v)}' for t, v in by_turn.items()) or 'none'}",
    )
    agents = sorted({str(r["agent"]) for r in rows})
    check("agent recorded", bool(rows) and agents == [agent], f"agents on the deliveries: {agents}")

    # each turn's delivered ids, in rank order, are the newest injected block of a model request, and the top
    # memory's text is in it (Gemini escapes the block's < and >: compared unescaped)
    bodies = request_bodies(workdir)
    memories = {m["id"]: m for m in stores["memories"]}
    injected = []
    for _, delivered in sorted(by_turn.items()):
        ids = [str(r["memory_id"]) for r in delivered]
        hit = next((b for b in bodies if b["reply"]["ids"] == ids), None)
        top = memories.get(delivered[0]["memory_id"], {}).get("content", "")
        text = html.unescape(html.unescape(json.dumps(hit["body"], ensure_ascii=False))) if hit else ""
        top_json = json.dumps(top, ensure_ascii=False)[1:-1]  # the body is compared as JSON text
        injected.append(hit is not None and top_json in text)
    check(
        "injected memories in the model request",
        bool(injected) and all(injected),
        f"per turn: {injected}; requests answered: {len(bodies)}",
    )
    graded = [(r["turn"], r["rank"], r["grade"]) for r in rows]
    expected = all(r["grade"] == (3 if i == 0 else 1) for v in by_turn.values() for i, r in enumerate(v))
    check("grades applied", bool(rows) and expected, f"(turn, rank, grade): {graded}")

    versions = stores["ab"].get("versions") or {}
    written = []
    for turn, delivered in sorted(by_turn.items()):
        topic = "proxy" if turn == 1 else "tests"
        content = f"E2E {WRITER[agent]}: {LEARNED[topic][WRITER[agent]]}"
        memory = next((m for m in stores["memories"] if m["content"] == content), None)
        arm = delivered[0].get("arm")
        want = versions.get(arm) if arm else None
        ok = memory is not None and memory["session_id"] == session and memory["source_ref"] == want
        written.append(ok)
        if memory is None:
            written_detail = f"turn {turn}: not in the store"
        else:
            written_detail = f"turn {turn}: memory {memory['id']} source_ref {memory['source_ref']} (arm {arm}: {want})"
        check(f"turn {turn}'s memory written with its generation version", ok, written_detail)

    stops = [line for line in stores["hook_log"] if session and f"stop session {session} " in line]
    clean = [" 0 problems" in line for line in stops]
    check("every Stop applied without a problem", len(stops) == 2 and all(clean), f"{len(stops)} stops: {clean}")

    if not earlier:
        check("shown what an earlier agent wrote", None, "the first agent of the run")
    else:
        seen = sorted(
            {
                earlier[m["session_id"]]
                for r in rows
                if (m := memories.get(r["memory_id"])) and m.get("session_id") in earlier
            }
        )
        check(
            "shown what an earlier agent wrote",
            bool(seen),
            f"memories written in {', '.join(seen) or 'no earlier agent'}'s sessions delivered here",
        )

    if agent == "codex":
        check_codex_trust(workdir, home, out)

    network = summary.get("network") or {}
    netns = summary.get("netns") or ""
    if not netns.startswith("loopback-only"):
        check("nothing beyond loopback", None, f"network not isolated ({netns})")
    else:
        interfaces = sorted(network.get("interfaces") or {})
        probe = (network.get("probe") or {}).get("result")
        check(
            "nothing beyond loopback",
            interfaces == ["lo"] and probe == "ENETUNREACH",
            f"interfaces {interfaces}; a connection to 192.0.2.1:80: {probe}",
        )
    return out


def check_codex_trust(workdir: Path, home: Path, out: list[Check]) -> None:
    """`cairn doctor` in the Codex project asks Codex which of cairn's hooks it trusts: none, since the run bypassed
    the review (`--dangerously-bypass-hook-trust`), as a new user's Codex would skip them."""
    codex_bin = install_clis.bin_path("codex")
    env = {
        **cairn_env(home),
        "HOME": str(workdir / "home"),
        "CODEX_HOME": str(workdir / "home" / ".codex"),
        "PATH": os.pathsep.join([str(codex_bin.parent), str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
    }
    done = subprocess.run(
        [cairn_exe(), "doctor", "--only", "hooks", "--json"],
        cwd=workdir / "project" / "webshop",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        findings = json.loads(done.stdout)["findings"]
    except (ValueError, KeyError):
        findings = []
    said = [f["message"] for f in findings if f["message"].startswith("codex:")]
    ok = said == [
        "codex: Codex does not trust cairn's hooks yet, so it skips them without a word: userPromptSubmit "
        "(untrusted), stop (untrusted)"
    ]
    out.append(Check("codex", "doctor asks Codex which hooks it trusts", "passed" if ok else "failed", f"{said}"))


def gather(home: Path) -> dict:
    log = home / "logs" / "hook.log"
    return {
        "deliveries": cairn_json(home, "deliveries", "--limit", "100000"),
        "memories": cairn_json(home, "memory", "list"),
        "ab": cairn_json(home, "ab", "status"),
        "hook_log": log.read_text().splitlines() if log.exists() else [],
    }


# --------------------------------------------------------------------------------------------------------------
# Driving it


def inside(args: argparse.Namespace) -> int:
    """Step 3 and 4, in the isolated network when there is one."""
    run_dir: Path = args.run_dir
    home = run_dir / "cairn-home"
    agents = args.agents
    timings: dict[str, Any] = {}
    started = time.monotonic()
    cairn(home, "memory", "import", str(EXAMPLES))
    cairn(home, "daemon", "start")
    timings["store_and_daemon_s"] = round(time.monotonic() - started, 1)
    sessions: dict[str, str] = {}
    checks: list[Check] = []
    try:
        for agent in agents:
            workdir = run_dir / agent
            began = time.monotonic()
            run_agent.main(
                [
                    agent,
                    "--workdir",
                    str(workdir),
                    "--npm-root",
                    str(args.npm_root),
                    "--cairn",
                    cairn_exe(),
                    f"--env=CAIRN_HOME={home}",
                    "--netns",
                    args.netns,
                ]
            )
            timings[f"{agent}_s"] = round(time.monotonic() - began, 1)
            stores = gather(home)
            earlier = dict(sessions)
            checks += check_agent(agent, workdir, home, earlier, stores)
            summary = json.loads((workdir / "summary.json").read_text())
            for turn in summary.get("turns") or []:
                if turn.get("session_id"):
                    sessions[turn["session_id"]] = agent
    finally:
        try:
            cairn(home, "daemon", "stop")
        except RuntimeError as exc:
            print(f"e2e: {exc}", file=sys.stderr)
    result = {"netns": args.netns, "timings": timings, "checks": [asdict(c) for c in checks]}
    (run_dir / "inside.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


def prune(runs: Path, keep: int) -> None:
    old = sorted((p for p in runs.iterdir() if p.is_dir()), key=lambda p: p.name)[:-keep]
    for path in old:
        shutil.rmtree(path, ignore_errors=True)


def report(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
        return
    for c in result.get("checks", []):
        mark = {"passed": "ok  ", "failed": "FAIL", "skipped": "skip"}[c["status"]]
        print(f"{mark} {c['agent']:7} {c['name']:55} {c['detail']}")
    t = result.get("timings", {})
    print("e2e: " + ", ".join(f"{k} {v}" for k, v in t.items()) + f"; run dir {result.get('run_dir')}")
    print(f"e2e: {result['verdict']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default=",".join(AGENTS), help=f"comma-separated, in order (default {AGENTS})")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--no-unshare", action="store_true", help="do not isolate the network")
    parser.add_argument("--inside", type=Path, default=None, help=argparse.SUPPRESS)  # the run dir, in the netns
    parser.add_argument("--netns", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.agents = [a for a in args.agents.split(",") if a]
    unknown = [a for a in args.agents if a not in AGENTS]
    if unknown:
        parser.error(f"unknown agent(s) {unknown}; choose from {', '.join(AGENTS)}")
    args.npm_root = install_clis.default_root()
    if args.inside is not None:
        args.run_dir = args.inside
        return inside(args)

    in_ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        why = f"{' and '.join(missing)} not on PATH (the agent CLIs need Node 20 and npm)"
        print(f"e2e: {'FAILED' if in_ci else 'skipped'}: {why}", file=sys.stderr)
        return 1 if in_ci else 0

    started = time.monotonic()
    runs = install_clis.default_root().parent / "runs"
    run_dir = runs / time.strftime("%Y%m%dT%H%M%S")
    run_dir.mkdir(parents=True)
    result: dict[str, Any] = {"run_dir": str(run_dir), "agents": args.agents, "checks": [], "timings": {}}
    try:
        installs = [install_clis.install(install_clis.PINS[a], args.npm_root) for a in args.agents]
    except RuntimeError as exc:
        print(f"e2e: could not install the CLIs: {exc}", file=sys.stderr)
        return 2
    warm = all(i["action"] == "cached" for i in installs)
    result["timings"]["install_s"] = round(time.monotonic() - started, 1)
    result["install"] = installs

    isolated, why = (False, "--no-unshare") if args.no_unshare else run_agent.unshare_works()
    me = [sys.executable, str(Path(__file__).resolve()), "--agents", ",".join(args.agents), "--inside", str(run_dir)]
    if isolated:
        netns = "loopback-only"
        cmd = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *me, "--netns", netns]
    else:
        netns = f"none: {why}"
        cmd = [*me, "--netns", netns]
    code = subprocess.call(cmd)
    inside_path = run_dir / "inside.json"
    if code != 0 or not inside_path.exists():
        print(f"e2e: the run inside the namespace failed (exit {code}); see {run_dir}", file=sys.stderr)
        return 2
    inner = json.loads(inside_path.read_text())
    result["checks"] = inner["checks"]
    result["timings"].update(inner["timings"])
    result["timings"]["total_s"] = round(time.monotonic() - started, 1)
    result["npm_cache"] = "warm (installed)" if warm else "cold or partly (npm install ran)"
    failed = [c for c in result["checks"] if c["status"] == "failed"]
    result["verdict"] = (
        f"{len(failed)} of {len(result['checks'])} checks FAILED"
        if failed
        else f"all {sum(c['status'] == 'passed' for c in result['checks'])} checks passed"
        f" ({sum(c['status'] == 'skipped' for c in result['checks'])} skipped) in {result['timings']['total_s']} s,"
        f" CLIs {result['npm_cache']}"
    )
    (run_dir / "e2e.json").write_text(json.dumps(result, indent=2) + "\n")
    report(result, args.json)
    prune(runs, KEEP_RUNS)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
