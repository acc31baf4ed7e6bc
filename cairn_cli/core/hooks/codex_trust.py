"""Whether Codex CLI trusts cairn's hooks, asked of Codex itself: `codex app-server`'s `hooks/list` (the call its
own /hooks view makes) lists each hook of a folder with its trust. Codex keys trust to a hash of each hook's
definition that is Codex's to compute, and runs a hook it does not trust not at all, without a word: `cairn
doctor` asks rather than guesses. Stdlib only; one short-lived process."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cairn_cli.core.hooks.agent_settings import is_cairn_hook

TIMEOUT_S = 20.0  # node starts the app-server binary, which reads the configuration layers: a few seconds at most


@dataclass
class HookTrust:
    event: str  # Codex's name: userPromptSubmit, stop
    command: str
    trust: str  # Codex's trustStatus: trusted, untrusted, modified, …
    source: str  # where Codex found it: project, user, …
    key: str  # Codex's key of the hook (its file, event and position)
    current_hash: str  # the hash Codex records when the hook is trusted


def cairn_hooks(codex: str, cwd: Path, env: dict[str, str], timeout_s: float = TIMEOUT_S) -> list[HookTrust] | str:
    """cairn's hooks as Codex lists them for `cwd`, each with its trust; a string says why Codex could not be asked.
    `codex` is the executable, `env` the environment Codex runs with (HOME, CODEX_HOME)."""
    requests = [
        {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "cairn-doctor", "version": "1"}}},
        {"method": "initialized"},
        {"id": 2, "method": "hooks/list", "params": {"cwds": [str(cwd)]}},
    ]
    try:
        proc = subprocess.Popen(
            [codex, "app-server"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        return f"could not start {codex} app-server: {exc.strerror or exc}"
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"".join(json.dumps(r).encode() + b"\n" for r in requests))
        proc.stdin.flush()
        return _answer(lines, time.monotonic() + timeout_s)
    except OSError as exc:
        return f"codex app-server closed its input: {exc.strerror or exc}"
    finally:
        _end(proc)


def _pump(proc: subprocess.Popen, lines: queue.Queue) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)
    lines.put(b"")  # end of output


def _answer(lines: queue.Queue, deadline: float) -> list[HookTrust] | str:
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return "codex app-server did not answer hooks/list in time"
        if not line:
            return "codex app-server exited before it answered"
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or message.get("id") != 2:
            continue
        if "error" in message:
            return f"codex app-server refused hooks/list: {str(message['error'])[:200]}"
        found = []
        for entry in (message.get("result") or {}).get("data") or []:
            for hook in entry.get("hooks") or []:
                if isinstance(hook, dict) and is_cairn_hook(hook):
                    found.append(
                        HookTrust(
                            str(hook.get("eventName")),
                            str(hook.get("command")),
                            str(hook.get("trustStatus")),
                            str(hook.get("source")),
                            str(hook.get("key")),
                            str(hook.get("currentHash")),
                        )
                    )
        return found


def _end(proc: subprocess.Popen) -> None:
    """Close the app-server and everything it started (node runs the real binary as a child)."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
