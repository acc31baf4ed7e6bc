"""Regressions of issue 12's label bugs: evidence counted once across the Stop hook and `cairn grade`, one bad id
never loses a Stop, ids and grades are ASCII digits only, and a runaway Stop is capped."""

from __future__ import annotations

import json

import pytest

from cairn_cli import hook_entry
from cairn_cli.config import Settings
from cairn_cli.core.labels.cm import parse_cm
from cairn_cli.core.store import deliveries, memories
from tests.conftest import EXAMPLES

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")


def _prompt(capsys, session="r1", prompt="integration tests fail with connection refused on port 5433"):
    raw = json.dumps(
        {"session_id": session, "cwd": "/src/webshop", "hook_event_name": "UserPromptSubmit", "prompt": prompt}
    ).encode()
    assert hook_entry.run_prompt(raw) == 0
    out = capsys.readouterr().out
    return [int(x.split('"')[1]) for x in out.split("<memory id=")[1:]]


def _stop(message, session="r1"):
    raw = json.dumps({"session_id": session, "hook_event_name": "Stop", "last_assistant_message": message}).encode()
    assert hook_entry.run_stop(raw) == 0


@pytest.fixture
def store(cli):
    assert cli("memory", "import", EXAMPLES).exit_code == 0


def test_stop_then_grade_on_the_same_turn_counts_a_corroboration_once(store, cli, capsys):
    shown = _prompt(capsys)
    block = f'Done.\n[cm]{{"rg": ["{shown[0]}:3"], "cu": [{shown[0]}]}}[/cm]'
    _stop(block)
    assert memories.get_memory(shown[0], Settings()).corroborations == 1
    result = cli("grade", "--session", "r1", "--turn", "1", "--json", block)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["evidence_skipped"] == [shown[0]]
    assert memories.get_memory(shown[0], Settings()).corroborations == 1


def test_grade_then_stop_on_the_same_turn_counts_a_contradiction_once(store, cli, capsys):
    shown = _prompt(capsys)
    block = f'Done.\n[cm]{{"-!": [{shown[1]}]}}[/cm]'
    assert cli("grade", "--session", "r1", "--turn", "1", block).exit_code == 0
    _stop(block)
    assert memories.get_memory(shown[1], Settings()).contradictions == 1


def test_one_oversized_id_is_skipped_and_the_rest_of_the_stop_applies(store, capsys, cairn_home):
    shown = _prompt(capsys)
    _stop(
        'Use make db-up.\n[cm]{"m": ["Start the database with make db-up before the integration tests"], '
        f'"rg": ["{shown[0]}:3"], "cu": [99999999999999999999999, {shown[0]}], '
        '"-!": ["99999999999999999999999"]}[/cm]'
    )
    s = Settings()
    assert memories.get_memory(shown[0], s).corroborations == 1
    rows = {r.memory_id: r for r in deliveries.list_deliveries(s, session_id="r1")}
    assert rows[shown[0]].grade == 3 and all(r.engaged is not None for r in rows.values())
    assert any("Start the database with make db-up" in m.content for m in memories.list_memories(s))
    log = (cairn_home / "logs" / "hook.log").read_text()
    assert "is not a memory id" in log and "error" not in log


def test_grade_with_an_oversized_id_applies_the_rest_and_exits_2(store, cli, capsys):
    shown = _prompt(capsys)
    result = cli(
        "grade",
        "--session",
        "r1",
        "--json",
        f'[cm]{{"rg": ["{shown[0]}:2", "99999999999999999999999:1"], "cu": [99999999999999999999999]}}[/cm]',
    )
    assert result.exit_code == 2, result.output
    assert {r.memory_id: r.grade for r in deliveries.list_deliveries(Settings(), session_id="r1")}[shown[0]] == 2


@pytest.mark.parametrize("item", ["١٦:2", "１６:1", "16:²", "16:٣"])
def test_ids_and_grades_are_ascii_digits_only(item):
    cm = parse_cm(f'[cm]{{"rg": ["{item}"], "cu": ["١٦", "１６"]}}[/cm]')
    assert cm.grades == [] and cm.corroborate == [] and len(cm.problems) == 3


def test_a_runaway_stop_writes_at_most_the_cap_and_reports_the_rest(store, capsys, cairn_home, monkeypatch):
    monkeypatch.setenv("CAIRN_STOP_MAX_MEMORIES", "5")
    _prompt(capsys)
    before = len(memories.list_memories(Settings()))
    _stop("[cm]" + json.dumps({"m": [f"Distinct fact number {i} about the webshop" for i in range(500)]}) + "[/cm]")
    assert len(memories.list_memories(Settings())) == before + 5
    assert "495 more memories not written (CAIRN_STOP_MAX_MEMORIES=5)" in (cairn_home / "logs" / "hook.log").read_text()
