"""The Stop hook: the response's [cm] block (new memories, grades, evidence) and the engagement of the turn's
deliveries, written in one transaction per database, retried under contention and spooled when still not written
in time; re-running the same Stop changes nothing (docs/stop.md).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from cairn_cli.config import Settings
from cairn_cli.core.hooks.payload import HookPayload


@dataclass
class StopReport:
    session_id: str
    turn: int | None
    response_source: str | None = None
    skipped: str | None = None
    memories: list[dict] = field(default_factory=list)
    grades: dict | None = None
    engagement: dict | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    spooled: str | None = None  # the spool file this Stop waits in (its transaction could not be written)

    def summary(self) -> str:
        if self.spooled:
            return f"session {self.session_id} turn {self.turn}: spooled to {self.spooled}"
        if self.skipped:
            return f"session {self.session_id} turn {self.turn}: {self.skipped}"
        g, e = self.grades or {}, self.engagement or {}
        return (
            f"session {self.session_id} turn {self.turn}: {len(self.memories)} memories written, "
            f"{len(g.get('applied', []))} graded, {len(g.get('rejected', []))} grades rejected, "
            f"{e.get('engaged', 0)}/{e.get('decided', 0)} engaged, {len(self.problems)} problems "
            f"(response from {self.response_source})"
        )


def response_text(payload: HookPayload, wait_ms: int, max_bytes: int) -> tuple[str | None, str | None]:
    """(the response, where it came from): `last_assistant_message`, else the assistant text after the last
    typed prompt in the transcript, waiting up to `wait_ms` for it to be written."""
    if payload.last_assistant_message is not None:
        return payload.last_assistant_message, "last_assistant_message"
    if not payload.transcript_path:
        return None, None
    from cairn_cli.core.transcript import read_transcript

    path = os.path.expanduser(payload.transcript_path)
    deadline = time.monotonic() + wait_ms / 1000.0
    while True:
        try:
            text = read_transcript(path, max_bytes=max_bytes, raw=True).last_response()
        except OSError as exc:
            return None, f"the transcript cannot be read: {exc}"
        if text is not None:
            from cairn_cli.core.redact import scrub

            return scrub(text), "transcript"  # only the response is kept: only it is scrubbed
        if time.monotonic() >= deadline:
            return None, None
        time.sleep(0.05)


class StopNotWritten(Exception):
    """The Stop's transaction could not be written within its budget: what a spool file needs to apply it later."""

    def __init__(self, record: dict, cause: BaseException):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.record = record


def stop_or_spool(
    payload: HookPayload, settings: Settings, *, home: str, embed_with_model, embed, context: dict | None = None
) -> StopReport:
    """The Stop hook's unit of work: apply it (retrying a locked store within its budget), else keep it in the
    spool; then apply a few Stops that were waiting there (this one's success says the store takes writes now).
    `context` receives the turn as soon as it is known (what a hook.log error names)."""
    from cairn_cli.core.hooks import spool

    try:
        report = apply_stop(payload, settings, embed_with_model=embed_with_model, embed=embed, context=context)
    except StopNotWritten as exc:
        return spooled_report(payload, home, exc.record, str(exc))
    if spool.waiting(home):
        run = apply_spooled(home, settings, embed_with_model=embed_with_model, embed=embed, limit=5, budget_s=5.0)
        if run.applied or run.failed:
            report.notes.append(f"spool: {len(run.applied)} waiting Stops applied, {len(run.failed)} still waiting")
    return report


def spooled_report(payload: HookPayload, home: str, record: dict, error: str) -> StopReport:
    """Keep the Stop in the spool; the report says where."""
    from cairn_cli.core.hooks import spool

    report = StopReport(payload.session_id, record.get("turn"))
    report.spooled = spool.write(home, {**record, "error": error})
    return report


