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
    desc = state.describe("GENERATION_PROMPT_VERSION", s)
    assert desc.value == {"A": "gen-v3"}
    assert [(h["old"], h["new"], h["by"]) for h in desc.history] == [
        (None, "gen-v2", "ab selfmod"),
        ("gen-v2", {"A": "gen-v3"}, "operator"),
    ]
    assert desc.history[0]["evidence"] == {"sessions": 40}
