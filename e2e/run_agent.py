"""Run one real agent CLI for two turns against the fake model API, offline, with hooks registered, and collect it all.

    python e2e/run_agent.py claude            # or codex, gemini
    python e2e/run_agent.py codex --workdir /tmp/e2e-codex --hook-command 'cairn hook {kind}'

What it does, in a fresh work dir (default ``~/.cache/cairn-e2e/runs/<agent>-<time>``):
- re-executes itself inside ``unshare -n`` with only loopback up, when that works (``--no-unshare`` to skip), so
  the CLI can reach nothing but 127.0.0.1;
- starts ``fake_model_api`` on a free loopback port, logging to ``requests.jsonl``;
- makes ``home/`` (HOME, and CODEX_HOME under it) and ``project/webshop/``, writes the agent's configuration
  (provider, auth, trust) and registers the hook command for its prompt and stop events;
- runs turn 1 and turn 2 (a resume of the same session), each CLI's stdout/stderr kept in ``turn<N>.out/.err``;
- copies the transcript the stop payload points at to ``transcript.<ext>`` and writes ``summary.json``: hook
  payload files, where each hook marker landed in the model requests, the graded ids, timings.

The hook command template may use ``{event}`` (the agent's event name), ``{kind}`` (``prompt`` or ``stop``),
``{agent}`` and ``{hooks_dir}``. The default is ``hook_recorder.py`` beside this file. Exit 0 when both turns
exited 0, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fake_model_api import Script, serve  # noqa: E402
from install_clis import bin_path, default_root  # noqa: E402

RUNS_ROOT = default_root().parent / "runs"
PROMPTS = ("Which port does the webshop api proxy forward /api to?", "How do I run the webshop tests?")
TURN_TIMEOUT = 120
FAKE_KEY = "e2e-fake-key-not-a-secret"
# (prompt event, stop event) per agent
EVENTS = {
    "claude": ("UserPromptSubmit", "Stop"),
    "codex": ("UserPromptSubmit", "Stop"),
    "gemini": ("BeforeAgent", "AfterAgent"),
}
DEFAULT_HOOK = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(HERE / 'hook_recorder.py'))} --agent {{agent}} --out {{hooks_dir}}"
)


@dataclass
class Run:
    agent: str
    workdir: Path
    home: Path
    project: Path
    hooks_dir: Path
    cli: Path
    port: int
    hook_command: str
    cairn: str | None = None  # the cairn executable: its `hook install --agent` registers the hooks
    extra_env: dict[str, str] = field(default_factory=dict)
    installed: list[dict] = field(default_factory=list)

    def hook(self, kind: str) -> str:
        prompt_event, stop_event = EVENTS[self.agent]
        return self.hook_command.format(
            event=prompt_event if kind == "prompt" else stop_event,
            kind=kind,
            agent=self.agent,
            hooks_dir=shlex.quote(str(self.hooks_dir)),
        )

    def base_env(self) -> dict[str, str]:
        """A minimal environment: nothing of the caller's agent configuration or keys leaks in."""
        node_dir = Path(shutil.which("node") or "/usr/bin/node").parent
        path = os.pathsep.join(
            dict.fromkeys([str(self.cli.parent), str(node_dir), "/usr/local/bin", "/usr/bin", "/bin"])
        )
        return {
            "PATH": path,
            "HOME": str(self.home),
            "USER": os.environ.get("USER", "root"),
            "LANG": "C.UTF-8",
            "SHELL": "/bin/bash",
            "TERM": "dumb",
            "TZ": "UTC",
            "NO_COLOR": "1",
            "CI": "true",
            # Claude Code keeps per-session notes under $TMPDIR/claude-<uid>/: keep them in the work dir too
            "TMPDIR": str(self.workdir / "tmp"),
            **self.extra_env,
        }

    def register_hooks(self, path: Path, timeout: int, env: dict[str, str]) -> None:
        """The agent's prompt and stop hooks in its project settings file ``path``: written from the template, or,
        with ``cairn``, by ``cairn hook install --agent <agent> --project`` run in the project (what a user runs)."""
        if self.cairn is None:
            prompt_event, stop_event = EVENTS[self.agent]
            hooks = {
                prompt_event: hook_block(self.hook("prompt"), timeout),
                stop_event: hook_block(self.hook("stop"), timeout),
            }
            write_json(path, {"hooks": hooks})
            return
        cmd = [self.cairn, "hook", "install", "--agent", self.agent, "--project", "--json"]
        done = subprocess.run(cmd, cwd=self.project, env=env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
        self.installed.append(json.loads(done.stdout))


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


# --------------------------------------------------------------------------------------------------------------
# One adapter per agent: configure, then the command of each turn


def hook_block(command: str, timeout: int) -> list[dict]:
    return [{"hooks": [{"type": "command", "command": command, "timeout": timeout}]}]


def print_mode(run: Run, prompt: str, resume: str | None) -> list[str]:
    """Claude Code's and Gemini CLI's one-shot form: `-p PROMPT`, JSON out, `--resume` for a later turn."""
    return [str(run.cli), "-p", prompt, "--output-format", "json", *(["--resume", resume] if resume else [])]


class Claude:
    @staticmethod
    def configure(run: Run) -> dict[str, str]:
        env = run.base_env()
        env.update(
            ANTHROPIC_BASE_URL=f"http://127.0.0.1:{run.port}",
            ANTHROPIC_API_KEY=FAKE_KEY,
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_AUTOUPDATER="1",
        )
        run.register_hooks(run.project / ".claude" / "settings.json", 30, env)
        return env

    @staticmethod
    def command(run: Run, turn: int, prompt: str, previous: dict) -> list[str]:
        return print_mode(run, prompt, previous["session_id"] if turn > 1 else None)

    @staticmethod
    def session(stdout: str) -> dict:
        data = json.loads(stdout)
        return {"session_id": data["session_id"], "result": data.get("result")}


class Codex:
    @staticmethod
    def configure(run: Run) -> dict[str, str]:
        codex_home = run.home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(
            "\n".join(
                [
                    'model = "gpt-fake"',
                    'model_provider = "fake"',
                    "check_for_update_on_startup = false",
                    "",
                    "[model_providers.fake]",
                    'name = "fake model API"',
                    f'base_url = "http://127.0.0.1:{run.port}/v1"',
                    'wire_api = "responses"',
                    'env_key = "FAKE_MODEL_API_KEY"',
                    # without a bound Codex retries an unreachable provider for ever ("Reconnecting...")
                    "request_max_retries = 1",
                    "stream_max_retries = 1",
                    "",
                    f"[projects.{json.dumps(str(run.project))}]",
                    'trust_level = "trusted"',
                    "",
                    "[features]",
                    "plugins = false",
                    "apps = false",
                    "remote_plugin = false",
                    "",
                    # analytics on: every exec waits ~5 s at exit trying to export metrics to the network
                    "[analytics]",
                    "enabled = false",
                    "",
                    "[otel]",
                    'metrics_exporter = "none"',
                    "",
                ]
            )
        )
        env = run.base_env()
        env.update(CODEX_HOME=str(codex_home), FAKE_MODEL_API_KEY=FAKE_KEY)
        run.register_hooks(run.project / ".codex" / "hooks.json", 30, env)
        return env

    @staticmethod
    def command(run: Run, turn: int, prompt: str, previous: dict) -> list[str]:
        flags = ["--json", "--skip-git-repo-check", "--dangerously-bypass-hook-trust"]
        if turn > 1:
            return [str(run.cli), "exec", "resume", *flags, previous["session_id"], prompt]
        return [str(run.cli), "exec", *flags, prompt]

    @staticmethod
    def session(stdout: str) -> dict:
        out: dict[str, Any] = {}
        for line in stdout.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("type") == "thread.started":
                out["session_id"] = event["thread_id"]
            item = event.get("item") or {}
            if event.get("type") == "item.completed" and item.get("type") == "agent_message":
                out["result"] = item.get("text")
        return out


class Gemini:
    @staticmethod
    def configure(run: Run) -> dict[str, str]:
        write_json(
            run.home / ".gemini" / "settings.json",
            {
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
                "privacy": {"usageStatisticsEnabled": False},
                "telemetry": {"enabled": False},
            },
        )
        env = run.base_env()
        env.update(
            GOOGLE_GEMINI_BASE_URL=f"http://127.0.0.1:{run.port}",
            GEMINI_API_KEY=FAKE_KEY,
            GEMINI_CLI_TRUST_WORKSPACE="true",
        )
        run.register_hooks(run.project / ".gemini" / "settings.json", 30000, env)
        return env

    @staticmethod
    def command(run: Run, turn: int, prompt: str, previous: dict) -> list[str]:
        return print_mode(run, prompt, "latest" if turn > 1 else None)

    @staticmethod
    def session(stdout: str) -> dict:
        start = stdout.find("{")
        data = json.loads(stdout[start:]) if start >= 0 else {}
        return {"session_id": data.get("session_id"), "result": data.get("response")}


ADAPTERS = {"claude": Claude, "codex": Codex, "gemini": Gemini}


# --------------------------------------------------------------------------------------------------------------
# Analysis of what was collected


def find_paths(value: Any, needle: str, path: str = "") -> list[str]:
    """JSON paths (``input[4].content[0].text``) of the strings in ``value`` that contain ``needle``."""
    if isinstance(value, str):
        return [path] if needle in value else []
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in find_paths(v, needle, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in find_paths(v, needle, f"{path}.{k}" if path else k)]
    return []


def role_at(body: Any, path: str) -> str | None:
    """The ``role`` of the message a JSON path points into (its first list item under messages/input/contents)."""
    head = path.split("]", 1)[0] + "]" if "]" in path else path
    node: Any = body
    try:
        key, index = head.rstrip("]").split("[")
        node = node[key][int(index)]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return node.get("role") if isinstance(node, dict) else None


def analyse(run: Run, log_path: Path) -> dict:
    requests = [json.loads(line) for line in log_path.read_text().splitlines()] if log_path.exists() else []
    payloads = sorted(p.name for p in run.hooks_dir.glob("*.json") if not p.name.endswith(".env.json"))
    markers = [f"HOOK-MARKER-{run.agent}-{EVENTS[run.agent][0]}-{n}" for n in (1, 2)]
    landed = []
    for req in requests:
        body = req.get("body")
        for marker in markers:
            for path in find_paths(body, marker):
                landed.append(
                    {"seq": req["seq"], "path": req["path"], "marker": marker, "at": path, "role": role_at(body, path)}
                )
    calls = [
        {
            "seq": r["seq"],
            "method": r["method"],
            "path": r["path"],
            "api": r.get("api"),
            "answer": r.get("answer"),
            "reply_ids": (r.get("reply") or {}).get("ids"),
        }
        for r in requests
    ]
    stop_payloads = [
        json.loads((run.hooks_dir / p).read_text()) for p in payloads if p.endswith(f"-{EVENTS[run.agent][1]}.json")
    ]
    sessions = sorted({json.loads((run.hooks_dir / p).read_text()).get("session_id") for p in payloads} - {None})
    return {
        "requests": calls,
        "hook_payloads": payloads,
        "markers_in_requests": landed,
        "stop_payloads": stop_payloads,
        "hook_session_ids": sessions,
    }


def collect_transcript(run: Run, stop_payloads: list[dict]) -> str | None:
    paths = [p.get("transcript_path") for p in stop_payloads if p.get("transcript_path")]
    if not paths or not Path(paths[-1]).exists():
        return None
    source = Path(paths[-1])
    target = run.workdir / f"transcript{source.suffix}"
    shutil.copyfile(source, target)
    return str(target)


# --------------------------------------------------------------------------------------------------------------
# Driving it


def network_evidence() -> dict:
    """The network this process can use: its interfaces with their byte counters (``/proc/net/dev``) and a
    connection to a non-loopback address (TEST-NET-1, which routes nowhere). Inside ``unshare -n`` with only
    loopback up the interfaces are ``lo`` alone and the probe fails at once with ENETUNREACH: nothing could leave."""
    import errno
    import socket

    interfaces = {}
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, numbers = line.partition(":")
        fields = numbers.split()
        interfaces[name.strip()] = {"rx_bytes": int(fields[0]), "tx_bytes": int(fields[8])}
    probe: dict[str, Any] = {"address": "192.0.2.1:80"}
    try:
        with socket.create_connection(("192.0.2.1", 80), timeout=3):
            probe["result"] = "connected"
    except OSError as exc:
        probe["result"] = errno.errorcode.get(exc.errno or 0, "timeout" if isinstance(exc, TimeoutError) else str(exc))
    return {"interfaces": interfaces, "probe": probe}


def unshare_works() -> tuple[bool, str]:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False, "unshare or ip not on PATH"
    probe = subprocess.run(["unshare", "-n", "sh", "-c", "ip link set lo up"], capture_output=True, text=True)
    if probe.returncode != 0:
        return False, f"unshare -n failed: {probe.stderr.strip()}"
    return True, "unshare -n with loopback up"


def run_cli(cmd: list[str], cwd: Path, env: dict[str, str], log_stem: Path) -> tuple[int | str, str, str]:
    """Run one turn in its own process group; on timeout end the whole group. Output goes to ``<stem>.out/.err``.

    The npm launcher of Codex starts the real binary as a child: a timeout that killed only the launcher would leave
    the agent running (and Codex retries an unreachable provider for ever). Output goes to files, not pipes, so a
    process a hook leaves running (a daemon) cannot hold the turn open.
    """
    out_path, err_path = log_stem.with_suffix(".out"), log_stem.with_suffix(".err")
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
        )
        try:
            code: int | str = proc.wait(timeout=TURN_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = f"timeout after {TURN_TIMEOUT}s"
            kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
    return code, out_path.read_text(), err_path.read_text()


def kill_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def run_turns(run: Run, env: dict[str, str], summary: dict) -> bool:
    adapter = ADAPTERS[run.agent]
    previous: dict = {}
    ok = True
    for turn, prompt in enumerate(PROMPTS, start=1):
        cmd = adapter.command(run, turn, prompt, previous)
        started = time.monotonic()
        code, out, _ = run_cli(cmd, run.project, env, run.workdir / f"turn{turn}")
        seconds = round(time.monotonic() - started, 1)
        try:
            session = adapter.session(out)
        except (ValueError, KeyError) as exc:
            session = {"error": f"could not read the CLI's output: {exc!r}"}
        summary["turns"].append({"turn": turn, "command": cmd, "exit": code, "seconds": seconds, **session})
        ok = ok and code == 0
        if code != 0 or not session.get("session_id"):
            return False
        previous = session
    return ok


def inner(args: argparse.Namespace) -> int:
    agent = args.agent
    workdir = args.workdir.resolve()
    run = Run(
        agent=agent,
        workdir=workdir,
        home=workdir / "home",
        project=workdir / "project" / "webshop",
        hooks_dir=workdir / "hooks",
        cli=bin_path(agent, args.npm_root),
        port=0,
        hook_command=args.hook_command,
        cairn=args.cairn,
        extra_env=dict(item.split("=", 1) for item in args.env),
    )
    if not run.cli.exists():
        print(f"run_agent: {run.cli} missing; run e2e/install_clis.py first", file=sys.stderr)
        return 1
    for folder in (run.home, run.project, run.hooks_dir, workdir / "tmp"):
        folder.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "requests.jsonl"
    markers = [f"HOOK-MARKER-{agent}-{EVENTS[agent][0]}-{n}" for n in (1, 2)]
    server = serve(log_path, Script(markers=markers, default_scope="webshop"))
    run.port = server.server_port
    summary: dict[str, Any] = {
        "agent": agent,
        "workdir": str(workdir),
        "netns": args.netns,
        "port": run.port,
        "turns": [],
    }
    try:
        env = ADAPTERS[agent].configure(run)
        summary["env"] = {k: ("<fake>" if "KEY" in k else v) for k, v in env.items() if k not in run.base_env()}
        ok = run_turns(run, env, summary)
    finally:
        server.shutdown()
        server.server_close()
    summary["hook_install"] = run.installed
    summary["network"] = network_evidence()
    summary.update(analyse(run, log_path))
    summary["transcript"] = collect_transcript(run, summary["stop_payloads"])
    summary["ok"] = ok
    write_json(workdir / "summary.json", summary)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agent", choices=sorted(ADAPTERS))
    parser.add_argument("--workdir", type=Path, help=f"default {RUNS_ROOT}/<agent>-<time>; must not exist yet")
    parser.add_argument("--npm-root", type=Path, default=None, help="the install_clis.py cache folder")
    parser.add_argument("--hook-command", default=DEFAULT_HOOK, help="template: {event} {kind} {agent} {hooks_dir}")
    parser.add_argument("--cairn", default=None, help="register the hooks with this cairn's `hook install --agent`")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="more environment for the CLI")
    parser.add_argument("--no-unshare", action="store_true", help="do not isolate the network")
    parser.add_argument("--netns", default=None, help=argparse.SUPPRESS)  # set by the re-exec inside unshare
    args = parser.parse_args(argv)
    args.npm_root = args.npm_root or default_root()
    if args.netns is not None:
        return inner(args)
    args.workdir = args.workdir or RUNS_ROOT / f"{args.agent}-{time.strftime('%Y%m%dT%H%M%S')}"
    if args.workdir.exists():
        parser.error(f"{args.workdir} exists; give a new --workdir")
    args.workdir.mkdir(parents=True)
    ok, why = (False, "--no-unshare") if args.no_unshare else unshare_works()
    started = time.monotonic()
    rest = [
        args.agent,
        "--workdir",
        str(args.workdir),
        "--npm-root",
        str(args.npm_root),
        "--hook-command",
        args.hook_command,
        *([f"--cairn={args.cairn}"] if args.cairn else []),
        *(f"--env={item}" for item in args.env),
    ]
    me = [sys.executable, str(Path(__file__).resolve())]
    if ok:
        cmd = [
            "unshare",
            "-n",
            "sh",
            "-c",
            'ip link set lo up && exec "$@"',
            "sh",
            *me,
            *rest,
            "--netns",
            "loopback-only",
        ]
    else:
        print(f"run_agent: network not isolated ({why})", file=sys.stderr)
        cmd = [*me, *rest, "--netns", f"none: {why}"]
    code = subprocess.call(cmd)
    print(f"run_agent: {args.agent} exit {code} in {time.monotonic() - started:.1f}s; see {args.workdir}/summary.json")
    return code


if __name__ == "__main__":
    sys.exit(main())
