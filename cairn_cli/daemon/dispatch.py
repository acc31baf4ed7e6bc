"""Where a ranking runs: in the daemon when it answers, else in this process (the lexical fallback, said so in the
provenance); CAIRN_DAEMON=off loads the models here. A circuit breaker decides when a daemon may be started and
when a hung one is skipped for a back-off (docs/hot-path.md). Nothing heavy is imported unless the daemon fails."""

from __future__ import annotations

import os
import sys
import time

from cairn_cli import config
from cairn_cli.core.hooks.request import PromptRequest
from cairn_cli.daemon import client

COMMIT_MARGIN_S = 0.1
EMBED_BATCH = 256  # texts to an embed request of a bulk embedding (memory import)
EMBED_BATCH_TIMEOUT_MS = 120_000  # a batch takes seconds on a busy CPU, not the hook's 1.5 s


def spawn(home, why: str):
    """Start `cairn daemon serve` detached (its own session), logging to CAIRN_HOME/logs/daemon.log. Callers
    claim the spawn first (singleton.claim_spawn): one daemon per CAIRN_HOME, one spawn at a time."""
    import subprocess

    from cairn_cli.files import append_log, private_file

    log_path = private_file(os.path.join(str(home), "logs", "daemon.log"))
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()}] spawn: starting a daemon ({why})"
    try:  # rotated in place (copy_truncate): the daemon's stdout and stderr below stay on daemon.log
        append_log(log_path, line, copy_truncate=True)
    except OSError:
        pass  # a full disk: the daemon is started all the same
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "cairn_cli", "daemon", "serve"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            env={**os.environ, "CAIRN_HOME": str(home)},
        )


def start_for_next_time(home, why: str) -> str:
    """Start a daemon for next time unless one is alive or already on its way; says what happened."""
    from cairn_cli.daemon import singleton

    try:
        refused = singleton.claim_spawn(home)
        if refused:
            return f"no daemon started: {refused}"
        spawn(home, why)
    except OSError as exc:
        return f"the daemon could not be started ({exc.strerror or exc})"
    return "daemon autostarted for next time"


def rank(request: PromptRequest, overrides: dict, *, autostart: bool = False) -> dict:
    """Rank `request` with settings `overrides`; returns RankResult.as_dict()."""
    from cairn_cli.errors import CairnError

    mode = config.get("DAEMON")
    if mode not in ("auto", "off"):
        from cairn_cli.errors import ConfigError

        raise ConfigError(f"CAIRN_DAEMON={mode!r} is not auto or off", "set CAIRN_DAEMON=auto")
    if mode == "off":
        return _in_process(request, overrides, fallback=None)
    backoff_s = config.get_float("DAEMON_BACKOFF_S")
    skipped = client.backoff_reason(backoff_s)
    if skipped:
        return _in_process(request, overrides, fallback=skipped)
    timeout_ms = config.get_int("DAEMON_TIMEOUT_MS")
    # the daemon logs nothing once we may have given up on it: no prompt is logged twice
    sent = {**request.as_dict(), "commit_deadline": time.time() + max(0.05, timeout_ms / 1000.0 - COMMIT_MARGIN_S)}
    try:
        answer = _ask(
            "rank", {"request": sent, "settings": overrides, "env": client.client_environ()}, timeout_ms, backoff_s
        )
        return answer["result"]
    except client.RemoteError as exc:
        err = CairnError(exc.message, exc.hint)
        err.exit_code = exc.exit_code
        raise err from None
    except client.Unavailable as exc:
        reason = str(exc)
        if isinstance(exc, client.NoAnswer) and backoff_s > 0:
            reason += f"; skipping the daemon for {backoff_s:g} s (back-off)"
        elif isinstance(exc, client.NotRunning) and autostart:
            reason += "; " + start_for_next_time(config.home_dir(), reason)
    return _in_process(request, overrides, fallback=reason)


def _ask(op: str, payload: dict, timeout_ms: int, backoff_s: float) -> dict:
    """client.request, keeping the back-off: no answer in time starts one; any other outcome (an answer, a refusal,
    no daemon at all) ends it, since there is no hung daemon to spare."""
    try:
        answer = client.request(op, payload, timeout_ms=timeout_ms)
    except client.NoAnswer as exc:
        if backoff_s > 0:
            client.start_backoff(str(exc))
        raise
    except (client.Unavailable, client.RemoteError):
        client.clear_backoff()
        raise
    client.clear_backoff()
    return answer


def _in_process(request: PromptRequest, overrides: dict, *, fallback: str | None) -> dict:
    from cairn_cli.config import Settings
    from cairn_cli.core.hooks.prompt import prompt_turn
    from cairn_cli.core.ranking.engine import RankEngine
    from cairn_cli.core.store import open_stores

    settings = Settings(**overrides)
    lean = open_stores(settings, lean=fallback is not None)  # the fallback: no peewee on a SQLite store (db.open_lean)
    try:
        engine = RankEngine.lexical_fallback(fallback) if fallback else RankEngine.in_process(settings)
        return prompt_turn(request, settings, engine).as_dict()
    finally:
        if lean:
            from cairn_cli import db

            db.close_lean()


def embed_with_model(texts: list[str], *, timeout_ms: int | None = None) -> tuple[str, list[list[float]]] | None:
    """(model name, unit vectors) for `texts` from the daemon's warm embedder (CAIRN_DAEMON=auto), or from this
    process's model (off). None when the daemon does not answer: callers degrade (semantic engagement skipped, a
    new memory waits for the daemon to embed it) instead of loading torch on a hook's path."""
    if config.get("DAEMON") == "off":
        name, vectors = _local_embed(texts)
        return name, vectors.tolist()
    backoff_s = config.get_float("DAEMON_BACKOFF_S")
    if client.backoff_reason(backoff_s):
        return None
    try:
        answer = _ask(
            "embed",
            {"texts": texts, "env": client.client_environ()},
            timeout_ms or max(2000, config.get_int("DAEMON_TIMEOUT_MS")),
            backoff_s,
        )
    except (client.Unavailable, client.RemoteError):
        return None
    return answer["model"], answer["vectors"]


def embed_daemon_first(texts: list[str]):
    """(model name, vectors) for a bulk embedding (`memory import`): through the warm daemon, EMBED_BATCH texts to a
    request, when it answers ready; else in this process, as without a daemon (also when it stops answering midway:
    one model for all the vectors)."""
    if texts and config.get("DAEMON") == "auto" and _daemon_ready():
        model, vectors = None, []
        for i in range(0, len(texts), EMBED_BATCH):
            got = embed_with_model(texts[i : i + EMBED_BATCH], timeout_ms=EMBED_BATCH_TIMEOUT_MS)
            if got is None or model not in (None, got[0]):
                break
            model = got[0]
            vectors.extend(got[1])
        else:
            return model, vectors
    return _local_embed(texts)


def _daemon_ready() -> bool:
    backoff_s = config.get_float("DAEMON_BACKOFF_S")
    if client.backoff_reason(backoff_s):
        return False
    try:
        health = _ask("health", {}, config.get_int("DAEMON_TIMEOUT_MS"), backoff_s)
    except (client.Unavailable, client.RemoteError):
        return False
    return health.get("state") == "ready"


def _local_embed(texts: list[str]):
    """(model name, float32 array): the live embedder (core/store/embedders.py; the stores are open), loaded in this
    process (ml/models.embed_here)."""
    from cairn_cli.config import Settings
    from cairn_cli.core.store.embedders import live_name
    from cairn_cli.ml.models import embed_here

    return embed_here(texts, live_name(Settings()), config.get_str("EMBED_DTYPE"))
