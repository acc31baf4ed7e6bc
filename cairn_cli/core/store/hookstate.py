"""hook_state: one row per session and turn, written when the prompt hook ranks (prompt, scope, generation
version, transcript, subagent marks) and read back by the Stop hook and by engagement."""

from __future__ import annotations

from cairn_cli.clock import utcnow

PROMPT_CHARS = 4000  # what engagement needs of the prompt (its terms), not the whole of a pasted log


def record_turn(session_id: str, turn: int, *, context_key: str, hook: dict) -> None:
    """Create or update the turn's row (the ephemeral store is open; the caller holds the transaction). Plain SQL:
    the hot path writes it through the lean connection too."""
    import orjson

    from cairn_cli import db
    from cairn_cli.db import turn_log
    from cairn_cli.db.instance import writing_instance

    data = {k: v for k, v in hook.items() if k not in ("transcript_path", "agent_id", "is_subagent", "arm")}
    if isinstance(data.get("prompt"), str):
        data["prompt"] = data["prompt"][:PROMPT_CHARS]
    row = turn_log.turn_row(session_id, turn)
    fields = {
        "transcript_path": hook.get("transcript_path"),
        "agent_id": hook.get("agent_id"),
        "is_subagent": bool(hook.get("is_subagent")),
        "arm": hook.get("arm"),
        "context_key": context_key,
    }
    if row is None:
        values = {
            "session_id": session_id,
            "turn": turn,
            **fields,
            "data": orjson.dumps(data).decode(),
            "created_at": db.timestamp("ephemeral", utcnow()),
            "instance": writing_instance(),
        }
        db.insert("ephemeral", "hook_state", values)
    else:
        row_id, stored = row
        values = {**fields, "data": orjson.dumps({**(orjson.loads(stored) if stored else {}), **data}).decode()}
        turn_log.update_turn(row_id, values)


def get_turn(session_id: str, turn: int):
    from cairn_cli.db.tables import HookState

    return HookState.get_or_none((HookState.session_id == session_id) & (HookState.turn == turn))


def latest_main_turn(session_id: str, *, before=None):
    """The newest turn the prompt hook recorded for the main agent (subagent turns excluded), or None; `before` (a
    naive UTC datetime): the newest recorded by then."""
    from cairn_cli.db.tables import HookState

    query = HookState.select().where((HookState.session_id == session_id) & (HookState.is_subagent == False))  # noqa: E712
    if before is not None:
        query = query.where(HookState.created_at <= before)
    return query.order_by(HookState.turn.desc()).first()


def turn_prompt(session_id: str, turn: int) -> str | None:
    row = get_turn(session_id, turn)
    prompt = (row.data or {}).get("prompt") if row is not None else None
    return prompt if isinstance(prompt, str) else None


def update_data(row, **values) -> None:
    """Merge `values` into the turn's data as it is NOW in the database (the caller holds the transaction): a copy
    read earlier must never write back keys someone else changed meanwhile."""
    from cairn_cli.db.tables import HookState

    current = HookState.select(HookState.data).where(HookState.id == row.id).scalar()
    row.data = {**(current or {}), **values}
    HookState.update(data=row.data).where(HookState.id == row.id).execute()
