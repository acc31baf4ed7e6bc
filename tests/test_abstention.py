"""Inject nothing rather than noise: a prompt about nothing in the store gets no memory on any path (the daemon's
composite with the real model, and the lexical fallback), a relevant one still gets its memory, and the turn
records that it abstained and why."""

from __future__ import annotations

import json

import pytest

from cairn_cli import hook_entry
from cairn_cli.config import Settings
from cairn_cli.core.ranking.profiles import SHIPPED_FLOORS, composite_floor
from cairn_cli.core.store import deliveries, hookstate
from tests.conftest import EXAMPLES

HAIKU = "Write a haiku about autumn leaves falling in Kyoto"
RELEVANT = "the integration tests all fail with connection refused"


@pytest.fixture
def store(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0


def _hook(prompt: str, session: str) -> str:
    raw = json.dumps({"session_id": session, "cwd": "/src/webshop", "prompt": prompt}).encode()
    assert hook_entry.run_prompt(raw) == 0


@pytest.mark.slow
@pytest.mark.usefixtures("real_model")
def test_the_model_path_abstains_on_nothing_relevant_and_keeps_the_relevant_memory(store, capsys):
    _hook(HAIKU, "haiku")
    assert "<memory id=" not in capsys.readouterr().out
    assert deliveries.list_deliveries(Settings(), session_id="haiku") == []
    turn = hookstate.get_turn("haiku", 1)
    assert turn.data["abstained"].startswith("abstained: no memory reaches the composite floor 0.")
    _hook(RELEVANT, "ok")
    out = capsys.readouterr().out
    assert '<memory id="1"' in out  # the PostgreSQL memory
    assert hookstate.get_turn("ok", 1).data["abstained"] is None


@pytest.mark.parametrize("prompt, injected", [(HAIKU, False), (RELEVANT, True)])
def test_the_lexical_fallback_abstains_too(store, cli, prompt, injected, monkeypatch):
    monkeypatch.setenv("CAIRN_DAEMON", "auto")  # no daemon runs: the in-process lexical fallback answers
    result = cli("rank", prompt, "--scope", "webshop", "--session", "fb", "--json")
    data = json.loads(result.stdout)
    assert data["ranker"] == "cairn-fallback"
    assert bool(data["memories"]) is injected
    if injected:
        assert data["memories"][0]["id"] == 1
        assert data["memories"][0]["components"]["composite_floor"] == SHIPPED_FLOORS[("default", "lexical")]
    else:
        assert any(n.startswith("abstained") for n in data["notes"])


def test_the_floor_in_force_calibrated_beats_shipped_and_the_setting_beats_both(monkeypatch):
    from cairn_cli.core.store import state

    s = Settings()
    assert composite_floor(s, "default", "all-MiniLM-L6-v2") == (
        SHIPPED_FLOORS[("default", "all-MiniLM-L6-v2")],
        "shipped",
    )
    assert composite_floor(s, "default", "hashing") == (0.0, "shipped")  # no shipped floor for the test encoder
    state.put("composite_floor:default:all-MiniLM-L6-v2", 0.2, s, by="test", reason="calibrated")
    assert composite_floor(s, "default", "all-MiniLM-L6-v2") == (0.2, "calibrated")
    monkeypatch.setenv("CAIRN_COMPOSITE_FLOOR", "0.5")
    assert composite_floor(Settings(), "default", "all-MiniLM-L6-v2") == (0.5, "CAIRN_COMPOSITE_FLOOR")
    monkeypatch.setenv("CAIRN_COMPOSITE_FLOOR", "off")
    assert composite_floor(Settings(), "default", "all-MiniLM-L6-v2") == (0.0, "off")


def test_calibrate_floor_fits_the_composite_floor_from_grades(store, cli):
    from cairn_cli.core.store import state

    s = Settings()
    # graded deliveries of the default profile: relevant ones score high, irrelevant ones low
    for turn in range(1, 31):
        result = cli("rank", RELEVANT, "--scope", "webshop", "--session", "cal", "--turn", turn, "--json")
        ids = [m["id"] for m in json.loads(result.stdout)["memories"]]
        block = "[cm]" + json.dumps({"rg": [f"{ids[0]}:3"] + [f"{i}:0" for i in ids[1:]]}) + "[/cm]"
        assert cli("grade", "--session", "cal", "--turn", turn, block).exit_code == 0
    out = cli("calibrate-floor", "--model", "composite", "--apply", "--json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["key"] == "composite_floor:default:hashing" and report["applied"]
    assert report["proposed"]["3"]["dropped"] <= 1 and report["proposed"]["0"]["dropped"] > 0
    assert composite_floor(s, "default", "hashing") == (report["proposal"], "calibrated")
    assert state.get("composite_floor:default:hashing", s) == report["proposal"]


def test_stats_counts_abstentions(store, cli, monkeypatch):
    monkeypatch.setenv("CAIRN_COMPOSITE_FLOOR", "0.9")  # nothing reaches it
    _hook(HAIKU, "a")
    monkeypatch.setenv("CAIRN_COMPOSITE_FLOOR", "off")
    _hook(RELEVANT, "b")
    rows = json.loads(cli("stats", "prompts", "--json").stdout)
    assert [(r["prompts"], r["injected"], r["abstained"]) for r in rows] == [(2, 1, 1)]
