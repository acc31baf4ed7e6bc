"""The model daemon: owns the warm models and scoring tables, serves rank / embed / health on a Unix socket, one
per CAIRN_HOME, requests concurrently (a thread each; the models behind batching queues), exiting by itself when
orphaned or idle. Its lock, socket, heartbeat and concurrency rules are in docs/hot-path.md."""

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
from collections.abc import Callable
from pathlib import Path

import orjson

from cairn_cli.config import Settings
from cairn_cli.daemon import housekeeping, singleton
from cairn_cli.daemon.client import HEARTBEAT_S, clear_backoff, socket_path, status_path
from cairn_cli.db import close_thread_connections
from cairn_cli.errors import CairnError, DeadlineExceeded, InvalidInput
from cairn_cli.files import atomic_write, private_dir

TYPE_CHECKING = False  # typing is not imported at run time for these (the models' modules are loaded lazily)
if TYPE_CHECKING:
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.daemon.batching import ModelQueue

MAX_REQUEST_BYTES = 16 * 1024 * 1024
SETTLE_KEEP = 50  # settles whose times daemon status summarises
STUCK_AFTER_S = 10.0  # no heartbeat while a request has run this long and none has finished meanwhile


class AlreadyRunning(CairnError):
    pass


class _Busy(Exception):
    """The request names other databases than those in use, and they were not free before its deadline."""


