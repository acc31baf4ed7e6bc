"""`cairn grade`: rg grades land on that turn's deliveries, undelivered ids are rejected, cu / -! apply once."""

import orjson
import pytest

from cairn_cli.config import Settings
from cairn_cli.core.store import deliveries, memories
from tests.conftest import EXAMPLES

# storage-facing: every test here runs on SQLite and on PostgreSQL (tests/conftest.py `backend`)
pytestmark = pytest.mark.usefixtures("backend")


def _rank(cli, session="g1"):
    assert cli("memory", "import", EXAMPLES).exit_code == 0
    result = cli(
        "rank",
        "integration tests fail with connection refused on port 5433",
        "--scope",
        "webshop",
        "--session",
        session,
        "-k",
        "3",
        "--json",
    )
    assert result.exit_code == 0, result.output
    return [m["id"] for m in orjson.loads(result.stdout)["memories"]]


def test_grades_apply_to_the_latest_turn_and_reject_what_was_not_shown(cli):
    shown = _rank(cli)
    unshown = next(i for i in range(1, 19) if i not in shown)
    block = (
        f'Answer.\n[cm]{{"rg": ["{shown[0]}:3", "{shown[1]}:0!", "{unshown}:2", "{shown[2]}:9"], '
        f'"cu": [{shown[0]}], "-!": [{unshown}]}}[/cm]'
    )
    result = cli("grade", "--session", "g1", "--json", block)
    assert result.exit_code == 2, result.output  # applied, but some of the input was not
    assert "1 item(s) skipped and 1 grade(s) rejected; the rest was applied" in result.output
    report = orjson.loads(result.stdout)
    assert report["turn"] == 1
    assert [(a["memory_id"], a["grade"], a["hard_negative"]) for a in report["applied"]] == [
        (shown[0], 3, False),
        (shown[1], 0, True),
    ]
    assert (
        report["rejected"][0]["memory_id"] == unshown and "not delivered in turn 1" in report["rejected"][0]["reason"]
    )
    assert any("outside 0-3" in p for p in report["problems"])
    rows = {r.memory_id: r for r in deliveries.list_deliveries(Settings(), session_id="g1")}
    assert rows[shown[0]].grade == 3 and rows[shown[0]].hard_negative is False
    assert rows[shown[1]].grade == 0 and rows[shown[1]].hard_negative is True
    assert rows[shown[2]].grade is None
    s = Settings()
    assert memories.get_memory(shown[0], s).corroborations == 1
    assert memories.get_memory(unshown, s).contradictions == 1
    assert memories.get_memory(shown[0], s).confidence > 0.75 > memories.get_memory(unshown, s).confidence
    # re-applying the same block changes nothing
    graded_at = rows[shown[0]].graded_at
    again = orjson.loads(cli("grade", "--session", "g1", "--json", block).stdout)
    assert again["corroborated"] == [] and sorted(again["evidence_skipped"]) == sorted([shown[0], unshown])
    assert memories.get_memory(shown[0], s).corroborations == 1
    assert {r.memory_id: r for r in deliveries.list_deliveries(s, session_id="g1")}[shown[0]].graded_at == graded_at


def test_grade_bad_input_exits_2_or_1_with_one_line(cli):
    _rank(cli)
    no_block = cli("grade", "--session", "g1", "no block here")
    assert no_block.exit_code == 2 and "no [cm] block" in no_block.output
    unknown = cli("grade", "--session", "nope", '[cm]{"rg": ["1:3"]}')
    assert unknown.exit_code == 1 and "no deliveries" in unknown.output
    garbage = cli("grade", "--session", "g1", "--json", "[cm] {{{ garbage")
    assert garbage.exit_code == 2 and orjson.loads(garbage.stdout)["applied"] == []
    assert "[cm] block is not JSON" in orjson.loads(garbage.stdout)["problems"][0]