def spool_record(payload: HookPayload, turn: int | None, text: str | None, source: str | None) -> dict:
    """What a spooled Stop keeps: enough to apply it later as it would have been applied now."""
    import datetime as dt

    return {
        "payload": {
            "session_id": payload.session_id,
            "agent_id": payload.agent_id,
            "agent_type": payload.agent_type,
            "cwd": payload.cwd,
            "transcript_path": payload.transcript_path,
            "last_assistant_message": text,
        },
        "turn": turn,
        "response_source": source,
        "spooled_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def apply_spooled(home: str, settings: Settings, *, embed_with_model, embed, limit=None, budget_s=None):
    """Apply the Stops waiting in the spool (oldest first; each at most once)."""
    from cairn_cli.core.hooks import spool
    from cairn_cli.core.hooks.payload import STOP_EVENT

    def apply_one(record: dict) -> None:
        fields = {k: v for k, v in record["payload"].items() if k in HookPayload.FIELDS}
        payload = HookPayload(STOP_EVENT, str(record["payload"]["session_id"]), **fields)
        turn = record.get("turn")
        if not isinstance(turn, int):  # spooled before its turn was known: the newest turn as it was then
            turn = _current_turn(payload.session_id, before=record.get("spooled_at"))[1]
        try:
            apply_stop(
                payload,
                settings,
                embed_with_model=embed_with_model,
                embed=embed,
                turn=turn,
                response_source=record.get("response_source") or "spool",
            )
        except StopNotWritten as exc:
            raise RuntimeError(str(exc)) from None

    return spool.apply_waiting(home, apply_one, limit=limit, budget_s=budget_s)


def apply_stop(
    payload: HookPayload,
    settings: Settings,
    *,
    embed_with_model,
    embed,
    turn: int | None = None,
    response_source: str | None = None,
    context: dict | None = None,
) -> StopReport:
    """Apply the turn's [cm] block and engagement. `embed_with_model(texts)` -> (model, vectors) | None is used
    for new memories, `embed(texts)` -> vectors | None for the semantic engagement test. `turn`: the turn a
    spooled Stop answered (else the session's newest); `context` receives the turn as soon as it is known (what a
    hook.log error names). Raises StopNotWritten when the store does not take the transaction within
    CAIRN_STOP_WRITE_BUDGET_S."""
    from cairn_cli.core.experiment.rules import live
    from cairn_cli.core.labels.cm import parse_cm
    from cairn_cli.core.labels.engagement import engagement_decisions, turn_memories
    from cairn_cli.core.store.dedup import precomputed_embedder
    from cairn_cli.core.text import sha256
    from cairn_cli.db import retry_conflicts

    budget = settings.STOP_WRITE_BUDGET_S
    if turn is None:
        row, turn = _current_turn(payload.session_id)
    else:
        from cairn_cli.core.store import hookstate

        row = hookstate.get_turn(payload.session_id, turn)
    if context is not None:
        context["turn"] = turn
    report = StopReport(payload.session_id, turn)
    if payload.is_subagent:
        try:
            retry_conflicts(lambda: _record_subagent_stop(row, payload), budget_s=budget)
        except _db_errors() as exc:
            raise StopNotWritten(spool_record(payload, turn, None, None), exc) from exc
        report.skipped = f"subagent {payload.agent_id} stop recorded; subagents are not graded"
        return report
    text, report.response_source = response_text(
        payload, settings.HOOK_TRANSCRIPT_WAIT_MS, settings.TRANSCRIPT_MAX_BYTES
    )
    if text is None:
        why = report.response_source or "none in the transcript"
        report.skipped, report.response_source = f"no response text (no last_assistant_message; {why})", None
        return report
    if response_source:
        report.response_source = response_source
    digest = sha256(text)
    data = (row.data or {}) if row is not None else {}
    if (data.get("stop") or {}).get("response_sha256") == digest:
        report.skipped = "this response was already applied"
        return report
    source_ref = data.get("source_ref") or live(settings).version
    cm = parse_cm(text, source_ref=source_ref, session_id=payload.session_id)
    report.problems.extend(cm.problems)
    if not cm.found:
        report.notes.append("the response has no [cm] block")
    _cap_memories(cm, settings.STOP_MAX_MEMORIES, report)
    # model calls first, outside the transaction: new memories' embeddings, the semantic engagement test
    embedder = precomputed_embedder(cm.memories, embed_with_model, report.notes)
    delivered = turn_memories(payload.session_id, turn) if turn is not None else []
    decisions, notes = engagement_decisions(delivered, text, data.get("prompt") or "", settings, embed)
    report.notes.extend(notes)
    # many sessions' Stops write at once: a transaction that finds the store locked (SQLite) or loses a conflict
    # (PostgreSQL) is run again, whole, until the budget is spent; then the Stop waits in the spool
    notes, problems = list(report.notes), list(report.problems)

    def attempt() -> None:
        report.notes[:], report.problems[:] = notes, problems  # a retried attempt reports once
        _write(payload.session_id, row, turn, cm, decisions, digest, source_ref, embedder, settings, report)

    try:
        retry_conflicts(attempt, budget_s=budget)
    except _db_errors() as exc:
        raise StopNotWritten(spool_record(payload, turn, text, report.response_source), exc) from exc
    if (report.grades or {}).get("applied"):
        if data.get("grade_asked") is False:  # kept: the agent's judgement, weighted like the turn's asked ones
            report.notes.append("grades given on a turn that asked for none (teacher demotion): kept")
        _check_drift(settings, report)
    return report


def _check_drift(settings: Settings, report: StopReport) -> None:
    """New grades: the drift check of teacher demotion (core/learning/demotion.py), which raises the grade rate back
    to 1 when the live learner stops agreeing with them. Best effort: the next graded Stop checks again."""
    from cairn_cli.core.learning import demotion

    try:
        status = demotion.check_drift(settings)
    except Exception as exc:  # never the Stop's failure: its labels are written
        report.notes.append(f"drift check skipped: {type(exc).__name__}: {exc}")
        return
    if status and status.get("alarm"):
        report.notes.append(
            f"drift alarm: the learner agrees with {status['agreement']:.3f} of {status['pairs']} fresh pairs "
            f"(< {status['threshold']:.3f}); every turn asks for grades"
        )


def _db_errors() -> tuple[type[BaseException], ...]:
    from cairn_cli import db

    return db.errors()


def _current_turn(session_id: str, *, before: str | None = None):
    """(the newest main-agent hook_state row or None, its turn — else the session's last delivered turn — or None);
    `before` (an ISO time, UTC): the newest as it was then."""
    import datetime as dt

    from cairn_cli.core.store import hookstate
    from cairn_cli.db.tables import MemoryDelivery

    until = dt.datetime.fromisoformat(before).replace(tzinfo=None) if before else None
    row = hookstate.latest_main_turn(session_id, before=until)
    if row is not None:
        return row, row.turn
    query = MemoryDelivery.select(MemoryDelivery.turn).where(MemoryDelivery.session_id == session_id)
    if until is not None:
        query = query.where(MemoryDelivery.delivered_at <= until)
    return None, query.order_by(MemoryDelivery.turn.desc()).scalar()


def _record_subagent_stop(row, payload: HookPayload) -> None:
    from cairn_cli.core.store import hookstate

    if row is None:
        return
    events = list((row.data or {}).get("subagent_stops", []))
    if payload.agent_id not in [e.get("agent_id") for e in events]:
        hookstate.update_data(
            row, subagent_stops=[*events, {"agent_id": payload.agent_id, "agent_type": payload.agent_type}]
        )


def _cap_memories(cm, cap: int, report: StopReport) -> None:
    """A runaway agent writes at most `cap` memories a turn; the rest is reported, never silently dropped."""
    if len(cm.memories) > cap:
        report.problems.append(
            f"{len(cm.memories) - cap} more memories not written (CAIRN_STOP_MAX_MEMORIES={cap}): "
            "a turn writes a few memories, not hundreds"
        )
        cm.memories = cm.memories[:cap]


def _write(session_id, row, turn, cm, decisions, digest, source_ref, embedder, settings, report: StopReport) -> None:
    """Everything the Stop writes, in one transaction per database (memory store first, as every writer of both
    takes them). A Stop that another process applied meanwhile (a spooled copy, a retried hook) changes nothing."""
    from cairn_cli.core.labels.engagement import write_decisions
    from cairn_cli.core.labels.grades import apply_relevance_grades
    from cairn_cli.core.store import hookstate
    from cairn_cli.core.store.dedup import add_memories
    from cairn_cli.db.tables import HookState, ephemeral_proxy, memory_proxy

    report.memories, report.grades, report.engagement = [], None, None  # a retried attempt starts afresh
    with memory_proxy.atomic(), ephemeral_proxy.atomic():
        if row is not None:
            now = HookState.select(HookState.data).where(HookState.id == row.id).scalar() or {}
            if (now.get("stop") or {}).get("response_sha256") == digest:
                report.skipped = "this response was already applied"
                return
        if cm.memories:
            results = add_memories(cm.memories, settings, embed=embedder, notes=report.notes)
            report.memories = [
                {"id": r.id, "action": r.action, "source_ref": source_ref}
                | ({"method": r.method} if r.method else {})
                | ({"similarity": r.similarity} if r.similarity is not None else {})
                for r in results
            ]
        if turn is not None and cm.found:
            graded = apply_relevance_grades(cm, session_id, settings, turn=turn)
            report.grades = graded.as_dict()
            report.problems = list(dict.fromkeys(report.problems + graded.problems))
        elif cm.grades:
            report.problems.append("grades ignored: no turn of this session was ranked")
        write_decisions(decisions)
        report.engagement = {
            "engaged": sum(d.engaged for d in decisions),
            "decided": len(decisions),
            "decisions": [vars(d) for d in decisions],
        }
        if row is not None:
            stop = {
                "response_sha256": digest,
                "memories": len(report.memories),
                "graded": len((report.grades or {}).get("applied", [])),
                "engaged": report.engagement["engaged"],
            }
            hookstate.update_data(row, stop=stop)
