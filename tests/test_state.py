import pytest

from cairn_cli.config import Settings
from cairn_cli.core.store import state

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")


def test_machine_state_keeps_an_audit_trail_and_is_idempotent():
    s = Settings()
    assert state.get("GENERATION_PROMPT_VERSION", s, default="gen-v1") == "gen-v1"
    assert state.put(
        "GENERATION_PROMPT_VERSION", "gen-v2", s, by="ab selfmod", reason="B beat A", evidence={"sessions": 40}
    )
    assert not state.put("GENERATION_PROMPT_VERSION", "gen-v2", s, by="ab selfmod", reason="again")
    assert state.put("GENERATION_PROMPT_VERSION", {"A": "gen-v3"}, s, by="operator", reason="manual")
    value, history = _audit("GENERATION_PROMPT_VERSION")
    assert value == {"A": "gen-v3"}
    assert [(h["old"], h["new"], h["by"]) for h in history] == [
        (None, "gen-v2", "ab selfmod"),
        ("gen-v2", {"A": "gen-v3"}, "operator"),
    ]
    assert history[0]["evidence"] == {"sessions": 40}


def _audit(key: str) -> tuple:
    """(value, audit trail) of a machine-state key as stored; (None, []) when it was never set."""
    from cairn_cli.db.tables import MachineState

    row = MachineState.get_or_none(MachineState.key == key)
    return (None, []) if row is None else (row.value, list(row.history))
