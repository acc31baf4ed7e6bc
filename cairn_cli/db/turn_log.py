"""The statements of one turn's log: its hook_state row and its deliveries. Plain SQL through `db.execute`, so that
the hook's hot path writes them through the lean connection too."""

from __future__ import annotations

from collections.abc import Sequence

from cairn_cli import db as _store


def turn_row(session_id: str, turn: int) -> tuple[int, str | None] | None:
    """(id, data JSON) of the turn's hook_state row, or None."""
    rows = _store.execute(
        "ephemeral", "SELECT id, data FROM hook_state WHERE session_id = ? AND turn = ?", (session_id, turn)
    )
    return rows[0] if rows else None


def update_turn(row_id: int, values: dict) -> None:
    _store.execute(
        "ephemeral",
        f"UPDATE hook_state SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?",
        [*values.values(), row_id],
    )


def last_turn(session_id: str) -> int:
    """The session's highest turn in the delivery log or the hook state (0: none yet)."""
    return max(
        _store.execute("ephemeral", f"SELECT MAX(turn) FROM {table} WHERE session_id = ?", (session_id,))[0][0] or 0
        for table in ("memory_deliveries", "hook_state")
    )


def known_memories(ids: Sequence[int]) -> set[int]:
    """Which of `ids` are memories of the memory store."""
    if not ids:
        return set()
    sql = f"SELECT id FROM memories WHERE id IN ({_store.marks(len(ids))})"
    return {r[0] for r in _store.execute("memory", sql, ids)}


def logged(session_id: str, turn: int, context_key: str, memory_ids: Sequence[int]) -> dict[int, int]:
    """memory id -> its first delivery's id, for those of `memory_ids` already logged in this turn and window."""
    return dict(
        _store.execute(
            "ephemeral",
            "SELECT memory_id, MIN(id) FROM memory_deliveries WHERE session_id = ? AND turn = ? AND context_key = ?"
            f" AND memory_id IN ({_store.marks(len(memory_ids))}) GROUP BY memory_id",
            [session_id, turn, context_key, *memory_ids],
        )
    )