class _Stores:
    """The databases the models are bound to (db's proxies are process-wide): any number of requests naming the
    bound ones share them; one naming others waits until the room is empty, then binds its own (and requests
    arriving meanwhile wait behind it, so that it is not starved)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self.key: tuple | None = None
        self._users = 0
        self._binding = False
        self._switching = 0  # requests waiting to bind other databases
        self._waiting = 0  # requests waiting for the room, whichever databases they name

    @contextlib.contextmanager
    def using(self, key: tuple, bind, deadline: float | None):
        """Hold the stores named by `key` for the block; `bind()` binds them (called by every request: it also
        indexes what the full-text index has queued; when the key changes, with the room to itself)."""
        with self._cond:
            waiting_to_switch = False
            try:
                while True:
                    if self.key == key and not self._binding and not self._switching:
                        break
                    if self.key != key and not self._users and not self._binding:
                        break
                    if self.key != key and not waiting_to_switch:
                        waiting_to_switch, self._switching = True, self._switching + 1
                    left = None if deadline is None else deadline - time.time()
                    if left is not None and left <= 0:
                        raise _Busy("busy: other databases were in use until its client's deadline")
                    self._waiting += 1
                    try:
                        self._cond.wait(left)
                    finally:
                        self._waiting -= 1
            finally:
                if waiting_to_switch:
                    self._switching -= 1
                    self._cond.notify_all()
            switch = self.key != key
            self._binding = switch
            self._users += 1
        try:
            if switch:
                bound = None  # a bind that failed midway leaves the proxies unknown: the next request binds again
                try:
                    bind()
                    bound = key
                finally:
                    with self._cond:
                        self.key, self._binding = bound, False
                        self._cond.notify_all()
            else:
                bind()
            yield
        finally:
            with self._cond:
                self._users -= 1
                self._cond.notify_all()


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
    get = getattr(sys.modules.get("torch"), "get_num_threads", None)  # None too while torch is being imported
    return get() if get is not None else None


class Daemon:
    def __init__(self, home: Path, settings: Settings, log):
        self.home, self.settings, self.log = home, settings, log
        self.started = time.time()
        self.requests = 0
        self.ops: dict[str, int] = {}
        self._count_lock = threading.Lock()
        self._running: dict[int, float] = {}  # rank / embed requests in flight -> when they started (monotonic)
        self._serial = 0
        self.last_done = time.monotonic()  # the last rank or embed that finished (the heartbeat)
        self.last_work = time.monotonic()  # the last rank or embed (idle exit)
        self.stores = _Stores()
        self._reranker_lock = threading.RLock()  # one request checks the reranker's resolution at a time
        self._adapting = threading.Lock()
        self._settling = threading.Lock()
        self.settle_ms: list[float] = []  # the last SETTLE_KEEP settles' times (daemon status)
        self.engine: RankEngine | None = None  # set by load(), before the daemon is ready
        self.models: ModelQueue | None = None  # the queue of the embedder's and the cross-encoder's calls (batching.py)
        self.reranker_sig: tuple | None = None
        self.loading_sig: tuple | None = None
        self.refused_students: set[str] = set()  # the team's student versions that could not be installed here
        self.student_warning: str | None = None
        # a learned embedder: one re-embed or switch at a time, in a thread of its own (check_embedder)
        self._embedder_work = threading.Lock()
        self.refused_embedders: set[str] = set()  # the team's embedder versions that could not be installed here
        self.reembed: dict | None = None  # the re-embed under way: {"pending", "staged", "to_stage", "started_at"}
        self.embedder_note: str | None = None  # what the last re-embed, switch or team sync did
        self.state = "loading"
        self.server: _Server | None = None  # set by _serve_locked before anything is served
        self.socket_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket we bound
        self.stopping: str | None = None

    # -- models -------------------------------------------------------------------------------------------
    def load(self) -> None:
        from cairn_cli.core.ranking.engine import RankEngine
        from cairn_cli.core.store import open_stores
        from cairn_cli.daemon.batching import model_queue
        from cairn_cli.ml.device import apply_torch_threads, idle_threads_sleep, release_freed_memory, set_torch_threads

        if not idle_threads_sleep():  # before torch loads: the hooks' processes need the cores between model calls
            self.log("warning: torch was loaded before the daemon could make OpenMP's idle threads sleep")
        from cairn_cli.core.learning.team import shared_store
        from cairn_cli.core.store import embedders

        open_stores(self.settings)
        self.stores.key = _stores_key(self.settings)
        set_torch_threads(self.settings.TORCH_THREADS)  # kept through every model load (ml/device.py)
        if shared_store():  # the embedder the team's store vectors were made with, before it is loaded
            self._note_embedder(embedders.sync(self.settings, refused=self.refused_embedders))
        self.engine = RankEngine(embedders.live_encoder(self.settings))
        self.engine.vector_index_above = self.settings.VECTOR_INDEX_ABOVE
        self.models = model_queue(self.engine.encoder)
        self.refresh_reranker(self.settings, wait=True)
        t0 = time.time()
        self.engine.table(self.settings)  # prewarm: index the default store before the first prompt
        self.log(f"indexed {len(self.engine.table(self.settings).table)} memories in {time.time() - t0:.1f}s")
        apply_torch_threads()  # torch may have come in after the wish was set (the reranker's CUDA probe)
        close_thread_connections()  # before the collection: their cycles go with it, not into the frozen
        gc.collect()
        gc.freeze()
        release_freed_memory()  # what loading and indexing freed, handed back
        self.last_work = time.monotonic()
        self.state = "ready"
        self.write_status()
        self.check_embedder(self.settings)  # a deploy pending since the last daemon: its re-embed goes on

    def refresh_reranker(self, settings: Settings, *, wait: bool = False) -> None:
        """Resolve the reranker for this request's settings; when it (or the student on disk) changed, load the new
        one in the background and keep ranking with the current one until it is ready, so that a deployment never
        makes a prompt wait for a model load (`wait`: load now, at start-up). One request checks at a time; the
        others meanwhile rank with the reranker they have."""
        if not self._reranker_lock.acquire(blocking=wait):
            return
        try:
            self._refresh_reranker(settings, wait=wait)
        finally:
            self._reranker_lock.release()

    def _refresh_reranker(self, settings: Settings, *, wait: bool) -> None:
        from cairn_cli.core.learning import team
        from cairn_cli.core.ranking.reranking import resolve

        note = team.sync(settings, refused=self.refused_students) if team.shared_store() else None
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
            threading.Thread(target=self._swap_reranker, args=(settings, resolution, sig), daemon=True).start()

    def _swap_reranker(self, settings: Settings, resolution, sig) -> None:
        from cairn_cli.core.ranking.reranking import load_reranker
        from cairn_cli.ml.device import apply_torch_threads
        from cairn_cli.ml.reranker import NONE

        try:
            reranker, notes = load_reranker(settings, resolution, measure=True)
        finally:
            close_thread_connections()
        apply_torch_threads()
        with self._reranker_lock:  # a request in flight keeps the reranker it started with (request_engine)
            if self.loading_sig != sig:
                return  # superseded by a newer deployment while loading
            assert self.engine is not None  # the reranker is refreshed once load() has made the engine
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

    # -- the learned embedder ------------------------------------------------------------------------------------
    def check_embedder(self, settings: Settings) -> None:
        """For a request on the daemon's own store: when the store's live embedder is not the one the engine ranks
        with (a swap done elsewhere: `cairn memory embed`), switch to it; when a deploy is pending, re-embed the
        store. Both in a thread of their own, one at a time, never in a request's way; the requests meanwhile rank
        with the embedder they started with. Cheap: two machine-state reads."""
        from cairn_cli.core.learning.team import shared_store
        from cairn_cli.core.store import embedders

        if _stores_key(settings) != _stores_key(self.settings) or not self._embedder_work.acquire(blocking=False):
            return
        started = False
        try:
            assert self.engine is not None and self.engine.encoder is not None  # ready: load() made them
            if shared_store():
                self._note_embedder(embedders.sync(settings, refused=self.refused_embedders))
            live, pending = embedders.live_name(settings), embedders.record(settings).get("pending")
            work: Callable[[Settings, str], None]
            if live != self.engine.encoder.name:
                work, name = self._switch_embedder, live
            elif pending and pending not in self.refused_embedders and embedders.usable(pending):
                work, name = self._reembed, pending
            else:
                return
            threading.Thread(target=self._embedder_thread, args=(work, settings, name), daemon=True).start()
            started = True
        finally:
            if not started:
                self._embedder_work.release()

    def _embedder_thread(self, work: Callable[[Settings, str], None], settings: Settings, name: str) -> None:
        try:
            work(settings, name)
        except Exception as exc:
            self._note_embedder(f"the embedder's re-embed or switch failed: {type(exc).__name__}: {exc}")
            self.log(traceback.format_exc())
        finally:
            close_thread_connections()
            self.reembed = None
            self._embedder_work.release()
            self.write_status()

    def _note_embedder(self, note: str | None) -> None:
        if note:
            self.embedder_note = note
            self.log(f"embedder: {note}")

    def _hold(self, settings: Settings):
        """The request's stores bound around one database step of a re-embed (released between its batches, so that
        a request naming other stores waits for one batch at most)."""
        from cairn_cli.core.store import open_stores

        return self.stores.using(_stores_key(settings), lambda: open_stores(settings), None)

    def _reembed(self, settings: Settings, pending: str) -> None:
        """The pending embedder's re-embed of the store (its calls queued behind the prompts'), then the swap, then
        the switch."""
        from cairn_cli.core.store import embedders
        from cairn_cli.daemon.batching import QueuedEncoder
        from cairn_cli.ml.models import get_encoder

        assert self.models is not None  # ready: load() made it
        encoder = QueuedEncoder(get_encoder(pending, settings.EMBED_DTYPE), self.models)  # not urgent: after prompts
        with self._hold(settings):
            todo = embedders.to_stage(settings, pending)
        self.reembed = {"pending": pending, "staged": 0, "to_stage": todo, "started_at": time.time()}
        self.write_status()

        def tick(n: int) -> None:
            if self.reembed is not None:
                self.reembed["staged"] += n

        self._note_embedder(
            embedders.finish_pending(settings, encoder=encoder, progress=tick, hold=lambda: self._hold(settings))
        )
        with self._hold(settings):
            live = embedders.live_name(settings)
        self._switch_embedder(settings, live)

    def _switch_embedder(self, settings: Settings, name: str) -> None:
        """Rank with embedder `name` from the next request on: loaded and its table built first (a view, here), then
        one assignment; a request in flight keeps the encoder it started with. The other models' tables go."""
        from cairn_cli.daemon.batching import QueuedEncoder
        from cairn_cli.ml.models import get_encoder

        assert self.engine is not None and self.models is not None  # ready: load() made them
        if self.engine.encoder is not None and self.engine.encoder.name == name:
            return
        encoder = get_encoder(name, settings.EMBED_DTYPE)
        queued = QueuedEncoder(encoder, self.models)
        with self._hold(settings):
            self.engine.view(encoder=queued, reranker=None, store_encoder=queued).table(settings)
        old = self.engine.encoder.name if self.engine.encoder is not None else None
        self.engine.encoder = encoder
        for key in [k for k in self.engine._tables if k[-1] not in (name, None)]:
            self.engine._tables.pop(key, None)
        self._note_embedder(f"ranking with {name} (was {old})")
        self.write_status()

    # -- requests -----------------------------------------------------------------------------------------
    def serve_request(self, req: dict) -> dict:
        """Route one request: health at once; rank and embed concurrently (see the module note), a request whose
        client has given up abandoned; nothing but health while loading or after a failed load."""
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
        if isinstance(deadline, (int, float)) and time.time() >= deadline:
            raise DeadlineExceeded(f"its client stopped waiting {time.time() - deadline:.1f} s ago")
        with self._count_lock:
            self._serial += 1
            serial = self._serial
            self._running[serial] = time.monotonic()
        try:
            answer = self.handle(req)
        except _Busy as exc:
            return {"ok": False, "kind": "busy", "error": str(exc)}
        finally:
            with self._count_lock:
                del self._running[serial]
                self.last_done = self.last_work = time.monotonic()
        return answer

    def handle(self, req: dict) -> dict:
        """rank or embed, in this request's thread."""
        op = req.get("op")
        settings = Settings(environ=req.get("env") or {}, **(req.get("settings") or {}))
        deadline = req.get("deadline") if isinstance(req.get("deadline"), (int, float)) else None
        if op == "rank":
            from cairn_cli.core.hooks.prompt import prompt_turn
            from cairn_cli.core.hooks.request import PromptRequest
            from cairn_cli.core.store import open_stores

            fields = req.get("request")
            if not isinstance(fields, dict):
                raise InvalidInput("rank needs a request object", "use cairn rank")
            # the request's own stores (its CAIRN_* environment, its --db-url), shared with those naming the same
            try:
                with self.stores.using(_stores_key(settings), lambda: open_stores(settings), deadline):
                    self.refresh_reranker(settings)  # after open_stores: a calibrated floor is machine state
                    self.check_embedder(settings)
                    engine = self.request_engine(settings, deadline)
                    result = prompt_turn(PromptRequest.from_dict(fields), settings, engine)
                    self.adapt(engine, settings)
            finally:
                close_thread_connections()  # this thread ends with the request: its connections with it
            return {"ok": True, "result": result.as_dict()}
        if op == "embed":
            from cairn_cli.daemon.batching import QueuedEncoder

            texts = req.get("texts")
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise InvalidInput("embed needs a list of texts", 'send {"texts": [...]}')
            assert self.engine is not None and self.models is not None  # ready: load() made them
            vecs = QueuedEncoder(self.engine.encoder, self.models, start_by=deadline).encode(texts)
            return {"ok": True, "model": self.engine.encoder.name, "vectors": vecs.tolist()}
        raise InvalidInput(f"unknown op {op!r}", "use rank, embed, health or shutdown")

    def request_engine(self, settings: Settings, deadline: float | None):
        """The engine one rank request ranks with: the warm tables, the embedder's queue, and the reranker live
        when it started (a swap meanwhile serves the next requests) behind the cross-encoder's queue."""
        from cairn_cli.daemon.batching import QueuedEncoder, QueuedReranker

        assert self.engine is not None and self.models is not None  # ready: load() made them
        reranker = self.engine.reranker
        queued = (
            QueuedReranker(reranker, self.models, budget_ms=settings.RERANK_BUDGET_MS, deadline=deadline)
            if reranker is not None
            else None
        )
        return self.engine.view(
            encoder=QueuedEncoder(self.engine.encoder, self.models, start_by=deadline, urgent=True),
            reranker=queued,
            store_encoder=QueuedEncoder(self.engine.encoder, self.models),  # the store's work: no deadline
        )

    def settle(self) -> None:
        """After a request's answer is written, off its client's clock, when no other request is in flight:
        collect the cyclic garbage made since the last settle, then freeze what survives out of the cyclic GC.
        Frozen, the warm tables' ~460k objects (100k memories) are never rescanned by a collection that a request's
        allocations trigger (bench/hot_path_gc_freeze.md: 105 -> 83 ms p50), and a collection scans only what is
        not frozen: this costs what the requests made, not the store. Never frozen: another request's objects
        still in use, which would stay for good when they became garbage (a frozen object is never collected), so
        under load nothing is done here and python's own collections, of what is not frozen, take the cycles."""
        with self._count_lock:
            if self._running or not self._settling.acquire(blocking=False):
                return
        try:
            t0 = time.perf_counter()
            gc.collect()
            with self._count_lock:  # a request registers under this lock: none starts while the check holds
                if not self._running:
                    gc.freeze()
                self.settle_ms = [*self.settle_ms[-(SETTLE_KEEP - 1) :], (time.perf_counter() - t0) * 1000]
        finally:
            self._settling.release()

    def adapt(self, engine, settings: Settings) -> None:
        """The plan learns its margin from the stage as it runs (reranking.adapt); one request does it at a time,
        the others go on."""
        if engine.reranker is None or not self._adapting.acquire(blocking=False):
            return
        try:
            from cairn_cli.core.ranking.reranking import adapt

            adapt(engine.reranker.inner, settings)
        finally:
            self._adapting.release()

    # -- lifetime -----------------------------------------------------------------------------------------
    def orphaned(self) -> str | None:
        """Why this daemon serves no one any more (its home, socket or lock file deleted or replaced), or None."""
        if not os.path.isdir(self.home):
            return f"its CAIRN_HOME {self.home} is gone"
        for what, path, mine in (
            ("socket", socket_path(self.home), self.socket_id),
            ("lock file", singleton.lock_path(self.home), singleton.held_identity(self.home)),
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
            assert self.server is not None  # nothing calls stop before _serve_locked has set the server
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
            if idle > 0 and self.state == "ready" and quiet >= idle and not self._running:
                self.stop(f"idle for {idle:g} s (CAIRN_DAEMON_IDLE_EXIT_S)")
                return

    def progressing(self) -> bool:
        """Not stuck: no request in flight, or the oldest one started, or one finished, within STUCK_AFTER_S."""
        with self._count_lock:
            if not self._running:
                return True
            oldest_start = min(self._running.values())
            last_done = self.last_done
        return time.monotonic() - max(oldest_start, last_done) < STUCK_AFTER_S

    def heartbeat(self, done: threading.Event) -> None:
        """Touch daemon.json every HEARTBEAT_S while the daemon makes progress (client.heartbeat_age reads it)."""
        path = status_path(self.home)
        while not done.wait(HEARTBEAT_S):
            if self.progressing():
                try:
                    os.utime(path)
                except OSError:
                    pass  # gone (an orphan, or a clean exit under way): nothing to keep alive

    def health(self) -> dict:
        eng = self.engine
        with self._count_lock:
            in_flight = len(self._running)
            settles = sorted(self.settle_ms)
        return {
            "pid": os.getpid(),
            "state": self.state,
            "uptime_s": round(time.time() - self.started, 1),
            "requests": self.requests,
            "ops": dict(self.ops),
            "busy": in_flight > 0,
            "in_flight": in_flight,
            "models_queue": self.models.stats() if self.models is not None else None,
            "rss_mb": round(_rss_mb(), 1),
            # the garbage collection after the last answers (settle): median and slowest, off the clients' clocks
            "settle_ms": {"p50": round(settles[len(settles) // 2], 2), "max": round(settles[-1], 2), "of": len(settles)}
            if settles
            else None,
            "search": eng.search_path(self.settings) if eng else None,
            "embed_model": eng.encoder.name if eng and eng.encoder else None,
            "embedder": {"reembed": dict(self.reembed) if self.reembed else None, "note": self.embedder_note},
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
    server: _Server  # the only server it handles for

    def handle(self) -> None:
        daemon: Daemon = self.server.daemon
        req_op = None
        try:
            line = self.rfile.readline(MAX_REQUEST_BYTES)
            req = orjson.loads(line)
            if not isinstance(req, dict):
                raise InvalidInput("a request is a JSON object", 'send {"op": ...}')
            req_op = req.get("op")
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
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout) and fell back
        if req_op in ("rank", "embed"):
            daemon.settle()


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 64  # the hooks of concurrent sessions queue up instead of being refused (default 5)
    daemon: Daemon  # set by _serve_locked before it serves


def serve(home: Path, settings: Settings) -> int:
    """Run the daemon in the foreground until SIGTERM (or it is orphaned, or idle). Returns the exit code."""
    if not singleton.hold(home):  # entry.py took it already when this process is `cairn daemon serve`
        raise AlreadyRunning("a cairn daemon is already running for this CAIRN_HOME", "see `cairn daemon status`")
    from cairn_cli.core.redact import ScrubbingStream

    sys.stderr = ScrubbingStream(sys.stderr)  # daemon.log keeps no secret a traceback or a warning quotes
    try:
        private_dir(home / "logs")
        return _serve_locked(home, settings, housekeeping.daemon_logger(home, settings))  # rotated, whole lines
    finally:
        singleton.release(home)


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
    threading.Thread(target=daemon.heartbeat, args=(done,), daemon=True).start()
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


def _stores_key(settings: Settings) -> tuple:
    """What binding a request's stores sets process-wide: the two database URLs and the writing instance."""
    from cairn_cli import config
    from cairn_cli.core.store import instance_id

    return (
        config.memory_db_url(settings.DB_URL),
        config.ephemeral_db_url(settings.EPHEMERAL_DB_URL),
        instance_id(settings),
    )


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
        try:
            daemon.load()
        finally:
            close_thread_connections()  # the loading thread ends here
        log(f"ready: {daemon.health()}")
    except Exception as exc:
        daemon.state = f"failed: {type(exc).__name__}: {exc}"
        daemon.write_status()
        log(f"model load failed: {exc}\n{traceback.format_exc()}")
        sys.stderr.write(f"cairn daemon: model load failed: {exc}\n")
