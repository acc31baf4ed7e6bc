"""Machine-managed state: values cairn rewrites itself (generation-prompt version, A/B arms, floors, the
deployed student), each with an audit trail of who set what, when and why. Never hand-edited constants."""

from __future__ import annotations

from typing import Any

from cairn_cli.clock import utcnow
from cairn_cli.config import Settings

HISTORY_LIMIT = 200


def get(key: str, settings: Settings, default: Any = None) -> Any:
    """The value of `key` (plain SQL: the hot path reads the floors and the generation rules through the lean
    connection too)."""
    import orjson

    from cairn_cli.db import machine_state

    row = machine_state.value_json(key)
    if row is None:
        return default
    return None if row[0] is None else orjson.loads(row[0])


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

    from cairn_cli.db import machine_state

    return {key: None if value is None else orjson.loads(value) for key, value in machine_state.values_json(keys)}
