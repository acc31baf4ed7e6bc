"""`cairn hook prompt` and `cairn hook stop`: what Claude Code, Codex CLI and Gemini CLI run (core/hooks/agents.py:
each agent's events, response field and output form). They never block or break the session: every failure is
written to $CAIRN_HOME/logs/hook.log and the hook exits 0 (the prompt goes through without memories; the turn
simply stays unlabelled). The prompt hook is on the hot path: no Typer, rich, numpy or torch
here when the daemon answers (entry.py calls these directly)."""

from __future__ import annotations

import os
import sys
import time

LOG_NAME = "hook.log"


def log(line: str, *, scrub: bool = True) -> None:
    """Append one line to $CAIRN_HOME/logs/hook.log, whole or not at all (rotated past CAIRN_LOG_MAX_BYTES), scrubbed
    unless it holds only cairn's own words and ids (`scrub=False`); a hook must not fail because its log cannot be
    written (a full disk)."""
    try:
        from cairn_cli.config import home_dir
        from cairn_cli.files import append_log

        stamped = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}"
        append_log(os.path.join(home_dir(), "logs", LOG_NAME), stamped, scrub=scrub)
    except Exception:
        pass


def _failed(event: str, exc: BaseException, where: dict) -> int:
    """Log why the hook did nothing, naming the session and turn (so the turn can be found again), and exit 0."""
    from cairn_cli.errors import CairnError

    named = f"session={where.get('session', '?')} turn={where.get('turn', '?')}"
    if isinstance(exc, CairnError):
        log(f"{event} error: {named}: {exc.one_line()}")
    else:
        import traceback

        log(f"{event} error: {named}: unexpected {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    return 0


def run_prompt(raw: bytes | None = None) -> int:
    """UserPromptSubmit: rank, log the deliveries and the turn, print the rules and memories for the context."""
    t0 = time.perf_counter()
    where: dict = {}
    try:
        from cairn_cli import config
        from cairn_cli.core.hooks.payload import PROMPT_EVENT, parse_payload, prompt_request
        from cairn_cli.daemon import dispatch
        from cairn_cli.hotpath import stdin_bytes

        payload = parse_payload(stdin_bytes() if raw is None else raw, PROMPT_EVENT)
        where["session"] = payload.session_id
        result = dispatch.rank(prompt_request(payload, config.get_str("HOOK_SCOPE")), {}, autostart=True)
        if result["injection"]:
            from cairn_cli.core.hooks.agents import prompt_output

            sys.stdout.write(prompt_output(payload.agent or "claude", result["injection"]) + "\n")
            sys.stdout.flush()
        notes = "; ".join(result.get("notes", []))
        log(
            f"prompt session={payload.session_id} turn={result['turn']} delivered={len(result['memories'])} "
            f"ranker={result['ranker']} reranker={result['reranker_model']} "
            f"ms={(time.perf_counter() - t0) * 1000:.0f}" + (f" notes: {notes}" if notes else ""),
            scrub=False,  # ids, counts and notes the ranking scrubbed (core/hooks/prompt.py): no re on the hot path
        )
        return 0
    except BaseException as exc:
        return _failed("prompt", exc, where)


def run_stop(raw: bytes | None = None) -> int:
    """Stop: apply the response's [cm] block (memories, grades, evidence) and engagement; prints nothing."""
    t0 = time.perf_counter()
    where: dict = {}
    try:
        from cairn_cli import db
        from cairn_cli.config import Settings, home_dir
        from cairn_cli.core.hooks.payload import STOP_EVENT, parse_payload
        from cairn_cli.core.hooks.stop import spool_record, spooled_report, stop_or_spool
        from cairn_cli.core.store import open_stores
        from cairn_cli.daemon import dispatch
        from cairn_cli.hotpath import stdin_bytes

        payload = parse_payload(stdin_bytes() if raw is None else raw, STOP_EVENT)
        where["session"] = payload.session_id
        settings = Settings()
        try:
            open_stores(settings)
        except db.errors() as exc:  # the store cannot be opened now (locked through a migration, a full disk)
            record = spool_record(payload, None, payload.last_assistant_message, None)
            report = spooled_report(payload, home_dir(), record, f"{type(exc).__name__}: {exc}")
        else:
            report = stop_or_spool(
                payload,
                settings,
                home=home_dir(),
                embed_with_model=dispatch.embed_with_model,
                embed=dispatch.embed_with_model,
                context=where,
            )
        extra = "; ".join(report.problems + report.notes)
        log(f"stop {report.summary()} ms={(time.perf_counter() - t0) * 1000:.0f}" + (f" | {extra}" if extra else ""))
        return 0
    except BaseException as exc:
        return _failed("stop", exc, where)
