"""`cairn daemon start|stop|status`: what the status file, the pid and a live health check say, together."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from cairn_cli.daemon import client, singleton
from cairn_cli.daemon.dispatch import spawn
from cairn_cli.errors import ConfigError
from cairn_cli.files import pid_alive


@dataclass
class Status:
    state: str  # running | loading | hung | stale | stopped | failed
    pid: int | None = None
    detail: str = ""
    health: dict = field(default_factory=dict)


def read_status_file(home: Path) -> dict:
    try:
        return orjson.loads(Path(client.status_path(home)).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}


def status(home: Path, timeout_ms: int = 1500) -> Status:
    info = read_status_file(home)
    pid = info.get("pid")
    try:
        health = client.request("health", timeout_ms=timeout_ms, base=home)
        health.pop("ok", None)
        state = health.get("state", "ready")
        if state == "ready":
            return Status("running", health.get("pid"), f"reranker {health.get('reranker')}", health)
        if str(state).startswith("failed"):
            return Status("failed", health.get("pid"), state, health)
        return Status("loading", health.get("pid"), "loading models", health)
    except client.Unavailable as exc:
        reason = str(exc)
    if pid and pid_alive(pid):
        if "did not answer" in reason:
            return Status("hung", pid, reason)
        return Status("hung", pid, f"process alive but {reason}")
    if singleton.held(home):
        return Status("loading", pid, f"a daemon holds daemon.lock but does not answer yet ({reason})")
    if pid or os.path.lexists(client.socket_path(home)):
        return Status("stale", pid, f"left behind by a dead daemon ({reason})")
    return Status("stopped", None, reason)


def cleanup_stale(home: Path) -> None:
    for path in (client.socket_path(home), client.status_path(home)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def start(home: Path, wait_s: float) -> Status:
    current = status(home)
    if current.state in ("running", "loading"):
        return current
    if current.state == "hung":
        return current  # never start a second daemon beside a live one; the operator stops it first
    if current.state == "stale":
        cleanup_stale(home)
    try:
        proc = None if singleton.claim_spawn(home) else spawn(home, "cairn daemon start")  # else one is on its way
    except OSError as exc:  # a read-only CAIRN_HOME: the daemon could not write its socket, lock or log either
        raise ConfigError(
            f"cannot start a daemon: {exc.filename or home}: {exc.strerror or exc}",
            "the daemon needs a writable CAIRN_HOME; ranking works without one, in process",
        ) from None
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return Status("failed", proc.pid, f"daemon exited with {proc.returncode}; see {home / 'logs/daemon.log'}")
        now = status(home, timeout_ms=500)
        if now.state in ("running", "failed"):
            return now
        time.sleep(0.2)
    return status(home)


def stop(home: Path, wait_s: float = 10.0, force: bool = False) -> Status:
    current = status(home, timeout_ms=500)
    pid = current.pid or read_status_file(home).get("pid")
    if current.state == "stopped":
        return current
    if current.state == "stale":
        cleanup_stale(home)
        return Status("stopped", None, "removed a stale socket and status file")
    if pid:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.1)
        if pid_alive(pid):
            if not force:
                return Status("hung", pid, "did not stop on SIGTERM; run `cairn daemon stop --force`")
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
    cleanup_stale(home)
    return Status("stopped", None, f"stopped pid {pid}")
