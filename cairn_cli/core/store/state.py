"""Machine-managed state: values cairn rewrites itself (generation-prompt version, A/B arms, floors, the
deployed student), each with an audit trail of who set what, when and why. Never hand-edited constants."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings

HISTORY_LIMIT = 200


@dataclass
class StateValue:
    key: str
    value: Any
    updated_at: str | None
    history: list[dict]


def get(key: str, settings: Settings, default: Any = None) -> Any:
    """The value of `key` (plain SQL: the hot path reads the floors and the generation rules through the lean
    connection too)."""
    import orjson

    from cairn_cli import db

    rows = db.execute("memory", "SELECT value FROM machine_state WHERE key = ?", (key,))
    if not rows:
        return default
    return None if rows[0][0] is None else orjson.loads(rows[0][0])


def describe(key: str, settings: Settings) -> StateValue:
    from cairn_cli.db.tables import MachineState

    row = MachineState.get_or_none(MachineState.key == key)
    if row is None:
        return StateValue(key, None, None, [])
    return StateValue(key, row.value, row.updated_at.isoformat(timespec="seconds"), list(row.history))


def put(key: str, value: Any, settings: Settings, *, by: str, reason: str, evidence: dict | None = None) -> bool:
    """Set the value and append an audit record. Setting the same value again changes nothing (returns False)."""
    from cairn_cli.db.tables import MachineState, memory_proxy

    now = utcnow()
    with memory_proxy.atomic():
        row = MachineState.get_or_none(MachineState.key == key)
        if row is not None and row.value == value:
            return False
        record = {
            "at": now.isoformat(timespec="seconds"),
            "by": by,
            "reason": reason,
            "old": None if row is None else row.value,
            "new": value,
        }
        if evidence:
            record["evidence"] = evidence
        if row is None:
            MachineState.create(key=key, value=value, updated_at=now, history=[record])
        else:
            row.value, row.updated_at = value, now
            row.history = (list(row.history) + [record])[-HISTORY_LIMIT:]
            row.save()
    return True


def get_many(keys: tuple[str, ...], settings: Settings) -> dict[str, Any]:
    """The values of those of `keys` that are set, in one query (what `get` gives for each; a key that is not set
    is absent: `.get(key, default)` reads it as `get(key, settings, default)` does)."""
    import orjson

    from cairn_cli import db

    sql = f"SELECT key, value FROM machine_state WHERE key IN ({db.marks(len(keys))})"
    return {key: None if value is None else orjson.loads(value) for key, value in db.execute("memory", sql, keys)}
