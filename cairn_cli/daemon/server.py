"""The model daemon: owns the warm models and scoring tables, serves rank / embed / health on a Unix socket.

- one daemon per CAIRN_HOME: an exclusive flock on daemon.lock (lock.py), taken by entry.py before anything heavy
  is imported; a second `serve` exits 1 at once;
- holding the lock, any socket file left behind is stale and is replaced (stale-socket recovery);
- the socket is created with mode 0600 (umask), there is no TCP listener; its listen queue holds 64 connections;
- daemon.json tells pid, state (loading / ready), models and warnings; removed on a clean exit;
- SIGTERM / SIGINT shut it down cleanly; requests are served one at a time (hooks are sequential, and the
  databases are bound per request): one that cannot have its turn before its client's deadline is answered
  "busy", one that arrives while the models load "loading"; health answers at once, whatever is running;
- it exits by itself when it is an orphan (its CAIRN_HOME, socket or lock file deleted or replaced: checked on
  every request and every CAIRN_DAEMON_WATCH_S) and, when CAIRN_DAEMON_IDLE_EXIT_S is set, when idle that long.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import os
import resource
import signal
import socketserver
import sys
import threading
import time
import traceback
from pathlib import Path

import orjson

from cairn_cli.config import Settings
from cairn_cli.daemon import housekeeping
from cairn_cli.daemon import lock as home_lock
from cairn_cli.daemon.client import clear_backoff, socket_path, status_path
from cairn_cli.errors import CairnError, DeadlineExceeded, InvalidInput
from cairn_cli.files import atomic_write, private_dir

MAX_REQUEST_BYTES = 16 * 1024 * 1024


class AlreadyRunning(CairnError):
    pass


def _rss_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _torch_threads() -> int | None:
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


class Daemon:
    def __init__(self, home: Path, settings: Settings, log):
        self.home, self.settings, self.log = home, settings, log
        self.lock = threading.Lock()  # one request at a time
        self.started = time.time()
        self.requests = 0
        self.ops: dict[str, int] = {}
        self._count_lock = threading.Lock()
        self.last_work = time.monotonic()  # the last rank or embed (idle exit)
        self.engine = None
        self.reranker_sig = None
        self.loading_sig = None
        self.refused_students: set[str] = set()  # the team's student versions that could not be installed here
        self.student_warning: str | None = None
        self.state = "loading"
        self.server = None
        self.socket_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket we bound
        self.stopping: str | None = None

    # -- models -------------------------------------------------------------------------------------------
    def load(self) -> None:
        from cairn_cli.core.ranking.engine import RankEngine
        from cairn_cli.core.store import open_stores
        from cairn_cli.ml.device import apply_torch_threads, set_torch_threads
        from cairn_cli.ml.models import get_encoder

        open_stores(self.settings)
        set_torch_threads(self.settings.TORCH_THREADS)  # kept through every model load (ml/device.py)
        self.engine = RankEngine(get_encoder(self.settings.EMBED_MODEL, self.settings.EMBED_DTYPE))
        self.refresh_reranker(self.settings, wait=True)
        t0 = time.time()
        self.engine.table(self.settings)  # prewarm: index the default store before the first prompt
        self.log(f"indexed {len(self.engine.table(self.settings).table)} memories in {time.time() - t0:.1f}s")
        apply_torch_threads()  # torch may have come in after the wish was set (the reranker's CUDA probe)
        gc.collect()
        gc.freeze()
        self.last_work = time.monotonic()
        self.state = "ready"
        self.write_status()

    def refresh_reranker(self, settings: Settings, *, wait: bool = False) -> None:
        """Resolve the reranker for this request's settings; when it (or the student on disk) changed, load the new
        one in the background and keep ranking with the current one until it is ready, so that a deployment never
        makes a prompt wait for a model load (`wait`: load now, at start-up)."""
        from cairn_cli.core.learning import shared
        from cairn_cli.core.ranking.reranking import resolve

        note = shared.sync(settings, refused=self.refused_students) if shared.shared_store() else None
        if note:  # the team's student: installed (resolved below), or why not
            self.log(note)
            self.student_warning = note if "not installed" in note else None
        resolution = resolve(settings)
        stamp = None
        if resolution.path is not None:
            try:
                stamp = (resolution.path / "config.json").stat().st_mtime_ns
            except OSError:
                stamp = None
        sig = (
            resolution.role,
            resolution.name,
            str(resolution.path),
            stamp,
            resolution.floor,
            settings.RERANKER_DTYPE,
            settings.RERANKER_MAX_LENGTH,
            settings.RERANK_BUDGET_MS,
            settings.RERANK_CANDIDATES,
        )
        if sig in (self.reranker_sig, self.loading_sig):
            return
        self.loading_sig = sig
        if wait:
            self._swap_reranker(settings, resolution, sig)
        else:
            self.log(f"loading reranker {resolution.name} in the background")
            threading.Thread(target=self._swap_reranker, args=(settings, resolution, sig, True), daemon=True).start()

    def _swap_reranker(self, settings: Settings, resolution, sig, locked: bool = False) -> None:
        from cairn_cli.core.ranking.reranking import load_reranker
        from cairn_cli.ml.device import apply_torch_threads
        from cairn_cli.ml.reranker import NONE

        reranker, notes = load_reranker(settings, resolution, measure=True)
        apply_torch_threads()
        with self.lock if locked else contextlib.nullcontext():  # swapped between requests, never during one
            if self.loading_sig != sig:
                return  # superseded by a newer deployment while loading
            current = self.engine.reranker
            if reranker is None and resolution.role != NONE and current is not None:
                # a model that does not load (a broken deployment) never replaces one that ranks
                notes = [*notes, f"keeping {current.name}: {resolution.name} did not load"]
                reranker = current
            self.engine.reranker = reranker
            self.engine.warnings = notes
            self.reranker_sig, self.loading_sig = sig, None
        for note in notes:
            self.log(f"warning: {note}")
        self.log(f"reranker: {reranker.name if reranker else 'none'}")
        self.write_status()

    # -- requests -----------------------------------------------------------------------------------------
    def serve_request(self, req: dict) -> dict:
        """Route one request: health at once; rank and embed one at a time, each waiting for its turn at most
        until its client's deadline (then "busy"); nothing but health while loading or after a failed load."""
        op = req.get("op")
        with self._count_lock:
            self.requests += 1
            self.ops[str(op)] = self.ops.get(str(op), 0) + 1
        gone = self.orphaned()
        if gone:
            self.stop(gone)
            return {"ok": False, "kind": "stopping", "error": f"daemon is exiting: {gone}"}
        if op == "health":
            return {"ok": True, **self.health()}
        if op == "shutdown":
            self.stop("asked to shut down")
            return {"ok": True, "stopping": True}
        if self.state != "ready":
            if self.state.startswith("failed"):
                return {"ok": False, "kind": "failed", "error": f"model load {self.state}"}
            return {"ok": False, "kind": "loading", "error": "daemon is still loading its models"}
        deadline = req.get("deadline")
        t0 = time.time()
        if isinstance(deadline, (int, float)):
            got = self.lock.acquire(timeout=max(0.0, deadline - t0))
        else:
            got = self.lock.acquire()
        if not got:
            return {"ok": False, "kind": "busy", "error": f"busy: another request held it for {time.time() - t0:.1f} s"}
        try:
            if isinstance(deadline, (int, float)) and time.time() >= deadline:
                raise DeadlineExceeded(f"its client stopped waiting {time.time() - deadline:.1f} s ago")
            answer = self.handle(req)
        finally:
            self.lock.release()
        self.last_work = time.monotonic()
        return answer

    def handle(self, req: dict) -> dict:
        """rank or embed, with the request lock held."""
        op = req.get("op")
        settings = Settings(environ=req.get("env") or {}, **(req.get("settings") or {}))
        if op == "rank":
            from cairn_cli.core.ranking.rank import RankRequest, rank
            from cairn_cli.core.store import open_stores

            fields = req.get("request")
            if not isinstance(fields, dict):
                raise InvalidInput("rank needs a request object", "use cairn rank")
            open_stores(settings)  # the request's own stores (its CAIRN_* environment, its --db-url)
            self.refresh_reranker(settings)  # after open_stores: a calibrated floor is machine state
            result = rank(RankRequest(**fields), settings, self.engine)
            if self.engine.reranker is not None:
                from cairn_cli.core.ranking.reranking import adapt

                adapt(self.engine.reranker, settings)  # the plan learns its margin from the stage as it runs
            gc.freeze()  # the warm tables are long-lived: keep the cyclic GC from rescanning 100k objects
            return {"ok": True, "result": result.as_dict()}
        if op == "embed":
            texts = req.get("texts")
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise InvalidInput("embed needs a list of texts", 'send {"texts": [...]}')
            vecs = self.engine.embed(texts)
            return {"ok": True, "model": self.engine.encoder.name, "vectors": vecs.tolist()}
        raise InvalidInput(f"unknown op {op!r}", "use rank, embed, health or shutdown")

    # -- lifetime -----------------------------------------------------------------------------------------
    def orphaned(self) -> str | None:
        """Why this daemon serves no one any more (its home, socket or lock file deleted or replaced), or None."""
        if not os.path.isdir(self.home):
            return f"its CAIRN_HOME {self.home} is gone"
        for what, path, mine in (
            ("socket", socket_path(self.home), self.socket_id),
            ("lock file", home_lock.lock_path(self.home), home_lock.held_identity(self.home)),
        ):
            if mine is None:
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                return f"its {what} {path} is gone"
            except OSError as exc:
                return f"its {what} {path} cannot be checked ({exc.strerror})"
            if (st.st_dev, st.st_ino) != mine:
                return f"its {what} {path} was replaced"
        return None

    def stop(self, why: str) -> None:
        """Shut the server down (from any thread but serve_forever's); the first reason is the one logged."""
        if self.stopping is None:
            self.stopping = why
            self.log(f"exiting: {why}")
            threading.Thread(target=self.server.shutdown, daemon=True).start()

    def watch(self, done: threading.Event) -> None:
        """Every CAIRN_DAEMON_WATCH_S (or sooner, for the idle exit): exit when orphaned, or idle too long."""
        while True:
            idle = self.settings.DAEMON_IDLE_EXIT_S
            every = self.settings.DAEMON_WATCH_S
            if idle > 0:
                every = min(every, idle)
            if done.wait(max(0.05, every)):
                return
            gone = self.orphaned()
            if gone:
                self.stop(gone)
                return
            housekeeping.run_due(self.home, self.settings, self.log)  # daemon.log's cap; retention once a day
            quiet = time.monotonic() - self.last_work
            if idle > 0 and self.state == "ready" and quiet >= idle and not self.lock.locked():
                self.stop(f"idle for {idle:g} s (CAIRN_DAEMON_IDLE_EXIT_S)")
                return

    def health(self) -> dict:
        eng = self.engine
        return {
            "pid": os.getpid(),
            "state": self.state,
            "uptime_s": round(time.time() - self.started, 1),
            "requests": self.requests,
            "ops": dict(self.ops),
            "busy": self.lock.locked(),
            "rss_mb": round(_rss_mb(), 1),
            "embed_model": eng.encoder.name if eng and eng.encoder else None,
            "reranker": eng.reranker.name if eng and eng.reranker else "none",
            "reranker_dtype": getattr(eng.reranker, "dtype", None) if eng else None,
            "reranker_max_length": getattr(eng.reranker, "max_length", None) if eng else None,
            "rerank_plan": getattr(eng.reranker, "plan", None) if eng else None,
            "torch_threads": _torch_threads(),
            "warnings": (list(eng.warnings) if eng else []) + ([self.student_warning] if self.student_warning else []),
            "socket": str(socket_path(self.home)),
        }

    def write_status(self) -> None:
        if not os.path.isdir(self.home):
            return  # an orphan never recreates a deleted home
        atomic_write(
            status_path(self.home),
            orjson.dumps(
                {**self.health(), "started_at": dt.datetime.fromtimestamp(self.started).isoformat(timespec="seconds")}
            ),
            fsync=False,
        )


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        daemon: Daemon = self.server.daemon
        try:
            line = self.rfile.readline(MAX_REQUEST_BYTES)
            req = orjson.loads(line)
            if not isinstance(req, dict):
                raise InvalidInput("a request is a JSON object", 'send {"op": ...}')
            answer = daemon.serve_request(req)
        except orjson.JSONDecodeError:
            answer = {"ok": False, "kind": "input", "error": "request is not JSON", "exit_code": 2}
        except DeadlineExceeded as exc:
            daemon.log(f"abandoned a request: {exc.message}")
            answer = {"ok": False, "kind": "expired", "error": exc.message}
        except CairnError as exc:
            answer = {"ok": False, "kind": "input", "error": exc.message, "hint": exc.hint, "exit_code": exc.exit_code}
        except Exception as exc:
            daemon.log(f"error: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            answer = {"ok": False, "kind": "internal", "error": f"{type(exc).__name__}: {exc}"}
        try:
            self.wfile.write(orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout) and fell back


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 64  # the hooks of concurrent sessions queue up instead of being refused (default 5)


def serve(home: Path, settings: Settings) -> int:
    """Run the daemon in the foreground until SIGTERM (or it is orphaned, or idle). Returns the exit code."""
    if not home_lock.hold(home):  # entry.py took it already when this process is `cairn daemon serve`
        raise AlreadyRunning("a cairn daemon is already running for this CAIRN_HOME", "see `cairn daemon status`")
    try:
        private_dir(home / "logs")
        return _serve_locked(home, settings, housekeeping.daemon_logger(home, settings))  # rotated, whole lines
    finally:
        home_lock.release(home)


def _serve_locked(home: Path, settings: Settings, log) -> int:
    sock = Path(socket_path(home))
    if sock.exists() or sock.is_symlink():
        log(f"removing stale socket {sock}")
        sock.unlink()
    daemon = Daemon(home, settings, log)
    old_umask = os.umask(0o177)
    try:
        server = _Server(str(sock), _Handler)
    finally:
        os.umask(old_umask)
    os.chmod(sock, 0o600)
    st = os.lstat(sock)
    daemon.socket_id = (st.st_dev, st.st_ino)
    server.daemon = daemon
    daemon.server = server

    def on_signal(signum, frame):
        daemon.stop(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    clear_backoff(home)  # a timeout of our predecessor is no reason to skip us
    daemon.write_status()
    log("listening; loading models")
    threading.Thread(target=_load, args=(daemon, log), daemon=True).start()
    done = threading.Event()
    threading.Thread(target=daemon.watch, args=(done,), daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        done.set()
        server.server_close()
        _remove_if_ours(daemon, sock, Path(status_path(home)))
        from cairn_cli.db import close_all

        close_all()
        log("stopped")
    return 0


def _remove_if_ours(daemon: Daemon, sock: Path, status: Path) -> None:
    """Remove our socket and status file, never a successor's (an orphan's home may hold a new daemon's)."""
    try:
        st = sock.lstat()
        if (st.st_dev, st.st_ino) == daemon.socket_id:
            sock.unlink()
    except FileNotFoundError:
        pass
    try:
        if orjson.loads(status.read_bytes()).get("pid") == os.getpid():
            status.unlink()
    except (OSError, orjson.JSONDecodeError, AttributeError):
        pass


def _load(daemon: Daemon, log) -> None:
    try:
        daemon.load()
        log(f"ready: {daemon.health()}")
    except Exception as exc:
        daemon.state = f"failed: {type(exc).__name__}: {exc}"
        daemon.write_status()
        log(f"model load failed: {exc}\n{traceback.format_exc()}")
        sys.stderr.write(f"cairn daemon: model load failed: {exc}\n")
