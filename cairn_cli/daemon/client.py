"""The hook's side of the daemon: one request per connection, a JSON line out and one back under one deadline, to
a socket we own with mode 0600 (anything else is refused). Stdlib only (no torch, numpy, peewee, rich, typer — and
no orjson, whose import pulls in dataclasses, uuid and zoneinfo; not even json, whose import pulls in re and enum:
wire.py speaks it), and the socket is `_socket`'s: the `socket` module wraps it in enums and imports selectors,
~2.5 ms of the hook's start.
Why the daemon did not answer (NotRunning, Loading, Busy, Slow, NoAnswer) decides what dispatch.py may do next
(docs/hot-path.md)."""

from __future__ import annotations

import _socket
import os
import stat
import time

from cairn_cli import wire

MAX_RESPONSE_BYTES = 64 * 1024 * 1024


BACKOFF_NAME = "daemon.backoff"
DEADLINE_MARGIN_S = 0.25  # the daemon answers "busy" this long before the client would give up (time to be heard)
HEARTBEAT_S = 0.25  # how often a daemon that makes progress touches daemon.json


class Unavailable(Exception):
    """The daemon did not answer (absent, stale, hung, refused). The caller falls back."""


class NotRunning(Unavailable):
    """No daemon listens on the socket (none, stale, or not ours): the only case in which one may be started."""


class Loading(Unavailable):
    """A daemon answered that it is still loading its models."""


class Busy(Unavailable):
    """A daemon is alive but could not take our request in time (listen queue full, or other databases in use)."""


class Slow(Unavailable):
    """Connected, no answer within the deadline, but the daemon's heartbeat is live: slow under load, not hung."""


class NoAnswer(Unavailable):
    """Connected, no answer within the deadline and no heartbeat since: the daemon is hung or stopped."""


class RemoteError(Exception):
    """The daemon answered with an error of the request itself (bad input): do not fall back."""

    def __init__(self, message: str, hint: str | None, exit_code: int):
        super().__init__(message)
        self.message, self.hint, self.exit_code = message, hint, exit_code


def _home(base) -> str:
    if base is not None:
        return str(base)
    from cairn_cli.config import home_dir

    return home_dir()


def socket_path(base=None) -> str:
    """CAIRN_HOME/daemon.sock (strings, not pathlib: this runs on the hot path)."""
    return os.path.join(_home(base), "daemon.sock")


def status_path(base=None) -> str:
    return os.path.join(_home(base), "daemon.json")


def check_socket(path: str) -> None:
    """Refuse anything but a socket owned by this user and closed to everyone else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise NotRunning("daemon not running (no socket)") from None
    except OSError as exc:
        raise Unavailable(f"cannot stat {path}: {exc.strerror}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise NotRunning(f"{path} is not a socket")
    if st.st_uid != os.getuid():
        raise NotRunning(f"{path} belongs to uid {st.st_uid}, not to this user")
    if st.st_mode & 0o077:
        raise NotRunning(f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):o})")


def request(op: str, payload: dict | None = None, *, timeout_ms: int, base=None) -> dict:
    path = socket_path(base)
    check_socket(path)
    now = time.monotonic()
    deadline = now + timeout_ms / 1000.0
    # the daemon waits for its turn until then, and answers "busy" instead of letting us time out
    answer_by = time.time() + max(0.05, timeout_ms / 1000.0 - min(DEADLINE_MARGIN_S, timeout_ms / 4000.0))
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            sock.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            raise NotRunning("daemon not running (stale socket)") from None
        except BlockingIOError:  # EAGAIN: the listen queue is full, the daemon is alive
            raise Busy("daemon busy (its listen queue is full)") from None
        message = {"op": op, **(payload or {}), "deadline": answer_by}
        sock.sendall(wire.dumps(message).encode() + b"\n")
        chunks, size = [], 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError()
            sock.settimeout(left)
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if chunk.endswith(b"\n") or size > MAX_RESPONSE_BYTES:
                break
    except TimeoutError:
        age = heartbeat_age(base)
        if age is not None and age < max(2 * HEARTBEAT_S, min(0.9 * timeout_ms / 1000.0, 3.0)):
            raise Slow(f"daemon did not answer within {timeout_ms} ms (alive, heartbeat {age:.1f} s ago)") from None
        raise NoAnswer(f"daemon did not answer within {timeout_ms} ms") from None
    except OSError as exc:
        raise Unavailable(f"daemon connection failed ({exc.strerror or exc})") from None
    finally:
        sock.close()
    raw = b"".join(chunks)
    if not raw.endswith(b"\n"):
        raise Unavailable("daemon closed the connection mid-answer")
    try:
        answer = wire.loads(raw)
    except ValueError:
        raise Unavailable("daemon sent an unreadable answer") from None
    if not answer.get("ok"):
        kind, error = answer.get("kind"), answer.get("error")
        if kind == "input":
            raise RemoteError(error or "error", answer.get("hint"), int(answer.get("exit_code", 2)))
        if kind == "loading":
            raise Loading(f"daemon alive but {error}")
        if kind == "busy":
            raise Busy(f"daemon alive but {error}")
        raise Unavailable(f"daemon failed: {error}")
    return answer


def heartbeat_age(base=None) -> float | None:
    """Seconds since the daemon's last heartbeat (daemon.json's mtime); None when it has no status file."""
    try:
        return max(0.0, time.time() - os.stat(status_path(base)).st_mtime)
    except OSError:
        return None


def backoff_path(base=None) -> str:
    return os.path.join(_home(base), BACKOFF_NAME)


def backoff_reason(seconds: float, base=None) -> str | None:
    """Why the daemon is being skipped, while a timeout less than `seconds` ago; None: ask it. When the back-off
    has run out, the caller that sees it first renews it and asks (one probe, not every concurrent prompt); its
    outcome ends the back-off or starts a new one."""
    path = backoff_path(base)
    try:
        age = time.time() - os.stat(path).st_mtime
        if seconds <= 0:
            return None
        if not 0 <= age < seconds:
            os.utime(path)
            return None
        with open(path, encoding="utf-8", errors="replace") as fh:
            why = fh.read(500).strip()
    except OSError:
        return None
    return f"daemon skipped for {seconds - age:.0f} s more (back-off after: {why or 'a timeout'})"


def start_backoff(reason: str, base=None) -> None:
    """Record a timeout: the daemon is skipped until CAIRN_DAEMON_BACKOFF_S have passed (or it answers)."""
    try:
        fd = os.open(backoff_path(base), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:  # one short write: a reader sees it whole or empty
            fh.write(f"{reason} at {time.strftime('%H:%M:%S')}\n")
    except OSError:
        pass


def clear_backoff(base=None) -> None:
    try:
        os.unlink(backoff_path(base))
    except OSError:
        pass


def client_environ() -> dict[str, str]:
    """The CAIRN_* variables of this process: the daemon resolves our request's settings with them."""
    return {k: v for k, v in os.environ.items() if k.startswith("CAIRN_")}
